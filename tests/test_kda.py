"""Kimi Linear imported (issue 56): Kimi Delta Attention (arXiv:2510.26692) and MLA layers, each with
an MLP or MoE, from its config.json; KDA priced from its mechanism (cost_models.delta_rule.kda_block,
kda_s); Megatron-LM refuses it with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cost_models.constraints import violations
from cost_models.delta_rule import gated_delta_s, kda_s
from cost_models.flops import layer_flop_per_token
from cost_models.parallel import ParallelConfig
from cost_models.stage_terms import table_for
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

KIMI = Path(__file__).parent / "data" / "hf" / "kimi-linear-48b-a3b" / "config.json"

# Kimi Linear technical report (arXiv:2510.26692, abstract) and the moonshotai/Kimi-Linear-48B-A3B
# model card: "48B total parameters and 3B activated parameters".
PUBLISHED_TOTAL, PUBLISHED_ACTIVE = 48e9, 3e9


def test_kimi_config_matches_the_preset():
    hf, preset = model_to_mapping(load_model(str(KIMI))), model_to_mapping(load_model("kimi-linear-48b-a3b"))
    hf.pop("name"), preset.pop("name")
    assert hf == preset


def test_kimi_totals_against_published():
    """Both published figures exclude the two 163840 x 2304 embedding tables: 48.37B (+0.8%) and
    2.73B activated, within the rounding of "3B" (with them: 49.12B and 3.48B)."""
    m = load_model(str(KIMI))
    embeddings = 2 * 163840 * 2304
    assert abs((m.params_total - embeddings) / PUBLISHED_TOTAL - 1) < 0.01
    assert 2.5e9 <= m.params_active - embeddings < 3.5e9
    assert (m.params_total, m.params_active) == (49_122_675_072, 3_484_453_248)


def test_kimi_layers_follow_its_1_based_lists():
    """vLLM's KimiLinearConfig.is_kda_layer: (layer_idx + 1) in kda_layers; layer 0 dense
    (first_k_dense_replace 1), the others MoE."""
    m = load_model(str(KIMI))
    parts = [m.layer_parts(i) for i in range(m.num_layers)]
    assert [i for i, (mixer, _) in enumerate(parts) if mixer == "attention"] == [3, 7, 11, 15, 19, 23, 26]
    assert {mixer for mixer, _ in parts} == {"kda", "attention"}
    assert [ffn for _, ffn in parts] == ["dense"] + ["moe"] * 26


def test_kda_params_by_hand():
    """vLLM KimiDeltaAttention: q/k/v h -> P, f_a/g_a h -> d, f_b/g_b d -> P, b_proj h -> H,
    dt_bias P, A_log H, three convolutions of 4 without bias, o_norm d, o_proj P -> h."""
    h, heads, d = 2304, 32, 128
    p = heads * d
    kda = 3 * h * p + 2 * (h * d + d * p) + h * heads + p + heads + 3 * p * 4 + d + p * h
    mla = h * 32 * 192 + h * (512 + 64) + 512 * 32 * (128 + 128) + 32 * 128 * h + 512
    m = load_model("kimi-linear-48b-a3b")
    assert m.kda_params() == kda == 39_514_272
    assert m.attention_params() == mla
    assert m.layer_params(0) == 2 * h + kda + 3 * h * 9216


def _kimi(tmp_path, **changes):
    data = json.loads(KIMI.read_text())
    linear = changes.pop("linear", None)
    if linear:
        data["linear_attn_config"].update(linear)
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "kimi" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"linear": {"full_attn_layers": [4, 8, 12, 16, 20, 24]}}, "must name each layer 1..27 once"),
        (
            {"linear": {"kda_layers": "all"}},
            "key 'linear_attn_config': expected kda_layers and full_attn_layers",
        ),
        (
            {"linear_attn_config": None},
            "key 'linear_attn_config': model_type 'kimi_linear' needs its mapping",
        ),
        ({"linear": {"use_full_rank_gate": True}}, "key 'use_full_rank_gate': true is not priced"),
        (
            {"hidden_act": "gelu"},
            "key 'hidden_act': 'gelu' is not read for Kimi Linear; allowed values: silu",
        ),
        ({"linear": {"num_heads": 0}}, "key 'num_heads'"),
        ({"num_nextn_predict_layers": 1}, "key 'num_nextn_predict_layers'"),
    ],
)
def test_kimi_errors_name_the_key(tmp_path, changes, message):
    path = _kimi(tmp_path, **changes)
    with pytest.raises(SpecError) as err:
        load_hf_config(path)
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))


def test_kimi_context_and_rope():
    """No context key in the published config: 1M tokens (the report); mla_use_nope false is RoPE."""
    m = load_model(str(KIMI))
    assert m.max_position_embeddings == 1_048_576 and m.position_embedding_type == "none"


def test_kda_round_trips_and_yaml_errors():
    m = load_model("kimi-linear-48b-a3b")
    assert model_from_mapping(model_to_mapping(m), "again.yaml") == m
    data = model_to_mapping(m)
    data["linear_value_head_dim"] = 64
    with pytest.raises(SpecError, match="linear_attention_type kda needs linear_num_value_heads"):
        model_from_mapping(data, "m.yaml")
    data = model_to_mapping(m) | {"linear_attention_freq": 4}
    with pytest.raises(SpecError, match="linear_attention_pattern and linear_attention_freq are both set"):
        model_from_mapping(data, "m.yaml")
    data = model_to_mapping(m) | {"linear_attention_pattern": "([1]*3+[0])*6"}
    with pytest.raises(SpecError, match="linear_attention_pattern has 24 entries but num_layers is 27"):
        model_from_mapping(data, "m.yaml")


def test_kda_flops():
    """Per token: the projections, the three convolutions and 4 H d^2 (gated DeltaNet's delta-rule
    count in Megatron's gdn_layer_flops), linear in the sequence; then the MLP."""
    m = load_model("kimi-linear-48b-a3b")
    h, heads, d = 2304, 32, 128
    p = heads * d
    mixer = 2 * (h * (3 * p + heads + 2 * d) + 2 * d * p + p * h + 4 * 3 * p + 4 * heads * d * d)
    assert layer_flop_per_token(m, 0, 4096) == mixer + 2 * h * 9216 * 3
    assert layer_flop_per_token(m, 0, 65536) == layer_flop_per_token(m, 0, 4096)


def test_kda_kernel_excess_over_gated_deltanet_grows_with_head_width():
    """The per-channel decay: the diagonal sub-chunks on the CUDA cores (16 d per token and head)
    and the fp32 decay read again by three kernels; the sub-chunk products below the diagonal take
    6/16 of gated DeltaNet's two intra-chunk GEMMs."""
    gpu = load_cluster("dgx-h100", 1).groups[0].gpu
    excess = []
    for d in (64, 128, 256):
        kda, gdn = kda_s(8192, 16, d, gpu, "bf16"), gated_delta_s(8192, 16, d, d, gpu, "bf16")
        assert kda[0] > gdn[0] and kda[1] > gdn[1]
        excess.append(kda[0] - gdn[0])
    assert excess[0] < excess[1] < excess[2]
    assert kda_s(16384, 16, 128, gpu, "bf16")[0] == pytest.approx(
        2 * kda_s(8192, 16, 128, gpu, "bf16")[0], rel=0.05
    )


def _problem(nodes=2):
    return (
        load_model("kimi-linear-48b-a3b"),
        load_cluster("dgx-h100", nodes),
        JobSpec(global_batch_size=64, seq_length=4096),
    )


def test_layer_table_prices_the_kda_layers():
    """One cost per (mixer, MLP) kind holding every decoder parameter (tp 1, ep 1); tp 2 halves the
    KDA mixer's sharded share (its low-rank f_a / g_a stay on every rank)."""
    m, cluster, job = _problem()
    node = cluster.groups[0]
    one = table_for(m, job, ParallelConfig(tp=1, pp=1, dp=16, ep=1, micro_batch_size=1), node)
    assert [k for k, _ in one.parts] == [("attention", "moe"), ("kda", "dense"), ("kda", "moe")]
    total = one.layers(m, 0, m.num_layers).params
    assert total == pytest.approx(sum(m.layer_params(i) for i in range(m.num_layers)), rel=1e-12)
    two = table_for(m, job, ParallelConfig(tp=2, pp=1, dp=8, ep=1, micro_batch_size=1), node)
    a, b = dict(one.parts)[("kda", "dense")], dict(two.parts)[("kda", "dense")]
    assert b.params_sharded == pytest.approx(a.params_sharded / 2)
    assert b.params_replicated == a.params_replicated
    assert b.forward_s < a.forward_s and b.activation_bytes < a.activation_bytes


def test_kda_heads_over_tp_and_cp():
    m, cluster, job = _problem(nodes=8)
    bad = ParallelConfig(tp=1, pp=1, dp=1, cp=64, ep=8, micro_batch_size=1)
    assert any(
        "linear_num_key_heads (32) is not divisible by tp x cp (64)" in v
        for v in violations(m, cluster, job, bad)
    )
    ok = ParallelConfig(tp=8, pp=1, dp=8, ep=8, micro_batch_size=1)
    assert not [v for v in violations(m, cluster, job, ok) if "linear_num" in v]


def test_megatron_has_no_kda_and_search_says_so(run_cli):
    m, cluster, job = _problem()
    c = ParallelConfig(tp=2, pp=1, dp=8, ep=8, micro_batch_size=1)
    assert any(
        "has no Kimi Delta Attention (KDA) layer" in v
        for v in get_framework("megatron").violations(m, cluster, job, c)
    )
    titan = get_framework("torchtitan").violations(m, cluster, job, c)
    assert any("Kimi Delta Attention (linear attention) layers" in v for v in titan)
    args = ("-m", "kimi-linear-48b-a3b", "-c", "dgx-h100", "-n", "2", "-b", "256", "-s", "4096")
    res = run_cli("search", *args)
    assert res.exit_code == 3 and "has no Kimi Delta Attention (KDA) layer" in res.stderr
    res = run_cli("search", *args, "--framework", "any", "--top", "1", "--json")
    assert res.exit_code == 0, res.stderr
    res = run_cli("estimate", "-m", "kimi-linear-48b-a3b", "-c", "dgx-h100", "-n", "2", "-b", "256", "-s", "4096",
                  "--tp", "2", "--ep", "8", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr


def test_export_refuses_a_kda_plan_in_one_line(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    args = ("-m", "kimi-linear-48b-a3b", "-c", "dgx-h100", "-n", "2", "-b", "256", "-s", "4096")
    assert (
        run_cli("search", *args, "--framework", "any", "--top", "1", "--out", str(plan), "-q").exit_code == 0
    )
    res = run_cli("export", "megatron", str(plan), "--out", str(tmp_path / "launch"), "-q")
    assert res.exit_code == 1 and res.stdout == "" and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no Kimi Delta Attention (KDA) layer" in lines[0]
    assert not (tmp_path / "launch").exists()
