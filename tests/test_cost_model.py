"""Cost model against its oracles: Narayanan FLOPs, Megatron and Korthikanti memory, alpha-beta collectives."""

from dataclasses import replace

import pytest

from cost_models import communication as comm
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.layers import hardware_flop_per_iteration, layer_table, model_flop_per_iteration
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

MiB = 2**20


def gpt_formula(m, job, per_layer=72, logit_div=12):
    B, s, l, h, V = job.global_batch_size, job.seq_length, m.num_layers, m.hidden_size, m.vocab_size
    return per_layer * B * s * l * h * h * (1 + s / (6 * h) + V / (logit_div * l * h))


@pytest.mark.parametrize("name", ["gpt-1.7b", "gpt-18.4b", "gpt3-175b", "gpt-1t"])
def test_model_flops_equal_narayanan_exactly(name):
    m = load_model(name)
    job = make_job(global_batch_size=1536, seq_length=2048)
    assert model_flop_per_iteration(m, job) == pytest.approx(gpt_formula(m, job), rel=1e-12)
    # With full recompute: Narayanan et al. 2021 eq. (3), 96 B s l h^2 (1 + s/6h + V/16lh).
    hw = hardware_flop_per_iteration(m, job, "full")
    assert hw == pytest.approx(gpt_formula(m, job, per_layer=96, logit_div=16), rel=1e-12)


def tiny(**kw):
    base = dict(
        name="tiny",
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=96,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=16,
        vocab_size=100,
        max_position_embeddings=64,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
        add_bias_linear=False,
    )
    base.update(kw)
    return ModelSpec(**base)


def test_gqa_swiglu_flops_hand_worked():
    # Per token per layer: QKV 2*64*(64+2*32)=16384, out 2*64*64=8192, attention 4*32*64=8192,
    # SwiGLU MLP 2*64*96*3=36864 -> 69632; 2 layers + logits 2*64*100=12800 -> 152064;
    # x3 (fwd + bwd) x 32 tokens = 14,598,144.
    job = make_job(global_batch_size=1, seq_length=32)
    assert model_flop_per_iteration(tiny(), job) == 14_598_144


def test_moe_flops_hand_worked():
    # MoE MLP per token: router 2*64*4=512 + top-2 experts of width 32: 2*2*64*32*3=24576.
    # Per layer 16384+8192+8192+25088=57856; x2 + 12800 = 128512; x3 x 32 = 12,337,152.
    job = make_job(global_batch_size=1, seq_length=32)
    m = tiny(num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32)
    assert model_flop_per_iteration(m, job) == 12_337_152
    assert m.params_active < m.params_total


def megatron_7b():
    # The worked example of ../shared/reference/megatron-args.md §4.1: L 32, h 4096, f 11008 SwiGLU,
    # V 32000 untied, RMSNorm, tp 2 pp 2 dp 4 with the distributed optimizer -> 14,459.64 MB.
    return ModelSpec(
        name="7b",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
        kv_channels=128,
        vocab_size=32000,
        max_position_embeddings=4096,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
        add_bias_linear=False,
    )


def test_weights_and_optimizer_match_megatron_formula():
    m = megatron_7b()
    cluster = load_cluster("dgx-h100", 2)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = resolve(
        m, cluster, job, ParallelConfig(tp=2, pp=2, micro_batch_size=1, optimizer_sharding="distributed")
    )
    assert c.dp == 4
    est = estimate(m, cluster, job, c)
    static = est.stages[0].memory.static_bytes
    assert static / MiB == pytest.approx(14459.64, rel=0.01)
    # Without the distributed optimizer: 18 bytes per parameter.
    c2 = c.with_(optimizer_sharding="none")
    est2 = estimate(m, cluster, job, c2)
    assert est2.stages[0].memory.static_bytes / static == pytest.approx(18 / 9, rel=1e-9)


