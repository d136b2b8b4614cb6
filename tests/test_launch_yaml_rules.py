"""Megatron-LM's rules for a ``--yaml-cfg`` file (planner/launch/megatron/yaml_rules.py): every key
``parse_args``, ``validate_yaml`` and ``core_transformer_config_from_yaml`` read, every assert, the
merge of the sections, in Megatron's order; the first rule broken is one line naming the file, the
key and its line. Each case edits the complete fixture tests/data/megatron/yaml_cfg/configs/gpt_1p3b.yaml
(every TransformerConfig field) in one place.

Where a Megatron-LM git checkout is at MEGATRON_LM_GIT (default: the mirror this project was
written beside), ``test_megatron_stops_where_planner_says`` runs Megatron's own
megatron/training/yaml_arguments.py of core_r0.19.0 (torch stubbed: the code reads no tensor) on
each case and checks it stops at the point planner names, and ``test_fields_table_is_generated``
regenerates planner/launch/megatron/yaml_fields.py from it."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from planner.launch.check import check_file
from planner.launch.megatron import yaml_rules
from planner.launch.megatron.yaml_cfg import read_yaml_cfg
from planner.profiles.hardware import load_cluster

TREE = Path(__file__).parent / "data" / "megatron" / "yaml_cfg"
CONFIG = (TREE / "configs" / "gpt_1p3b.yaml").read_text()
GIT = Path(os.environ.get("MEGATRON_LM_GIT", "/work/.mirror/NVIDIA+Megatron-LM/repo"))
REV = "core_r0.19.0"
DUPLICATE = "  account_for_embedding_in_pipeline_split: false\n"
"""The section's copy of the one key no file can give as 0.19.2 needs it (yaml_rules.CONTRADICTORY)."""


def _edit(*pairs: tuple[str, str]) -> str:
    text = CONFIG
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


CASES = {
    "enable_msc missing": (
        _edit(("enable_msc: false\n", "")),
        "configs/cfg.yaml: enable_msc is missing (in the top level): Megatron-LM's parse_args reads args.enable_msc",
    ),
    "arguments from a checkpoint": (
        _edit(("use_checkpoint_args: false", "use_checkpoint_args: true")),
        "use_checkpoint_args: the arguments are then loaded from the checkpoint",
    ),
    "a model_parallel key missing": (
        _edit(("  fp16: false\n", "")),
        "model_parallel.fp16 is missing (in the model_parallel section): Megatron-LM's validate_yaml",
    ),
    "tp overlap without sequence parallelism": (
        _edit(
            ("  tp_comm_overlap: false", "  tp_comm_overlap: true"),
            ("  sequence_parallel: true", "  sequence_parallel: false"),
        ),
        "model_parallel.tp_comm_overlap: tensor-parallel communication overlap needs sequence_parallel",
    ),
    "no micro-batch size": (
        _edit(("micro_batch_size: 2", "micro_batch_size: null")),
        "micro_batch_size: it must be given (not null)",
    ),
    "a step schedule beside a global batch size": (
        _edit(("step_batch_size_schedule: null", "step_batch_size_schedule: 0:16 1B:128")),
        "step_batch_size_schedule: it cannot be given with global_batch_size",
    ),
    "virtual stages at pp 2": (
        _edit(("num_layers_per_virtual_pipeline_stage: null", "num_layers_per_virtual_pipeline_stage: 6")),
        "num_layers_per_virtual_pipeline_stage: the interleaved schedule needs pipeline_model_parallel_size > 2, got 2",
    ),
    "param gather without the distributed optimizer": (
        _edit(
            ("overlap_param_gather: false", "overlap_param_gather: true"),
            ("use_distributed_optimizer: true", "use_distributed_optimizer: false"),
        ),
        "overlap_param_gather: it is only supported with use_distributed_optimizer",
    ),
    "fp16 and bf16": (
        _edit(("  fp16: false", "  fp16: true")),
        "model_parallel.bf16: fp16 and bf16 exclude each other",
    ),
    "iterations and samples": (
        _edit(("train_samples: null", "train_samples: 1000000")),
        "train_samples: expected iteration-based training",
    ),
    "positions below the sequence": (
        _edit(("max_position_embeddings: 4096", "max_position_embeddings: 2048")),
        "max_position_embeddings: it must be an integer >= seq_length (4096), got 2048",
    ),
    "min_lr above lr": (
        _edit(("min_lr: 3.0e-05", "min_lr: 0.1")),
        "min_lr: it must be a number <= lr",
    ),
    "selective recompute with a method": (
        _edit(("  recompute_method: null", "  recompute_method: uniform")),
        "language_model.recompute_method: selective recompute takes no recompute_method",
    ),
    "MoE with tp and no sequence parallelism": (
        _edit(
            ("  num_moe_experts: null", "  num_moe_experts: 8"),
            ("  sequence_parallel: true", "  sequence_parallel: false"),
        ),
        "model_parallel.sequence_parallel: MoE with tensor parallelism needs sequence parallelism",
    ),
    "experts not a multiple of ep": (
        _edit(
            ("  num_moe_experts: null", "  num_moe_experts: 6"),
            ("  expert_model_parallel_size: 1", "  expert_model_parallel_size: 4"),
        ),
        "language_model.num_moe_experts: 6 experts are not a multiple of ep 4",
    ),
    "a top-level key in a section": (
        _edit(("micro_batch_size: 2\n", "micro_batch_size: 2\nsequence_parallel: true\n")),
        "model_parallel.sequence_parallel is also a top-level key; Megatron-LM's validate_yaml merges",
    ),
    "a key in both sections": (
        _edit(("  bias_swiglu_fusion: true", "  bias_swiglu_fusion: true\n  bf16: true")),
        "language_model.bf16 is also in model_parallel",
    ),
    "a date JSON cannot hold": (
        _edit(("data_path: null", "data_path: 2024-01-01")),
        "data_path is datetime.date(2024, 1, 1), which Megatron-LM's load_yaml cannot pass through json.dumps",
    ),
    "the release's own contradiction (both places)": (
        CONFIG,
        "language_model.account_for_embedding_in_pipeline_split is also a top-level key",
    ),
    "the release's own contradiction (top level only)": (
        _edit((DUPLICATE, "")),
        "TransformerConfig field account_for_embedding_in_pipeline_split is in neither language_model nor model_parallel",
    ),
    "the release's own contradiction (section only)": (
        _edit(("account_for_embedding_in_pipeline_split: false\nstep", "step")),
        "account_for_embedding_in_pipeline_split is missing (in the top level)",
    ),
}


