"""Attention dropout (ModelSpec.attention_dropout): read from model files and Megatron launches,
written to Megatron exports when it is not Megatron's default, refused out of [0, 1), and priced
only where unfused attention materialises the scores (tests/test_unfused_attention.py)."""

from __future__ import annotations

import pytest

from planner.inputs.errors import SpecError
from planner.inputs.model_spec import ATTENTION_DROPOUT_DEFAULT
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import local_attention_args
from planner.launch.megatron.importer import parse_megatron

BASE = (
    "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --vocab-size 1000 "
    "--micro-batch-size 1 --global-batch-size 8 "
)


def _mapping(**extra):
    m = model_to_mapping(load_model("llama3-8b"))
    m.update(extra)
    return m


def test_model_files_read_it_and_write_it_only_when_set():
    assert ATTENTION_DROPOUT_DEFAULT == 0.1
    assert load_model("llama3-8b").attention_dropout == 0.1
    assert "attention_dropout" not in model_to_mapping(load_model("llama3-8b"))
    m = model_from_mapping(_mapping(attention_dropout=0), "m.yaml")
    assert m.attention_dropout == 0.0
    assert model_to_mapping(m)["attention_dropout"] == 0.0
    for bad in (1, 1.5, -0.1, "none", True):
        with pytest.raises(SpecError, match="attention_dropout"):
            model_from_mapping(_mapping(attention_dropout=bad), "m.yaml")


def test_megatron_launches_read_it_and_exports_write_it():
    assert parse_megatron(BASE, "a.txt", 8).model.attention_dropout == 0.1  # Megatron's default
    m = parse_megatron(BASE + "--attention-dropout 0.0", "a.txt", 8).model
    assert m.attention_dropout == 0.0
    assert ("--attention-dropout", "0") in local_attention_args(m)
    assert not any(f == "--attention-dropout" for f, _ in local_attention_args(load_model("llama3-8b")))
    for bad in ("--attention-dropout 1.0", "--attention-dropout x", "--attention-dropout -0.5"):
        with pytest.raises(SpecError, match=r"a\.txt: line .*--attention-dropout"):
            parse_megatron(BASE + bad, "a.txt", 8)
