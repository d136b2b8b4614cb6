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


def _moe_layer(capacity_factor, seq_length=2048):
    from dataclasses import replace

    from cost_models.constraints import resolve
    from cost_models.layers import layer_table
    from cost_models.parallel import ParallelConfig
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m = replace(load_model("mixtral-8x7b"), moe_expert_capacity_factor=capacity_factor)
    cluster = load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=128, seq_length=seq_length)
    c = resolve(m, cluster, job, ParallelConfig(tp=1, pp=2, ep=8, micro_batch_size=1))
    return layer_table(m, job, c, cluster.groups[0]).moe


def test_dropless_busiest_rank_costs_more_than_a_capacity_factor_of_one():
    # 2,048 tokens per GPU: at 1,024 the layer is bound by the host issuing its kernels
    # (cost_models.layers._host_bound_s), which hides the GEMM time either way
    dropless, capped = _moe_layer(None), _moe_layer(1.0)
    # the busiest rank's extra copies cost expert GEMM time and dispatch bytes
    assert dropless.forward_s > capped.forward_s
    assert dropless.ep_comm_bytes > capped.ep_comm_bytes
    # mixtral: top-2 of 8 experts, 2048 tokens per GPU, ep 8: load = 1 + sqrt(2 ln 8 / 4096)
    ratio = moe.routed_load_factor(2048 * 2 * 8, 8, None)
    assert dropless.ep_comm_bytes / capped.ep_comm_bytes == pytest.approx(ratio)


# --- grouped GEMM, dispatcher traffic, host launches, a2a overlap, CUDA graphs ---------------------


def _gpu(**eff):
    from dataclasses import replace

    from planner.profiles.hardware import load_gpu

    g = load_gpu("h100-sxm5-80gb")
    return replace(g, efficiency=replace(g.efficiency, **eff))


def test_grouped_linear_prices_all_experts_as_one_gemm():
    from cost_models.compute import gemm_s

    gpu = _gpu(grouped_gemm_efficiency=1.0)
    # 4,096 tokens per expert: FLOP-bound in all three passes
    t = moe.grouped_linear_s(4096, 16, 1536, 2048, gpu, "bf16")
    assert t.forward_s == pytest.approx(gemm_s(4096 * 16, 1536, 2048, gpu, "bf16"))
    assert t.input_grad_s == pytest.approx(gemm_s(4096 * 16, 2048, 1536, gpu, "bf16"))
    # weight gradients: every expert's 2048 x 1536 block, reducing its 4096 rows
    assert t.weight_grad_s == pytest.approx(gemm_s(2048, 1536 * 16, 4096, gpu, "bf16"))
    # one call over 16 experts is faster than 16 separate GEMMs of one expert's size
    assert t.forward_s < 16 * gemm_s(4096, 1536, 2048, gpu, "bf16")
    # a grouped GEMM at half a kernel's speed takes twice as long
    half = moe.grouped_linear_s(4096, 16, 1536, 2048, _gpu(grouped_gemm_efficiency=0.5), "bf16")
    assert half.forward_s == pytest.approx(2 * t.forward_s)
    assert moe.grouped_linear_s(0, 16, 1536, 2048, gpu, "bf16").forward_s == 0.0


def test_grouped_linear_streams_weights_when_experts_have_few_tokens():
    """At tens of tokens per expert the grouped GEMM's time is its weight traffic at the GPU's
    measured streaming rate, not its FLOPs; flat in the token count, as measured."""
    gpu = _gpu(grouped_gemm_efficiency=1.0)
    rate = gpu.gemm_stream_bandwidth()
    assert rate == pytest.approx(2463e9)  # measured (hardware_profiles/gpus/h100-sxm5-80gb.yaml)
    # Qwen3-235B-A22B's fc1 (hidden 4096 -> 2 x 1536), 16 local experts of 16 tokens
    weights = 16 * 4096 * 3072
    rows = moe.grouped_gemm_rows(16)
    few = moe.grouped_linear_s(rows, 16, 3072, 4096, gpu, "bf16", tokens_per_expert=16)
    acts = 16 * 16 * (4096 * 2 + 3072 * 2)
    assert few.forward_s == pytest.approx((weights * 2 + acts) / rate)
    # training: the weight gradient reads and writes FP32 main_grad (8 bytes per element) ...
    assert few.weight_grad_s == pytest.approx((weights * 8 + 16 * 16 * (4096 + 3072) * 2) / rate)
    # ... a plain BF16 output writes 2
    plain = moe.grouped_linear_s(rows, 16, 3072, 4096, gpu, "bf16", wgrad_out_bytes=2.0, tokens_per_expert=16)
    assert plain.weight_grad_s < few.weight_grad_s / 3
    # twice the tokens, nearly the same time; FP8 weights stream half the bytes
    assert (
        moe.grouped_linear_s(rows, 16, 3072, 4096, gpu, "bf16", tokens_per_expert=32).forward_s
        < 1.05 * few.forward_s
    )
    fp8 = moe.grouped_linear_s(rows, 16, 3072, 4096, gpu, "fp8", "delayed", tokens_per_expert=16)
    assert fp8.forward_s < 0.6 * few.forward_s
    # thousands of tokens per expert: FLOP-bound, the floor does not bind
    many = moe.grouped_linear_s(4096, 16, 3072, 4096, gpu, "bf16", tokens_per_expert=4096)
    assert many.forward_s > 2 * (weights * 2 + 16 * 4096 * (4096 + 3072) * 2) / rate


