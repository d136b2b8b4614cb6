"""Per-unit FSDP prefetch exposure (cost_models/fsdp.py; Zhao et al. 2023, arXiv:2304.11277)."""

import pytest

from cost_models.fsdp import pass_exposure


def test_compute_bound_units_expose_first_gather_and_last_scatter_only():
    # 8 units, gather 1 ms, reduce-scatter 1 ms, 10 ms of compute per unit each way: every
    # prefetch hides, only the first gather (forward) and the last reduce-scatter (backward) show.
    px = pass_exposure(8, 1e-3, 1e-3, 80e-3, 80e-3, slowdown=0.0)
    assert px.forward_s == pytest.approx(1e-3)
    assert px.backward_s == pytest.approx(1e-3)
    assert px.comm_s == pytest.approx(15 * 1e-3 + 8 * 1e-3)


def test_communication_bound_units_expose_the_excess_per_unit():
    # gather 3 ms vs 2 ms forward per unit: (U-1) * 1 ms exposed beyond the first gather;
    # backward: gather + scatter 6 ms vs 4 ms per unit -> (U-1) * 2 ms + last scatter 3 ms.
    px = pass_exposure(4, 3e-3, 3e-3, 8e-3, 16e-3, slowdown=0.0)
    assert px.forward_s == pytest.approx(3e-3 + 3 * 1e-3)
    assert px.backward_s == pytest.approx(3 * 2e-3 + 3e-3)


def test_per_unit_exposure_exceeds_whole_pass_overlap():
    # The same total communication hidden under the whole pass would look free; per unit the
    # first gather and the last reduce-scatter can never hide.
    px = pass_exposure(32, 0.5e-3, 0.5e-3, 100e-3, 200e-3, slowdown=0.0)
    assert px.forward_s > 0 and px.backward_s > 0


def test_zero2_has_no_gathers_and_slowdown_charges_hidden_time():
    px = pass_exposure(4, 0.0, 1e-3, 8e-3, 16e-3, slowdown=0.0)
    assert px.forward_s == 0.0 and px.backward_s == pytest.approx(1e-3)
    slow = pass_exposure(4, 0.0, 1e-3, 8e-3, 16e-3, slowdown=0.2)
    assert slow.backward_s == pytest.approx(1e-3 + 0.2 * 3 * 1e-3)


def test_cli_estimate_hsdp_and_plan_round_trip(run_cli):
    import json

    from cost_models.parallel import ParallelConfig
    from planner.plans.plan_file import config_from_mapping, config_to_mapping

    base = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "4", "-b", "64", "-s", "4096")
    full = ("--optimizer-sharding", "full")
    r = run_cli(*base, *full, "--fsdp-shard", "8", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["config"]["fsdp_shard"] == 8
    plain = json.loads(run_cli(*base, *full, "--json").stdout)
    assert "fsdp_shard" not in plain["config"]
    bad = run_cli(*base, *full, "--fsdp-shard", "3")
    assert bad.exit_code == 1 and "fsdp_shard" in bad.stderr
    assert run_cli(*base, "--fsdp-shard", "8").exit_code == 1
    assert run_cli(*base, *full, "--fsdp-shard", "0").exit_code == 2
    c = ParallelConfig(tp=1, pp=1, dp=32, micro_batch_size=1, optimizer_sharding="full", fsdp_shard=8)
    assert config_from_mapping(config_to_mapping(c), "plan.yaml").fsdp_shard == 8
    # timeline and bubbles take the same layout flags: the HSDP step they time is the estimate's
    hsdp = json.loads(r.stdout)["step_time_s"]
    assert hsdp != plain["step_time_s"]
    for command, key in (("timeline", "step_time_s"), ("bubbles", "iteration_time_s")):
        t = run_cli(command, *base[1:], *full, "--fsdp-shard", "8", "--json")
        assert t.exit_code == 0, t.stderr
        assert json.loads(t.stdout)[key] == pytest.approx(hsdp, rel=1e-3)


def test_only_torchtitan_is_planned_with_hsdp():
    from cost_models.parallel import ParallelConfig
    from planner.frameworks import get_framework
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=64, seq_length=4096)
    c = ParallelConfig(tp=1, pp=1, dp=32, micro_batch_size=1, optimizer_sharding="full", fsdp_shard=8)
    assert any("HSDP" in v for v in get_framework("megatron").violations(m, cluster, job, c))
    assert not get_framework("torchtitan").violations(m, cluster, job, c)


def test_torchtitan_search_space_offers_hsdp_inside_a_node():
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster
    from planner.search.space import Restrictions, enumerate_shapes

    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=64, seq_length=4096)
    titan = list(enumerate_shapes(m, cluster, job, Restrictions(framework="torchtitan", tp=(1,), pp=(1,))))
    assert {c.fsdp_shard for c in titan if c.optimizer_sharding == "full"} == {0, 8}
    mega = list(enumerate_shapes(m, cluster, job, Restrictions(framework="megatron", tp=(1,), pp=(1,))))
    assert all(c.fsdp_shard == 0 for c in mega)
