"""Prediction intervals, built from the held-out errors of the calibration set and validated on it.

The errors are the leave-one-source-out residuals of the calibration set
(:func:`planner.calibration.folds.leave_one_source_out`: each run predicted by a fit that never
saw its source), as log ratios ``r = ln(measured / predicted)`` of tokens/s per GPU.

**The unit of exchange is the source, not the run.** A user's cluster, software and launch are a new
source; the runs of one source share its biases (its framework build, its clock, what it left out of
its tables), so a new source's errors are not drawn like one more run of the sources seen: intervals
built as if they were (split conformal prediction over runs: Vovk, Gammerman and Shafer 2005, ch. 2;
Lei et al. 2018, JASA 113(523), Sec. 2.2) covered 62% of the runs of each source held out, at a
nominal 80%. So each class's bounds here are the source-balanced quantiles of its residuals (each
source weighs one in total, however many runs it published), a class must hold at least
:data:`planner.profiles.uncertainty.MIN_RUNS` residuals of at least :data:`MIN_SOURCES` sources (a
sparser one falls to the next coarser class: :func:`planner.profiles.uncertainty.class_keys`), and
the quantile level is calibrated (:func:`calibrate_level`): the smallest that covers at least the
target share (80%) of the runs of each source held out, with intervals built from the other sources
only (:func:`coverage`). :func:`nested_coverage` checks that calibration itself held out: for each
source, the level is chosen without it, then its runs are checked.

A prediction outside what its class's calibration runs cover takes the next coarser class
(:mod:`planner.profiles.uncertainty`); so does a held-out run outside what the *other* sources'
runs cover (:func:`planner.calibration.coverage.fold_extrapolation`), and the level must reach the
target on those runs and on the rest, each. Two plans are statistically tied below the
paired-error :func:`resolution_gap` of the calibration set's layout groups.

The table is data (``hardware_profiles/prediction_intervals.yaml``, read by
:mod:`planner.profiles.uncertainty`), written by ``scripts/prediction_intervals.py`` from the per-run
table ``scripts/validate_published.py --table`` writes (docs/data/calibration_runs.csv).
"""

from __future__ import annotations

import math
from collections import Counter

from planner.profiles.uncertainty import LEVEL, MIN_RUNS, IntervalClass, lookup

MIN_SOURCES = 4
"""Sources a class needs: fewer, and holding one out leaves the class to a source or two whose
biases are their own (the calibration set's held-out coverage rises from 64% to 74-78% between two
and four sources a class)."""

LEVEL_GRID = tuple(round(0.80 + 0.01 * i, 2) for i in range(20))
"""Quantile levels :func:`calibrate_level` tries (0.80 to 0.99)."""

Row = tuple[str, tuple[str, ...], float, bool]
"""(source, class keys finest first, ln(measured / predicted), extrapolated: outside what the other
sources' runs cover, :func:`planner.calibration.coverage.fold_extrapolation`)."""


def weighted_quantile(values: list[float], weights: list[float], q: float) -> float:
    """The smallest value whose cumulative weight reaches ``q`` of the total (values sorted)."""
    pairs = sorted(zip(values, weights))
    total = sum(weights)
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total - 1e-12:
            return v
    return pairs[-1][0]


def source_bounds(residuals: list[tuple[str, float]], level: float) -> tuple[float, float]:
    """The source-balanced ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``(source,
    residual)`` pairs: each source's runs share a weight of one."""
    counts = Counter(s for s, _ in residuals)
    values = [r for _, r in residuals]
    weights = [1.0 / counts[s] for s, _ in residuals]
    return (
        weighted_quantile(values, weights, (1.0 - level) / 2.0),
        weighted_quantile(values, weights, (1.0 + level) / 2.0),
    )


def build_table(rows: list[Row], level: float) -> dict[str, IntervalClass]:
    """Every class with enough residuals and sources, its bounds at quantile ``level``."""
    by_key: dict[str, list[tuple[str, float]]] = {}
    for source, keys, residual, _ in rows:
        for key in keys:
            by_key.setdefault(key, []).append((source, residual))
    table = {}
    for key in sorted(by_key):
        pairs = by_key[key]
        if len(pairs) >= MIN_RUNS and len({s for s, _ in pairs}) >= MIN_SOURCES:
            lo, hi = source_bounds(pairs, level)
            table[key] = IntervalClass(key, len(pairs), lo, hi)
    return table


