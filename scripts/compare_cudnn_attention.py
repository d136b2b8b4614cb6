#!/usr/bin/env python3
"""Compare NVIDIA's measured cuDNN attention kernels with the attention time planner charges.

NVIDIA's cuDNN SDPA training benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training)
timed the fused attention kernel Megatron's Transformer Engine runs, forward and backward, for
training shapes on an H200, a GB200 and a GB300; the BF16 causal rows are copied to
hardware_profiles/measurements/*-cudnn-attention.json with their commit. For every row and GPU
type this prints the measured time beside what the cost model charges the same call
(``cost_models.compute.attention_s`` at the GPU's calibrated ``attention_efficiency`` and the
size curve, ``cost_models.attention.core_attention_s`` for the backward and the GPU's
``attention_kernel_speed``), and per GPU the median model / measured ratio.

A ratio near 1 means the calibrated attention efficiency is the kernel's; well above 1 means the
end-to-end fit charges attention more than the kernel takes (the efficiency then also carries
time the model misses elsewhere: docs/calibration.md "Blackwell Ultra attention"). No GPU needed.

Usage: python scripts/compare_cudnn_attention.py [FILE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.attention import core_attention_s  # noqa: E402
from cost_models.compute import attention_s  # noqa: E402
from planner.calibration.kernel_curves import MEASUREMENTS_DIR, median_by_pass  # noqa: E402
from planner.inputs.cluster_spec import GPUSpec  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.inputs.jobs import make_job  # noqa: E402
from planner.inputs.model_spec import local_attention_span  # noqa: E402
from planner.profiles.hardware import load_gpu  # noqa: E402

DEFAULT_FILES = sorted(MEASUREMENTS_DIR.glob("*-cudnn-attention.json"))


def span(seq: int, window: int | None) -> float:
    """Keys per query in the non-causal convention planner charges (the sequence for full causal
    attention; :func:`planner.inputs.model_spec.local_attention_span` for a sliding window)."""
    return float(seq) if window is None else local_attention_span(seq, window)


def compare(files: list[Path]) -> dict:
    """Per GPU type: every row's measured and charged milliseconds and the median ratios."""
    by_gpu: dict[str, list[dict]] = {}
    gpus: dict[str, GPUSpec] = {}
    for path in files:
        data = json.loads(Path(path).read_text())
        for r in data["rows"]:
            keys = span(r["seq"], r["window"])
            flop = r["batch"] * r["seq"] * keys * r["q_heads"] * (r["head_dim_qk"] + r["head_dim_vo"])
            job = make_job(global_batch_size=r["batch"], seq_length=r["seq"], precision="bf16")
            for gpu_name, ms in sorted(r["ms"].items()):
                if gpu_name not in gpus:
                    gpus[gpu_name] = load_gpu(gpu_name)
                gpu = gpus[gpu_name]
                fused = attention_s(flop, gpu, "bf16", keys)
                fwd, bwd = core_attention_s(fused, job, gpu, local=keys < r["seq"])
                model_ms = 1e3 * (fwd if r["direction"] == "fwd" else bwd)
                by_gpu.setdefault(gpu_name, []).append(
                    {
                        "model": r["model"],
                        "seq": r["seq"],
                        "window": r["window"],
                        "direction": r["direction"],
                        "measured_ms": ms,
                        "charged_ms": model_ms,
                        "ratio": model_ms / ms,
                    }
                )
    out = {}
    for gpu_name, rows in sorted(by_gpu.items()):
        summary = {
            f"{'window ' if local else ''}{direction}": v
            for (direction, local), v in median_by_pass(rows, lambda x: x["ratio"]).items()
        }
        gpu = gpus[gpu_name]
        out[gpu_name] = {
            "attention_efficiency": gpu.efficiency.attention_efficiency,
            "attention_kernel_speed": list(gpu.attention_kernel_speed),
            "median_charged_over_measured": summary,
            "rows": rows,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        result = compare(args.files)
    except (OSError, ValueError, KeyError, TypeError, PlannerError) as exc:
        # a missing or malformed file, or a row naming a GPU type the catalogue lacks
        print(f"error: cannot compare {', '.join(map(str, args.files))}: {exc!r}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    for gpu_name, r in result.items():
        medians = ", ".join(f"{k} {v:.2f}" for k, v in r["median_charged_over_measured"].items())
        print(
            f"{gpu_name}: attention_efficiency {r['attention_efficiency']:.4f}, kernel speed "
            f"{r['attention_kernel_speed'][0]:.3f} / {r['attention_kernel_speed'][1]:.3f}; "
            f"charged / measured (median): {medians}"
        )
        for x in r["rows"]:
            window = f" window {x['window']}" if x["window"] else ""
            print(
                f"  {x['model']:9s} {x['seq']:6d}{window:12s} {x['direction']}  measured {x['measured_ms']:8.3f} ms"
                f"  charged {x['charged_ms']:8.3f} ms  ratio {x['ratio']:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
