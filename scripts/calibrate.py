#!/usr/bin/env python3
"""Fit each efficiency family's data to the published runs measured on its GPU types.

Per efficiency family (the ``# family:`` line of the GPU YAML files; e.g. H200 inherits H100's), coordinate descent over six parameters of
``hardware_profiles/gpus/*.yaml`` (``gemm_efficiency_max``, ``gemm_half_efficiency_gflop``,
``attention_efficiency``, ``fp8_gemm_speedup`` where FP8 runs exist, ``kernel_overhead_us``,
``comm_overlap_slowdown``; planner.calibration.fitting)
minimises the mean absolute log error of predicted vs measured tokens/s per GPU over all that
family's usable runs outside a software release class at once (planner.calibration.fitting.base_runs; each
class's runs are fitted into its profile, hardware_profiles/software), plus a penalty toward the
family's prior: its lineage parent's fit (planner.calibration.fitting.LINEAGE; A100 -> V100, H100 -> H100
96 GB, Blackwell), weighted by the number of sources. Families are fitted parents first, each from
its prior, so the result depends only on the runs file, not on the values already shipped. No parameter is per run. ``--write`` stores the
result in the YAML files of the type's family (GPUs of the same architecture inherit it), with a
comment saying what it was fitted on.

Usage: python scripts/calibrate.py [--runs FILE] [--write]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _efficiency_blocks import write_block  # noqa: E402

from planner.calibration.cases import DEFAULT_RUNS, cases  # noqa: E402
from planner.calibration.fitting import LINEAGE, base_runs, family, fit_families, usable  # noqa: E402
from planner.calibration.profile_gate import decide  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.profiles.software import CLASSES, MIN_RUNS, SOFTWARE_DIR, to_yaml_values  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="published_runs.yaml")
    ap.add_argument("--write", action="store_true", help="store the fitted values in hardware_profiles")
    args = ap.parse_args()
    try:
        runs = usable(cases(args.runs))
    except PlannerError as exc:
        print(f"calibrate: {exc}", file=sys.stderr)
        return 1
    profiles: dict[str, list[str]] = {name: [] for name in CLASSES}
    refused: dict[str, list[str]] = {name: [] for name in CLASSES}
    fitted = fit_families(runs, {family(c) for c in runs})
    for fam, (eff, err, count) in fitted.items():
        group = [c for c in runs if family(c) == fam]
        if not group:
            continue
        base = base_runs(group)
        gpu_name = ", ".join(sorted({c.gpu for c in group}))
        sources = len({c.source for c in base})
        parent = LINEAGE[fam].parent if fam in LINEAGE else None
        print(
            f"{gpu_name}: {count} runs from {sources} sources"
            + (f" (the class-free runs of {len(group)})" if len(base) < len(group) else "")
            + f", mean |log error| {err:.3f}, prior: {parent or 'uncalibrated'}"
        )
        values = {
            "gemm_efficiency_max": round(eff.gemm_efficiency_max, 4),
            "gemm_half_efficiency_gflop": round(eff.gemm_half_efficiency_flop / 1e9, 4),
            "attention_efficiency": round(eff.attention_efficiency, 4),
            "hbm_efficiency": eff.hbm_efficiency,
            "fp8_gemm_speedup": round(eff.fp8_gemm_speedup, 4),
            "kernel_overhead_us": round(eff.kernel_overhead_s * 1e6, 3),
            "comm_overlap_slowdown": round(eff.comm_overlap_slowdown, 4),
            "grouped_gemm_efficiency": round(eff.grouped_gemm_efficiency, 4),
            "host_launch_us": round(eff.host_launch_s * 1e6, 3),
        }
        for k, v in values.items():
            print(f"  {k}: {v}")
        if args.write:
            prior = f"the {parent} fit transferred" if parent else "the uncalibrated values"
            which = (
                f"the {len(base)} runs outside any software release class ({sources} sources; the\n"
                f"{len(group) - len(base)} class runs set only what these cannot, and their profiles,\n"
                "planner.calibration.fitting.base_runs) of\n"
                if len(base) < len(group)
                else f"the {len(group)} runs ({sources} sources) of\n"
            )
            comment = (
                f"Fitted by scripts/calibrate.py on {which}"
                f"tests/data/published_runs.yaml measured on {gpu_name}, regularised toward {prior}\n"
                f"(planner.calibration.fitting.LINEAGE; mean |log error| {err:.3f}; one set of values for all runs):\n"
                + "\n".join(run_list(base, 100))
            )
            write_block(fam, values, comment)
        for d in decide(group, eff, base_for=base_without(runs, fam, base, eff)):
            print(f"  profile {d.cls}: mean |log error| {d.error:.3f}; {d.summary()}")
            if not d.ships:
                refused[d.cls].append(f"  # {fam}: {d.summary()} (planner.calibration.profile_gate)")
                continue
            lines = [
                f"  {fam}:",
                f"    # fitted on {len(d.runs)} runs (mean |log error| {d.error:.3f}; {d.summary()}):",
            ]
            lines += [f"    # {line}" for line in run_list(list(d.runs), 96)]
            moe = any(c.model.is_moe for c in d.runs)
            lines += [f"    {k}: {v:.6g}" for k, v in to_yaml_values(d.values, moe).items()]
            profiles[d.cls] += lines
    if args.write:
        SOFTWARE_DIR.mkdir(exist_ok=True)
        for name, (framework, released, description) in CLASSES.items():
            body = profiles[name]
            text = (
                "# Software profile written by scripts/calibrate.py --write: per efficiency family, the\n"
                "# efficiency numbers this release class changes, fitted on that class's runs of\n"
                "# tests/data/published_runs.yaml (citations there), regularised toward the family's\n"
                f"# base values (planner.calibration.fitting.fit_profile). A family with fewer than {MIN_RUNS} runs of the\n"
                "# class (planner.profiles.software.MIN_RUNS) has no entry, nor one whose cross-validated profile\n"
                "# predicts its runs no better than what prices them without it (planner.calibration.profile_gate):\n"
                "# there the predecessor's entry or the GPU file's base values apply.\n"
                f"name: {name}\nframework: {framework}\nreleased: '{released}'\n"
                f"description: {description}\nfamilies:"
                + ("\n" + "\n".join(body) if body else " {}")
                + "".join(f"\n{line}" for line in refused[name])
                + "\n"
            )
            (SOFTWARE_DIR / f"{name}.yaml").write_text(text)
    return 0


def base_without(runs, fam: str, base, eff):
    """For the profile gate (planner.calibration.profile_gate): the family's base values fitted
    without the given runs, by the shipped procedure (fit_families on every other run); ``eff``
    itself when its fit (``base``, planner.calibration.fitting.base_runs) never saw them."""
    fitted_on = {c.run_id for c in base}

    def values(held) -> object:
        ids = {c.run_id for c in held}
        if not ids & fitted_on:
            return eff
        return fit_families([c for c in runs if c.run_id not in ids], {fam})[fam][0]

    return values


def run_list(runs, width: int) -> list[str]:
    """The runs' ids, comma-separated, in lines of at most ``width`` characters broken between ids
    (an id longer than a line stands alone)."""
    ids = ", ".join(c.run_id for c in runs)
    return textwrap.wrap(ids, width, break_long_words=False, break_on_hyphens=False)


if __name__ == "__main__":
    raise SystemExit(main())
