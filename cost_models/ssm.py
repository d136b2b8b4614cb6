"""Token mixers that are not softmax attention, for one micro-batch on one GPU: the Mamba-2 mixer
(Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060, the SSD layer of Sec. 7 and its chunked
algorithm of Sec. 6) as Megatron-Core's ``MambaMixer`` runs it, and gated DeltaNet (Yang et al. 2024,
"Gated Delta Networks", arXiv:2412.06464, the chunkwise form of Sec. 3.3) as Megatron-Core's
``GatedDeltaNet`` runs it, the Mamba-1 mixer (Gu & Dao 2023, "Mamba", arXiv:2312.00752, the
selective SSM of Sec. 3) as Hugging Face's ``JambaMambaMixer`` runs it, and Kimi Delta Attention
(arXiv:2510.26692; :func:`kda_block`) as vLLM's ``KimiDeltaAttention`` and flash-linear-attention's
``chunk_kda`` run it; :func:`parallel_block` puts attention and a Mamba-2 mixer side by side
(Falcon-H1). Each returns an :class:`cost_models.attention.AttentionBlock`, the
shape :func:`cost_models.layers._decoder` combines with norms, residuals and an MLP (or, in a
hybrid layer pattern, with nothing else).

Sharding (megatron-core 0.19.2): ``MambaMixer`` (megatron/core/ssm/mamba_mixer.py) splits
``d_inner``, the heads and the groups over tp (``in_proj`` column-parallel, ``out_proj``
row-parallel: one all-gather + reduce-scatter per direction with sequence parallelism, as
attention); context parallelism swaps the sequence split for a head split with all-to-alls before
and after the scan (``MambaContextParallel``, megatron/core/ssm/mamba_context_parallel.py:
``pre_conv_ssm`` moves z, x, B, C, dt; ``post_conv_ssm`` moves y back). ``GatedDeltaNet``
(megatron/core/ssm/gated_delta_net/gdn.py) does the same with its q, k, v, z, beta, alpha and its
output.

Kernel times: the chunked scans are products of small matrices per chunk and head, priced as
strided-batched GEMMs with :func:`cost_models.compute.batched_gemm_s` (the GPU's GEMM size curve
on the call's FLOPs, never faster than the bytes the kernel moves through HBM at the GPU's
memory bandwidth): the roofline of each kernel's FLOPs and bytes. Where a GPU file measures the
kernel (``linear_mixer_kernels``: the fraction of the dense 16-bit peak the published Triton
kernels reach on the FLOPs counted here, :attr:`planner.inputs.cluster_spec.GPUSpec.linear_mixer_efficiency`),
each pass takes that rate on its FLOPs instead, never faster than the roofline
(:func:`at_measured_rate`); the measurements and their transfer between GPUs are
:mod:`planner.calibration.mixer_kernels`'s. Without one, the roofline alone.
"""

from __future__ import annotations

from dataclasses import replace

from cost_models import communication as comm
from cost_models.attention import AttentionBlock, with_side_block
from cost_models.compute import LinearTimes, batched_gemm_s, linear_s, memory_bound_s
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu, tp_collectives_s
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.job_spec import QUANTIZED_PRECISIONS, JobSpec
from planner.inputs.model_spec import ModelSpec

FP32_BYTES = 4
GDN_CHUNK = 64
"""Chunk length of the gated delta rule's chunked kernels: ``chunk_gated_delta_rule`` (flash-linear-
attention, ``fla/ops/gated_delta_rule/chunk.py``, which Megatron-Core's ``GatedDeltaNet`` calls)
tiles the sequence in blocks of ``BT = 64``."""
BACKWARD_PRODUCTS = 2.0
"""Backward products per forward product of a chunked scan: each product ``Y = A B`` has the two
gradient products ``dA = dY B^T`` and ``dB = A^T dY`` of its FLOPs (the convention of Megatron's
``num_floating_point_operations``: backward = 2 x forward)."""


def _scan_bf16(job: JobSpec) -> str:
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