def _read(tmp_path: Path, text: str, world: int | None = 8, env: dict | None = None):
    (tmp_path / "configs").mkdir(exist_ok=True)
    (tmp_path / "configs" / "cfg.yaml").write_text(text)
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if env is None else env
    return read_yaml_cfg("configs/cfg.yaml", 9, "train.sh", str(tmp_path), str(tmp_path), (), world, env)


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(needle))


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_stops_with_one_line_naming_the_key(tmp_path, case):
    text, expected = CASES[case]
    stop = _read(tmp_path, text).stop
    assert stop is not None and "\n" not in stop
    assert expected in stop, stop
    assert stop.startswith("configs/cfg.yaml") and "core_r0.19.0 @ f8837c04ef6c" in stop


def test_the_line_of_the_key_and_the_release_contradiction_are_named(tmp_path):
    stop = _read(tmp_path, CASES["fp16 and bf16"][0]).stop
    assert stop.startswith(f"configs/cfg.yaml: line {_line_of(CONFIG, 'bf16: true')}: model_parallel.bf16")
    for case in [c for c in CASES if "contradiction" in c]:
        assert "Megatron-LM at this release runs no --yaml-cfg file" in _read(tmp_path, CASES[case][0]).stop


def test_validate_yaml_lowers_the_parallel_sizes_to_the_world_size(tmp_path):
    cfg = _read(tmp_path, _edit(("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 16")), world=8)
    assert cfg.notes == (
        f"configs/cfg.yaml: line {_line_of(CONFIG, 'tensor_model_parallel_size')}: validate_yaml lowers "
        "tensor_model_parallel_size 16 to the world size 8",
        f"configs/cfg.yaml: line {_line_of(CONFIG, 'pipeline_model_parallel_size')}: validate_yaml lowers "
        "pipeline_model_parallel_size 2 to 1 (the world size over tp)",
    )
    words = [w for w, _ in cfg.words]
    assert words[words.index("--tensor-model-parallel-size") + 1] == "8"
    assert words[words.index("--pipeline-model-parallel-size") + 1] == "1"


