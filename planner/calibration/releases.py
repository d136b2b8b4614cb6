"""New software releases predicted before they are calibrated.

A framework ships a release; its performance table appears; until ``scripts/calibrate.py`` fits
the release's profile, a plan for it is priced with the newest profile planner has
(planner.profiles.software.default_software). :func:`release_forward` measures that gap on the calibration
set: for each software release class of a framework planner plans for, every run of the class is
held out, each efficiency family is refitted on the remaining runs (planner.calibration.fitting.fit_families, the
shipped procedure), and the held-out runs are predicted with the profile a plan would have had
without them, the newest *earlier* release of the same framework fitted on the run's GPU family
(planner.profiles.software.predecessor, as a release without a profile of its own is priced,
planner.profiles.software.entry_source), else the family's base fit.

The figure differs from leave-one-source-out (planner.calibration.folds.leave_one_source_out) in what is held
out: a release class, not a document. Megatron-Bridge's archive page holds three releases; holding
out one leaves the other two (their own measurement campaigns, with other containers) in the fit,
which is the situation on the day a release's table appears. The signed median says which way new
releases move: negative when the software got faster than planner's newest profile prices it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.calibration.cases import Case, Result, summary
from planner.calibration.descent import predict
from planner.calibration.fitting import family, usable
from planner.calibration.folds import refit_without
from planner.profiles.software import CLASSES, predecessor

PLANNED_FRAMEWORKS = ("megatron", "torchtitan")
"""Frameworks whose release classes a plan can use (planner.profiles.software.default_software); the other
classes (the zero-bubble fork, BigScience's Megatron-DeepSpeed) describe runs of software no plan
targets, so no release follows them."""


def signed_median(results: list[Result]) -> float:
    """Median of predicted / measured - 1 (negative: the runs ran faster than predicted)."""
    return statistics.median(r.predicted / r.case.measured_tokens_per_s_per_gpu - 1 for r in results)


@dataclass(frozen=True)
class ReleaseFold:
    """One held-out release class: its runs predicted as described in the module docstring."""

    release: str
    predicted_with: dict[str, str]
    """GPU family -> the profile its runs were priced with ('' = the family's base fit)."""
    results: list[Result]

    def to_json(self) -> dict:
        return {
            "release": self.release,
            "released": CLASSES[self.release][1],
            "predicted_with": dict(sorted(self.predicted_with.items())),
            **summary(self.results),
            "signed_median": signed_median(self.results),
            "runs": [
                {
                    "id": r.case.run_id,
                    "gpu": r.case.gpu,
                    "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                    "predicted_tokens_per_s_per_gpu": r.predicted,
                    "abs_error": r.error,
                }
                for r in self.results
            ],
        }


def release_fold(release: str, cases_: list[Case], passes: int = 4) -> tuple[list[str], ReleaseFold]:
    """Hold out every usable run of ``release``; refit; predict them with the profile of its
    predecessor (planner.profiles.software.predecessor), itself refitted on the remaining runs (notes say
    what was fitted on what)."""
    held = [c for c in cases_ if c.software == release]
    rest = [c for c in cases_ if c.software != release]
    used: dict[str, str] = {}

    def before(fam: str, classes: dict[str, list[Case]]) -> list[str]:
        used[fam] = predecessor(release, classes)
        return [used[fam]]

    notes, fitted = refit_without(held, rest, passes, before)
    return notes, ReleaseFold(release, used, [predict(c, fitted[(family(c), used[family(c)])]) for c in held])


def release_forward(
    all_cases: Iterable[Case], passes: int = 4, progress: Callable[[str], None] | None = None
) -> list[ReleaseFold]:
    """:func:`release_fold` for every release class of :data:`PLANNED_FRAMEWORKS` with usable
    runs, oldest first (ties by name)."""
    cases_ = usable(all_cases)
    present = {c.software for c in cases_ if c.software}
    order = sorted(
        (CLASSES[c][1], c) for c in present if c in CLASSES and CLASSES[c][0] in PLANNED_FRAMEWORKS
    )
    out = []
    for _, release in order:
        notes, fold = release_fold(release, cases_, passes)
        if progress:
            for note in notes:
                progress(f"held out {release}: {note}")
        out.append(fold)
    return out
