"""Per-op selective recompute (torchtitan ``selective_ac_option = "op"``): the policy, its pricing
against torchtitan's own checkpointing measured on one H100, and where it is offered."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate, table_for
from cost_models.graph_units import unit_costs
from cost_models.layers import hardware_flop_per_iteration, model_flop_per_iteration
from cost_models.parallel import ParallelConfig
from cost_models.recompute import (
    layer_linears,
    op_sac_kept_bytes,
    op_sac_recomputed_flop_fraction,
    op_sac_saved,
)
from planner.frameworks import get_framework
from planner.inputs.errors import ConfigError
from planner.inputs.graph_model import load_graph_model
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

ROOT = Path(__file__).resolve().parent.parent


def _saved(name: str, moe: bool = False) -> dict[str, bool]:
    ops = layer_linears(load_model(name), moe)
    return {op.name: kept for op, kept in zip(ops, op_sac_saved(ops))}


def test_every_second_mm_is_recomputed_in_forward_order():
    # Attention.forward: wq, wk, wv, (sdpa), wo; FeedForward: w2(silu(w1(x)) * w3(x))
    assert _saved("llama3-8b") == {
        "wq": True,
        "wk": False,
        "wv": True,
        "wo": False,
        "w1": True,
        "w3": False,
        "w2": True,
    }


def test_moe_counts_router_and_shared_experts_not_grouped_gemms():
    model = load_model("qwen3-30b-a3b")
    saved = _saved("qwen3-30b-a3b", moe=True)
    assert saved["router"] is True  # 5th mm after wq, wk, wv, wo
    assert not any(v for k, v in saved.items() if k.startswith("experts."))
    frac = op_sac_recomputed_flop_fraction(model, True)
    experts = sum(op.flop for op in layer_linears(model, True) if not op.mm)
    total = sum(op.flop for op in layer_linears(model, True))
    assert experts / total < frac < 1.0


def test_recomputed_fraction_of_llama3_8b_gemms():
    m = load_model("llama3-8b")
    h, kv, f = 4096, 1024, 14336
    expected = (h * kv + h * h + h * f) / (2 * h * h + 2 * h * kv + 3 * h * f)
    assert op_sac_recomputed_flop_fraction(m, False) == pytest.approx(expected)


def test_kept_bytes_with_tensor_parallelism():
    m = load_model("llama3-8b")
    T, h, q, kv, f, heads = 8192, 4096, 4096, 1024, 14336, 32
    got = op_sac_kept_bytes(m, False, tokens=T, tp=4, sequence_parallel=True, ep=1, act_bytes=2)
    # input (sequence-sharded), wq and wv and w1 (column-parallel), w2's full-width partial sums,
    # two reduce-scatter outputs, the attention output and its fp32 log-sum-exp
    expected = 2 * T * (h / 4 + q / 4 + kv / 4 + f / 4 + h + 2 * h / 4 + q / 4) + 4 * T * heads / 4
    assert got == pytest.approx(expected)


def _measurement():
    spec = importlib.util.spec_from_file_location(
        "compare_recompute", ROOT / "scripts" / "compare_recompute.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import json

    return mod.compare(json.loads(mod.DEFAULT.read_text()), "h100-sxm5-80gb")


def test_kept_bytes_match_torchtitan_measured_on_h100():
    rows = _measurement()
    assert {r["width"] for r in rows} == {"llama3-8b", "llama2-13b", "llama3-70b"}
    for r in rows:
        for key in ("kept_bytes_op", "kept_bytes_full"):
            assert r[key]["predicted"] == pytest.approx(r[key]["measured"], rel=0.005), (r["width"], key)


def test_op_recompute_time_near_torchtitan_measured_on_h100():
    for r in _measurement():
        ratio = r["op_extra_s"]["predicted"] / r["op_extra_s"]["measured"]
        assert 0.75 < ratio < 1.33, (r["width"], ratio)
        # op sits between no recompute and full recompute, measured and predicted
        assert r["op_extra_s"]["measured"] < r["full_extra_s"]["measured"]
        assert r["op_extra_s"]["predicted"] < r["full_extra_s"]["predicted"]


def test_estimate_orders_time_memory_and_hardware_flops():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=16, seq_length=8192)
    est = {}
    for mode in ("none", "op", "full"):
        c = resolve(
            model, cluster, job, ParallelConfig(micro_batch_size=2, recompute=mode, optimizer_sharding="full")
        )
        est[mode] = estimate(model, cluster, job, c)
    assert est["none"].step_time_s < est["op"].step_time_s < est["full"].step_time_s
    peak = {k: v.peak_memory_bytes for k, v in est.items()}
    assert peak["full"] < peak["op"] < peak["none"]
    flop = {k: hardware_flop_per_iteration(model, job, k) for k in ("none", "op", "full")}
    assert flop["none"] == model_flop_per_iteration(model, job) < flop["op"] < flop["full"]
    layer = table_for(model, job, est["op"].config, cluster.groups[0]).dense
    assert layer.recompute_s("op") == layer.op_recompute_s and layer.recompute_s("none") == 0.0
    assert layer.recomputed_bytes("op") == layer.op_kept_bytes
    assert layer.recomputed_bytes("none") == layer.activation_bytes


def test_frameworks_offer_op_where_it_runs():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 2)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = resolve(model, cluster, job, ParallelConfig(tp=2, recompute="op", optimizer_sharding="full"))
    assert not [v for v in get_framework("torchtitan").violations(model, cluster, job, c) if "recompute" in v]
    reasons = get_framework("megatron").violations(model, cluster, job, c)
    assert any("has no 'op' recompute" in r for r in reasons)


def test_graph_models_refuse_op():
    g = load_graph_model("t5-11b")
    cluster = load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=8, seq_length=1024)
    with pytest.raises(ConfigError, match="allowed: none, selective, full"):
        unit_costs(g, job, ParallelConfig(recompute="op"), cluster.groups[0])
