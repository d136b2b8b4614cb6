"""Resilience planning (issue 15): whatif strategies, nonuniform TP, Young/Daly, goodput, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cost_models.parallel import ParallelConfig
from planner import api
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.plans.plan_file import PlanInputs, plan_document, write_plan
from planner.profiles.hardware import load_cluster
from planner.resilience import goodput as gp
from planner.resilience.failures import FailureSpec, coords, lower_tp, place, rank_of
from planner.resilience.spares import plan_goodput
from planner.resilience.strategies import STRATEGIES, check_never_faster, whatif
from planner.search.chain import search
from planner.search.space import Restrictions


def _inputs(model, template, nodes, gbs, seq, config=None):
    """A plan's inputs: ``config`` resolved, or the search's best plan (megatron, 2 GiB headroom)."""
    m, cl = load_model(model), load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    if config is None:
        best = search(m, cl, job, Restrictions(memory_headroom_bytes=2 * 2**30), top_k=1).plans[0]
        config = best.estimate.config
    est = api.estimate_config(api.Problem(m, cl, job), config)
    return PlanInputs(m, cl, job, est.config, (), "megatron"), est


@pytest.fixture(scope="module")
def gpt3_tp8():
    """GPT-3 175B at Megatron's tp 8 x pp 8 on 128 DGX A100 nodes, 1F1B."""
    return _inputs("gpt3-175b", "dgx-a100", 128, 1536, 2048, ParallelConfig(tp=8, pp=8, micro_batch_size=1))


@pytest.fixture(scope="module")
def searched_plans():
    """Best plans of the search: GPT-3 on 128 DGX A100, Llama 3.1 405B on 144 GB200 NVL72 trays."""
    return [
        _inputs("gpt3-175b", "dgx-a100", 128, 1536, 2048),
        _inputs("llama3.1-405b", "gb200-nvl72", 144, 512, 8192),
    ]


def test_rank_coordinates_round_trip():
    c = ParallelConfig(tp=4, pp=3, cp=2, dp=5)
    for r in range(c.world_size):
        assert rank_of(c, *coords(c, r)) == r


def test_failures_spread_over_replicas():
    c = ParallelConfig(tp=8, pp=2, dp=4)
    d = place(c, 8, FailureSpec(gpus=3))
    assert d.replicas == (0, 1, 2)
    assert all(n == 7 for _, n in d.survivors)
    whole = place(c, 8, FailureSpec(nodes=2))
    assert len(whole.failed_nodes) == 2 and all(n == 0 for _, n in whole.survivors)
    assert len(set(whole.replicas)) == 2


def test_lower_tp_respects_model_shapes():
    llama = load_model("llama3.1-405b")  # 128 heads, 8 query groups
    assert lower_tp(llama, ParallelConfig(tp=8), 7) == 4
    assert lower_tp(llama, ParallelConfig(tp=16), 12) == 8
    gpt3 = load_model("gpt3-175b")  # 96 heads: 6 divides them
    assert lower_tp(gpt3, ParallelConfig(tp=8), 7) == 6
    assert lower_tp(gpt3, ParallelConfig(tp=8), 0) == 0


def _names(w) -> set[str]:
    return {s.name for s in w.strategies}


def test_whatif_gpt3_on_dgx_a100_all_strategies(gpt3_tp8):
    inputs, healthy = gpt3_tp8
    w = whatif(inputs, FailureSpec(gpus=1), healthy)
    assert _names(w) == set(STRATEGIES)
    assert all(s.feasible for s in w.strategies)
    assert not check_never_faster(w)


def test_ntp_beats_drop_replica_when_one_gpu_of_tp8_fails(gpt3_tp8):
    inputs, healthy = gpt3_tp8
    w = whatif(inputs, FailureSpec(gpus=1), healthy)
    by = {(s.name, s.variant): s for s in w.strategies}
    ntp = by[("nonuniform-tp", "rebalanced-batch")]
    drop = by[("drop-replica", "keep-global-batch")]
    assert ntp.replicas[1][0] == 7  # 7 survivors, 96 heads split unevenly (padded to 98)
    assert ntp.tokens_per_s > drop.tokens_per_s
    # Without rebalancing the step waits for the slow replica: worse than dropping it.
    assert by[("nonuniform-tp", "same-batch")].tokens_per_s < drop.tokens_per_s


