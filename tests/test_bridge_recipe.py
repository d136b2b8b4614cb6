"""Megatron-Bridge recipe import (issue 54, item 2): a recipe's Python read with ast, never run, to
the plan its ConfigContainer stands for. Fixtures are verbatim copies of Megatron-Bridge v0.6.0
recipes (tests/data/bridge_recipes/, each citing its path and commit)."""

from __future__ import annotations

import ast
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from planner.inputs.errors import SpecError
from planner.inputs.models import load_model
from planner.launch.bridge import export as bx
from planner.launch.bridge.importer import read_bridge
from planner.launch.bridge.recipe import read_recipe
from planner.launch.bridge.recipe_eval import PROVIDERS, SECTION_CLASSES, hf_presets
from tests.test_bridge_export import write_case
from tests.test_megatron import CASES

DATA = Path(__file__).parent / "data" / "bridge_recipes"
LLAMA = DATA / "llama3_h100.py"
QWEN = DATA / "qwen3_moe_h100.py"
MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")


def _read(path: Path, recipe: str, sets=(), world: int = 16):
    return read_recipe(path.read_text(), str(path), recipe, sets, world)


def _layout(read) -> tuple:
    c, job = read.imported.config, read.imported.job
    return (
        c.tp,
        c.pp,
        c.cp,
        c.ep,
        c.vpp,
        c.micro_batch_size,
        job.global_batch_size,
        job.seq_length,
        job.precision,
        c.recompute,
        c.sequence_parallel,
    )


def test_llama3_8b_recipe_reads_as_it_sets_the_layout():
    read = _read(LLAMA, "llama3_8b_pretrain_2gpu_h100_bf16_config")
    # cp 2, mbs 1, gbs 512, seq 8192, bf16_mixed (_pretrain_common), no recompute
    assert _layout(read) == (1, 1, 2, 1, 1, 1, 512, 8192, "bf16", "none", False)
    model = read.imported.model
    assert (model.num_layers, model.hidden_size, model.num_query_groups) == (32, 4096, 8)
    # NullTokenizer with DEFAULT_NULL_TOKENIZER_VOCAB_SIZE and use_tokenizer_vocab_size (_pretrain_common)
    assert model.vocab_size == 32000
    assert read.key_lines["model.context_parallel_size"] == 64


def test_llama3_8b_fp8_current_scaling_recipe_through_its_helper():
    read = _read(LLAMA, "llama3_8b_pretrain_2gpu_h100_fp8cs_config")
    assert _layout(read)[:8] == (1, 1, 2, 1, 1, 1, 768, 8192)
    assert (read.imported.job.precision, read.imported.job.fp8_recipe) == ("fp8", "tensorwise")


def test_qwen3_moe_recipe_needs_the_dispatcher_the_gpu_decides():
    with pytest.raises(SpecError) as err:
        _read(QWEN, "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config")
    msg = str(err.value)
    assert (
        "line 140: apply_flex_dispatcher_backend(cfg.model" in msg
        and "--set model.moe_token_dispatcher_type" in msg
    )
    assert "\n" not in msg
    read = _read(
        QWEN, "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", ["model.moe_token_dispatcher_type=alltoall"]
    )
    # tp 4 pp 2 ep 4 etp 1 with sequence parallelism, full uniform recompute of 1 layer;
    # mbs 2 and gbs 32 from _pretrain_common, seq 4096
    assert _layout(read) == (4, 2, 1, 4, 1, 2, 32, 4096, "bf16", "full", True)
    c = read.imported.config
    assert (c.expert_tp, c.recompute_num_layers, read.imported.job.moe_dispatcher) == (1, 1, "alltoall")
    assert read.imported.model.num_experts == 128


def test_qwen3_moe_recipe_built_on_another_recipe():
    read = _read(
        QWEN, "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", ["model.moe_token_dispatcher_type=alltoall"]
    )
    assert _layout(read) == (1, 1, 1, 16, 1, 1, 1024, 4096, "bf16", "none", False)
    assert "mixed_precision.grad_reduce_in_fp32" in read.unknown


def test_recipe_function_is_found_or_named():
    text = LLAMA.read_text()
    with pytest.raises(
        SpecError, match=r"no function 'nope' \(--recipe\); recipe functions: .*llama3_8b_pretrain_2gpu"
    ):
        read_recipe(text, "r.py", "nope")
    with pytest.raises(SpecError, match="4 \\*_config functions .*name the recipe with --recipe NAME"):
        read_recipe(text, "r.py")


