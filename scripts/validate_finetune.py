#!/usr/bin/env python3
"""Predicted vs published throughput of fine-tuning runs (SFT and LoRA; docs/calibration.md,
"Fine-tuning runs").

Reads tests/data/published_finetune_runs.yaml (every row cited to its table line and recipe), prices
each run with the software profile of its release (fitted on pre-training runs only: no fit reads
the fine-tuning file, so every row is held out by construction) and prints, per run, the measured
and predicted tokens/s per GPU and the signed error (predicted / measured - 1), then per kind (SFT,
LoRA) and over all runs the median and p90 of the absolute error and the signed median. It also
compares planner's model FLOPs per token with the published ones (Model TFLOP/s over tokens/s: the
FLOP convention, not a prediction).

Usage: python scripts/validate_finetune.py [--runs FILE] [--software NAME] [--packed-avg-doc-len L] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.flops import model_flop_per_iteration  # noqa: E402
from cost_models.parallel import ParallelConfig  # noqa: E402
from planner import api  # noqa: E402
from planner.inputs.documents import Reader, check_header, read_document  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402

RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_finetune_runs.yaml"
JOB_KEYS = (
    "precision",
    "fp8_recipe",
    "grad_dtype",
    "cuda_graph_scope",
    "tp_comm_overlap",
    "finetune",
    "lora_rank",
    "lora_targets",
    "frozen_weight_dtype",
    "packed_avg_doc_len",
)


@dataclass(frozen=True, slots=True)
class Run:
    """One published run: where it comes from, what it ran, what it measured."""

    run_id: str
    locator: str
    model: str
    cluster: str
    nodes: int
    job: dict
    config: ParallelConfig
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float

    @property
    def kind(self) -> str:
        """``lora`` or ``sft``."""
        return "lora" if self.job.get("finetune") == "lora" else "sft"


def load_runs(path: Path) -> tuple[str, list[Run]]:
    """The software profile named by the file and its runs, read strictly (one-line errors)."""
    top = Reader(read_document(path), str(path))
    check_header(top, "published_finetune_runs")
    source = Reader(top.get("source", dict), str(path), "source")
    software = source.get("software", str)
    for key in ("table", "recipes", "container"):
        source.get(key, str)
    source.done()
    runs = []
    for i, row in enumerate(top.get("runs", list)):
        r = Reader(row, str(path), f"runs[{i}]")
        job = dict(r.get("job", dict))
        unknown = sorted(set(job) - set(JOB_KEYS) - {"global_batch_size", "seq_length"})
        if unknown:
            raise PlannerError(f"{path}: runs[{i}].job: unknown key {unknown[0]!r}")
        c = Reader(r.get("config", dict), str(path), f"runs[{i}].config")
        tp = c.get("tp", int, positive=True)
        vpp = c.get("vpp", int, 1, positive=True)
        config = ParallelConfig(
            tp=tp,
            pp=c.get("pp", int, positive=True),
            cp=c.get("cp", int, 1, positive=True),
            vpp=vpp,
            micro_batch_size=c.get("micro_batch_size", int, positive=True),
            sequence_parallel=tp > 1,  # Megatron-Bridge WorkloadBaseConfig.sequence_parallel
            optimizer_sharding="distributed",
            schedule="interleaved" if vpp > 1 else "1f1b",
        )
        c.done()
        m = Reader(r.get("measured", dict), str(path), f"runs[{i}].measured")
        run = Run(
            run_id=r.get("id", str),
            locator=r.get("locator", str),
            model=r.get("model", str),
            cluster=r.get("cluster", str),
            nodes=r.get("nodes", int, positive=True),
            job=job,
            config=config,
            tokens_per_s_per_gpu=m.get("tokens_per_s_per_gpu", float, positive=True),
            model_tflops_per_gpu=m.get("model_tflops_per_gpu", float, positive=True),
        )
        r.get("recipe", str)
        m.done()
        r.done()
        runs.append(run)
    top.done()
    return software, runs


def predict(run: Run, software: str, packed_avg_doc_len: int | None) -> dict:
    """The run priced held out: its job and layout under ``software`` (megatron framework)."""
    job = {k: v for k, v in run.job.items() if k not in ("global_batch_size", "seq_length", "precision")}
    if packed_avg_doc_len is not None:
        job["packed_avg_doc_len"] = packed_avg_doc_len
    if "cuda_graph_scope" in job:
        job["cuda_graph_scope"] = tuple(job["cuda_graph_scope"])
    if "lora_targets" in job:
        job["lora_targets"] = tuple(job["lora_targets"])
    problem = api.load_problem(
        run.model,
        run.cluster,
        run.nodes,
        run.job["global_batch_size"],
        run.job["seq_length"],
        run.job.get("precision", "bf16"),
        software=software,
        framework="megatron",
        **job,
    )
    est = api.estimate_config(problem, run.config)
    predicted = est.tokens_per_s_per_gpu
    flop_per_token = model_flop_per_iteration(problem.model, problem.job) / problem.job.tokens_per_step
    published = run.model_tflops_per_gpu * 1e12 / run.tokens_per_s_per_gpu
    return {
        "id": run.run_id,
        "kind": run.kind,
        "locator": run.locator,
        "measured_tokens_per_s_per_gpu": run.tokens_per_s_per_gpu,
        "predicted_tokens_per_s_per_gpu": round(predicted, 1),
        "error": predicted / run.tokens_per_s_per_gpu - 1,
        "model_gflop_per_token": round(flop_per_token / 1e9, 2),
        "published_gflop_per_token": round(published / 1e9, 2),
    }


def summary(rows: list[dict]) -> dict:
    """Median and p90 of |error|, signed median, count."""
    errors = np.array([r["error"] for r in rows], dtype=float)
    if not len(errors):
        return {"count": 0}
    return {
        "count": int(len(errors)),
        "median_abs_error": float(np.median(np.abs(errors))),
        "p90_abs_error": float(np.percentile(np.abs(errors), 90)),
        "signed_median": float(np.median(errors)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument(
        "--software", default=None, help="software profile (default: the file's, the runs' release)"
    )
    ap.add_argument(
        "--packed-avg-doc-len",
        type=int,
        default=None,
        help="price every run's packed documents at this length (default: whole-sequence attention)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        software, runs = load_runs(args.runs)
        software = args.software or software
        rows = [predict(r, software, args.packed_avg_doc_len) for r in runs]
    except PlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    groups = {
        "sft": summary([r for r in rows if r["kind"] == "sft"]),
        "lora": summary([r for r in rows if r["kind"] == "lora"]),
        "all": summary(rows),
    }
    if args.json:
        print(json.dumps({"software": software, "runs": rows, "summary": groups}, indent=2, sort_keys=True))
        return 0
    print(f"software profile: {software}; packed documents: {args.packed_avg_doc_len or 'whole sequence'}")
    print("| run | measured tok/s/GPU | predicted | error | GFLOP/token planner / published |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['id']} | {r['measured_tokens_per_s_per_gpu']:,.0f} | {r['predicted_tokens_per_s_per_gpu']:,.0f} "
            f"| {r['error']:+.1%} | {r['model_gflop_per_token']} / {r['published_gflop_per_token']} |"
        )
    print()
    print("| runs | count | median / p90 abs error | signed median |")
    print("|---|---:|---|---:|")
    for name, s in groups.items():
        if s["count"]:
            print(
                f"| {name} | {s['count']} | {s['median_abs_error']:.1%} / {s['p90_abs_error']:.1%} "
                f"| {s['signed_median']:+.1%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
