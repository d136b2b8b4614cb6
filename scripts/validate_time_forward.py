#!/usr/bin/env python3
"""Time-forward validation: fit on the runs published before a date, predict every run after it.

For each cut date (planner.calibration.time_forward.CUTS unless --cut is given): the usable runs
published on or after it are held out, every efficiency family and software profile is refitted on
the earlier runs (by the shipped fit's procedure: 15-20 minutes for the three cuts on two cores),
and the held-out runs are predicted (a family with no earlier runs is priced
from its parent's fit, a release class with the newest profile fitted before the cut). Prints per
cut the runs fitted on and predicted, the median and 90th percentile of the absolute errors and
the signed median (predicted / measured - 1: + is predicted too fast), the same for the
production-benchmark runs (:data:`PRODUCTION`: the framework vendors' own tables and MLPerf),
and per class (GPU efficiency family x precision x dense/MoE x framework, as validate_published.py
classes them) with the in-sample figures of the same runs beside. Classes of at least
:data:`QUOTED_CLASS_RUNS` runs are marked: the issue's |signed median| <= 3% applies to them.

Exit code 1 when the --runs file cannot be read or a cut has no runs on one side (one line, no
traceback); 2 on bad flags.

Usage: python scripts/validate_time_forward.py [--runs FILE] [--cut YYYY-MM ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_published import class_summary, result_pairs, run_class, run_frameworks  # noqa: E402

from planner.calibration.cases import DEFAULT_RUNS, Result, cases, predict_all  # noqa: E402
from planner.calibration.time_forward import CUTS, time_forward  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402

PRODUCTION = (
    "MLPerf Training",
    "NVIDIA NeMo docs",
    "NVIDIA-NeMo/Megatron-Bridge",
    "NVIDIA/Megatron-LM README",
    "NVIDIA/Megatron-LM examples",
    "NVIDIA/Megatron-LM functional test",
    "NVIDIA Megatron-MoE-ModelZoo",
    "pytorch/torchtitan",
    "mosaicml/llm-foundry",
)
"""Sources (prefixes of ``Case.source``) that are production benchmarks: a framework vendor's own
published performance tables, benchmark recipes and CI figures, and MLPerf submissions; the papers'
experiments, vTrain's validation points and BigScience's logs are the rest."""

QUOTED_CLASS_RUNS = 10
"""A class with this many held-out runs is one whose signed median the docs quote."""


def production(result: Result) -> bool:
    return result.case.source.startswith(PRODUCTION)


def month(text: str) -> str:
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", text):
        raise argparse.ArgumentTypeError(f"a cut is a month as YYYY-MM, got {text!r}")
    return text


def report(folds, shipped: dict[str, Result], frameworks: dict[str, str]) -> list[dict]:
    """One JSON block per cut: the fold's figures, the production runs' and per class, each with
    the in-sample figures of the same runs."""
    rows = []
    for fold in folds:
        own = [shipped[r.case.run_id] for r in fold.results]
        prod = [r for r in fold.results if production(r)]
        classes: dict[str, list[Result]] = {}
        for r in fold.results:
            classes.setdefault(run_class(r.case, frameworks.get(r.case.run_id, "")), []).append(r)
        rows.append(
            {
                **fold.to_json(),
                "in_sample": class_summary(result_pairs(own)),
                "production": {
                    **class_summary(result_pairs(prod)),
                    "in_sample": class_summary(result_pairs([shipped[r.case.run_id] for r in prod])),
                },
                "by_class": {
                    k: {
                        **class_summary(result_pairs(rs)),
                        "in_sample": class_summary(result_pairs([shipped[r.case.run_id] for r in rs])),
                    }
                    for k, rs in sorted(classes.items())
                },
                "runs": [
                    {
                        "id": r.case.run_id,
                        "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                        "predicted_tokens_per_s_per_gpu": r.predicted,
                        "in_sample_tokens_per_s_per_gpu": shipped[r.case.run_id].predicted,
                    }
                    for r in fold.results
                ],
            }
        )
    return rows


def _line(label: str, s: dict, width: int = 34) -> str:
    ins = s.get("in_sample", {})
    return (
        f"{label:{width}s} {s['count']:4d}  {s['median']:6.1%} {s['p90']:6.1%} {s['signed_median']:+7.1%}"
        f"   {ins.get('median', float('nan')):6.1%} {ins.get('p90', float('nan')):6.1%}"
        f" {ins.get('signed_median', float('nan')):+7.1%}"
    )


def print_report(rows: list[dict]) -> None:
    head = f"{'':34s} {'runs':>4s}  {'median':>6s} {'p90':>6s} {'signed':>7s}   {'in-sample median / p90 / signed'}"
    for row in rows:
        print(
            f"cut {row['cut']}: fitted on {row['fitted_on_runs']} earlier runs of {len(row['sources_before'])} sources"
        )
        print(head)
        print(_line("all runs after the cut", {**row, "in_sample": row["in_sample"]}))
        print(_line("production benchmarks", row["production"]))
        for name, s in row["by_class"].items():
            mark = " *" if s["count"] >= QUOTED_CLASS_RUNS else ""
            print(_line(f"  {name}{mark}", s))
        print()
    print(
        "median / p90: absolute error of tokens/s per GPU held out by date; signed: median of "
        f"predicted/measured - 1 (+: too fast); *: a class of >= {QUOTED_CLASS_RUNS} runs"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="published runs YAML")
    ap.add_argument(
        "--cut", type=month, action="append", help=f"cut month YYYY-MM (default {', '.join(CUTS)})"
    )
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    args = ap.parse_args()
    try:
        all_cases = cases(args.runs)
        frameworks = run_frameworks(args.runs)
        folds = time_forward(
            all_cases, tuple(args.cut or CUTS), progress=lambda t: print(t, file=sys.stderr, flush=True)
        )
    except PlannerError as exc:
        print(f"validate_time_forward: {exc}", file=sys.stderr)
        return 1
    shipped = {r.case.run_id: r for r in predict_all(all_cases)}
    rows = report(folds, shipped, frameworks)
    if args.json:
        print(json.dumps({"cuts": rows}, indent=1, sort_keys=True))
    else:
        print_report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
