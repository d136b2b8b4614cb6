#!/usr/bin/env python3
"""How well planner prices a software release before its profile is fitted.

For each release class of a framework planner plans for (Megatron-Bridge containers, torchtitan),
oldest first: hold out the class's runs, refit every family on the rest, and predict them with the
profile a plan would have had (the newest earlier release fitted on the GPU family, else base;
planner.calibration.releases). Prints per release the runs, the profile used per family, the median
and 90th percentile of the absolute errors, and the signed median (negative: the release ran faster
than planner predicted), then, beside it, the same runs' in-sample error with their own fitted
profile: what fitting the release bought.

Exit code 1 when the --runs file cannot be read (one line naming the file, and the run and key
where one is malformed; no traceback).

Usage: python scripts/validate_releases.py [--runs FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration.cases import DEFAULT_RUNS, cases, predict_all, summary  # noqa: E402
from planner.calibration.releases import release_forward, signed_median  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="published runs YAML")
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    args = ap.parse_args()
    try:
        all_cases = cases(args.runs)
    except PlannerError as exc:
        print(f"validate_releases: {exc}", file=sys.stderr)
        return 1
    folds = release_forward(all_cases, progress=lambda t: print(t, file=sys.stderr))
    shipped = {r.case.run_id: r for r in predict_all(all_cases)}
    rows = []
    for fold in folds:
        own = [shipped[r.case.run_id] for r in fold.results]
        rows.append(
            {
                **fold.to_json(),
                "in_sample": {
                    **summary(own),
                    "signed_median": signed_median(own),
                },
            }
        )
    if args.json:
        print(json.dumps({"releases": rows}, indent=1, sort_keys=True))
        return 0
    print(
        f"{'release':32s} {'runs':>4s}  {'median':>7s} {'p90':>7s} {'signed':>7s}   "
        f"{'own profile':>11s}  predicted with"
    )
    for row in rows:
        used = ", ".join(f"{fam}: {name or 'base'}" for fam, name in row["predicted_with"].items())
        print(
            f"{row['release']:32s} {row['count']:4d}  {row['median']:7.1%} {row['p90']:7.1%} "
            f"{row['signed_median']:+7.1%}   {row['in_sample']['median']:11.1%}  {used}"
        )
    print(
        "median / p90: absolute error held out; signed: median of predicted/measured - 1; "
        "own profile: in-sample median with the release's fitted profile"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
