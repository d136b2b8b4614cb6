"""Progress: the search reports settled candidates (non-decreasing, ending at the total) and the
best step time so far; the CLI shows a display only on a terminal, never with --quiet or --json,
and shows it from the start: the phase (loading, enumerating and bounding, searching N points) is
named before any of that work begins, so a long search is never silent."""

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
SWEEP = ["sweep", "-m", "llama2-7b", "-c", "dgx-a100", "-n", "1,2", "-b", "32", "-s", "2048", "-j", "1"]


class FakeDisplay:
    """Records what a command shows: its phases and its counts, in order, in ``events``."""

    def __init__(self, events: list, label: str) -> None:
        self.events, self.label = events, label
        events.append(("display", label))

    def phase(self, text: str) -> None:
        self.events.append(("phase", text))

    def __call__(self, done: int, total: int, best_s: float | None = None) -> None:
        self.events.append(("count", done, total, best_s))

    def close(self) -> None:
        self.events.append(("close",))


@pytest.fixture
def terminal(monkeypatch):
    """Pretend stderr is a terminal and record what the progress display is given; the work the
    display must come before (loading the problem, enumerating shapes, loading the sweep's points)
    is recorded in the same list."""
    import importlib

    from planner import api
    from planner.cli import render
    from planner.outputs import sweep
    from planner.search import chain

    common = importlib.import_module("planner.cli.common")
    events: list = []

    def recording(name, fn):
        def wrapper(*args, **kwargs):
            events.append(("work", name))
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(common, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(
        render, "progress_callback", lambda label="searching", unit="candidates": FakeDisplay(events, label)
    )
    monkeypatch.setattr(api, "load_problem", recording("load", api.load_problem))
    monkeypatch.setattr(chain, "enumerate_shapes", recording("enumerate", chain.enumerate_shapes))
    monkeypatch.setattr(sweep, "sweep_points", recording("points", sweep.sweep_points))
    return events


def _made(events: list) -> list[str]:
    return [e[1] for e in events if e[0] == "display"]


def _counts(events: list) -> list[tuple]:
    return [e[1:] for e in events if e[0] == "count"]


def test_cli_search_shows_progress_on_a_terminal(run_cli, terminal):
    r = run_cli(*SEARCH)
    assert r.exit_code == 0 and _made(terminal) == ["searching"]
    counts = _counts(terminal)
    assert counts and counts[-1][0] == counts[-1][1]
    assert terminal[-1] == ("close",)  # erased before the tables are printed


def test_cli_search_names_each_phase_before_it_starts(run_cli, terminal):
    # The search's own counts start only once every shape is enumerated and bounded, which took
    # 15-22 s on large jobs; the display is up, and says what is happening, before any of it.
    assert run_cli(*SEARCH).exit_code == 0
    kinds = [e[0] for e in terminal]
    assert kinds[:3] == ["display", "phase", "work"] and terminal[2] == ("work", "load")
    assert terminal[1] == ("phase", "loading llama2-7b on dgx-a100")
    enumerate_at = terminal.index(("work", "enumerate"))
    assert terminal[enumerate_at - 1] == ("phase", "enumerating and bounding candidates")
    assert kinds.index("count") > enumerate_at


def test_cli_sweep_names_each_phase_before_it_starts(run_cli, terminal):
    assert run_cli(*SWEEP).exit_code == 0
    assert terminal[:3] == [("display", "sweeping"), ("phase", "loading dgx-a100"), ("work", "points")]
    first_search = terminal.index(("work", "enumerate"))
    assert terminal[first_search - 1] == ("phase", "searching 2 points on 1 process")
    assert [c[:2] for c in _counts(terminal)] == [(1, 2), (2, 2)] and terminal[-1] == ("close",)


def test_cli_display_is_closed_on_an_error(run_cli, terminal):
    # nothing fits: the error is printed after the display is erased, not under it
    r = run_cli("search", "-m", "llama3-70b", *SEARCH[3:], "--tp", "1", "--pp", "1")
    assert r.exit_code == 3 and r.stdout == ""
    assert terminal[-1] == ("close",) and ("work", "enumerate") in terminal


@pytest.mark.parametrize("flag", ["--quiet", "-q", "--json"])
def test_cli_quiet_and_json_show_no_progress(run_cli, terminal, tmp_path, flag):
    r = run_cli(*SEARCH, flag, "--out", str(tmp_path / "plan.yaml"))
    assert r.exit_code == 0 and _made(terminal) == [] and _counts(terminal) == []
    if flag != "--json":
        assert r.stderr == ""  # not even the "wrote plan.yaml" note


def test_cli_sweep_quiet(run_cli, terminal, tmp_path):
    r = run_cli(*SWEEP, "--csv", str(tmp_path / "s.csv"))
    assert r.exit_code == 0 and _made(terminal) == ["sweeping"] and "wrote" in r.stderr
    terminal.clear()
    r = run_cli(*SWEEP, "--quiet", "--csv", str(tmp_path / "s.csv"))
    assert r.exit_code == 0 and _made(terminal) == [] and r.stderr == ""


def _terminal_console():
    import io

    from rich.console import Console

    out = io.StringIO()
    return out, Console(file=out, force_terminal=True, width=120)


def test_display_names_the_phase_then_counts():
    from planner.cli.render import ProgressDisplay

    out, con = _terminal_console()
    display = ProgressDisplay("searching", "candidates", con, delay_s=0.0)
    display.phase("enumerating and bounding candidates")
    assert "searching: enumerating and bounding candidates" in out.getvalue()  # drawn at once
    display(3, 10, 1.25)
    display.close()  # the last frame is drawn, then erased (transient)
    assert "3/10 candidates" in out.getvalue() and "best 1.250 s/step" in out.getvalue()


def test_display_waits_before_showing():
    # a short run prints nothing: the display draws only after its delay
    from planner.cli.render import ProgressDisplay

    out, con = _terminal_console()
    display = ProgressDisplay("searching", "candidates", con, delay_s=60.0)
    display.phase("loading llama2-7b on dgx-a100")
    for i in range(1, 5):
        display(i, 4, 1.0)
    display.close()
    assert "searching" not in out.getvalue() and "candidates" not in out.getvalue()
