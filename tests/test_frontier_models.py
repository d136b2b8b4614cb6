"""Frontier architectures (issue 12): MLA, layer patterns, local attention, sinks, MTP; presets
against their published parameter counts; HF config.json import; estimate and search on each."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.layers import (
    hardware_flop_per_iteration,
    layer_flop_per_token,
    layer_table,
    model_flop_per_iteration,
    model_flop_per_token,
    mtp_flop_per_token,
)
from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.layer_pattern import PatternError, parse_pattern, pattern_text
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args, refuse_unlaunchable
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from tests.conftest import DATA

B = 1e9

# (preset, published total, published active, active convention, source). "active" counts every
# parameter a token touches; gpt-oss's card (and DeepSeek's 37B) leave the input embedding (a
# lookup) out. Tolerance: 1%, or half a unit of the published figure's last digit when the
# publication rounds coarser than that (37B, 17B, 1T).
PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9, "no_input_embedding", 1e9),  # arXiv:2412.19437 Sec. 1 / 4.2
    ("kimi-k2", 1e12, 32e9, "no_input_embedding", 1e9),  # Kimi K2 model card: 1T total, 32B activated
    ("qwen3-235b-a22b", 235e9, 22e9, "all", 0),  # arXiv:2505.09388 Table 2
    ("llama4-maverick", 400e9, 17e9, "all", 1e9),  # Llama 4 model card
    ("gpt-oss-120b", 116.83e9, 5.13e9, "no_input_embedding", 0),  # arXiv:2508.10925 Table 1
    ("gpt-oss-20b", 20.91e9, 3.61e9, "no_input_embedding", 0),  # arXiv:2508.10925 Table 1
]


def _close(value: float, published: float, unit: float) -> bool:
    return abs(value - published) <= max(0.01 * published, unit / 2)


@pytest.mark.parametrize("name,total,active,convention,unit", PUBLISHED)
def test_presets_match_published_parameter_counts(name, total, active, convention, unit):
    m = load_model(name)
    got_active = m.params_active - (m.embedding_params() if convention == "no_input_embedding" else 0)
    assert _close(m.params_total, total, unit * (1000 if total >= 1e12 else 1)), m.params_total / B
    assert _close(got_active, active, unit), got_active / B


def test_exact_counts_where_published_to_four_digits():
    # gpt-oss model card Table 1 gives 116.83B / 5.13B and 20.91B / 3.61B.
    assert round(load_model("gpt-oss-120b").params_total / 1e7) == 11683
    assert round(load_model("gpt-oss-20b").params_total / 1e7) == 2091
    q = load_model("qwen3-235b-a22b")
    assert 0.99 < q.params_total / 235e9 < 1.01 and 0.99 < q.params_active / 22e9 < 1.01


def test_llama4_scout_text_decoder_below_the_published_multimodal_total():
    # 109B total in the model card includes the vision encoder; the text decoder is 107.8B.
    m = load_model("llama4-scout")
    assert 0 < 109e9 - m.params_total < 0.015 * 109e9
    assert _close(m.params_active, 17e9, 1e9)


def test_mla_parameters_by_hand():
    """DeepSeek-V3 attention, one layer (arXiv:2405.04434 eqs. 9-15 with V3's ranks)."""
    m = load_model("deepseek-v3")
    q = 7168 * 1536 + 1536 * 128 * (128 + 64)  # W^DQ, W^UQ + W^QR
    kv = 7168 * (512 + 64) + 512 * 128 * (128 + 128)  # W^DKV + W^KR, W^UK + W^UV
    out = 128 * 128 * 7168
    assert m.attention_params() == q + kv + out + 1536 + 512 == 187_107_328
    # q_lora_rank 0: queries straight from h
    direct = replace(m, q_lora_rank=0)
    assert direct.attention_params() == 7168 * 128 * 192 + kv + out + 512


def test_mla_tensor_parallel_sharding_as_megatron():
    """Up projections and output sharded over tp; down projections (duplicated) and norms replicated."""
    m = load_model("deepseek-v3")
    job = make_job(global_batch_size=8, seq_length=4096)
    cl = load_cluster("dgx-h100", nodes=1)
    c = ParallelConfig(tp=4, pp=1, dp=2, micro_batch_size=1, sequence_parallel=True)
    dense = layer_table(m, job, c, cl.groups[0]).dense
    sharded = (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168 + 3 * 7168 * 18432) / 4
    replicated = 7168 * (1536 + 512 + 64) + 1536 + 512 + 2 * 7168
    assert dense.params_sharded == pytest.approx(sharded)
    assert dense.params_replicated == pytest.approx(replicated)


def test_flops_per_token_match_megatron_formula():
    """DeepSeek-V3 at s = 4096: Megatron-Core 0.19.2 ``num_floating_point_operations`` (run on
    args of this model: 61 layers, pattern [0]*3+[1]*58, MLA, 1 MTP layer) gives
    259,992,950,784 FLOPs per token (forward + backward). Planner differs by its conventions only:
    non-causal attention products (Megatron halves them) and the router GEMM (Megatron omits it)."""
    m = load_model("deepseek-v3")
    s = 4096
    per_token = 3 * model_flop_per_token(m, s)
    router = 3 * 2 * 7168 * 256 * (58 + 1)  # 58 MoE layers + the (MoE) MTP layer
    core = 3 * 2 * s * 128 * (192 + 128) * (61 + 1)
    assert per_token - router - core / 2 == pytest.approx(259_992_950_784.0, rel=1e-12)
    assert model_flop_per_iteration(m, make_job(global_batch_size=2, seq_length=s)) == pytest.approx(
        per_token * 2 * s
    )


def test_layer_table_flops_sum_to_the_model_total():
    """Per-GPU model FLOPs of every layer kind, summed over tp ranks, equal the per-token formula."""
    cl = load_cluster("dgx-h100", nodes=1)
    for name in ("deepseek-v3", "gpt-oss-20b", "llama4-maverick"):
        m = load_model(name)
        s = 4096
        job = make_job(global_batch_size=8, seq_length=s)
        c = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=1, sequence_parallel=True)
        t = layer_table(m, job, c, cl.groups[0])
        layers = t.layers(m, 0, m.num_layers).model_flop * c.tp
        expected = 3 * s * sum(layer_flop_per_token(m, i, s) for i in range(m.num_layers))
        assert layers == pytest.approx(expected, rel=1e-9), name
        assert t.mtp.model_flop * c.tp == pytest.approx(3 * s * mtp_flop_per_token(m, s), rel=1e-9)