def test_activations_match_megatron_formula_sp_selective():
    # compute_activation_memory (SP + selective), first stage, 1F1B with m >= p:
    # (s b h (18 + 4 f/h) L + 8 s b p + s b h p) / t.
    m = load_model("gpt3-175b")
    cluster = load_cluster("dgx-a100", 16)
    job = make_job(global_batch_size=128, seq_length=2048)
    c = resolve(
        m,
        cluster,
        job,
        ParallelConfig(tp=8, pp=8, micro_batch_size=1, recompute="selective", optimizer_sharding="none"),
    )
    est = estimate(m, cluster, job, c)
    s, b, h, L, t, p, f = 2048, 1, 12288, 96, 8, 8, 4 * 12288
    megatron = (s * b * h * (18 + 4 * f / h) * L + 8 * s * b * p + s * b * h * p) / t
    assert est.stages[0].memory.activations_bytes == pytest.approx(megatron, rel=0.01)
    assert est.stages[0].memory.peak_inflight_microbatches == pytest.approx(8.0)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_per_layer_activations_follow_korthikanti_table2(t):
    m = load_model("gpt3-175b")
    s, b, h, a = 2048, 1, 12288, 96
    job = make_job(global_batch_size=8, seq_length=s)
    node = load_cluster("dgx-a100", 1).groups[0]
    lse = 4 * s * b * a / t  # flash attention's fp32 log-sum-exp, the only extra over the table
    tp_only = layer_table(m, job, ParallelConfig(tp=t, sequence_parallel=False), node).dense
    assert tp_only.activation_bytes == pytest.approx(s * b * h * (10 + 24 / t) + lse, rel=1e-9)
    if t > 1:
        sp = layer_table(m, job, ParallelConfig(tp=t, sequence_parallel=True), node).dense
        assert sp.activation_bytes == pytest.approx(34 * s * b * h / t + lse, rel=1e-9)
    assert tp_only.checkpoint_bytes == 2 * s * b * h  # full recompute keeps the layer input


def test_collectives_hand_worked():
    node = load_cluster("dgx-h100", 2).groups[0]
    c = ParallelConfig(tp=8)
    link = comm.link_for(group(c, "tp"), node)
    assert not link.crosses_network
    assert link.bandwidth_bytes_per_s == pytest.approx(450e9 * 0.8)
    # ring: 2*7/8 * 1e9 / 360e9 + 14 * 3e-6
    assert comm.all_reduce_s(1e9, 8, link) == pytest.approx(2 * 7 / 8 * 1e9 / 360e9 + 14 * 3e-6)
    assert comm.reduce_scatter_s(1e9, 8, link) == pytest.approx(7 / 8 * 1e9 / 360e9 + 7 * 3e-6)
    assert comm.all_to_all_s(1e9, 8, link) == pytest.approx(7 / 8 * 1e9 / 360e9 + 7 * 3e-6)
    assert comm.p2p_s(1e6, link) == pytest.approx(3e-6 + 1e6 / 360e9)
    # Small messages over many ranks pick the tree: 2 S / B + 2 log2(n) alpha.
    assert comm.all_reduce_s(1e3, 1024, link) == pytest.approx(2 * 1e3 / 360e9 + 2 * 10 * 3e-6)


def test_all_to_all_across_nodes_is_bound_by_each_rank_nic():
    """A ring over 4 nodes pools the 8 NICs of each node; an all-to-all cannot: each rank sends
    the 3/4 of its buffer bound for other nodes through its own NIC (50 GB/s x 0.9 on DGX H100)."""
    node = load_cluster("dgx-h100", 4).groups[0]
    link = comm.link_for(group(ParallelConfig(tp=1, ep=32, dp=32), "ep"), node)
    assert link.crosses_network and link.members_per_domain == 8
    nic = 50e9 * 0.9
    assert link.nic_bandwidth_bytes_per_s == pytest.approx(nic)
    a2a = comm.all_to_all_s(1e9, 32, link)
    assert a2a == pytest.approx(24 / 32 * 1e9 / nic + 31 * 8e-6)
    # the reduce-scatter of the same buffer over the same ranks uses all eight NICs
    assert comm.reduce_scatter_s(1e9, 32, link) < a2a / 4
    # never faster than the node's off-node bytes through its NICs, whatever the span
    for n, nodes in ((16, 2), (64, 8), (128, 16)):
        g = load_cluster("dgx-h100", nodes).groups[0]
        ln = comm.link_for(group(ParallelConfig(tp=1, ep=n, dp=n), "ep"), g)
        assert comm.all_to_all_s(1e9, n, ln) >= (n - 8) / n * 1e9 / nic
    # a domain-forwarding dispatcher with 1/4 of the bytes crossing: a quarter of the NIC time
    fwd = comm.forwarded_all_to_all_s(1e9, 32, link, 0.25 * 32 / 24)
    assert fwd == pytest.approx(0.25 * 32 / 24 * 1e9 / nic + 31 * 8e-6)


