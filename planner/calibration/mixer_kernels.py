"""Measured efficiencies of the linear-time token mixers' chunked Triton kernels (the GPU files'
``linear_mixer_kernels``, :attr:`planner.inputs.cluster_spec.GPUSpec.linear_mixer_efficiency`).

The published forward times (hardware_profiles/measurements/linear-mixer-kernels.json, each entry
naming its source: pull request and comment, or repository, file and commit) become a fraction of
the measured GPU's dense BF16 peak on the FLOPs :mod:`cost_models.ssm` and :mod:`cost_models.delta_rule` count for the same shape
(:func:`row_efficiency`); a kernel's figure on a GPU is the median over the rows of at least
:data:`MIN_TOKENS` tokens per call (:func:`measured_efficiencies`).

Transfer. Each figure is measured on one GPU; it holds for the GPUs of the same architecture
(Hopper: same GH100 SMs and tensor cores; Blackwell: same SM100 ones, the efficiency families of
``planner.calibration.fitting.LINEAGE`` below them), so :data:`ARCHITECTURE` names each GPU's.
Across architectures the fraction of peak does not carry over: flash-linear-attention's
``chunk_kda``, measured on both (H200 and GB200), reaches about half the fraction of the GB200's
2.5 PFLOP/s that it reaches of the H200's 989 TFLOP/s. So a kernel measured on one architecture
only takes the other's figure through that measured ratio (:func:`architecture_ratio`), the one
Hopper/Blackwell pair of these Triton chunked kernels found: the SSD scan on Blackwell is its
H100 figure times the ratio, the gated delta rule on Hopper its B200 figure over it. Every forward
figure is also the backward's: no published backward time of these kernels alone was found (docs/
models.md, "Hybrid models", lists what was searched).
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path

from cost_models.delta_rule import gated_delta_s, kda_s
from cost_models.ssm import ssd_scan_s
from planner.inputs.cluster_spec import GPUSpec
from planner.profiles.hardware import load_gpu

MEASUREMENTS = (
    Path(__file__).resolve().parents[2] / "hardware_profiles" / "measurements" / "linear-mixer-kernels.json"
)
"""The published kernel times, with their sources."""

MIN_TOKENS = 8192
"""Fewest tokens per call of a row the figures use: below it a call is a few waves of thread blocks
and its fixed launch cost shows (the GB200 ``chunk_kda`` rows take 0.68 ms from 512 to 4,096
tokens); a training micro-batch of these models is 4,096-16,384 tokens per sequence."""

ARCHITECTURE = {
    "h100-sxm5-80gb": "hopper",
    "h100-sxm5-96gb": "hopper",
    "h100-pcie-80gb": "hopper",
    "h200-sxm-141gb": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
    "b300": "blackwell",
    "gb300": "blackwell",
}
"""GPU files that carry ``linear_mixer_kernels``, by the architecture whose figures they take (the
Triton kernels are NVIDIA-tuned; no AMD, Ampere or older measurement was found)."""


def row_efficiency(entry: dict, row: dict, gpu: GPUSpec) -> float:
    """Fraction of ``gpu``'s dense BF16 peak one measured forward call reaches on the FLOPs
    :mod:`cost_models.ssm` and :mod:`cost_models.delta_rule` count for its shape (``ms`` per call, or
    ``tokens_per_s``)."""
    tokens = row["tokens"]
    shape = entry["shape"]
    if entry["kernel"] == "ssd_scan":
        flop = ssd_scan_s(
            tokens,
            shape["heads"],
            shape["groups"],
            shape["head_dim"],
            shape["state"],
            shape["chunk"],
            gpu,
            "bf16",
        )[2]
    elif entry["kernel"] == "gated_delta_rule":
        flop = gated_delta_s(tokens, row["heads"], shape["key_dim"], shape["value_dim"], gpu, "bf16")[2]
    else:
        flop = kda_s(tokens, shape["heads"], shape["head_dim"], gpu, "bf16")[2]
    seconds = row["ms"] * 1e-3 if "ms" in row else tokens / row["tokens_per_s"]
    return flop / (seconds * gpu.peak("bf16"))


@cache
def measured_efficiencies(path: Path = MEASUREMENTS) -> dict[tuple[str, str], float]:
    """(kernel, GPU) -> median :func:`row_efficiency` over the entry's rows of at least
    :data:`MIN_TOKENS` tokens."""
    result = {}
    for entry in json.loads(Path(path).read_text())["entries"]:
        gpu = load_gpu(entry["gpu"])
        values = [row_efficiency(entry, r, gpu) for r in entry["rows"] if r["tokens"] >= MIN_TOKENS]
        result[(entry["kernel"], entry["gpu"])] = statistics.median(values)
    return result


def architecture_ratio(path: Path = MEASUREMENTS) -> float:
    """Blackwell / Hopper ratio of the fraction of peak of the one kernel measured on both:
    ``chunk_kda`` on a GB200 over the same on an H200."""
    m = measured_efficiencies(path)
    return m[("kda", "gb200")] / m[("kda", "h200-sxm-141gb")]


def architecture_efficiencies(path: Path = MEASUREMENTS) -> dict[str, dict[str, float]]:
    """Per architecture, each kernel's fraction of the dense 16-bit peak: measured where the
    architecture has a measurement, otherwise the other architecture's through
    :func:`architecture_ratio`."""
    m = measured_efficiencies(path)
    ratio = architecture_ratio(path)
    return {
        "hopper": {
            "ssd_scan": m[("ssd_scan", "h100-sxm5-80gb")],
            "gated_delta_rule": m[("gated_delta_rule", "b200")] / ratio,
            "kda": m[("kda", "h200-sxm-141gb")],
        },
        "blackwell": {
            "ssd_scan": m[("ssd_scan", "h100-sxm5-80gb")] * ratio,
            "gated_delta_rule": m[("gated_delta_rule", "b200")],
            "kda": m[("kda", "gb200")],
        },
    }


def gpu_efficiencies(gpu: str, path: Path = MEASUREMENTS) -> dict[str, float]:
    """The ``linear_mixer_kernels`` values of one GPU file (empty for a GPU not in
    :data:`ARCHITECTURE`), rounded as the files write them."""
    arch = ARCHITECTURE.get(gpu)
    if arch is None:
        return {}
    return {k: round(v, 4) for k, v in architecture_efficiencies(path)[arch].items()}
