"""The delta-rule token mixers, for one micro-batch on one GPU: gated DeltaNet (Yang et al. 2024,
"Gated Delta Networks", arXiv:2412.06464, the chunkwise form of Sec. 3.3) as Megatron-Core's
``GatedDeltaNet`` runs it, and Kimi Delta Attention (arXiv:2510.26692; :func:`kda_block`) as vLLM's
``KimiDeltaAttention`` and flash-linear-attention's ``chunk_kda`` run it. Each returns an
:class:`cost_models.attention.AttentionBlock` (:func:`cost_models.ssm.mixer_block` chooses it).

Sharding (megatron-core 0.19.2): ``GatedDeltaNet`` (megatron/core/ssm/gated_delta_net/gdn.py) splits
its heads over tp as ``MambaMixer`` does (:mod:`cost_models.ssm`), and context parallelism is
head-parallel with all-to-alls of its q, k, v, z, beta, alpha and its output
(:func:`cost_models.scans.cp_all_to_all`). Kernel times are the scans' rooflines, or the GPU's
measured rate of the kernel (:mod:`cost_models.scans`).
"""

from __future__ import annotations

from cost_models.attention import AttentionBlock
from cost_models.compute import LinearTimes, batched_gemm_s, linear_s, memory_bound_s
from cost_models.parallel import ParallelConfig
from cost_models.scans import BACKWARD_PRODUCTS, FP32_BYTES, at_measured_rate, cp_all_to_all, scan_bf16
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu, tp_collectives_s
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

GDN_CHUNK = 64
"""Chunk length of the gated delta rule's chunked kernels: ``chunk_gated_delta_rule`` (flash-linear-
attention, ``fla/ops/gated_delta_rule/chunk.py``, which Megatron-Core's ``GatedDeltaNet`` calls)
tiles the sequence in blocks of ``BT = 64``."""


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
    rule_fwd, rule_bwd, _ = gated_delta_s(T * c.cp, nv / t / c.cp, dk, dv, gpu, scan_bf16(job))
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
    cp = cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * v / t * ACT_BYTES)
    return _delta_block(
        c,
        node,
        volume,
        cp,
        (rule_fwd, rule_bwd),
        conv_s,
        gemm=gemm,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=float(dv),  # the gated norm's weight (one head width, shared)
        norm_elements=T * (2 * k + v) / t,
    )


def _delta_block(
    c: ParallelConfig,
    node: NodeGroup,
    volume: float,
    cp: tuple[float, float],
    rule: tuple[float, float],
    conv_s: float,
    **terms: float | LinearTimes,
) -> AttentionBlock:
    """A delta-rule mixer's block (gated DeltaNet, KDA): its ``terms`` plus what both share: the
    chunked kernel's (forward, backward) seconds ``rule`` and the short convolutions' ``conv_s``
    forward (three times that backward, as Mamba-2's: the conv recomputed, then its input and weight
    gradients), one all-gather + reduce-scatter of the ``volume`` bytes of hidden states per direction
    over tp and the head-parallel all-to-alls ``cp`` (seconds, bytes) over cp."""
    t = c.tp
    return AttentionBlock(
        **terms,
        attn_fwd_s=rule[0] + conv_s,
        attn_bwd_s=rule[1] + 3 * conv_s,
        tp_fwd_s=tp_collectives_s(volume, c, node, 1),
        tp_bytes=4 * (t - 1) / t * volume if t > 1 else 0.0,
        kv_width=0.0,
        cp_fwd_s=cp[0],
        cp_bytes=cp[1],
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
    rule_fwd, rule_bwd, _ = kda_s(T * c.cp, heads / t / c.cp, d, gpu, scan_bf16(job))
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
    cp = cp_all_to_all(c, node, T * in_width * ACT_BYTES, T * p / t * ACT_BYTES)
    return _delta_block(
        c,
        node,
        volume,
        cp,
        (rule_fwd, rule_bwd),
        conv_s,
        gemm=gemm,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=float(2 * h * d + d),  # f_a_proj, g_a_proj and o_norm's weight
        norm_elements=T * 3 * p / t,
    )
