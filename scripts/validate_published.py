#!/usr/bin/env python3
"""Predict every published run and compare tokens/s per GPU (and memory where given).

Prints one row per run (predicted vs measured tokens/s per GPU, absolute percentage error,
predicted peak memory and whether it fits), the runs that cannot be predicted and why, then the
median and 90th percentile of the absolute errors over the runs that count (see
planner.calibration.cases.EXCLUDED): in-sample (the shipped efficiencies, fitted on every run) and
leave-one-source-out (each source predicted by a fit that never saw it: the figures to quote;
planner.calibration.fitting), per class (GPU efficiency family, precision, dense/MoE, framework:
:func:`run_class`) with the signed median error (predicted / measured - 1: + is predicted too fast),
per source, and per layout group the Spearman correlation of predicted vs measured throughput,
whether the measured-best layout is predicted best, the measured throughput lost by following the
prediction, and the ceiling that measurement noise puts on the first two
(planner.calibration.ranking.noise_ceiling).

``--table FILE`` also writes one row per predicted run as CSV (the project's copy is
docs/data/calibration_runs.csv; columns :data:`TABLE_COLUMNS`), in the runs file's order.
``--from-json FILE`` reads the predictions from a finished run's ``--json`` output instead of
computing them (an hour with the leave-one-source-out folds), checks that they are of the runs file
given, writes the table and prints its figures: the committed table is generated from the run whose
figures the docs quote.

Exit code 1 when the in-sample median exceeds --max-median or the 90th percentile exceeds
--max-p90 (defaults: 12% and 30%), or when the --runs, --memory or --from-json file cannot be read
or the table cannot be written (one line naming the file, and the run and key where one is
malformed; no traceback); 2 on bad flags.

Usage: python scripts/validate_published.py [--runs FILE] [--json] [--no-loso] [--jobs N] [--loso-steps coarse|shipped] [--table CSV]
       python scripts/validate_published.py --from-json RUN.json --table CSV
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration.cases import (  # noqa: E402
    DEFAULT_MEMORY,
    DEFAULT_RUNS,
    EXCLUDED,
    Case,
    Result,
    by_source,
    cases,
    excluded_reason,
    measured_memory,
    median_over_sources,
    predict_all,
    ranked,
    summary,
)
from planner.calibration.descent import STEPS  # noqa: E402
from planner.calibration.fitting import family  # noqa: E402
from planner.calibration.folds import LOSO_STEPS, leave_one_source_out  # noqa: E402
from planner.calibration.ranking import MEASUREMENT_NOISE, group_ranking  # noqa: E402
from planner.inputs.documents import read_document  # noqa: E402
from planner.inputs.errors import PlannerError, SpecError  # noqa: E402
from planner.inputs.files import write_text_atomic  # noqa: E402
from planner.profiles.uncertainty import FRAMEWORK_GROUPS  # noqa: E402

LOSO_DESCENT = {"coarse": {"passes": 4, "steps": LOSO_STEPS}, "shipped": {"passes": 8, "steps": STEPS}}
"""The leave-one-source-out folds' descent by ``--loso-steps`` (the shipped fit's: 8 passes of
:data:`planner.calibration.descent.STEPS`, planner.calibration.fitting.fit_families' defaults)."""

GIB = 1024**3

TABLE_COLUMNS = (
    "id",
    "source",
    "group",
    "gpu",
    "family",
    "precision",
    "kind",
    "framework",
    "class",
    "counted",
    "measured_tokens_per_s_per_gpu",
    "in_sample_tokens_per_s_per_gpu",
    "in_sample_error_pct",
    "held_out_tokens_per_s_per_gpu",
    "held_out_error_pct",
)
"""Columns of ``--table``: the run, its source and layout group, its GPU type and efficiency family,
precision, ``dense`` / ``moe``, the record's ``parallel.framework`` ('' where it names none), its
class (:func:`run_class`), whether it counts in the figures (``no``: planner.calibration.cases.EXCLUDED),
the measured tokens/s per GPU, then in-sample and held-out (leave-one-source-out) predictions with
their signed errors in percent (100 x (predicted / measured - 1), + = predicted too fast); the
held-out cells are empty for runs the folds leave out and when the folds did not run."""


