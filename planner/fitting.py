"""Fitting GPU efficiency data to published runs, and validating it honestly.

* :func:`fit` — per GPU family, coordinate descent over six numbers of the GPU's ``efficiency``
  block (``gemm_efficiency_max``, ``gemm_half_efficiency_flop``, ``attention_efficiency``,
  ``fp8_gemm_speedup`` where FP8 runs exist, ``kernel_overhead_s``, ``comm_overlap_slowdown``)
  minimising the mean absolute log error of tokens/s per GPU over all of the family's runs at once
  (no per-run parameter).
  ``scripts/calibrate.py`` writes its result into ``hardware_profiles/gpus``.
* :func:`leave_one_source_out` — the figures to quote: for each source (a paper, a framework's
  performance page), refit every family on the runs of the *other* sources, starting from the
  uncalibrated vendor-typical values, and predict the held-out source's runs with that fit. A
  family with no other runs falls back to its architecture's other runs (H100 80 GB <-> 96 GB),
  else keeps the uncalibrated values.
* :func:`group_ranking` — what a search lives on: for each layout group (runs of one model,
  cluster and batch that differ only in layout), the Spearman correlation of predicted vs
  measured throughput, whether the measured-best layout is predicted best, and the measured
  throughput lost by following the prediction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from cost_models.estimate import estimate
from planner.calibration import Case, Result, excluded_reason
from planner.software import MIN_RUNS, OVERRIDE_PARAMS, efficiency_family
from planner.specs import EfficiencySpec, GPUSpec

ARCHITECTURE_FALLBACK = {"h100": "h100-96gb", "h100-96gb": "h100"}

"""Where a family with no runs left borrows its fit: the same architecture's other memory variant."""

UNCALIBRATED = EfficiencySpec(
    gemm_efficiency_max=0.75,
    gemm_half_efficiency_flop=12e9,
    attention_efficiency=0.5,
    hbm_efficiency=0.8,
    fp8_gemm_speedup=1.6,
    kernel_overhead_s=20e-6,
    comm_overlap_slowdown=0.18,
)
"""The vendor-typical starting values every uncalibrated GPU type carries
(hardware_profiles/gpus/b200.yaml), and an overlap slowdown of 24 of 132 SMs (the CTAs an NCCL
all-gather takes on an H100; EfficiencySpec.comm_overlap_slowdown). Leave-one-source-out fits start
here, not from the shipped fit."""

PARAMS = (
    "gemm_efficiency_max",
    "gemm_half_efficiency_flop",
    "attention_efficiency",
    "fp8_gemm_speedup",
    "kernel_overhead_s",
    "comm_overlap_slowdown",
)
BOUNDS = {
    "gemm_efficiency_max": (0.3, 0.95),
    "gemm_half_efficiency_flop": (1e8, 1e12),
    "attention_efficiency": (0.1, 0.9),
    "fp8_gemm_speedup": (1.0, 2.0),
    "kernel_overhead_s": (0.0, 2e-3),
    "comm_overlap_slowdown": (0.0, 0.6),
}
ZERO_START = {"kernel_overhead_s": 1e-5, "comm_overlap_slowdown": 0.05}
"""Where a parameter at zero starts when a step would raise it (multiplicative steps cannot leave 0)."""
STEPS = (0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.6)


def family(case: Case) -> str:
    """Calibration family of a case's GPU type."""
    return efficiency_family(case.gpu)


def with_efficiency(case: Case, eff: EfficiencySpec) -> Case:
    """The case on the same cluster with the GPU's efficiency block replaced."""
    gpu: GPUSpec = replace(case.cluster.groups[0].gpu, efficiency=eff)
    groups = tuple(replace(g, gpu=gpu) for g in case.cluster.groups)
    return replace(case, cluster=replace(case.cluster, groups=groups))


def predict(case: Case, eff: EfficiencySpec | None = None) -> Result:
    """The case's prediction, with ``eff`` in place of its GPU's shipped efficiency when given."""
    c = with_efficiency(case, eff) if eff is not None else case
    return Result(case, estimate(c.model, c.cluster, c.job, c.config))


def loss(group: list[Case], eff: EfficiencySpec) -> float:
    """Mean absolute log error of tokens/s per GPU over ``group`` with efficiency ``eff``."""
    total = 0.0
    for c in group:
        pred = predict(c, eff).predicted
        total += abs(math.log(pred / c.measured_tokens_per_s_per_gpu))
    return total / len(group)


def fit(
    group: list[Case],
    start: EfficiencySpec,
    passes: int = 8,
    steps: tuple[float, ...] = STEPS,
    only: tuple[str, ...] = PARAMS,
) -> tuple[EfficiencySpec, float]:
    """Coordinate descent from ``start`` over the ``only`` parameters; each tries multiplicative
    ``steps`` within its bounds. ``fp8_gemm_speedup`` is fitted only when the group has FP8 runs."""
    params = [p for p in only if p != "fp8_gemm_speedup" or any(c.job.precision == "fp8" for c in group)]
    best, best_loss = start, loss(group, start)
    for _ in range(passes):
        improved = False
        for name in params:
            value = getattr(best, name)
            lo, hi = BOUNDS[name]
            for step in steps:
                raised = value * step if value else (ZERO_START.get(name, 0.0) * step if step > 1 else 0.0)
                trial_value = min(hi, max(lo, raised))
                trial = replace(best, **{name: trial_value})
                trial_loss = loss(group, trial)
                if trial_loss < best_loss - 1e-6:
                    best, best_loss, improved = trial, trial_loss, True
                    value = trial_value
        if not improved:
            break
    return best, best_loss


