"""Issue 14, points 1-4: plan files for people, distinct choices, time/cost/energy, candidates CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from planner import api
from planner.inputs.errors import UsageError
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD, TrainingTarget, parse_tokens, training_cost
from planner.profiles.hardware import load_cluster
from planner.search.candidates import CSV_COLUMNS, equivalent, fold_equivalent
from planner.search.space import Restrictions

DATA = Path(__file__).parent / "data"
MAIN_JOB = ("-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "-b", "1024", "-s", "8192")
SMALL = ("-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096")


@pytest.fixture(scope="module")
def main_plan(tmp_path_factory):
    """The README main job's plan file, and its search --json."""
    from planner.cli.app import main

    out = tmp_path_factory.mktemp("plan") / "plan.yaml"
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(
            ["search", *MAIN_JOB, "--tokens", "15T", "--gpu-hour-price", "2", "--out", str(out), "--json"]
        )
    assert code == 0
    return out, json.loads(buf.getvalue())


# ------------------------------------------------------------------------------------------------
# 1. Plan files


def test_main_job_plan_is_short_and_ordered(main_plan):
    path, _ = main_plan
    text = path.read_text()
    assert len(text.splitlines()) < 200
    top = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "-"))]
    order = [
        "schema_version",
        "kind",
        "planner_version",
        "framework",
        "software",
        "model",
        "cluster",
        "job",
        "config",
    ]
    assert top[: len(order)] == order
    assert top.index("predictions") > top.index("config") and top[-1] == "bubble_fill_budget"
    doc = yaml.safe_load(text)
    assert doc["schema_version"] == 2
    per_stage = doc["bubble_fill_budget"]["per_stage"]
    assert set(per_stage[0]) >= {"windows", "idle_s", "largest_window_s", "min_free_memory_gib"}
    assert "intervals" not in per_stage[0]


def test_pipelined_plan_is_short_and_windows_stay_available(tmp_path, run_cli):
    path = tmp_path / "pp.yaml"
    res = run_cli("search", *SMALL, "--pp", "4", "--out", str(path))
    assert res.exit_code == 0, res.stderr
    doc = yaml.safe_load(path.read_text())
    assert len(path.read_text().splitlines()) < 200
    summary = doc["bubble_fill_budget"]["per_stage"]
    full = json.loads(run_cli("bubbles", "--plan", str(path), "--json").stdout)["per_stage"]
    assert [s["windows"] for s in summary] == [len(s["intervals"]) for s in full]
    for s, f in zip(summary, full):
        assert s["idle_s"] == pytest.approx(f["idle_s"], rel=1e-3, abs=1e-9)
        assert s["largest_window_s"] == pytest.approx(max(w["duration_s"] for w in f["intervals"]), rel=1e-3)


def test_plan_predictions_have_the_json_field_names(main_plan, run_cli):
    path, search_json = main_plan
    doc = yaml.safe_load(path.read_text())
    est = json.loads(run_cli("estimate", "--plan", str(path), "--json").stdout)
    pred = doc["predictions"]
    best = search_json["plans"][0]
    training = {"tokens", "days_to_train", "gpu_hours", "cost_usd", "energy_kwh"}
    assert set(pred) - training <= set(est) and set(pred) - training <= set(best)
    assert set(pred["memory"]["per_stage"][0]) == set(est["memory"]["per_stage"][0])
    assert set(pred["time"]) == set(est["time"]) == set(best["time"])
    assert pred["step_time_s"] == est["step_time_s"] == best["step_time_s"]
    # rounded to 4 significant digits, in both
    for value in (pred["step_time_s"], best["tokens_per_s"], pred["peak_memory_bytes"]):
        assert float(f"{value:.4g}") == value


