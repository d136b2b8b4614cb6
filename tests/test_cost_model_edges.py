"""Edge shapes of the cost model that once raised tracebacks instead of a ConfigError or a price.

1. ``tp-cp-ep-pp-dp`` with more distributed-optimizer instances than data-parallel ranks: the
   instance's shard degree ``dp*cp // instances`` is 0, and placing that group divided by it. Such a
   configuration is invalid (Megatron-Core parallel_state.py asserts that dp*cp is divisible by
   ``--num-distributed-optimizer-instances``), so it is refused naming optimizer_instances, as in
   Megatron's default order.
2. An MoE model whose pattern of dense and MoE layers is explicit (DeepSeek-V3: three dense layers
   first) with an empty last virtual stage: the chunk's "one layer" looked up decoder layer
   ``num_layers``. An empty end stage is legal in Megatron (``--pipeline-model-parallel-layout``
   ``E|...|L``; tests/test_embedding_stages.py) and holds only the embedding or the output layer,
   MTP modules and loss, which is what it is now priced at, as for dense models.
"""

from __future__ import annotations

import json
import re

import pytest

from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate
from cost_models.parallel import PP_DP, RANK_ORDERS, ParallelConfig
from cost_models.placement import group
from cost_models.stage_terms import chunk_terms, node_of_stage, table_for
from planner.inputs.errors import ConfigError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

LLAMA_JOB = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1")
LLAMA_BATCH = ("--global-batch-size", "64", "--seq-len", "4096")
DSV3 = ("--model", "deepseek-v3", "--cluster", "dgx-h100", "--nodes", "8")
DSV3_BATCH = ("--global-batch-size", "256", "--seq-len", "4096")
DSV3_SPLIT = (0, 30, 31, 0)


def _llama():
    return (
        load_model("llama3-8b"),
        load_cluster("dgx-h100", 1),
        make_job(global_batch_size=64, seq_length=4096),
    )