def test_sliding_and_chunked_spans_by_hand():
    m = load_model("gpt-oss-120b")
    s, w = 4096, 128
    pairs = s * w - w * (w - 1) / 2  # 516,160 (query, key) pairs kept by the window
    assert m.is_local_attention_layer(0) and not m.is_local_attention_layer(1)
    assert m.attention_span(0, s) == pytest.approx(s * pairs / (s * (s + 1) / 2))  # ~252 = ~2w
    assert m.attention_span(1, s) == s
    assert m.attention_span(0, 100) == 100  # shorter than the window: full
    scout = load_model("llama4-scout")
    assert [scout.is_local_attention_layer(i) for i in range(4)] == [True, True, True, False]
    assert scout.attention_span(0, 8192) == 8192  # one chunk = full causal
    two = 2 * 8192 * 8193 / 2
    assert scout.attention_span(0, 16384) == pytest.approx(16384 * two / (16384 * 16385 / 2))


def test_windowed_layers_cost_less_attention_and_memory_than_full():
    m = load_model("gpt-oss-20b")
    job = make_job(global_batch_size=8, seq_length=32768)
    cl = load_cluster("dgx-h100", nodes=1)
    c = ParallelConfig(tp=1, pp=1, dp=8, ep=8, micro_batch_size=1)
    t = layer_table(m, job, c, cl.groups[0])
    # Selective recompute is the core attention: the window's span (~2w = 256 keys) has 1/128 of the
    # full layer's FLOPs, run at the attention curve's lower efficiency for 256 keys per call
    # (cost_models.compute.attention_efficiency).
    from cost_models.compute import attention_efficiency

    gpu = cl.groups[0].gpu
    span = m.attention_span(0, 32768)
    slower = attention_efficiency(gpu, 32768) / attention_efficiency(gpu, span)
    ratio = t.moe.selective_recompute_s / t.moe_local.selective_recompute_s
    assert ratio == pytest.approx(32768 / span / slower, rel=1e-6)
    assert ratio > 20
    assert t.moe_local.model_flop < t.moe.model_flop
    assert t.layers(m, 0, 2).model_flop == pytest.approx(t.moe_local.model_flop + t.moe.model_flop)
    # selective recompute repeats the attention products: the windowed half adds almost nothing
    full = hardware_flop_per_iteration(replace(m, window_size=0, window_attn_skip_freq=0), job, "selective")
    assert hardware_flop_per_iteration(m, job, "selective") < full


