"""MoE pricing terms (cost_models.moe): load imbalance and grouped-GEMM tile quantisation."""

import math

import pytest

from cost_models import moe


def test_no_imbalance_without_expert_parallelism():
    assert moe.max_load_factor(10_000, 1) == 1.0
    assert moe.routed_load_factor(10_000, 1, None) == 1.0


def test_max_load_follows_raab_steger():
    # m = 8192 copies in n = 8 bins: mean 1024, max ~ 1024 + sqrt(2 * 1024 * ln 8)
    f = moe.max_load_factor(8192, 8)
    assert f == pytest.approx((1024 + math.sqrt(2 * 1024 * math.log(8))) / 1024)
    # fewer tokens per bin -> larger relative imbalance; more bins -> larger
    assert moe.max_load_factor(1024, 8) > f
    assert moe.max_load_factor(8192 * 8, 64) > moe.max_load_factor(8192, 8)


def test_capacity_factor_caps_the_busiest_rank():
    dropless = moe.routed_load_factor(512, 32, None)
    assert dropless > 1.2
    assert moe.routed_load_factor(512, 32, 1.1) == pytest.approx(1.1)
    # a generous capacity factor does not add work beyond the dropless maximum
    assert moe.routed_load_factor(512, 32, 4.0) == pytest.approx(dropless)


def test_grouped_gemm_rows_pad_half_a_tile_and_at_least_one_tile():
    assert moe.grouped_gemm_rows(0) == 0.0
    assert moe.grouped_gemm_rows(10) == moe.GROUPED_GEMM_TILE_ROWS
    assert moe.grouped_gemm_rows(2048) == 2048 + moe.GROUPED_GEMM_TILE_ROWS / 2


def _moe_layer(capacity_factor):
    from dataclasses import replace

    from cost_models.layers import layer_table
    from cost_models.parallel import ParallelConfig, resolve
    from planner.loading import load_cluster, load_model, make_job

    m = replace(load_model("mixtral-8x7b"), moe_expert_capacity_factor=capacity_factor)
    cluster = load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=128, seq_length=1024)
    c = resolve(m, cluster, job, ParallelConfig(tp=1, pp=2, ep=8, micro_batch_size=1))
    return layer_table(m, job, c, cluster.groups[0]).moe


def test_dropless_busiest_rank_costs_more_than_a_capacity_factor_of_one():
    dropless, capped = _moe_layer(None), _moe_layer(1.0)
    # the busiest rank's extra copies cost expert GEMM time and dispatch bytes
    assert dropless.forward_s > capped.forward_s
    assert dropless.ep_comm_bytes > capped.ep_comm_bytes
    # mixtral: top-2 of 8 experts, 1024 tokens per GPU, ep 8: load = 1 + sqrt(2 ln 8 / 2048)
    ratio = moe.routed_load_factor(1024 * 2 * 8, 8, None)
    assert dropless.ep_comm_bytes / capped.ep_comm_bytes == pytest.approx(ratio)