def test_scale_up_domain_nvl72_tray_failure_keeps_ntp_alive():
    """On NVL72 a 4-GPU tray is a quarter of a tp 16 group: NTP runs the replica at tp 8; on
    8-GPU DGX nodes a node failure takes the whole tp 8 group and NTP can only drop it."""
    cfg = ParallelConfig(tp=16, pp=9, micro_batch_size=1)
    inputs, healthy = _inputs("llama3.1-405b", "gb200-nvl72", 144, 512, 8192, cfg)
    w = whatif(inputs, FailureSpec(nodes=1), healthy)
    assert _names(w) == set(STRATEGIES)
    by = {(s.name, s.variant): s for s in w.strategies}
    ntp = by[("nonuniform-tp", "rebalanced-batch")]
    assert ntp.replicas[-1][0] == 12  # 12 of 16 survive; 128 heads split unevenly (padded to 132)
    assert ntp.tokens_per_s > by[("drop-replica", "keep-global-batch")].tokens_per_s
    assert ntp.relative < 1.0

    dgx, dgx_healthy = _inputs("gpt3-175b", "dgx-a100", 128, 1536, 2048, ParallelConfig(tp=8, pp=8))
    w2 = whatif(dgx, FailureSpec(nodes=1), dgx_healthy)
    by2 = {(s.name, s.variant): s for s in w2.strategies}
    assert (
        by2[("nonuniform-tp", "rebalanced-batch")].replicas
        == by2[("drop-replica", "keep-global-batch")].replicas
    )


@pytest.mark.parametrize("failure", [FailureSpec(gpus=1), FailureSpec(gpus=3), FailureSpec(nodes=2)])
def test_no_strategy_beats_the_healthy_best_plan(searched_plans, failure):
    for inputs, healthy in searched_plans:
        w = whatif(inputs, failure, healthy)
        assert _names(w) == set(STRATEGIES)
        assert not check_never_faster(w), (inputs.model.name, failure)
        for s in w.strategies:
            assert math.isfinite(s.tokens_per_s) and s.relative <= 1.0 + 1e-9


def test_young_and_daly_closed_forms():
    delta, m = 60.0, 3.0 * 3600
    assert gp.young_interval_s(delta, m) == pytest.approx(math.sqrt(2 * delta * m))
    x = delta / (2 * m)
    daly = math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    assert gp.daly_interval_s(delta, m) == pytest.approx(daly)
    assert gp.daly_interval_s(3 * m, m) == m  # delta >= 2M: checkpoint every MTBF
    # Daly's interval maximises Daly's useful fraction (to first order): a grid finds no better one.
    best = gp.useful_fraction(daly, delta, 300.0, m)
    assert all(gp.useful_fraction(t, delta, 300.0, m) <= best + 1e-4 for t in range(120, 20000, 60))
    # No failures: only the checkpoint overhead tau / (tau + delta) remains.
    assert gp.useful_fraction(600.0, 60.0, 300.0, 1e15) == pytest.approx(600.0 / 660.0, rel=1e-6)


def test_llama3_failure_rate_and_checkpoint_size():
    rate = gp.DEFAULT_GPU_FAILURE_RATE_PER_H
    assert rate == pytest.approx(419 / (54 * 24 * 16384))
    fm = gp.FailureModel()
    assert gp.job_mtbf_s(16384, fm) / 3600 == pytest.approx(54 * 24 / 419)
    model, job = load_model("llama3.1-405b"), make_job(global_batch_size=2048, seq_length=8192)
    assert gp.checkpoint_bytes(model, job) == pytest.approx(model.params_total * 14)


@pytest.mark.parametrize(
    "dtypes, per_param",
    [
        ({}, 14),  # bf16 weight + fp32 master + two fp32 moments
        ({"grad_dtype": "bf16"}, 14),  # the step's fp32 copy of 16-bit gradients is not saved (was 18)
        ({"grad_dtype": "bf16", "optimizer_state_dtype": "bf16"}, 10),
    ],
)
def test_checkpoint_holds_no_gradient(dtypes, per_param):
    """A checkpoint saves weights and optimizer state, whatever the gradients' dtype: the fp32
    gradient copy that memory prices for 16-bit gradients (bytes_per_param) never reaches storage."""
    model = load_model("llama3-8b")
    job = make_job(global_batch_size=64, seq_length=4096, **dtypes)
    assert gp.checkpoint_bytes(model, job) == pytest.approx(model.params_total * per_param)


def test_lora_checkpoint_saves_the_adapters_and_a_restore_reads_the_base_too():
    """A LoRA job's checkpoint holds its adapters and their optimizer state only (Megatron-Bridge's
    adapter filter on save), and a restart also reads the 16-bit base weights from the pretrained
    checkpoint (its PEFT hook loads them on every start). Oracle: Llama 3 8B's rank-16 adapters on
    linear_qkv and linear_proj, counted by hand from the model's widths."""
    model = load_model("llama3-8b")
    job = make_job(global_batch_size=64, seq_length=4096, finetune="lora", lora_rank=16)
    h, q, kv, r = 4096, 32 * 128, 8 * 128, 16
    per_layer = (h * r + r * (q + 2 * kv)) + (q * r + r * h)  # qkv: A h->r, B r->q+2kv; proj: A q->r, B r->h
    adapters = 32 * per_layer
    assert adapters == 9_437_184
    assert gp.checkpoint_bytes(model, job) == pytest.approx(adapters * 14)
    assert gp.restore_bytes(model, job) == pytest.approx(adapters * 14 + model.params_total * 2)
    full = make_job(global_batch_size=64, seq_length=4096)
    assert gp.restore_bytes(model, full) == gp.checkpoint_bytes(model, full)
    ck = gp.checkpointing(model, job, 64, gp.FailureModel())
    assert ck.save_s == pytest.approx(adapters * 14 / gp.DEFAULT_STORAGE_BYTES_PER_S)
    assert ck.restore_s == pytest.approx(gp.restore_bytes(model, job) / gp.DEFAULT_STORAGE_BYTES_PER_S)
    assert ck.restore_s > 100 * ck.save_s


