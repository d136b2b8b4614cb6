"""Nonuniform tensor parallelism as Arfeen et al. (2025) run it (issue 57): uneven head splits
(priced as Megatron's padding), only the hit stage degraded, failures packed, batch in proportion;
and the regression of issue 57: on GPT-3 175B / 128 DGX A100 / tp 8 with one failed GPU, NTP keeps
more throughput than dropping the replica."""

from __future__ import annotations

import json

import pytest

from cost_models.parallel import ParallelConfig
from planner import api
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.plans.plan_file import PlanInputs, plan_document, write_plan
from planner.profiles.hardware import load_cluster
from planner.resilience.failures import FailureSpec, place
from planner.resilience.ntp import ReplicaTimer, candidate_degrees, padded_model


def _inputs(model, template, nodes, gbs, seq, config):
    m, cl = load_model(model), load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    est = api.estimate_config(api.Problem(m, cl, job), config)
    return PlanInputs(m, cl, job, est.config, (), "megatron"), est


GPT3_TP8 = ParallelConfig(
    tp=8, pp=8, vpp=12, micro_batch_size=3, schedule="interleaved", optimizer_sharding="distributed"
)
"""The best plan of ``planner search -m gpt3-175b -c dgx-a100 -n 128 -b 1536 -s 2048 --tp 8``
(issue 57's plan): interleaved, 12 chunks per rank, micro-batch 3, 32 micro-batches per replica."""


@pytest.fixture(scope="module")
def gpt3_interleaved():
    return _inputs("gpt3-175b", "dgx-a100", 128, 1536, 2048, GPT3_TP8)


def test_padded_model_pads_to_the_busiest_gpu_share():
    gpt3 = load_model("gpt3-175b")  # 96 heads (MHA), ffn 49152
    p7 = padded_model(gpt3, 7)
    assert (p7.num_attention_heads, p7.num_query_groups, p7.ffn_hidden_size) == (98, 98, 49154)
    assert p7.kv_channels == gpt3.kv_channels and p7.hidden_size == gpt3.hidden_size
    assert padded_model(gpt3, 6) is gpt3  # 6 divides every width
    llama = load_model("llama3.1-405b")  # 128 heads, 8 query groups, ffn 53248
    p12 = padded_model(llama, 12)
    # 11 heads on the busiest GPU; fewer groups than GPUs: one (replicated) group per GPU
    assert (p12.num_attention_heads, p12.num_query_groups, p12.ffn_hidden_size) == (132, 12, 53256)
    p6 = padded_model(llama, 6)
    assert (p6.num_attention_heads, p6.num_query_groups) == (132, 12)  # ceil(8 / 6) = 2 groups each


def test_candidate_degrees_largest_per_head_count():
    gpt3 = load_model("gpt3-175b")
    assert candidate_degrees(gpt3, 7, 8) == (7, 6, 5)  # 14, 16, 20 heads on the busiest GPU
    llama = load_model("llama3.1-405b")
    assert candidate_degrees(llama, 12, 16) == (12, 11, 10)
    assert candidate_degrees(llama, 63, 64) == (63, 42, 31)  # 3, 4, 5 heads on the busiest GPU
    assert candidate_degrees(gpt3, 0, 8) == ()


def test_packed_placement_fills_one_replica_stage_by_stage():
    c = ParallelConfig(tp=8, pp=4, dp=4)
    spread = place(c, 8, FailureSpec(gpus=3))
    packed = place(c, 8, FailureSpec(gpus=3), packed=True)
    assert spread.replicas == (0, 1, 2)
    assert packed.replicas == (0,)
    assert packed.stages == ((0, 0, 7), (0, 1, 7), (0, 2, 7))
    five = place(c, 8, FailureSpec(gpus=5), packed=True)
    assert five.replicas == (0, 1) and [s[:2] for s in five.stages] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
    ]
    # Whole nodes (one tp 8 group each): packed nodes land on the stages of one replica.
    nodes = place(c, 8, FailureSpec(nodes=2), packed=True)
    assert len(nodes.failed_nodes) == 2 and nodes.replicas == (0,)
    assert {s[1] for s in nodes.stages} == {0, 1} and all(s[2] == 0 for s in nodes.stages)
    assert len(place(c, 8, FailureSpec(nodes=2)).replicas) == 2


def test_replica_timer_without_a_hit_stage_is_the_plans_pipeline(gpt3_interleaved):
    inputs, healthy = gpt3_interleaved
    timer = ReplicaTimer(inputs)
    m = inputs.config.num_microbatches(inputs.job)
    assert timer.pipeline_s((), 8, m) == pytest.approx(healthy.pipeline_time_s, rel=1e-12)


def test_only_the_hit_stage_degrades(gpt3_interleaved):
    inputs, healthy = gpt3_interleaved
    timer = ReplicaTimer(inputs)
    m = inputs.config.num_microbatches(inputs.job)
    one = timer.pipeline_s((0,), 7, m)
    every = timer.pipeline_s(tuple(range(8)), 7, m)
    assert healthy.pipeline_time_s < one < every
    # One slow stage paces the pipeline: no more than the stage's own slowdown, (96/7 rounded up
    # heads) / (96/8) = 14/12.
    assert one / healthy.pipeline_time_s > 1.0
    assert one / healthy.pipeline_time_s < 14 / 12
    # Padding beats the divisible degree: tp 7 (14 heads per GPU) is faster than tp 6 (16).
    assert timer.best_degree((0,), 7).tp == 7
    assert one < timer.pipeline_s((0,), 6, m)


def test_issue57_ntp_beats_dropping_the_replica(run_cli, tmp_path, gpt3_interleaved):
    """`planner whatif` on the GPT-3 175B / 128 DGX A100 / tp 8 plan with one failed GPU: the best
    NTP variant keeps more throughput than the best drop-replica variant (before issue 57: NTP
    123.5K tok/s, dropping 159.6K)."""
    inputs, _ = gpt3_interleaved
    plan = tmp_path / "gpt3.yaml"
    write_plan(plan, plan_document(inputs, {}, None))
    r = run_cli("whatif", str(plan), "--fail-gpus", "1", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    by = {(s["name"], s["variant"]): s for s in d["strategies"]}
    ntp = max((s for s in d["strategies"] if s["name"] == "nonuniform-tp"), key=lambda s: s["tokens_per_s"])
    drop = max((s for s in d["strategies"] if s["name"] == "drop-replica"), key=lambda s: s["tokens_per_s"])
    assert ntp["tokens_per_s"] > drop["tokens_per_s"]
    prop = by[("nonuniform-tp", "proportional-batch")]
    # 7 of 8 GPUs of the hit group run tp 7 on pipeline rank 0 only; the slowed replica takes 24
    # of 32 micro-batches (multiples of pp under interleaving), the 15 others keep 32.
    assert prop["replicas"] == [
        {"tp": 8, "count": 15, "microbatches": 32},
        {"tp": 7, "count": 1, "microbatches": 24},
    ]
    assert prop["gpus_used"] == 1023
    assert d["failure"]["packed_hit_stages"] == [{"replica": 0, "pipeline_rank": 0, "surviving_tp_gpus": 7}]
    assert prop["relative"] > by[("drop-replica", "reduce-global-batch")]["relative"]
    assert prop["relative"] <= 1023 / 1024
