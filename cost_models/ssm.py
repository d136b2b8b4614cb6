"""Token mixers that are not softmax attention, for one micro-batch on one GPU: the Mamba-2 mixer
(Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060, the SSD layer of Sec. 7 and its chunked
algorithm of Sec. 6) as Megatron-Core's ``MambaMixer`` runs it and the Mamba-1 mixer (Gu & Dao 2023,
"Mamba", arXiv:2312.00752, the selective SSM of Sec. 3) as Hugging Face's ``JambaMambaMixer`` runs
it; :func:`parallel_block` puts attention and a Mamba-2 mixer side by side (Falcon-H1), and
:func:`mixer_block` chooses a layer's mixer, the delta-rule ones (gated DeltaNet, Kimi Delta
Attention) from :mod:`cost_models.delta_rule`. Each returns an
:class:`cost_models.attention.AttentionBlock`, the shape :func:`cost_models.layers._decoder`
combines with norms, residuals and an MLP (or, in a hybrid layer pattern, with nothing else).

Sharding (megatron-core 0.19.2): ``MambaMixer`` (megatron/core/ssm/mamba_mixer.py) splits
``d_inner``, the heads and the groups over tp (``in_proj`` column-parallel, ``out_proj``
row-parallel: one all-gather + reduce-scatter per direction with sequence parallelism, as
attention); context parallelism swaps the sequence split for a head split with all-to-alls before
and after the scan (``MambaContextParallel``, megatron/core/ssm/mamba_context_parallel.py:
``pre_conv_ssm`` moves z, x, B, C, dt; ``post_conv_ssm`` moves y back).

Kernel times are the scans' rooflines, or the GPU's measured rate of the kernel
(:mod:`cost_models.scans`).
"""

from __future__ import annotations

from dataclasses import replace

from cost_models import communication as comm
from cost_models.attention import AttentionBlock, with_side_block
from cost_models.compute import LinearTimes, batched_gemm_s, linear_s, memory_bound_s
from cost_models.delta_rule import gdn_block, kda_block
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.scans import BACKWARD_PRODUCTS, FP32_BYTES, at_measured_rate, cp_all_to_all, scan_bf16
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu, tp_collectives_s
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


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
        scan_bf16(job),
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
    cp_s, cp_bytes = cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * di / t * ACT_BYTES)
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
    all-to-alls (:func:`cp_all_to_all`)."""
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
