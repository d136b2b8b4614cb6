"""Megatron's rank layouts (``ParallelConfig.rank_order``): the default ``tp-cp-ep-dp-pp`` and
``tp-cp-ep-pp-dp`` (``--use-tp-pp-dp-mapping``). Groups follow Megatron-Core's RankGenerator
(expected rank lists below were printed by megatron-core 0.19.2's ``RankGenerator.get_ranks``),
the cost model prices where they sit, and the knob travels through plan files, the CLI, the search
and Megatron import and export."""

from __future__ import annotations

import json

import pytest

from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate
from cost_models.parallel import PP_DP, RANK_ORDERS, ParallelConfig, account_for_split
from cost_models.placement import group, group_ranks, span
from planner.frameworks.megatron import MEGATRON
from planner.frameworks.torchtitan import TORCHTITAN
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs, config_from_mapping, config_to_mapping
from planner.profiles.hardware import load_cluster
from planner.resilience.failures import coords, rank_of

# (tp, cp, pp, dp, optimizer instances) -> rank 0's groups, from megatron-core 0.19.2's
# RankGenerator(order=...).get_ranks("pp" / "dp" / "dp-cp"), the instance the first
# dp-cp // instances of the dp-cp list and the inter-instance group every such step.
MEGATRON_GROUPS = {
    ("tp-cp-ep-dp-pp", (2, 2, 2, 4, 2)): dict(
        pp=[0, 16], dp=[0, 4, 8, 12], dpcp=[0, 2, 4, 6, 8, 10, 12, 14], shard=[0, 2, 4, 6], replicate=[0, 8]
    ),
    ("tp-cp-ep-dp-pp", (2, 4, 2, 2, 4)): dict(
        pp=[0, 16], dp=[0, 8], dpcp=[0, 2, 4, 6, 8, 10, 12, 14], shard=[0, 2], replicate=[0, 4, 8, 12]
    ),
    ("tp-cp-ep-pp-dp", (2, 2, 2, 4, 2)): dict(
        pp=[0, 4],
        dp=[0, 8, 16, 24],
        dpcp=[0, 2, 8, 10, 16, 18, 24, 26],
        shard=[0, 2, 8, 10],
        replicate=[0, 16],
    ),
    ("tp-cp-ep-pp-dp", (2, 4, 2, 2, 4)): dict(
        pp=[0, 8], dp=[0, 16], dpcp=[0, 2, 4, 6, 16, 18, 20, 22], shard=[0, 2], replicate=[0, 4, 16, 20]
    ),
    ("tp-cp-ep-pp-dp", (2, 2, 2, 2, 1)): dict(pp=[0, 4], dp=[0, 8], dpcp=[0, 2, 8, 10]),
}


@pytest.mark.parametrize("key", sorted(MEGATRON_GROUPS))
def test_groups_are_megatrons(key):
    order, (tp, cp, pp, dp, inst) = key
    c = ParallelConfig(tp=tp, cp=cp, pp=pp, dp=dp, optimizer_instances=inst, rank_order=order)
    for dim, ranks in MEGATRON_GROUPS[key].items():
        assert group_ranks(c, dim, 0) == ranks, dim


def test_groups_match_megatron_core_when_installed():
    """Against megatron-core's own RankGenerator over a sweep (skipped without megatron-core)."""
    ps = pytest.importorskip("megatron.core.parallel_state")
    for order in RANK_ORDERS:
        for tp, cp, pp, dp in ((1, 1, 4, 4), (2, 1, 2, 4), (2, 2, 4, 2), (4, 2, 2, 2), (1, 4, 2, 4)):
            gen = ps.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
            c = ParallelConfig(tp=tp, cp=cp, pp=pp, dp=dp, rank_order=order)
            for dim, name in (("pp", "pp"), ("dp", "dp"), ("dpcp", "dp-cp"), ("tp", "tp"), ("cp", "cp")):
                want = next(r for r in gen.get_ranks(name) if 0 in r)
                assert group_ranks(c, dim, 0) == want, (order, tp, cp, pp, dp, dim)


def test_expert_groups_put_pp_between_ep_and_dp():
    c = ParallelConfig(tp=2, cp=1, pp=2, dp=4, ep=2, etp=1, rank_order=PP_DP)
    assert c.expert_dp == 4
    assert group_ranks(c, "ep", 0) == [0, 1]
    assert group_ranks(c, "edp", 0) == [0, 4, 8, 12]
    default = c.with_(rank_order=RANK_ORDERS[0])
    assert group_ranks(default, "edp", 0) == [0, 2, 4, 6]