def test_attention_sinks_and_leading_dense_layers():
    m = load_model("gpt-oss-20b")
    assert m.attention_params() - replace(m, softmax_type="vanilla").attention_params() == 64
    ds = load_model("deepseek-v3")
    assert [ds.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert ds.num_moe_layers == 58
    mav = load_model("llama4-maverick")
    assert [mav.is_moe_layer(i) for i in range(4)] == [False, True, False, True]


def test_mtp_is_on_the_last_stage_only():
    m = load_model("deepseek-v3")
    job = make_job(global_batch_size=8, seq_length=4096)
    cl = load_cluster("dgx-h100", nodes=1)
    c = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=1, sequence_parallel=True)
    t = layer_table(m, job, c, cl.groups[0])
    plain = layer_table(replace(m, mtp_num_layers=0), job, c, cl.groups[0])
    # the MTP module: eh_proj and a MoE layer, plus an embedding copy (pp > 1)
    assert t.output.params - plain.output.params == pytest.approx(t.mtp.params)
    assert t.mtp.params_sharded >= (2 * 7168 * 7168 + 129280 * 7168) / 2
    assert t.embedding == plain.embedding
    assert m.mtp_params() == 2 * 7168 * 7168 + 3 * 7168 + m.layer_params(60)


def test_layer_pattern_grammar():
    assert parse_pattern("([0]*3+[1]*58)") == (0,) * 3 + (1,) * 58
    assert parse_pattern("([1]*3+[0]*1)*3") == (1, 1, 1, 0) * 3
    assert parse_pattern("[1,0]*2") == (1, 0, 1, 0)
    for bad in ("([0]*3+", "[2]*3", "__import__('os')", "[0]*99999"):
        with pytest.raises(PatternError):
            parse_pattern(bad)
    for p in ((0,) * 3 + (1,) * 58, (0, 1) * 24, (1,), (0, 1, 1, 0, 1)):
        assert parse_pattern(pattern_text(p)) == p


def test_model_file_errors_name_the_fields():
    base = model_to_mapping(load_model("deepseek-v3"))
    with pytest.raises(SpecError, match="moe_layer_pattern has 4 entries but num_layers is 61"):
        model_from_mapping({**base, "moe_layer_pattern": [0, 1, 1, 1]}, "m.yaml")
    with pytest.raises(SpecError, match="key 'moe_layer_pattern'"):
        model_from_mapping({**base, "moe_layer_pattern": "([0]*3+"}, "m.yaml")
    with pytest.raises(SpecError, match="multi_latent_attention needs kv_lora_rank"):
        model_from_mapping({**base, "kv_lora_rank": 0}, "m.yaml")
    with pytest.raises(SpecError, match="allowed values: sliding, chunked"):
        model_from_mapping({**base, "window_type": "local"}, "m.yaml")


@pytest.mark.parametrize(
    "name", ["deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "llama4-scout", "llama4-maverick", "gpt-oss-120b"]
)
def test_plan_file_round_trip_keeps_every_field(name):
    m = load_model(name)
    assert model_from_mapping(json.loads(json.dumps(model_to_mapping(m))), "plan") == m


@pytest.mark.parametrize(
    "fixture,preset",
    [
        ("deepseek-v3", "deepseek-v3"),
        ("kimi-k2", "kimi-k2"),
        ("gpt-oss-120b", "gpt-oss-120b"),
        ("gpt-oss-20b", "gpt-oss-20b"),
        ("llama4-maverick", "llama4-maverick"),
    ],
)
def test_hf_config_import_equals_the_preset(fixture, preset):
    m = load_model(str(DATA / "hf" / fixture / "config.json"))
    assert replace(m, name=preset) == load_model(preset)


def test_hf_phi3_import():
    """microsoft/Phi-3-mini-4k-instruct: 3.8B (arXiv:2404.14219); sliding_window 2047 on every layer."""
    m = load_model(str(DATA / "hf" / "phi-3-mini-4k" / "config.json"))
    assert _close(m.params_total, 3.8e9, 0.1e9)
    assert m.window_size == 2047 and m.window_attn_skip_freq == 0 and m.is_local_attention_layer(31)


def test_hf_import_errors(tmp_path):
    p = tmp_path / "config.json"
    data = json.loads((DATA / "hf" / "gpt-oss-20b" / "config.json").read_text())
    data["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention"] + [
        "full_attention"
    ] * 21
    p.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="layer_types.*not periodic"):
        load_model(str(p))
    llama4 = json.loads((DATA / "hf" / "llama4-maverick" / "config.json").read_text())
    del llama4["text_config"]
    p.write_text(json.dumps(llama4))
    with pytest.raises(SpecError, match="text_config"):
        load_model(str(p))


