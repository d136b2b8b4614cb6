#!/usr/bin/env python3
"""Compare measured MoE grouped-GEMM times (scripts/measure_grouped_gemm.py) with planner's pricing.

No GPU needed. For each measured row (expert shape, local experts E, tokens per expert n) it prices
the SwiGLU expert MLP's two grouped GEMMs (fc1 [n, h] x [h, 2f], fc2 [n, f] x [f, h], per expert)
two ways with the GPU's efficiency data (cost_models.compute.gemm_s):

- ``per-expert``: E GEMMs, each at the efficiency of one expert's FLOPs, rows padded to the
  grouped-GEMM tile (cost_models.moe.grouped_gemm_rows): what cost_models/layers.py charged until
  2026-11-24;
- ``one call``: a single GEMM over all E experts' padded rows (the grouped kernel is one launch
  whose tiles fill the GPU together): cost_models.moe.grouped_linear_s, what layers.py charges now
  (before its fitted grouped_gemm_efficiency).

Prints the ratio predicted / measured per row and the median and range per pricing.

Usage: python scripts/compare_grouped_gemm.py [FILE] [--gpu NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import gemm_s  # noqa: E402
from cost_models.moe import grouped_gemm_rows  # noqa: E402
from planner.hardware import load_gpu  # noqa: E402

DEFAULT = (
    Path(__file__).resolve().parent.parent
    / "hardware_profiles"
    / "measurements"
    / "h100-sxm5-80gb-grouped-gemm.json"
)


def compare(doc: dict, gpu_name: str) -> list[dict]:
    """One dict per measured row: measured seconds and both pricings' ratios to it."""
    gpu = load_gpu(gpu_name)
    out = []
    for r in doc["rows"]:
        h, f, E, n = r["hidden"], r["expert_ffn"], r["local_experts"], r["tokens_per_expert"]
        rows = grouped_gemm_rows(n)
        per_expert = gemm_s(rows, 2 * f, h, gpu, "bf16", count=E) + gemm_s(rows, h, f, gpu, "bf16", count=E)
        one_call = gemm_s(E * rows, 2 * f, h, gpu, "bf16") + gemm_s(E * rows, h, f, gpu, "bf16")
        measured = r["fc1_s"] + r["fc2_s"]
        out.append(
            {
                "shape": r["shape"],
                "tokens_per_expert": n,
                "local_experts": E,
                "measured_s": measured,
                "per_expert_ratio": per_expert / measured,
                "one_call_ratio": one_call / measured,
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--gpu", default="h100-sxm5-80gb", help="planner GPU type whose efficiencies price them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = compare(json.loads(args.file.read_text()), args.gpu)
    grouped = [r for r in rows if r["local_experts"] > 1]
    summary = {
        key: {
            "median": statistics.median(r[key] for r in grouped),
            "min": min(r[key] for r in grouped),
            "max": max(r[key] for r in grouped),
        }
        for key in ("per_expert_ratio", "one_call_ratio")
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary_grouped": summary}, indent=1, sort_keys=True))
        return 0
    print(f"{'shape':22s} {'n':>5s} {'E':>3s} {'measured us':>12s} {'per-expert':>11s} {'one call':>9s}")
    for r in rows:
        print(
            f"{r['shape']:22s} {r['tokens_per_expert']:5d} {r['local_experts']:3d} {r['measured_s'] * 1e6:12.1f} "
            f"{r['per_expert_ratio']:10.2f}x {r['one_call_ratio']:8.2f}x"
        )
    for key, s in summary.items():
        print(
            f"{key.replace('_ratio', ''):10s} predicted / measured over {len(grouped)} grouped rows: "
            f"median {s['median']:.2f}x, range {s['min']:.2f}-{s['max']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
