"""The MoE runtime a job runs with (JobSpec.moe_dispatcher, moe_a2a_overlap, cuda_graph_scope):
validated on input, written to and read back from plan files, priced, on the command line, and
refused by a framework that cannot launch it."""

import json

import pytest
import yaml

from planner.inputs.errors import SpecError
from planner.inputs.jobs import job_from_mapping, make_job

MOE = ("--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--nodes", "4", "--global-batch-size", "128")
LAYOUT = ("--seq-len", "4096", "--tp", "1", "--pp", "2", "--vpp", "2", "--ep", "8", "--micro-batch-size", "1")


def test_make_job_validates_dispatcher_and_graph_scope():
    with pytest.raises(SpecError, match="moe_dispatcher 'deepep' is not allowed; allowed values: alltoall"):
        make_job(global_batch_size=8, seq_length=128, moe_dispatcher="deepep")
    with pytest.raises(
        SpecError, match="cuda_graph_scope 'layers' is not allowed; allowed values: none, full"
    ):
        make_job(global_batch_size=8, seq_length=128, cuda_graph_scope=("layers",))
    with pytest.raises(SpecError, match="moe_preprocess needs moe_router"):
        make_job(global_batch_size=8, seq_length=128, cuda_graph_scope=("moe_preprocess",))
    # order and duplicates do not matter; "none" is no graphs
    job = make_job(global_batch_size=8, seq_length=128, cuda_graph_scope=("moe_router", "attn", "attn"))
    assert job.cuda_graph_scope == ("attn", "moe_router")
    assert make_job(global_batch_size=8, seq_length=128, cuda_graph_scope="none").cuda_graph_scope == ()


def test_plan_job_section_round_trips_and_old_plans_read_as_before():
    from planner.plans.plan_file import job_to_mapping

    job = make_job(
        global_batch_size=8,
        seq_length=128,
        moe_dispatcher="flex",
        moe_a2a_overlap=True,
        cuda_graph_scope=("attn", "moe_router", "moe_preprocess"),
    )
    data = job_to_mapping(job)
    assert data["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]
    assert job_from_mapping(yaml.safe_load(yaml.safe_dump(data)), "plan.yaml") == job
    plain = job_to_mapping(make_job(global_batch_size=8, seq_length=128))
    assert not {"moe_dispatcher", "moe_a2a_overlap", "cuda_graph_scope"} & set(plain)
    with pytest.raises(SpecError, match="plan.yaml: key 'job.moe_dispatcher': 'x' is not allowed"):
        job_from_mapping({**plain, "moe_dispatcher": "x"}, "plan.yaml")


def test_estimate_prices_the_runtime_and_reports_it(run_cli):
    base = run_cli("estimate", *MOE, *LAYOUT, "--json")
    assert base.exit_code == 0, base.stderr
    tuned = run_cli(
        "estimate",
        *MOE,
        *LAYOUT,
        "--moe-dispatcher",
        "flex",
        "--moe-a2a-overlap",
        "--cuda-graph-scope",
        "attn,moe_router,moe_preprocess",
        "--json",
    )
    assert tuned.exit_code == 0, tuned.stderr
    a, b = json.loads(base.stdout), json.loads(tuned.stdout)
    assert b["job"]["moe_dispatcher"] == "flex" and b["job"]["moe_a2a_overlap"] is True
    assert b["job"]["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]
    assert b["step_time_s"] < a["step_time_s"]


def test_bad_runtime_flags_are_clear_errors(run_cli, tmp_path):
    res = run_cli("estimate", *MOE, *LAYOUT, "--moe-dispatcher", "deepep")
    assert res.exit_code == 1 and "moe_dispatcher 'deepep' is not allowed" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli("estimate", *MOE, *LAYOUT, "--cuda-graph-scope", "moe_preprocess")
    assert res.exit_code == 1 and "needs moe_router" in res.stderr
    plan = tmp_path / "p.yaml"
    assert run_cli("search", *MOE, "--seq-len", "4096", "--ep", "8", "--out", str(plan)).exit_code == 0
    res = run_cli("estimate", "--plan", str(plan), "--moe-a2a-overlap")
    assert res.exit_code == 2 and "--plan) gives the model" in res.stderr


def test_frameworks_refuse_what_they_cannot_launch():
    from cost_models.parallel import ParallelConfig
    from planner.frameworks import get_framework
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100", 4)
    graphs = make_job(global_batch_size=128, seq_length=4096, cuda_graph_scope=("full",))
    c = ParallelConfig(tp=1, pp=2, dp=16, ep=8, vpp=2, micro_batch_size=1)
    assert any("CUDA graphs" in r for r in get_framework("torchtitan").violations(m, cluster, graphs, c))
    assert not get_framework("megatron").violations(m, cluster, graphs, c)
    overlap = make_job(global_batch_size=128, seq_length=4096, moe_a2a_overlap=True)
    meg = get_framework("megatron")
    assert not meg.violations(m, cluster, overlap, c)
    no_vpp = ParallelConfig(tp=1, pp=2, dp=16, ep=8, micro_batch_size=1)
    assert any("virtual stages" in r for r in meg.violations(m, cluster, overlap, no_vpp))
    no_ep = ParallelConfig(tp=1, pp=2, dp=16, ep=1, vpp=2, micro_batch_size=1)
    assert any("ep > 1" in r for r in meg.violations(m, cluster, overlap, no_ep))
    full = ParallelConfig(tp=1, pp=2, dp=16, ep=8, vpp=2, micro_batch_size=1, recompute="full")
    assert any("full recompute" in r for r in meg.violations(m, cluster, overlap, full))
