"""Hybrid Mamba-2 / gated DeltaNet models (issue 56): import, parameter counts, validation, the
layer table and the frameworks' space (their Megatron export: tests/test_hybrid_export.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cost_models.constraints import violations
from cost_models.delta_rule import gated_delta_s
from cost_models.flops import layer_flop_per_token
from cost_models.parallel import ParallelConfig
from cost_models.ssm import ssd_scan_s
from cost_models.stage_terms import table_for
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

HF = Path(__file__).parent / "data" / "hf"

# Published totals (rounded to 1B by their publishers): Nemotron-H model cards ("This model has 47B /
# 56B model parameters"; the 8B card and arXiv:2504.03624 "8B"), Qwen3-Next model card ("80B in total
# and 3B activated").
PUBLISHED = {"nemotron-h-47b": 47e9, "nemotron-h-56b": 56e9, "qwen3-next-80b-a3b": 80e9}


@pytest.mark.parametrize("name", ["nemotron-h-8b", "nemotron-h-47b", "nemotron-h-56b", "qwen3-next-80b-a3b"])
def test_hf_config_matches_preset(name):
    hf, preset = load_model(str(HF / name)), load_model(name)
    a, b = model_to_mapping(hf), model_to_mapping(preset)
    a.pop("name"), b.pop("name")
    assert a == b


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_totals_within_one_percent_of_published(name):
    m = load_model(str(HF / name))
    assert abs(m.params_total / PUBLISHED[name] - 1) < 0.01


def test_nemotron_h_8b_by_hand():
    """24 Mamba-2 layers, 24 MLP layers, 4 attention layers, embedding and untied output (h 4096)."""
    h = 4096
    mamba = h * (2 * 8192 + 2 * 8 * 128 + 128) + 10240 * 5 + 3 * 128 + 8192 + 8192 * h + h
    mlp = 2 * h * 21504 + h
    attention = h * (4096 + 2 * 1024) + 4096 * h + h
    total = 24 * mamba + 24 * mlp + 4 * attention + 2 * 131072 * h + h
    m = load_model("nemotron-h-8b")
    assert m.params_total == total
    assert round(total / 1e9) == 8  # the published "8B"


def test_qwen3_next_active_by_hand():
    """Per layer: 10 routed experts + the shared one and its h x 1 gate + the router; 36 gated DeltaNet, 12 gated
    attention layers; embedding and output. The model card's "3B activated" is rounded (3.87B
    here, 3.25B without the embedding and output)."""
    h = 2048
    expert = 3 * h * 512
    moe_active = 10 * expert + expert + h + h * 512
    gdn = h * (2 * 2048 + 2 * 4096 + 64) + 8192 * 4 + 64 + 128 + 4096 * h
    attention = h * (2 * 4096 + 2 * 512) + 4096 * h + 2 * 256
    active = 48 * (moe_active + 2 * h) + 36 * gdn + 12 * attention + 2 * 151936 * h + h
    m = load_model("qwen3-next-80b-a3b")
    assert m.params_active == active
    assert round((active - 2 * 151936 * h) / 1e9) == 3


def _base(**extra):
    data = {
        "schema_version": 1,
        "kind": "model",
        "name": "tiny-hybrid",
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
        "hybrid_layer_pattern": "M-*-",
        "mamba_state_dim": 16,
        "mamba_head_dim": 32,
        "mamba_num_heads": 16,
        "mamba_num_groups": 2,
    }
    data.update(extra)
    return data


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"hybrid_layer_pattern": "M-X-"}, "symbol 'X' is not allowed; allowed values: M (Mamba-2)"),
        ({"num_layers": 5}, "hybrid_layer_pattern has 4 layers but num_layers is 5"),
        ({"mamba_num_groups": 0}, "mamba_state_dim, mamba_head_dim, mamba_num_heads and mamba_num_groups"),
        ({"mamba_num_groups": 3}, "mamba_num_heads (16) must be divisible by mamba_num_groups (3)"),
        ({"hybrid_layer_pattern": "ME*-"}, "has E (MoE) layers but num_experts is 0"),
        (
            {"hybrid_override_pattern": "M-*-"},
            "'hybrid_layer_pattern' and 'hybrid_override_pattern' are both set",
        ),
        ({"linear_num_key_heads": 4}, "linear_* fields are set but no layer is gated DeltaNet"),
    ],
)
def test_yaml_errors_name_the_key(extra, message):
    with pytest.raises(SpecError) as err:
        model_from_mapping(_base(**extra), "m.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("m.yaml")


def test_deprecated_pattern_key_is_read():
    data = _base()
    data["hybrid_override_pattern"] = data.pop("hybrid_layer_pattern")
    assert model_from_mapping(data, "m.yaml").hybrid_layer_pattern == "M-*-"


def _problem(model, nodes=1, seq=4096):
    cluster = load_cluster("dgx-h100", nodes)
    job = JobSpec(global_batch_size=64, seq_length=seq)
    return model, cluster, job


def test_layer_table_prices_each_pattern_layer():
    """The table holds one cost per (mixer, MLP) kind, and summing it over the layers gives every
    decoder parameter (tp 1)."""
    m, cluster, job = _problem(load_model("nemotron-h-8b"))
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1)
    t = table_for(m, job, c, cluster.groups[0])
    assert [k for k, _ in t.parts] == [("", "dense"), ("attention", ""), ("mamba", "")]
    total = t.layers(m, 0, m.num_layers).params
    assert total == pytest.approx(sum(m.layer_params(i) for i in range(m.num_layers)), rel=1e-12)
    assert t.decoder(m, 0) is dict(t.parts)[("mamba", "")]


def test_scans_are_linear_in_the_sequence():
    """SSD and the gated delta rule do the same FLOPs per token at 4K and 32K tokens (chunked scans),
    in at most the same time per token, while softmax attention's FLOPs per token grow."""
    gpu = load_cluster("dgx-h100", 1).groups[0].gpu
    for fn, args in ((ssd_scan_s, (64, 4, 64, 128, 128)), (gated_delta_s, (32, 128, 128))):
        short = fn(4096, *args, gpu, "bf16")
        long = fn(32768, *args, gpu, "bf16")
        assert long[2] == pytest.approx(8 * short[2])
        # linear in tokens: per token no dearer at 32K (larger calls run nearer the GEMM peak)
        assert 4 * short[0] <= long[0] <= 8 * short[0] * (1 + 1e-9)
        assert long[1] > long[0]
    m = load_model("nemotron-h-8b")
    attention = m.hybrid_layer_pattern.index("*")
    assert layer_flop_per_token(m, attention, 32768) > layer_flop_per_token(m, attention, 4096)
    assert layer_flop_per_token(m, 0, 32768) == layer_flop_per_token(m, 0, 4096)