class _Error:
    """An error as :func:`planner.calibration.cases.summary` reads one (it uses ``.error`` only)."""

    __slots__ = ("error",)

    def __init__(self, error: float) -> None:
        self.error = error


@dataclass(frozen=True, kw_only=True, slots=True)
class Validation:
    """What one validation run computed: the predictions and what is read from them."""

    all_cases: list[Case]
    """Every run of the runs file, predicted or not (``skip_reason``)."""
    results: list[Result]
    """In-sample predictions of every predictable run, excluded ones included."""
    loso: list[Result]
    """Leave-one-source-out predictions of the counted runs ([] with --no-loso)."""
    peaks: dict[str, float]
    """Measured peak memory (bytes) by run id."""
    frameworks: dict[str, str]
    """Each run's ``parallel.framework`` as its record writes it."""

    @property
    def counted(self) -> list[Result]:
        return [r for r in self.results if not excluded_reason(r.case.run_id)]


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs",
        type=Path,
        default=DEFAULT_RUNS,
        help="published runs YAML (default: the project's copy of ../shared/calibration/published_runs.yaml)",
    )
    ap.add_argument(
        "--memory", type=Path, default=DEFAULT_MEMORY, help="published memory YAML (measured peaks)"
    )
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    ap.add_argument("--max-median", type=float, default=0.12)
    ap.add_argument("--max-p90", type=float, default=0.30)
    ap.add_argument(
        "--no-loso", action="store_true", help="skip the leave-one-source-out refits (minutes of CPU)"
    )
    ap.add_argument("--jobs", type=int, default=2, help="leave-one-source-out folds run in parallel")
    ap.add_argument(
        "--loso-steps",
        choices=("coarse", "shipped"),
        default="coarse",
        help="the folds' coordinate descent: coarse (4 passes of planner.calibration.folds.LOSO_STEPS, the "
        "documented figures) or shipped (the shipped fit's 8 passes of planner.calibration.descent.STEPS)",
    )
    ap.add_argument(
        "--table", type=Path, help="write one row per predicted run as CSV (docs/data/calibration_runs.csv)"
    )
    ap.add_argument(
        "--from-json",
        type=Path,
        help="take the predictions from this finished run's --json output instead of computing them "
        "(needs --table; prints the table's figures)",
    )
    args = ap.parse_args()
    if args.from_json and not args.table:
        ap.error("--from-json needs --table")
    if args.from_json and (args.json or args.no_loso):
        ap.error("--from-json reads a run's predictions; --json and --no-loso apply to a fresh run")
    return args


def run_frameworks(path: Path) -> dict[str, str]:
    """Each run's ``parallel.framework`` by id, as its record writes it ('' where it names none)."""
    return {
        str(r["id"]): str((r.get("parallel") or {}).get("framework") or "")
        for r in read_document(Path(path))["runs"]
    }


def run_class(case: Case, framework: str) -> str:
    """A run's class: GPU efficiency family x precision x dense/MoE x framework
    (:data:`FRAMEWORK_GROUPS`), the classes of planner's prediction intervals without their scale
    band."""
    kind = "moe" if case.model.is_moe else "dense"
    fw = FRAMEWORK_GROUPS.get(framework, "")
    return f"{family(case)} {case.job.precision} {kind}" + (f" {fw}" if fw else "")


def signed_error(predicted: float, measured: float) -> float:
    """predicted / measured - 1 (+: predicted too fast)."""
    return predicted / measured - 1.0


def class_summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """:func:`planner.calibration.cases.summary` of ``(predicted, measured)`` pairs, with the signed
    median error beside the absolute ones."""
    out = summary([_Error(abs(signed_error(p, m))) for p, m in pairs])
    out["signed_median"] = statistics.median(signed_error(p, m) for p, m in pairs) if pairs else math.nan
    return out


