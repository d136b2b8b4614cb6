"""Where a sweep's points run: in this process, on a local process pool (the default; nothing to
install) or as tasks on a Ray cluster (``--engine ray``, the optional extra ``planner[ray]``).

Every engine does the same thing: it takes points (an index and a picklable
:class:`planner.outputs.sweep.SweepTask`), runs ``run(task)`` on each, and hands back each outcome as
it finishes, a row or a :class:`Failure`. :func:`schedule` keeps at most ``window`` points in
flight, gives a failed or lost point one more attempt (:data:`MAX_ATTEMPTS`) before reporting its
error, and calls ``on_outcome(index, row_or_failure)`` once per point, in completion order; the
caller stores results by index, so the output does not depend on which engine ran them, how many
workers it had, or what finished first.

A point is *failed* when ``run`` raises, *lost* when its worker dies: on the local pool a dead
worker breaks the whole :class:`concurrent.futures.ProcessPoolExecutor` (Python's documented
behaviour: every pending future raises ``BrokenProcessPool``), so each point in flight counts one
attempt and the rest run on a fresh pool; on Ray only the task whose worker or node died is lost
(``WorkerCrashedError``, ``NodeDiedError``; Ray's own task retries are turned off,
``max_retries=0``, so that both engines retry alike).

Ray is imported only by :class:`RayEngine`, so the local engine works where Ray is not installed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from planner.inputs.errors import PlannerError, UsageError

ENGINES = ("local", "ray")
"""The values of ``planner sweep --engine``."""

MAX_ATTEMPTS = 2
"""Attempts per point: a failed or lost point is retried once, then reported with its error."""

RAY_EXTRA = "pip install 'planner[ray]'"
"""How to install Ray for ``--engine ray`` (pyproject.toml's optional dependency ``ray``)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A point's attempt that raised or whose worker was lost: the error in one line."""

    error: str


def error_text(exc: BaseException) -> str:
    """``Type: message``, on one line, at most 300 characters (Ray's task errors carry the
    worker's traceback: their ``cause`` is the exception the task raised)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:300] if message else type(exc).__name__


class SerialEngine:
    """Runs each point in this process when it is submitted (``--jobs 1``, or one point)."""

    name = "this process"

    def __init__(self, run: Callable) -> None:
        self.run, self.done = run, []

    def submit(self, index: int, task) -> None:
        try:
            self.done.append((index, self.run(task)))
        except Exception as exc:  # a failed point is reported, not raised (the sweep goes on)
            self.done.append((index, Failure(error_text(exc))))

    def wait(self) -> list[tuple[int, object]]:
        done, self.done = self.done, []
        return done

    def close(self) -> None:
        pass


class LocalEngine:
    """A pool of ``processes`` local worker processes; a fresh pool replaces a broken one."""

    def __init__(self, run: Callable, processes: int) -> None:
        self.run, self.processes = run, processes
        self.name = f"{processes} process{'es' * (processes > 1)}"
        self.pool: ProcessPoolExecutor | None = None
        self.futures: dict = {}

    def submit(self, index: int, task) -> None:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=self.processes)
        try:
            self.futures[self.pool.submit(self.run, task)] = index
        except BrokenProcessPool:  # broken since the last wait: the point runs on a fresh pool
            self._replace_pool()
            self.futures[self.pool.submit(self.run, task)] = index

    def wait(self) -> list[tuple[int, object]]:
        finished, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
        out, broken = [], False
        for f in sorted(finished, key=lambda f: self.futures[f]):
            index = self.futures.pop(f)
            try:
                out.append((index, f.result()))
            except BrokenProcessPool:
                broken = True
                out.append((index, Failure("lost: its worker process died (the pool was restarted)")))
            except Exception as exc:
                out.append((index, Failure(error_text(exc))))
        if broken:
            self._replace_pool()
        return out

    def _replace_pool(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = ProcessPoolExecutor(max_workers=self.processes)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class RayEngine:
    """Each point a Ray task (one CPU) on the cluster at ``address``; with no address, the Ray
    already started in this process (``ray.init`` called by the caller) or a local one started
    here (``num_cpus``: ``jobs``, or every core) and stopped at :meth:`close`."""

    def __init__(self, run: Callable, address: str | None, jobs: int) -> None:
        try:
            import ray
        except ImportError:
            raise PlannerError(f"--engine ray needs Ray, which is not installed: {RAY_EXTRA}") from None
        self.ray, self.started = ray, False
        if not ray.is_initialized():
            self._init(address, jobs)
        self.remote = ray.remote(num_cpus=1, max_retries=0)(run)
        self.refs: dict = {}
        cpus = int(ray.cluster_resources().get("CPU", 0))
        self.name = f"Ray ({cpus} CPU{'s' * (cpus != 1)})"

    def _init(self, address: str | None, jobs: int) -> None:
        import logging

        options: dict = {"logging_level": logging.ERROR, "log_to_driver": False, "include_dashboard": False}
        if address is None:
            # A local Ray: its workers import planner from where this process does.
            root = str(Path(__file__).resolve().parents[2])
            options["runtime_env"] = {"env_vars": {"PYTHONPATH": root}}
            if jobs:
                options["num_cpus"] = jobs
        try:
            self.ray.init(address=address, **options)
        except Exception as exc:  # a wrong address, a cluster that is down
            where = f"--ray-address {address}" if address else "a local Ray"
            raise PlannerError(f"{where}: Ray did not start: {error_text(exc)}") from None
        self.started = True

    def submit(self, index: int, task) -> None:
        self.refs[self.remote.remote(task)] = index

    def wait(self) -> list[tuple[int, object]]:
        ready, rest = self.ray.wait(list(self.refs), num_returns=1)
        if rest:  # and every other point already done, without waiting
            ready += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        out = []
        for ref in ready:
            index = self.refs.pop(ref)
            try:
                out.append((index, self.ray.get(ref)))
            except Exception as exc:  # the task raised (RayTaskError), or its worker or node died
                out.append((index, Failure(error_text(exc))))
        return out

    def close(self) -> None:
        for ref in list(self.refs):
            self.ray.cancel(ref, force=True)
        self.refs.clear()
        if self.started:
            self.ray.shutdown()


def make_engine(engine: str, run: Callable, jobs: int, points: int, ray_address: str | None = None):
    """The engine of ``--engine`` for ``points`` points: local with ``jobs`` processes (one point
    or one process: this process), or Ray (``jobs``: at most that many points in flight, 0: no
    cap). Usage errors name the flag."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r} is not allowed; allowed values: {', '.join(ENGINES)}")
    if ray_address is not None and engine != "ray":
        raise UsageError("--ray-address needs --engine ray")
    if engine == "ray":
        if jobs < 0:
            raise UsageError("--jobs must not be negative")
        return RayEngine(run, ray_address, jobs)
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if jobs == 1 or points <= 1:
        return SerialEngine(run)
    return LocalEngine(run, min(jobs, points))


def window(engine, jobs: int, points: int) -> int:
    """Most points in flight: twice the pool (a worker never waits for its next point), ``--jobs``
    on Ray (every point when 0: Ray's scheduler queues them), one in this process."""
    if isinstance(engine, LocalEngine):
        return 2 * engine.processes
    if isinstance(engine, RayEngine):
        return jobs or max(points, 1)
    return 1


def schedule(engine, tasks: dict[int, object], limit: int, on_outcome: Callable[[int, object], None]) -> None:
    """Run every task of ``tasks`` (index -> task) on ``engine``, at most ``limit`` in flight; a
    :class:`Failure` gets one more attempt (first in line) before it is handed on. The engine is
    closed however this ends (an interrupt cancels what is in flight)."""
    queue = deque(sorted(tasks))
    attempts = dict.fromkeys(tasks, 0)
    in_flight = 0
    try:
        while queue or in_flight:
            while queue and in_flight < limit:
                index = queue.popleft()
                attempts[index] += 1
                in_flight += 1
                engine.submit(index, tasks[index])
            for index, outcome in engine.wait():
                in_flight -= 1
                if isinstance(outcome, Failure) and attempts[index] < MAX_ATTEMPTS:
                    queue.appendleft(index)
                else:
                    on_outcome(index, outcome)
    finally:
        engine.close()
