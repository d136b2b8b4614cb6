"""GLM-4.5 (``glm4_moe``: GQA with Q/K/V biases, leading dense layers, a shared expert, MTP) read
from its Hugging Face config and as presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.model_yaml import model_to_mapping
from planner.inputs.models import load_model

AIR = Path(__file__).parent / "data" / "hf" / "glm-4.5-air" / "config.json"


def test_air_config_matches_the_preset():
    hf, preset = model_to_mapping(load_model(str(AIR))), model_to_mapping(load_model("glm-4.5-air"))
    hf.pop("name"), preset.pop("name")
    assert hf == preset


def test_air_by_hand():
    """Glm4MoeAttention: q/k/v projections with biases (attention_bias), o_proj without; layer 0 a
    dense MLP of 10944, layers 1-45 a router, 128 experts of 1408 and a shared expert of 1408."""
    h, q, kv = 4096, 96 * 128, 8 * 128
    attention = h * q + q + 2 * (h * kv + kv) + q * h
    dense = 3 * h * 10944
    moe = h * 128 + 128 * 3 * h * 1408 + 3 * h * 1408
    total = 46 * (attention + 2 * h) + dense + 45 * moe + 2 * 151552 * h + h
    m = load_model("glm-4.5-air")
    assert m.params_total == total
    assert m.mtp_params() == 3 * h + 2 * h * h + attention + 2 * h + moe  # the MTP layer is MoE, as the last


@pytest.mark.parametrize(
    ("preset", "total", "active"),
    # Megatron-Bridge docs/models/glm/glm45.md: "355B total parameters, 32B active per token", "106B total
    # parameters, 12B active per token" (active without the embedding and output layer)
    [("glm-4.5", 355e9, 32e9), ("glm-4.5-air", 106e9, 12e9)],
)
def test_totals_near_published(preset, total, active):
    m = load_model(preset)
    embedding_and_output = 2 * m.vocab_size * m.hidden_size
    assert abs(m.params_total / total - 1) < 0.01
    assert abs((m.params_active - embedding_and_output) / active - 1) < 0.02


def test_missing_experts_are_named(tmp_path):
    data = json.loads(AIR.read_text())
    del data["n_routed_experts"]
    path = tmp_path / "glm" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="n_routed_experts"):
        load_hf_config(path)
