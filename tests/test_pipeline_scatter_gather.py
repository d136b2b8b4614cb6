"""Pipeline sends scattered over tensor-parallel ranks (JobSpec.pipeline_scatter_gather: Megatron-LM
2021-2022's scatter/gather optimization, DeepSpeed's partitioned pipeline sends): 1/tp of the hidden
states crosses the pipeline link and the receivers all-gather them over tp; carried by plan files,
refused by the pinned frameworks and by graph models, set for the calibration runs that ran it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models import communication as comm
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.stage_terms import stage_link
from cost_models.tensors import ACT_BYTES, p2p_activation_bytes, pipeline_transfer_s
from planner.calibration.cases import cases
from planner.frameworks import get_framework
from planner.inputs.errors import ConfigError
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.plans.plan_file import job_to_mapping
from planner.profiles.hardware import load_cluster
from planner.search.bounds import cheap_bound


def _setup(tp: int = 4, sp: bool = False, pp: int = 4, gbs: int = 64):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-a100", 4)
    whole = make_job(global_batch_size=gbs, seq_length=2048)
    split = replace(whole, pipeline_scatter_gather=True)
    c = resolve(
        m,
        cluster,
        whole,
        ParallelConfig(tp=tp, pp=pp, micro_batch_size=1, sequence_parallel=sp, optimizer_sharding="none"),
    )
    return m, cluster, whole, split, c


def test_one_transfer_sends_a_tp_share_and_all_gathers_it():
    m, cluster, whole, split, c = _setup()
    node = cluster.groups[0]
    pp_link, tp_link = comm.link_for(group(c, "pp"), node), comm.link_for(group(c, "tp"), node)
    full = c.micro_batch_size * whole.seq_length * m.hidden_size * ACT_BYTES
    assert p2p_activation_bytes(m, whole, c) == full
    assert pipeline_transfer_s(m, whole, c, pp_link, tp_link) == pytest.approx(comm.p2p_s(full, pp_link))
    assert pipeline_transfer_s(m, split, c, pp_link, tp_link) == pytest.approx(
        comm.p2p_s(full / 4, pp_link) + comm.all_gather_s(full, 4, tp_link)
    )
    # the NVLink all-gather is cheaper than the 3/4 of the send it saves across nodes
    assert pipeline_transfer_s(m, split, c, pp_link, tp_link) < pipeline_transfer_s(
        m, whole, c, pp_link, tp_link
    )


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_nothing_changes_without_tp_or_with_sequence_parallelism(tp, sp):
    m, cluster, whole, split, c = _setup(tp=tp, sp=sp)
    a, b = estimate(m, cluster, whole, c), estimate(m, cluster, split, c)
    assert b.step_time_s == a.step_time_s
    assert [s.p2p_s for s in b.stages] == [s.p2p_s for s in a.stages]


def test_the_estimate_charges_the_shorter_transfer_on_the_timeline():
    m, cluster, whole, split, c = _setup(pp=8)
    a, b = estimate(m, cluster, whole, c), estimate(m, cluster, split, c)
    tp_link = comm.link_for(group(c, "tp"), cluster.groups[0])
    for s in b.stages:  # two stages a node: every second send stays on NVLink
        expected = pipeline_transfer_s(m, split, c, stage_link(cluster, c, s.stage), tp_link)
        assert s.p2p_s == pytest.approx(expected, rel=1e-12)
    # across nodes (odd stages send to the next node) the tp share is sent at network speed
    assert all(y.p2p_s < x.p2p_s / 2 for x, y in zip(a.stages, b.stages) if x.stage % 2)
    # 1F1B waits on one transfer each way per micro-batch: the shorter transfer shortens the step
    assert b.step_time_s < a.step_time_s
    assert sum(v for _, v in b.time_breakdown()) == pytest.approx(b.step_time_s, rel=1e-12)


def test_the_search_bound_stays_below_the_estimate():
    m, cluster, whole, split, c = _setup(pp=8)
    assert cheap_bound(m, cluster, split, c) <= estimate(m, cluster, split, c).step_time_s


def test_plan_files_carry_it_and_leave_it_out_by_default():
    _, _, whole, split, _ = _setup()
    assert "pipeline_scatter_gather" not in job_to_mapping(whole)
    data = job_to_mapping(split)
    assert data["pipeline_scatter_gather"] is True
    assert job_from_mapping(data, "plan.yaml").pipeline_scatter_gather is True
    assert job_from_mapping(job_to_mapping(whole), "plan.yaml") == whole


def test_the_pinned_frameworks_refuse_it_and_any_runs_it():
    m, cluster, whole, split, c = _setup()
    for name in ("megatron", "torchtitan"):
        fw = get_framework(name)
        reasons = fw.violations(m, cluster, split, c)
        assert any("whole hidden states" in r for r in reasons), (name, reasons)
        assert not any("whole hidden states" in r for r in fw.violations(m, cluster, whole, c))
    assert not any("whole hidden states" in r for r in get_framework("any").violations(m, cluster, split, c))


def test_graph_models_refuse_it():
    from cost_models.graph_units import unit_costs
    from planner.inputs.graph_model import load_graph_model

    g = load_graph_model("t5-11b")
    _, cluster, whole, split, _ = _setup()
    c = ParallelConfig(tp=1, pp=2, micro_batch_size=1)
    with pytest.raises(ConfigError, match="pipeline_scatter_gather"):
        unit_costs(g, split, c, cluster.groups[0])


def test_calibration_runs_of_the_software_that_scattered_are_priced_so():
    by_source: dict[str, set[bool]] = {}
    for case in cases():
        if case.job is not None:
            by_source.setdefault(case.source, set()).add(case.job.pipeline_scatter_gather)
    assert by_source["Narayanan et al. 2021"] == {True}
    assert by_source["Korthikanti et al. 2022"] == {True}
    assert all(v == {True} for k, v in by_source.items() if k.startswith("BigScience"))
    # DLPerf's Megatron-LM predates the optimization; Megatron-Core sends whole tensors
    assert by_source["DLPerf Megatron-LM GPT benchmark"] == {False}
    assert all(v == {False} for k, v in by_source.items() if "Megatron-Bridge" in k or "NeMo" in k)


def test_estimate_of_a_plan_that_sets_it_shows_it(run_cli, tmp_path):
    import yaml

    plan = tmp_path / "plan.yaml"
    out = run_cli(
        "search",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-a100",
        "-n",
        "2",
        "-b",
        "64",
        "-s",
        "2048",
        "--tp",
        "4",
        "--pp",
        "2",
        "--framework",
        "any",
        "--out",
        str(plan),
    )
    assert out.exit_code == 0, out.stderr
    data = yaml.safe_load(plan.read_text())
    data["job"]["pipeline_scatter_gather"] = True
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    shown = run_cli("estimate", "--plan", str(plan))
    assert shown.exit_code == 0, shown.stderr
    assert "scattered over tp" in shown.stdout
    as_json = run_cli("estimate", "--plan", str(plan), "--json")
    assert '"pipeline_scatter_gather": true' in as_json.stdout
    # a non-boolean value is a clear error naming the key, not a traceback
    data["job"]["pipeline_scatter_gather"] = "yes"
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    bad = run_cli("estimate", "--plan", str(plan))
    assert bad.exit_code == 1 and "pipeline_scatter_gather" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout
