"""Which software release profiles ship: a profile must predict runs it was not fitted on better
than the values that price its release class without it.

A release class with :data:`planner.profiles.software.MIN_RUNS` runs on a GPU family can be fitted
a profile (:func:`planner.calibration.fitting.fit_profile`: six numbers refitted on the class's
runs, regularised toward the family's base). Five or six runs of mixed models fit six numbers
closely whether or not the numbers carry to the class's other runs: with the six NVFP4 rows,
Megatron-Bridge 26.04's six B200-family runs and 26.06's five each moved the grouped-GEMM efficiency
to follow the one gpt-oss-120b run among them (docs/calibration.md, "How many runs a profile needs").
So each candidate is cross-validated before it ships (:func:`decide`):

* its runs, ordered by run id, are dealt into ``k = min(n, CROSS_FOLDS)`` folds (run ``i`` into fold
  ``i mod k``; five folds is the usual choice, Hastie, Tibshirani and Friedman, "The Elements of
  Statistical Learning", 2nd ed., Sec. 7.10.1); each fold's runs are predicted by the profile
  refitted from the same start on the other folds' runs;
* the same runs are predicted by the *fallback*: what prices the class when it has no entry, its
  predecessor's profile among the classes already kept for the family (release order;
  :func:`planner.profiles.software.predecessor`), else the family's base values;
* the profile ships when its held-out median |log error| is below the fallback's on those runs.

Both sides are held out: a predecessor's profile never saw the class's runs, and where the family's
base did (its class-free runs come from too few sources, planner.calibration.fitting.base_runs) the
base is refitted without them for the comparison (``base_for``). The decisions are made once, on
every run, by ``scripts/calibrate.py``, which
writes the kept profiles and a line per refused one; the leave-one-source-out, time-forward and
release-forward folds fit only the profiles that ship (planner.calibration.fitting.profile_groups), so
their figures measure what planner ships.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from planner.calibration.cases import Case
from planner.calibration.descent import STEPS, abs_log_error
from planner.calibration.fitting import fit_profile, profile_groups
from planner.inputs.cluster_spec import EfficiencySpec
from planner.profiles.software import CLASSES, predecessor, profile_start

CROSS_FOLDS = 5
"""Folds of a candidate profile's cross-validation (fewer when the class has fewer runs)."""


@dataclass(frozen=True, slots=True)
class ProfileDecision:
    """One candidate profile of a GPU family: its fit on all its runs and its cross-validation."""

    cls: str
    runs: tuple[Case, ...]
    values: EfficiencySpec
    """The profile fitted on all the class's runs (what ships when it does)."""
    error: float
    """Mean |log error| of ``values`` over the runs (in-sample)."""
    held_out: float
    """Median |log error| of each run predicted by the profile refitted without its fold."""
    fallback: str
    """What prices the class without the profile: a release class, or '' for the base values."""
    fallback_error: float
    """Median |log error| of the runs under the fallback."""

    @property
    def ships(self) -> bool:
        return self.held_out < self.fallback_error

    def summary(self) -> str:
        """One line: runs, the held-out and fallback errors, and the verdict."""
        against = f"{self.fallback}'s values" if self.fallback else "the base values"
        verdict = "ships" if self.ships else "not shipped"
        return (
            f"{len(self.runs)} runs; held out ({min(len(self.runs), CROSS_FOLDS)}-fold) "
            f"{_pct(self.held_out)} median against {_pct(self.fallback_error)} with {against}: {verdict}"
        )


def _pct(log_error: float) -> str:
    return f"{100 * math.expm1(log_error):.1f}%"


def cross_folds(runs: list[Case], k: int = CROSS_FOLDS) -> list[list[Case]]:
    """``runs`` ordered by run id and dealt into ``min(len(runs), k)`` folds, run ``i`` into fold
    ``i mod k``."""
    ordered = sorted(runs, key=lambda c: c.run_id)
    k = max(1, min(len(ordered), k))
    return [ordered[i::k] for i in range(k)]


def release_order(classes) -> list[str]:
    """Release classes oldest first (their ``released`` month in :data:`CLASSES`, then name; an
    unknown class last): a class's predecessor is decided before it."""
    return sorted(classes, key=lambda c: (CLASSES[c][1] if c in CLASSES else "9999", c))


def cross_validated(
    runs: list[Case], start: EfficiencySpec, passes: int = 8, steps: tuple[float, ...] = STEPS
) -> float:
    """Median |log error| of every run predicted by the profile fitted (from ``start``) on the other
    folds' runs (:func:`cross_folds`)."""
    folds = cross_folds(runs)
    errors = []
    for i, fold in enumerate(folds):
        train = [c for j, other in enumerate(folds) if j != i for c in other]
        values = fit_profile(train, start, passes, steps)[0]
        errors += [abs_log_error(c, values) for c in fold]
    return statistics.median(errors)


def decide(
    group: list[Case],
    base: EfficiencySpec,
    passes: int = 8,
    steps: tuple[float, ...] = STEPS,
    base_for: Callable[[tuple[Case, ...]], EfficiencySpec] | None = None,
) -> list[ProfileDecision]:
    """Every candidate profile of one family's runs ``group`` (classes with enough runs,
    ``profile_groups(group, candidates=True)``), in release order, fitted from ``base`` and
    cross-validated against its fallback (see the module docstring). ``base_for(runs)``: the
    family's base values fitted without ``runs`` (default: ``base``, when it never saw them)."""
    candidates = profile_groups(group, candidates=True)
    kept: dict[str, EfficiencySpec] = {}
    out = []
    for cls in release_order(candidates):
        runs = candidates[cls]
        start = profile_start(base, cls)
        values, error = fit_profile(runs, start, passes, steps)
        fallback = predecessor(cls, kept)
        fallback_values = kept[fallback] if fallback else (base_for(tuple(runs)) if base_for else base)
        decision = ProfileDecision(
            cls=cls,
            runs=tuple(runs),
            values=values,
            error=error,
            held_out=cross_validated(runs, start, passes, steps),
            fallback=fallback,
            fallback_error=statistics.median(abs_log_error(c, fallback_values) for c in runs),
        )
        if decision.ships:
            kept[cls] = values
        out.append(decision)
    return out
