"""A distributed (ZeRO-1) optimizer whose gradients are all-reduced before the sharded step
(JobSpec.sharded_grad_reduce all_reduce: DeepSpeed's pipeline BF16_Optimizer, Aleph Alpha's ZeRO)
instead of reduce-scattered (Megatron-Core): twice the bytes on the reduction, the same gather and
memory; carried by plan files, refused by the pinned frameworks, set for the calibration runs
whose software ran it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from cost_models import communication as comm
from cost_models.constraints import resolve, violations
from cost_models.estimate import dp_sync, estimate
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from planner.calibration.cases import cases
from planner.frameworks import get_framework
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.plans.plan_file import job_to_mapping
from planner.profiles.hardware import load_cluster
from planner.search.bounds import cheap_bound


def _setup(sharding: str = "distributed", dp_nodes: int = 4):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-a100", dp_nodes)
    scatter = make_job(global_batch_size=64, seq_length=2048)
    reduce_all = replace(scatter, sharded_grad_reduce="all_reduce")
    c = resolve(
        m,
        cluster,
        scatter,
        ParallelConfig(tp=8, pp=1, micro_batch_size=1, optimizer_sharding=sharding),
    )
    return m, cluster, scatter, reduce_all, c


def test_the_reduction_is_an_all_reduce_and_the_gather_is_unchanged():
    m, cluster, scatter, reduce_all, c = _setup()
    node = cluster.groups[0]
    params = 1e9
    a = dp_sync(scatter, c, node, params, 0.0, 8, 0.0, 0.0)
    b = dp_sync(reduce_all, c, node, params, 0.0, 8, 0.0, 0.0)
    link = comm.link_for(group(c, "dpcp"), node)
    assert a.reduce_s == pytest.approx(comm.reduce_scatter_s(params * 4, c.dp, link))
    assert b.reduce_s == pytest.approx(comm.all_reduce_s(params * 4, c.dp, link))
    assert b.reduce_s > 1.9 * a.reduce_s
    assert b.gather_s == pytest.approx(a.gather_s) and a.gather_s > 0
    assert b.optimizer_s == a.optimizer_s


def test_the_estimate_is_slower_by_the_exposed_extra_reduction_and_adds_up():
    m, cluster, scatter, reduce_all, c = _setup()
    scatter = replace(scatter, overlap_grad_reduce=False)
    reduce_all = replace(reduce_all, overlap_grad_reduce=False)
    a, b = estimate(m, cluster, scatter, c), estimate(m, cluster, reduce_all, c)
    assert b.step_time_s > a.step_time_s
    # not overlapped: the whole reduction is exposed, twice the reduce-scatter's; the gather is the same
    assert b.stages[0].reduce_exposed_s > 1.9 * a.stages[0].reduce_exposed_s > 0
    assert b.stages[0].gather_exposed_s == pytest.approx(a.stages[0].gather_exposed_s)
    assert b.step_time_s - a.step_time_s == pytest.approx(
        max(s.reduce_exposed_s + s.end_s for s in b.stages)
        - max(s.reduce_exposed_s + s.end_s for s in a.stages)
    )
    assert sum(v for _, v in b.time_breakdown()) == pytest.approx(b.step_time_s, rel=1e-12)
    assert b.peak_memory_bytes == a.peak_memory_bytes
    assert cheap_bound(m, cluster, reduce_all, c) <= b.step_time_s


def test_nothing_changes_without_a_distributed_optimizer():
    m, cluster, scatter, reduce_all, c = _setup(sharding="none")
    assert estimate(m, cluster, reduce_all, c).step_time_s == estimate(m, cluster, scatter, c).step_time_s


@pytest.mark.parametrize("sharding", ["zero2", "full"])
def test_it_is_refused_with_sharded_gradients(sharding):
    m, cluster, _, reduce_all, c = _setup(sharding=sharding)
    assert any("sharded_grad_reduce" in v for v in violations(m, cluster, reduce_all, c))


def test_the_pinned_frameworks_refuse_it_and_any_runs_it():
    m, cluster, scatter, reduce_all, c = _setup()
    for name in ("megatron", "torchtitan"):
        fw = get_framework(name)
        assert any("reduce-scatters gradients" in r for r in fw.violations(m, cluster, reduce_all, c)), name
        assert not any("reduce-scatters gradients" in r for r in fw.violations(m, cluster, scatter, c))
    assert not any("reduce-scatters" in r for r in get_framework("any").violations(m, cluster, reduce_all, c))


def test_plan_files_carry_it_and_leave_it_out_by_default():
    _, _, scatter, reduce_all, _ = _setup()
    assert "sharded_grad_reduce" not in job_to_mapping(scatter)
    data = job_to_mapping(reduce_all)
    assert data["sharded_grad_reduce"] == "all_reduce"
    assert job_from_mapping(data, "plan.yaml") == reduce_all


def test_calibration_runs_of_the_software_that_all_reduced_are_priced_so():
    by_source: dict[str, set[str]] = {}
    for case in cases():
        if case.job is not None:
            by_source.setdefault(case.source, set()).add(case.job.sharded_grad_reduce)
    bloom_bf16 = {c.job.sharded_grad_reduce for c in cases() if c.job and c.run_id.startswith("bloom176b")}
    assert bloom_bf16 == {"all_reduce"}
    # the chronicles' FP16 runs used DeepSpeed's ZeRO stage 1 optimizer (reduce to the owners)
    prequel = {
        c.job.sharded_grad_reduce for c in cases() if c.job and c.run_id.startswith("bigscience_prequel_02")
    }
    assert prequel == {"reduce_scatter"}
    assert (
        by_source["Hagemann et al. 2023"] == {"all_reduce"} if "Hagemann et al. 2023" in by_source else True
    )
    assert all(
        v == {"reduce_scatter"} for k, v in by_source.items() if "Megatron-Bridge" in k or "MLPerf" in k
    )


def test_a_plan_that_sets_it_is_shown_and_a_bad_value_is_a_clear_error(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    out = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-a100", "-n", "2", "-b", "64", "-s", "2048",
        "--tp", "4", "--pp", "2", "--optimizer-sharding", "distributed", "--framework", "any",
        "--out", str(plan),
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    data = yaml.safe_load(plan.read_text())
    data["job"]["sharded_grad_reduce"] = "all_reduce"
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    shown = run_cli("estimate", "--plan", str(plan))
    assert shown.exit_code == 0, shown.stderr
    assert "all-reduced" in shown.stdout
    as_json = run_cli("estimate", "--plan", str(plan), "--json")
    assert '"sharded_grad_reduce": "all_reduce"' in as_json.stdout
    data["job"]["sharded_grad_reduce"] = "allreduce"
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    before = plan.read_text()
    bad = run_cli("estimate", "--plan", str(plan))
    assert bad.exit_code == 1 and "sharded_grad_reduce" in bad.stderr and "reduce_scatter" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout
    assert plan.read_text() == before