def test_sequence_parallelism_needs_the_connections_variable(tmp_path):
    assert _read(tmp_path, CONFIG, env={}).stop.startswith(
        f"configs/cfg.yaml: line {_line_of(CONFIG, 'sequence_parallel')}: model_parallel.sequence_parallel needs "
        "the environment variable CUDA_DEVICE_MAX_CONNECTIONS=1"
    )
    assert "account_for_embedding" in _read(tmp_path, CONFIG, env=None).stop  # exported: passes that point


def test_after_the_contradiction_every_field_and_the_gpt_config_reads(tmp_path, monkeypatch):
    """The rules past the release's contradiction, as they would apply without it."""
    fields = dict(yaml_rules.TRANSFORMER_CONFIG)
    del fields["account_for_embedding_in_pipeline_split"]
    monkeypatch.setattr(yaml_rules, "TRANSFORMER_CONFIG", fields)
    text = _edit((DUPLICATE, ""))
    assert _read(tmp_path, text).stop is None
    stop = _read(tmp_path, text.replace("  mtp_num_layers: null\n", "")).stop
    assert (
        "TransformerConfig field mtp_num_layers is in neither" in stop
        and "Missing argument mtp_num_layers" in stop
    )
    stop = _read(tmp_path, text.replace("spec: null\n", "")).stop
    assert "spec is missing (in the top level): Megatron-LM's gpt_config_from_args reads args.spec" in stop
    stop = _read(tmp_path, text.replace("  bias_swiglu_fusion: true  #", "  #")).stop
    assert (
        "language_model.bias_swiglu_fusion is missing" in stop and "core_transformer_config_from_yaml" in stop
    )
    stop = _read(
        tmp_path, text.replace("  multi_latent_attention: false", "  multi_latent_attention: true")
    ).stop
    assert "MLATransformerConfig field q_lora_rank" in stop


def test_check_reports_the_stop_and_still_prices_the_file(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "gpt_1p3b.yaml").write_text(CONFIG)
    (tmp_path / "train.sh").write_text((TREE / "train.sh").read_text())
    verdict = check_file(str(tmp_path / "train.sh"), load_cluster("dgx-h100", 1))
    assert not verdict.passed
    errors = [f for f in verdict.findings if f.level == "error"]
    assert len(errors) == 1 and "runs no --yaml-cfg file" in errors[0].message
    assert errors[0].line == 8  # the command with --yaml-cfg
    assert any(f.message.startswith("predicted ") for f in verdict.findings)


# -- Megatron's own code ----------------------------------------------------------------------


def _git_show(path: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={GIT}", "show", f"{REV}:{path}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=GIT,
    ).stdout


needs_megatron = pytest.mark.skipif(not (GIT / "HEAD").exists(), reason="no Megatron-LM checkout")


