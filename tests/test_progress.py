"""Progress: the search reports settled candidates (non-decreasing, ending at the total) and the
best step time so far; the CLI shows a bar only on a terminal, never with --quiet or --json."""

from __future__ import annotations

import pytest

from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster
from planner.search.chain import search
from planner.search.space import Restrictions


def _recorder():
    calls: list[tuple[int, int, float | None]] = []

    def progress(done: int, total: int, best_s: float | None = None) -> None:
        calls.append((done, total, best_s))

    return calls, progress


def test_search_progress_is_monotone_and_ends_at_the_total():
    calls, progress = _recorder()
    model, cluster = load_model("llama2-7b"), load_cluster("dgx-a100", 2)
    job = make_job(global_batch_size=64, seq_length=2048)
    result = search(model, cluster, job, Restrictions(max_micro_batch_size=2), top_k=3, progress=progress)
    assert len(calls) > 2
    done = [c[0] for c in calls]
    assert done == sorted(done) and done[0] >= 1
    total = calls[-1][1]
    assert all(c[1] == total for c in calls) and done[-1] == total
    best = [c[2] for c in calls if c[2] is not None]
    assert best and best == sorted(best, reverse=True)  # the best so far only improves
    assert best[-1] == pytest.approx(result.plans[0].estimate.step_time_s)


def test_sweep_progress_counts_points(tmp_path):
    from planner.outputs.sweep import SweepTask, run_sweep, sweep_points

    calls, progress = _recorder()
    tasks = [
        SweepTask(p, "llama2-7b", 64, 2048, "bf16", Restrictions(max_micro_batch_size=1, tp=(8,)), None)
        for p in sweep_points(["dgx-a100"], [1, 2])
    ]
    rows = run_sweep(tasks, 1, progress)
    assert [c[0] for c in calls] == [1, 2] and {c[1] for c in calls} == {2}
    assert calls[-1][2] == pytest.approx(min(r["step_time_s"] for r in rows))


SEARCH = ["search", "-m", "llama2-7b", "-c", "dgx-a100", "-n", "1", "-b", "32", "-s", "2048"]


@pytest.fixture
def terminal(monkeypatch):
    """Pretend stderr is a terminal and record what the progress bar is given."""
    import importlib

    from planner.cli import render

    common = importlib.import_module("planner.cli.common")
    calls, progress = _recorder()
    made = []

    def factory(label="searching", unit="candidates"):
        made.append(label)
        return progress

    monkeypatch.setattr(common, "_stderr_is_terminal", lambda: True)
    monkeypatch.setattr(render, "progress_callback", factory)
    return made, calls


def test_cli_search_shows_progress_on_a_terminal(run_cli, terminal):
    made, calls = terminal
    r = run_cli(*SEARCH)
    assert r.exit_code == 0 and made == ["searching"]
    assert calls and calls[-1][0] == calls[-1][1]


@pytest.mark.parametrize("flag", ["--quiet", "-q", "--json"])
def test_cli_quiet_and_json_show_no_progress(run_cli, terminal, tmp_path, flag):
    made, calls = terminal
    r = run_cli(*SEARCH, flag, "--out", str(tmp_path / "plan.yaml"))
    assert r.exit_code == 0 and made == [] and calls == []
    if flag != "--json":
        assert r.stderr == ""  # not even the "wrote plan.yaml" note


def test_cli_sweep_quiet(run_cli, terminal, tmp_path):
    made, _ = terminal
    args = ["sweep", "-m", "llama2-7b", "-c", "dgx-a100", "-n", "1,2", "-b", "32", "-s", "2048", "-j", "1"]
    r = run_cli(*args, "--csv", str(tmp_path / "s.csv"))
    assert r.exit_code == 0 and made == ["sweeping"] and "wrote" in r.stderr
    made.clear()
    r = run_cli(*args, "--quiet", "--csv", str(tmp_path / "s.csv"))
    assert r.exit_code == 0 and made == [] and r.stderr == ""


def test_progress_bar_waits_before_showing(monkeypatch):
    # a short run prints nothing: the bar only starts after PROGRESS_DELAY_S
    import io
    from contextlib import redirect_stderr

    from planner.cli import render

    err = io.StringIO()
    with redirect_stderr(err):
        update = render.progress_callback()
        for i in range(1, 5):
            update(i, 4, 1.0)
    assert err.getvalue() == ""
