"""Bubble-fill budgets (PipeFill, Arfeen et al. 2024, arXiv:2410.07192) read from the timeline.

For every pipeline stage, every idle window of one iteration: when it starts, how long it lasts,
how much of it a fill job can use after a context switch and a safety margin, how many of the main
job's micro-batches are resident then and so how much GPU memory is free *at that moment* (not at
the stage's peak), and which main-job operations bracket it. Windows come from the same
:class:`~cost_models.schedules.Timeline` as the step time (STYLE lesson 4); the proposed output
format is ../shared/reference/algorithms.md §3.4.

Window kinds: ``warm-up`` (before the stage's first backward), ``imbalance`` (between its first
backward and last forward: waiting on a slower neighbour), ``cool-down`` (after its last forward),
``drain`` (after its last backward until every stage has finished and reduced gradients),
``iteration-boundary`` (after its own optimizer step until the slowest stage's ends).

Fill jobs are packed per window: a window runs ``floor(usable / unit_time)`` units when the fill
job's footprint plus one unit fits in the window's free memory. Units are identical and windows
independent, so this per-window count is the optimal packing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cost_models.estimate import Estimate
from cost_models.schedules import B, F
from planner.inputs.documents import GIB, Reader, check_header, read_document

DEFAULT_SWITCH_OVERHEAD_S = 0.002
"""Context switch into and out of a fill job (CUDA stream/graph hand-over; PipeFill reports
sub-2% main-job slowdown with switch costs in the millisecond range). An option."""
DEFAULT_SAFETY_MARGIN = 0.05
"""Fraction of each window kept free so that prediction error does not delay the main job."""
DEFAULT_MIN_SLICE_S = 0.005
"""Windows whose usable time is shorter than this are not counted as usable."""
DEFAULT_DURATION_ERROR = 0.10
"""Relative error assumed on predicted window durations when bounding the main job's slowdown
(the cost model's validation median error is of this order; see docs/calibration.md)."""


@dataclass(frozen=True, slots=True)
class Assumptions:
    """The knobs of a budget, echoed in its output."""

    switch_overhead_s: float = DEFAULT_SWITCH_OVERHEAD_S
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    min_slice_s: float = DEFAULT_MIN_SLICE_S
    duration_error: float = DEFAULT_DURATION_ERROR


@dataclass(frozen=True, slots=True)
class Window:
    """One idle interval of one stage in one iteration."""

    kind: str
    start_s: float
    duration_s: float
    usable_s: float
    inflight_microbatches: float
    free_memory_bytes: float
    insert_after: str
    resume_before: str
    overlaps_comm: tuple[str, ...]

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class StageBudget:
    """All windows of one pipeline stage."""

    stage: int
    gpu: str
    devices_per_stage: int
    capacity_bytes: float
    static_bytes: float
    windows: tuple[Window, ...]
    pipeline_idle_s: float
    """Idle time inside the pipeline phase; equals the simulator's idle time of the stage."""
    peak_bytes: float = 0.0
    """The stage's peak memory (what a fill job's resident state must fit beside)."""

    @property
    def idle_s(self) -> float:
        return sum(w.duration_s for w in self.windows)

    @property
    def usable_s(self) -> float:
        return sum(w.usable_s for w in self.windows)


@dataclass(frozen=True, slots=True)
class Budget:
    """The bubble-fill budget of one plan."""

    iteration_time_s: float
    schedule: str
    stages: tuple[StageBudget, ...]
    assumptions: Assumptions

    @property
    def gpu_seconds_per_iteration(self) -> float:
        """Usable GPU-seconds per iteration over all GPUs."""
        return sum(s.usable_s * s.devices_per_stage for s in self.stages)

    @property
    def equivalent_gpus(self) -> float:
        """Whole GPUs' worth of usable fill time."""
        return self.gpu_seconds_per_iteration / self.iteration_time_s if self.iteration_time_s else 0.0


def _usable(duration: float, a: Assumptions) -> float:
    usable = duration * (1.0 - a.safety_margin) - a.switch_overhead_s
    return usable if usable >= a.min_slice_s else 0.0


def budget(est: Estimate, assumptions: Assumptions | None = None) -> Budget:
    """Every idle window of every stage in one iteration of ``est``."""
    a = assumptions or Assumptions()
    tl = est.timeline
    c = est.config
    devices = c.tp * c.cp * c.dp
    sync = max(float(tl.end_s[s.stage][-1]) + s.dp_exposed_s for s in est.stages)
    step = est.step_time_s
    stages = []
    for s in est.stages:
        r = s.stage
        kinds, starts, ends, level = tl.kind[r], tl.start_s[r], tl.end_s[r], tl.inflight[r]
        mem = s.memory
        static = mem.static_bytes + mem.gpu_reserve_bytes  # resident all iteration
        unit = (
            mem.activations_bytes / mem.peak_inflight_microbatches if mem.peak_inflight_microbatches else 0.0
        )
        b_idx = np.flatnonzero(kinds == B)
        f_idx = np.flatnonzero(kinds == F)
        first_b = int(b_idx[0]) if b_idx.size else len(kinds)
        last_f = int(f_idx[-1]) if f_idx.size else -1
        windows: list[Window] = []

        def add(
            kind: str, t0: float, t1: float, resident: float, after: str, before: str, comm: tuple[str, ...]
        ):
            if t1 - t0 <= 1e-12:
                return
            free = mem.capacity_bytes - static - resident
            windows.append(
                Window(
                    kind=kind,
                    start_s=t0,
                    duration_s=t1 - t0,
                    usable_s=_usable(t1 - t0, a),
                    inflight_microbatches=resident / unit if unit else 0.0,
                    free_memory_bytes=max(0.0, free),
                    insert_after=after,
                    resume_before=before,
                    overlaps_comm=comm,
                )
            )

        add("warm-up", 0.0, float(starts[0]), 0.0, "iteration start", tl.op_name(r, 0), ())
        for i in range(1, len(kinds)):
            gap0, gap1 = float(ends[i - 1]), float(starts[i])
            if gap1 - gap0 <= 1e-12:
                continue
            kind = "warm-up" if i <= first_b else ("imbalance" if i <= last_f else "cool-down")
            add(kind, gap0, gap1, float(level[i - 1]), tl.op_name(r, i - 1), tl.op_name(r, i), ())
        last_end = float(ends[-1])
        residual = float(level[-1])
        comm = ("dp_grad_reduce",) if s.dp_exposed_s > 0 else ()
        add("drain", last_end, sync, residual, tl.op_name(r, len(kinds) - 1), "optimizer step", comm)
        gather = ("dp_param_gather",) if c.optimizer_sharding in ("distributed", "zero2") else ()
        add(
            "iteration-boundary",
            sync + s.optimizer_s,
            step,
            residual,
            "optimizer step",
            "next iteration",
            gather,
        )
        windows.sort(key=lambda w: w.start_s)
        stages.append(
            StageBudget(
                stage=r,
                gpu=s.gpu,
                devices_per_stage=s.devices * c.dp if s.devices else devices,
                capacity_bytes=mem.capacity_bytes,
                static_bytes=static,
                windows=tuple(windows),
                pipeline_idle_s=tl.idle_s(r),
                peak_bytes=mem.peak_bytes,
            )
        )
    return Budget(iteration_time_s=step, schedule=c.schedule, stages=tuple(stages), assumptions=a)


# ------------------------------------------------------------------------------------------------
# Fill jobs


@dataclass(frozen=True, slots=True)
class FillJob:
    """Work to run in the bubbles, measured on the main job's GPU type."""

    name: str
    unit_time_s: float
    """Time of one unit of work (e.g. one inference batch) on this GPU."""
    unit_memory_bytes: float
    """Memory one unit needs while it runs (activations, KV cache)."""
    footprint_bytes: float
    """Memory the fill job needs resident whenever it runs (its weights)."""
    min_units: int = 1
    """Smallest number of units worth switching in for."""


def load_fill_job(path: str):
    """Read a fill-job YAML (``kind: fill_job``): measured units (``unit_time_s``, a
    :class:`FillJob`) or a model priced by the cost model (``model``, ``mode``, a
    :class:`planner.outputs.fill_jobs.ModelFillJob`)."""
    p = Path(path)
    r = Reader(read_document(p), str(p))
    check_header(r, "fill_job")
    if "model" in r.data:
        from planner.outputs.fill_jobs import load_model_fill_job

        model_job = load_model_fill_job(r)
        r.get("description", str, "")
        r.done()
        return model_job
    job = FillJob(
        name=r.get("name", str),
        unit_time_s=r.get("unit_time_s", float, positive=True),
        unit_memory_bytes=r.get("unit_memory_gib", float) * GIB,
        footprint_bytes=r.get("footprint_gib", float) * GIB,
        min_units=r.get("min_units", int, 1, positive=True),
    )
    r.get("description", str, "")
    r.done()
    return job


@dataclass(frozen=True, slots=True)
class Fill:
    """Result of packing a fill job into a budget."""

    job: FillJob
    units_per_window: tuple[tuple[int, ...], ...]
    """Units placed in each window, per stage, in window order."""
    units_per_iteration: int
    """Units per iteration on one device per stage, summed over stages, times devices per stage."""
    fill_throughput_units_per_s: float
    bubble_time_used_fraction: float
    slowdown_bound: float
    """Worst-case main-job slowdown if window durations are off by ``duration_error``."""
    reason: str = ""
    """Why no unit fits (empty when some do): the window, time or memory that limits it."""
    tasks_per_s: float = 0.0
    """Model fill jobs: whole tasks (inference batches, training steps) per second, all GPUs."""
    memory_modes: tuple[str, ...] = ()
    """Model fill jobs, per stage: ``resident``, ``offloaded`` or ``none``."""


def fit_fill_job(b: Budget, job, max_slowdown: float | None = 0.02) -> Fill:
    """Pack ``job`` into every window of ``b``, keeping the slowdown bound under ``max_slowdown``
    (None: no cap; the bound is only computed). A model fill job is packed piece by piece
    (:func:`planner.outputs.fill_jobs.fit_model_fill_job`)."""
    if not isinstance(job, FillJob):
        from planner.outputs.fill_jobs import fit_model_fill_job

        fit = fit_model_fill_job(b, job, max_slowdown)
        idle = sum(st.idle_s * st.devices_per_stage for st in b.stages)
        t = b.iteration_time_s
        return Fill(
            job=job,
            units_per_window=fit.pieces_per_window,
            units_per_iteration=fit.pieces,
            fill_throughput_units_per_s=fit.pieces / t if t else 0.0,
            bubble_time_used_fraction=min(1.0, fit.used_s / idle) if idle else 0.0,
            slowdown_bound=fit.slowdown_bound,
            reason=fit.reason,
            tasks_per_s=fit.tasks / t if t else 0.0,
            memory_modes=fit.memory_modes,
        )
    a = b.assumptions
    placed: list[list[int]] = []
    for si, st in enumerate(b.stages):
        row = []
        for wi, w in enumerate(st.windows):
            units = 0
            if w.usable_s > 0 and w.free_memory_bytes >= job.footprint_bytes + job.unit_memory_bytes:
                units = int(math.floor(w.usable_s / job.unit_time_s + 1e-9))
                if units < job.min_units:
                    units = 0
            row.append(units)
        placed.append(row)

    def bound() -> float:
        total = 0.0
        for si, st in enumerate(b.stages):
            for wi, w in enumerate(st.windows):
                u = placed[si][wi]
                if u:
                    busy = u * job.unit_time_s + a.switch_overhead_s
                    total += max(0.0, busy - w.duration_s * (1.0 - a.duration_error))
        return total / b.iteration_time_s if b.iteration_time_s else 0.0

    # Shrink the fullest windows first until the bound holds (deterministic order).
    while max_slowdown is not None and bound() > max_slowdown:
        candidates = [
            (placed[si][wi] * job.unit_time_s / b.stages[si].windows[wi].duration_s, si, wi)
            for si, st in enumerate(b.stages)
            for wi in range(len(st.windows))
            if placed[si][wi]
        ]
        if not candidates:
            break
        _, si, wi = max(candidates)
        placed[si][wi] -= 1
        if placed[si][wi] < job.min_units:
            placed[si][wi] = 0
    per_stage_units = [sum(row) for row in placed]
    units = sum(u * st.devices_per_stage for u, st in zip(per_stage_units, b.stages))
    idle = sum(st.idle_s * st.devices_per_stage for st in b.stages)
    used = units * job.unit_time_s
    return Fill(
        job=job,
        units_per_window=tuple(tuple(row) for row in placed),
        units_per_iteration=units,
        fill_throughput_units_per_s=units / b.iteration_time_s if b.iteration_time_s else 0.0,
        bubble_time_used_fraction=used / idle if idle else 0.0,
        slowdown_bound=bound(),
        reason="" if units else no_fit_reason(b, job, 0.0 if max_slowdown is None else max_slowdown),
    )


def no_fit_reason(b: Budget, job: FillJob, max_slowdown: float) -> str:
    """Why :func:`fit_fill_job` places no unit of ``job`` in ``b``: the test each window fails
    (usable time for ``min_units`` units, free memory for the footprint plus one unit), naming the
    longest usable window and the most free memory in any window, or the slowdown bound."""
    windows = [(w, st) for st in b.stages for w in st.windows]
    if not windows:
        return "the plan has no idle window"
    need_s = job.min_units * job.unit_time_s
    need_b = job.footprint_bytes + job.unit_memory_bytes
    longest, lst = max(windows, key=lambda x: (x[0].usable_s, -x[1].stage, -x[0].start_s))
    roomiest, rst = max(windows, key=lambda x: (x[0].free_memory_bytes, -x[1].stage, -x[0].start_s))
    long_enough = [(w, st) for w, st in windows if w.usable_s + 1e-9 * job.unit_time_s >= need_s]
    roomy = [(w, st) for w, st in windows if w.free_memory_bytes >= need_b]
    unit = f"{job.min_units} unit{'s' if job.min_units > 1 else ''} ({need_s:.3g} s)"
    time_msg = (
        f"the longest usable window is {longest.usable_s:.3g} s (stage {lst.stage}, {longest.kind} at "
        f"{longest.start_s:.3g} s, {longest.duration_s:.3g} s long before the {b.assumptions.safety_margin:.0%} "
        f"margin and {b.assumptions.switch_overhead_s * 1e3:.3g} ms switch), shorter than {unit}"
    )
    mem_msg = (
        f"the most free memory in any window is {roomiest.free_memory_bytes / GIB:.1f} GiB (stage {rst.stage}, "
        f"{roomiest.kind}), less than the {need_b / GIB:.1f} GiB the job needs (footprint "
        f"{job.footprint_bytes / GIB:.1f} + one unit {job.unit_memory_bytes / GIB:.1f})"
    )
    if not long_enough and not roomy:
        return f"{time_msg}; and {mem_msg}"
    if not long_enough:
        return time_msg
    if not roomy:
        return mem_msg
    both = [(w, st) for w, st in long_enough if w.free_memory_bytes >= need_b]
    if not both:
        w, st = max(long_enough, key=lambda x: (x[0].free_memory_bytes, -x[1].stage, -x[0].start_s))
        return (
            f"no window has both the time and the memory: the {len(long_enough)} windows long enough for "
            f"{unit} have at most {w.free_memory_bytes / GIB:.1f} GiB free (stage {st.stage}, {w.kind}), "
            f"the job needs {need_b / GIB:.1f} GiB"
        )
    return (
        f"the main-job slowdown bound ({max_slowdown:.2%}, assuming window durations off by "
        f"{b.assumptions.duration_error:.0%}) removed every unit; raise --max-slowdown"
    )


def budget_dict(b: Budget) -> dict:
    """JSON-ready budget (top-level ``iteration_time_s`` and ``per_stage``)."""
    return {
        "iteration_time_s": b.iteration_time_s,
        "schedule": b.schedule,
        "model_source": "analytic",
        "per_stage": [
            {
                "stage": s.stage,
                "gpu": s.gpu,
                "devices_per_stage": s.devices_per_stage,
                "capacity_bytes": s.capacity_bytes,
                "static_bytes": s.static_bytes,
                "idle_s": s.idle_s,
                "pipeline_idle_s": s.pipeline_idle_s,
                "usable_s": s.usable_s,
                "usable_fraction": s.usable_s / b.iteration_time_s if b.iteration_time_s else 0.0,
                "intervals": [
                    {
                        "kind": w.kind,
                        "start_s": w.start_s,
                        "duration_s": w.duration_s,
                        "usable_s": w.usable_s,
                        "inflight_microbatches": w.inflight_microbatches,
                        "free_memory_bytes": w.free_memory_bytes,
                        "insert_after": w.insert_after,
                        "resume_before": w.resume_before,
                        "overlaps_comm": list(w.overlaps_comm),
                    }
                    for w in s.windows
                ],
            }
            for s in b.stages
        ],
        "aggregate": {
            "gpu_seconds_per_iteration": b.gpu_seconds_per_iteration,
            "equivalent_gpus": b.equivalent_gpus,
        },
        "assumptions": {
            "switch_overhead_s": b.assumptions.switch_overhead_s,
            "safety_margin": b.assumptions.safety_margin,
            "min_slice_s": b.assumptions.min_slice_s,
            "duration_error": b.assumptions.duration_error,
        },
    }


def budget_summary_dict(b: Budget) -> dict:
    """The compact budget of a plan file: per stage, how many windows, how much idle and usable
    time, the largest window and the least free memory in any window (GiB); the assumptions and
    aggregate as in :func:`budget_dict`. ``planner bubbles --plan FILE`` lists every window."""
    full = budget_dict(b)
    return {
        "iteration_time_s": full["iteration_time_s"],
        "schedule": full["schedule"],
        "model_source": full["model_source"],
        "per_stage": [
            {
                "stage": s.stage,
                "gpu": s.gpu,
                "devices_per_stage": s.devices_per_stage,
                "windows": len(s.windows),
                "idle_s": s.idle_s,
                "usable_s": s.usable_s,
                "largest_window_s": max((w.duration_s for w in s.windows), default=0.0),
                "min_free_memory_gib": min((w.free_memory_bytes for w in s.windows), default=0.0) / GIB,
            }
            for s in b.stages
        ],
        "aggregate": full["aggregate"],
        "assumptions": full["assumptions"],
    }


def fill_dict(f: Fill) -> dict:
    """JSON-ready fill result."""
    return {
        "job": f.job.name,
        "units_per_iteration": f.units_per_iteration,
        "fill_throughput_units_per_s": f.fill_throughput_units_per_s,
        "bubble_time_used_fraction": f.bubble_time_used_fraction,
        "slowdown_bound": f.slowdown_bound,
        "units_per_window": [list(row) for row in f.units_per_window],
        "reason": f.reason,
        **(
            {"tasks_per_s": f.tasks_per_s, "memory_modes": list(f.memory_modes)}
            if not isinstance(f.job, FillJob)
            else {}
        ),
    }
