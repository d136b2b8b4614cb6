"""Fitting measured kernels: the GEMM size curve, the attention efficiency curve, and the cuDNN
attention ratios of Blackwell Ultra, from the files under ``hardware_profiles/measurements``.

:mod:`planner.calibration.fitting` takes a family's kernel priors from these
(:func:`planner.calibration.fitting.kernel_prior`); :mod:`planner.calibration.kernel_measurements`
and ``scripts/compare_kernels.py`` check the shipped curves against them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

MEASUREMENTS_DIR = Path(__file__).resolve().parents[2] / "hardware_profiles" / "measurements"

MODEL_ATTENTION_PASSES = 3.5
"""Attention time in forward + backward over forward time as planner charges it (cost_models.layers:
backward 2.5 x forward)."""


def fit_gemm_curve(flop: np.ndarray, time_s: np.ndarray, peak: float) -> tuple[float, float]:
    """(e_max, F_half) minimising the squared log error of ``(F + F_half) / (peak e_max)``."""
    best = (np.inf, 0.0, 0.0)
    for f_half in np.geomspace(1e8, 1e12, 400):
        # for a given F_half, the best e_max has a closed form in log space
        log_e = np.mean(np.log((flop + f_half) / peak) - np.log(time_s))
        err = np.sum((np.log((flop + f_half) / (peak * np.exp(log_e))) - np.log(time_s)) ** 2)
        if err < best[0]:
            best = (err, float(np.exp(log_e)), float(f_half))
    return best[1], best[2]


GEMM_LATENCY_KEEP = 2.0
"""A GEMM timed one call between two CUDA events is kept for the curve when its time is at least
this many times the file's dispatch latency (:func:`gemm_gpu_times`)."""


def gemm_gpu_times(data: dict) -> list[tuple[dict, float]]:
    """A kernel file's GEMMs (scripts/measure_kernels.py) with their GPU seconds.

    Files written before 2026-11-25 timed one call between two CUDA events after a synchronise, so
    each time also holds the host's dispatch of that call, which in training is hidden (the host
    queues ahead): their ``launch`` entry, a tiny add timed the same way, measures it (23 us on the
    H100, 25 us on the H200, against a few us of GPU time). From those files this subtracts it and
    keeps the GEMMs timed at least :data:`GEMM_LATENCY_KEEP` x that latency (90 of 96 on the
    H100; below, the latency's jitter exceeds the GEMM). Files timed back to back
    (``back_to_back``) are used as they are."""
    rows = [(g, float(g["time_s"])) for g in data["gemm"]]
    if data.get("back_to_back"):
        return rows
    latency = float(data["launch"]["time_s"])
    return [(g, t - latency) for g, t in rows if t >= GEMM_LATENCY_KEEP * latency]


BLACKWELL_ULTRA_ATTENTION = MEASUREMENTS_DIR / "gb200-gb300-cudnn-attention.json"
"""NVIDIA's cuDNN attention timings on a GB200 and a GB300 (cudnn-frontend's SDPA training
benchmark; the file names its commit and CSVs): the source of ``attention_kernel_speed`` in
hardware_profiles/gpus/gb300.yaml and b300.yaml (:func:`blackwell_ultra_attention_speed`)."""


def blackwell_ultra_attention_speed(path: Path = BLACKWELL_ULTRA_ATTENTION) -> dict[str, float]:
    """Median GB200 / GB300 time ratio of the measured BF16 causal cuDNN attention kernels, by pass:
    ``forward`` and ``backward`` over the full-attention cases (the benchmark's Llama 3.1,
    DeepSeek-V3, kimiK26 and Qwen3.5 shapes, 2,048 to 32,768 tokens), ``local_forward`` and
    ``local_backward`` over the sliding-window ones (gpt-oss, 128-token window). Both GPUs have a
    2.5 PFLOP/s dense BF16 peak, so the ratio is the kernels' own gain (Blackwell Ultra's doubled
    SFU exponential rate)."""
    rows = json.loads(Path(path).read_text())["rows"]
    medians = median_by_pass(rows, lambda r: r["ms"]["gb200"] / r["ms"]["gb300"])
    return {
        "forward": medians[("fwd", False)],
        "backward": medians[("bwd", False)],
        "local_forward": medians[("fwd", True)],
        "local_backward": medians[("bwd", True)],
    }


def median_by_pass(rows: list[dict], value: Callable[[dict], float]) -> dict[tuple[str, bool], float]:
    """Median of ``value(row)`` over attention-kernel rows grouped by pass: keys (``direction``
    ``fwd`` / ``bwd``, whether the row has a sliding ``window``), forward before backward and full
    before windowed within each; groups without rows are left out."""
    groups: dict[tuple[str, bool], list[float]] = {}
    for direction in ("fwd", "bwd"):
        for local in (False, True):
            values = [
                value(r) for r in rows if r["direction"] == direction and (r["window"] is not None) == local
            ]
            if values:
                groups[(direction, local)] = float(np.median(values))
    return groups


def attention_points(data: dict, peak: float) -> tuple[np.ndarray, np.ndarray]:
    """(keys per query, efficiency as planner charges attention) of a kernel file's causal cases:
    MODEL_ATTENTION_PASSES x forward FLOPs / (peak x measured forward + backward time)."""
    causal = [a for a in data["attention"] if a["causal"]]
    keys = np.array([float(a["seq"]) for a in causal])
    passes = MODEL_ATTENTION_PASSES
    eff = np.array([passes * a["forward_flop_executed"] / (peak * a["forward_backward_s"]) for a in causal])
    return keys, eff


def fit_attention_curve(keys: np.ndarray, eff: np.ndarray) -> tuple[float, float]:
    """(ceiling, half keys) minimising the squared log error of ``ceiling * keys / (keys + half)``
    (the curve of cost_models.compute.attention_efficiency)."""
    best = (np.inf, 0.0, 0.0)
    for half in np.geomspace(50, 20000, 2000):
        log_c = np.mean(np.log(eff * (keys + half) / keys))
        err = np.sum((log_c + np.log(keys / (keys + half)) - np.log(eff)) ** 2)
        if err < best[0]:
            best = (err, float(np.exp(log_c)), float(half))
    return best[1], best[2]