@pytest.mark.parametrize("order", RANK_ORDERS)
@pytest.mark.parametrize(("pp", "instances", "dpcp"), [(1, 8, 4), (2, 4, 2), (1, 16, 4)])
def test_more_optimizer_instances_than_dp_ranks_is_refused_in_both_orders(order, pp, instances, dpcp):
    model, cluster, job = _llama()
    config = ParallelConfig(tp=2, pp=pp, optimizer_instances=instances, rank_order=order)
    message = f"optimizer_instances ({instances}) must divide dp*cp ({dpcp})"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        resolve(model, cluster, job, config)
    # the placement check says nothing of a sharded group that does not tile dp*cp
    assert violations(model, cluster, job, config.with_(dp=8 // (2 * pp))) == [message]


def test_pp_dp_order_still_places_instances_that_divide():
    model, cluster, job = _llama()
    c = resolve(model, cluster, job, ParallelConfig(tp=2, optimizer_instances=4, rank_order=PP_DP))
    assert c.shard_degree == 1 and group(c, "replicate").size == 4
    assert estimate(model, cluster, job, c).step_time_s > 0


def test_negative_hsdp_shard_degree_is_refused():
    model, cluster, job = _llama()
    bad = ParallelConfig(tp=2, optimizer_sharding="full", fsdp_shard=-2, rank_order=PP_DP)
    with pytest.raises(ConfigError, match=r"^fsdp_shard must be >= 0 \(0 = all of dp\*cp\), got -2$"):
        resolve(model, cluster, job, bad)


@pytest.mark.parametrize("order", RANK_ORDERS)
def test_cli_refuses_the_instances_in_one_line(run_cli, order):
    out = run_cli(
        "estimate",
        *LLAMA_JOB,
        *LLAMA_BATCH,
        "--tp",
        "2",
        "--optimizer-instances",
        "8",
        "--rank-order",
        order,
        "--json",
    )
    assert out.exit_code == 1
    assert out.stderr.strip() == "error: optimizer_instances (8) must divide dp*cp (4)"
    assert out.stdout == ""


def test_search_rejects_the_shapes_with_too_many_instances(run_cli):
    out = run_cli(
        "search",
        *LLAMA_JOB,
        *LLAMA_BATCH,
        "--optimizer-instances",
        "1,8",
        "--rank-order",
        ",".join(RANK_ORDERS),
        "--json",
    )
    assert out.exit_code == 0, out.stderr
    plans = json.loads(out.stdout)["plans"]
    assert plans
    for plan in plans:
        assert (plan["dp"] * plan["cp"]) % plan.get("optimizer_instances", 1) == 0


def _dsv3(split=DSV3_SPLIT, recompute="none"):
    model = load_model("deepseek-v3")
    cluster = load_cluster("dgx-h100", 8)
    job = make_job(global_batch_size=256, seq_length=4096)
    config = ParallelConfig(
        pp=2, vpp=2, ep=8, schedule="interleaved", layers_per_stage=split, recompute=recompute
    )
    return model, cluster, job, resolve(model, cluster, job, config)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_moe_empty_end_chunks_hold_only_embedding_and_output(recompute):
    model, cluster, job, c = _dsv3(recompute=recompute)
    assert model.moe_layer_pattern and len(model.moe_layer_pattern) == model.num_layers == sum(DSV3_SPLIT)
    nodes = [node_of_stage(cluster, c, r) for r in range(c.pp)]
    chunks = chunk_terms(model, cluster, job, c, DSV3_SPLIT, nodes)
    table = table_for(model, job, c, nodes[0])
    first, last = chunks[0], chunks[-1]
    assert first.cost == table.embedding and last.cost == table.output
    assert first.recompute_s == last.recompute_s == 0.0
    assert first.largest_layer_params == last.largest_layer_params == 0.0
    assert first.activation_bytes == pytest.approx(table.embedding.activation_bytes)
    assert first.transient_bytes == 0.0  # no decoder layer re-runs there
    est = estimate(model, cluster, job, c)
    assert est.step_time_s > 0 and len(est.stages) == 2


def test_moe_empty_end_chunks_are_priced_as_the_dense_model_prices_them():
    """The same rule for both: an empty end chunk adds nothing but its embedding or output terms, so
    moving every decoder layer off it leaves the other chunks' costs unchanged."""
    for name, split, nodes_n, ep in (("deepseek-v3", DSV3_SPLIT, 8, 8), ("llama3-8b", (0, 16, 16, 0), 1, 1)):
        model = load_model(name)
        cluster = load_cluster("dgx-h100", nodes_n)
        job = make_job(global_batch_size=256, seq_length=4096)
        c = resolve(
            model,
            cluster,
            job,
            ParallelConfig(
                pp=2, vpp=2, ep=ep, tp=1 if ep > 1 else 2, schedule="interleaved", layers_per_stage=split
            ),
        )
        nodes = [node_of_stage(cluster, c, r) for r in range(c.pp)]
        table = table_for(model, job, c, nodes[0])
        chunks = chunk_terms(model, cluster, job, c, split, nodes)
        assert [ch.cost == e for ch, e in zip(chunks[::3], (table.embedding, table.output))] == [True, True]
        assert chunks[0].largest_layer_params == chunks[-1].largest_layer_params == 0.0
        assert chunks[1].largest_layer_params > 0


def test_cli_prices_the_moe_empty_end_stage(run_cli):
    out = run_cli(
        "estimate",
        *DSV3,
        *DSV3_BATCH,
        "--pp",
        "2",
        "--vpp",
        "2",
        "--ep",
        "8",
        "--layers-per-stage",
        ",".join(map(str, DSV3_SPLIT)),
        "--json",
    )
    assert out.exit_code == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["config"]["layers_per_stage"] == list(DSV3_SPLIT)
    assert d["tokens_per_s"] > 0