def ssd_scan_s(
    tokens: float, heads: float, groups: float, head_dim: int, state: int, chunk: int, gpu: GPUSpec, prec: str
) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the SSD chunked scan (Dao & Gu 2024 Sec. 6, the
    four steps of its Listing 1, as the Triton kernels of ``mamba_chunk_scan_combined`` run them) over
    ``tokens`` tokens with ``heads`` heads of width P = ``head_dim`` and ``groups`` groups of state N:

    1. ``bmm_chunk``: ``C B^T`` per chunk and group, a (Q x N) @ (N x Q) product, written in fp32;
    2. ``chunk_state``: each chunk's final state ``B^T (decay * X)``, (N x Q) @ (Q x P) per head;
    3. ``state_passing``: the recurrence over chunk states, memory-bound (read and write each state);
    4. ``chunk_scan``: ``(L o C B^T) X``, (Q x Q) @ (Q x P), plus ``C h`` from the passed states,
       (Q x N) @ (N x P), per head.

    The backward (``_mamba_chunk_scan_combined_bwd``) recomputes the chunk states from the saved
    inputs (steps 2-3 again, as ``MambaSplitConv1dScanCombinedFn`` saves only ``zxbcdt`` and the
    scan's output) and runs :data:`BACKWARD_PRODUCTS` gradient products per forward product. Each
    pass at the GPU's measured rate of the SSD kernels where it has one (:func:`at_measured_rate`,
    on these FLOPs: the backward's are its products and the recomputed chunk states)."""
    q, n, p = chunk, state, head_dim
    chunks = tokens / q
    b = ACT_BYTES
    xbc_bytes = tokens * (heads * p + 2 * groups * n) * b
    states = chunks * heads * n * p * FP32_BYTES
    cb = batched_gemm_s(
        q, q, n, chunks * groups, gpu, prec, 2 * tokens * groups * n * b + tokens * q * groups * 4
    )
    chunk_state = batched_gemm_s(n, p, q, chunks * heads, gpu, prec, xbc_bytes + states)
    passing = memory_bound_s(2 * states, gpu)
    scan = batched_gemm_s(
        q, p, q, chunks * heads, gpu, prec, tokens * q * heads * 4 + 2 * tokens * heads * p * b
    )
    scan += batched_gemm_s(q, p, n, chunks * heads, gpu, prec, tokens * groups * n * b + states)
    forward = cb + chunk_state + passing + scan
    flop = 2 * tokens * (groups * q * n + heads * (n * p + q * p + n * p))
    backward = BACKWARD_PRODUCTS * forward + chunk_state + passing
    backward_flop = BACKWARD_PRODUCTS * flop + 2 * tokens * heads * n * p  # the chunk states again
    return (
        at_measured_rate(forward, flop, gpu, prec, "ssd_scan"),
        at_measured_rate(backward, backward_flop, gpu, prec, "ssd_scan"),
        flop,
    )


def gated_delta_s(
    tokens: float, heads: float, key_dim: int, value_dim: int, gpu: GPUSpec, prec: str
) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the chunked gated delta rule (Yang et al. 2024,
    arXiv:2412.06464 Sec. 3.3, with DeltaNet's WY representation, Yang et al. 2024,
    arXiv:2406.06484 Sec. 3.2) over ``tokens`` tokens and ``heads`` value heads (queries and keys
    repeated to them, as ``GatedDeltaNet`` does), chunks of C = :data:`GDN_CHUNK`:

    * intra-chunk ``K K^T`` and ``Q K^T``, (C x d_k) @ (d_k x C) each; the triangular solve for the
      WY factor, (C x C) @ (C x C); ``W = A K`` and ``U = A V``, (C x C) @ (C x d_k|d_v);
    * the state recurrence (``chunk_h``): ``U - W S`` and ``S += K^T (U - W S)``, d_k x d_v state
      per head in fp32, written once per chunk;
    * the output (``chunk_o``): ``Q S`` plus the masked intra-chunk ``(Q K^T) (U - W S)``.

    The backward recomputes the states (``chunk_h`` again) and runs :data:`BACKWARD_PRODUCTS`
    gradient products per forward product. Each pass at the GPU's measured rate of
    ``chunk_gated_delta_rule`` where it has one (:func:`at_measured_rate`, on these FLOPs and the
    recomputed states')."""
    c, dk, dv = GDN_CHUNK, key_dim, value_dim
    count = tokens / c * heads
    b = ACT_BYTES
    qkv = tokens * heads * (2 * dk + dv) * b
    intra = batched_gemm_s(c, c, dk, 2 * count, gpu, prec, qkv + 2 * tokens * heads * c * b)
    intra += _wy_solve_s(tokens, heads, gpu, prec)
    wy, recurrence, out = _delta_rule_s(tokens, heads, dk, dv, gpu, prec)
    forward = intra + wy + recurrence + out
    flop = 2 * tokens * heads * (2 * c * dk + c * c + c * (dk + dv) + 2 * dk * dv + dk * dv + c * dv)
    return _delta_rule_passes(
        forward, recurrence, flop, tokens * heads * dk * dv, gpu, prec, "gated_delta_rule"
    )


def _delta_rule_passes(
    forward: float,
    recurrence: float,
    flop: float,
    state_elements: float,
    gpu: GPUSpec,
    prec: str,
    kernel: str,
) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of a chunked delta-rule kernel (gated DeltaNet, KDA) from
    its forward roofline ``forward`` and FLOPs ``flop``: the backward is :data:`BACKWARD_PRODUCTS`
    per forward product plus the recomputed states (``recurrence`` seconds, ``chunk_h`` again: 4 FLOPs
    per token, head and state element, ``state_elements`` = tokens x heads x d_k x d_v), each pass at
    the GPU's measured rate of ``kernel`` where it has one (:func:`at_measured_rate`)."""
    backward = BACKWARD_PRODUCTS * forward + recurrence
    backward_flop = BACKWARD_PRODUCTS * flop + 4 * state_elements
    return (
        at_measured_rate(forward, flop, gpu, prec, kernel),
        at_measured_rate(backward, backward_flop, gpu, prec, kernel),
        flop,
    )


def _wy_solve_s(tokens: float, heads: float, gpu: GPUSpec, prec: str) -> float:
    """The triangular solve for the WY factor of each chunk, (C x C) @ (C x C) per chunk and head
    (flash-linear-attention ``solve_tril``), C = :data:`GDN_CHUNK`."""
    c = GDN_CHUNK
    return batched_gemm_s(c, c, c, tokens / c * heads, gpu, prec, 2 * tokens * heads * c * ACT_BYTES)


def _delta_rule_s(
    tokens: float, heads: float, key_dim: int, value_dim: int, gpu: GPUSpec, prec: str
) -> tuple[float, float, float]:
    """(WY, state recurrence, output) seconds of the chunked delta rule, shared by gated DeltaNet
    and KDA (:func:`gated_delta_s`): ``W = A K`` and ``U = A V``; ``chunk_h`` (``U - W S`` and ``S +=
    K^T (U - W S)``, a d_k x d_v fp32 state per head written once per chunk); ``chunk_o`` (``Q S``
    and the masked intra-chunk ``(Q K^T) (U - W S)``)."""
    c, dk, dv = GDN_CHUNK, key_dim, value_dim
    count = tokens / c * heads
    b = ACT_BYTES
    states = count * dk * dv * FP32_BYTES
    wy = batched_gemm_s(c, dk + dv, c, count, gpu, prec, tokens * heads * (c + 2 * dk + 2 * dv) * b)
    recurrence = batched_gemm_s(c, dv, dk, count, gpu, prec, tokens * heads * (dk + 2 * dv) * b + states)
    recurrence += batched_gemm_s(dk, dv, c, count, gpu, prec, tokens * heads * (dk + dv) * b + states)
    out = batched_gemm_s(c, dv, dk, count, gpu, prec, tokens * heads * dk * b + states)
    out += batched_gemm_s(c, dv, c, count, gpu, prec, tokens * heads * (c + 2 * dv) * b)
    return wy, recurrence, out


def _cp_all_to_all(c: ParallelConfig, node: NodeGroup, before: float, after: float) -> tuple[float, float]:
    """(seconds per direction, bytes sent forward + backward) of head-parallel context parallelism
    around a scan: one all-to-all of ``before`` bytes (this rank's inputs of the scan) and one of
    ``after`` (its output) per direction; each rank keeps 1/cp of what it holds."""
    if c.cp == 1:
        return 0.0, 0.0
    link = comm.link_for(group(c, "cp"), node)
    seconds = comm.all_to_all_s(before, c.cp, link) + comm.all_to_all_s(after, c.cp, link)
    return seconds, 2 * (c.cp - 1) / c.cp * (before + after)


def mamba_block(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> AttentionBlock:
    """The Mamba-2 mixer of one layer (``MambaMixer``, training path ``_ssm_training``):

    * ``in_proj`` (TE ``LayerNormColumnParallelLinear``: the layer's norm fused in) h ->
      ``(2 d_inner + 2 G N + H) / tp``; ``out_proj`` (row-parallel) ``d_inner / tp`` -> h;
    * the causal depthwise ``conv1d`` over x, B, C and the SSD scan, fused in
      ``mamba_split_conv1d_scan_combined`` (conv: memory-bound, read and write its channels; scan:
      :func:`ssd_scan_s`); the gated RMSNorm over ``d_inner`` (memory-bound);
    * model FLOPs as Megatron's ``num_floating_point_operations`` (``mamba_layer_flops``: the two
      projections, ``7 d_inner N`` per token for the scan), times 3;
    * kept for backward: the in_proj input (the norm's output), ``zxbcdt`` (what the fused kernel
      saves), the scan output ``out_x``, the gated norm's input and the out_proj input.
    """
    gpu, prec = node.gpu, job.precision
    h, t = model.hidden_size, c.tp
    di, heads, groups = model.mamba_inner_size, model.mamba_num_heads, model.mamba_num_groups
    n, p = model.mamba_state_dim, model.mamba_head_dim
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    in_width = (2 * di + 2 * groups * n + heads) / t
    conv_width = (di + 2 * groups * n) / t
    recipe = job.fp8_recipe
    gemm = linear_s(T, in_width, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, h, di / t, gpu, prec, recipe=recipe)
    # Under cp the scan runs on all s tokens of 1/cp of the heads (MambaContextParallel).
    scan_fwd, scan_bwd, _ = ssd_scan_s(
        T * c.cp,
        heads / t / c.cp,
        max(1.0, groups / t / c.cp),
        p,
        n,
        model.mamba_chunk_size,
        gpu,
        _scan_bf16(job),
    )
    conv_bytes = 2 * T * conv_width * ACT_BYTES
    norm_bytes = 3 * T * di / t * ACT_BYTES  # y and z read, the normalised output written
    conv_s = memory_bound_s(conv_bytes, gpu)
    model_flop = 3 * (2 * T * h * in_width * t + 7 * T * di * n + 2 * T * di * h) / t
    g_in = gemm_input_bytes(job)
    act = T * h * g_in / sp_div + T * in_width * ACT_BYTES + 2 * T * di / t * ACT_BYTES + T * di / t * g_in
    wgrad = (T * h + T * di / t) * g_in
    params_sharded = (h * in_width * t + di * h) / t + conv_width * (model.mamba_conv_kernel + 1)
    params_sharded += 3 * heads / t + di / t  # dt_bias, A_log, D; the gated norm's weight
    volume = T * h * ACT_BYTES
    cp_s, cp_bytes = _cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * di / t * ACT_BYTES)
    return AttentionBlock(
        gemm=gemm,
        attn_fwd_s=scan_fwd + conv_s,
        attn_bwd_s=scan_bwd + 3 * conv_s,  # the conv recomputed, then its input and weight gradients
        model_flop=model_flop,
        elem_bytes=norm_bytes,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=0.0,
        tp_fwd_s=tp_collectives_s(volume, c, node, 1),
        tp_bytes=4 * (t - 1) / t * volume if t > 1 else 0.0,
        kv_width=0.0,
        norm_elements=T * di / t,
        cp_fwd_s=cp_s,
        cp_bytes=cp_bytes,
    )


SELECTIVE_SCAN_FLOP_PER_STATE = 9
"""Forward FLOPs of Mamba-1's selective scan per token, channel and state element: discretizing
(``exp(dt A)``, ``dt B x``), the recurrence and the output ``C h`` (the 9 B L D N of the Mamba
authors' count, state-spaces/mamba issue #110, which fvcore FLOP counters of ``selective_scan_fn``
use), plus the ``D`` skip and the z gate per channel."""


def selective_scan_bytes(tokens: float, channels: float, state: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of Mamba-1's fused selective scan (Gu & Dao 2023,
    arXiv:2312.00752 Sec. 3.3.2, "Hardware-aware algorithm"; ``selective_scan_cuda`` of
    state-spaces/mamba, as ``JambaMambaMixer`` calls ``selective_scan_fn`` with the gate z): the
    kernel reads u, dt, z (per channel) and B, C (per token) from HBM, keeps the N-wide states in
    SRAM and writes y, so its time is these bytes, not its FLOPs (the paper: the scan is memory-bound
    once fused; 9 FLOPs per state element over 2-byte channel inputs is near the ridge point of
    non-tensor-core arithmetic only, :data:`SELECTIVE_SCAN_FLOP_PER_STATE`). The backward recomputes
    the states in SRAM from the same inputs, reads dy and writes du, d(dt), dz and, in fp32, dB, dC."""
    b = ACT_BYTES
    forward = tokens * (4 * channels * b + 2 * state * b)
    backward = tokens * (4 * channels * b + 2 * state * b) + tokens * (
        4 * channels * b + 2 * state * FP32_BYTES
    )
    return forward, backward


def mamba1_block(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> AttentionBlock:
    """The Mamba-1 mixer of one layer (Gu & Dao 2023, arXiv:2312.00752, Sec. 3.4 and Fig. 3; Hugging
    Face ``JambaMambaMixer.cuda_kernels_forward``, the training path):

    * ``in_proj`` (norm fused) h -> ``2 d_inner / tp`` (x, z; column-parallel over channels);
      ``x_proj`` ``d_inner / tp`` -> R + 2N, row-parallel, so its output (dt, B, C) is all-reduced
      over tp in each direction; ``dt_proj`` R -> ``d_inner / tp``; ``out_proj`` ``d_inner / tp`` -> h;
    * the causal depthwise conv1d over x (memory-bound) and the fused selective scan
      (:func:`selective_scan_bytes`, memory-bound);
    * model FLOPs: the four projections, the conv (``2 d_conv d_inner``) and the scan
      (:data:`SELECTIVE_SCAN_FLOP_PER_STATE` ``d_inner N``), times 3;
    * kept for backward: the in_proj input, its output (x, z), the conv output (x_proj's and the
      scan's input), dt, B, C, dt_proj's output and the scan's output (out_proj's input).

    No framework splits Mamba-1's sequence over context parallelism (:mod:`cost_models.constraints`
    refuses cp > 1 for it)."""
    gpu, prec = node.gpu, job.precision
    h, t = model.hidden_size, c.tp
    di, n, r = model.mamba_inner_size, model.mamba_state_dim, model.mamba_dt_rank
    kernel = model.mamba_conv_kernel
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    recipe = job.fp8_recipe
    gemm = linear_s(T, 2 * di / t, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, r + 2 * n, di / t, gpu, prec, recipe=recipe)
    gemm += linear_s(T, di / t, r, gpu, prec, recipe=recipe)
    gemm += linear_s(T, h, di / t, gpu, prec, recipe=recipe)
    scan_fwd_bytes, scan_bwd_bytes = selective_scan_bytes(T, di / t, n)
    conv_s = memory_bound_s(2 * T * di / t * ACT_BYTES, gpu)
    model_flop = (
        3
        * (
            2 * T * (h * 2 * di + di * (r + 2 * n) + r * di + di * h)
            + T * di * (2 * kernel + SELECTIVE_SCAN_FLOP_PER_STATE * n)
        )
        / t
    )
    g_in = gemm_input_bytes(job)
    act = T * h * g_in / sp_div + T * 2 * di / t * ACT_BYTES + T * di / t * g_in
    act += T * 2 * (r + 2 * n) * ACT_BYTES + T * di / t * ACT_BYTES + T * di / t * g_in
    wgrad = (T * h + T * di / t + T * r + T * di / t) * g_in
    params_sharded = (2 * h * di + di * (r + 2 * n) + r * di + di * h) / t
    params_sharded += di / t * (kernel + 1) + di / t + di / t * n + di / t  # conv, dt bias, A_log, D
    volume = T * h * ACT_BYTES
    tp_s = tp_collectives_s(volume, c, node, 1)
    small = T * (r + 2 * n) * ACT_BYTES  # x_proj's partial sums
    if t > 1:
        tp_s += comm.all_reduce_s(small, t, comm.link_for(group(c, "tp"), node))
    return AttentionBlock(
        gemm=gemm,
        attn_fwd_s=memory_bound_s(scan_fwd_bytes, gpu) + conv_s,
        attn_bwd_s=memory_bound_s(scan_bwd_bytes, gpu) + 3 * conv_s,
        model_flop=model_flop,
        elem_bytes=0.0,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=0.0,
        tp_fwd_s=tp_s,
        tp_bytes=(4 * volume + 4 * small) * (t - 1) / t if t > 1 else 0.0,
        kv_width=0.0,
        norm_elements=0.0,
    )


def gdn_block(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> AttentionBlock:
    """The gated DeltaNet mixer of one layer (``GatedDeltaNet``):

    * ``in_proj`` (norm fused) h -> ``(2 k + 2 v + 2 n_v) / tp`` (q, k, v, the gate z, beta, alpha);
      ``out_proj`` ``v / tp`` -> h;
    * the causal ``conv1d`` over q, k, v, the L2 norms of q and k and the gated RMSNorm of the output
      (memory-bound), the chunked gated delta rule (:func:`gated_delta_s`);
    * model FLOPs as Megatron's ``num_floating_point_operations`` (``gdn_layer_flops``: projections,
      conv, ``4 n_v d_v^2`` per token for the delta rule), times 3;
    * kept for backward: the in_proj input, its output, the conv output, q and k normalised and
      repeated to the value heads, the core output, the gated norm's output (out_proj input).
    """
    gpu, prec = node.gpu, job.precision
    h, t = model.hidden_size, c.tp
    nv, dk, dv = model.linear_num_value_heads, model.linear_key_head_dim, model.linear_value_head_dim
    k = model.linear_num_key_heads * dk
    v = nv * dv
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    in_width = (2 * k + 2 * v + 2 * nv) / t
    conv_width = (2 * k + v) / t
    recipe = job.fp8_recipe
    gemm = linear_s(T, in_width, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, h, v / t, gpu, prec, recipe=recipe)
    rule_fwd, rule_bwd, _ = gated_delta_s(T * c.cp, nv / t / c.cp, dk, dv, gpu, _scan_bf16(job))
    conv_s = memory_bound_s(2 * T * conv_width * ACT_BYTES, gpu)
    elem = 2 * T * 2 * k / t * ACT_BYTES + 3 * T * v / t * ACT_BYTES  # L2 norms of q, k; gated norm
    kernel = model.linear_conv_kernel_dim
    model_flop = (
        3 * 2 * T * (h * (2 * k + 2 * v + 2 * nv) + kernel * (2 * k + v) + 4 * nv * dv * dv + h * v) / t
    )
    g_in = gemm_input_bytes(job)
    act = T * h * g_in / sp_div + T * (in_width + conv_width) * ACT_BYTES
    act += T * (2 * nv * dk + v) / t * ACT_BYTES + T * v / t * g_in
    wgrad = (T * h + T * v / t) * g_in
    params_sharded = (h * in_width * t + v * h) / t + conv_width * kernel + 2 * nv / t
    volume = T * h * ACT_BYTES
    cp = _cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * v / t * ACT_BYTES)
    return _delta_block(
        c,
        node,
        volume,
        cp,
        gemm=gemm,
        attn_fwd_s=rule_fwd + conv_s,
        attn_bwd_s=rule_bwd + 3 * conv_s,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=float(dv),  # the gated norm's weight (one head width, shared)
        norm_elements=T * (2 * k + v) / t,
    )


def _delta_block(
    c: ParallelConfig, node: NodeGroup, volume: float, cp: tuple[float, float], **terms: float | LinearTimes
) -> AttentionBlock:
    """A delta-rule mixer's block (gated DeltaNet, KDA): its ``terms`` plus the communication both
    share, one all-gather + reduce-scatter of the ``volume`` bytes of hidden states per direction over
    tp and the head-parallel all-to-alls ``cp`` (seconds, bytes) over cp."""
    t = c.tp
    return AttentionBlock(
        **terms,
        tp_fwd_s=tp_collectives_s(volume, c, node, 1),
        tp_bytes=4 * (t - 1) / t * volume if t > 1 else 0.0,
        kv_width=0.0,
        cp_fwd_s=cp[0],
        cp_bytes=cp[1],
    )


def parallel_block(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, attention: AttentionBlock
) -> AttentionBlock:
    """Attention and a Mamba-2 mixer side by side on one normalised input, their outputs added
    (Falcon-H1, arXiv:2507.22448 Sec. 2; transformers' ``FalconH1DecoderLayer``, and
    Megatron-Bridge's ``FalconH1Layer``, which runs the two under one input norm): the two blocks'
    GEMMs, kernels, FLOPs, parameters and kept activations add, but their shared input (the norm's
    output, which QKV and ``in_proj`` both read) is kept once, and tensor parallelism moves the
    hidden states once (one all-gather of the input and one reduce-scatter of the summed output per
    direction with sequence parallelism, one all-reduce without): attention's collectives, not
    both. Context parallelism: attention's K/V ring plus the Mamba mixer's head-parallel
    all-to-alls (:func:`_cp_all_to_all`)."""
    mamba = mamba_block(model, job, c, node)
    both = with_side_block(
        attention,
        mamba,
        (mamba.attn_fwd_s, mamba.attn_bwd_s),
        params_sharded=attention.params_sharded + mamba.params_sharded,
        params_replicated=attention.params_replicated + mamba.params_replicated,
        norm_elements=attention.norm_elements + mamba.norm_elements,
        cp_fwd_s=attention.cp_fwd_s + mamba.cp_fwd_s,
        cp_bytes=attention.cp_bytes + mamba.cp_bytes,
    )
    shared = tokens_per_gpu(job, c) * model.hidden_size * gemm_input_bytes(job)  # kept once, not twice
    return replace(
        both,
        act_bytes=both.act_bytes - shared / (c.tp if c.sp else 1),
        wgrad_bytes=both.wgrad_bytes - shared,
    )


KDA_SUB_CHUNK = 16
"""Sub-chunk length of KDA's intra-chunk products: ``chunk_kda_fwd_intra`` (flash-linear-attention,
``fla/ops/kda/chunk_intra.py``) splits each chunk of 64 into ``BC = min(16, BT)`` rows, the secondary
chunking of gated linear attention (Yang et al. 2023, arXiv:2312.06635 Sec. 4.2) that a per-channel
decay needs to stay in range."""
VECTOR_FLOP_SHARE = 1 / 16
"""The GPU's CUDA-core (non-tensor) FP32 rate over its dense 16-bit tensor-core peak: A100 19.5 /
312 TFLOP/s, H100 SXM 67 / 989 (NVIDIA A100 and H100 datasheets). Blackwell's share is smaller (B200
80 / 2250), so KDA's element-wise intra-chunk work is optimistic there."""
KDA_PAIR_FLOP = 14
"""CUDA-core FP32 operations per (query, key, channel) of a diagonal sub-chunk in KDA's intra kernel
(``chunk_kda_fwd_kernel_intra_sub_intra``: ``k_j exp(g_i - g_j)`` then the two row sums with ``q_i``
and ``beta_i k_i``): the subtraction, the product, two multiply-adds (4 FLOPs) and one exp, counted
as 8 (a MUFU.EX2 result takes the issue slots of 4 FP32 FMAs: 16 against 64 results per clock per
SM on compute capability 8.0, CUDA C++ Programming Guide, "Arithmetic Instructions")."""