def test_plan_files_are_byte_identical(tmp_path, run_cli):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for p in (a, b):
        assert run_cli("search", *SMALL, "--pp", "2", "--out", str(p)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    j = tmp_path / "a.json"
    assert run_cli("search", *SMALL, "--pp", "2", "--out", str(j)).exit_code == 0
    assert json.loads(j.read_text()) == yaml.safe_load(a.read_text())


def test_version_1_plan_files_still_read(run_cli, tmp_path):
    from planner.plans.plan_file import read_plan

    old = DATA / "plan_v1.yaml"
    assert yaml.safe_load(old.read_text())["schema_version"] == 1
    inputs = read_plan(old)
    assert inputs.config.pp == 2 and inputs.config.layers_per_stage == (17, 15)
    res = run_cli("estimate", "--plan", str(old), "--json")
    assert res.exit_code == 0, res.stderr
    bad = tmp_path / "v9.yaml"
    bad.write_text(
        old.read_text().replace("schema_version: 1\nstage_groups", "schema_version: 9\nstage_groups")
    )
    res = run_cli("estimate", "--plan", str(bad))
    assert res.exit_code == 1 and "schema_version 9" in res.stderr


def test_plan_num_microbatches_is_checked(tmp_path, run_cli):
    path = tmp_path / "p.yaml"
    assert run_cli("search", *SMALL, "--pp", "2", "--out", str(path)).exit_code == 0
    text = path.read_text()
    m = yaml.safe_load(text)["config"]["num_microbatches"]
    path.write_text(text.replace(f"num_microbatches: {m}\n", f"num_microbatches: {m + 1}\n"))
    res = run_cli("estimate", "--plan", str(path))
    assert res.exit_code == 1 and "config.num_microbatches" in res.stderr


# ------------------------------------------------------------------------------------------------
# 2. Distinct choices


LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "optimizer_sharding", "recompute", "recompute_num_layers")


def _layout(p: dict) -> tuple:
    return tuple(p.get(k) for k in LAYOUT_FIELDS) + (
        tuple(p.get("recompute_modules", ())),
        p.get("offload_layers", 0),
    )


def test_top_k_plans_are_distinct_with_alternatives(main_plan):
    _, d = main_plan
    plans = d["plans"]
    assert len(plans) == 5
    layouts = [_layout(p) for p in plans]
    assert len(set(layouts)) == len(layouts), "two listed plans differ only in vpp / micro-batch / schedule"
    for a in plans:
        for alt in a["alternatives"]:
            # a variant is the same layout with other virtual stages, micro-batch size or schedule,
            # and never faster than the plan it is listed under
            assert _layout(alt) == _layout(a)
            assert alt["step_time_s"] >= a["step_time_s"]


def test_fold_equivalent_rule():
    from types import SimpleNamespace as NS

    from cost_models.parallel import ParallelConfig
    from planner.search.chain import RankedPlan

    def plan(t, name, **config):
        est = NS(step_time_s=t, peak_memory_bytes=1, name=name)
        return RankedPlan(config=ParallelConfig(**config), cluster=None, estimate=est)

    a = plan(10.0, "a", tp=4, pp=2, dp=8, vpp=2)
    b = plan(10.5, "b", tp=4, pp=2, dp=8, vpp=4, micro_batch_size=2)  # a's layout, other vpp and mbs
    c = plan(10.0, "c", tp=4, pp=2, dp=4, cp=2)  # another layout at the same time: a choice of its own
    d = plan(11.0, "d", tp=4, pp=2, dp=8, recompute="full")  # recompute is a choice too
    assert equivalent(a, b) and not equivalent(a, c) and not equivalent(a, d)
    folded = fold_equivalent([a, b, c, d])
    assert [p.estimate.name for p in folded] == ["a", "c", "d"]
    assert [x.estimate.name for x in folded[0].alternatives] == ["b"]
    assert [p.estimate.name for p in fold_equivalent([a, b, c, d], top_k=2)] == ["a", "c"]


def test_search_fills_k_distinct_plans():
    problem = api.load_problem("llama3-70b", "dgx-h100", 64, 1024, 8192)
    r = api.run_search(problem, Restrictions(memory_headroom_bytes=2 * 2**30), 3)
    assert len(r.plans) == 3
    times = [p.estimate.step_time_s for p in r.plans]
    assert times == sorted(times)
    for i, p in enumerate(r.plans):
        assert all(equivalent(p, a) for a in p.alternatives)
        assert not any(equivalent(p, q) for q in r.plans[i + 1 :])


# ------------------------------------------------------------------------------------------------
# 3. Time, cost, energy


def test_parse_tokens():
    assert parse_tokens("15T") == 15e12 and parse_tokens("300b") == 300e9 and parse_tokens("2e12") == 2e12
    assert parse_tokens("1.5M") == 1.5e6 and parse_tokens("20K") == 20e3
    for bad in ("abc", "-1T", "0", "T"):
        with pytest.raises(UsageError):
            parse_tokens(bad)


