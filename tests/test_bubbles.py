"""Bubble-fill budgets: windows inside the iteration, never overlapping work, memory never negative."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.outputs.bubbles import Assumptions, FillJob, budget, fit_fill_job
from planner.profiles.hardware import load_cluster

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def check_budget(est, b):
    tl = est.timeline
    for sb in b.stages:
        r = sb.stage
        ws = sb.windows
        for w in ws:
            assert 0 <= w.start_s and w.end_s <= b.iteration_time_s + 1e-9
            assert w.duration_s > 0 and 0 <= w.usable_s <= w.duration_s
            assert w.free_memory_bytes >= 0
            assert w.inflight_microbatches >= -1e-9
            for i in range(len(tl.kind[r])):  # no overlap with the stage's own operations
                assert w.end_s <= tl.start_s[r][i] + 1e-9 or w.start_s >= tl.end_s[r][i] - 1e-9
        for a, c in zip(ws, ws[1:]):
            assert a.end_s <= c.start_s + 1e-9
        inside = sum(min(w.end_s, tl.makespan_s) - w.start_s for w in ws if w.start_s < tl.makespan_s)
        assert inside == pytest.approx(tl.idle_s(r), rel=1e-9, abs=1e-12)


def make(model="llama3-70b", nodes=64, tp=8, pp=8, gbs=256, seq=8192, **kw):
    m = load_model(model)
    cluster = load_cluster("dgx-h100", nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    return estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(tp=tp, pp=pp, **kw)))


def test_llama3_70b_64_nodes_budget():
    est = make()
    assert est.num_microbatches == 32
    b = budget(est)
    check_budget(est, b)
    assert len(b.stages) == 8
    # 1F1B: the first stage's big window sits after its warm-up forwards, with p micro-batches resident
    biggest = max(b.stages[0].windows, key=lambda w: w.duration_s if w.kind != "drain" else 0)
    assert biggest.kind == "warm-up" and biggest.inflight_microbatches == pytest.approx(8)
    # the last stage's leading window has nothing resident: more free memory than mid-iteration
    last = b.stages[-1].windows[0]
    assert last.kind == "warm-up" and last.inflight_microbatches == 0
    assert b.equivalent_gpus > 0


@settings(max_examples=25, deadline=None)
@given(
    pp=st.sampled_from([2, 4, 8]),
    m_mult=st.integers(1, 4),
    schedule=st.sampled_from(["1f1b", "gpipe", "zb-h1", "interleaved"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_budget_invariants_random_configs(pp, m_mult, schedule, recompute):
    vpp = 2 if schedule == "interleaved" else 1
    est = make(
        model="llama2-7b",
        nodes=pp,
        tp=8,
        pp=pp,
        gbs=pp * m_mult,
        seq=4096,
        vpp=vpp,
        schedule=schedule,
        recompute=recompute,
    )
    check_budget(est, budget(est, Assumptions(switch_overhead_s=0.001, safety_margin=0.1, min_slice_s=0.0)))


def test_fill_job_packing():
    est = make()
    b = budget(est)
    # measured units: a forward pass of Llama-3-8B over 8 x 2048 tokens on one H100 (~0.45 s)
    job = FillJob(
        name="measured", unit_time_s=0.45, unit_memory_bytes=2.5 * 2**30, footprint_bytes=15 * 2**30
    )
    fill = fit_fill_job(b, job, max_slowdown=0.02)
    assert fill.units_per_iteration > 0
    assert 0 < fill.bubble_time_used_fraction <= 1
    assert fill.slowdown_bound <= 0.02
    for st_budget, row in zip(b.stages, fill.units_per_window):
        for w, units in zip(st_budget.windows, row):
            assert units * job.unit_time_s <= w.usable_s + 1e-9
            if units:
                assert w.free_memory_bytes >= job.footprint_bytes + job.unit_memory_bytes
    huge = FillJob(name="huge", unit_time_s=0.01, unit_memory_bytes=1, footprint_bytes=1e15)
    assert fit_fill_job(b, huge).units_per_iteration == 0


def test_cli_bubbles_json_and_svg(run_cli, tmp_path):
    res = run_cli(
        "bubbles",
        "-m",
        "llama3-70b",
        "-c",
        "dgx-h100",
        "-n",
        "64",
        "-b",
        "256",
        "-s",
        "8192",
        "--tp",
        "8",
        "--pp",
        "8",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["iteration_time_s"] > 0 and len(data["per_stage"]) == 8
    for s in data["per_stage"]:
        assert s["idle_s"] == pytest.approx(sum(w["duration_s"] for w in s["intervals"]))
        for w in s["intervals"]:
            assert {
                "kind",
                "start_s",
                "duration_s",
                "usable_s",
                "inflight_microbatches",
                "free_memory_bytes",
            } <= set(w)
    svg = tmp_path / "t.svg"
    res = run_cli(
        "timeline",
        "-m",
        "llama3-70b",
        "-c",
        "dgx-h100",
        "-n",
        "64",
        "-b",
        "256",
        "-s",
        "8192",
        "--tp",
        "8",
        "--pp",
        "8",
        "--svg",
        str(svg),
    )
    assert res.exit_code == 0, res.stderr
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}rect")) > 8 * 64
    assert "stage   0 |" in res.stdout
    res = run_cli(
        "bubbles",
        "-m",
        "llama3-70b",
        "-c",
        "dgx-h100",
        "-n",
        "64",
        "-b",
        "256",
        "-s",
        "8192",
        "--tp",
        "8",
        "--pp",
        "8",
        "--fill-job",
        str(EXAMPLES / "fill-job-llama3-8b-inference.yaml"),
        "--json",
    )
    assert res.exit_code == 0
    assert json.loads(res.stdout)["fill"]["units_per_iteration"] > 0