def test_tensor_parallel_across_nodes_is_slower():
    m = load_model("gpt3-175b")
    job = make_job(global_batch_size=64, seq_length=2048)
    for template in ("dgx-a100", "aws-p4d"):
        node = load_cluster(template, 2).groups[0]
        inside = comm.link_for(group(ParallelConfig(tp=8), "tp"), node)
        across = comm.link_for(group(ParallelConfig(tp=16), "tp"), node)
        assert across.crosses_network and not inside.crosses_network
        assert across.bandwidth_bytes_per_s < inside.bandwidth_bytes_per_s
        t8 = layer_table(m, job, ParallelConfig(tp=8), node).dense.forward_comm_s
        t16 = layer_table(m, job, ParallelConfig(tp=16), node).dense.forward_comm_s
        # tp=16 moves the same bytes per GPU but over the network: slower despite smaller shards
        assert t16 > 1.2 * t8


def test_tensor_parallel_lowers_gemm_efficiency():
    m = load_model("llama3-8b")
    job = make_job(global_batch_size=8, seq_length=4096)
    node = load_cluster("dgx-h100", 1).groups[0]
    t1 = layer_table(m, job, ParallelConfig(tp=1), node).dense
    t8 = layer_table(m, job, ParallelConfig(tp=8), node).dense
    # Perfect scaling would be 1/8; sliced GEMMs run less efficiently, so compute shrinks less.
    assert t8.forward_s > t1.forward_s / 8 * 1.05


def test_group_ranks_follow_megatron_order():
    from cost_models.placement import group_ranks

    c = ParallelConfig(tp=2, cp=2, dp=2, pp=2)
    assert group_ranks(c, "tp", 0) == [0, 1]
    assert group_ranks(c, "cp", 0) == [0, 2]
    assert group_ranks(c, "dp", 1) == [1, 5]
    assert group_ranks(c, "pp", 3) == [3, 11]
    assert group_ranks(c, "dpcp", 0) == [0, 2, 4, 6]


def test_full_recompute_trades_time_for_memory():
    m = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100", 8)
    job = make_job(global_batch_size=64, seq_length=4096)
    base = resolve(m, cluster, job, ParallelConfig(tp=8, pp=4))
    full = base.with_(recompute="full")
    e0, e1 = estimate(m, cluster, job, base), estimate(m, cluster, job, full)
    assert e1.peak_memory_bytes < e0.peak_memory_bytes
    assert e1.step_time_s > e0.step_time_s
    assert e1.hfu > e1.mfu and e0.hfu == e0.mfu
    # recomputing half the layers lands in between
    half = full.with_(recompute_num_layers=10)
    e2 = estimate(m, cluster, job, half)
    assert e1.peak_memory_bytes < e2.peak_memory_bytes < e0.peak_memory_bytes


def test_optimizer_sharding_shrinks_static_memory():
    m = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100", 2)
    job = make_job(global_batch_size=64, seq_length=4096)
    statics = []
    for sharding in ("none", "distributed", "zero2", "full"):
        c = resolve(m, cluster, job, ParallelConfig(optimizer_sharding=sharding))
        statics.append(estimate(m, cluster, job, c).stages[0].memory.static_bytes)
    assert statics == sorted(statics, reverse=True)