def coverage(rows: list[Row], level: float) -> dict:
    """Held-out coverage: each source's runs against intervals built from the other sources' rows
    only, at quantile ``level``. The covered share of runs overall and per class used, and how many
    measured below and above their interval."""
    covered = below = above = 0
    per_class: dict[str, list[int]] = {}
    per_range = {False: [0, 0], True: [0, 0]}
    per_kind = {kind: [0, 0] for kind in KINDS}
    for source in sorted({s for s, *_ in rows}):
        table = build_table([r for r in rows if r[0] != source], level)
        for s, keys, residual, extrapolated in rows:
            if s != source:
                continue
            cls = lookup(table, keys, extrapolated)
            inside = cls.log_low <= residual <= cls.log_high
            covered += inside
            below += residual < cls.log_low
            above += residual > cls.log_high
            tallies = (
                per_class.setdefault(cls.key, [0, 0]),
                per_range[bool(extrapolated)],
                per_kind[kind_of(keys)],
            )
            for tally in tallies:
                tally[0] += inside
                tally[1] += 1
    n = len(rows)
    return {
        "quantile_level": level,
        "runs": n,
        "covered": covered / n if n else float("nan"),
        "measured_below_interval": below,
        "measured_above_interval": above,
        "by_class": {k: {"runs": v[1], "covered": v[0] / v[1]} for k, v in sorted(per_class.items())},
        "by_range": {
            name: {"runs": v[1], "covered": v[0] / v[1] if v[1] else float("nan")}
            for name, v in (
                ("inside_calibration", per_range[False]),
                ("outside_calibration", per_range[True]),
            )
        },
        "by_kind": {kind: {"runs": v[1], "runs_covered": v[0]} for kind, v in per_kind.items()},
    }


KINDS = ("dense", "moe")
"""The dense/MoE part of a class (:func:`planner.profiles.uncertainty.class_keys`)."""


def kind_of(keys: tuple[str, ...]) -> str:
    """Whether a row's class keys are of MoE or dense runs (every hierarchy holds the bare kind)."""
    return "moe" if "moe" in keys else "dense"


def _reaches(cov: dict, target: float) -> bool:
    """Whether a coverage reaches ``target`` overall and in each range that has runs (inside and
    outside the calibration of the fold that priced them)."""
    ranges = [r["covered"] for r in cov["by_range"].values() if r["runs"]]
    return cov["covered"] >= target and all(c >= target for c in ranges)


def calibrate_level(rows: list[Row], target: float = LEVEL) -> float:
    """The smallest quantile level of :data:`LEVEL_GRID` whose held-out coverage reaches ``target``
    overall, of the runs inside their fold's calibration and of those outside it (the wider
    interval a plan outside calibration takes holds its level too); the largest when none does."""
    for level in LEVEL_GRID:
        if _reaches(coverage(rows, level), target):
            return level
    return LEVEL_GRID[-1]


def nested_coverage(rows: list[Row], target: float = LEVEL) -> float:
    """The coverage of the calibrated intervals with the calibration held out too: for each source,
    the level is calibrated on the other sources, the table built from them, and the source's runs
    checked against it."""
    covered = 0
    for source in sorted({s for s, *_ in rows}):
        others = [r for r in rows if r[0] != source]
        table = build_table(others, calibrate_level(others, target))
        for s, keys, residual, extrapolated in rows:
            if s == source:
                cls = lookup(table, keys, extrapolated)
                covered += cls.log_low <= residual <= cls.log_high
    return covered / len(rows) if rows else float("nan")


def paired_errors(groups: dict[str, list[float]]) -> list[float]:
    """The errors of predicted ratios between two layouts of one layout group (runs of one model,
    cluster and batch that differ only in layout): for runs ``a`` and ``b`` with residuals
    ``r = ln(measured / predicted)``, ``ln(pred_a / pred_b) - ln(meas_a / meas_b) = r_b - r_a``;
    ``groups`` maps a group to its runs' residuals (in a fixed order)."""
    out = []
    for key in sorted(groups):
        r = groups[key]
        out += [r[j] - r[i] for i in range(len(r)) for j in range(i + 1, len(r))]
    return out


def resolution_gap(errors: list[float], level: float = LEVEL) -> float | None:
    """The smallest predicted log gap between two layouts that the model orders rightly with
    probability ``level``: the ``level`` quantile (nearest rank) of the paired errors made
    symmetric (which of a pair is ``a`` is arbitrary), so that a gap above it flips with
    probability at most ``1 - level``. None without errors."""
    both = sorted(errors + [-e for e in errors])
    if not both:
        return None
    return both[min(len(both) - 1, max(0, math.ceil(level * len(both)) - 1))]


def ordered_rightly(groups: dict[str, list[tuple[float, float]]], gap: float) -> dict:
    """Of the layout pairs whose predicted log gap exceeds ``gap``, how many the model orders as
    they measured; ``groups``: per group, each run's (predicted, measured) tokens/s per GPU."""
    right = total = 0
    for key in sorted(groups):
        runs = groups[key]
        for i in range(len(runs)):
            for j in range(i + 1, len(runs)):
                (pa, ma), (pb, mb) = runs[i], runs[j]
                if abs(math.log(pa / pb)) > gap:
                    total += 1
                    right += (pa > pb) == (ma > mb)
    return {"pairs": total, "ordered_rightly": right / total if total else float("nan")}
