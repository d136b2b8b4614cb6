#!/usr/bin/env python3
"""Hold-out figure of ``planner calibrate``: calibrate on half of one GPU type's published runs,
predict the other half with and without the profile.

The runs of ``--gpu``'s node template in the calibration set (tests/data/published_runs.yaml) are
split deterministically by their order in the file (even positions calibrate, odd positions are
held out). ``planner calibrate HALF.yaml --cluster TEMPLATE --out profile.yaml`` runs in process on
the first half; the held-out runs are then estimated as ``planner estimate --profile profile.yaml``
does (:func:`planner.plans.problem.estimate_config` on the cluster with the profile applied) and without it.
Prints the median and mean absolute error of tokens/s per GPU on the held-out half.

Usage: python scripts/calibrate_holdout.py [--runs FILE] [--cluster dgx-h100] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import api  # noqa: E402
from planner.calibration.cases import DEFAULT_RUNS  # noqa: E402
from planner.calibration.user.sources import base_cluster, read_runs_yaml  # noqa: E402
from planner.cli.app import main as planner_main  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.profiles.calibrated import apply_profile, read_profile  # noqa: E402


def split(runs_file: Path, cluster: str) -> tuple[list[dict], list[str], list[str]]:
    """The usable runs' documents and the ids of the calibration and held-out halves."""
    usable, _ = read_runs_yaml(runs_file, cluster, base_cluster(cluster))
    ids = [r.run_id for r in usable]
    docs = yaml.safe_load(runs_file.read_text())
    return docs, ids[0::2], ids[1::2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="runs YAML (calibration set schema)")
    ap.add_argument("--cluster", default="dgx-h100", help="node template of the GPU type")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    try:
        docs, train_ids, test_ids = split(args.runs, args.cluster)
    except PlannerError as exc:
        print(f"calibrate_holdout: {exc}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        half = Path(tmp) / "calibration_half.yaml"
        keep = set(train_ids)
        half.write_text(yaml.safe_dump({**docs, "runs": [r for r in docs["runs"] if r["id"] in keep]}))
        profile_path = Path(tmp) / "profile.yaml"
        with contextlib.redirect_stdout(io.StringIO()):  # the calibration report; the figures follow
            rc = planner_main(["calibrate", str(half), "--cluster", args.cluster, "--out", str(profile_path)])
        if rc:
            return rc
        profile = read_profile(profile_path)
    held, _ = read_runs_yaml(args.runs, args.cluster, base_cluster(args.cluster))
    held = [r for r in held if r.run_id in set(test_ids)]
    rows = []
    for r in held:
        plain = api.estimate_config(api.Problem(r.model, r.cluster, r.job), r.config)
        calibrated = api.estimate_config(
            api.Problem(r.model, apply_profile(r.cluster, profile), r.job, None, profile), r.config
        )
        m = r.measured_tokens_per_s_per_gpu
        rows.append((r.run_id, m, plain.tokens_per_s_per_gpu, calibrated.tokens_per_s_per_gpu))
    without = [abs(p - m) / m for _, m, p, _ in rows]
    with_ = [abs(c - m) / m for _, m, _, c in rows]
    figures = {
        "cluster": args.cluster,
        "calibration_runs": len(train_ids),
        "held_out_runs": len(rows),
        "without_profile": {"median": statistics.median(without), "mean": statistics.mean(without)},
        "with_profile": {"median": statistics.median(with_), "mean": statistics.mean(with_)},
        "fitted": {n: p.value for n, p in profile.parameters if p.fitted},
    }
    if args.json:
        sys.stdout.write(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write("\n")
    for run_id, m, p, c in rows:
        sys.stdout.write(
            f"{run_id:58s} measured {m:9.0f}  without {p:9.0f} ({abs(p - m) / m:6.1%})  with {c:9.0f} ({abs(c - m) / m:6.1%})\n"
        )
    sys.stdout.write(
        f"\n{args.cluster}: calibrated on {len(train_ids)} runs, {len(rows)} held out\n"
        f"  without profile: median |error| {figures['without_profile']['median']:.1%}, mean {figures['without_profile']['mean']:.1%}\n"
        f"  with profile:    median |error| {figures['with_profile']['median']:.1%}, mean {figures['with_profile']['mean']:.1%}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
