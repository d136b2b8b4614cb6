"""Megatron-Bridge's own validation of ``planner export megatron-bridge`` overrides.

For each override file given (or, with none, the export of every golden case of
tests/test_megatron.py and of the searched plans of :data:`SEARCHED`): load the recipe its
``# recipe: module:function`` header names, merge the file with ``process_config_with_overrides``
(megatron.bridge.training.utils.omegaconf_utils) and run ``runtime_config_update`` with
``WORLD_SIZE`` set to the plan's GPUs, as Megatron-Bridge's ``pretrain()`` does before it builds
anything (megatron/bridge/training/pretrain.py: the mixed-precision and communication-overlap
setup, then ``ConfigContainer.validate()``). A negative control (a golden case with tensor
parallelism 3, which divides neither its heads nor its GPUs) must be refused, or nothing is
judged.

Needs ``megatron-bridge`` (PyPI) importable, in an interpreter with megatron-core (Python >= 3.12;
docs/framework-validation.md, "Megatron-Bridge"); without it, one line and exit 2 (nothing judged).
Exit 0 when every file validates and the control is refused, 1 otherwise.

What a CPU-only machine cannot have, and what the script does about it (printed under ``assumed``):

* **Transformer Engine** does not build without CUDA. Megatron-Bridge's package imports
  ``megatron.bridge.peft.lora_layers``, which imports ``transformer_engine.pytorch`` unconditionally;
  that one module is replaced by empty classes (PEFT layers are never built by validation). With
  TE absent, megatron-core's ``TransformerConfig`` refuses ``apply_rope_fusion`` ("Please install TE
  >= 1.4"), which the Llama 3 recipes set: it is turned off before validation (a kernel fusion,
  no parallel layout rides on it). Nothing else is changed.
* **The Hugging Face hub** is not reachable. The Llama 3 recipes build their model provider from
  the hub's ``config.json`` (``AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-8B")``); the
  script serves those files from an offline cache it writes (:data:`HF_CONFIGS`), and the override
  file then sets every shape field planner prices.

    python scripts/validate_bridge_exports.py [OVERRIDES.yaml --world-size N ...]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

RECIPE = "# recipe: "
SNAPSHOT = "0" * 40

_LLAMA3_70B = json.loads((ROOT / "tests" / "data" / "hf" / "meta-llama-3-70b" / "config.json").read_text())
_LLAMA3_COMMON = {
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
HF_CONFIGS = {
    # tests/data/hf/meta-llama-3-70b (its README entry), with the fields Meta's config.json sets that
    # transformers' LlamaConfig defaults differently (rms_norm_eps 1e-5; bf16; the tokenizer's ids)
    "meta-llama/Meta-Llama-3-70B": {**_LLAMA3_70B, **_LLAMA3_COMMON},
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, hidden 4096, intermediate 14336, 32 heads,
    # 8 KV heads, the 70B's vocabulary, RoPE base and context (Llama 3 model card, "Model Architecture")
    "meta-llama/Meta-Llama-3-8B": {
        **_LLAMA3_70B,
        **_LLAMA3_COMMON,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
    },
    # meta-llama/Meta-Llama-3.1-405B config.json: 126 layers, hidden 16384, intermediate 53248, 128
    # heads, 8 KV heads, 131,072 positions with the llama3 RoPE scaling (Dubey et al. 2024, Table 3)
    "meta-llama/Meta-Llama-3.1-405B": {
        **_LLAMA3_70B,
        **_LLAMA3_COMMON,
        "hidden_size": 16384,
        "intermediate_size": 53248,
        "num_hidden_layers": 126,
        "num_attention_heads": 128,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
}
"""``config.json`` of the hub models the recipes name, served offline (see the module docstring)."""

SEARCHED = (
    ("llama3-8b", "dgx-h100", 1, 32, 4096, {}),
    ("llama3-8b", "dgx-h100", 2, 64, 4096, {"tp": (2,)}),
    ("llama3-8b", "dgx-h100", 2, 32, 16384, {"cp": (2,)}),
    ("llama3-70b", "dgx-h100", 8, 128, 4096, {}),
    ("llama3-70b", "dgx-h100", 8, 128, 4096, {"schedule": ("interleaved",), "pp": (4,)}),
    ("llama3-70b", "dgx-h100", 64, 1024, 8192, {}),
    ("llama3.1-405b", "dgx-h100", 16, 256, 4096, {"pp": (8,), "tp": (8,)}),
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, 4096, {"ep": (8,)}),
    ("mixtral-8x7b", "dgx-h100", 4, 64, 4096, {"ep": (8,)}),
    ("llama2-70b", "dgx-h100", 8, 128, 4096, {}),
    ("llama3-70b", "dgx-h100", 4, 64, 4096, {"recompute": ("full",)}),
    ("llama3-8b", "dgx-b200", 2, 64, 4096, {}),
)
"""Searched plans (model, nodes of the cluster template, global batch, sequence, restrictions):
the top plan of ``planner search --framework megatron`` for each, exported."""


def _stub_lora_layers() -> str | None:
    """Replace ``megatron.bridge.peft.lora_layers`` by empty classes when Transformer Engine is
    absent (see the module docstring); returns what was assumed, or None."""
    try:
        importlib.import_module("transformer_engine.pytorch")
        return None
    except ImportError:
        pass
    stub = types.ModuleType("megatron.bridge.peft.lora_layers")

    def missing(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (), {})
        setattr(stub, name, cls)
        return cls

    stub.__getattr__ = missing
    sys.modules[stub.__name__] = stub
    return "Transformer Engine absent: megatron.bridge.peft.lora_layers replaced by empty classes"


def _offline_hub(folder: Path) -> None:
    """Write :data:`HF_CONFIGS` as a Hugging Face hub cache under ``folder`` and point the hub there."""
    for repo, config in HF_CONFIGS.items():
        base = folder / "hub" / f"models--{repo.replace('/', '--')}"
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / "main").write_text(SNAPSHOT)
        snap = base / "snapshots" / SNAPSHOT
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text(json.dumps(config, indent=1))
    os.environ["HF_HOME"] = str(folder)
    os.environ["HF_HUB_OFFLINE"] = "1"


def _golden(folder: Path) -> list[tuple[Path, int]]:
    """The golden cases' exports, written under ``folder``, with their world sizes."""
    from planner.launch.bridge import export as bx
    from planner.plans.plan_file import plan_document, read_plan, write_plan
    from tests.test_megatron import CASES

    out = []
    for name, make in sorted(CASES.items()):
        plan = make()
        path = folder / f"{name}.plan.yaml"
        write_plan(path, plan_document(plan, {}, None))
        target = folder / f"{name}.overrides.yaml"
        target.write_text(bx.overrides_yaml(read_plan(str(path))))
        out.append((target, plan.cluster.num_gpus))
    return out


