"""What the chunked scans of the linear-time token mixers share (:mod:`cost_models.ssm`: Mamba-2 and
Mamba-1; :mod:`cost_models.delta_rule`: gated DeltaNet and Kimi Delta Attention).

Kernel times: the chunked scans are products of small matrices per chunk and head, priced as
strided-batched GEMMs with :func:`cost_models.compute.batched_gemm_s` (the GPU's GEMM size curve
on the call's FLOPs, never faster than the bytes the kernel moves through HBM at the GPU's
memory bandwidth): the roofline of each kernel's FLOPs and bytes. Where a GPU file measures the
kernel (``linear_mixer_kernels``: the fraction of the dense 16-bit peak the published Triton
kernels reach on the FLOPs counted here, :attr:`planner.inputs.cluster_spec.GPUSpec.linear_mixer_efficiency`),
each pass takes that rate on its FLOPs instead, never faster than the roofline
(:func:`at_measured_rate`); the measurements and their transfer between GPUs are
:mod:`planner.calibration.mixer_kernels`'s. Without one, the roofline alone. Context parallelism
splits a scan's heads, not its sequence (:func:`cp_all_to_all`).
"""

from __future__ import annotations

from cost_models import communication as comm
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.job_spec import QUANTIZED_PRECISIONS, JobSpec

FP32_BYTES = 4
BACKWARD_PRODUCTS = 2.0
"""Backward products per forward product of a chunked scan: each product ``Y = A B`` has the two
gradient products ``dA = dY B^T`` and ``dB = A^T dY`` of its FLOPs (the convention of Megatron's
``num_floating_point_operations``: backward = 2 x forward)."""


def scan_bf16(job: JobSpec) -> str:
    """The scans run in 16 bits under FP8 and NVFP4 recipes (Transformer Engine quantizes the linear
    layers only)."""
    return "bf16" if job.precision in QUANTIZED_PRECISIONS else job.precision


def at_measured_rate(roofline_s: float, flop: float, gpu: GPUSpec, prec: str, kernel: str) -> float:
    """Seconds of one pass of the chunked ``kernel`` (a key of
    :data:`planner.inputs.cluster_spec.LINEAR_MIXER_KERNELS`) that does ``flop`` FLOPs: at the
    measured fraction of the GPU's dense ``prec`` peak (:meth:`GPUSpec.mixer_kernel_efficiency`),
    never faster than its roofline ``roofline_s``; the roofline where the GPU has no measurement."""
    efficiency = gpu.mixer_kernel_efficiency(kernel)
    if not efficiency:
        return roofline_s
    return max(roofline_s, flop / (gpu.peak(prec) * efficiency))


def cp_all_to_all(c: ParallelConfig, node: NodeGroup, before: float, after: float) -> tuple[float, float]:
    """(seconds per direction, bytes sent forward + backward) of head-parallel context parallelism
    around a scan: one all-to-all of ``before`` bytes (this rank's inputs of the scan) and one of
    ``after`` (its output) per direction; each rank keeps 1/cp of what it holds."""
    if c.cp == 1:
        return 0.0, 0.0
    link = comm.link_for(group(c, "cp"), node)
    seconds = comm.all_to_all_s(before, c.cp, link) + comm.all_to_all_s(after, c.cp, link)
    return seconds, 2 * (c.cp - 1) / c.cp * (before + after)