def test_unmeasured_gpus_stream_at_hbm_times_its_efficiency():
    from planner.profiles.hardware import load_gpu

    a100 = load_gpu("a100-sxm4-80gb")
    assert a100.gemm_stream_bytes_per_s == 0.0
    assert a100.gemm_stream_bandwidth() == pytest.approx(
        a100.hbm_bandwidth_bytes_per_s * a100.efficiency.hbm_efficiency
    )


def test_dispatch_traffic_by_dispatcher():
    a2a = moe.dispatch_traffic(1000, 8, "alltoall", sort_chunks=True)
    assert a2a == pytest.approx((2 + 4 + 1 + 1 / 8) * 1000)
    # no chunk sort with one local expert or without expert parallelism
    assert moe.dispatch_traffic(1000, 8, "alltoall", sort_chunks=False) == pytest.approx(a2a - 2000)
    assert moe.dispatch_traffic(1000, 8, "flex", sort_chunks=True) == pytest.approx(2000)
    assert (
        moe.dispatch_traffic(1000, 8, "flex", True) < moe.dispatch_traffic(1000, 8, "allgather", True) < a2a
    )


PARTS = ("router", "preprocess")


def test_host_launches_count_the_whole_layer_and_cuda_graphs_remove_parts():
    fwd, bwd = moe.host_launches(16, "alltoall", ())
    base_f = sum(f for f, _ in moe.MOE_LAUNCHES.values()) + moe.ATTENTION_LAUNCHES[0]
    base_b = sum(b for _, b in moe.MOE_LAUNCHES.values()) + moe.ATTENTION_LAUNCHES[1]
    assert (fwd, bwd) == (base_f + 2 * 16, base_b + 4 * 16)
    # each local expert adds two forward GEMMs and four backward ones
    f8, b8 = moe.host_launches(8, "alltoall", ())
    assert (fwd - f8, bwd - b8) == (16, 32)
    # the flex dispatcher fuses permute and sort into its kernels
    assert moe.host_launches(16, "flex", ())[0] == fwd - 4
    # graphs: attention, router + preprocess captured -> one launch each
    part = moe.host_launches(16, "alltoall", ("attn", "moe_router", "moe_preprocess"))
    captured = sum(n - 1 for n in (moe.ATTENTION_LAUNCHES[0], *(moe.MOE_LAUNCHES[p][0] for p in PARTS)))
    assert part[0] == fwd - captured
    # the whole iteration: one launch per part; the whole MoE MLP leaves attention and residual eager
    whole = moe.host_launches(16, "alltoall", ("full_iteration",))
    parts = [moe.ATTENTION_LAUNCHES, *moe.MOE_LAUNCHES.values()]
    assert whole == (sum(min(f, 1) for f, _ in parts), sum(min(b, 1) for _, b in parts))
    mlp = moe.host_launches(16, "alltoall", ("moe",))
    assert mlp[0] == 4 + moe.ATTENTION_LAUNCHES[0] + moe.MOE_LAUNCHES["residual"][0]
    # whole dense layers ("full") capture nothing of an MoE layer
    assert moe.host_launches(16, "alltoall", ("full",)) == (fwd, bwd)


def test_attention_launches_follow_the_attention_kind():
    from planner.inputs.models import load_model

    llama_like = load_model("llama3-8b")
    assert moe.attention_launches(llama_like) == moe.ATTENTION_LAUNCHES
    qwen = load_model("qwen3-30b-a3b")  # query/key norms
    assert moe.attention_launches(qwen) == (moe.ATTENTION_LAUNCHES[0] + 2, moe.ATTENTION_LAUNCHES[1] + 4)
    dsv3 = load_model("deepseek-v3")  # multi-latent attention with its latent norms
    assert moe.attention_launches(dsv3)[0] > moe.ATTENTION_LAUNCHES[0] + 4


def _qwen_layer(job_kw=None, eff=None, ep=8, pp=1, vpp=1, tp=1):
    from dataclasses import replace

    from cost_models.constraints import resolve
    from cost_models.layers import layer_table
    from cost_models.parallel import ParallelConfig
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m = load_model("qwen3-30b-a3b")
    cluster = load_cluster("dgx-h100", 2)
    if eff:
        g = cluster.groups[0]
        gpu = replace(g.gpu, efficiency=replace(g.gpu.efficiency, **eff))
        cluster = replace(cluster, groups=(replace(g, gpu=gpu),))
    job = make_job(global_batch_size=64, seq_length=4096, **(job_kw or {}))
    c = resolve(m, cluster, job, ParallelConfig(tp=tp, pp=pp, vpp=vpp, ep=ep, micro_batch_size=1))
    return layer_table(m, job, c, cluster.groups[0]).moe


