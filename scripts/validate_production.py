#!/usr/bin/env python3
"""Predict the unseen production benchmark runs and report the signed error per run and per class.

The runs (tests/data/production_runs.yaml unless --runs is given, a file of the calibration set's
schema) are NVIDIA's published training-performance tables that the calibration set does not hold:
no fit ever reads them, so every figure here is out-of-sample by construction. Each run is built
with :func:`planner.calibration.cases.cases` and predicted with the shipped values
(:func:`planner.calibration.cases.predict_all`). Prints per run the measured and predicted
tokens/s per GPU and the signed error (predicted / measured - 1: + is predicted too fast), the runs
that cannot be built and why, then the median and 90th percentile of the absolute errors and the
signed median overall and per class (GPU efficiency family x precision x dense/MoE x framework, as
validate_published.py classes them).

Exit code 1 when the --runs file cannot be read (one line, no traceback); 2 on bad flags.

Usage: python scripts/validate_production.py [--runs FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_published import _pairs, by_class, class_summary, run_frameworks, signed_error  # noqa: E402

from planner.calibration.cases import cases, predict_all  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402

DEFAULT_PRODUCTION_RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "production_runs.yaml"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs",
        type=Path,
        default=DEFAULT_PRODUCTION_RUNS,
        help="production runs YAML (default: tests/data/production_runs.yaml)",
    )
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    return ap.parse_args(argv)


def report(path: Path) -> dict:
    """Every run of ``path`` predicted: per run, overall and per class."""
    all_cases = cases(path)
    frameworks = run_frameworks(path)
    results = predict_all(all_cases)
    return {
        "runs_file": str(path),
        "out_of_sample": True,
        "runs": [
            {
                "id": r.case.run_id,
                "class": cls,
                "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": r.predicted,
                "signed_error": signed_error(r.predicted, r.case.measured_tokens_per_s_per_gpu),
            }
            for cls, rs in by_class(results, frameworks).items()
            for r in rs
        ],
        "skipped": {c.run_id: c.skip_reason for c in all_cases if c.skip_reason},
        "overall": class_summary(_pairs(results)),
        "by_class": {k: class_summary(_pairs(rs)) for k, rs in by_class(results, frameworks).items()},
    }


def print_report(out: dict) -> None:
    print(f"{'run':48s} {'measured':>9s} {'predicted':>9s} {'signed':>7s}  class")
    for row in out["runs"]:
        print(
            f"{row['id']:48s} {row['measured_tokens_per_s_per_gpu']:9.0f} "
            f"{row['predicted_tokens_per_s_per_gpu']:9.0f} {row['signed_error']:+7.1%}  {row['class']}"
        )
    for rid, why in out["skipped"].items():
        print(f"skipped {rid}: {why}")
    print(
        "\nout-of-sample (no fit reads these runs); signed = predicted / measured - 1, + = predicted too fast"
    )
    print(f"{'':34s} {'runs':>4s}  {'median':>6s} {'p90':>6s} {'signed':>7s}")
    rows = [("overall", out["overall"])] + list(out["by_class"].items())
    for label, s in rows:
        print(f"{label:34s} {s['count']:4d}  {s['median']:6.1%} {s['p90']:6.1%} {s['signed_median']:+7.1%}")


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    try:
        out = report(args.runs)
    except (PlannerError, OSError) as exc:
        print(f"validate_production: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
