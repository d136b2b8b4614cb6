"""The tied word embedding's gradient all-reduce between the first and the last pipeline stage
(cost_models.data_parallel.embedding_sync_s): paid by those two ranks only, after their
data-parallel reduction, with pp > 1 and a tied output layer; hand-worked on AMP's cluster."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner import api

CLUSTER = str(Path(__file__).resolve().parent.parent / "examples" / "cluster-amp-heterogeneous.yaml")


@pytest.fixture(scope="module")
def problem():
    return api.load_problem("amp-gpt2-345m", CLUSTER, None, 32, 1024, precision="fp16", grad_dtype="fp32")


def _stages(problem, model, **kw):
    c = resolve(model, problem.cluster, problem.job, ParallelConfig(optimizer_sharding="none", **kw))
    return estimate(model, problem.cluster, problem.job, c).stages


def test_first_and_last_stage_pay_the_tied_embedding_all_reduce(problem):
    tied = _stages(problem, problem.model, tp=1, pp=4, micro_batch_size=1)
    untied = _stages(
        problem,
        replace(problem.model, untie_embeddings_and_output_weights=True),
        tp=1,
        pp=4,
        micro_batch_size=1,
    )
    # Stage 0 sits on a p3 node, stage 3 on the g4dn: across nodes, at the slower side's
    # 10 Gb/s / 4 GPUs = 0.3125 GB/s and 30 us per step; 52,256 x 1,024 fp32 gradients over a
    # two-rank ring: one buffer each way (2 (n-1)/n = 1) plus two steps of latency.
    expect = 52256 * 1024 * 4 / 0.3125e9 + 2 * 30e-6
    for r in (0, 3):  # the untied model's last stage reduces its own output weights alike
        assert tied[r].reduce_exposed_s - untied[r].reduce_exposed_s == pytest.approx(expect, rel=1e-9)
    for r in (1, 2):  # the middle stages hold no embedding
        assert tied[r].reduce_exposed_s == pytest.approx(untied[r].reduce_exposed_s)


def test_no_embedding_all_reduce_without_pipelining(problem):
    from cost_models.data_parallel import embedding_sync_s
    from cost_models.stage_terms import stage_link

    c = resolve(problem.model, problem.cluster, problem.job, ParallelConfig(tp=1, pp=1, micro_batch_size=1))
    assert embedding_sync_s(problem.job, c, 52256 * 1024, stage_link(problem.cluster, c, 0, 0)) == 0.0
    two = resolve(problem.model, problem.cluster, problem.job, ParallelConfig(tp=2, pp=2, micro_batch_size=1))
    link = stage_link(problem.cluster, two, 0, 1)  # stages 0 and 1: both on p3 nodes, across them
    assert embedding_sync_s(problem.job, two, 52256 * 1024 / 2, link) == pytest.approx(
        52256 * 1024 / 2 * 4 / link.bandwidth_bytes_per_s + 2 * link.latency_s
    )


def test_synced_embedding_follows_megatron_cores_shared_weight(problem):
    """What ``_allreduce_word_embedding_grads`` reduces: the tied embedding, or the last stage's
    embedding copy of multi-token prediction even when untied; the whole ``V x h / tp`` main
    gradient under the distributed optimizer, the local shard under Megatron-FSDP; nothing when
    untied without MTP, frozen, or on one stage."""
    from cost_models.data_parallel import synced_embedding_params

    model, job = problem.model, problem.job
    untied = replace(model, untie_embeddings_and_output_weights=True)

    def cfg(**kw):
        return resolve(model, problem.cluster, job, ParallelConfig(tp=2, pp=2, micro_batch_size=1, **kw))

    shard = 52256 * 1024 / 2
    dist = cfg(optimizer_sharding="distributed")
    assert synced_embedding_params(model, job, dist) == shard
    assert synced_embedding_params(untied, job, dist) == 0.0
    assert synced_embedding_params(replace(untied, mtp_num_layers=1), job, dist) == shard
    assert synced_embedding_params(model, replace(job, finetune="lora"), dist) == 0.0
    zero2 = cfg(optimizer_sharding="zero2")
    assert synced_embedding_params(model, job, zero2) == shard / (zero2.dp * zero2.cp)
    one = resolve(model, problem.cluster, job, ParallelConfig(tp=2, pp=1, micro_batch_size=1))
    assert synced_embedding_params(model, job, one) == 0.0