def kda_s(tokens: float, heads: float, head_dim: int, gpu: GPUSpec, prec: str) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the chunked Kimi Delta Attention kernel
    (arXiv:2510.26692 Sec. 3.2 and Appendix, flash-linear-attention's ``chunk_kda``, which vLLM and
    the model's own code call) over ``tokens`` tokens and ``heads`` heads of width d (keys and values
    alike), chunks of C = :data:`GDN_CHUNK`. The delta rule's WY form, state recurrence and output
    are gated DeltaNet's (:func:`_delta_rule_s`, :func:`_wy_solve_s`); the per-key-channel decay
    changes the intra-chunk products ``A_kk = (K e^G)(K e^-G)^T`` and ``A_qk = (Q e^G)(K e^-G)^T``
    (``chunk_kda_fwd_intra``): with the decay inside each channel's product they are no longer one
    (C x d) @ (d x C) GEMM each, but

    * the C/16 (C/16 - 1) / 2 sub-chunk pairs below the diagonal as (16 x d) @ (d x 16) tensor-core
      products, both matrices (the decay folded into the operands relative to the sub-chunk's first
      row, ``exp(g - g_n)``): that share of two (C x d) @ (d x C) products at their GEMM rate,
      never faster than reading q, k and the fp32 gate and writing A_qk, A_kk in fp32;
    * the C/16 diagonal sub-chunks element-wise on the CUDA cores: 16 x 16 x d (query, key,
      channel) triples each, :data:`KDA_PAIR_FLOP` operations apiece at :data:`VECTOR_FLOP_SHARE`
      of the tensor-core peak;
    * the fp32 decay G (d per head and token, where gated DeltaNet has one scalar) read again by the
      WY, state and output kernels (``recompute_w_u``, ``chunk_gated_delta_rule_fwd_h`` with ``gk``,
      ``chunk_gla_fwd_o_gk``).

    So its excess over gated DeltaNet grows linearly with d per token and head. The backward is
    :data:`BACKWARD_PRODUCTS` per forward product (``chunk_kda_bwd_kernel_intra`` runs two such
    element-wise passes, ``dq``/``dk`` and ``dk^T``) plus the recomputed states, as gated DeltaNet's. Each pass at the GPU's measured rate of
    ``chunk_kda`` where it has one (:func:`at_measured_rate`)."""
    c, bc, d = GDN_CHUNK, KDA_SUB_CHUNK, head_dim
    count = tokens / c * heads
    pairs = (c // bc) * (c // bc - 1) / 2
    read = tokens * heads * d * (2 * ACT_BYTES + FP32_BYTES)  # q, k and the decay
    # The sub-chunk pairs are the blocks of the two (C x d) @ (d x C) products below the diagonal:
    # a share pairs / (C/16)^2 of them, which the kernel runs as 16 x 16 tiles of one chunk.
    share = pairs / (c // bc) ** 2
    intra = max(
        share * batched_gemm_s(c, c, d, 2 * count, gpu, prec, 0.0),
        memory_bound_s(read + 2 * tokens * heads * c * FP32_BYTES, gpu),
    )
    triples = tokens * heads * bc * d
    diagonal = triples * KDA_PAIR_FLOP / (gpu.peak(prec) * VECTOR_FLOP_SHARE)
    wy, recurrence, out = _delta_rule_s(tokens, heads, d, d, gpu, prec)
    decay = memory_bound_s(3 * tokens * heads * d * FP32_BYTES, gpu)
    forward = intra + diagonal + _wy_solve_s(tokens, heads, gpu, prec) + wy + recurrence + out + decay
    flop = 2 * tokens * heads * (2 * pairs * bc * bc * d / c + c * c + 2 * c * d + 3 * d * d + c * d)
    flop += triples * KDA_PAIR_FLOP
    return _delta_rule_passes(forward, recurrence, flop, tokens * heads * d * d, gpu, prec, "kda")


def kda_block(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> AttentionBlock:
    """The Kimi Delta Attention mixer of one layer (:meth:`ModelSpec.kda_params`; vLLM
    ``KimiDeltaAttention`` shards it as below):

    * column-parallel GEMMs behind the layer's norm: ``q_proj``, ``k_proj``, ``v_proj`` h -> P/tp and
      ``b_proj`` h -> H/tp; the gates' low-rank halves ``f_a_proj`` and ``g_a_proj`` (h -> d, each)
      replicated on every tp rank, then ``f_b_proj`` and ``g_b_proj`` d -> P/tp; ``o_proj``
      row-parallel P/tp -> h;
    * the short convolutions of q, k and v (memory-bound), the gate (``kda_gate_chunk_cumsum``:
      ``-exp(A_log) softplus(f + dt_bias)`` and its chunk cumsum, read 16-bit, written fp32), the L2
      norms of q and k, the sigmoid-gated RMSNorm ``o_norm`` (memory-bound), the chunked kernel
      (:func:`kda_s`);
    * model FLOPs: the projections, the convolutions and ``4 H d^2`` per token for the delta rule
      (gated DeltaNet's count in Megatron's ``gdn_layer_flops``), times 3;
    * kept for backward: the projections' input, q, k, v before and after their convolutions, beta,
      the two low-rank latents, the fp32 decay, ``A_qk`` and ``A_kk`` (fp32, C per head and token:
      ``chunk_kda`` saves them), the output gate, the core output and ``o_proj``'s input.

    Tensor parallelism splits the heads (H % tp, each rank's P/tp channels), one all-gather +
    reduce-scatter per direction as attention; context parallelism is head-parallel as gated
    DeltaNet's (H % (tp cp))."""
    gpu, prec = node.gpu, job.precision
    h, t = model.hidden_size, c.tp
    heads, d = model.linear_num_key_heads, model.linear_key_head_dim
    p = heads * d
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    recipe = job.fp8_recipe
    gemm = linear_s(T, (3 * p + heads) / t, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, 2 * d, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, 2 * p / t, d, gpu, prec, recipe=recipe)
    gemm += linear_s(T, h, p / t, gpu, prec, recipe=recipe)
    rule_fwd, rule_bwd, _ = kda_s(T * c.cp, heads / t / c.cp, d, gpu, _scan_bf16(job))
    conv_s = memory_bound_s(2 * T * 3 * p / t * ACT_BYTES, gpu)
    gate = T * p / t * (ACT_BYTES + FP32_BYTES)
    elem = gate + 2 * T * 2 * p / t * ACT_BYTES + 3 * T * p / t * ACT_BYTES  # gate, L2 norms, o_norm
    kernel = model.linear_conv_kernel_dim
    proj = h * (3 * p + heads + 2 * d) + 2 * d * p + p * h
    model_flop = 3 * 2 * T * (proj + kernel * 3 * p + 4 * heads * d * d) / t
    g_in = gemm_input_bytes(job)
    act = T * h * g_in / sp_div + T * (2 * 3 * p + heads) / t * ACT_BYTES + 2 * T * d * g_in
    act += T * p / t * FP32_BYTES + 2 * T * heads / t * GDN_CHUNK * FP32_BYTES
    act += 2 * T * p / t * ACT_BYTES + T * p / t * g_in
    wgrad = (T * h + 2 * T * d + T * p / t) * g_in
    params_sharded = (h * (3 * p + heads) + 2 * d * p + p * h) / t + 3 * p / t * kernel + p / t + heads / t
    volume = T * h * ACT_BYTES
    in_width = (3 * p + heads + 2 * p) / t
    cp = _cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * p / t * ACT_BYTES)
    return _delta_block(
        c,
        node,
        volume,
        cp,
        gemm=gemm,
        attn_fwd_s=rule_fwd + conv_s,
        attn_bwd_s=rule_bwd + 3 * conv_s,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=float(2 * h * d + d),  # f_a_proj, g_a_proj and o_norm's weight
        norm_elements=T * 3 * p / t,
    )


NO_MIXER = AttentionBlock(
    gemm=LinearTimes(),
    attn_fwd_s=0.0,
    attn_bwd_s=0.0,
    model_flop=0.0,
    elem_bytes=0.0,
    act_bytes=0.0,
    wgrad_bytes=0.0,
    params_sharded=0.0,
    params_replicated=0.0,
    tp_fwd_s=0.0,
    tp_bytes=0.0,
    kv_width=0.0,
)
"""The token mixer of an MLP-only layer of a hybrid pattern (``-``, ``E``): none."""


def mixer_block(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, mixer: str
) -> AttentionBlock:
    """The non-attention token mixer ``mixer`` (``mamba``: Mamba-2, or Mamba-1 with
    ``mamba_version`` 1; ``gdn``; ``kda``; ``""``) of a layer."""
    if mixer == "mamba":
        return (
            mamba1_block(model, job, c, node)
            if model.mamba_version == 1
            else mamba_block(model, job, c, node)
        )
    if mixer == "gdn":
        return gdn_block(model, job, c, node)
    if mixer == "kda":
        return kda_block(model, job, c, node)
    return NO_MIXER
