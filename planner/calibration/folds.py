"""Held-out refits: the leave-one-source-out folds (the figures to quote beside time forward) and
:func:`refit_without`, the fold refit time-forward and release-forward folds share.

:func:`leave_one_source_out` — for each source (a paper, a framework's performance page), refit
every family on the runs of the *other* sources with
:func:`planner.calibration.fitting.fit_families` (the same procedure as the shipped fit) and
predict the held-out source's runs with that fit. A family left with no runs (every Blackwell run
is one source's) is predicted with its parent's fold fit, transferred.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor

from planner.calibration.cases import Case, Result
from planner.calibration.descent import predict
from planner.calibration.fitting import family, fit_families, fit_profile, profile_groups, usable
from planner.inputs.cluster_spec import EfficiencySpec
from planner.profiles.software import profile_start, release_for

LOSO_STEPS = (0.6, 0.85, 1.15, 1.6)
"""Coarser steps for the many leave-one-source-out refits (each a full fit of a family)."""


def leave_one_source_out(
    all_cases: Iterable[Case],
    passes: int = 4,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    steps: tuple[float, ...] = LOSO_STEPS,
) -> list[Result]:
    """Every usable case predicted by a fit that never saw its source (see the module docstring).

    Each fold refits with :func:`fit_families`, on the other sources' runs, the efficiency families
    its held-out runs belong to and their lineage ancestors (each family's prior is its parent's fold
    fit, so no held-out run reaches a prior either); a family with no runs left keeps that prior.
    Software profiles are refitted without the held-out source too. ``passes`` and ``steps``: the
    coordinate descent's (the coarser :data:`LOSO_STEPS` and 4 passes unless given; the shipped fit's
    are 8 passes of :data:`planner.calibration.descent.STEPS`). ``jobs`` folds run in parallel
    processes; the result does not depend on it."""
    cases_ = usable(all_cases)
    sources = sorted({c.source for c in cases_})
    folds = [(s, cases_, passes, steps) for s in sources]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(source_fold, folds))
    else:
        done = [source_fold(f) for f in folds]
    out: dict[str, Result] = {}
    for source, (notes, results) in zip(sources, done):
        if progress:
            for note in notes:
                progress(f"held out {source!r}: {note}")
        out.update((r.case.run_id, r) for r in results)
    return [out[c.run_id] for c in cases_]


def source_fold(args: tuple) -> tuple[list[str], list[Result]]:
    """One leave-one-source-out fold, ``(source, cases, passes[, steps])`` (steps :data:`LOSO_STEPS`
    unless given): refit the held-out runs' families without them, predict them."""
    source, cases_, passes, *given = args
    steps = given[0] if given else LOSO_STEPS
    held = [c for c in cases_ if c.source == source]
    rest = [c for c in cases_ if c.source != source]
    # Software profiles refitted without the held-out source too (no leakage); a held-out run's
    # class without the runs for a profile in the fold is priced with its predecessor's, by the
    # rule the shipped profiles follow (planner.profiles.software.release_for).
    used: dict[tuple[str, str], str] = {}

    def wanted(fam: str, classes: dict[str, list[Case]]) -> list[str]:
        for cls in sorted({c.software for c in held if family(c) == fam and c.software}):
            used[(fam, cls)] = release_for(cls, classes)
        return [u for (f, _), u in used.items() if f == fam and u]

    notes, fitted = refit_without(held, rest, passes, wanted, held_out_source=source, steps=steps)
    return notes, [predict(c, fitted[(family(c), used.get((family(c), c.software), ""))]) for c in held]


def refit_without(
    held: list[Case],
    rest: list[Case],
    passes: int,
    profiles: Callable[[str, dict[str, list[Case]]], Iterable[str]],
    held_out_source: str = "",
    steps: tuple[float, ...] = LOSO_STEPS,
) -> tuple[list[str], dict[tuple[str, str], EfficiencySpec]]:
    """What a fold predicts ``held`` with: their families refitted on ``rest`` (:func:`fit_families`
    with ``steps``, :data:`LOSO_STEPS` unless given), as ``(family, '')``, and per family the release classes
    ``profiles(family, classes)`` names among that family's classes in ``rest``
    (:func:`profile_groups`), each refitted from the fold's base (:func:`fit_profile`), as
    ``(family, class)``; a named class without enough runs left is not fitted. Returns notes (what
    was fitted on what) and those values. ``held_out_source`` keeps a profile's start off the
    held-out document (planner.profiles.software.profile_start)."""
    notes: list[str] = []
    fams = {family(c) for c in held}
    families = fit_families(rest, fams, passes, steps, progress=notes.append)
    fitted: dict[tuple[str, str], EfficiencySpec] = {(fam, ""): v[0] for fam, v in families.items()}
    for fam in sorted(fams):
        base = fitted[(fam, "")]
        classes = profile_groups([c for c in rest if family(c) == fam])
        for cls in sorted(set(profiles(fam, classes))):
            if cls in classes:
                start = profile_start(base, cls, held_out_source=held_out_source)
                fitted[(fam, cls)] = fit_profile(classes[cls], start, passes, steps)[0]
                notes.append(f"{fam}/{cls} profile fitted on {len(classes[cls])} runs")
    return notes, fitted