def profile_groups(group: list[Case]) -> dict[str, list[Case]]:
    """A family's runs by software release class, for classes with at least
    :data:`planner.software.MIN_RUNS` runs (sorted by class name)."""
    by: dict[str, list[Case]] = defaultdict(list)
    for c in group:
        if c.software:
            by[c.software].append(c)
    return {k: by[k] for k in sorted(by) if len(by[k]) >= MIN_RUNS}


def fit_profile(
    runs: list[Case], base: EfficiencySpec, passes: int = 8, steps: tuple[float, ...] = STEPS
) -> tuple[EfficiencySpec, float]:
    """A software class's overrides: the family's ``base`` fit with only
    :data:`planner.software.OVERRIDE_PARAMS` refitted on the class's ``runs``."""
    return fit(runs, base, passes, steps, OVERRIDE_PARAMS)


def usable(all_cases: Iterable[Case]) -> list[Case]:
    """Cases that can be predicted and count in the statistics."""
    return [c for c in all_cases if not c.skip_reason and not excluded_reason(c.run_id)]


LOSO_STEPS = (0.6, 0.85, 1.15, 1.6)
"""Coarser steps for the many leave-one-source-out refits (each a full fit of a family)."""


def leave_one_source_out(
    all_cases: Iterable[Case],
    passes: int = 4,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> list[Result]:
    """Every usable case predicted by a fit that never saw its source (see the module docstring).

    Each fold refits, from :data:`UNCALIBRATED`, every efficiency family its held-out runs belong to,
    on the other sources' runs of that family (or of :data:`ARCHITECTURE_FALLBACK`'s); a family with
    no other runs keeps the uncalibrated values. ``jobs`` folds run in parallel processes; the result
    does not depend on it."""
    cases_ = usable(all_cases)
    sources = sorted({c.source for c in cases_})
    folds = [(s, cases_, passes) for s in sources]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(_fold, folds))
    else:
        done = [_fold(f) for f in folds]
    out: dict[str, Result] = {}
    for source, (notes, results) in zip(sources, done):
        if progress:
            for note in notes:
                progress(f"held out {source!r}: {note}")
        out.update((r.case.run_id, r) for r in results)
    return [out[c.run_id] for c in cases_]


def _fold(args: tuple[str, list[Case], int]) -> tuple[list[str], list[Result]]:
    """One leave-one-source-out fold: refit the held-out runs' families without them, predict them."""
    source, cases_, passes = args
    held = [c for c in cases_ if c.source == source]
    rest = [c for c in cases_ if c.source != source]
    fitted: dict[tuple[str, str], EfficiencySpec] = {}
    notes = []
    for fam in sorted({family(c) for c in held}):
        train = [c for c in rest if family(c) == fam] or [
            c for c in rest if family(c) == ARCHITECTURE_FALLBACK.get(fam)
        ]
        base = fit(train, UNCALIBRATED, passes, LOSO_STEPS)[0] if train else UNCALIBRATED
        fitted[(fam, "")] = base
        notes.append(f"{fam} fitted on {len(train)} runs")
        # Software profiles refitted without the held-out source too (no leakage).
        classes = profile_groups(train)
        for cls in sorted({c.software for c in held if family(c) == fam and c.software}):
            if cls in classes:
                fitted[(fam, cls)] = fit_profile(classes[cls], base, passes, LOSO_STEPS)[0]
                notes.append(f"{fam}/{cls} profile fitted on {len(classes[cls])} runs")
    return notes, [predict(c, fitted.get((family(c), c.software), fitted[(family(c), "")])) for c in held]


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties); nan for fewer than 2 points."""

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    if len(xs) < 2:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else float("nan")


def group_ranking(results: list[Result], min_size: int = 4) -> list[dict]:
    """Per layout group with at least ``min_size`` runs: size, Spearman, measured-best ranked first,
    measured loss of following the prediction, predicted and measured spread (best / worst)."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.case.group:
            groups[r.case.group].append(r)
    rows = []
    for name in sorted(groups):
        rs = groups[name]
        if len(rs) < min_size:
            continue
        pred = [r.predicted for r in rs]
        meas = [r.case.measured_tokens_per_s_per_gpu for r in rs]
        picked = max(range(len(rs)), key=lambda i: (pred[i], -i))
        best = max(range(len(rs)), key=lambda i: (meas[i], -i))
        rows.append(
            {
                "group": name,
                "runs": len(rs),
                "spearman": spearman(pred, meas),
                "top1": meas[picked] >= meas[best],
                "loss_following_prediction": 1 - meas[picked] / meas[best],
                "predicted_spread": max(pred) / min(pred),
                "measured_spread": max(meas) / min(meas),
            }
        )
    return rows