def test_mamba_flops_follow_megatron():
    """Megatron's mamba_layer_flops and gdn_layer_flops (training.py, megatron-core 0.19.2), per token."""
    m = load_model("nemotron-h-8b")
    h, di = 4096, 8192
    assert (
        layer_flop_per_token(m, 0, 8192) == 2 * h * (2 * di + 2 * 8 * 128 + 128) + 7 * di * 128 + 2 * di * h
    )
    q = load_model("qwen3-next-80b-a3b")
    k, v = 16 * 128, 32 * 128
    gdn = 2 * (2048 * (2 * k + 2 * v + 64) + 4 * (2 * k + v) + 32 * 128 * 128 * 4 + 2048 * v)
    moe = 2 * 2048 * 512 + 10 * 2 * 2048 * 512 * 3 + 2 * 2048 * 512 * 3
    assert layer_flop_per_token(q, 0, 4096) == gdn + moe


def test_mixer_heads_over_tp_and_cp():
    m, cluster, job = _problem(load_model("nemotron-h-8b"), nodes=2)
    bad_tp = ParallelConfig(tp=16, pp=1, dp=1, micro_batch_size=1)
    assert any(
        "mamba_num_groups (8) must be divisible by tp (16)" in v for v in violations(m, cluster, job, bad_tp)
    )
    ok_cp = ParallelConfig(tp=2, pp=1, dp=2, cp=4, micro_batch_size=1)
    assert not [v for v in violations(m, cluster, job, ok_cp) if "mamba" in v]
    q, cluster, job = _problem(load_model("qwen3-next-80b-a3b"), nodes=4)
    bad = ParallelConfig(tp=8, pp=1, dp=1, cp=4, micro_batch_size=1, ep=1)
    assert any(
        "linear_num_key_heads (16) is not divisible by tp x cp (32)" in v
        for v in violations(q, cluster, job, bad)
    )


@pytest.mark.parametrize("name", ["nemotron-h-8b", "qwen3-next-80b-a3b"])
def test_megatron_runs_them_and_torchtitan_says_why_not(name):
    """Megatron-LM's export writes pretrain_hybrid.py / gated_delta_net launches
    (tests/test_hybrid_export.py); torchtitan has no such model."""
    m, cluster, job = _problem(load_model(name), nodes=4)
    c = ParallelConfig(tp=2, pp=1, dp=16, micro_batch_size=1, ep=1)
    assert get_framework("megatron").violations(m, cluster, job, c) == []
    titan = get_framework("torchtitan").violations(m, cluster, job, c)
    assert any("gated DeltaNet" in v or "hybrid layer pattern" in v for v in titan)


def test_nemotron_3_nano_by_hand_and_published():
    """23 Mamba-2 layers (64 heads of 64, 8 groups, state 128), 23 MoE layers (128 squared-ReLU experts
    of 1856, top 6, one shared expert of 3712, the router), 6 attention layers (32 heads of 128, 2 KV
    heads), untied 131072-token tables (h 2688). NVIDIA's figures: 31.6B total, about 3.6B active with
    the embeddings (Replicate's nvidia/nemotron-3-nano-30b-a3b readme); Megatron-Bridge's
    docs/models/nemotron/nemotron3-nano.md rounds them to "30B" and "3.5B"."""
    h, vocab = 2688, 131072
    mamba = h * (2 * 4096 + 2 * 8 * 128 + 64) + 6144 * 5 + 3 * 64 + 4096 + 4096 * h + h
    expert, shared, router = 2 * h * 1856, 2 * h * 3712, h * 128
    attention = h * (4096 + 2 * 2 * 128) + 4096 * h + h
    rest = 23 * mamba + 6 * attention + 2 * vocab * h + h
    m = load_model("nemotron3-nano-30b-a3b")
    assert m.params_total == rest + 23 * (128 * expert + shared + router + h)
    assert m.params_active == rest + 23 * (6 * expert + shared + router + h)
    assert abs(m.params_total / 31.6e9 - 1) < 0.01  # 31.58B
    assert abs(m.params_active / 3.6e9 - 1) < 0.01  # 3.58B