def test_training_cost_hand_worked():
    cluster = load_cluster("dgx-h100", 2)  # 16 H100 at 700 W
    target = TrainingTarget(tokens=86_400 * 1e6, gpu_hour_price_usd=2.0, node_power_overhead=1.0)
    cost = training_cost(1e6, cluster, target)  # exactly one day at 1M tokens/s
    assert cost.days_to_train == pytest.approx(1.0)
    assert cost.gpu_hours == pytest.approx(16 * 24)
    assert cost.cost_usd == pytest.approx(16 * 24 * 2.0)
    assert cost.energy_kwh == pytest.approx(16 * 0.7 * 24)
    with_node = training_cost(1e6, cluster, TrainingTarget(tokens=86_400 * 1e6))
    assert with_node.cost_usd is None
    assert with_node.energy_kwh == pytest.approx(16 * 0.7 * 24 * DEFAULT_NODE_POWER_OVERHEAD)
    assert DEFAULT_NODE_POWER_OVERHEAD == pytest.approx(10.2 / 5.6)


def test_every_gpu_has_a_tdp():
    from planner.profiles.hardware import gpu_names, load_gpu

    for name in gpu_names():
        assert load_gpu(name).tdp_w > 0, name


def test_search_json_carries_training_fields(main_plan):
    _, d = main_plan
    p = d["plans"][0]
    assert p["days_to_train"] == pytest.approx(15e12 / p["tokens_per_s"] / 86_400, rel=2e-3)
    assert p["gpu_hours"] == pytest.approx(512 * p["days_to_train"] * 24, rel=2e-3)
    assert p["cost_usd"] == pytest.approx(2 * p["gpu_hours"], rel=2e-3)
    assert p["energy_kwh"] > 0


def test_cluster_file_price_and_objective(tmp_path, run_cli):
    cluster = tmp_path / "priced.yaml"
    cluster.write_text(
        "schema_version: 1\nkind: cluster\nname: priced\ngpu_hour_price_usd: 3.5\n"
        "groups:\n  - template: dgx-h100\n    num_nodes: 2\n"
    )
    args = ("search", "-m", "llama3-8b", "-c", str(cluster), "-b", "64", "-s", "4096", "--pp", "2")
    res = run_cli(*args, "--tokens", "1T", "--objective", "cost", "--json")
    assert res.exit_code == 0, res.stderr
    p = json.loads(res.stdout)["plans"][0]
    assert p["cost_usd"] == pytest.approx(3.5 * p["gpu_hours"], rel=2e-3)
    flag = json.loads(run_cli(*args, "--tokens", "1T", "--gpu-hour-price", "1", "--json").stdout)["plans"][0]
    assert flag["cost_usd"] == pytest.approx(flag["gpu_hours"], rel=2e-3)
    no_json = json.loads(run_cli(*args, "--json").stdout)["plans"][0]
    assert "days_to_train" not in no_json and "cost_usd" not in no_json
    assert run_cli(*args, "--objective", "cost").exit_code == 2
    assert run_cli(*args, "--objective", "speed").exit_code == 2
    assert run_cli(*args, "--tokens", "lots").exit_code == 2
    assert run_cli(*SMALL[:8], "search", "--gpu-hour-price", "2").exit_code == 2


# ------------------------------------------------------------------------------------------------
# 4. Candidates as data


def test_search_csv_lists_every_candidate(tmp_path, run_cli):
    path = tmp_path / "c.csv"
    res = run_cli("search", *SMALL, "--csv", str(path), "--json")
    assert res.exit_code == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert tuple(rows[0]) == CSV_COLUMNS
    d = json.loads(res.stdout)
    statuses = {r["status"] for r in rows}
    assert statuses <= {"simulated", "memory", "bound", "constraint"} and "simulated" in statuses
    assert sum(r["status"] == "simulated" for r in rows) == d["search"]["shapes_simulated"]
    assert all(r["step_time_s"] for r in rows if r["status"] == "simulated")
    assert all(r["reason"] for r in rows if r["status"] != "simulated")
    best = d["plans"][0]
    assert any(
        r["status"] == "simulated" and float(r["step_time_s"]) == pytest.approx(best["step_time_s"], rel=1e-3)
        for r in rows
    )
    again = tmp_path / "again.csv"
    assert run_cli("search", *SMALL, "--csv", str(again)).exit_code == 0
    assert again.read_bytes() == path.read_bytes()