def _megatron_yaml_arguments() -> dict:
    """yaml_arguments.py of the pinned release, executed with torch and megatron.core stubbed."""
    torch = types.ModuleType("torch")
    torch.float32, torch.float16, torch.bfloat16, torch.half = "f32", "f16", "bf16", "f16"
    torch.cuda = types.SimpleNamespace(get_device_capability=lambda: (9, 0))
    functional = types.ModuleType("torch.nn.functional")
    functional.silu = functional.gelu = functional.relu = abs
    torch.nn = types.SimpleNamespace(functional=functional, init=types.SimpleNamespace(xavier_uniform_=None))
    config = dataclasses.make_dataclass(
        "TransformerConfig", [(k, object, None) for k in yaml_rules.TRANSFORMER_CONFIG]
    )
    mla = dataclasses.make_dataclass(
        "MLATransformerConfig", [(k, object, None) for k in yaml_rules.MLA_CONFIG], bases=(config,)
    )
    stubs = {
        "torch": torch,
        "torch.nn": torch.nn,
        "torch.nn.functional": functional,
        "megatron": types.ModuleType("megatron"),
        "megatron.core": types.ModuleType("megatron.core"),
        "megatron.core.transformer": types.SimpleNamespace(
            TransformerConfig=config, MLATransformerConfig=mla
        ),
        "megatron.core.utils": types.SimpleNamespace(
            get_torch_version=lambda: "2.6", is_torch_min_version=lambda v: True
        ),
    }
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        namespace: dict = {}
        exec(
            compile(_git_show("megatron/training/yaml_arguments.py"), "yaml_arguments.py", "exec"), namespace
        )
        return namespace
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _megatron_run(code: dict, path: Path, world: int) -> Exception | None:
    """parse_args after load_yaml, parse_and_validate_args, then pretrain_gpt.py's model config."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = code["load_yaml"](str(path))
            args.rank, args.world_size = 0, world
            args.disable_msc_deprecated, args.enable_msc  # noqa: B018 (parse_args reads them)
            if args.use_checkpoint_args:
                return AssertionError("use_checkpoint_args")
            args = code["validate_yaml"](args, {"tokenizer_type": "GPT2BPETokenizer"})
            code["core_transformer_config_from_yaml"](args, "language_model")
    except Exception as exc:  # noqa: BLE001 (Megatron's own failure is the result)
        return exc
    return None


@needs_megatron
def test_megatron_stops_where_planner_says(tmp_path, monkeypatch):
    code = _megatron_yaml_arguments()
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    for case, (text, _) in sorted(CASES.items()):
        _read(tmp_path, text)
        path = tmp_path / "configs" / "cfg.yaml"
        doc = yaml.safe_load(text)
        checked = yaml_rules.check_yaml_args(doc, "cfg.yaml", {}, 8, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
        exc = _megatron_run(code, path, 8)
        assert exc is not None and checked.stop is not None, case
        name = checked.stop_key.rpartition(".")[2]
        if (
            "AttributeError" in checked.stop
            or "TypeError" in checked.stop
            or "Missing argument" in checked.stop
        ):
            assert name in str(exc), (case, exc)
        elif "json.dumps" in checked.stop:
            assert isinstance(exc, TypeError), (case, exc)
        else:
            assert isinstance(exc, (AssertionError, ValueError, RuntimeError)), (case, checked.stop, exc)


def _generated_fields() -> str:
    """planner/launch/megatron/yaml_fields.py as the generator writes it from the checkout."""

    def fields(path: str, cls: str) -> dict:
        for node in ast.parse(_git_show(path)).body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                return {
                    s.target.id: s.value
                    for s in node.body
                    if isinstance(s, ast.AnnAssign)
                    and not ast.unparse(s.annotation).startswith(("ClassVar", "InitVar"))
                }
        raise AssertionError(cls)

    parallel = fields("megatron/core/model_parallel_config.py", "ModelParallelConfig")
    config = fields("megatron/core/transformer/transformer_config.py", "TransformerConfig")
    mla = fields("megatron/core/transformer/transformer_config.py", "MLATransformerConfig")
    return " ".join(
        [
            *parallel,
            *(k for k in config if k not in parallel),
            "|",
            *(k for k in mla if k not in parallel and k not in config),
        ]
    )


@needs_megatron
def test_fields_table_is_generated_from_the_release():
    names = " ".join([*yaml_rules.TRANSFORMER_CONFIG, "|", *yaml_rules.MLA_CONFIG])
    assert names == _generated_fields()


def test_the_launch_scripts_environment_and_the_clusters_world_size_reach_the_rules(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "gpt_1p3b.yaml").write_text(
        _edit(("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 16"))
    )
    script = (TREE / "train.sh").read_text()
    (tmp_path / "train.sh").write_text(script)
    verdict = check_file(str(tmp_path / "train.sh"), load_cluster("dgx-h100", 1))
    notices = [f.message for f in verdict.findings if f.level == "notice"]
    assert any("validate_yaml lowers tensor_model_parallel_size 16 to the world size 8" in m for m in notices)
    (tmp_path / "train.sh").write_text(script.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", ""))
    (tmp_path / "configs" / "gpt_1p3b.yaml").write_text(CONFIG)
    verdict = check_file(str(tmp_path / "train.sh"), load_cluster("dgx-h100", 1))
    errors = [f.message for f in verdict.findings if f.level == "error"]
    assert len(errors) == 1 and "needs the environment variable CUDA_DEVICE_MAX_CONNECTIONS=1" in errors[0]