def test_invalid_configurations_name_the_constraint():
    from planner.inputs.errors import ConfigError

    m = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100", 8)
    job = make_job(global_batch_size=64, seq_length=4096)
    with pytest.raises(ConfigError, match=r"num_attention_heads \(64\) is not divisible by tp \(3\)"):
        resolve(m, load_cluster("dgx-h100", 12), job, ParallelConfig(tp=3, pp=1))
    with pytest.raises(ConfigError, match="world size 64 is not divisible by tp\\*pp\\*cp"):
        resolve(m, cluster, job, ParallelConfig(tp=8, pp=5))
    with pytest.raises(ConfigError, match="global batch size 64 is not divisible by micro-batch size x dp"):
        resolve(m, cluster, job, ParallelConfig(tp=1, pp=1, micro_batch_size=3))


def test_moe_expert_parallel_runs_all_to_all():
    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=128, seq_length=4096)
    c = resolve(m, cluster, job, ParallelConfig(tp=2, pp=2, ep=4))
    est = estimate(m, cluster, job, c)
    table = layer_table(m, job, c, cluster.groups[0])
    assert table.moe.ep_comm_bytes > 0 and table.moe.params_expert > 0
    assert est.fits
    # experts are divided over ep: more ep, fewer expert parameters per GPU
    c8 = resolve(m, cluster, job, ParallelConfig(tp=2, pp=2, ep=8))
    assert layer_table(m, job, c8, cluster.groups[0]).moe.params_expert == pytest.approx(
        table.moe.params_expert / 2
    )


def test_context_parallel_splits_activations():
    m = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=8, seq_length=32768)
    e1 = estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(tp=1, cp=1, recompute="full")))
    e4 = estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(tp=1, cp=4, recompute="full")))
    assert e4.stages[0].memory.activations_bytes < e1.stages[0].memory.activations_bytes / 3


def test_heterogeneous_stages_get_their_gpu():
    import tempfile
    from pathlib import Path

    text = """schema_version: 1
kind: cluster
groups:
  - template: dgx-a100
    num_nodes: 1
  - template: dgx-h100
    num_nodes: 1
"""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.yaml"
        p.write_text(text)
        cluster = load_cluster(str(p))
    m = load_model("llama2-7b")
    job = make_job(global_batch_size=16, seq_length=4096)
    est = estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(tp=8, pp=2)))
    assert [s.gpu for s in est.stages] == ["a100-sxm4-80gb", "h100-sxm5-80gb"]
    assert est.stages[0].forward_s > est.stages[1].forward_s


def test_estimate_is_deterministic():
    m = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100", 8)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = resolve(m, cluster, job, ParallelConfig(tp=8, pp=4, vpp=5, schedule="interleaved"))
    a, b = estimate(m, cluster, job, c), estimate(m, replace(cluster), job, c)
    assert a.step_time_s == b.step_time_s and a.peak_memory_bytes == b.peak_memory_bytes


def test_attention_efficiency_rises_with_keys_per_call():
    """Fused attention's efficiency follows ceiling x keys / (keys + K_half) (cost_models.compute,
    fitted to measured H100/H200 kernels): the same FLOPs take less time in longer calls, and a
    context-parallel rank's calls see only its s / cp chunk of keys."""
    from cost_models.attention import kernel_keys
    from cost_models.compute import ATTENTION_HALF_KEYS, attention_efficiency, attention_s

    gpu = load_cluster("dgx-h100", 1).groups[0].gpu
    ceiling = gpu.efficiency.attention_efficiency
    assert attention_efficiency(gpu, ATTENTION_HALF_KEYS) == pytest.approx(ceiling / 2)
    assert attention_efficiency(gpu) == ceiling
    times = [attention_s(1e12, gpu, "bf16", keys) for keys in (1024, 4096, 32768)]
    assert times[0] > times[1] > times[2]
    job = make_job(global_batch_size=8, seq_length=32768)
    assert kernel_keys(32768, job, ParallelConfig(cp=1)) == 32768
    assert kernel_keys(32768, job, ParallelConfig(cp=8)) == 4096
    assert kernel_keys(8192, job, ParallelConfig(cp=2)) == 8192  # a window shorter than the chunk
