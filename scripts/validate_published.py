#!/usr/bin/env python3
"""Predict every published run and compare tokens/s per GPU (and memory where given).

Prints one row per run (predicted vs measured tokens/s per GPU, absolute percentage error,
predicted peak memory and whether it fits), the runs that cannot be predicted and why, then the
median and 90th percentile of the absolute errors over the runs that count (see
planner.calibration.EXCLUDED). Exit code 1 when the median exceeds --max-median or the 90th
percentile exceeds --max-p90 (defaults: 12% and 30%, the project's targets).

Usage: python scripts/validate_published.py [--runs FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration import (  # noqa: E402
    DEFAULT_MEMORY,
    DEFAULT_RUNS,
    cases,
    excluded_reason,
    measured_memory,
    predict_all,
    summary,
)

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
    args = ap.parse_args()
    all_cases = cases(args.runs)
    results = predict_all(all_cases)
    counted = [r for r in results if not excluded_reason(r.case.run_id)]
    stats = summary(counted)
    peaks = measured_memory(args.memory)
    mem_errors = sorted(
        abs(r.estimate.peak_memory_bytes - peaks[r.case.run_id]) / peaks[r.case.run_id]
        for r in results
        if r.case.run_id in peaks
    )
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
            memory_runs=len(mem_errors),
            memory_median_abs_error=mem_errors[len(mem_errors) // 2] if mem_errors else None,
        )
        print(json.dumps({"runs": rows, "skipped": skipped, "summary": stats_out}, indent=2, sort_keys=True))
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
            {(k, v) for k, v in __import__("planner.calibration", fromlist=["EXCLUDED"]).EXCLUDED.items()}
        ):
            print(f"excluded from the statistics: {prefix}*: {why}")
        print()
        print(
            f"runs counted: {stats['count']}   median abs error: {100 * stats['median']:.1f}%   "
            f"90th percentile: {100 * stats['p90']:.1f}%"
        )
        if mem_errors:
            print(
                f"peak memory where measured: {len(mem_errors)} runs, median abs error "
                f"{100 * mem_errors[len(mem_errors) // 2]:.1f}%, largest {100 * mem_errors[-1]:.1f}% "
                "(informational: torchtitan's logged peaks include allocator caching; see docs/calibration.md)"
            )
    ok = stats["median"] <= args.max_median and stats["p90"] <= args.max_p90
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