def by_class(results: list[Result], frameworks: dict[str, str]) -> dict[str, list[Result]]:
    """Results by :func:`run_class`, classes sorted."""
    out: dict[str, list[Result]] = {}
    for r in results:
        out.setdefault(run_class(r.case, frameworks.get(r.case.run_id, "")), []).append(r)
    return dict(sorted(out.items()))


def result_pairs(results: list[Result]) -> list[tuple[float, float]]:
    return [(r.predicted, r.case.measured_tokens_per_s_per_gpu) for r in results]


def validate(args: argparse.Namespace) -> Validation:
    """Read the inputs and predict every run, in-sample and (unless --no-loso) held out."""
    all_cases = cases(args.runs)
    peaks = measured_memory(args.memory)
    frameworks = run_frameworks(args.runs)
    loso = (
        []
        if args.no_loso
        else leave_one_source_out(
            all_cases,
            progress=lambda t: print(t, file=sys.stderr),
            jobs=args.jobs,
            **LOSO_DESCENT[args.loso_steps],
        )
    )
    return Validation(
        all_cases=all_cases, results=predict_all(all_cases), loso=loso, peaks=peaks, frameworks=frameworks
    )


def held_out_block(v: Validation) -> dict:
    """The ``leave_one_source_out`` object of the JSON output."""
    loso = v.loso
    return {
        "overall": summary(loso) if loso else None,
        "median_over_sources": median_over_sources(loso) if loso else None,
        "by_class": {k: class_summary(result_pairs(rs)) for k, rs in by_class(loso, v.frameworks).items()},
        "by_source": {k: summary(rs) for k, rs in sorted(by_source(loso).items())},
        "runs": [
            {
                "id": r.case.run_id,
                "source": r.case.source,
                "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": r.predicted,
                "abs_error": r.error,
            }
            for r in loso
        ],
    }


def rankings(v: Validation) -> tuple[list[dict], list[dict], dict[str, list[dict]]]:
    """Layout-group ranking in-sample, held out, and of the excluded sweeps that are still ranked
    (planner.calibration.cases.RANKED_WHEN_EXCLUDED), one block per source: those sweeps are other
    frameworks and clusters, reported apart so they do not mix into the figures."""
    extra = by_source([r for r in v.results if excluded_reason(r.case.run_id) and ranked(r.case.run_id)])
    return (
        group_ranking(v.counted),
        group_ranking(v.loso) if v.loso else [],
        {src: group_ranking(rs) for src, rs in sorted(extra.items())},
    )


def memory_errors(v: Validation) -> list[float]:
    """Absolute relative errors of the predicted peak memory where a peak was measured, sorted."""
    return sorted(
        abs(r.estimate.peak_memory_bytes - v.peaks[r.case.run_id]) / v.peaks[r.case.run_id]
        for r in v.results
        if r.case.run_id in v.peaks
    )


def not_fitting(v: Validation) -> list[str]:
    """Counted runs predicted not to fit in memory. Every published run ran, so each one is the
    memory model erring high (or a memory saving it does not price, such as dropout-free layers
    keeping no dropout masks)."""
    return sorted(r.case.run_id for r in v.counted if not r.estimate.fits)


