#!/usr/bin/env python3
"""Compare linear-layer and batched GEMM timings (``scripts/measure_linear_passes.py``) with
planner's GEMM model: the size curve fitted with and without tile and wave quantization, the
per-pass bias each leaves, the misaligned head dimension's speed, the kernels the library ran, and
the FP8 speed-up by size (``--only fp8`` files) in its two candidate forms.

Exit codes: 0 printed, 2 a file missing or not written by the measuring script.

Usage: python scripts/compare_linear_passes.py [FILE] [--fp16 FILE] [--fp8 FILE] [--json]
(defaults: the shipped H200 files, hardware_profiles/measurements/h200-sxm-141gb-linear-passes*.json
and h200-sxm-141gb-fp8-gemms.json; the H100's: h100-sxm5-80gb-linear-passes.json --fp8
h100-sxm5-80gb-fp8-gemms.json). The GPU file that prices a file's GEMMs follows its device name.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration.kernel_measurements import (
    FP8_GEMMS,
    LINEAR_PASSES,
    LINEAR_PASSES_FP16,
    fp8_speedup_fits,
    linear_pass_fits,
    load,
    misaligned_gemm_speed,
    misaligned_ratios,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(LINEAR_PASSES))
    ap.add_argument("--fp16", default=str(LINEAR_PASSES_FP16))
    ap.add_argument("--fp8", default=str(FP8_GEMMS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    paths = (Path(args.file), Path(args.fp16))
    for p in (*paths, Path(args.fp8)):
        if not p.is_file():
            print(f"error: {p}: no such file", file=sys.stderr)
            return 2
    try:
        data = load(paths[0])
        fits = linear_pass_fits(data)
        ratios = {str(p): misaligned_ratios(load(p)) for p in paths}
        speed = misaligned_gemm_speed(paths)
        kernels = [
            {key: k[key] for key in ("width", "tp", "tokens", "linear", "pass", "n_out", "k_in")}
            | {"split_k": any("splitK" in name for name in k["kernels"])}
            for k in data.get("kernels", [])
        ]
        fp8_data = load(Path(args.fp8))
        fp8 = {c: fp8_speedup_fits(fp8_data, c, data) for c in ("fp8_s", "fp8_fast_accum_s")}
    except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        print(
            f"error: {args.file} / {args.fp16} / {args.fp8}: not a measure_linear_passes.py file "
            f"({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return 2
    if args.json:
        out = {"fits": fits, "misaligned": ratios, "misaligned_speed": speed, "kernels": kernels, "fp8": fp8}
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    print(f"{data['device']}, torch {data['torch']}, CUDA {data['cuda']}: {len(data['linear'])} linear GEMMs")
    print(
        f"{'quantization':>13} {'e_max':>6} {'F_half GFLOP':>12} {'median':>7} {'p90':>6} {'max':>7}  signed median fwd / dgrad / wgrad"
    )
    for f in fits:
        by = f["median_signed_by_pass"]
        print(
            f"{f['tile']:>13} {f['gemm_efficiency_max']:6.3f} {f['gemm_half_efficiency_flop'] / 1e9:12.2f} "
            f"{f['median']:7.1%} {f['p90']:6.1%} {f['max']:7.1%}  "
            f"{by['forward']:+.1%} / {by['input_grad']:+.1%} / {by['weight_grad']:+.1%}"
        )
    print(f"\nhead dimension 150 over 144/152, speed per FLOP (median {speed:.2f}):")
    for path, rows in ratios.items():
        cells = ", ".join(f"{r['op']} x{r['batch_heads']} {r['speed']:.2f}" for r in rows)
        print(f"  {Path(path).name}: {cells}")
    split = [k for k in kernels if k["split_k"]]
    print(f"\nkernels profiled: {len(kernels)}, split-K kernels among them: {len(split)}")
    for k in split:
        print(
            f"  {k['width']} tp {k['tp']} tokens {k['tokens']} {k['linear']} {k['pass']} ({k['n_out']} x {k['k_in']})"
        )
    print(f"\nFP8 over BF16, {fp8['fp8_s'][0]['rows']} shapes ({Path(args.fp8).name}):")
    for column, label in (("fp8_s", "split accumulator"), ("fp8_fast_accum_s", "fast accumulation")):
        for f in fp8[column]:
            print(
                f"  {label:17} {f['form']:10} s {f['speedup']:.3f}  median {f['median']:5.1%}  "
                f"p90 {f['p90']:5.1%}  expert shapes {f['expert_median']:5.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
