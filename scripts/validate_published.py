#!/usr/bin/env python3
"""Predict every published run and compare tokens/s per GPU (and memory where given).

Prints one row per run (predicted vs measured tokens/s per GPU, absolute percentage error,
predicted peak memory and whether it fits), the runs that cannot be predicted and why, then the
median and 90th percentile of the absolute errors over the runs that count (see
planner.calibration.cases.EXCLUDED): in-sample (the shipped efficiencies, fitted on every run) and
leave-one-source-out (each source predicted by a fit that never saw it: the figures to quote;
planner.calibration.fitting), per class (GPU type, precision, dense/MoE, sharding), and per layout group the
Spearman correlation of predicted vs measured throughput, whether the measured-best layout is
predicted best, the measured throughput lost by following the prediction, and the ceiling that
measurement noise puts on the first two (planner.calibration.ranking.noise_ceiling).
Exit code 1 when the in-sample median exceeds --max-median or the 90th percentile exceeds
--max-p90 (defaults: 12% and 30%), or when the --runs or --memory file cannot be read (one line
naming the file, and the run and key where one is malformed; no traceback).

Usage: python scripts/validate_published.py [--runs FILE] [--json] [--no-loso]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration.cases import (
    DEFAULT_MEMORY,
    DEFAULT_RUNS,
    by_source,
    cases,
    excluded_reason,
    measured_memory,
    median_over_sources,
    predict_all,
    ranked,
    summary,
)
from planner.calibration.fitting import leave_one_source_out  # noqa: E402
from planner.calibration.ranking import MEASUREMENT_NOISE, group_ranking  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402

GIB = 1024**3


def main() -> int:
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
    args = ap.parse_args()
    try:
        all_cases = cases(args.runs)
        peaks = measured_memory(args.memory)
    except PlannerError as exc:
        print(f"validate_published: {exc}", file=sys.stderr)
        return 1
    results = predict_all(all_cases)
    counted = [r for r in results if not excluded_reason(r.case.run_id)]
    stats = summary(counted)
    loso = (
        []
        if args.no_loso
        else leave_one_source_out(all_cases, progress=lambda t: print(t, file=sys.stderr), jobs=args.jobs)
    )
    held_out = {
        "overall": summary(loso) if loso else None,
        "median_over_sources": median_over_sources(loso) if loso else None,
        "by_class": {k: summary(v) for k, v in sorted(by_class(loso).items())} if loso else {},
        "by_source": {k: summary(v) for k, v in sorted(by_source(loso).items())} if loso else {},
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
    groups_in = group_ranking(counted)
    # Sweeps whose runs are excluded from the statistics but still say something about ranking
    # (calibration.RANKED_WHEN_EXCLUDED), reported apart so they do not mix into the figures.
    # One block per source: the sweeps are different frameworks and clusters, not one sample.
    groups_extra = {
        src: group_ranking(rs)
        for src, rs in sorted(
            by_source(
                [r for r in results if excluded_reason(r.case.run_id) and ranked(r.case.run_id)]
            ).items()
        )
    }
    groups_out = group_ranking(loso) if loso else []
    mem_errors = sorted(
        abs(r.estimate.peak_memory_bytes - peaks[r.case.run_id]) / peaks[r.case.run_id]
        for r in results
        if r.case.run_id in peaks
    )
    # Every published run ran, so each one predicted not to fit is the memory model erring high (or
    # a memory saving it does not price, such as dropout-free layers keeping no dropout masks).
    not_fitting = sorted(r.case.run_id for r in counted if not r.estimate.fits)
    if args.json:
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
            for r in results
        ]
        skipped = [{"id": c.run_id, "reason": c.skip_reason} for c in all_cases if c.skip_reason]
        stats_out = dict(
            stats,
            median_over_sources=median_over_sources(counted),
            memory_runs=len(mem_errors),
            memory_median_abs_error=mem_errors[len(mem_errors) // 2] if mem_errors else None,
            predicted_not_to_fit=not_fitting,
        )
        print(
            json.dumps(
                {
                    "runs": rows,
                    "skipped": skipped,
                    "summary": stats_out,
                    "in_sample_by_class": {k: summary(v) for k, v in sorted(by_class(counted).items())},
                    "leave_one_source_out": held_out,
                    "groups_in_sample": groups_in,
                    "groups_leave_one_source_out": groups_out,
                    "groups_excluded_runs": groups_extra,
                },
                indent=2,
                sort_keys=True,
            )
        )
    else:
        print(
            f"{'run':58s} {'gpu':15s} {'measured':>10s} {'predicted':>10s} {'error':>7s} {'mem GiB':>8s} fits"
        )
        for r in results:
            mark = "  (excluded)" if excluded_reason(r.case.run_id) else ""
            print(
                f"{r.case.run_id:58s} {r.case.gpu:15s} {r.case.measured_tokens_per_s_per_gpu:10.1f} "
                f"{r.predicted:10.1f} {100 * r.error:6.1f}% {r.estimate.peak_memory_bytes / GIB:8.1f} "
                f"{(f'{peaks[r.case.run_id] / GIB:8.1f}') if r.case.run_id in peaks else '       -'} "
                f"{'yes' if r.estimate.fits else 'NO'}{mark}"
            )
        print()
        for c in all_cases:
            if c.skip_reason:
                print(f"not predicted: {c.run_id}: {c.skip_reason}")
        for prefix, why in sorted(
            {
                (k, v)
                for k, v in __import__("planner.calibration.cases", fromlist=["EXCLUDED"]).EXCLUDED.items()
            }
        ):
            print(f"excluded from the statistics: {prefix}*: {why}")
        print()
        print(
            f"runs counted: {stats['count']}   median abs error: {100 * stats['median']:.1f}%   "
            f"90th percentile: {100 * stats['p90']:.1f}%   median over the sources' medians: "
            f"{100 * median_over_sources(counted):.1f}%"
        )
        if mem_errors:
            print(
                f"peak memory where measured: {len(mem_errors)} runs, median abs error "
                f"{100 * mem_errors[len(mem_errors) // 2]:.1f}%, largest {100 * mem_errors[-1]:.1f}% "
                "(informational: torchtitan's logged peaks include allocator caching; see docs/calibration.md)"
            )
        print(
            f"ran, but predicted not to fit in memory: {len(not_fitting)} of {stats['count']} counted runs "
            "(the memory model errs high, or the run saved memory in a way it does not price; "
            "docs/calibration.md, 'Memory')"
        )
        print()
        print_classes("in-sample by class", by_class(counted))
        if loso:
            o = held_out["overall"]
            print()
            print(
                f"LEAVE-ONE-SOURCE-OUT (the figures to quote): runs {o['count']}   median abs error "
                f"{100 * o['median']:.1f}%   90th percentile {100 * o['p90']:.1f}%   median over the "
                f"sources' medians {100 * held_out['median_over_sources']:.1f}%"
            )
            print_classes("held out, by class", by_class(loso))
            print_classes("held out, by source", by_source(loso))
        for title, rows_ in (
            ("in-sample", groups_in),
            ("leave-one-source-out", groups_out),
            *(
                (f"of excluded runs, {src}, informational: not in the figures above", rows_src)
                for src, rows_src in groups_extra.items()
            ),
        ):
            if rows_:
                print()
                print_groups(f"layout groups ({title})", rows_)
    ok = stats["median"] <= args.max_median and stats["p90"] <= args.max_p90
    return 0 if ok else 1


def by_class(results) -> dict[str, list]:
    """Results by class: GPU type, precision, dense or MoE, optimizer sharding."""
    out: dict[str, list] = {}
    for r in results:
        c = r.case
        key = (
            f"{c.gpu} {c.job.precision} {'moe' if c.model.is_moe else 'dense'} {c.config.optimizer_sharding}"
        )
        out.setdefault(key, []).append(r)
    return out


def print_classes(title: str, classes: dict[str, list]) -> None:
    print(f"{title}:")
    for key in sorted(classes):
        s = summary(classes[key])
        print(
            f"  {key[:70]:70s} n={s['count']:3d}  median {100 * s['median']:5.1f}%  p90 {100 * s['p90']:5.1f}%"
        )


def print_groups(title: str, rows: list[dict]) -> None:
    import statistics

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


if __name__ == "__main__":
    raise SystemExit(main())
