#!/usr/bin/env python3
"""Write hardware_profiles/published_mfu.yaml: the best measured MFU of each class of published run.

A class is (GPU type, precision, dense or MoE), with its best run overall, per framework, per model
size band (planner.profiles.plausibility.size_band: total parameters) and per both. MFU is computed the way planner reports it: model
FLOPs per iteration (Megatron's formula, no recompute; cost_models.layers.model_flop_per_iteration)
over the GPU's dense peak for the run's precision (cost_models.compute.COMPUTE_DTYPE: BF16 for BF16
and FP8 runs, FP16 for FP16 runs, so V100s, which have no BF16 tensor cores, are counted too), from each run's measured tokens/s per GPU
(planner.calibration.cases). Every entry names the run it comes from, whose citation is in
tests/data/published_runs.yaml. ``planner estimate`` flags predictions above their class's best
(issue 12: plans claimed 56-63% MFU where no published run of the class reached that), and
predictions beyond the class's largest run or largest FSDP shard group as extrapolations (issue 12:
FSDP plans over 256 ranks were picked though no such run validates the model), and those with a
step shorter than the class's shortest measured one (unseen MLPerf Training v6.0 runs with steps
of 0.07-0.2 s were predicted 11-143% too fast: docs/calibration.md, "Unseen production runs").

Usage: python scripts/published_mfu.py [--runs FILE] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import COMPUTE_DTYPE  # noqa: E402
from cost_models.layers import model_flop_per_iteration  # noqa: E402
from planner.calibration.cases import DEFAULT_RUNS, cases, measures_speed  # noqa: E402
from planner.calibration.coverage import coverage_table  # noqa: E402
from planner.profiles.plausibility import TABLE, class_key, size_band  # noqa: E402
from planner.profiles.software import CLASSES  # noqa: E402


def table(runs: Path) -> dict:
    best: dict[str, dict] = {}
    all_cases = cases(runs)
    for c in all_cases:
        if c.skip_reason or not measures_speed(c.run_id):
            continue
        gpu = c.cluster.groups[0].gpu
        flop_per_token = model_flop_per_iteration(c.model, c.job) / c.job.tokens_per_step
        mfu = c.measured_tokens_per_s_per_gpu * flop_per_token / gpu.peak(COMPUTE_DTYPE[c.job.precision])
        key = class_key(gpu.name, c.job.precision, c.model.is_moe)
        entry = {"mfu": round(mfu, 4), "run_id": c.run_id, "source": c.source}
        cls = best.setdefault(key, {"by_framework": {}, "by_size": {}, "by_framework_size": {}})
        if "mfu" not in cls or mfu > cls["mfu"]:
            cls.update(entry)
        fw = framework_of(c)
        band = size_band(c.model.params_total)
        for table_, k in (("by_framework", fw), ("by_size", band), ("by_framework_size", f"{fw} {band}")):
            if k not in cls[table_] or mfu > cls[table_][k]["mfu"]:
                cls[table_][k] = entry
    for key, covered in coverage_table(all_cases).items():  # the runs the statistics count
        best[key]["coverage"] = covered["coverage"]
    return {k: best[k] for k in sorted(best)}


FRAMEWORK_OF_SOURCE = (
    ("torchtitan", "torchtitan"),
    ("oneflow", "oneflow"),
    ("llm-foundry", "composer"),
    ("ultra-scale playbook", "nanotron"),
    ("hagemann et al. 2023", "aleph-alpha"),
)
"""(text in a source's name, the framework its runs used), for the sources not run on Megatron-LM:
torchtitan's pages and benchmarks, OneFlow's DLPerf benchmark, llm-foundry's Composer tables, the
Ultra-Scale Playbook's nanotron sweep and Hagemann et al. 2023's Aleph Alpha codebase."""


def framework_of(case) -> str:
    """The framework a published run used: its software release class's framework when it has one
    (planner.profiles.software.CLASSES: the zero-bubble fork's runs are ``zero-bubble``, which stock
    Megatron-LM cannot schedule, and BigScience's are ``deepspeed``, the DeepSpeed pipeline engine),
    else :data:`FRAMEWORK_OF_SOURCE`, else Megatron-LM (Megatron-LM papers and docs, NeMo /
    Megatron-Bridge, vTrain's Megatron-LM)."""
    if case.software in CLASSES:
        return CLASSES[case.software][0]
    source = case.source.lower()
    return next((fw for text, fw in FRAMEWORK_OF_SOURCE if text in source), "megatron")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--check", action="store_true", help="exit 1 if the shipped table is out of date")
    args = ap.parse_args()
    data = table(args.runs)
    text = (
        "# Written by scripts/published_mfu.py from tests/data/published_runs.yaml (each run_id's citation\n"
        "# is there): the best measured MFU (model FLOPs, Megatron's formula, over the dense BF16 peak;\n"
        "# FP16 peak for FP16 runs, as planner estimate reports MFU)\n"
        "# of each class of run: GPU type, precision, dense or MoE, overall, per framework, per model size\n"
        "# band (total parameters) and per framework and size band; and the\n"
        "# class's coverage: its largest run (GPUs), largest fully sharded (FSDP) group and shortest\n"
        "# measured step (seconds), with the run;\n"
        "# for MoE classes, the token dispatchers, all-to-all overlap and CUDA graphs its runs used.\n"
        + yaml.safe_dump({"schema_version": 1, "classes": data}, sort_keys=True, width=100)
    )
    if args.check:
        return 0 if TABLE.read_text() == text else 1
    TABLE.write_text(text)
    for k, v in data.items():
        print(f"{k:40s} {100 * v['mfu']:5.1f}%  {v['run_id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