RECIPE = """import os
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.models.llama import Llama3ModelProvider8B

def pretrain_config(tensor_parallelism: int = 2, seq_length: int = 4096) -> ConfigContainer:
    model = Llama3ModelProvider8B(tensor_model_parallel_size=tensor_parallelism, seq_length=seq_length)
    cfg = ConfigContainer(model=model, train=TrainingConfig(global_batch_size=64, micro_batch_size=1))
    cfg.model.pipeline_model_parallel_size = 2 * 2
    if tensor_parallelism > 4:
        cfg.model.sequence_parallel = True
    BRANCH
    cfg.mixed_precision = "bf16_with_fp8_delayed_scaling_mixed"
    return cfg
"""


def test_keyword_defaults_provider_class_and_parameters():
    text = RECIPE.replace("BRANCH", "pass")
    read = read_recipe(text, "r.py", world_size=16)
    assert _layout(read)[:9] == (2, 4, 1, 1, 1, 1, 64, 4096, "fp8")
    assert read.imported.model.num_layers == 32  # Llama3ModelProvider8B -> llama3-8b
    read = read_recipe(
        text, "r.py", sets=["tensor_parallelism=8", "train.global_batch_size=128"], world_size=64
    )
    assert (read.imported.config.tp, read.imported.config.sequence_parallel) == (8, True)
    assert read.imported.job.global_batch_size == 128
    with pytest.raises(
        SpecError,
        match="--set tp: not a parameter of pretrain_config; its parameters: seq_length, tensor_parallelism",
    ):
        read_recipe(text, "r.py", sets=["tp=8"])


def test_runtime_branch_is_an_error_naming_line_and_expression_until_set():
    text = RECIPE.replace(
        "BRANCH", 'if os.environ.get("TP"):\n        cfg.model.tensor_model_parallel_size = 8'
    )
    with pytest.raises(SpecError) as err:
        read_recipe(text, "r.py", world_size=16)
    assert str(err.value) == (
        'r.py: line 11: if os.environ.get("TP"): not statically evaluable, and planner reads '
        "model.tensor_model_parallel_size from it; give --set model.tensor_model_parallel_size=VALUE"
    )
    read = read_recipe(text, "r.py", sets=["model.tensor_model_parallel_size=4"], world_size=16)
    assert read.imported.config.tp == 4


def test_bad_override_key_names_the_key_and_the_allowed_sections():
    with pytest.raises(
        SpecError, match=r"--set modle.x: 'modle' is not a ConfigContainer section; allowed: .*train, model"
    ):
        read_recipe(RECIPE.replace("BRANCH", "pass"), "r.py", sets=["modle.x=1"])
    with pytest.raises(SpecError, match=r"--set 'a.b.c=1': expected section.field=VALUE"):
        read_recipe(RECIPE.replace("BRANCH", "pass"), "r.py", sets=["a.b.c=1"])


def test_precision_field_set_on_a_recipe_is_refused():
    text = (
        RECIPE.replace("BRANCH", "pass")
        .replace("    return cfg", '    cfg.mixed_precision.fp8 = "e4m3"\n    return cfg')
        .replace('"bf16_with_fp8_delayed_scaling_mixed"', "bf16_mixed()")
    )
    with pytest.raises(
        SpecError, match="line 13: mixed_precision.fp8: planner reads the precision from the recipe name"
    ):
        read_recipe(text, "r.py", world_size=16)


def _as_recipe(doc: dict) -> str:
    """An override document written as a recipe: each section built by its class, then every field
    set by assignment."""
    classes = {section: cls for cls, section in SECTION_CLASSES.items()}
    built = ", ".join(
        f"{s}={'GPTModelProvider' if s == 'model' else classes[s]}()" for s in doc if s != "mixed_precision"
    )
    body = [f"    cfg = ConfigContainer({built})"]
    for section, fields in doc.items():
        if section == "mixed_precision":
            body.append(f"    cfg.mixed_precision = {fields!r}")
            continue
        body += [f"    cfg.{section}.{k} = {v!r}" for k, v in fields.items() if k != "_target_"]
    head = "from megatron.bridge.training.config import ConfigContainer\n\ndef roundtrip_config():\n"
    return head + "\n".join(body) + "\n    return cfg\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_written_as_a_recipe_imports_to_the_same_plan(name, tmp_path):
    plan, _ = write_case(name, tmp_path)
    try:
        doc = bx.overrides(plan)
    except SpecError:
        return  # refused by the export (tests/test_bridge_export.py)
    world = plan.cluster.num_gpus
    from_yaml = read_bridge(yaml.safe_dump(doc), "o.yaml", world).imported
    from_recipe = read_recipe(_as_recipe(doc), "r.py", world_size=world).imported
    assert replace(from_recipe.model, name="m") == replace(from_yaml.model, name="m")
    assert (from_recipe.job, from_recipe.config) == (from_yaml.job, from_yaml.config)
    assert (from_recipe.config.tp, from_recipe.config.pp, from_recipe.config.vpp) == (
        plan.config.tp,
        plan.config.pp,
        plan.config.vpp,
    )
    assert from_recipe.job.global_batch_size == plan.job.global_batch_size