def _searched(folder: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """The exports of :data:`SEARCHED`'s top plans, and a line for each that has none."""
    from validate_exports import Case, plan_for

    from planner.inputs.errors import PlannerError
    from planner.launch.bridge import export as bx

    out, notes = [], []
    for i, (model, cluster, nodes, gbs, seq, restrict) in enumerate(SEARCHED):
        name = f"searched-{i:02d}-{model}-{cluster}-{nodes}n" + "".join(
            f"-{k}{v[0]}" for k, v in restrict.items()
        )
        inputs, why = plan_for(
            Case(name, model, nodes, gbs, seq, restrict=restrict, cluster=cluster), "megatron"
        )
        if inputs is None:
            notes.append(f"skip {name}: {why}")
            continue
        try:
            text = bx.overrides_yaml(inputs)
        except PlannerError as exc:
            notes.append(f"skip {name}: export refused: {exc}")
            continue
        target = folder / f"{name}.overrides.yaml"
        target.write_text(text)
        out.append((target, inputs.config.world_size))
    return out, notes


def _control(folder: Path, golden: list[tuple[Path, int]]) -> tuple[Path, int]:
    """A golden export made invalid: tensor parallelism 3."""
    path, world = golden[0]
    lines = path.read_text().splitlines()
    bad = [
        "  tensor_model_parallel_size: 3" if x.startswith("  tensor_model_parallel_size:") else x
        for x in lines
    ]
    target = folder / "control-tp3.overrides.yaml"
    target.write_text("\n".join(bad) + "\n")
    return target, world


def validate(path: Path, world_size: int, assumed: set[str]) -> str | None:
    """None when Megatron-Bridge accepts the file, else its error in one line."""
    from megatron.bridge.training.config import runtime_config_update
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    header = next((x for x in path.read_text().splitlines() if x.startswith(RECIPE)), None)
    if header is None:
        return f"no '{RECIPE.strip()} module:function' header"
    module, function = header[len(RECIPE) :].split(":")
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ.setdefault("RANK", "0")
    try:
        config = getattr(importlib.import_module(module), function)()
        config = process_config_with_overrides(config, config_filepath=str(path))
        te = importlib.util.find_spec("transformer_engine") is not None
        if not te and getattr(config.model, "apply_rope_fusion", False):
            config.model.apply_rope_fusion = False
            assumed.add("Transformer Engine absent: model.apply_rope_fusion turned off")
        runtime_config_update(config)
    except Exception as exc:  # noqa: BLE001 - whatever Bridge raises is the verdict
        return _one_line(exc)
    return None


def _one_line(exc: Exception) -> str:
    """The exception's type and first line; for a bare ``assert``, where it was raised."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not text:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        text = f"{frame.line} ({Path(frame.filename).name}:{frame.lineno})"
    return f"{type(exc).__name__}: {text}"


def _import_bridge(assumed: set[str]) -> str | None:
    """Import Megatron-Bridge's training package (with :func:`_stub_lora_layers` where Transformer
    Engine is absent); None, or the line saying why it cannot be imported."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.bridge") is None:
        return "megatron-bridge is not installed (pip install megatron-bridge): nothing validated"
    stub = _stub_lora_layers()
    if stub:
        assumed.add(stub)
    try:
        importlib.import_module("megatron.bridge.training.utils.omegaconf_utils")
    except ImportError as exc:
        return f"megatron-bridge does not import here ({exc}): nothing validated"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--world-size", type=int, default=None, help="GPUs of the files given")
    args = parser.parse_args()
    if args.files and args.world_size is None:
        parser.error("--world-size is needed with files")
    assumed: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # before anything imports huggingface_hub, which reads HF_HOME / HF_HUB_OFFLINE once
        _offline_hub(folder / "hf")
        why = _import_bridge(assumed)
        if why:
            print(why)
            return 2
        notes: list[str] = []
        control = None
        if args.files:
            todo = [(f, args.world_size) for f in args.files]
        else:
            golden = _golden(folder)
            searched, notes = _searched(folder)
            todo = golden + searched
            control = _control(folder, golden)
        failed = 0
        for path, world in todo:
            error = validate(path, world, assumed)
            failed += error is not None
            verdict = "ok  " if error is None else "FAIL"
            print(f"{verdict} {path.name} ({world} GPUs)" + (f": {error}" if error else ""), flush=True)
        for note in notes:
            print(note)
        refused = True
        if control is not None:
            error = validate(*control, assumed)
            refused = error is not None
            print(
                f"control {control[0].name}: "
                + (f"refused as it must be: {error}" if refused else "ACCEPTED")
            )
    for line in sorted(assumed):
        print(f"assumed: {line}")
    print(
        f"{len(todo) - failed} of {len(todo)} accepted by Megatron-Bridge's runtime_config_update / validate()"
    )
    return 1 if failed or not refused else 0


if __name__ == "__main__":
    sys.exit(main())