def test_host_bound_moe_layer_takes_its_launch_time():
    fast = _qwen_layer(eff={"host_launch_s": 0.0})
    slow = _qwen_layer(eff={"host_launch_s": 1e-3})  # 1 ms per kernel: the host binds
    from planner.inputs.models import load_model

    m = load_model("qwen3-30b-a3b")
    fwd, bwd = moe.host_launches(128 / 8, "alltoall", (), moe.attention_launches(m))
    assert slow.forward_s + slow.forward_comm_s == pytest.approx(fwd * 1e-3)
    assert slow.backward_input_s + slow.backward_weight_s + slow.backward_comm_s == pytest.approx(bwd * 1e-3)
    assert fast.forward_s < slow.forward_s
    # a launch time far below the GPU time changes nothing
    assert _qwen_layer(eff={"host_launch_s": 1e-9}).forward_s == pytest.approx(fast.forward_s)
    # CUDA graphs over the whole MoE MLP leave one launch per part
    graphed = _qwen_layer({"cuda_graph_scope": ("moe",)}, eff={"host_launch_s": 1e-3})
    assert graphed.forward_s < slow.forward_s


def test_a2a_overlap_hides_expert_parallel_all_to_alls():
    plain = _qwen_layer({"moe_dispatcher": "alltoall"})
    hidden = _qwen_layer({"moe_a2a_overlap": True})
    assert plain.forward_comm_s > 0
    assert hidden.forward_comm_s < plain.forward_comm_s
    assert hidden.backward_comm_s < plain.backward_comm_s
    assert hidden.ep_comm_bytes == pytest.approx(plain.ep_comm_bytes)  # same bytes, hidden


def test_dispatchers_price_their_own_traffic():
    a2a = _qwen_layer({"moe_dispatcher": "alltoall"})
    flex = _qwen_layer({"moe_dispatcher": "flex"})
    gather = _qwen_layer({"moe_dispatcher": "allgather"})
    # flex permutes inside its communication kernels: less HBM traffic, same all-to-all bytes
    assert flex.forward_s < a2a.forward_s
    assert flex.ep_comm_bytes == pytest.approx(a2a.ep_comm_bytes)
    # allgather moves every rank's tokens to every rank: ep x tokens x hidden, gathered and scattered
    assert gather.ep_comm_bytes != pytest.approx(a2a.ep_comm_bytes)
    assert gather.forward_comm_s > 0


def test_a2a_overlap_hides_all_to_alls_before_blackwell_with_tensor_parallelism():
    """Megatron-Bridge launches the all-to-all overlap with 8 hardware queues on Hopper with tp > 1
    (perf_plugins.py), so it overlaps; the tensor-parallel overlap is what is lost then."""
    plain = _qwen_layer({"moe_dispatcher": "alltoall"}, tp=2)
    hidden = _qwen_layer({"moe_a2a_overlap": True}, tp=2)
    assert hidden.forward_comm_s < plain.forward_comm_s
    assert hidden.backward_comm_s < plain.backward_comm_s
    kw = {"tp_comm_overlap": True}
    tp_overlap = _qwen_layer(kw, ep=1, tp=2)
    tp_plain = _qwen_layer({}, ep=1, tp=2)
    assert tp_overlap.forward_comm_s < tp_plain.forward_comm_s  # the TP overlap works alone
    both = _qwen_layer({**kw, "moe_a2a_overlap": True}, tp=2)
    a2a_only = _qwen_layer({"moe_a2a_overlap": True}, tp=2)
    assert both.forward_comm_s == pytest.approx(a2a_only.forward_comm_s)  # but not beside the a2a overlap


def test_remote_domain_copies_hand_worked():
    """Qwen3-30B (128 experts, top 8) over ep 16 on two 8-GPU nodes: the other node holds 64
    experts and is missed with probability C(64, 8) / C(128, 8)."""
    miss = math.comb(64, 8) / math.comb(128, 8)
    assert moe.remote_domain_copies(128, 8, 16, 8) == pytest.approx(1 - miss)
    assert moe.remote_domain_copies(128, 8, 8, 8) == 0.0  # one domain: nothing crosses
    # one expert per rank and domain: every copy to another domain is its own (no de-duplication)
    assert moe.remote_domain_copies(64, 1, 64, 1) == pytest.approx(63 / 64)
    # never more than the plain all-to-all's k (D - 1) / D copies
    for E, k, ep, m in ((256, 8, 32, 8), (128, 8, 32, 8), (128, 4, 64, 8), (384, 8, 64, 4)):
        D = ep // m
        assert moe.remote_domain_copies(E, k, ep, m) <= k * (D - 1) / D + 1e-12


def test_flex_dispatcher_crosses_the_network_once_per_domain():
    across_a2a = _qwen_layer({"moe_dispatcher": "alltoall"}, ep=16)
    across_flex = _qwen_layer({"moe_dispatcher": "flex"}, ep=16)
    # same routed bytes, but DeepEP/HybridEP send a token once per remote node
    assert across_flex.ep_comm_bytes == pytest.approx(across_a2a.ep_comm_bytes)
    assert across_flex.forward_comm_s < across_a2a.forward_comm_s / 2
