"""Traces and pictures: the Chrome trace (planner timeline --trace), the SVG timeline, the HTML
report (planner report --html, rendered in headless Chromium when it is installed) and the
bubbles' explanation when a fill job fits no unit."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.documents import GIB
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.outputs.bubbles import FillJob, budget, fit_fill_job
from planner.outputs.timeline_svg import nice_ticks, shade, timeline_svg
from planner.outputs.trace import lanes, trace_json
from planner.profiles.hardware import load_cluster

SVG = "{http://www.w3.org/2000/svg}"
SMALL = ("-m", "gpt-1.7b", "-c", "dgx-h100", "-n", "1", "-b", "16", "-s", "1024")


def make(model="llama2-7b", nodes=2, gbs=16, seq=4096, **kw):
    m = load_model(model)
    cluster = load_cluster("dgx-h100", nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    return estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(**kw)))


CASES = {
    "interleaved": dict(tp=4, pp=4, vpp=2, schedule="interleaved"),
    "zb-h1": dict(tp=4, pp=4, schedule="zb-h1"),
    "zero2": dict(tp=2, pp=2, optimizer_sharding="zero2"),
    "distributed": dict(tp=2, pp=2, optimizer_sharding="distributed", recompute="full"),
}


# ------------------------------------------------------------------------------------------------
# Chrome trace


def check_trace(est, data):
    events = data["traceEvents"]
    assert isinstance(events, list) and events
    spans = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert isinstance(e["cat"], str)
            assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
            assert e["ts"] >= 0 and e["dur"] >= 0
            spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, row in spans.items():  # the events of one thread never overlap
        row.sort()
        for (_, a1), (b0, _) in zip(row, row[1:]):
            assert a1 <= b0 + 2e-3, key
    t0 = min(a for row in spans.values() for a, _ in row)
    t1 = max(b for row in spans.values() for _, b in row)
    assert t0 == 0
    assert t1 == pytest.approx(est.step_time_s * 1e6, abs=2e-3)  # microseconds, ns rounding


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_is_valid_and_spans_the_step(case):
    est = make(**CASES[case])
    text = trace_json(est, case)
    data = json.loads(text)
    check_trace(est, data)
    assert text == trace_json(est, case)  # deterministic
    events = data["traceEvents"]
    tl = est.timeline
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    for s in est.stages:
        assert s.gpu in names[s.stage] and "layers " + "+".join(map(str, s.layers)) in names[s.stage]
    assert names[tl.num_stages] == "iteration"
    ops = [e for e in events if e["ph"] == "X" and e["cat"] == "compute" and e["args"]["phase"] == "pipeline"]
    assert len(ops) == sum(len(k) for k in tl.kind)
    assert {e["args"]["op"] for e in ops} == ({"F", "B", "W"} if case == "zb-h1" else {"F", "B"})
    assert all({"microbatch", "chunk", "virtual_stage"} <= set(e["args"]) for e in ops)
    assert {e["args"]["chunk"] for e in ops} == set(range(tl.num_chunks))
    # one compute op per timeline op, at the simulator's times
    first = next(e for e in ops if e["pid"] == 1)
    assert first["ts"] == pytest.approx(float(tl.start_s[1][0]) * 1e6, abs=1e-3)
    phases = {e["name"] for e in events if e["pid"] == tl.num_stages and e["ph"] == "X"}
    assert {"pipeline", "optimizer step"} <= phases
    opt = [e for e in events if e["name"] == "optimizer step" and e["pid"] < tl.num_stages]
    assert len(opt) == tl.num_stages
    comm = [e for e in events if e["ph"] == "X" and e["cat"] == "communication"]
    if case == "zero2":
        assert any(e["name"].startswith("FSDP exposed") for e in comm)
    if case == "distributed":
        assert any(e["name"] == "data-parallel reduce (exposed)" for e in comm)
    sends = [e for e in events if e["ph"] == "X" and e["cat"] == "p2p"]
    assert sends and all(e["tid"] >= 2 for e in sends)


def test_p2p_lanes_never_overlap():
    rows = lanes(
        [
            (0.0, 2.0, "a", {}),
            (1.0, 3.0, "b", {}),
            (2.0, 4.0, "c", {}),
            (2.5, 2.6, "d", {}),
            (3.0, 3.5, "e", {}),
        ]
    )
    assert [[x[2] for x in row] for row in rows] == [["a", "c"], ["b", "e"], ["d"]]


def test_cli_trace(run_cli, tmp_path):
    out = tmp_path / "t.json"
    res = run_cli("timeline", *SMALL, "--pp", "2", "--trace", str(out))
    assert res.exit_code == 0, res.stderr
    assert f"wrote {out}" in res.stderr
    data = json.loads(out.read_text())
    assert data["otherData"]["schedule"] == "1f1b" and data["displayTimeUnit"] == "ms"
    res = run_cli("timeline", *SMALL, "--pp", "2", "--trace", str(tmp_path))
    assert res.exit_code == 1 and "directory" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------
# SVG timeline


def test_nice_ticks():
    assert nice_ticks(4.126) == ([0, 1, 2, 3, 4], "s", 1.0)
    ticks, unit, scale = nice_ticks(0.3)
    assert (
        unit == "ms" and scale == 1e-3 and ticks[1] == pytest.approx(0.05) and ticks[-1] == pytest.approx(0.3)
    )
    assert nice_ticks(12.87)[0] == [0, 2, 4, 6, 8, 10, 12]
    assert shade("#4e79a7", 0, 4) == "#4e79a7" and shade("#4e79a7", 3, 4) != shade("#4e79a7", 1, 4)


def test_svg_has_legend_ticks_labels_and_shaded_chunks():
    est = make(nodes=4, gbs=8, tp=8, pp=4, vpp=2, schedule="interleaved", recompute="full")
    root = ET.fromstring(timeline_svg(est, "t"))
    texts = lambda cls: [t.text for t in root.iter(f"{SVG}text") if t.get("class") == cls]  # noqa: E731
    legend = root.find(f".//{SVG}g[@id='legend']")
    assert legend is not None
    labels = [t.text for t in legend.iter(f"{SVG}text")]
    assert "F forward" in labels and "idle" in labels and "optimizer step" in labels
    assert any(x.startswith("B backward (with full recompute)") for x in labels)
    assert any("interleaved chunks" in x for x in labels)
    ticks = texts("tick-label")
    assert len(ticks) >= 3 and all(t.endswith((" s", " ms")) for t in ticks) and ticks[0].startswith("0 ")
    assert len([e for e in root.iter(f"{SVG}line") if e.get("class") == "tick"]) == len(ticks)
    stages = texts("stage-label")
    assert sum("h100-sxm5-80gb x8" in s for s in stages) == 4
    assert any(s.startswith("layers ") for s in stages)
    mb = texts("mb-label")
    assert mb and set(mb) <= {str(j) for j in range(est.num_microbatches)}
    fills = {r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "op op-F"}
    assert len(fills) == 2  # chunk 0 and chunk 1 shaded differently


def test_svg_zero_bubble_legend_has_w():
    root = ET.fromstring(timeline_svg(make(tp=4, pp=4, schedule="zb-h1"), "t"))
    legend = root.find(f".//{SVG}g[@id='legend']")
    assert "W weight gradients" in [t.text for t in legend.iter(f"{SVG}text")]


def test_svg_says_how_v_chunks_and_post_validated_lanes_read():
    def labels(**kw):
        root = ET.fromstring(timeline_svg(make(tp=4, pp=4, **kw), "t"))
        return [t.text for t in root.find(f".//{SVG}g[@id='legend']").iter(f"{SVG}text")], root

    v, _ = labels(schedule="zb-v", vpp=2)
    assert "V chunks:" in v and any("2p-1-r" in x for x in v)
    post, root = labels(schedule="zb-h2")
    assert any("optimizer post-validation" in x for x in post)
    plain, plain_root = labels(schedule="zb-h1")
    assert not any("post-validation" in x for x in plain)
    assert float(root.get("height")) == float(plain_root.get("height")) + 20  # the note's own row


# ------------------------------------------------------------------------------------------------
# HTML report


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    from planner.cli import main

    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    code = main(["search", *SMALL, "--pp", "2", "--top", "1", "--out", str(path)])
    assert code == 0
    return path


def test_report_html_is_self_contained(run_cli, plan_file, tmp_path):
    out = tmp_path / "r.html"
    res = run_cli("report", str(plan_file), "--html", str(out), "--json")
    assert res.exit_code == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["sections"] == [
        "summary",
        "timeline",
        "time",
        "memory",
        "configuration",
        "plausibility",
        "alternatives",
        "budget",
    ]
    assert summary["time_sum_s"] == pytest.approx(summary["step_time_s"], rel=2e-3)
    html = out.read_text()
    lowered = html.lower()
    for external in ("<script", "<link", "src=", "url(", "@import", "https://"):
        assert external not in lowered
    assert lowered.count("http://") == lowered.count('xmlns="http://www.w3.org/2000/svg"')
    assert run_cli("report", str(plan_file), "--html", str(tmp_path / "b.html")).exit_code == 0
    assert (tmp_path / "b.html").read_text() == html  # deterministic


def test_report_errors(run_cli, tmp_path):
    res = run_cli("report", str(tmp_path / "missing.yaml"), "--html", str(tmp_path / "r.html"))
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("report", str(tmp_path / "missing.yaml"))
    assert res.exit_code == 2


def _chromium() -> str | None:
    return next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None
    )


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (Debian package chromium)")
def test_report_renders_in_headless_chromium(run_cli, plan_file, tmp_path):
    out = tmp_path / "r.html"
    assert run_cli("report", str(plan_file), "--html", str(out)).exit_code == 0
    base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"]
    dom = subprocess.run(
        [*base, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    for sid in (
        "summary",
        "timeline",
        "time",
        "memory",
        "configuration",
        "plausibility",
        "alternatives",
        "budget",
    ):
        assert f'<section id="{sid}">' in dom
    assert "<svg" in dom and 'id="memory-chart"' in dom and 'id="time-bar"' in dom
    assert "sum (step time)" in dom and "F forward" in dom
    png = tmp_path / "r.png"
    subprocess.run(
        [*base, f"--screenshot={png}", "--window-size=1400,1000", out.as_uri()],
        capture_output=True,
        timeout=180,
        check=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 1000)
    assert len(data) > 20_000  # a blank page compresses to a few kB


# ------------------------------------------------------------------------------------------------
# Bubbles: why a fill job fits no unit


def test_fill_job_reason_names_the_limit():
    b = budget(make(tp=4, pp=4))
    longest = max(w.usable_s for st in b.stages for w in st.windows)
    slow = FillJob(name="slow", unit_time_s=longest * 2, unit_memory_bytes=1.0, footprint_bytes=1.0)
    fill = fit_fill_job(b, slow)
    assert fill.units_per_iteration == 0
    assert fill.reason.startswith("the longest usable window is") and f"{longest:.3g} s" in fill.reason
    roomiest = max(w.free_memory_bytes for st in b.stages for w in st.windows)
    big = FillJob(name="big", unit_time_s=1e-4, unit_memory_bytes=GIB, footprint_bytes=roomiest)
    fill = fit_fill_job(b, big)
    assert fill.units_per_iteration == 0 and "the most free memory in any window is" in fill.reason
    both = FillJob(name="both", unit_time_s=longest * 2, unit_memory_bytes=GIB, footprint_bytes=roomiest)
    assert "; and the most free memory" in fit_fill_job(b, both).reason
    ok = FillJob(name="ok", unit_time_s=longest / 2, unit_memory_bytes=1.0, footprint_bytes=1.0)
    fill = fit_fill_job(b, ok, max_slowdown=1.0)
    assert fill.units_per_iteration > 0 and fill.reason == ""
    tight = FillJob(name="tight", unit_time_s=longest, unit_memory_bytes=1.0, footprint_bytes=1.0)
    fill = fit_fill_job(b, tight, max_slowdown=0.0)  # a unit filling 95% of a window risks delaying it
    assert fill.units_per_iteration == 0 and "slowdown bound" in fill.reason


def test_cli_bubbles_says_why_zero_units(run_cli, plan_file, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(
        "schema_version: 1\nkind: fill_job\nname: long\nunit_time_s: 100\nunit_memory_gib: 1\nfootprint_gib: 1\n"
    )
    res = run_cli("bubbles", "--plan", str(plan_file), "--fill-job", str(job))
    assert res.exit_code == 0, res.stderr
    assert "No unit fits: the longest usable window is" in res.stdout
    res = run_cli("bubbles", "--plan", str(plan_file), "--fill-job", str(job), "--json")
    assert json.loads(res.stdout)["fill"]["reason"].startswith("the longest usable window")
