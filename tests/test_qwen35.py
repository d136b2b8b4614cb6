"""Qwen3.5 / Qwen3.6 (2026): gated DeltaNet hybrids, dense and MoE, with MTP, read from their
Hugging Face configs (``qwen3_5`` / ``qwen3_5_moe`` with a ``text_config``, the flat ``*_text``
decoders and text-only checkpoints), as presets, and the shared expert's sigmoid gate
(``--moe-shared-expert-gate``) they and Qwen3-Next carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster

HF = Path(__file__).parent / "data" / "hf"
QWEN36_27B = HF / "qwen3.6-27b" / "config.json"
QWEN35_35B = HF / "qwen3.5-35b-a3b" / "config.json"


def _mapping(m) -> dict:
    out = model_to_mapping(m)
    out.pop("name")
    return out


@pytest.mark.parametrize(("config", "preset"), [(QWEN36_27B, "qwen3.6-27b"), (QWEN35_35B, "qwen3.5-35b-a3b")])
def test_config_matches_the_preset(config, preset):
    assert _mapping(load_model(str(config))) == _mapping(load_model(preset))


def test_qwen36_27b_by_the_checkpoint_tensor_shapes():
    """The published checkpoint's tensor shapes (tests/data/hf/README.md): per gated DeltaNet layer
    in_proj_qkv [10240, 5120], in_proj_z [6144, 5120], in_proj_a/b [48, 5120], out_proj [5120, 6144],
    conv1d 10240 x 4, dt_bias and A_log [48], norm [128]; per attention layer q_proj [12288, 5120]
    (query and gate), k/v_proj [1024, 5120], o_proj [5120, 6144], q/k norms [256]; every layer an MLP
    of 17408 and two norms; embedding and lm_head [248320, 5120]; the MTP module mtp.fc [5120, 10240],
    one attention + MLP layer and three norms."""
    h, v = 5120, 248320
    gdn = 10240 * h + 6144 * h + 2 * 48 * h + h * 6144 + 10240 * 4 + 48 + 48 + 128
    attention = 12288 * h + 2 * 1024 * h + h * 6144 + 2 * 256
    mlp_and_norms = 3 * 17408 * h + 2 * h
    total = 48 * gdn + 16 * attention + 64 * mlp_and_norms + 2 * v * h + h
    m = load_model("qwen3.6-27b")
    assert m.params_total == total == 26_895_998_464
    assert m.mtp_params() == 2 * h * h + attention + mlp_and_norms + 3 * h == 424_699_392
    assert (m.mtp_num_layers, m.linear_attention_freq, m.num_experts) == (1, 4, 0)


def test_qwen35_moe_by_hand_with_the_shared_expert_gate():
    """Qwen3.5-35B-A3B: 30 gated DeltaNet and 10 attention layers, every layer 256 experts of 512, a
    router, a shared expert of 512 and its h x 1 gate."""
    h, v = 2048, 248320
    gdn = (
        h * (16 * 128 * 2 + 32 * 128)
        + h * 32 * 128
        + 2 * h * 32
        + 32 * 128 * h
        + (16 * 128 * 2 + 32 * 128) * 4
    )
    gdn += 32 + 32 + 128
    attention = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    moe = h * 256 + 256 * 3 * h * 512 + 3 * h * 512 + h
    m = load_model("qwen3.5-35b-a3b")
    assert m.moe_shared_expert_gate
    assert m.params_total == 30 * gdn + 10 * attention + 40 * (moe + 2 * h) + 2 * v * h + h


@pytest.mark.parametrize(
    ("preset", "total", "active"),
    # Megatron-Bridge docs/models/qwen/qwen35-vl.md: "397B total parameters, 17B activated per token",
    # "35B total parameters, 3B activated per token"
    [("qwen3.5-397b-a17b", 397e9, 17e9), ("qwen3.5-35b-a3b", 35e9, 3e9)],
)
def test_moe_totals_near_published(preset, total, active):
    m = load_model(preset)
    assert abs(m.params_total / total - 1) < 0.02
    assert abs(m.params_active / active - 1) < 0.16  # "A3B": 3.45B active as priced, the name rounds down


def test_flat_text_only_config_reads_like_the_nested_one(tmp_path):
    """A text-only checkpoint (Qwen3_5MoeForCausalLM) writes the decoder's keys at the top, model_type
    qwen3_5_moe; the *_text model types name the decoder itself."""
    nested = json.loads(QWEN35_35B.read_text())
    for model_type in ("qwen3_5_moe", "qwen3_5_moe_text"):
        path = tmp_path / model_type / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**nested["text_config"], "model_type": model_type}))
        assert _mapping(load_hf_config(path)) == _mapping(load_hf_config(QWEN35_35B))


def test_the_wrapper_ties_embeddings_for_the_text_config(tmp_path):
    """Small Qwen3.5 models tie their embeddings; a text_config without the key takes the wrapper's."""
    data = json.loads(QWEN36_27B.read_text())
    data["tie_word_embeddings"] = True
    del data["text_config"]["tie_word_embeddings"]
    path = tmp_path / "tied" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    assert not load_hf_config(path).untie_embeddings_and_output_weights
    assert load_hf_config(QWEN36_27B).untie_embeddings_and_output_weights