def test_hf_ids_of_the_fixtures_name_presets():
    assert hf_presets()["meta-llama/Meta-Llama-3-8B"] == "llama3-8b"
    assert hf_presets()["Qwen/Qwen3-30B-A3B"] == "qwen3-30b-a3b"


def _provider_defaults(text: str) -> dict:
    """Class name -> dataclass defaults (literal ones, bases in the same file first)."""
    tree = ast.parse(text)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def fields(name: str) -> dict:
        node = classes.get(name)
        if node is None:
            return {}
        out: dict = {}
        for base in node.bases:
            out.update(fields(getattr(base, "id", "")))
        for item in node.body:
            if (
                isinstance(item, ast.AnnAssign)
                and item.value is not None
                and isinstance(item.target, ast.Name)
            ):
                try:
                    out[item.target.id] = ast.literal_eval(item.value)
                except ValueError:
                    pass
        return out

    return {name: fields(name) for name in classes}


@pytest.mark.skipif(not MIRROR.is_dir(), reason="needs the Megatron-Bridge mirror")
def test_provider_table_matches_the_providers_dataclass_defaults():
    found = {}
    for path in (
        "src/megatron/bridge/models/llama/llama_provider.py",
        "src/megatron/bridge/models/qwen/qwen_provider.py",
    ):
        text = subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"v0.3.0:{path}"], capture_output=True, text=True, check=True
        ).stdout
        found.update(_provider_defaults(text))
    for cls, preset in PROVIDERS.items():
        m, d = load_model(preset), found[cls]
        assert (d["num_layers"], d["hidden_size"], d["num_attention_heads"]) == (
            m.num_layers,
            m.hidden_size,
            m.num_attention_heads,
        ), cls
        assert d.get("num_query_groups", m.num_query_groups) == m.num_query_groups, cls
        ffn = d.get("moe_ffn_hidden_size") if "num_moe_experts" in d else d.get("ffn_hidden_size")
        assert ffn in (m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size, None), cls


def test_check_cli_reads_a_recipe(run_cli):
    result = run_cli(
        "check",
        str(LLAMA),
        "--recipe",
        "llama3_8b_pretrain_2gpu_h100_bf16_config",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "2",
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"PASS {LLAMA}")
    result = run_cli(
        "check",
        str(QWEN),
        "--recipe",
        "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "1",
        "--set",
        "modle.x=1",
    )
    assert result.exit_code == 1
    assert (
        "'modle' is not a ConfigContainer section" in result.stdout
        and "Traceback" not in result.stdout + result.stderr
    )


def test_helper_of_the_file_is_evaluated_and_an_unknown_call_taints():
    text = RECIPE.replace("BRANCH", "_tune(cfg, 8)").replace(
        "def pretrain_config",
        "def _tune(c, pp):\n    c.model.pipeline_model_parallel_size = pp\n\n\ndef pretrain_config",
    )
    assert read_recipe(text, "r.py", world_size=16).imported.config.pp == 8
    text = RECIPE.replace("BRANCH", "customize(cfg)")
    with pytest.raises(
        SpecError, match=r"r.py: line 11: customize\(cfg\): not statically evaluable, and planner reads "
    ):
        read_recipe(text, "r.py", world_size=16)


def test_precision_field_set_on_the_base_recipes_name_is_seen():
    text = RECIPE.replace("BRANCH", "pass").replace(
        "    return cfg", "    cfg.mixed_precision.fp8_recipe = 'mxfp8'\n    return cfg"
    )
    with pytest.raises(SpecError, match="line 13: mixed_precision.fp8_recipe: planner reads the precision"):
        read_recipe(text, "r.py", world_size=16)
