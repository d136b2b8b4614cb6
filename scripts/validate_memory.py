#!/usr/bin/env python3
"""Measured vs predicted peak memory per GPU (docs/calibration.md "Memory").

First the measured Megatron-Core steps (hardware_profiles/measurements/*-megatron-memory.yaml,
scripts/measure_memory.py): measured static and allocated peak vs planner's (its peak less the
fixed CUDA-context/NCCL reserve, which the caching allocator does not see), the reserved peak, and
the --headroom-gib they imply. Then the published runs: a markdown table (run, metric, measured GiB, predicted GiB, measured - predicted, signed
error) and the summary: n, median and max absolute error, signed bias (median of
(predicted - measured) / measured) and the p90 of the measured excess in GiB.
Regenerate the docs table with: python scripts/validate_memory.py

Usage: python scripts/validate_memory.py [--runs FILE] [--memory FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration.cases import DEFAULT_MEMORY, DEFAULT_RUNS, cases, predict_all  # noqa: E402
from planner.calibration.memory_validation import (
    GIB,
    HEADROOM_GIB_DEFAULT,
    MEASURED_ALLOCATED,
    is_reserved,
    load_measured,
    measured_rows,
    rows,
    summarize,
    summarize_measured,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--memory", type=Path, default=DEFAULT_MEMORY)
    ap.add_argument("--measured", type=Path, default=MEASURED_ALLOCATED, help="measure_memory.py output")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    mrows = measured_rows(load_measured(args.measured))
    mstats = summarize_measured(mrows)
    entries = yaml.safe_load(args.memory.read_text()).get("measured_memory", [])
    ids = {e.get("run_id") for e in entries}
    results = predict_all([c for c in cases(args.runs) if c.run_id in ids])
    table = rows(results, entries)
    stats = summarize(table)
    if args.json:
        out = [
            {
                "run_id": r.run_id,
                "metric": "reserved" if is_reserved(r.metric) else "allocated",
                "measured_gib": r.measured_bytes / GIB,
                "predicted_gib": r.predicted_bytes / GIB,
                "signed_error": r.signed_error,
            }
            for r in table
        ]
        measured = [
            {
                "run_id": r.run_id,
                "configuration": r.label,
                "measured_static_gib": r.measured_static_bytes / GIB,
                "predicted_static_gib": r.predicted_static_bytes / GIB,
                "measured_allocated_gib": r.measured_peak_bytes / GIB,
                "predicted_allocated_gib": r.predicted_peak_bytes / GIB,
                "measured_reserved_gib": r.measured_reserved_bytes / GIB,
                "signed_error": r.signed_error,
            }
            for r in mrows
        ]
        print(
            json.dumps(
                {
                    "measured_allocated": {"rows": measured, "summary": mstats},
                    "rows": out,
                    "summary": stats,
                },
                indent=2,
                sort_keys=True,
            )
        )
        return 0
    print("Measured Megatron-Core steps (allocated peaks, one H100):\n")
    print(
        "| configuration | static measured / predicted GiB | allocated peak measured GiB | predicted GiB "
        "| error | reserved peak GiB |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in mrows:
        print(
            f"| {r.label} | {r.measured_static_bytes / GIB:.2f} / {r.predicted_static_bytes / GIB:.2f} | "
            f"{r.measured_peak_bytes / GIB:.2f} | {r.predicted_peak_bytes / GIB:.2f} | "
            f"{100 * r.signed_error:+.1f}% | {r.measured_reserved_bytes / GIB:.2f} |"
        )
    if mstats["n"]:
        print(
            f"\nn {mstats['n']}, median |error| {100 * mstats['median_abs_error']:.1f}%, max "
            f"{100 * mstats['max_abs_error']:.1f}%, signed bias (median) {100 * mstats['median_signed_error']:+.1f}%, "
            f"static max |error| {100 * mstats['static_max_abs_error']:.1f}%, p90 of measured - predicted "
            f"{mstats['excess_p90_gib']:+.2f} GiB, largest reserved excess {mstats['reserved_excess_max_gib']:.2f} GiB "
            f"-> derived --headroom-gib {mstats['derived_headroom_gib']:.0f} (default {HEADROOM_GIB_DEFAULT:g})"
        )
    print("\nPublished runs:\n")
    print("| run | metric | measured GiB | predicted GiB | measured - predicted GiB | error |")
    print("|---|---|---:|---:|---:|---:|")
    for r in table:
        print(
            f"| {r.run_id} | {'reserved' if is_reserved(r.metric) else 'allocated'} | "
            f"{r.measured_bytes / GIB:.1f} | {r.predicted_bytes / GIB:.1f} | {r.excess_bytes / GIB:+.1f} | "
            f"{100 * r.signed_error:+.1f}% |"
        )
    if stats["n"]:
        print(
            f"\nn {stats['n']} ({stats['n_reserved']} reserved-metric), median |error| "
            f"{100 * stats['median_abs_error']:.1f}%, max {100 * stats['max_abs_error']:.1f}%, signed bias "
            f"(median) {100 * stats['median_signed_error']:+.1f}%, p90 of measured - predicted "
            f"{stats['excess_p90_gib']:+.1f} GiB"
        )
    if stats.get("n_allocated"):
        print(
            f"of them allocated peaks (Megatron's logged max allocated, last rank): {stats['n_allocated']}, "
            f"signed median {100 * stats['allocated_median_signed_error']:+.1f}%, max |error| "
            f"{100 * stats['allocated_max_abs_error']:.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