def test_a_pipeline_inside_an_nvl72_rack():
    """tp 4 x pp 2 = 8 ranks per replica: with the tp-pp-dp mapping a pipeline's stages share one
    NVLink domain and the data-parallel group leaves it with 9 members per 72-GPU domain (one per
    pipeline); Megatron's default order sends pipeline traffic over the network and keeps 18
    data-parallel members per domain."""
    node = load_cluster("gb200-nvl72", 64).groups[0]
    pp_dp = ParallelConfig(tp=4, pp=2, dp=32, rank_order=PP_DP)
    default = pp_dp.with_(rank_order=RANK_ORDERS[0])
    assert not span(group(pp_dp, "pp"), node).crosses_network
    assert span(group(default, "pp"), node).crosses_network
    assert span(group(pp_dp, "dpcp"), node).members_per_domain == 9
    assert span(group(default, "dpcp"), node).members_per_domain == 18
    # With cp 2 the data-parallel group holds blocks of two cp ranks; 64-rank pipelines do not
    # tile a 72-GPU domain, so they are priced as leaving it.
    two = ParallelConfig(tp=4, cp=2, pp=8, dp=16, rank_order=PP_DP)
    assert group(two, "dpcp").inner == 2
    assert span(group(two, "dpcp"), node).members_per_domain == 2
    assert span(group(two, "pp"), node).crosses_network


def test_the_layout_changes_the_prediction_and_the_breakdown_sums():
    m, spec = load_model("llama3.1-405b"), load_cluster("gb200-nvl72", 624)
    job = make_job(global_batch_size=1248, seq_length=8192, precision="fp8")
    base = ParallelConfig(
        tp=4,
        pp=8,
        cp=2,
        vpp=8,
        schedule="interleaved",
        layers_per_stage=account_for_split(126, 64, True, True),
    )
    a = estimate(m, spec, job, resolve(m, spec, job, base))
    b = estimate(m, spec, job, resolve(m, spec, job, base.with_(rank_order=PP_DP)))
    # Pipeline sends move onto NVLink (a smaller bubble), the data-parallel reduction onto the network.
    terms_a, terms_b = dict(a.time_breakdown()), dict(b.time_breakdown())
    assert terms_b["pipeline bubble"] < terms_a["pipeline bubble"]
    assert terms_b["exposed data-parallel communication"] > terms_a["exposed data-parallel communication"]
    assert terms_a["compute"] == pytest.approx(terms_b["compute"])
    for e in (a, b):
        assert sum(v for _, v in e.time_breakdown()) == pytest.approx(e.step_time_s, rel=1e-9)


def test_conditions():
    m = load_model("llama3-70b")
    job = make_job(global_batch_size=256, seq_length=4096)
    c = ParallelConfig(tp=8, pp=2, dp=8, rank_order=PP_DP)
    assert not violations(m, load_cluster("dgx-h100", 16), job, c)
    assert any(
        "not in" in v for v in violations(m, load_cluster("dgx-h100", 16), job, c.with_(rank_order="x"))
    )
    mesh = load_cluster("dgx1-v100", 16)
    small = load_model("gpt-1.7b")
    job_small = make_job(global_batch_size=256, seq_length=2048, precision="fp16")
    v = violations(small, mesh, job_small, ParallelConfig(tp=2, pp=2, dp=32, rank_order=PP_DP))
    assert any("NVSwitch nodes only" in x for x in v)
    # An instance of 3 ranks over cp 2 does not map onto two strides.
    odd = ParallelConfig(tp=8, pp=2, cp=2, dp=3, optimizer_instances=2, rank_order=PP_DP)
    assert odd.shard_degree == 3
    assert any(
        "multiple or a divisor of cp" in x for x in violations(m, load_cluster("dgx-h100", 12), job, odd)
    )


def test_mixed_gpu_types_keep_megatrons_default(a100_h100_cluster):
    spec = a100_h100_cluster
    m, job = load_model("llama3-8b"), make_job(global_batch_size=64, seq_length=4096)
    v = violations(m, spec, job, ParallelConfig(tp=8, pp=2, dp=2, rank_order=PP_DP))
    assert any("node groups of different GPU types" in x for x in v)


