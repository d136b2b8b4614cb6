#!/usr/bin/env python3
"""Fit each GPU type's efficiency data to the published runs measured on it.

Per GPU type (the calibration group), coordinate descent over five parameters of
``hardware_profiles/gpus/*.yaml`` (``gemm_efficiency_max``, ``gemm_half_efficiency_gflop``,
``attention_efficiency``, ``fp8_gemm_speedup`` where FP8 runs exist, ``kernel_overhead_us``)
minimises the mean absolute log error of predicted vs measured tokens/s per GPU over *all* that
type's usable runs at once. No parameter is per run. ``--write`` stores the result in the YAML
files of the type's family (GPUs of the same architecture inherit it), with a comment saying
what it was fitted on.

Usage: python scripts/calibrate.py [--runs FILE] [--write]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _efficiency_blocks import write_block  # noqa: E402

from cost_models.estimate import estimate  # noqa: E402
from planner.calibration import DEFAULT_RUNS, Case, cases, excluded_reason  # noqa: E402
from planner.specs import EfficiencySpec, GPUSpec  # noqa: E402

FAMILY_OF = {"a100-sxm4-80gb": "a100", "h100-sxm5-80gb": "h100", "h100-sxm5-96gb": "h100-96gb"}
PARAMS = (
    "gemm_efficiency_max",
    "gemm_half_efficiency_flop",
    "attention_efficiency",
    "fp8_gemm_speedup",
    "kernel_overhead_s",
)
BOUNDS = {
    "gemm_efficiency_max": (0.3, 0.95),
    "gemm_half_efficiency_flop": (1e8, 1e12),
    "attention_efficiency": (0.1, 0.9),
    "fp8_gemm_speedup": (1.0, 2.0),
    "kernel_overhead_s": (0.0, 2e-3),
}
STEPS = (0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.6)


def with_efficiency(case: Case, eff: EfficiencySpec) -> Case:
    gpu: GPUSpec = replace(case.cluster.groups[0].gpu, efficiency=eff)
    groups = tuple(replace(g, gpu=gpu) for g in case.cluster.groups)
    return replace(case, cluster=replace(case.cluster, groups=groups))


def loss(group: list[Case], eff: EfficiencySpec) -> float:
    total = 0.0
    for c in group:
        c2 = with_efficiency(c, eff)
        pred = estimate(c2.model, c2.cluster, c2.job, c2.config).tokens_per_s_per_gpu
        total += abs(math.log(pred / c.measured_tokens_per_s_per_gpu))
    return total / len(group)


def fit(group: list[Case], start: EfficiencySpec) -> tuple[EfficiencySpec, float]:
    params = [p for p in PARAMS if p != "fp8_gemm_speedup" or any(c.job.precision == "fp8" for c in group)]
    best, best_loss = start, loss(group, start)
    for _ in range(8):
        improved = False
        for name in params:
            value = getattr(best, name)
            for step in STEPS:
                lo, hi = BOUNDS[name]
                trial_value = min(hi, max(lo, value * step if value else (1e-5 if step > 1 else 0.0)))
                trial = replace(best, **{name: trial_value})
                trial_loss = loss(group, trial)
                if trial_loss < best_loss - 1e-6:
                    best, best_loss, improved = trial, trial_loss, True
                    value = trial_value
        if not improved:
            break
    return best, best_loss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="published_runs.yaml")
    ap.add_argument("--write", action="store_true", help="store the fitted values in hardware_profiles")
    args = ap.parse_args()
    usable = [c for c in cases(args.runs) if not c.skip_reason and not excluded_reason(c.run_id)]
    for gpu_name, family in FAMILY_OF.items():
        group = [c for c in usable if c.gpu == gpu_name]
        if not group:
            continue
        start = group[0].cluster.groups[0].gpu.efficiency
        eff, err = fit(group, start)
        print(f"{gpu_name}: {len(group)} runs, mean |log error| {err:.3f}")
        values = {
            "gemm_efficiency_max": round(eff.gemm_efficiency_max, 4),
            "gemm_half_efficiency_gflop": round(eff.gemm_half_efficiency_flop / 1e9, 4),
            "attention_efficiency": round(eff.attention_efficiency, 4),
            "hbm_efficiency": eff.hbm_efficiency,
            "fp8_gemm_speedup": round(eff.fp8_gemm_speedup, 4),
            "kernel_overhead_us": round(eff.kernel_overhead_s * 1e6, 3),
        }
        for k, v in values.items():
            print(f"  {k}: {v}")
        if args.write:
            ids = ", ".join(c.run_id for c in group)
            comment = (
                f"Fitted by scripts/calibrate.py on the {len(group)} runs of tests/data/published_runs.yaml\n"
                f"measured on {gpu_name} (mean |log error| {err:.3f}; one set of values for all runs):\n"
                + "\n".join(ids[i : i + 100] for i in range(0, len(ids), 100))
            )
            if family != gpu_name.split("-")[0] or True:
                write_block(family, values, comment)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
