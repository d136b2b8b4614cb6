"""Megatron-Bridge recipes in their shapes before v0.4.0 (issue 54): ``*_config(**user_kwargs)``
merging recommended keywords into the caller's and calling a common builder with defaults
(``{**a, **b}``, ``dict(a, **b)``, ``kwargs.update``, ``kwargs[KEY] = ...``, ``fn(**merged)``), and
the fine-tuning recipes' PEFT (``default_peft_config``, ``LoRA(...)``) mapped onto planner's
``--finetune lora``. The fixtures (tests/data/bridge_recipes/older/) are short recipes written for
these tests in those shapes; where the Megatron-Bridge mirror is present, its own v0.2.0 and v0.3.0
Llama 3 recipes are read from it too (not copied into the tree)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.bridge.peft import LORA_DEFAULTS
from planner.launch.bridge.recipe import read_recipe

DATA = Path(__file__).parent / "data" / "bridge_recipes" / "older"
PRETRAIN = DATA / "llama3_kwargs_pretrain.py"
PEFT = DATA / "llama3_peft.py"
MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")


def _read(path: Path, recipe: str, sets=(), world: int = 16):
    return read_recipe(path.read_text(), path.name, recipe, sets, world)


def _layout(read) -> tuple:
    c, job = read.imported.config, read.imported.job
    return (c.tp, c.pp, c.cp, c.sequence_parallel, job.global_batch_size, job.seq_length, job.precision)


def test_dict_merge_and_keyword_binding_with_defaults():
    """``{**recommended, **user_kwargs}`` then ``_common(**merged)``: the recommended keywords, the
    builder's defaults for the rest (global batch 512); the caller's keywords (``--set``) win."""
    read = _read(PRETRAIN, "llama3_8b_pretrain_config")
    assert _layout(read) == (2, 1, 2, False, 512, 8192, "bf16")
    assert read.imported.model.num_layers == 32 and read.unknown == ()
    read = _read(
        PRETRAIN, "llama3_8b_pretrain_config", ["tensor_model_parallel_size=4", "global_batch_size=64"]
    )
    assert _layout(read)[:5] == (4, 1, 2, False, 64)


def test_dict_builtin_update_subscript_get_and_setdefault():
    read = _read(PRETRAIN, "llama3_8b_dict_pretrain_config")
    assert _layout(read)[:5] == (1, 2, 1, False, 256)
    read = _read(PRETRAIN, "llama3_8b_dict_pretrain_config", ["tensor_model_parallel_size=2"])
    assert _layout(read)[:5] == (2, 2, 1, True, 256)  # merged.get(...) > 1: setdefault turns it on
    # the caller's keyword is kept over setdefault's
    read = _read(
        PRETRAIN,
        "llama3_8b_dict_pretrain_config",
        ["tensor_model_parallel_size=2", "sequence_parallel=false"],
    )
    assert _layout(read)[3] is False


def test_an_unknown_keyword_is_pythons_type_error_naming_it():
    with pytest.raises(
        SpecError,
        match=r"^llama3_kwargs_pretrain.py: line 71: _common\(\) got an unexpected keyword argument "
        r"'tensor_parallel_size' \(Python's TypeError\); its parameters: hf_path, tensor_model_parallel_size,",
    ):
        _read(PRETRAIN, "llama3_8b_misspelt_pretrain_config")
    with pytest.raises(SpecError, match=r"line 57: _common\(\) got an unexpected keyword argument 'tp'"):
        _read(PRETRAIN, "llama3_8b_pretrain_config", ["tp=2"])


def test_a_keyword_given_twice_is_an_error():
    text = PRETRAIN.read_text().replace(
        "return _common(**merged)", "return _common(seq_length=4096, **merged)", 1
    )
    with pytest.raises(
        SpecError,
        match=r"line 57: _common\(seq_length=4096, \*\*merged\): keyword argument 'seq_length' is given twice",
    ):
        read_recipe(text, "r.py", "llama3_8b_pretrain_config", (), 16)


def test_lora_recipe_maps_onto_finetune_lora():
    """``default_peft_config("lora")`` (LoRA's defaults: every linear layer) with ``dim = 8`` set
    after it: planner's LoRA job of rank 8 on the four layers."""
    job = _read(PEFT, "llama3_8b_finetune_config", world=8).imported.job
    assert (job.finetune, job.lora_rank, job.lora_targets) == (
        "lora",
        8,
        ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"),
    )
    assert (job.global_batch_size, job.seq_length) == (128, 2048)
    read = _read(PEFT, "llama3_8b_finetune_config", ["packed_sequence=true", "peft.dim=16"], world=8)
    assert (
        read.imported.job.lora_rank,
        read.imported.job.global_batch_size,
        read.imported.job.seq_length,
    ) == (16, 8, 4096)
    read = _read(PEFT, "llama3_8b_mlp_lora_config", world=8)
    assert (read.imported.job.lora_rank, read.imported.job.lora_targets) == (32, ("linear_fc1", "linear_fc2"))


def test_full_sft_is_a_full_finetune():
    read = _read(PEFT, "llama3_8b_finetune_config", ["peft=null"], world=8)
    assert (read.imported.config.tp, read.imported.job.finetune) == (2, "full")


@pytest.mark.parametrize(
    "recipe, sets, match",
    [
        ("llama3_8b_finetune_config", ["peft=dora"], r"line 51: peft: DoRA .*planner prices LoRA adapters"),
        (
            "llama3_8b_finetune_config",
            ["peft=qlora"],
            r"line 51: default_peft_config\(peft\): PEFT scheme 'qlora': .*raises ValueError; allowed: 'lora', 'dora', None",
        ),
        (
            "llama3_8b_pattern_lora_config",
            [],
            r"line 66: peft.target_modules \['\*.layers.0.\*.linear_qkv'\]: .*not module patterns",
        ),
    ],
)
def test_peft_planner_does_not_price_is_refused_naming_it(recipe, sets, match):
    with pytest.raises(SpecError, match=match):
        _read(PEFT, recipe, sets, world=8)


def test_check_cli_reads_an_older_lora_recipe(run_cli):
    result = run_cli("check", str(PEFT), "--recipe", "llama3_8b_finetune_config", "-c", "dgx-h100", "-n", "1")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.startswith("PASS") and "Traceback" not in result.stderr


def _show(tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(MIRROR), "show", f"{tag}:{path}"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge checkout")
@pytest.mark.parametrize("tag", ["v0.2.0", "v0.3.0"])
def test_bridges_own_older_llama3_recipes_read_as_they_set_the_layout(tag):
    """Megatron-Bridge's own src/megatron/bridge/recipes/llama/llama3.py at the tag, read from the
    mirror: the recommended keywords of each recipe (8B: tp 1 cp 2; 70B: tp 4 pp 4 vpp 5 cp 2 with
    sequence parallelism) over _llama3_common's defaults (global batch 512, 8192 tokens); the
    fine-tuning recipes' LoRA (8B: dim 8 at tp 1; 70B: dim 16 at tp 8) and full SFT (8B: tp 2)."""
    text = _show(tag, "src/megatron/bridge/recipes/llama/llama3.py")
    assert "combined_kwargs: Llama3CommonKwargs = {**recommended_kwargs, **user_kwargs}" in text
    read = read_recipe(text, "llama3.py", "llama3_8b_pretrain_config", (), 64)
    assert _layout(read) == (1, 1, 2, False, 512, 8192, "bf16")
    read = read_recipe(text, "llama3.py", "llama3_70b_pretrain_config", (), 64)
    assert _layout(read) == (4, 4, 2, True, 512, 8192, "bf16") and read.imported.config.vpp == 5
    job = read_recipe(text, "llama3.py", "llama3_8b_finetune_config", (), 8).imported.job
    assert (job.finetune, job.lora_rank, len(job.lora_targets)) == ("lora", 8, 4)
    read = read_recipe(text, "llama3.py", "llama3_70b_finetune_config", (), 64)
    assert (read.imported.config.tp, read.imported.job.lora_rank) == (8, 16)
    read = read_recipe(text, "llama3.py", "llama3_8b_finetune_config", ["peft=null"], 8)
    assert (read.imported.config.tp, read.imported.job.finetune) == (2, "full")


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge checkout")
def test_lora_defaults_and_helpers_are_bridges():
    """LORA_DEFAULTS is LoRA's dataclass; default_peft_config and the helpers read as v0.3.0 has them."""
    lora = _show("v0.3.0", "src/megatron/bridge/peft/lora.py")
    assert f"dim: int = {LORA_DEFAULTS['dim']}" in lora
    assert f"default_factory=lambda: {LORA_DEFAULTS['target_modules']!r}".replace("'", '"') in lora
    finetune = _show("v0.3.0", "src/megatron/bridge/recipes/utils/finetune_utils.py")
    assert 'if peft_scheme.lower() == "lora":\n            return LoRA(**kwargs)' in finetune
    assert "seq_length=seq_length," in finetune
    optimizer = _show("v0.3.0", "src/megatron/bridge/recipes/utils/optimizer_utils.py")
    assert "use_distributed_optimizer=True," in optimizer