def test_megatron_runs_it_where_the_expert_grid_agrees():
    """megatron-core 0.19.2 asserts that with pp > 1 and the tp-pp-dp mapping the dense and expert
    data-parallel sizes agree: a dense model's expert grid has dp * cp ranks, so cp must be 1."""
    m, spec = load_model("llama3-70b"), load_cluster("gb200-nvl72", 64)
    job = make_job(global_batch_size=256, seq_length=8192)
    ok = resolve(m, spec, job, ParallelConfig(tp=4, pp=4, rank_order=PP_DP))
    assert not MEGATRON.violations(m, spec, job, ok)
    cp2 = resolve(m, spec, job, ParallelConfig(tp=4, pp=4, cp=2, rank_order=PP_DP))
    assert any("expert tp x ep must equal tp x cp" in v for v in MEGATRON.violations(m, spec, job, cp2))
    assert any("lays ranks out" in v for v in TORCHTITAN.violations(m, spec, job, ok))


def test_megatron_export_import_and_plan_files():
    m, spec = load_model("llama3-70b"), load_cluster("gb200-nvl72", 64)
    job = make_job(global_batch_size=256, seq_length=8192)
    c = resolve(m, spec, job, ParallelConfig(tp=4, pp=4, rank_order=PP_DP))
    words = " ".join(
        f if v is None else f"{f} {v}"
        for f, v in megatron_args(PlanInputs(m, spec, job, c, framework="megatron"))
    )
    assert "--use-tp-pp-dp-mapping" in words.split()
    back = parse_megatron(words, "args.txt", spec.num_gpus)
    assert back.config.rank_order == PP_DP and "--use-tp-pp-dp-mapping" not in back.unknown
    plain = parse_megatron(words.replace("--use-tp-pp-dp-mapping", ""), "args.txt", spec.num_gpus)
    assert plain.config.rank_order == RANK_ORDERS[0]
    data = config_to_mapping(c)
    assert data["rank_order"] == PP_DP and config_from_mapping(data, "plan.yaml").rank_order == PP_DP
    assert "rank_order" not in config_to_mapping(c.with_(rank_order=RANK_ORDERS[0]))


def test_failure_coordinates_follow_the_layout():
    c = ParallelConfig(tp=2, cp=2, pp=2, dp=4, rank_order=PP_DP)
    assert coords(c, 4) == (0, 0, 0, 1)  # the next pipeline stage, not the next replica
    assert coords(c, 8) == (0, 0, 1, 0)
    assert all(rank_of(c, *coords(c, r)) == r for r in range(c.world_size))
    d = c.with_(rank_order=RANK_ORDERS[0])
    assert coords(d, 4) == (0, 0, 1, 0)


SEARCH = ("search", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "64", "-b", "256", "-s", "8192")


def test_cli_estimate_and_search(run_cli, tmp_path):
    est = ("estimate", *SEARCH[1:], "--tp", "4", "--pp", "4")
    out = run_cli(*est, "--rank-order", PP_DP, "--json")
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["config"]["rank_order"] == PP_DP
    assert "rank_order" not in json.loads(run_cli(*est, "--json").stdout)["config"]
    assert "ranks tp-cp-ep-pp-dp" in run_cli(*est, "--rank-order", PP_DP).stdout
    bad = run_cli(*est, "--rank-order", "pp-dp")
    assert bad.exit_code == 2 and "allowed values" in bad.stderr and "Traceback" not in bad.stderr
    plan = tmp_path / "plan.yaml"
    r = run_cli(
        *SEARCH,
        "--tp",
        "4",
        "--pp",
        "4",
        "--cp",
        "1",
        "--rank-order",
        PP_DP,
        "--top",
        "2",
        "--json",
        "--out",
        str(plan),
        "-q",
    )
    assert r.exit_code == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert plans and all(p["rank_order"] == PP_DP for p in plans)
    launch = tmp_path / "launch"
    assert run_cli("export", "megatron", str(plan), "--out", str(launch), "-q").exit_code == 0
    assert "--use-tp-pp-dp-mapping" in (launch / "megatron_args.txt").read_text().split()
    titan = run_cli(*SEARCH, "--rank-order", PP_DP, "--framework", "torchtitan")
    assert titan.exit_code == 2 and "--rank-order" in titan.stderr


def test_the_mapping_flag_does_not_displace_the_sharding_flags():
    """An FSDP plan in the tp-pp-dp layout exports Megatron-FSDP's flags and the mapping flag."""
    m, spec = load_model("llama3-8b"), load_cluster("dgx-h100", 2)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = resolve(m, spec, job, ParallelConfig(tp=2, pp=1, optimizer_sharding="full", rank_order=PP_DP))
    flags = [f for f, _ in megatron_args(PlanInputs(m, spec, job, c, framework="megatron"))]
    assert "--use-megatron-fsdp" in flags and "--use-tp-pp-dp-mapping" in flags
