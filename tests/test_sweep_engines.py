"""Sweeps that outgrow one machine: study files (``planner sweep --grid``), the engines (a local
process pool, Ray), one retry of a failed or lost point, and ``--resume`` from the results journal
after a killed run (planner.outputs.sweep_study, sweep_engines, sweep_journal; docs/costing.md)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.outputs import sweep
from planner.outputs.sweep import SweepPoint, SweepTask, run_point, run_sweep
from planner.outputs.sweep_engines import Failure, LocalEngine, SerialEngine, error_text, schedule
from planner.outputs.sweep_journal import Journal, task_key
from planner.outputs.sweep_study import load_study, study_tasks
from planner.plans.problem import search_restrictions

ROOT = Path(__file__).resolve().parent.parent

STUDY = """\
schema_version: 1
kind: sweep
models:
  - gpt-1.7b
  - {model: llama2-7b, tokens: 1T}
clusters:
  - dgx-h100
  - {cluster: dgx-a100, nodes: [1], gpu_hour_price_usd: 1.5}
nodes: [1, 2]
global_batch_sizes: [32]
seq_lengths: [2048]
tokens: 300B
gpu_hour_price_usd: 2.5
"""
"""Six points: two models x (dgx-h100 at 1 and 2 nodes, dgx-a100 at 1 node)."""

SMALL = """\
schema_version: 1
kind: sweep
models: [gpt-1.7b]
clusters: [dgx-h100, dgx-a100]
nodes: [1]
global_batch_sizes: [16, 32]
seq_lengths: [1024]
"""
"""Four quick points (a 1.7B model on one node)."""


def _study(tmp_path: Path, text: str = STUDY, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------------
# The study file


def test_study_points_in_the_files_order_with_their_tokens_and_prices(tmp_path):
    tasks = study_tasks(load_study(_study(tmp_path)))
    assert [(t.model, t.point.cluster, t.point.nodes) for t in tasks] == [
        ("gpt-1.7b", "dgx-h100", 1),
        ("gpt-1.7b", "dgx-h100", 2),
        ("gpt-1.7b", "dgx-a100", 1),
        ("llama2-7b", "dgx-h100", 1),
        ("llama2-7b", "dgx-h100", 2),
        ("llama2-7b", "dgx-a100", 1),
    ]
    # the model's own budget over the study's, the entry's price over the study's
    assert [t.target.tokens for t in tasks] == [3e11] * 3 + [1e12] * 3
    assert [t.target.gpu_hour_price_usd for t in tasks] == [2.5, 2.5, 1.5] * 2
    assert {(t.global_batch_size, t.seq_length, t.precision) for t in tasks} == {(32, 2048, "bf16")}
    assert tasks[0].restrictions == search_restrictions("megatron", 2.0)


def test_a_cluster_file_in_a_study_is_read_beside_it(tmp_path):
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "mine.yaml").write_text(
        "schema_version: 1\nkind: cluster\ngpu_hour_price_usd: 3.0\ngroups:\n"
        "  - template: dgx-h100\n    num_nodes: 2\n"
    )
    text = SMALL.replace("[dgx-h100, dgx-a100]", "[mine.yaml]").replace("nodes: [1]\n", "")
    text += "tokens: 1T\n"
    tasks = study_tasks(load_study(_study(folder, text)))
    assert [t.point for t in tasks] == [SweepPoint(str(folder / "mine.yaml"), None)] * 2
    assert tasks[0].target.gpu_hour_price_usd == 3.0  # the cluster file's own price


@pytest.mark.parametrize(
    "change,message",
    [
        (("nodes: [1]", "nodes: [1]\nnode: 2"), "unknown key 'node' (did you mean nodes"),
        (("kind: sweep", "kind: cluster"), "key 'kind': 'cluster' is not allowed; allowed values: sweep"),
        (("schema_version: 1", "schema_version: 2"), "schema_version 2 is not supported"),
        (
            ("[dgx-h100, dgx-a100]", "[dgx-h100, {cluster: dgx-a100, price: 2}]"),
            "unknown key 'clusters[1].price'",
        ),
        (("nodes: [1]", "nodes: [1, 0]"), "key 'nodes[1]': must be positive"),
        (("nodes: [1]", "nodes: [1, 1]"), "key 'nodes[1]': 1 is listed twice"),
        (("[gpt-1.7b]", "[gpt-1.7b, gpt-1.7b]"), "key 'models[1]': 'gpt-1.7b' is listed twice"),
        (("nodes: [1]\n", ""), "key 'clusters[0]': dgx-h100 is a node template: give its nodes"),
        (("seq_lengths: [1024]", "seq_lengths: []"), "key 'seq_lengths': give at least one value"),
        (("[gpt-1.7b]", "[nope-13b]"), "key 'models[0]'"),
        (("[dgx-h100, dgx-a100]", "[dgx-h100, dgx-nope]"), "key 'clusters[1]'"),
    ],
)
def test_the_study_file_is_strict(tmp_path, change, message):
    path = _study(tmp_path, SMALL.replace(*change))
    with pytest.raises(SpecError) as err:
        study_tasks(load_study(path))
    assert str(err.value).startswith(str(path)) and message in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "extra,message",
    [
        ("gpu_hour_price_usd: 2\n", "a price needs a token budget"),
        ("tokens: 1T\nobjective: cost\n", "cost needs a price for every cluster"),
        ("fp8_recipe: mxfp8\n", "key 'fp8_recipe' needs precision: fp8"),
        ("tokens: lots\n", "key 'tokens' takes a token count such as 15T"),
        ("software: nope\n", "key 'software' 'nope': allowed values are base"),
        ("framework: jax\n", "key 'framework': 'jax' is not allowed"),
    ],
)
def test_study_values_are_checked_naming_the_key(tmp_path, extra, message):
    with pytest.raises(SpecError, match="study.yaml") as err:
        study_tasks(load_study(_study(tmp_path, SMALL + extra)))
    assert message in str(err.value)


def test_a_study_holds_a_bounded_number_of_points(tmp_path):
    many = ", ".join(str(n) for n in range(1, 1001))
    text = SMALL.replace("nodes: [1]", f"nodes: [{many}]").replace("[16, 32]", f"[{many}]")
    with pytest.raises(SpecError, match=r"2,000,000 points .* at most 100,000: split it"):
        study_tasks(load_study(_study(tmp_path, text)))


def test_grid_leaves_the_study_to_the_file(run_cli, tmp_path):
    path = _study(tmp_path, SMALL)
    r = run_cli("sweep", "--grid", str(path), "-m", "llama3-8b", "--seq-len", "4096")
    assert r.exit_code == 2 and r.stdout == ""
    assert "the study file gives models, seq_lengths: leave out --model, --seq-len" in r.stderr
    r = run_cli("sweep", "-c", "dgx-h100", "-n", "1")
    assert r.exit_code == 2 and "missing option --model, --global-batch-size, --seq-len" in r.stderr
    bad = _study(tmp_path, SMALL + "colour: blue\n", "bad.yaml")
    r = run_cli("sweep", "--grid", str(bad))
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "unknown key 'colour'" in r.stderr


def test_a_study_on_the_command_line(run_cli, tmp_path):
    path = _study(tmp_path)
    csv_path, svg_path = tmp_path / "s.csv", tmp_path / "s.svg"
    r = run_cli(
        "sweep", "--grid", str(path), "-j", "2", "--csv", str(csv_path), "--svg", str(svg_path), "--json"
    )
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["study"]["models"][1] == {"model": "llama2-7b", "tokens": 1e12}
    pts = d["points"]
    assert [(p["model"], p["cluster"], p["nodes"]) for p in pts][:2] == [
        ("gpt-1.7b", "dgx-h100", 1),
        ("gpt-1.7b", "dgx-h100", 2),
    ]
    # scaling efficiency within a series (model, job, cluster); one best point per model
    assert [p["scaling_efficiency"] == 1.0 for p in pts] == [True, False, True] * 2
    assert d["best_points"] == [
        min(range(k, k + 3), key=lambda i: (pts[i]["step_time_s"], i)) for k in (0, 3)
    ]
    assert pts[5]["cost_usd"] == pytest.approx(1.5 * pts[5]["gpu_hours"], rel=2e-3)
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert list(rows[0])[:5] == ["model", "global_batch_size", "seq_length", "tokens", "cluster"]
    assert [r["model"] for r in rows] == ["gpt-1.7b"] * 3 + ["llama2-7b"] * 3
    assert float(rows[3]["tokens"]) == 1e12 and rows[3]["tp"] == str(pts[3]["tp"])
    # the best plan's prediction interval: whole in the JSON, its bounds in the CSV
    for p, row in zip(pts, rows, strict=True):
        assert p["prediction_interval"]["level"] == 0.8 and row["interval_level"] == "0.8"
        low, high = float(row["tokens_per_s_low"]), float(row["tokens_per_s_high"])
        assert low < float(row["tokens_per_s"]) < high
        assert (
            float(row["days_to_train_low"]) < float(row["days_to_train"]) < float(row["days_to_train_high"])
        )
        assert low == pytest.approx(
            p["prediction_interval"]["tokens_per_s_per_gpu"][0] * p["num_gpus"], rel=1e-3
        )
    svg = svg_path.read_text()
    assert svg.count("<polyline") == 4 and ">llama2-7b dgx-a100</text>" in svg
    # the table, from the journal kept beside the CSV (nothing recomputed)
    table = run_cli("sweep", "--grid", str(path), "-j", "1", "--csv", str(csv_path), "--resume")
    assert table.exit_code == 0 and "resuming: 6 of 6 points" in table.stderr
    assert "llama2-7b" in table.stdout and "best by time per model" in table.stdout
    assert list(csv.DictReader(io.StringIO(csv_path.read_text()))) == rows


# ------------------------------------------------------------------------------------------------
# Retries: a failed or lost point is tried once more, then reported with its error


def _tasks(n: int = 4) -> list[SweepTask]:
    r = search_restrictions("megatron", 2.0)
    return [
        SweepTask(SweepPoint("dgx-h100", k), "gpt-1.7b", 16, 1024, "bf16", r, None) for k in range(1, n + 1)
    ]


def _fake_row(task: SweepTask) -> dict:
    """A quick stand-in for a search: what with_efficiency and the journal read."""
    n = task.point.nodes
    return {"cluster": task.point.cluster, "nodes": n, "num_gpus": 8 * n, "feasible": True,
            "step_time_s": 1.0 / n, "tokens_per_s_per_gpu": 1000.0 - n}  # fmt: skip


class Flaky:
    """Raises on the first ``fail_first`` attempts of the points in ``nodes``; counts attempts."""

    def __init__(self, fail_first: dict[int, int]) -> None:
        self.fail_first, self.calls = fail_first, {}

    def __call__(self, task: SweepTask) -> dict:
        n = task.point.nodes
        self.calls[n] = self.calls.get(n, 0) + 1
        if self.calls[n] <= self.fail_first.get(n, 0):
            raise RuntimeError(f"injected failure of point {n}")
        return _fake_row(task)


def test_a_failed_point_is_retried_once_then_reported():
    flaky = Flaky({2: 1, 3: 5})  # point 2 fails once, point 3 always
    rows = run_sweep(_tasks(), 1, run=flaky)
    assert flaky.calls == {1: 1, 2: 2, 3: 2, 4: 1}
    assert rows[1]["feasible"] and rows[1]["scaling_efficiency"] == pytest.approx(998 / 999)
    assert rows[2]["feasible"] is False
    assert rows[2]["error"] == "RuntimeError: injected failure of point 3"
    assert rows[2]["reason"] == "failed twice: RuntimeError: injected failure of point 3"
    assert (rows[2]["num_gpus"], rows[2]["gpus"]) == (24, "h100-sxm5-80gb")


def test_a_failed_point_is_in_the_table_and_the_exit_code(run_cli, monkeypatch, tmp_path):
    def fails_on_two_nodes(task):
        if task.point.nodes == 2:
            raise RuntimeError("injected")
        return run_point(task)

    monkeypatch.setitem(sweep.run_sweep.__kwdefaults__, "run", fails_on_two_nodes)
    args = ("sweep", "-m", "gpt-1.7b", "-c", "dgx-h100", "-n", "1,2", "-b", "16", "-s", "1024", "-j", "1")
    r = run_cli(*args, "--csv", str(tmp_path / "s.csv"))
    assert r.exit_code == 1 and "failed: RuntimeError: injected" in r.stdout
    assert r.stderr.splitlines()[-1] == (
        "error: 1 of 2 points failed twice; their errors are in the results (--resume computes only them)"
    )
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())))
    assert rows[1]["feasible"] == "false" and rows[1]["reason"] == "failed twice: RuntimeError: injected"
    # the failed point is not in the journal: a resume computes it (and only it)
    monkeypatch.setitem(sweep.run_sweep.__kwdefaults__, "run", run_point)
    r = run_cli(*args, "--csv", str(tmp_path / "s.csv"), "--resume")
    assert r.exit_code == 0 and "resuming: 1 of 2 points" in r.stderr


def _dies_once(task: SweepTask) -> dict:
    """Kills its worker process the first time it runs point 2 (a lost point), marked by a file."""
    mark = Path(os.environ["PLANNER_TEST_MARKS"]) / f"point-{task.point.nodes}"
    with open(mark, "a") as fh:
        fh.write("x")
    if task.point.nodes == 2 and mark.read_text() == "x":
        os._exit(1)
    return _fake_row(task)


def test_a_point_lost_with_its_worker_runs_again_on_a_fresh_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_TEST_MARKS", str(tmp_path))
    rows = run_sweep(_tasks(), 2, run=_dies_once)
    assert [r["feasible"] for r in rows] == [True] * 4 and [r["nodes"] for r in rows] == [1, 2, 3, 4]
    assert (tmp_path / "point-2").read_text() == "xx"  # lost once, done on its second attempt
    # every point ran to completion once; those in flight with the lost one ran again
    assert all(1 <= len((tmp_path / f"point-{n}").read_text()) <= 2 for n in (1, 3, 4))


def test_the_scheduler_keeps_the_window_and_hands_on_each_point_once():
    class Recording(SerialEngine):
        def __init__(self, run):
            super().__init__(run)
            self.in_flight = self.most = 0

        def submit(self, index, task):
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            super().submit(index, task)

        def wait(self):
            done = super().wait()
            self.in_flight -= len(done)
            return done

    flaky = Flaky({1: 1})
    engine, seen = Recording(flaky), []
    schedule(
        engine, dict(enumerate(_tasks())), 3, lambda i, outcome: seen.append((i, type(outcome).__name__))
    )
    assert sorted(seen) == [(0, "dict"), (1, "dict"), (2, "dict"), (3, "dict")]
    assert engine.most <= 3
    assert error_text(RuntimeError("a\n  b")) == "RuntimeError: a b" and isinstance(Failure("x"), Failure)


def test_the_local_pool_returns_what_the_serial_run_does():
    serial = run_sweep(_tasks(3), 1, run=_fake_row)
    engine = LocalEngine(_fake_row, 2)
    found = {}
    schedule(engine, dict(enumerate(_tasks(3))), 4, found.__setitem__)
    assert [found[i] for i in range(3)] == [
        {k: v for k, v in r.items() if k != "scaling_efficiency"} for r in serial
    ]


# ------------------------------------------------------------------------------------------------
# The journal and --resume


def test_resume_computes_only_the_points_the_journal_lacks(tmp_path):
    tasks = _tasks(4)
    path = tmp_path / "j.jsonl"
    fresh = run_sweep(tasks, 1, journal=Journal(path, resume=False), run=_fake_row)
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[0])["kind"] == "sweep_journal"
    # a run killed after its first two points, the third written halfway
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    counting = Flaky({})
    journal = Journal(path, resume=True)
    resumed = run_sweep(tasks, 1, journal=journal, run=counting)
    journal.close()
    assert counting.calls == {3: 1, 4: 1}  # only the missing points
    assert resumed == fresh
    assert len(path.read_text().splitlines()) == 5  # the cut line dropped, the two new ones added
    # a point whose inputs changed is not taken from the journal
    changed = [tasks[0], SweepTask(**{**_fields(tasks[1]), "global_batch_size": 32})]
    counting = Flaky({})
    run_sweep(changed, 1, journal=Journal(path, resume=True), run=counting)
    assert counting.calls == {2: 1} and task_key(changed[1]) != task_key(tasks[1])


def _fields(task: SweepTask) -> dict:
    return {f: getattr(task, f) for f in SweepTask.__dataclass_fields__}


def test_a_journal_of_another_version_is_not_reused(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"kind": "sweep_journal", "planner_version": "0.0.0", "schema_version": 1}\n')
    journal = Journal(path, resume=True)
    assert journal.done == {} and "not a journal of planner" in journal.note
    journal.close()
    assert "0.0.0" not in path.read_text()


def test_resume_after_a_killed_run(tmp_path):
    """A real kill (SIGKILL) of ``planner sweep`` once its journal holds a point: ``--resume``
    computes only the points the journal lacks, and writes the CSV of an uninterrupted run."""
    study = _study(tmp_path, SMALL)
    out = tmp_path / "out.csv"
    journal = tmp_path / "out.csv.journal.jsonl"
    code = "import sys; from planner.cli import entry; sys.argv[0] = 'planner'; entry()"
    args = [sys.executable, "-c", code, "sweep", "--grid", str(study), "-j", "1", "--csv", str(out), "-q"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists() and len(journal.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    done = len(journal.read_text().splitlines()) - 1
    assert done >= 1 and not out.exists()
    from planner.cli import main

    calls = []

    def counting(task):
        calls.append(task)
        return run_point(task)

    kwdefaults = sweep.run_sweep.__kwdefaults__
    old, kwdefaults["run"] = kwdefaults["run"], counting
    try:
        assert main(["sweep", "--grid", str(study), "-j", "1", "--csv", str(out), "--resume", "-q"]) == 0
    finally:
        kwdefaults["run"] = old
    assert len(calls) == 4 - done
    resumed = out.read_text()
    assert main(["sweep", "--grid", str(study), "-j", "1", "--csv", str(tmp_path / "whole.csv"), "-q"]) == 0
    assert resumed == (tmp_path / "whole.csv").read_text()


# ------------------------------------------------------------------------------------------------
# Engines: Ray only with --engine ray


def test_the_local_engine_never_imports_ray(run_cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # any "import ray" raises ImportError
    args = ("sweep", "-m", "gpt-1.7b", "-c", "dgx-h100", "-n", "1", "-b", "16", "-s", "1024")
    r = run_cli(*args, "--engine", "local", "--json")
    assert r.exit_code == 0 and "prediction_interval" in r.stdout  # every point's best plan has one
    r = run_cli(*args, "--engine", "ray")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr == "error: --engine ray needs Ray, which is not installed: pip install 'planner[ray]'\n"
    assert run_cli(*args, "--engine", "spark").exit_code == 2
    assert "--ray-address needs --engine ray" in run_cli(*args, "--ray-address", "auto").stderr
    assert run_cli(*args, "--resume").exit_code == 2  # no journal to resume from


def test_the_ray_extra_is_declared():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("ray[default]") for d in extras["ray"])
    assert not any(d.startswith("ray") for d in extras["test"])


def test_study_csv_has_the_prediction_interval_when_rows_carry_one():
    row = {**_fake_row(_tasks(1)[0]), "days_to_train": 10.0, "tokens_per_s_per_gpu": 1000.0}
    plain = sweep.sweep_csv([row], study=True)
    assert "tokens_per_s_low" not in plain
    row["prediction_interval"] = {"level": 0.8, "tokens_per_s_per_gpu": [800.0, 1250.0]}
    header, values = sweep.sweep_csv([row], study=True).splitlines()
    cells = dict(zip(header.split(","), values.split(","), strict=True))
    assert (cells["tokens_per_s_low"], cells["tokens_per_s_high"]) == ("6400.0", "10000.0")
    assert (cells["days_to_train_low"], cells["days_to_train_high"]) == ("8.0", "12.5")
    assert cells["interval_level"] == "0.8"
    assert "tokens_per_s_low" not in sweep.sweep_csv([row])  # a sweep of flags keeps its columns


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()


def test_ray_and_local_engines_write_the_same_bytes(run_cli, tmp_path, local_ray):
    study = _study(tmp_path, SMALL + "tokens: 1T\ngpu_hour_price_usd: 2\n")
    outputs = {}
    for engine in ("local", "ray"):
        files = tmp_path / engine
        files.mkdir()
        r = run_cli("sweep", "--grid", str(study), "--engine", engine, "-j", "2",
                    "--csv", str(files / "s.csv"), "--svg", str(files / "s.svg"), "--json")  # fmt: skip
        assert r.exit_code == 0, r.stderr
        table = run_cli("sweep", "--grid", str(study), "--engine", engine, "-j", "2")
        outputs[engine] = (
            r.stdout,
            (files / "s.csv").read_bytes(),
            (files / "s.svg").read_bytes(),
            table.stdout,
        )
    assert outputs["ray"] == outputs["local"]
    assert outputs["ray"][1].count(b"\n") == 5  # a header and four points


def test_ray_retries_a_failed_task_once(local_ray, tmp_path):
    rows = run_sweep(_tasks(3), 0, engine="ray", run=_fails_on_ray)
    assert [r["feasible"] for r in rows] == [True, False, True]
    assert rows[1]["error"] == "RuntimeError: point 2 always fails"


def _fails_on_ray(task: SweepTask) -> dict:
    if task.point.nodes == 2:
        raise RuntimeError("point 2 always fails")
    return _fake_row(task)
