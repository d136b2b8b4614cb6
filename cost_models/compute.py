"""Kernel times from FLOPs and bytes, using the GPU's efficiency data (a roofline with a size curve).

* GEMMs: ``time = W / (peak * eff(W))`` over the tile work issued, ``W = FLOP / q(M, N, K)``, with
  ``eff(F) = e_max * F / (F + F_half)``,
  the smooth form of Calculon's efficiency-by-size tables (Isaev et al., SC'23, "Calculon: a
  methodology and tool for high-level co-design of systems and large language models"). Tensor
  parallelism slices GEMMs, so ``F`` shrinks and efficiency drops. FP8 GEMMs run
  ``fp8_gemm_speedup`` times faster, NVFP4 and MXFP4 GEMMs :func:`fp4_speedup` times faster again.
* GEMM shape: ``q`` is the useful fraction of the tile work the GPU issues (:func:`gemm_quantization`),
  NVIDIA's tile and wave quantization (Deep Learning Performance Documentation, "Matrix
  Multiplication Background User's Guide", Sec. "Dimension Quantization Effects"): the output is
  computed in whole ``tile_m x tile_n`` thread-block tiles and the tiles run in waves of one tile per
  SM; the reduction dimension is consumed in whole 128-byte steps ("Tensor Core Requirements": most
  efficient with multiples of 64 FP16 elements on A100). A linear layer's three GEMMs (forward,
  input gradient, weight gradient) have different output shapes, so each is priced on its own
  (:func:`linear_s`).
* Fused attention: ``time = FLOP / (peak_bf16 * attention_efficiency * keys / (keys + K_half))``
  (keys per query per kernel call; :data:`ATTENTION_HALF_KEYS`; attention stays in 16-bit
  under Transformer Engine's FP8 recipes).
* Memory-bound kernels (norms, activations, residuals, optimizer): ``bytes / (HBM * hbm_efficiency)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.inputs.cluster_spec import GPUSpec
from planner.inputs.job_spec import COMPUTE_DTYPE, FP4_PRECISIONS, QUANTIZED_PRECISIONS


def gemm_efficiency(flop: float, gpu: GPUSpec) -> float:
    """Fraction of dense peak reached by one GEMM of ``flop`` FLOP."""
    e = gpu.efficiency
    return e.gemm_efficiency_max * flop / (flop + e.gemm_half_efficiency_flop)


def issued_gemm_s(issued_flop: float, peak: float, gpu: GPUSpec) -> float:
    """Time of one GEMM kernel that issues ``issued_flop`` FLOP of tile work (its useful FLOPs over
    :func:`gemm_quantization`), on the size curve: ``issued / (peak * eff(issued))``, i.e.
    ``(issued + F_half) / (peak * e_max)``. The curve's fixed cost ``F_half`` is paid once per
    kernel, not scaled by the quantization, so time never falls as a dimension grows: filling a
    partial last wave costs nothing more (NVIDIA's "Matrix Multiplication Background User's Guide",
    "Wave Quantization Example": time stays flat while the tiles fit the same number of waves, then
    steps). With no quantization (``q = 1``) this is ``flop / (peak * eff(flop))``."""
    return issued_flop / (peak * gemm_efficiency(issued_flop, gpu))


GEMM_K_STEP_BYTES = 128
"""Bytes of the reduction dimension one main-loop step of a tensor-core GEMM consumes: NVIDIA's
"Matrix Multiplication Background User's Guide", Table "Tensor Core Requirements" (cuBLAS >= 11):
FP16 dimensions are "most efficient with multiples of 8; on A100, multiples of 64" elements, i.e.
128 bytes (32 TF32 or 128 FP8/INT8 elements)."""

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "nvfp4": 0.5, "mxfp4": 0.5}
"""Bytes per GEMM input element by job precision (NVFP4: two E2M1 values per byte; its E4M3 block
scales are a sixteenth of a byte more, :data:`NVFP4_COPY_BYTES`)."""


def _tiles(extent: float, tile: int) -> int:
    """Whole tiles covering ``extent`` (at least one for a non-empty extent)."""
    return max(1, math.ceil(extent / tile - 1e-9))


def gemm_quantization(
    m: float, n: float, k: float, gpu: GPUSpec, precision: str, count: float = 1.0
) -> float:
    """Useful fraction of the tile work ``count`` GEMMs (m x k) @ (k x n) issue, in (0, 1].

    Tile quantization: the m x n output is covered by whole ``tile_m x tile_n`` tiles (either
    orientation; cuBLAS has both). Wave quantization: the tiles run in ``ceil(tiles / SMs)`` waves of
    one tile per SM, a partial last wave taking a whole wave's time. K is consumed in whole
    :data:`GEMM_K_STEP_BYTES` steps. ``count`` > 1 is one grouped GEMM (MoE experts): all groups'
    tiles share the waves. Worked example (NVIDIA's guide, A100: 108 SMs, 256 x 128 tiles):
    m = 2048, n = 1792, k = 14336 needs 8 x 14 = 112 tiles, two waves of 108 for 1.04 waves' work,
    so q = 112 / 216 = 0.52. 1.0 when the GPU's SM count is unknown (``sm_count`` 0) or its file
    says its GEMM library shows no quantization (``gemm_tile: null``).
    """
    sms = gpu.sm_count
    if sms <= 0 or gpu.gemm_tile is None or m <= 0 or n <= 0 or k <= 0:
        return 1.0
    k_step = int(GEMM_K_STEP_BYTES / ELEMENT_BYTES.get(precision, 2))
    k_work = _tiles(k, k_step) * k_step
    a, b = gpu.gemm_tile
    best = 0.0
    for tm, tn in ((a, b), (b, a)):
        tiles = _tiles(m, tm) * _tiles(n, tn) * count
        waves = math.ceil(tiles / sms - 1e-9)
        best = max(best, count * m * n * k / (waves * sms * tm * tn * k_work))
    return best


def gemm_s(m: float, n: float, k: float, gpu: GPUSpec, precision: str, count: float = 1.0) -> float:
    """Time of ``count`` GEMMs of shape (m x k) @ (k x n) (``count`` > 1: one grouped GEMM): the
    size curve times the shape's quantization (:func:`gemm_quantization`)."""
    flop = 2.0 * m * n * k
    if flop <= 0:
        return 0.0
    peak = gpu.peak(COMPUTE_DTYPE[precision])
    t = issued_gemm_s(flop / gemm_quantization(m, n, k, gpu, precision, count), peak, gpu)
    if precision in QUANTIZED_PRECISIONS:
        t /= gpu.efficiency.fp8_gemm_speedup
    if precision in FP4_PRECISIONS:
        t /= fp4_speedup(gpu)
    return count * t


def fp4_speedup(gpu: GPUSpec) -> float:
    """NVFP4 and MXFP4 GEMMs' speed-up over the GPU's FP8 GEMMs: its dense FP4:FP8 tensor-core peak
    ratio (2 on B200, GB200 and MI355X, 3 on GB300; the GPU files' ``peak_tflops``), i.e. FP4
    kernels reach the same fraction of their peak as FP8 kernels of theirs, with the quantization
    priced apart (:data:`NVFP4_CAST_BYTES`, :data:`MXFP4_CAST_BYTES`). Both formats run on the
    same FP4 tensor cores (Blackwell's block-scaled MMA takes E2M1 with E4M3 scales per 16 or E8M0
    scales per 32; CDNA 4's matrix cores run MXFP4 at the FP4 peak, AMD Instinct MI355X data sheet).
    MXFP4 has no published run planner has validated against (the unseen MI355X rows,
    docs/calibration.md, "Unseen production runs").

    Evidence, both ways. The published NVFP4 runs (Megatron-Bridge 26.04.01 and 26.06 tables, six
    Llama 3 70B / 3.1 405B rows on GB200 and GB300) are predicted within 7% with this ratio
    (docs/calibration.md, "NVFP4"); the choice between this form and the kernel measurement below was
    made on them, so they are not held out for it. Transformer Engine's GEMM profiling tutorial
    (NVIDIA/TransformerEngine ``docs/examples/gemm_profiling/gemm_profiling.rst``, "Autocast vs
    Pre-quantized", B300 SXM6, the 12 GEMMs of a layer of hidden 4,096 and MLP 16,384 over 15,872
    tokens, pre-quantized) measured 1.81x over FP8 current scaling and 1.90x over MXFP8, short of
    the B300's 3:1; with that ratio the GB300 rows are 14-16% too slow while the GB200 rows move
    by under 3%."""
    return gpu.peak("fp4") / gpu.peak("fp8")


FP8_CAST_BYTES = 4.0
"""HBM bytes per element of quantizing one 16-bit GEMM operand to FP8 with a per-tensor scale
known in advance (``delayed`` scaling): read the 16-bit tensor (2) and write its FP8 copy twice
(1 + 1), row-wise for the GEMM that reduces over the hidden dimension and transposed (column-wise)
for the weight gradient, which reduces over tokens: Hopper's FP8 tensor cores take only the "TN"
layout, so TE quantizes with a fused cast-transpose (``transformer_engine/common/transpose/
cast_transpose.cu``; TE user guide, "Using FP8 with Transformer Engine": FP8 GEMM inputs need both
layouts). A linear's input is quantized in forward and its output gradient in backward; weights
are quantized once per step (TE caches them across micro-batches, ``is_first_microbatch``), not
charged."""

NORM_FUSED_CAST_BYTES = 2.0
"""The same for an input the preceding norm already wrote in FP8 (Transformer Engine's
``LayerNormLinear`` / ``LayerNormMLP``: the norm kernel quantizes its row-wise output): only the
transposed copy remains, read 1 and write 1. TE fuses the quantization into the norm for delayed
scaling only (``transformer_engine/pytorch/csrc/extensions/normalization.cpp``, ``layernorm_fwd`` /
``rmsnorm_fwd``: "Always used fused kernel for FP8 delayed scaling"; every other quantizer runs the
norm to a 16-bit output and quantizes it in a separate step)."""

AMAX_READ_BYTES = 2.0
"""Current (``tensorwise``) scaling's extra read of the 16-bit tensor to find its amax before the
cast: "FP8 Current Scaling requires two tensor reads per quantization: one to compute amax, one to
cast" (TE user guide, "FP8 Delayed Scaling"; ``nvte_compute_amax`` before ``nvte_quantize`` in
normalization.cpp)."""

BLOCK_SCALE_BYTES = {"blockwise": 4.0 / 128, "mxfp8": 1.0 / 32}
"""Scale bytes per element of each quantized copy for the block-scaled recipes: ``blockwise`` one
FP32 scale per 128 elements (TE user guide, "FP8 Blockwise Scaling": 1 x 128 blocks for activations
and gradients), ``mxfp8`` one E8M0 byte per 32 (TE user guide, "MXFP8": "one scaling factor per 32
consecutive values"). Each block's scale comes from its own amax, computed in the quantizing kernel:
no extra read."""


def fp8_cast_bytes(recipe: str, behind_norm: bool = False) -> float:
    """HBM bytes per element of quantizing one 16-bit GEMM operand (row-wise and column-wise copies)
    under FP8 ``recipe`` (:data:`planner.inputs.job_spec.FP8_RECIPES`); ``behind_norm``: the operand is the
    output of a Transformer Engine fused norm (``LayerNormLinear`` / ``LayerNormMLP``).

    * ``delayed``: :data:`FP8_CAST_BYTES` (4), :data:`NORM_FUSED_CAST_BYTES` (2) behind a norm;
    * ``tensorwise``: the cast plus :data:`AMAX_READ_BYTES` (6), behind a norm too (not fused);
    * ``blockwise`` / ``mxfp8``: the cast plus two copies' scales (:data:`BLOCK_SCALE_BYTES`), 4.0625,
      behind a norm too (TE runs the norm unfused for them unless its cuDNN MXFP8 norm is enabled,
      ``NVTE_NORM_FWD_USE_CUDNN``, off by default)."""
    if recipe == "delayed":
        return NORM_FUSED_CAST_BYTES if behind_norm else FP8_CAST_BYTES
    if recipe == "tensorwise":
        return FP8_CAST_BYTES + AMAX_READ_BYTES
    return FP8_CAST_BYTES + 2 * BLOCK_SCALE_BYTES[recipe]


NVFP4_COPY_BYTES = 0.5 + 1.0 / 16
"""HBM bytes per element of one NVFP4 copy: an E2M1 value (half a byte) and its share of the E4M3
scale of each 16-element block (TE user guide, "NVFP4": "16-element blocks", "E4M3 scaling factor"
per block and one FP32 scale per tensor; NVIDIA, arXiv:2509.25149, Sec. 2)."""

NVFP4_CAST_BYTES = AMAX_READ_BYTES + 2.0 + 2 * NVFP4_COPY_BYTES
"""HBM bytes per element of quantizing one 16-bit GEMM operand to NVFP4: a read for the per-tensor
amax the FP32 global scale needs (TE's GEMM tutorial names "the extra memory pass for per-tensor
amax computation" among NVFP4's costs), the read of the cast, and two copies written: row-wise for
the forward or input-gradient GEMM and column-wise, after a 16-point random Hadamard transform, for
the weight gradient (TE's ``NVFP4BlockScaling``: RHT on the weight-gradient GEMM's inputs, fused
into the cast kernel; the Hadamard's 16 multiply-adds per element stay far below the GPU's
memory-bound rate). 5.125 bytes; the norm before a linear is not fused with it, as for MXFP8."""


MXFP4_COPY_BYTES = 0.5 + 1.0 / 32
"""HBM bytes per element of one MXFP4 copy: an E2M1 value (half a byte) and its share of the one-byte
E8M0 scale of each 32-element block (OCP Microscaling Formats (MX) Specification v1.0, Table 1:
MXFP4 block size 32, scale E8M0)."""

MXFP4_CAST_BYTES = 2.0 + 2 * MXFP4_COPY_BYTES
"""HBM bytes per element of quantizing one 16-bit GEMM operand to MXFP4: the read of the cast and two
copies written, row-wise and column-wise (the scaling blocks run along the GEMM's reduction
dimension, which the weight-gradient GEMM transposes, as for MXFP8); no per-tensor amax pass, an MX
scale being derived from its own block's largest magnitude (OCP MX v1.0, the conversion to an MX
format). The Hadamard transform AMD's recipe applies
(``NVTE_MXFP4_USE_HADAMARD``) is fused into the cast as NVFP4's is. 3.0625 bytes."""


def quantize_bytes(precision: str, recipe: str, behind_norm: bool = False) -> float:
    """HBM bytes per element of quantizing one 16-bit GEMM operand under a quantized ``precision``
    (:data:`planner.inputs.job_spec.QUANTIZED_PRECISIONS`): :func:`fp8_cast_bytes` of the FP8
    ``recipe``, :data:`NVFP4_CAST_BYTES` or :data:`MXFP4_CAST_BYTES`."""
    if precision == "nvfp4":
        return NVFP4_CAST_BYTES
    if precision == "mxfp4":
        return MXFP4_CAST_BYTES
    return fp8_cast_bytes(recipe, behind_norm)


def fp8_cast_s(elements: float, gpu: GPUSpec, bytes_per_element: float) -> float:
    """Time of quantizing ``elements`` 16-bit values to FP8 (``bytes_per_element``:
    :func:`fp8_cast_bytes`)."""
    return memory_bound_s(elements * bytes_per_element, gpu)


@dataclass(frozen=True, slots=True)
class LinearTimes:
    """GEMM times of linear layers for one micro-batch: forward, input gradient (B), weight
    gradient (W), seconds. Under FP8, forward and input gradient include the quantization of the
    input and of the output gradient (:func:`fp8_cast_bytes`)."""

    forward_s: float = 0.0
    input_grad_s: float = 0.0
    weight_grad_s: float = 0.0

    def __add__(self, other: LinearTimes) -> LinearTimes:
        return LinearTimes(
            self.forward_s + other.forward_s,
            self.input_grad_s + other.input_grad_s,
            self.weight_grad_s + other.weight_grad_s,
        )


def linear_s(
    tokens: float,
    n_out: float,
    k_in: float,
    gpu: GPUSpec,
    precision: str,
    count: float = 1.0,
    recipe: str = "tensorwise",
    behind_norm: bool = False,
) -> LinearTimes:
    """The three GEMMs of ``count`` linear layers ``k_in -> n_out`` over ``tokens`` rows:
    forward ``Y = X W`` (tokens x n_out, reducing k_in), input gradient ``dX = dY W^T``
    (tokens x k_in, reducing n_out), weight gradient ``dW = X^T dY`` (k_in x n_out, reducing tokens).
    Same FLOPs each; different output shapes, so different tile and wave quantization. FP8 adds
    the quantization of the input (``behind_norm``: written by a fused norm) to forward and of the
    output gradient to the input gradient, each at :func:`fp8_cast_bytes` of the FP8 ``recipe``."""
    times = LinearTimes(
        gemm_s(tokens, n_out, k_in, gpu, precision, count),
        gemm_s(tokens, k_in, n_out, gpu, precision, count),
        gemm_s(k_in, n_out, tokens, gpu, precision, count),
    )
    if precision not in QUANTIZED_PRECISIONS:
        return times
    return times + LinearTimes(
        fp8_cast_s(count * tokens * k_in, gpu, quantize_bytes(precision, recipe, behind_norm)),
        fp8_cast_s(count * tokens * n_out, gpu, quantize_bytes(precision, recipe)),
    )


ATTENTION_HALF_KEYS = 1140.0
"""Keys per query at which fused attention reaches half of its ceiling (``attention_efficiency``):
efficiency = ceiling x keys / (keys + ATTENTION_HALF_KEYS). Fitted (least squares in log space,
:func:`planner.calibration.kernel_curves.fit_attention_curve`) to the 16 causal flash-attention cases measured on an
H100 and an H200 (hardware_profiles/measurements/h100-sxm5-80gb-kernels.json and
h200-sxm-141gb-kernels.json; head dim 128, 8 and 32 heads, sequence 1,024 to 8,192): the
efficiency rises from 0.13-0.17 at 1,024 keys to 0.26-0.30 at 8,192 (each query block's fixed
prologue and the causal diagonal amortised over more key blocks; FlashAttention-2, Dao 2023,
Sec. 4.1, reports the same rise with sequence length). The curve's rms log error over the cases is
0.09, a constant's 0.25. Each GPU family fits its own ceiling; the shape is carried to all."""


def attention_efficiency(gpu: GPUSpec, keys: float = 0.0) -> float:
    """Fraction of peak fused attention reaches with ``keys`` keys per query per kernel call
    (:data:`ATTENTION_HALF_KEYS`); ``keys`` 0 = the ceiling."""
    ceiling = gpu.efficiency.attention_efficiency
    return ceiling * keys / (keys + ATTENTION_HALF_KEYS) if keys > 0 else ceiling


def attention_s(flop: float, gpu: GPUSpec, precision: str, keys: float = 0.0) -> float:
    """Time of fused attention doing ``flop`` FLOP in calls of ``keys`` keys per query (the
    sequence, or its context-parallel chunk, or the sliding window; see
    :func:`attention_efficiency`)."""
    if flop <= 0:
        return 0.0
    return flop / (gpu.peak(COMPUTE_DTYPE[precision]) * attention_efficiency(gpu, keys))


def batched_gemm_s(
    m: float, n: float, k: float, count: float, gpu: GPUSpec, precision: str, num_bytes: float
) -> float:
    """Time of one strided-batched GEMM: ``count`` independent (m x k) @ (k x n) products in one
    kernel (cuBLAS ``gemmStridedBatched``, as ``torch.bmm`` / ``torch.baddbmm`` call it). The size
    curve is evaluated on the whole call's FLOPs (one launch, one fixed cost), the products' tiles
    share the waves (:func:`gemm_quantization` with ``count``), and the call is never faster than
    moving ``num_bytes`` through HBM (the roofline: unfused attention's score GEMMs read or write an
    s x s matrix per head at only ``head_dim`` FLOPs per element, below the ridge point of A100 and
    H100). 16-bit; FP8 recipes keep attention in 16-bit."""
    flop = 2.0 * m * n * k * count
    if flop <= 0:
        return 0.0
    peak = gpu.peak(COMPUTE_DTYPE[precision])
    prec = "bf16" if precision in QUANTIZED_PRECISIONS else precision
    t = issued_gemm_s(flop / gemm_quantization(m, n, k, gpu, prec, count), peak, gpu)
    return max(t, memory_bound_s(num_bytes, gpu))


def memory_bound_s(num_bytes: float, gpu: GPUSpec) -> float:
    """Time of memory-bound kernels moving ``num_bytes`` to and from HBM."""
    return num_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm_efficiency)
