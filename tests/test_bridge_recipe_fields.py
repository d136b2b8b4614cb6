"""A keyword a Megatron-Bridge section dataclass has no field for (issue 54, item 3): Python's
dataclass ``__init__`` raises ``TypeError`` on it, so ``planner check`` makes it an error naming the
line, the field, the section and the allowed names (closest first); a field assigned afterwards
(``cfg.train.x = v``), which Python accepts silently, stays a "not interpreted" warning. The table
(planner/launch/bridge/config_fields.py) is regenerated here from the Megatron-Bridge and
Megatron-LM mirrors when they are present."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.bridge.config_fields import SECTION_FIELDS
from planner.launch.bridge.recipe import read_recipe
from planner.launch.bridge.recipe_eval import SECTION_CLASSES

BRIDGE = (Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"), "v0.6.0")
MLM = (Path("/work/.mirror/NVIDIA+Megatron-LM/repo"), "cd4afffa648426a959dc7cb1e24b5ce7d0c3ff54")

RECIPE = """from megatron.bridge.models.llama import Llama3ModelProvider8B
from megatron.bridge.training.config import ConfigContainer, TrainingConfig, DistributedDataParallelConfig

def pretrain_config() -> ConfigContainer:
    model = Llama3ModelProvider8B(tensor_model_parallel_size=2, seq_length=4096)
    cfg = ConfigContainer(
        model=model,
        train=TrainingConfig(TRAIN),
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=True),
    )
    ASSIGN
    return cfg
"""


def _recipe(train: str, assign: str = "pass") -> str:
    return RECIPE.replace("TRAIN", train).replace("ASSIGN", assign)


def test_misspelt_keyword_is_the_dataclass_type_error():
    with pytest.raises(SpecError) as err:
        read_recipe(_recipe("global_batch_sise=64, micro_batch_size=1"), "r.py", world_size=16)
    message = str(err.value)
    assert message.startswith(
        "r.py: line 8: TrainingConfig(..., global_batch_sise=...): 'global_batch_sise' is not a field of "
        "TrainingConfig (the train section; its __init__ raises TypeError) (did you mean global_batch_size"
    )
    assert (
        "; allowed: check_optimizer_step_success, check_weight_hash_across_dp_replicas_interval," in message
    )
    assert "\n" not in message


def test_misspelt_ddp_keyword_names_its_section():
    text = _recipe("global_batch_size=64, micro_batch_size=1").replace(
        "use_distributed_optimizer=True", "use_distributed_optimiser=True"
    )
    with pytest.raises(
        SpecError,
        match=r"line 9: .*'use_distributed_optimiser' is not a field of "
        r"DistributedDataParallelConfig \(the ddp section.*did you mean use_distributed_optimizer",
    ):
        read_recipe(text, "r.py", world_size=16)


def test_misspelt_field_assigned_afterwards_stays_a_warning():
    """``cfg.train.global_batch_sise = 8`` adds an attribute Python never refuses (the dataclass
    has no ``__slots__``) and Bridge never reads: a "not interpreted" warning."""
    read = read_recipe(
        _recipe("global_batch_size=64, micro_batch_size=1", "cfg.train.global_batch_sise = 8"),
        "r.py",
        world_size=16,
    )
    assert read.imported.job.global_batch_size == 64 and "train.global_batch_sise" in read.unknown


def test_the_table_names_the_classes_the_evaluator_builds():
    for section, (cls, names) in SECTION_FIELDS.items():
        assert SECTION_CLASSES[cls] == section and len(set(names)) == len(names)


def _show(repo: tuple, path: str) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(repo[0]), "show", f"{repo[1]}:{path}"], capture_output=True, text=True
    )
    return proc.stdout if proc.returncode == 0 else None


def _module(module: str) -> tuple[tuple, str]:
    repo, base = (
        (BRIDGE, "src/" + module.replace(".", "/"))
        if module.startswith("megatron.bridge")
        else (
            MLM,
            module.replace(".", "/"),
        )
    )
    for path in (base + ".py", base + "/__init__.py"):
        if _show(repo, path) is not None:
            return repo, path
    raise LookupError(module)


def _class(repo: tuple, path: str, name: str):
    tree = ast.parse(_show(repo, path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return repo, path, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    module = node.module or ""
                    if node.level:  # a relative import inside a package
                        parts = path.split("/")[:-1]
                        parts = parts[parts.index("megatron") : len(parts) - node.level + 1]
                        module = ".".join(parts + ([node.module] if node.module else []))
                    return _class(*_module(module), alias.name)
    raise LookupError(f"{path}: {name}")


def _init_fields(repo: tuple, path: str, name: str) -> list[str]:
    """The keywords a dataclass's ``__init__`` takes: its bases' fields, then its own annotated
    fields, without ClassVars and ``field(init=False)`` ones."""
    repo, path, cls = _class(repo, path, name)
    out: list[str] = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in ("ABC", "Generic", "object"):
            out += [f for f in _init_fields(repo, path, base.id) if f not in out]
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        value = node.value
        if isinstance(value, ast.Call) and any(
            k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in value.keywords
        ):
            if node.target.id in out:
                out.remove(node.target.id)
            continue
        if node.target.id not in out:
            out.append(node.target.id)
    return out


FILES = {
    "TokenizerConfig": "src/megatron/bridge/training/tokenizers/config.py",
    "CommOverlapConfig": "src/megatron/bridge/training/comm_overlap.py",
}


@pytest.mark.skipif(
    not (BRIDGE[0].is_dir() and MLM[0].is_dir()), reason="no Megatron-Bridge / Megatron-LM mirror"
)
def test_table_is_regenerated_from_the_sources():
    for section, (cls, names) in SECTION_FIELDS.items():
        path = FILES.get(cls, "src/megatron/bridge/training/config.py")
        assert tuple(_init_fields(BRIDGE, path, cls)) == names, section