def test_poisson_and_availability():
    pmf = gp.poisson_pmf(3.0, 60)
    assert sum(pmf) == pytest.approx(1.0)
    assert sum(k * p for k, p in enumerate(pmf)) == pytest.approx(3.0)
    fm = gp.FailureModel()
    no_spares = gp.availability(2048, 8, 0, 128, 1, fm)
    assert 0.0 < no_spares < 1.0
    assert gp.availability(2048, 8, 64, 128, 1, fm) > no_spares


def test_goodput_more_failures_less_goodput(gpt3_tp8):
    inputs, _ = gpt3_tp8
    low = plan_goodput(inputs, gp.FailureModel())
    high = plan_goodput(
        inputs, gp.FailureModel(gpu_failure_rate_per_h=10 * gp.DEFAULT_GPU_FAILURE_RATE_PER_H)
    )
    assert 0 < high.goodput_fraction < low.goodput_fraction < 1
    assert high.checkpointing.interval_s < low.checkpointing.interval_s
    assert low.best in low.options


# ------------------------------------------------------------------------------------------------
# CLI


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory, gpt3_tp8):
    d = tmp_path_factory.mktemp("plans")
    inputs, _ = gpt3_tp8
    gpt3 = d / "gpt3.yaml"
    write_plan(gpt3, plan_document(inputs, {}, None))
    nvl = d / "llama405.yaml"
    l_inputs, _ = _inputs("llama3.1-405b", "gb200-nvl72", 144, 512, 8192, ParallelConfig(tp=16, pp=9))
    write_plan(nvl, plan_document(l_inputs, {}, None))
    return gpt3, nvl


def test_cli_whatif_json_on_both_scale_up_domains(run_cli, plan_files):
    for path in plan_files:
        r = run_cli("whatif", str(path), "--fail-nodes", "1", "--json")
        assert r.exit_code == 0, r.stderr
        d = json.loads(r.stdout)
        assert set(d) >= {"healthy", "strategies"}
        assert d["healthy"]["tokens_per_s"] > 0
        assert {s["name"] for s in d["strategies"]} == set(STRATEGIES)
        for s in d["strategies"]:
            assert set(s) >= {"name", "tokens_per_s", "step_time_s", "relative"}


def test_cli_whatif_table_lists_four_strategies(run_cli, plan_files):
    r = run_cli("whatif", str(plan_files[0]), "--fail-gpus", "1")
    assert r.exit_code == 0, r.stderr
    for name in STRATEGIES:
        assert name in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--fail-gpus", "1", "--fail-nodes", "1"),
        (),
        ("--fail-gpus", "-1"),
    ],
)
def test_cli_whatif_usage_errors(run_cli, plan_files, args):
    r = run_cli("whatif", str(plan_files[0]), *args)
    assert r.exit_code == 2 and "fail" in r.stderr and "Traceback" not in r.stderr


def test_cli_whatif_too_many_failures_is_a_spec_error(run_cli, plan_files):
    r = run_cli("whatif", str(plan_files[0]), "--fail-nodes", "500")
    assert r.exit_code == 1 and "only 128 nodes" in r.stderr


def test_cli_whatif_missing_plan(run_cli, tmp_path: Path):
    r = run_cli("whatif", str(tmp_path / "none.yaml"), "--fail-gpus", "1")
    assert r.exit_code == 1 and "Traceback" not in r.stderr


def test_cli_goodput_json(run_cli, plan_files):
    r = run_cli("goodput", str(plan_files[0]), "--json", "--run-days", "30")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    ck = d["checkpoint"]
    assert ck["young_interval_s"] == pytest.approx(math.sqrt(2 * ck["save_s"] * ck["mtbf_s"]))
    assert 0 < d["summary"]["goodput_fraction"] < 1
    assert d["best"] in d["spares"]
    bad = run_cli("goodput", str(plan_files[0]), "--storage-write-gbps", "0")
    assert bad.exit_code == 2 and "--storage-write-gbps" in bad.stderr


def test_cli_search_failure_aware(run_cli):
    args = ("search", "-m", "gpt3-5b", "-c", "dgx-a100", "-n", "4", "-b", "64", "-s", "2048", "--top", "3")
    r = run_cli(*args, "--failure-aware", "--json")
    assert r.exit_code == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    goodputs = [p["goodput"]["goodput_tokens_per_s"] for p in plans]
    assert goodputs == sorted(goodputs, reverse=True)
    assert all(0 < p["goodput"]["goodput_fraction"] < 1 for p in plans)
