"""An override file's ``peft`` section (Megatron-Bridge's ``ConfigContainer.peft``) read as the
fine-tuning job it asks for: LoRA (by its ``_target_``, or a section without one, the fine-tuning
recipes' default scheme) becomes ``finetune: lora`` with ``dim`` as the rank and
``target_modules`` as the targets, LoRA's own defaults for what is not set; ``null`` no PEFT;
DoRA, canonical LoRA and unknown classes are refused in one line."""

import pytest

from planner.inputs.errors import SpecError
from planner.launch.bridge import export as bx
from planner.launch.bridge.importer import read_bridge
from tests.test_megatron import CASES


def _overrides(peft: str) -> str:
    return bx.overrides_yaml(CASES["uneven_layout"]()) + peft


def test_lora_target_with_fields():
    text = _overrides(
        "peft:\n  _target_: megatron.bridge.peft.lora.LoRA\n  dim: 16\n  alpha: 32\n"
        "  target_modules: [linear_qkv, linear_proj]\n"
    )
    read = read_bridge(text, "o.yaml", 16)
    job = read.imported.job
    assert (job.finetune, job.lora_rank, job.lora_targets) == ("lora", 16, ("linear_qkv", "linear_proj"))
    assert not [u for u in read.unknown if u.startswith("peft")]


def test_section_without_target_is_the_recipes_lora_with_its_defaults():
    job = read_bridge(_overrides("peft:\n  dim: 8\n"), "o.yaml", 16).imported.job
    assert job.finetune == "lora" and job.lora_rank == 8
    assert job.lora_targets == ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def test_null_is_no_peft():
    plain = read_bridge(_overrides(""), "o.yaml", 16).imported.job
    assert read_bridge(_overrides("peft: null\n"), "o.yaml", 16).imported.job == plain
    assert plain.finetune == "full"


@pytest.mark.parametrize(
    "target, words",
    [
        ("megatron.bridge.peft.dora.DoRA", "DoRA"),
        ("megatron.bridge.peft.canonical_lora.CanonicalLoRA", "CanonicalLoRA"),
        ("my.adapters.Prefix", "my.adapters.Prefix"),
    ],
)
def test_other_schemes_are_refused_in_one_line(target, words):
    text = _overrides(f"peft:\n  _target_: {target}\n  dim: 8\n")
    with pytest.raises(SpecError) as err:
        read_bridge(text, "o.yaml", 16)
    message = str(err.value)
    assert words in message and "not priced" in message and "\n" not in message and "o.yaml: line " in message


def test_bad_values_name_the_key_and_line():
    lines = _overrides("").count("\n")
    with pytest.raises(SpecError, match=rf"o.yaml: line {lines + 2}: peft.dim: expected a positive integer"):
        read_bridge(_overrides("peft:\n  dim: -1\n"), "o.yaml", 16)
    with pytest.raises(SpecError, match="peft: expected a mapping"):
        read_bridge(_overrides("peft: lora\n"), "o.yaml", 16)