def test_missing_text_config_is_named(tmp_path):
    path = tmp_path / "bad" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "qwen3_5_moe", "vision_config": {}}))
    with pytest.raises(SpecError, match="text_config"):
        load_hf_config(path)


def test_bad_layer_types_are_refused_by_key(tmp_path):
    data = json.loads(QWEN36_27B.read_text())
    data["text_config"]["layer_types"] = ["linear_attention"] * 63 + ["sliding_attention"]
    path = tmp_path / "bad" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="layer_types"):
        load_hf_config(path)


def _args_text(args) -> str:
    return "".join(f"{f}\n" if v is None else f"{f} {v}\n" for f, v in args)


def test_shared_expert_gate_round_trips_through_megatron_flags():
    """Exported as --moe-shared-expert-gate and read back (without it Megatron builds no gate and the
    Hugging Face checkpoint's shared_expert_gate has nowhere to go); a model file asking for a gate
    without shared experts is refused by key."""
    m = load_model("qwen3.5-35b-a3b")
    cluster = load_cluster("dgx-h100", 1)
    job = JobSpec(global_batch_size=64, seq_length=4096)
    inputs = PlanInputs(model=m, cluster=cluster, job=job, config=ParallelConfig(dp=8, ep=8))
    args = megatron_args(inputs)
    assert ("--moe-shared-expert-gate", None) in args
    back = parse_megatron(_args_text(args), "args.txt", world_size=8)
    assert back.model.moe_shared_expert_gate and back.model.params_total == m.params_total
    assert "--moe-shared-expert-gate" not in back.unknown
    without = parse_megatron(
        _args_text(a for a in args if a[0] != "--moe-shared-expert-gate"), "a", world_size=8
    )
    assert not without.model.moe_shared_expert_gate
    assert without.model.params_total == m.params_total - 40 * m.hidden_size
    bad = {**model_to_mapping(load_model("qwen3.6-27b")), "moe_shared_expert_gate": True}
    with pytest.raises(SpecError, match="moe_shared_expert_gate"):
        model_from_mapping(bad, "model.yaml")


def test_qwen2_moe_carries_the_gate_and_qwen3_moe_does_not(tmp_path):
    """transformers' Qwen2MoeSparseMoeBlock has a shared_expert_gate; Qwen3-MoE has no shared expert."""
    assert not load_model(str(HF / "qwen3-30b-a3b" / "config.json")).moe_shared_expert_gate
    data = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
    data.update(model_type="qwen2_moe", shared_expert_intermediate_size=5632)
    path = tmp_path / "qwen2-moe" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    m = load_hf_config(path)
    assert m.moe_shared_expert_gate and m.moe_shared_expert_intermediate_size == 5632
