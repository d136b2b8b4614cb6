"""What the GEMM timings of ``scripts/measure_linear_passes.py`` say about planner's GEMM model.

The files (``hardware_profiles/measurements/{h200-sxm-141gb,h100-sxm5-80gb}-*``) hold, for a lent
H200 and H100, the three GEMMs of transformer linear layers (forward, input gradient, weight
gradient; hidden 3,072-12,288, tensor-parallel slices 1-16, 2,048-32,768 tokens), unfused
attention's batched GEMMs for head dimensions 64-192, and FP8 GEMMs beside BF16 ones of the same
shapes. ``scripts/compare_linear_passes.py`` prints what this module derives (docs/calibration.md,
"Linear-layer GEMMs in their three passes"):

* :func:`linear_pass_fits`: the size curve of :func:`cost_models.compute.gemm_efficiency` fitted
  with and without tile and wave quantization (:func:`cost_models.compute.gemm_quantization`);
  without fits the kernels best.
* :func:`misaligned_gemm_speed`: the speed of a head dimension off the 16-byte alignment relative
  to its aligned neighbours.
* :func:`fp8_speedup_fits`: a constant FP8 speed-up against one that shortens only the
  FLOP-proportional part of a call.
* :func:`grouped_stream_bandwidth`: the rate at which MoE grouped GEMMs with few tokens per expert
  stream their weights (``scripts/measure_grouped_gemm.py``'s ``h*-grouped-gemm.json``), the GPU
  files' ``gemm_stream_gb_per_s``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

from cost_models.compute import gemm_quantization
from cost_models.moe import grouped_traffic_bytes
from planner.calibration.kernel_curves import MEASUREMENTS_DIR, fit_gemm_curve
from planner.profiles.hardware import load_gpu

LINEAR_PASSES = MEASUREMENTS_DIR / "h200-sxm-141gb-linear-passes.json"
"""BF16 timings: all six widths, the batched GEMMs, and the kernel names of a few shapes."""
LINEAR_PASSES_FP16 = MEASUREMENTS_DIR / "h200-sxm-141gb-linear-passes-fp16.json"
"""FP16 timings of the two narrowest GPT widths and the batched GEMMs (the FP16 runs' shapes)."""
FP8_GEMMS = MEASUREMENTS_DIR / "h200-sxm-141gb-fp8-gemms.json"
"""FP8 and BF16 timings of the same shapes: linear layers and fine-grained MoE experts."""
H100_LINEAR_PASSES = MEASUREMENTS_DIR / "h100-sxm5-80gb-linear-passes.json"
"""The same script on a lent H100 SXM (700 W): the GPT-3,072 / 6,144 and SwiGLU-4,096 widths (900
linear GEMMs) and the batched GEMMs, confirming the H200's findings on the family's reference GPU."""
H100_FP8_GEMMS = MEASUREMENTS_DIR / "h100-sxm5-80gb-fp8-gemms.json"
"""The FP8 shapes of :data:`FP8_GEMMS` on the same H100."""
MISALIGNED_FILES = (LINEAR_PASSES, LINEAR_PASSES_FP16, H100_LINEAR_PASSES)
"""The files whose batched GEMMs :func:`misaligned_gemm_speed` pools (H200 BF16 and FP16, H100 BF16)."""
DEVICE_GPUS = (("H200", "h200-sxm-141gb"), ("H100 80GB HBM3", "h100-sxm5-80gb"))
"""GPU file of a measurement file's ``device`` (PyTorch's device name), by substring."""
TILE_VARIANTS = (None, (128, 128), (256, 128))
"""Quantization variants compared: none, Hopper's earlier 128 x 128 tiles, NVIDIA's A100 example."""
GROUPED_GEMMS = {
    "h100-sxm5-80gb": MEASUREMENTS_DIR / "h100-sxm5-80gb-grouped-gemm.json",
    "h200-sxm-141gb": MEASUREMENTS_DIR / "h200-sxm-141gb-grouped-gemm.json",
}
"""``torch._grouped_mm`` timings (three passes, CUDA graphs) by planner GPU file."""
STREAM_MAX_TOKENS = 64
"""Tokens per expert up to which a grouped GEMM's time is its weight traffic (the measured times are
flat from 16 to 64 tokens per expert and grow from 128)."""
MISALIGNED_HEAD_DIM = 150
ALIGNED_NEIGHBOURS = (144, 152)


@cache
def load(path: Path = LINEAR_PASSES) -> dict:
    return json.loads(Path(path).read_text())


def gpu_of(data: dict) -> str:
    """The GPU file that prices a measurement file's GEMMs (:data:`DEVICE_GPUS`)."""
    for fragment, name in DEVICE_GPUS:
        if fragment in data.get("device", ""):
            return name
    known = ", ".join(f for f, _ in DEVICE_GPUS)
    raise ValueError(f"no GPU file for device {data.get('device')!r} (known: {known})")


def model_shape(row: dict) -> tuple[int, int, int]:
    """(m, n, k) of a ``linear`` row as :func:`cost_models.compute.linear_s` prices that pass."""
    t, n, k = row["tokens"], row["n_out"], row["k_in"]
    return {"forward": (t, n, k), "input_grad": (t, k, n), "weight_grad": (k, n, t)}[row["pass"]]


def linear_pass_fits(data: dict | None = None, gpu_name: str | None = None) -> list[dict]:
    """Per quantization variant (:data:`TILE_VARIANTS`): the size curve (e_max, F_half in FLOP)
    fitted to the ``linear`` rows with that quantization (least squares in log time,
    :func:`planner.calibration.kernel_curves.fit_gemm_curve`), and the |relative error| it leaves: median, p90 and
    max over all rows, and the median signed error per pass."""
    data = load() if data is None else data
    gpu = load_gpu(gpu_name or gpu_of(data))
    peak = gpu.peak("bf16")
    rows = data["linear"]
    flop = np.array([r["flop"] for r in rows])
    time_s = np.array([r["time_s"] for r in rows])
    out = []
    for tile in TILE_VARIANTS:
        g = replace(gpu, gemm_tile=tile)
        q = np.array([gemm_quantization(*model_shape(r), g, "bf16") for r in rows])
        # t = (F + F_half) / (peak e_max q): the curve fitted to the time the tiles' useful work takes
        e_max, f_half = fit_gemm_curve(flop, time_s * q, peak)
        ratio = (flop + f_half) / (peak * e_max * q) / time_s - 1
        err = np.abs(ratio)
        passes = {
            p: float(np.median(ratio[[r["pass"] == p for r in rows]]))
            for p in ("forward", "input_grad", "weight_grad")
        }
        out.append(
            {
                "tile": "none" if tile is None else f"{tile[0]}x{tile[1]}",
                "gemm_efficiency_max": e_max,
                "gemm_half_efficiency_flop": f_half,
                "median": float(np.median(err)),
                "p90": float(np.quantile(err, 0.9)),
                "max": float(err.max()),
                "median_signed_by_pass": passes,
            }
        )
    return out


def misaligned_ratios(data: dict) -> list[dict]:
    """Per batched-GEMM case of a file: the time per FLOP of head dimension
    :data:`MISALIGNED_HEAD_DIM` over the mean of its :data:`ALIGNED_NEIGHBOURS`' (``speed`` = the
    inverse)."""
    times = {(r["op"], r["batch_heads"], r["head_dim"]): r["time_s"] / r["flop"] for r in data["bmm"]}
    out = []
    for op, heads, d in sorted(times):
        if d != MISALIGNED_HEAD_DIM:
            continue
        aligned = np.mean([times[(op, heads, a)] for a in ALIGNED_NEIGHBOURS])
        out.append({"op": op, "batch_heads": heads, "speed": float(aligned / times[(op, heads, d)])})
    return out


def misaligned_gemm_speed(paths: tuple[Path, ...] = MISALIGNED_FILES) -> float:
    """Median over the files' cases of :func:`misaligned_ratios`' speed."""
    return float(np.median([r["speed"] for p in paths for r in misaligned_ratios(load(p))]))


FP8_SPEEDUPS = np.round(np.arange(1.5, 2.4001, 0.005), 3)
"""Speed-ups tried by :func:`fp8_speedup_fits` (a grid, so the result is exact and stable)."""


def fp8_speedup_fits(
    data: dict | None = None, column: str = "fp8_s", linear: dict | None = None
) -> list[dict]:
    """Two forms of the FP8 time fitted to a file's FP8 rows against their own BF16 times
    (``column``: ``fp8_s``, the split accumulator Transformer Engine uses for gradients, or
    ``fp8_fast_accum_s``, its forward): ``constant`` ``t_fp8 = t_bf16 / s``; ``fixed_part``
    ``t_fp8 = t_bf16 (F / s + F_half) / (F + F_half)`` with ``F_half`` the BF16 curve's of
    :func:`linear_pass_fits` (no quantization) on ``linear``, the same GPU's linear-pass file
    (default the H200's). Per form: the best ``s`` (least squares in log
    time) and the |relative error| it leaves, median and p90, over all rows and over the expert
    shapes."""
    data = load(FP8_GEMMS) if data is None else data
    f_half = linear_pass_fits(linear)[0]["gemm_half_efficiency_flop"]
    rows = [r for r in data["fp8"] if r.get(column)]
    flop = np.array([r["flop"] for r in rows])
    t16 = np.array([r["bf16_s"] for r in rows])
    t8 = np.array([r[column] for r in rows])
    expert = np.array([r["width"] == "expert" for r in rows])
    forms = {
        "constant": lambda s: t16 / s,
        "fixed_part": lambda s: t16 * (flop / s + f_half) / (flop + f_half),
    }
    out = []
    for name, model in forms.items():
        s = min(FP8_SPEEDUPS, key=lambda v: float(np.sum(np.log(model(v) / t8) ** 2)))
        err = np.abs(model(s) / t8 - 1)
        out.append(
            {
                "form": name,
                "speedup": float(s),
                "median": float(np.median(err)),
                "p90": float(np.quantile(err, 0.9)),
                "expert_median": float(np.median(err[expert])),
                "rows": len(rows),
            }
        )
    return out


def expert_linears(row: dict) -> tuple[tuple[str, int, int], tuple[str, int, int]]:
    """``(name, k_in, n_out)`` of a grouped-GEMM row's two SwiGLU expert linears: fc1 (hidden ->
    2 x expert width, gate and up) and fc2 (expert width -> hidden)."""
    h, f = row["hidden"], row["expert_ffn"]
    return ("fc1", h, 2 * f), ("fc2", f, h)


def grouped_stream_bandwidth(data: dict) -> float:
    """Median bytes per second over a grouped-GEMM file's rows of at most :data:`STREAM_MAX_TOKENS`
    tokens per expert and more than one local expert, for fc1 and fc2 in each timed pass: the
    traffic of :func:`cost_models.moe.grouped_traffic_bytes` (the weight gradient written in BF16,
    as timed) over the measured time."""
    rates = []
    for r in data["rows"]:
        n, E = r["tokens_per_expert"], r["local_experts"]
        if n > STREAM_MAX_TOKENS or E <= 1:
            continue
        for name, k_in, n_out in expert_linears(r):
            traffic = grouped_traffic_bytes(n, E, n_out, k_in, "bf16", 2.0)
            for b, suffix in zip(traffic, ("", "_dgrad", "_wgrad"), strict=True):
                if f"{name}{suffix}_s" in r:
                    rates.append(b / r[f"{name}{suffix}_s"])
    return float(np.median(rates))