def json_report(v: Validation) -> dict:
    """The ``--json`` output."""
    mem = memory_errors(v)
    groups_in, groups_out, groups_extra = rankings(v)
    rows = [
        {
            "id": r.case.run_id,
            "gpu": r.case.gpu,
            "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
            "measured_from": r.case.measured_from,
            "predicted_tokens_per_s_per_gpu": r.predicted,
            "abs_error": r.error,
            "predicted_peak_memory_bytes": r.estimate.peak_memory_bytes,
            "fits": r.estimate.fits,
            "assumptions": list(r.case.assumptions),
            "excluded": excluded_reason(r.case.run_id),
        }
        for r in v.results
    ]
    stats = dict(
        summary(v.counted),
        median_over_sources=median_over_sources(v.counted),
        memory_runs=len(mem),
        memory_median_abs_error=mem[len(mem) // 2] if mem else None,
        predicted_not_to_fit=not_fitting(v),
    )
    return {
        "runs": rows,
        "skipped": [{"id": c.run_id, "reason": c.skip_reason} for c in v.all_cases if c.skip_reason],
        "summary": stats,
        "in_sample_by_class": {
            k: class_summary(result_pairs(rs)) for k, rs in by_class(v.counted, v.frameworks).items()
        },
        "leave_one_source_out": held_out_block(v),
        "groups_in_sample": groups_in,
        "groups_leave_one_source_out": groups_out,
        "groups_excluded_runs": groups_extra,
    }


def print_report(v: Validation) -> None:
    """The human-readable output: every run, what is not predicted or not counted, the figures."""
    print(f"{'run':58s} {'gpu':15s} {'measured':>10s} {'predicted':>10s} {'error':>7s} {'mem GiB':>8s} fits")
    for r in v.results:
        mark = "  (excluded)" if excluded_reason(r.case.run_id) else ""
        measured_mem = f"{v.peaks[r.case.run_id] / GIB:8.1f}" if r.case.run_id in v.peaks else "       -"
        print(
            f"{r.case.run_id:58s} {r.case.gpu:15s} {r.case.measured_tokens_per_s_per_gpu:10.1f} "
            f"{r.predicted:10.1f} {100 * r.error:6.1f}% {r.estimate.peak_memory_bytes / GIB:8.1f} "
            f"{measured_mem} {'yes' if r.estimate.fits else 'NO'}{mark}"
        )
    print()
    for c in v.all_cases:
        if c.skip_reason:
            print(f"not predicted: {c.run_id}: {c.skip_reason}")
    for prefix, why in sorted(EXCLUDED.items()):
        print(f"excluded from the statistics: {prefix}*: {why}")
    print()
    stats, mem, unfit = summary(v.counted), memory_errors(v), not_fitting(v)
    print(
        f"runs counted: {stats['count']}   median abs error: {100 * stats['median']:.1f}%   "
        f"90th percentile: {100 * stats['p90']:.1f}%   median over the sources' medians: "
        f"{100 * median_over_sources(v.counted):.1f}%"
    )
    if mem:
        print(
            f"peak memory where measured: {len(mem)} runs, median abs error "
            f"{100 * mem[len(mem) // 2]:.1f}%, largest {100 * mem[-1]:.1f}% "
            "(informational: torchtitan's logged peaks include allocator caching; see docs/calibration.md)"
        )
    print(
        f"ran, but predicted not to fit in memory: {len(unfit)} of {stats['count']} counted runs "
        "(the memory model errs high, or the run saved memory in a way it does not price; "
        "docs/calibration.md, 'Memory')"
    )
    print()
    print_classes(
        "in-sample by class", {k: result_pairs(rs) for k, rs in by_class(v.counted, v.frameworks).items()}
    )
    if v.loso:
        o = summary(v.loso)
        print()
        print(
            f"LEAVE-ONE-SOURCE-OUT (the figures to quote): runs {o['count']}   median abs error "
            f"{100 * o['median']:.1f}%   90th percentile {100 * o['p90']:.1f}%   median over the "
            f"sources' medians {100 * median_over_sources(v.loso):.1f}%"
        )
        print_classes(
            "held out, by class", {k: result_pairs(rs) for k, rs in by_class(v.loso, v.frameworks).items()}
        )
        print_classes("held out, by source", {k: result_pairs(rs) for k, rs in by_source(v.loso).items()})
    groups_in, groups_out, groups_extra = rankings(v)
    for title, rows in (
        ("in-sample", groups_in),
        ("leave-one-source-out", groups_out),
        *(
            (f"of excluded runs, {src}, informational: not in the figures above", rows_src)
            for src, rows_src in groups_extra.items()
        ),
    ):
        if rows:
            print()
            print_groups(f"layout groups ({title})", rows)


def print_classes(title: str, classes: dict[str, list[tuple[float, float]]]) -> None:
    """One line per class (or source) of ``(predicted, measured)`` pairs: count, median and p90 of
    the absolute errors, and the signed median."""
    print(f"{title}:")
    for key in sorted(classes):
        s = class_summary(classes[key])
        print(
            f"  {key[:70]:70s} n={s['count']:3d}  median {100 * s['median']:5.1f}%  p90 {100 * s['p90']:5.1f}%"
            f"  signed median {100 * s['signed_median']:+6.1f}%"
        )


def print_groups(title: str, rows: list[dict]) -> None:
    print(f"{title}:")
    for g in rows:
        print(
            f"  {g['group'][:40]:40s} n={g['runs']:2d}  spearman {g['spearman']:+.2f}  "
            f"top1 {'yes' if g['top1'] else 'no ':3s}  loss {100 * g['loss_following_prediction']:5.1f}%  "
            f"spread predicted {g['predicted_spread']:.2f}x measured {g['measured_spread']:.2f}x  "
            f"ceiling {g['ceiling_spearman']:+.2f} / {100 * g['ceiling_top1']:3.0f}%"
        )
    rhos = [g["spearman"] for g in rows if g["spearman"] == g["spearman"]]
    ceilings = [g["ceiling_spearman"] for g in rows if g["ceiling_spearman"] == g["ceiling_spearman"]]
    print(
        f"  groups {len(rows)}: median Spearman {statistics.median(rhos) if rhos else float('nan'):.2f}, "
        f"measured-best ranked first in {sum(g['top1'] for g in rows)} of {len(rows)}"
    )
    if rows:
        print(
            f"  ceiling (exact throughputs against measurements with {100 * MEASUREMENT_NOISE:.1f}% run-to-run "
            f"noise): median Spearman {statistics.median(ceilings):.2f}, measured-best first in "
            f"{sum(g['ceiling_top1'] for g in rows):.1f} of {len(rows)} expected"
        )


def predictions_from_json(path: Path, all_cases: list[Case]) -> tuple[dict[str, float], dict[str, float]]:
    """In-sample and held-out predicted tokens/s per GPU by run id, read from a finished run's
    ``--json`` output and checked against ``all_cases``: every predictable run present, with the
    measured figure the runs file gives it (else the JSON is of another runs file)."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
        rows = data["runs"]
        held = (data.get("leave_one_source_out") or {}).get("runs") or []
        in_sample = {str(r["id"]): float(r["predicted_tokens_per_s_per_gpu"]) for r in rows}
        held_out = {str(r["id"]): float(r["predicted_tokens_per_s_per_gpu"]) for r in held}
        measured = [(str(r["id"]), float(r["measured_tokens_per_s_per_gpu"])) for r in rows + held]
    except OSError as exc:
        raise SpecError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpecError(
            f"{where}: not the --json output of validate_published.py ({type(exc).__name__}: {exc})"
        ) from None
    predictable = {c.run_id: c for c in all_cases if not c.skip_reason}
    for rid, value in measured:
        c = predictable.get(rid)
        if c is None:
            raise SpecError(f"{where}: run {rid!r} is not a predictable run of the runs file")
        if not math.isclose(value, c.measured_tokens_per_s_per_gpu, rel_tol=1e-12):
            raise SpecError(
                f"{where}: run {rid!r} measured {value} tokens/s per GPU, the runs file "
                f"{c.measured_tokens_per_s_per_gpu}: the JSON is of another runs file"
            )
    missing = sorted(set(predictable) - set(in_sample))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SpecError(f"{where}: no prediction of run {missing[0]!r}{more}")
    return in_sample, held_out


def table_rows(
    all_cases: list[Case], frameworks: dict[str, str], in_sample: dict[str, float], held_out: dict[str, float]
) -> list[dict[str, str]]:
    """The ``--table`` rows (:data:`TABLE_COLUMNS`), one per predicted run, in the runs file's order."""
    out = []
    for c in all_cases:
        if c.skip_reason:
            continue
        fw = frameworks.get(c.run_id, "")
        held = held_out.get(c.run_id)
        m = c.measured_tokens_per_s_per_gpu
        out.append(
            {
                "id": c.run_id,
                "source": c.source,
                "group": c.group,
                "gpu": c.gpu,
                "family": family(c),
                "precision": c.job.precision,
                "kind": "moe" if c.model.is_moe else "dense",
                "framework": fw,
                "class": run_class(c, fw),
                "counted": "no" if excluded_reason(c.run_id) else "yes",
                "measured_tokens_per_s_per_gpu": f"{m:.1f}",
                "in_sample_tokens_per_s_per_gpu": f"{in_sample[c.run_id]:.1f}",
                "in_sample_error_pct": f"{100 * signed_error(in_sample[c.run_id], m):+.2f}",
                "held_out_tokens_per_s_per_gpu": "" if held is None else f"{held:.1f}",
                "held_out_error_pct": "" if held is None else f"{100 * signed_error(held, m):+.2f}",
            }
        )
    return out


def write_table(path: Path, rows: list[dict[str, str]]) -> None:
    """The rows as CSV (``\\n`` line ends, the same bytes for the same rows)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    try:
        write_text_atomic(path, buf.getvalue())
    except OSError as exc:
        raise SpecError(f"{path}: cannot be written ({exc.strerror or exc})") from None


def print_table_figures(
    all_cases: list[Case], frameworks: dict[str, str], in_sample: dict[str, float], held_out: dict[str, float]
) -> dict[str, float]:
    """The figures of the counted runs' predictions (overall, dense / MoE, by class, by source, each
    with its signed median), in-sample and held out; returns the in-sample summary."""
    counted = [c for c in all_cases if not c.skip_reason and not excluded_reason(c.run_id)]
    for label, predicted in (("in-sample", in_sample), ("held out", held_out)):
        runs = [c for c in counted if c.run_id in predicted]
        if not runs:
            print(f"{label}: no predictions")
            continue
        pairs = {c.run_id: (predicted[c.run_id], c.measured_tokens_per_s_per_gpu) for c in runs}
        s = class_summary(list(pairs.values()))
        print(
            f"{label}: runs {s['count']}   median abs error {100 * s['median']:.2f}%   90th percentile "
            f"{100 * s['p90']:.2f}%   signed median {100 * s['signed_median']:+.2f}%"
        )
        kinds: dict[str, list[tuple[float, float]]] = {}
        classes: dict[str, list[tuple[float, float]]] = {}
        sources: dict[str, list[tuple[float, float]]] = {}
        for c in runs:
            kinds.setdefault("moe" if c.model.is_moe else "dense", []).append(pairs[c.run_id])
            classes.setdefault(run_class(c, frameworks.get(c.run_id, "")), []).append(pairs[c.run_id])
            sources.setdefault(c.source, []).append(pairs[c.run_id])
        print_classes(f"{label}, dense / MoE", kinds)
        print_classes(f"{label}, by class", classes)
        print_classes(f"{label}, by source", sources)
    return class_summary([(in_sample[c.run_id], c.measured_tokens_per_s_per_gpu) for c in counted])


def main() -> int:
    args = arguments()
    try:
        if args.from_json:
            all_cases = cases(args.runs)
            in_sample, held_out = predictions_from_json(args.from_json, all_cases)
            frameworks = run_frameworks(args.runs)
            write_table(args.table, table_rows(all_cases, frameworks, in_sample, held_out))
            stats = print_table_figures(all_cases, frameworks, in_sample, held_out)
        else:
            v = validate(args)
            if args.table:
                write_table(
                    args.table,
                    table_rows(
                        v.all_cases,
                        v.frameworks,
                        {r.case.run_id: r.predicted for r in v.results},
                        {r.case.run_id: r.predicted for r in v.loso},
                    ),
                )
            if args.json:
                print(json.dumps(json_report(v), indent=2, sort_keys=True))
            else:
                print_report(v)
            stats = summary(v.counted)
    except PlannerError as exc:
        print(f"validate_published: {exc}", file=sys.stderr)
        return 1
    return 0 if stats["median"] <= args.max_median and stats["p90"] <= args.max_p90 else 1


if __name__ == "__main__":
    raise SystemExit(main())