CASES = [
    ("deepseek-v3", 32, dict(tp=2, pp=8, ep=16, layers_per_stage=(7, 8, 8, 8, 8, 8, 8, 6))),
    ("kimi-k2", 64, dict(tp=2, pp=16, ep=16, layers_per_stage=(3,) + (4,) * 14 + (2,))),
    ("qwen3-235b-a22b", 16, dict(tp=2, pp=8, ep=8, layers_per_stage=(11,) + (12,) * 6 + (11,))),
    ("llama4-scout", 8, dict(tp=2, pp=4, ep=8)),
    ("llama4-maverick", 16, dict(tp=4, pp=4, ep=16)),
    ("gpt-oss-20b", 1, dict(tp=1, pp=1, ep=8)),
    ("gpt-oss-120b", 4, dict(tp=1, pp=2, ep=16)),
]


@pytest.mark.parametrize("name,nodes,cfg", CASES)
def test_estimate_runs_and_fits_on_each_frontier_preset(name, nodes, cfg):
    m = load_model(name)
    cl = load_cluster("dgx-h100", nodes=nodes)
    job = make_job(global_batch_size=256, seq_length=4096)
    dp = cl.num_gpus // (cfg["tp"] * cfg["pp"])
    c = resolve(m, cl, job, ParallelConfig(dp=dp, micro_batch_size=1, recompute="full", **cfg))
    e = estimate(m, cl, job, c)
    assert e.fits, (name, e.peak_memory_bytes / 2**30)
    assert 0.05 < e.mfu < 0.7
    assert sum(v for _, v in e.time_breakdown()) == pytest.approx(e.step_time_s, rel=1e-9)


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2", "gpt-oss-120b"])
def test_megatron_export_flags(name):
    m = load_model(name)
    cl = load_cluster("dgx-h100", nodes=64)
    job = make_job(global_batch_size=256, seq_length=4096)
    c = resolve(m, cl, job, ParallelConfig(tp=2, pp=1, dp=256, ep=8, micro_batch_size=1, recompute="full"))
    args = dict(megatron_args(PlanInputs(model=m, cluster=cl, job=job, config=c, framework="megatron")))
    if m.multi_latent_attention:
        assert "--multi-latent-attention" in args and "--group-query-attention" not in args
        assert args["--q-lora-rank"] == "1536" and args["--kv-lora-rank"] == "512"
        assert (args["--qk-head-dim"], args["--qk-pos-emb-head-dim"], args["--v-head-dim"]) == (
            "128",
            "64",
            "128",
        )
        assert parse_pattern(args["--moe-layer-freq"]) == m.moe_layer_pattern
    if name == "deepseek-v3":
        assert args["--mtp-num-layers"] == "1"
    if name == "gpt-oss-120b":
        assert args["--window-size"] == "127,0" and args["--window-attn-skip-freq"] == "2"
        assert args["--softmax-type"] == "learnable"


def test_megatron_export_refuses_chunked_attention():
    m = load_model("llama4-scout")
    cl = load_cluster("dgx-h100", nodes=8)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = resolve(m, cl, job, ParallelConfig(tp=2, pp=1, dp=32, ep=8, micro_batch_size=1, recompute="full"))
    with pytest.raises(SpecError, match="no chunked attention"):
        refuse_unlaunchable(PlanInputs(model=m, cluster=cl, job=job, config=c, framework="megatron"))


@pytest.mark.parametrize(
    "name,nodes,extra",
    [
        ("deepseek-v3", 32, ["--tp", "2", "--pp", "8", "--ep", "16,32"]),
        ("gpt-oss-20b", 2, ["--tp", "1,2", "--pp", "1", "--ep", "8,16"]),
        # Megatron-LM has no chunked attention: Llama 4 is searched under --framework any.
        ("llama4-maverick", 32, ["--tp", "4", "--pp", "4", "--ep", "16", "--framework", "any"]),
    ],
)
def test_small_search_on_frontier_presets(run_cli, name, nodes, extra):
    r = run_cli(
        "search", "--model", name, "--cluster", "dgx-h100", "--nodes", str(nodes),
        "--global-batch-size", "256", "--seq-len", "4096", "--cp", "1", "--micro-batch-size", "1",
        "--vpp", "1", "--schedule", "1f1b", "--top", "1", "--json", *extra,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plans"][0]
    assert plan["fits"] and plan["tp"] * plan["pp"] * plan["dp"] == nodes * 8
    assert sum(plan["layers_per_stage"]) == load_model(name).num_layers