def test_csv_records_framework_rejections():
    from planner.search.chain import search

    problem = api.load_problem("llama3-8b", "dgx-h100", 2, 64, 4096)
    r = search(
        problem.model,
        problem.cluster,
        problem.job,
        Restrictions(framework="torchtitan", pp=(2,)),
        3,
        collect=True,
    )
    plain = search(
        problem.model, problem.cluster, problem.job, Restrictions(framework="torchtitan", pp=(2,)), 3
    )
    assert [p.config for p in r.plans] == [p.config for p in plain.plans]
    assert plain.candidates is None
    counted = sum(n for why, n in r.rejections.counts.items())
    assert len(r.candidates) >= r.shapes_enumerated
    assert sum(c.status == "constraint" for c in r.candidates) <= counted


# ------------------------------------------------------------------------------------------------
# 3b. planner sweep

SWEEP = ("sweep", "-m", "llama3-8b", "-c", "dgx-h100,dgx-a100", "-n", "1,2", "-b", "64", "-s", "4096")


def test_sweep_json_csv_svg(tmp_path, run_cli):
    import xml.etree.ElementTree as ET

    csv_path, svg_path = tmp_path / "s.csv", tmp_path / "s.svg"
    res = run_cli(
        *SWEEP,
        "--tokens",
        "1T",
        "--gpu-hour-price",
        "2",
        "--jobs",
        "2",
        "--csv",
        str(csv_path),
        "--svg",
        str(svg_path),
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    pts = d["points"]
    assert [(p["cluster"], p["nodes"]) for p in pts] == [
        ("dgx-h100", 1),
        ("dgx-h100", 2),
        ("dgx-a100", 1),
        ("dgx-a100", 2),
    ]
    assert all(p["feasible"] for p in pts)
    assert pts[0]["scaling_efficiency"] == 1.0 and pts[2]["scaling_efficiency"] == 1.0
    assert 0 < pts[1]["scaling_efficiency"] <= 1.001
    for p in pts:
        assert p["cost_usd"] == pytest.approx(2 * p["gpu_hours"], rel=2e-3)
        assert p["days_to_train"] == pytest.approx(1e12 / p["tokens_per_s"] / 86_400, rel=2e-3)
    assert d["best_point"] == min(range(4), key=lambda i: pts[i]["step_time_s"])
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert len(rows) == 4 and rows[0]["cluster"] == "dgx-h100" and rows[0]["feasible"] == "true"
    root = ET.fromstring(svg_path.read_text())
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2
    # serial and parallel runs agree byte for byte
    serial = run_cli(*SWEEP, "--tokens", "1T", "--gpu-hour-price", "2", "--jobs", "1", "--json")
    assert serial.stdout == res.stdout
    table = run_cli(*SWEEP, "--jobs", "1")
    assert table.exit_code == 0 and "scaling" in table.stdout


def test_sweep_errors(run_cli):
    assert run_cli("sweep", "-m", "llama3-8b", "-c", "dgx-h100", "-b", "64", "-s", "4096").exit_code == 2
    assert run_cli(*SWEEP, "--objective", "cost").exit_code == 2
    assert run_cli(*SWEEP, "--jobs", "-1").exit_code == 2
    res = run_cli("sweep", "-m", "llama3-8b", "-c", "nope", "-n", "1", "-b", "64", "-s", "4096")
    assert res.exit_code == 1 and "nope" in res.stderr


def test_sweep_marks_points_where_nothing_fits():
    from planner.outputs.sweep import SweepPoint, SweepTask, run_sweep

    tasks = [
        SweepTask(SweepPoint("dgx-h100", n), "llama3-70b", 64, 4096, "bf16", Restrictions(), None)
        for n in (1, 4)
    ]
    rows = run_sweep(tasks, jobs=1)
    assert rows[0]["feasible"] is False and "nothing fits" in rows[0]["reason"]
    assert rows[1]["feasible"] is True and rows[1]["scaling_efficiency"] == 1.0
