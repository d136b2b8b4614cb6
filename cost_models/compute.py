"""Kernel times from FLOPs and bytes, using the GPU's efficiency data (a roofline with a size curve).

* GEMMs: ``time = FLOP / (peak * eff(FLOP))`` with ``eff(F) = e_max * F / (F + F_half)``, the smooth
  form of Calculon's efficiency-by-size tables (Isaev et al., SC'23, "Calculon: a methodology and
  tool for high-level co-design of systems and large language models"). Tensor parallelism slices
  GEMMs, so ``F`` shrinks and efficiency drops. FP8 GEMMs run ``fp8_gemm_speedup`` times faster.
* Fused attention: ``time = FLOP / (peak_bf16 * attention_efficiency)`` (attention stays in 16-bit
  under Transformer Engine's FP8 recipes).
* Memory-bound kernels (norms, activations, residuals, optimizer): ``bytes / (HBM * hbm_efficiency)``.
"""

from __future__ import annotations

from planner.specs import GPUSpec

COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
"""Peak used as the base for each job precision (FP8 is BF16 peak times the calibrated FP8 speed-up)."""


def gemm_efficiency(flop: float, gpu: GPUSpec) -> float:
    """Fraction of dense peak reached by one GEMM of ``flop`` FLOP."""
    e = gpu.efficiency
    return e.gemm_efficiency_max * flop / (flop + e.gemm_half_efficiency_flop)


def gemm_s(m: float, n: float, k: float, gpu: GPUSpec, precision: str, count: float = 1.0) -> float:
    """Time of ``count`` GEMMs of shape (m x k) @ (k x n)."""
    flop = 2.0 * m * n * k
    if flop <= 0:
        return 0.0
    peak = gpu.peak(COMPUTE_DTYPE[precision])
    t = flop / (peak * gemm_efficiency(flop, gpu))
    if precision == "fp8":
        t /= gpu.efficiency.fp8_gemm_speedup
    return count * t


def attention_s(flop: float, gpu: GPUSpec, precision: str) -> float:
    """Time of fused attention doing ``flop`` FLOP."""
    if flop <= 0:
        return 0.0
    return flop / (gpu.peak(COMPUTE_DTYPE[precision]) * gpu.efficiency.attention_efficiency)


def memory_bound_s(num_bytes: float, gpu: GPUSpec) -> float:
    """Time of memory-bound kernels moving ``num_bytes`` to and from HBM."""
    return num_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm_efficiency)
