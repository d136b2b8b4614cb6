#!/usr/bin/env python3
"""Compare measured MoE grouped-GEMM times (scripts/measure_grouped_gemm.py) with planner's pricing.

No GPU needed. For each measured row (expert shape, local experts E, tokens per expert n, token
distribution) it prices the SwiGLU expert MLP's two grouped GEMMs (fc1 [n, h] x [h, 2f], fc2
[n, f] x [f, h], per expert) in each pass the file holds (forward; input and weight gradient in
files written from 2026-11-27) three ways with the GPU's efficiency data:

- ``per_expert``: E GEMMs, each at the efficiency of one expert's FLOPs, rows padded to the
  grouped-GEMM tile (cost_models.moe.grouped_gemm_rows): what cost_models/layers.py charged until
  2026-11-24;
- ``one_call``: a single GEMM over all E experts' padded rows (the grouped kernel is one launch
  whose tiles fill the GPU together), FLOPs only: cost_models.moe.grouped_linear_s until 2026-11-27;
- ``roofline``: ``one_call`` or the pass's HBM traffic (every expert's weight read, or its gradient
  written, plus the activations) at the GPU's streaming bandwidth, whichever is longer: what
  cost_models.moe.grouped_linear_s charges now (before the fitted ``grouped_gemm_efficiency``,
  taken as 1 here: the kernel itself is measured). The weight gradient is written in BF16, as
  measured.

Files written from 2026-11-27 also time Transformer Engine's default path (one cuBLAS GEMM per
expert over 4 CUDA streams, ``streams_*`` keys); ``roofline_te`` is the same roofline pricing
against those times.

Rows with ``streams_fp8_*`` keys (``--fp8``) also give the FP8 speed-up of that per-expert path (its
six BF16 GEMMs' time over their FP8 time), beside the speed-up planner charges (the GPU's fitted
``fp8_gemm_speedup`` on the FLOP term).

Rows with ``*_wgrad_fp32acc_s`` keys (``--accumulate``) give the per-expert weight gradients
accumulated into FP32 through ``torch.addmm(main_grad, dY.t(), X, out_dtype=float32)``, which
copies ``main_grad`` into its output before accumulating: 16 bytes per weight element
(Megatron-Core's in-place accumulation moves 8); their time over that traffic at the GPU's
streaming rate (``cost_models.moe.grouped_traffic_bytes``) checks the rate for FP32 traffic.

Prints, per pass and tokens-per-expert band, the median ratio predicted / measured, and over all
grouped rows the median ratio and the median and 90th-percentile absolute error per pricing.

Usage: python scripts/compare_grouped_gemm.py [FILE] [--gpu NAME] [--json]
Exit codes: 0 compared; 2 the file is not a grouped-GEMM measurement or names an unknown GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import gemm_s  # noqa: E402
from cost_models.moe import grouped_gemm_rows, grouped_linear_s, grouped_traffic_bytes  # noqa: E402
from planner.calibration.kernel_measurements import expert_linears  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.profiles.hardware import load_gpu  # noqa: E402

DEFAULT = (
    Path(__file__).resolve().parent.parent
    / "hardware_profiles"
    / "measurements"
    / "h100-sxm5-80gb-grouped-gemm.json"
)
PASSES = {"forward": "", "input_grad": "_dgrad", "weight_grad": "_wgrad"}
"""Pass name -> suffix of its measured keys (``fc1{suffix}_s``)."""
PRICINGS = ("per_expert", "one_call", "roofline", "roofline_te")
BANDS = ((0, 64), (65, 256), (257, 1024), (1025, 10**9))
"""Tokens-per-expert bands of the summary table (inclusive)."""


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


def compare(doc: dict, gpu_name: str) -> list[dict]:
    """One dict per measured row and pass: measured seconds (fc1 + fc2) and each pricing's ratio to it."""
    gpu = load_gpu(gpu_name)
    kernel = dataclasses.replace(
        gpu, efficiency=dataclasses.replace(gpu.efficiency, grouped_gemm_efficiency=1.0)
    )
    out = []
    for r in doc["rows"]:
        E, n = r["local_experts"], r["tokens_per_expert"]
        rows = grouped_gemm_rows(n)
        linears = [(k_in, n_out) for _, k_in, n_out in expert_linears(r)]
        per_expert = {
            "forward": sum(gemm_s(rows, o, k, gpu, "bf16", count=E) for k, o in linears),
            "input_grad": sum(gemm_s(rows, k, o, gpu, "bf16", count=E) for k, o in linears),
            "weight_grad": sum(gemm_s(k, o, rows, gpu, "bf16", count=E) for k, o in linears),
        }
        one_call = {
            "forward": sum(gemm_s(E * rows, o, k, gpu, "bf16") for k, o in linears),
            "input_grad": sum(gemm_s(E * rows, k, o, gpu, "bf16") for k, o in linears),
            "weight_grad": sum(gemm_s(k, o * E, rows, gpu, "bf16") for k, o in linears),
        }
        roof = [
            grouped_linear_s(rows, E, o, k, kernel, "bf16", wgrad_out_bytes=2.0, tokens_per_expert=n)
            for k, o in linears
        ]
        roofline = {p: sum(getattr(t, f"{p}_s") for t in roof) for p in PASSES}
        for p, suffix in PASSES.items():
            if f"fc1{suffix}_s" not in r:
                continue
            measured = r[f"fc1{suffix}_s"] + r[f"fc2{suffix}_s"]
            te = r.get(f"streams_fc1{suffix}_s", 0.0) + r.get(f"streams_fc2{suffix}_s", 0.0)
            out.append(
                {
                    "roofline_te_ratio": roofline[p] / te if te else None,
                    "shape": r["shape"],
                    "pass": p,
                    "distribution": r.get("distribution", "even"),
                    "tokens_per_expert": n,
                    "local_experts": E,
                    "measured_s": measured,
                    "per_expert_ratio": per_expert[p] / measured,
                    "one_call_ratio": one_call[p] / measured,
                    "roofline_ratio": roofline[p] / measured,
                }
            )
    return out


