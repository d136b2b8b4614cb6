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

Each run is priced with the software profile ``--profile`` names:

* ``then`` (the default, the figures to quote): the profile a plan would have had the month the
  run's table appeared, the newest shipped Megatron profile released by then with an entry for the
  run's GPU family, else the base values: what planner would have predicted for a user that day;
* ``today``: the profile ``planner search`` gives such a plan now
  (planner.profiles.software.default_software), which may postdate the run;
* ``base``: the GPU files' base values, no software profile.

The overall figures under the other two stand beside.

Each run is also judged as ``planner estimate`` judges a plan: its 80% prediction interval
(:func:`planner.profiles.uncertainty.predict_interval`, from the held-out errors of the calibration
set) and whether it lies outside calibration (:func:`planner.profiles.plausibility.estimate_plausibility`:
more GPUs or a shorter step than its class's runs, an MoE runtime or token mixer none of them has);
the report gives the share of runs measured inside their interval, overall and for the runs inside
and outside calibration apart: whether the stated uncertainty holds on runs no fit saw.

Exit code 1 when the --runs file cannot be read (one line, no traceback); 2 on bad flags.

Usage: python scripts/validate_production.py [--runs FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_published import by_class, class_summary, result_pairs, run_frameworks, signed_error  # noqa: E402

from cost_models.estimate import estimate  # noqa: E402
from planner.calibration.cases import Result, cases, with_software  # noqa: E402
from planner.calibration.time_forward import SOURCE_DATES  # noqa: E402
from planner.inputs.documents import read_document  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.profiles.plausibility import estimate_plausibility  # noqa: E402
from planner.profiles.software import (  # noqa: E402
    BASE,
    CLASSES,
    default_software,
    efficiency_family,
    load_profiles,
)
from planner.profiles.uncertainty import predict_interval  # noqa: E402

PROFILES = ("then", "today", "base")
"""How each run is priced (``--profile``; see the module docstring)."""

DEFAULT_PRODUCTION_RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "production_runs.yaml"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs",
        type=Path,
        default=DEFAULT_PRODUCTION_RUNS,
        help="production runs YAML (default: tests/data/production_runs.yaml)",
    )
    ap.add_argument(
        "--profile",
        choices=PROFILES,
        default="then",
        help="software profile: then (newest released by the run's table, the default), today, base",
    )
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    return ap.parse_args(argv)


def released_month(software_text: str, source: str = "") -> str:
    """The month (YYYY-MM) of a record's ``parallel.software`` container ('NeMo 25.04 container',
    'Megatron-Bridge / NeMo 26.02 container'), else of its ``source``'s publication
    (planner.calibration.time_forward.SOURCE_DATES: Cisco's v6.0 H100 rows, 'NeMo 2 ... on the
    PyTorch NVIDIA NGC container', are dated by the v6.0 round); '' when neither says."""
    found = re.search(r"\b(\d\d)\.(\d\d)\b", software_text)
    if found:
        return f"20{found.group(1)}-{found.group(2)}"
    return SOURCE_DATES.get(source, ("",))[0]


def profile_for(family: str, month: str, how: str) -> str:
    """The software profile a run on GPU ``family`` is priced with (:data:`PROFILES`)."""
    if how == "base":
        return BASE
    if how == "today":
        return default_software("megatron", (family,))
    fitted = [
        (str(d.get("released", "")), name)
        for name, d in load_profiles().items()
        if d.get("framework") == "megatron"
        and family in (d.get("families") or {})
        and month
        and str(d.get("released", "")) <= month
    ]
    return max(fitted)[1] if fitted else BASE


def predict(path: Path, all_cases: list, how: str) -> tuple[list[Result], dict[str, str]]:
    """Every buildable run of ``path`` predicted with its :func:`profile_for` profile, and the
    profile each run got."""
    texts = {
        str(r.get("id")): str((r.get("parallel") or {}).get("software") or "")
        for r in read_document(Path(path))["runs"]
    }
    results, used = [], {}
    for c in all_cases:
        if c.skip_reason:
            continue
        gpu = c.cluster.groups[0].gpu
        family = efficiency_family(gpu.name)
        name = profile_for(family, released_month(texts.get(c.run_id, ""), c.source), how)
        used[c.run_id] = name
        results.append(Result(c, estimate(c.model, with_software(c.cluster, name), c.job, c.config)))
    return results, used


def judged(result: Result, software: str, framework: str) -> dict:
    """The run's 80% interval as ``planner estimate`` states it (priced with ``software``; the
    interval's framework is the profile's, else the record's ``framework``), whether the measured
    throughput lies in it, and why the plan is outside calibration (empty: inside)."""
    c, est = result.case, result.estimate
    cluster = with_software(c.cluster, software)
    fw = CLASSES[software][0] if software in CLASSES else framework
    why = estimate_plausibility(c.model, c.job, cluster, est, fw).extrapolation
    iv = predict_interval(
        cluster, c.job.precision, c.model.is_moe, fw, est.tokens_per_s_per_gpu, est.step_time_s, bool(why)
    )
    low, high = iv.tokens_per_s_per_gpu
    return {
        "interval_tokens_per_s_per_gpu": [low, high],
        "interval_class": iv.cls,
        "in_interval": low <= c.measured_tokens_per_s_per_gpu <= high,
        "outside_calibration": list(why),
    }


def coverage(rows: list[dict]) -> dict:
    """The share of ``rows`` measured inside their interval: all, inside calibration, outside."""

    def share(rs: list[dict]) -> dict:
        inside = sum(r["in_interval"] for r in rs)
        return {"runs": len(rs), "in_interval": inside, "share": inside / len(rs) if rs else None}

    return {
        "all": share(rows),
        "inside_calibration": share([r for r in rows if not r["outside_calibration"]]),
        "outside_calibration": share([r for r in rows if r["outside_calibration"]]),
    }


def report(path: Path, how: str = "then") -> dict:
    """Every run of ``path`` predicted with profiles chosen by ``how``: per run, overall and per
    class, and the overall figures under the other :data:`PROFILES` beside."""
    all_cases = cases(path)
    frameworks = run_frameworks(path)
    results, used = predict(path, all_cases, how)
    others = {
        other: class_summary(result_pairs(predict(path, all_cases, other)[0]))
        for other in PROFILES
        if other != how
    }
    out = {
        "runs_file": str(path),
        "out_of_sample": True,
        "profile": how,
        "overall_with_other_profiles": others,
        "runs": [
            {
                "id": r.case.run_id,
                "class": cls,
                "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": r.predicted,
                "software": used[r.case.run_id],
                "signed_error": signed_error(r.predicted, r.case.measured_tokens_per_s_per_gpu),
                "predicted_peak_over_capacity": _peak_ratio(r),
                **judged(r, used[r.case.run_id], frameworks.get(r.case.run_id, "")),
            }
            for cls, rs in by_class(results, frameworks).items()
            for r in rs
        ],
        "skipped": {c.run_id: c.skip_reason for c in all_cases if c.skip_reason},
        "overall": class_summary(result_pairs(results)),
        "by_class": {k: class_summary(result_pairs(rs)) for k, rs in by_class(results, frameworks).items()},
    }
    out["interval_coverage"] = coverage(out["runs"])
    out["predicted_not_to_fit"] = {
        row["id"]: row["predicted_peak_over_capacity"]
        for row in out["runs"]
        if row["predicted_peak_over_capacity"] > 1
    }
    return out


def _peak_ratio(result: Result) -> float:
    """The run's predicted peak memory over its GPU's capacity (its worst stage): above 1, planner
    says a run that ran does not fit."""
    m = result.estimate.worst_stage.memory
    return m.peak_bytes / m.capacity_bytes


def print_report(out: dict) -> None:
    print(f"{'run':48s} {'measured':>9s} {'predicted':>9s} {'signed':>7s}  class, profile")
    for row in out["runs"]:
        print(
            f"{row['id']:48s} {row['measured_tokens_per_s_per_gpu']:9.0f} "
            f"{row['predicted_tokens_per_s_per_gpu']:9.0f} {row['signed_error']:+7.1%}  {row['class']}, "
            f"{row['software']}"
        )
    for rid, why in out["skipped"].items():
        print(f"skipped {rid}: {why}")
    print(
        "\nout-of-sample (no fit reads these runs); signed = predicted / measured - 1, + = predicted too fast"
    )
    print(f"{'':34s} {'runs':>4s}  {'median':>6s} {'p90':>6s} {'signed':>7s}")
    rows = [(f"overall ({out['profile']})", out["overall"])] + list(out["by_class"].items())
    rows += [(f"overall ({k})", v) for k, v in out["overall_with_other_profiles"].items()]
    for label, s in rows:
        print(f"{label:34s} {s['count']:4d}  {s['median']:6.1%} {s['p90']:6.1%} {s['signed_median']:+7.1%}")
    unfit = out["predicted_not_to_fit"]
    print(f"\npredicted not to fit, though they ran: {len(unfit)} of {len(out['runs'])}")
    for rid, ratio in unfit.items():
        print(f"  {rid:48s} peak {ratio:.3f} x capacity")
    print("\nmeasured inside the 80% prediction interval planner states")
    for label, s in out["interval_coverage"].items():
        share = f"{s['share']:.1%}" if s["share"] is not None else "-"
        print(f"{label.replace('_', ' '):34s} {s['in_interval']:4d} of {s['runs']:4d}  {share}")


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    try:
        out = report(args.runs, args.profile)
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