def _median_or_none(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(rows: list[dict]) -> dict:
    """Over the grouped rows (E > 1): per pricing the median ratio and the median / p90 absolute
    error; per pass and tokens-per-expert band the median roofline and one-call ratios."""
    grouped = [r for r in rows if r["local_experts"] > 1]
    overall = {}
    for key in PRICINGS:
        ratios = [r[f"{key}_ratio"] for r in grouped if r[f"{key}_ratio"] is not None]
        if not ratios:
            continue
        errors = [abs(x - 1.0) for x in ratios]
        overall[key] = {
            "median_ratio": statistics.median(ratios),
            "min_ratio": min(ratios),
            "max_ratio": max(ratios),
            "median_abs_error": statistics.median(errors),
            "p90_abs_error": _percentile(errors, 0.9),
        }
    bands = []
    for p in PASSES:
        for lo, hi in BANDS:
            sel = [r for r in grouped if r["pass"] == p and lo <= r["tokens_per_expert"] <= hi]
            if sel:
                bands.append(
                    {
                        "pass": p,
                        "tokens_per_expert": [lo, hi],
                        "rows": len(sel),
                        "one_call_median_ratio": statistics.median(r["one_call_ratio"] for r in sel),
                        "roofline_median_ratio": statistics.median(r["roofline_ratio"] for r in sel),
                        "roofline_te_median_ratio": _median_or_none(r["roofline_te_ratio"] for r in sel),
                    }
                )
    return {"grouped_rows": len(grouped), "overall": overall, "bands": bands}


def band_stats(values: list[tuple[float, float]]) -> list[dict]:
    """Median, min and max of ``(tokens_per_expert, value)`` pairs per band of :data:`BANDS`."""
    out = []
    for lo, hi in BANDS:
        sel = [x for n, x in values if lo <= n <= hi]
        if sel:
            out.append(
                {
                    "tokens_per_expert": [lo, hi],
                    "rows": len(sel),
                    "median": statistics.median(sel),
                    "min": min(sel),
                    "max": max(sel),
                }
            )
    return out


def fp8_speedups(doc: dict, gpu_name: str) -> dict:
    """Measured FP8 speed-up of the per-expert 4-stream path per expert shape and token count (all
    six GEMMs together), its median per tokens-per-expert band, and the speed-up planner charges."""
    keys = [f"{n}{s}" for n in ("fc1", "fc2") for s in PASSES.values()]
    rows = [
        {
            "shape": r["shape"],
            "tokens_per_expert": r["tokens_per_expert"],
            "speedup": sum(r[f"streams_{k}_s"] for k in keys) / sum(r[f"streams_fp8_{k}_s"] for k in keys),
        }
        for r in doc["rows"]
        if "streams_fp8_fc1_s" in r
    ]
    bands = band_stats([(r["tokens_per_expert"], r["speedup"]) for r in rows])
    return {"rows": rows, "bands": bands, "charged": load_gpu(gpu_name).efficiency.fp8_gemm_speedup}


OUT_OF_PLACE_ACCUMULATE_BYTES = 16.0
"""Bytes per weight element of ``torch.addmm(main_grad, a, b, out_dtype=float32)``: the copy of
``main_grad`` into the output (read 4, write 4) and the GEMM's accumulation into it (read 4, write 4)."""


def accumulate_ratios(doc: dict, gpu_name: str) -> list[dict]:
    """Per band of tokens per expert, the FP32-accumulating weight gradients' measured time over
    their traffic (:data:`OUT_OF_PLACE_ACCUMULATE_BYTES` per weight element) at the GPU's rate."""
    rate = load_gpu(gpu_name).gemm_stream_bandwidth()
    ratios = []
    for r in doc["rows"]:
        if "streams_fc1_wgrad_fp32acc_s" not in r:
            continue
        n, E = r["tokens_per_expert"], r["local_experts"]
        for name, k_in, n_out in expert_linears(r):
            traffic = grouped_traffic_bytes(n, E, n_out, k_in, "bf16", OUT_OF_PLACE_ACCUMULATE_BYTES)[2]
            ratios.append((n, r[f"streams_{name}_wgrad_fp32acc_s"] / (traffic / rate)))
    return band_stats(ratios)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--gpu", default="h100-sxm5-80gb", help="planner GPU type whose efficiencies price them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        doc = json.loads(args.file.read_text())
        rows = compare(doc, args.gpu)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"compare_grouped_gemm: {args.file}: not a grouped-GEMM measurement "
            f"(scripts/measure_grouped_gemm.py output): {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 2
    except PlannerError as e:
        print(f"compare_grouped_gemm: {e}", file=sys.stderr)
        return 2
    summary = summarize(rows)
    fp8 = fp8_speedups(doc, args.gpu)
    accumulate = accumulate_ratios(doc, args.gpu)
    if args.json:
        out = {"rows": rows, "summary": summary, "fp8": fp8, "fp32_accumulate": accumulate}
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    print(f"{doc.get('device', '?')}: {summary['grouped_rows']} grouped (E > 1) rows x passes")
    print("median predicted / measured (roofline vs TE: against the per-expert, 4-stream times)")
    print(f"{'pass':12s} {'tokens/expert':>14s} {'rows':>5s} {'one call':>9s} {'roofline':>9s} {'vs TE':>9s}")
    for b in summary["bands"]:
        lo, hi = b["tokens_per_expert"]
        band = f"{lo}-{hi}" if hi < 10**9 else f">{lo - 1}"
        te = b["roofline_te_median_ratio"]
        print(
            f"{b['pass']:12s} {band:>14s} {b['rows']:5d} {b['one_call_median_ratio']:8.2f}x "
            f"{b['roofline_median_ratio']:8.2f}x " + (f"{te:8.2f}x" if te is not None else f"{'-':>9s}")
        )
    for key, s in summary["overall"].items():
        print(
            f"{key:10s} predicted / measured: median {s['median_ratio']:.2f}x (range {s['min_ratio']:.2f}-"
            f"{s['max_ratio']:.2f}x), error median {100 * s['median_abs_error']:.1f}% p90 "
            f"{100 * s['p90_abs_error']:.1f}%"
        )
    if fp8["rows"]:
        print(f"FP8 speed-up of the per-expert 4-stream path (planner charges {fp8['charged']:.3f}):")
        for b in fp8["bands"]:
            _print_band(b)
    if accumulate:
        print(
            "FP32-accumulating weight gradients (out-of-place addmm, 16 B per weight) / traffic at the stream rate:"
        )
        for b in accumulate:
            _print_band(b)
    return 0


def _print_band(b: dict) -> None:
    lo, hi = b["tokens_per_expert"]
    band = f"{lo}-{hi}" if hi < 10**9 else f">{lo - 1}"
    print(
        f"  {band:>10s} tokens/expert: median {b['median']:.2f}x ({b['min']:.2f}-{b['max']:.2f}x, {b['rows']} rows)"
    )


if __name__ == "__main__":
    sys.exit(main())
