"""The attention block of a decoder layer for one micro-batch on one GPU: MHA/GQA (Korthikanti et
al. 2022, Sec. 4) and multi-head latent attention (DeepSeek-V2, Megatron-Core ``MLASelfAttention``):
projection GEMMs, the fused attention kernel, FLOPs, activations kept for backward, parameters and
tensor-parallel communication, which :func:`cost_models.layers._decoder` combines with the MLP.
Sources as in :mod:`cost_models.layers`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models import communication as comm
from cost_models.compute import (
    LinearTimes,
    attention_s,
    batched_gemm_s,
    linear_s,
    memory_bound_s,
)
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.sparse_attention import IndexerBlock, indexer_block
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu, tp_collectives_s
from cost_models.unfused_attention import UNFUSED_WORKING_BYTES, unfused_core_attention, unfused_kept_bytes
from planner.inputs.cluster_spec import GPUSpec, NodeGroup, compute_capability_major
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec, sparse_attention_span


@dataclass(frozen=True, slots=True)
class AttentionBlock:
    """The attention block of one layer for one micro-batch on one GPU (see :func:`_decoder`)."""

    gemm: LinearTimes
    """Projection GEMMs: forward, input-gradient and weight-gradient times."""
    attn_fwd_s: float
    attn_bwd_s: float
    """Core attention forward and backward."""
    model_flop: float
    elem_bytes: float
    act_bytes: float
    wgrad_bytes: float
    params_sharded: float
    params_replicated: float
    tp_fwd_s: float
    """Tensor-parallel collectives of the attention block, forward (backward: the same)."""
    tp_bytes: float
    """Bytes sent for those collectives, forward + backward."""
    kv_width: float
    """K and V elements per token on this GPU (what context parallelism passes around the ring)."""
    norm_elements: float = 0.0
    """Elements the block's own norms normalise (MLA's latent norms, QK norms), for eager pricing."""
    rope_elements: float = 0.0
    """Q and K elements rotated by RoPE, for eager pricing (:mod:`cost_models.elementwise`)."""
    core_kept_bytes: float = 0.0
    """The part of ``act_bytes`` core attention keeps for its own backward (unfused: the score
    matrix's softmax output, dropout mask and output; fused: the log-sum-exp), which selective
    recompute does not keep (Korthikanti et al. 2022 Sec. 5, Table 2: 34 sbh/t per layer instead of
    sbh(34/t + 5as/(ht)))."""
    working_bytes: float = 0.0
    """Bytes core attention allocates and frees within one pass on top of what it keeps: unfused
    attention's pre-softmax scores (:data:`cost_models.unfused_attention.UNFUSED_WORKING_BYTES` per
    score element; fused kernels keep their tiles on chip). A transient while the layer runs, not
    kept across micro-batches."""
    separate_norm_bytes: float = 0.0
    """The part of ``act_bytes`` that is the output of a separate input norm (MLA's ``TENorm``;
    MHA/GQA fuse the norm into the QKV GEMM), which the ``layernorm`` recompute module discards."""
    separate_norm_s: float = 0.0
    """Forward time of that norm (what the ``layernorm`` module re-runs)."""
    up_proj_bytes: float = 0.0
    """The part of ``act_bytes`` the ``mla_up_proj`` recompute module discards: MLA's queries, keys
    and values as its up projections and RoPE produce them (Megatron-Core
    ``MLASelfAttention.qkv_up_checkpoint``)."""
    up_proj_s: float = 0.0
    """Forward time of MLA's up projections and RoPE (what ``mla_up_proj`` re-runs)."""
    cp_fwd_s: float = 0.0
    """Context-parallel all-to-alls of a head-parallel mixer (Mamba-2, gated DeltaNet;
    :mod:`cost_models.ssm`) per direction; softmax attention's K/V ring is priced from ``kv_width``."""
    cp_bytes: float = 0.0
    """Bytes sent for those all-to-alls, forward + backward."""


FUSED_BACKWARD_FORWARDS = 2.5
"""A fused attention backward in forwards (FlashAttention-2, Dao 2023, Sec. 3.1.2: it recomputes the
scores, 2.5 forwards' FLOPs)."""


FLASH2_SPEED = (329.483 / 631.338, 318.0 / 518.0)
"""Speed of FlashAttention-2 kernels relative to the GPU's own fused attention kernel from Hopper
on, (forward, backward):

* forward: PyTorch SDPA's default backend (FlashAttention-2) ran a causal 24-head, 4,608-token,
  head-dim 128 forward at 329.5 TFLOP/s on an H100, cuDNN's fused attention at 631.3 and
  FlashAttention-3 at 631.8 (pytorch/pytorch issue #142132, PyTorch 2.6.0.dev20241204; the
  maintainers' answer: expected, cuDNN is not SDPA's default, pytorch/pytorch #141133);
* backward: FlashAttention-3's paper (Shah et al. 2024, arXiv:2407.08608), its figure "Attention
  backward speed, head dim 128 (H100 80GB SXM5)": FlashAttention-2 318 TFLOP/s, cuDNN 518 at 8k
  tokens (310 / 499 at 4k, 322 / 516 at 16k).

The paper's abstract puts FlashAttention-2 at 35% of an H100's peak and FlashAttention-3 at
1.5-2.0x it: FlashAttention-2 predates Hopper's asynchronous tensor-core instructions (wgmma, TMA)
and Blackwell's. PyTorch makes cuDNN SDPA's first choice on sm90 and sm100 only with cuDNN newer
than 9.15 (``check_prefer_cudnn_attention``, aten sdp_utils.cpp), which its 2.11 wheels bundle;
pytorch/pytorch #138522 had made cuDNN opt-in after the 2.5 release."""


def flash2_speed(gpu: GPUSpec) -> tuple[float, float]:
    """Speed of FlashAttention-2's kernels on ``gpu`` relative to its fused ones, (forward,
    backward): :data:`FLASH2_SPEED` from Hopper on (compute capability 9+); 1 on Ampere, where
    FlashAttention-2 is the fused kernel."""
    return FLASH2_SPEED if compute_capability_major(gpu.name) >= 9 else (1.0, 1.0)


FUSED_ATTENTION_MIN_COMPUTE_CAPABILITY = 8
"""Fused attention kernels run from Ampere (compute capability 8.0) on: Transformer Engine's cuDNN
backend asks for ``sm_arch_ >= 80`` (``nvte_get_fused_attn_backend``,
transformer_engine/common/fused_attn/fused_attn.cpp) and FlashAttention-2 for Ampere or later
(its README: "Ampere, Ada, or Hopper GPUs"), so on a V100 or T4 Transformer Engine's
``DotProductAttention`` falls back to its ``UnfusedDotProductAttention``, which keeps the score
matrix as Megatron-LM's ``ParallelAttention`` did."""


def attention_impl_on(job: JobSpec, gpu: GPUSpec) -> str:
    """The core attention ``job`` runs on ``gpu``: its ``attention_impl``, except that ``fused``
    below :data:`FUSED_ATTENTION_MIN_COMPUTE_CAPABILITY` (Volta, Turing) is ``unfused``, what
    Megatron-Core with Transformer Engine runs there. (PyTorch SDPA would pick its memory-efficient
    kernel, which keeps no score matrix: for a torchtitan job on those GPUs the memory is an upper
    bound.) A GPU without a CUDA compute capability (AMD Instinct, a GPU file planner does not
    name) keeps ``fused``."""
    major = compute_capability_major(gpu.name)
    if job.attention_impl == "fused" and 0 < major < FUSED_ATTENTION_MIN_COMPUTE_CAPABILITY:
        return "unfused"
    return job.attention_impl


def kernel_speed(job: JobSpec, gpu: GPUSpec, local: bool = False) -> tuple[float, float]:
    """Speed of the job's core-attention kernels relative to the fused ones of the GPU's efficiency
    family (its ``attention_efficiency``), (forward, backward): for fused kernels the GPU's own
    ``attention_kernel_speed`` (``local_attention_kernel_speed`` for a sliding-window layer;
    Blackwell Ultra's, measured with cuDNN, :class:`planner.inputs.cluster_spec.GPUSpec`); :func:`flash2_speed`
    for ``flash2`` (FlashAttention-2 on a Blackwell Ultra was not measured, so it is not credited
    with the fused kernels' gain)."""
    if job.attention_impl == "flash2":
        return flash2_speed(gpu)
    return gpu.local_attention_kernel_speed if local else gpu.attention_kernel_speed


def core_attention_s(
    fused_forward_s: float, job: JobSpec, gpu: GPUSpec, local: bool = False
) -> tuple[float, float]:
    """(forward, backward) seconds of the job's core-attention kernels, given the GPU's fused kernel
    forward time: the backward is :data:`FUSED_BACKWARD_FORWARDS` forwards, each pass at its
    :func:`kernel_speed` (``local``: a sliding-window layer)."""
    fwd_speed, bwd_speed = kernel_speed(job, gpu, local)
    return fused_forward_s / fwd_speed, FUSED_BACKWARD_FORWARDS * fused_forward_s / bwd_speed


def kernel_keys(span: float, job: JobSpec, c: ParallelConfig) -> float:
    """Keys per query of one fused-attention call (its efficiency, cost_models.compute): the span, at
    most the sequence chunk a context-parallel rank holds (the ring passes K/V in chunks of s / cp; a
    packed document of length L in chunks of L / cp, as Megatron-Core splits each THD sequence)."""
    return min(span, job.doc_length / c.cp)


def attention_block(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float
) -> AttentionBlock:
    """MHA/GQA attention (Korthikanti et al. 2022 Sec. 4): column-parallel QKV, row-parallel output
    projection, one all-reduce (AG + RS with SP) of the hidden states per direction. ``span``: keys
    per query in the non-causal convention (:meth:`ModelSpec.attention_span`)."""
    if model.multi_latent_attention:
        return _mla(model, job, c, node, span)
    gpu, prec = node.gpu, job.precision
    h, q, kv, t = model.hidden_size, model.query_projection_size, model.kv_projection_size, c.tp
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    kv_local = max(kv / t, model.kv_channels)  # with tp > groups, K/V heads are replicated
    qkv_n = q / t + 2 * kv_local
    # The QKV input is the input norm's output (TELayerNormColumnParallelLinear: quantized by the norm)
    recipe = job.fp8_recipe
    gemm = linear_s(T, qkv_n, h, gpu, prec, recipe=recipe, behind_norm=True)
    gemm += linear_s(T, h, q / t, gpu, prec, recipe=recipe)
    # Causal attention executed: half of the non-causal 2*T*span*(2q)/t per cp rank
    # (load-balanced ring, Megatron CP); span = s for full attention.
    if attention_impl_on(job, gpu) == "unfused":
        attn_fwd, attn_bwd, scores = unfused_core_attention(
            T,
            job.seq_length,
            model.num_attention_heads / t,
            model.kv_channels,
            gpu,
            prec,
            dropout=model.attention_dropout > 0,
        )
        kept = unfused_kept_bytes(model) * scores  # softmax output (with dropout: its mask and output)
        working = UNFUSED_WORKING_BYTES * scores
    else:
        fused = attention_s(T * span * model.core_attention_width / t, gpu, prec, kernel_keys(span, job, c))
        attn_fwd, attn_bwd = core_attention_s(fused, job, gpu, local=span < job.doc_length)
        kept = 4 * T * model.num_attention_heads / t  # fp32 log-sum-exp of flash attention
        working = 0.0
    model_flop = (
        3 * (2 * T * h * (q + 2 * kv) + 2 * T * q * h + 2 * T * span * model.core_attention_width) / t
    )
    # Memory-bound work (bytes): rotary on Q and K (read+write).
    rope_elements = T * (q / t + kv_local) if model.position_embedding_type == "rope" else 0.0
    elem = 2 * T * (q / t + kv_local) * ACT_BYTES if model.position_embedding_type == "rope" else 0.0
    g_in = gemm_input_bytes(job)
    act = T * h * g_in / sp_div  # QKV input (the norm's output, FP8 under FP8 recipes)
    act += T * qkv_n * ACT_BYTES + T * q / t * ACT_BYTES  # Q, K, V and attention output
    if g_in != ACT_BYTES:
        # The output projection keeps its own FP8 copy of its input (the attention output, which
        # core attention keeps in 16 bits for its backward); in 16 bits the two are one tensor.
        act += T * q / t * g_in
    act += kept  # what core attention keeps for its backward
    wgrad = (T * h + T * q / t) * g_in  # inputs of QKV and output projections
    params_sharded = (h * (q + 2 * kv) + q * h) / t
    if model.add_bias_linear or model.add_qkv_bias:
        params_sharded += (q + 2 * kv) / t
    params_replicated = float(h if model.add_bias_linear else 0)
    if model.qk_layernorm:
        params_replicated += 2 * model.kv_channels
    if model.softmax_type == "learnable":
        params_sharded += model.num_attention_heads / t  # one sink logit per head (gpt-oss)
    volume = T * h * ACT_BYTES
    return AttentionBlock(
        gemm=gemm,
        attn_fwd_s=attn_fwd,
        attn_bwd_s=attn_bwd,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_sharded=params_sharded,
        params_replicated=params_replicated,
        tp_fwd_s=tp_collectives_s(volume, c, node, 1),
        tp_bytes=4 * (t - 1) / t * volume if t > 1 else 0.0,
        kv_width=2 * kv_local,
        norm_elements=T * (q / t + kv_local) if model.qk_layernorm else 0.0,
        rope_elements=rope_elements,
        core_kept_bytes=kept,
        working_bytes=working,
    )


def _absorbed_products(
    tokens: float, heads: float, dn: int, rkv: int, dv: int, gpu: GPUSpec, precision: str
) -> LinearTimes:
    """MLA's absorbed up projections (Megatron-Core ``AbsorbedMLASelfAttention``): ``q_nope @
    W^UK`` (d -> r_kv) before core attention and the latent output ``@ W^UV`` (r_kv -> d_v) after
    it, each an ``einsum`` over the local heads, so one strided-batched GEMM per pass
    (:func:`cost_models.compute.batched_gemm_s`, 16-bit: Transformer Engine's FP8 does not reach an
    einsum): forward, input gradient and weight gradient."""

    def three(k_in: int, n_out: int) -> LinearTimes:
        return LinearTimes(
            batched_gemm_s(tokens, n_out, k_in, heads, gpu, precision, 0.0),
            batched_gemm_s(tokens, k_in, n_out, heads, gpu, precision, 0.0),
            batched_gemm_s(k_in, n_out, tokens, heads, gpu, precision, 0.0),
        )

    return three(dn, rkv) + three(rkv, dv)


def _mla(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float) -> AttentionBlock:
    """Multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1) sharded as Megatron-Core
    ``MLASelfAttention`` (megatron/core/transformer/multi_latent_attention.py, TE spec):

    * the down projections ``linear_q_down_proj`` (h -> r_q) and ``linear_kv_down_proj``
      (h -> r_kv + d_R) are ``duplicated`` (replicated on every tp rank, full weights); with
      sequence parallelism they run on the rank's own s/tp tokens, without it every rank repeats
      them on all tokens;
    * ``linear_q_up_proj`` (or ``linear_q_proj`` when ``q_lora_rank`` is 0) and
      ``linear_kv_up_proj`` are column-parallel (heads split over tp), ``linear_proj`` row-parallel;
    * communication per direction: with SP, all-gathers of the latents and the shared RoPE key
      (``T (r_q + r_kv + d_R)``, or ``T (h + r_kv + d_R)`` without query compression) and one
      reduce-scatter of ``T h``; without SP, one all-reduce of ``T h`` (forward) and of the latents'
      gradients (backward, taken equal in time to the forward pass's).

    FLOPs follow Megatron's ``num_floating_point_operations`` MLA branch (training.py): the
    projections, ``+ r_q + r_kv`` per token for the latent norms, and the core attention with
    query/key width ``d + d_R`` and value width ``d_v``.

    DeepSeek sparse attention (``model.is_dsa``) changes three things, as Megatron-Core's
    ``DSAttention`` over ``AbsorbedMLASelfAttention`` runs it: each query attends to its top-k keys
    (:func:`~planner.inputs.model_spec.sparse_attention_span` instead of ``span``; dense below k),
    in MLA's absorbed MQA form (W^UK applied to the queries and W^UV to the outputs, per head: the
    same FLOPs as ``linear_kv_up_proj``; the heads share the latent ``r_kv + d_R`` as K and V,
    :attr:`ModelSpec.core_attention_width`), and the lightning indexer
    (:func:`cost_models.sparse_attention.indexer_block`) adds its projections, scores, top-k and
    KL loss. Its scores and loss run beside the core attention (``attn_fwd_s`` / ``attn_bwd_s``).
    """
    gpu, prec = node.gpu, job.precision
    s = _mla_shape(model, job, c)
    T, T_local, a, t, dr = s.tokens, s.local_tokens, s.a, s.t, s.dr
    dsa = indexer_block(model, job, c, node, span) if model.is_dsa else None
    gemm, up = _mla_gemms(s, job, gpu, absorbed=dsa is not None)
    span, keys, local = _mla_span(model, job, c, span)
    kept = _mla_kept(s, job, absorbed=dsa is not None)
    if attention_impl_on(job, gpu) == "unfused" and dsa is None:
        # Megatron-Core's unfused DotProductAttention (--attention-backend unfused) over the
        # a / t local heads, Q K^T at the query/key width d + d_R and P V at d_v; the score
        # matrix's kept bytes replace the fused kernel's log-sum-exp.
        attn_fwd, attn_bwd, scores = unfused_core_attention(
            T, job.seq_length, a / t, s.dqk, gpu, prec, value_dim=s.dv, dropout=model.attention_dropout > 0
        )
        extra = unfused_kept_bytes(model) * scores - kept.lse_bytes
        kept = replace(kept, act_bytes=kept.act_bytes + extra, lse_bytes=kept.lse_bytes + extra)
        working = UNFUSED_WORKING_BYTES * scores
    else:
        working = 0.0
        fused = attention_s(T * span * model.core_attention_width / t, gpu, prec, keys)
        attn_fwd, attn_bwd = core_attention_s(fused, job, gpu, local=local)
    # Memory-bound: latent norms (read+write), rotary on the query and shared key RoPE parts.
    rope_bytes = 2 * T * (a * dr / t + dr) * ACT_BYTES
    params_sharded, params_replicated = _mla_params(s, model)
    tp_fwd, tp_bytes = _mla_tp_comm(s, c, node)
    block = AttentionBlock(
        gemm=gemm,
        attn_fwd_s=attn_fwd,
        attn_bwd_s=attn_bwd,
        model_flop=_mla_model_flop(s, model, span),
        elem_bytes=2 * T_local * (s.rq + s.rkv) * ACT_BYTES + rope_bytes,
        act_bytes=kept.act_bytes,
        wgrad_bytes=kept.wgrad_bytes,
        params_sharded=params_sharded,
        params_replicated=params_replicated,
        tp_fwd_s=tp_fwd,
        tp_bytes=tp_bytes,
        kv_width=a * (s.dqk + s.dv) / t,
        norm_elements=T_local * (s.rq + s.rkv),
        rope_elements=T * (a * dr / t + dr),
        core_kept_bytes=kept.lse_bytes,
        separate_norm_bytes=kept.norm_out_bytes,
        separate_norm_s=memory_bound_s(2 * T_local * s.h * ACT_BYTES, gpu),
        up_proj_bytes=kept.qkv_bytes,
        up_proj_s=up.forward_s + memory_bound_s(rope_bytes, gpu),
        working_bytes=working,
    )
    return block if dsa is None else _with_indexer(block, dsa, model)


@dataclass(frozen=True, slots=True)
class _MlaShape:
    """MLA's widths (DeepSeek-V2 Sec. 2.1 names) and tokens on one GPU for one micro-batch."""

    h: int
    """Hidden size."""
    a: int
    """Attention heads."""
    t: int
    """Tensor-parallel degree."""
    rq: int
    """Query latent rank (0: no query compression)."""
    rkv: int
    """Key/value latent rank."""
    dn: int
    """Query/key head width without RoPE."""
    dr: int
    """The RoPE part of the query/key head width, shared by the heads on the key side."""
    dv: int
    """Value head width."""
    tokens: float
    """Tokens per GPU and micro-batch (:func:`cost_models.tensors.tokens_per_gpu`)."""
    local_tokens: float
    """Tokens the duplicated down projections run on: the rank's own with sequence parallelism."""

    @property
    def dqk(self) -> int:
        """Query/key head width."""
        return self.dn + self.dr

    @property
    def q_in(self) -> int:
        """Input width of the column-parallel query projection."""
        return self.rq if self.rq else self.h


def _mla_shape(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> _MlaShape:
    T = tokens_per_gpu(job, c)
    sp_div = c.tp if c.sp else 1
    return _MlaShape(
        h=model.hidden_size,
        a=model.num_attention_heads,
        t=c.tp,
        rq=model.q_lora_rank,
        rkv=model.kv_lora_rank,
        dn=model.qk_head_dim,
        dr=model.qk_pos_emb_head_dim,
        dv=model.v_head_dim,
        tokens=T,
        local_tokens=T / sp_div,
    )


def _mla_gemms(
    s: _MlaShape, job: JobSpec, gpu: GPUSpec, *, absorbed: bool
) -> tuple[LinearTimes, LinearTimes]:
    """GEMM times (forward) of every projection, and of the up projections alone: the down
    projections (replicated), the up projections (absorbed under DeepSeek sparse attention) and
    the output projection (sharded)."""
    prec, recipe = job.precision, job.fp8_recipe
    h, a, t, T, T_local = s.h, s.a, s.t, s.tokens, s.local_tokens
    gemm = linear_s(T_local, s.rkv + s.dr, h, gpu, prec, recipe=recipe)
    if s.rq:
        gemm += linear_s(T_local, s.rq, h, gpu, prec, recipe=recipe)
    up = linear_s(T, a * s.dqk / t, s.q_in, gpu, prec, recipe=recipe)
    if absorbed:
        up += _absorbed_products(T, a / t, s.dn, s.rkv, s.dv, gpu, prec)
    else:
        up += linear_s(T, a * (s.dn + s.dv) / t, s.rkv, gpu, prec, recipe=recipe)
    gemm += up
    gemm += linear_s(T, h, a * s.dv / t, gpu, prec, recipe=recipe)
    return gemm, up


def _mla_span(model: ModelSpec, job: JobSpec, c: ParallelConfig, span: float) -> tuple[float, float, bool]:
    """Keys per query, keys per fused-attention call and whether the attention is local: a
    DeepSeek sparse attention query attends to its top-k keys, in one call."""
    if not model.is_dsa:
        return span, kernel_keys(span, job, c), span < job.doc_length
    topk = model.dsa_indexer_topk
    return sparse_attention_span(span, topk), min(float(topk), float(job.doc_length)), False


def _mla_model_flop(s: _MlaShape, model: ModelSpec, span: float) -> float:
    """Model FLOPs of forward + backward (Megatron's ``num_floating_point_operations`` MLA branch)."""
    h, a, rq, rkv = s.h, s.a, s.rq, s.rkv
    q_term = rq * (h + a * s.dqk + 1) if rq else h * a * s.dqk
    linear = q_term + rkv * (h + a * (s.dn + s.dv) + 1) + h * s.dr + a * s.dv * h
    return 3 * (2 * s.tokens * linear + 2 * s.tokens * span * model.core_attention_width) / s.t


@dataclass(frozen=True, slots=True)
class _MlaKept:
    """What MLA keeps for its backward (bytes), and the parts recompute modules discard."""

    act_bytes: float
    wgrad_bytes: float
    """The inputs the weight-gradient GEMMs read."""
    lse_bytes: float
    """What core attention keeps for its own backward: the fused kernel's fp32 log-sum-exp, or
    unfused attention's score-matrix bytes (:func:`unfused_kept_bytes`)."""
    norm_out_bytes: float
    """The input norm's output."""
    qkv_bytes: float
    """Q, K and V as the up projections produce them."""


def _mla_kept(s: _MlaShape, job: JobSpec, *, absorbed: bool) -> _MlaKept:
    """Activations kept for backward (Korthikanti-style, per tensor): the down projections' input,
    the latents (norm input and up-projection input, SP-sharded), the gathered RoPE key, Q, K
    (a heads of d + d_R), V (a heads of d_v), the attention output, and the fp32 log-sum-exp. The
    linear layers' inputs are kept as the GEMMs keep them (FP8 under FP8 recipes,
    cost_models.tensors.gemm_input_bytes), with the output projection's own FP8 copy of the
    attention output, as in the MHA/GQA block."""
    h, a, t, T, T_local = s.h, s.a, s.t, s.tokens, s.local_tokens
    rq, rkv, dr, dv = s.rq, s.rkv, s.dr, s.dv
    g_in = gemm_input_bytes(job)
    norm_out = T_local * h * g_in  # the input norm's output, kept by the down projections
    qkv = T * a * (2 * s.dqk + dv) / t * ACT_BYTES
    if absorbed:
        # Absorbed: the queries (a heads of r_kv + d_R) and q_nope (the W^UK product's input), the
        # shared latent K/V (r_kv + d_R, all heads), the latent output (W^UV's input).
        qkv = T * (a * (rkv + dr + s.dn + rkv) / t + rkv + dr) * ACT_BYTES
    act = norm_out
    act += T_local * (rq + rkv) * (ACT_BYTES + g_in) + T * dr * ACT_BYTES
    act += qkv + T * a * dv / t * ACT_BYTES
    if g_in != ACT_BYTES:
        act += T * a * dv / t * g_in
    lse = 4 * T * a / t
    act += lse
    return _MlaKept(
        act_bytes=act,
        wgrad_bytes=(T_local * (h + rq + rkv) + T * a * dv / t) * g_in,
        lse_bytes=lse,
        norm_out_bytes=norm_out,
        qkv_bytes=qkv,
    )


def _mla_params(s: _MlaShape, model: ModelSpec) -> tuple[float, float]:
    """Parameters on this GPU: sharded (the up and output projections, the sinks) and replicated
    (the duplicated down projections, the latent norms, the output bias)."""
    h, a, t, rq, rkv = s.h, s.a, s.t, s.rq, s.rkv
    params_sharded = ((rq * a * s.dqk) if rq else h * a * s.dqk) / t
    params_sharded += rkv * a * (s.dn + s.dv) / t + a * s.dv * h / t
    if model.softmax_type == "learnable":
        params_sharded += a / t
    params_replicated = float(h * (rq + rkv + s.dr))  # the duplicated down projections
    if model.qk_layernorm:
        params_replicated += rq + rkv
    if model.add_bias_linear:
        params_replicated += h
    return params_sharded, params_replicated


def _mla_tp_comm(s: _MlaShape, c: ParallelConfig, node: NodeGroup) -> tuple[float, float]:
    """Tensor-parallel time forward (backward: the same) and bytes (forward + backward): with SP
    the latents' all-gather and the hidden states' reduce-scatter, else the hidden states'
    all-reduce."""
    t = s.t
    if t <= 1:
        return 0.0, 0.0
    link = comm.link_for(group(c, "tp"), node)
    hidden = s.tokens * s.h * ACT_BYTES
    latents = s.tokens * (s.q_in + s.rkv + s.dr) * ACT_BYTES
    if c.sp:
        tp_fwd = comm.all_gather_s(latents, t, link) + comm.reduce_scatter_s(hidden, t, link)
    else:
        tp_fwd = comm.all_reduce_s(hidden, t, link)
    return tp_fwd, 2 * (t - 1) / t * (latents + hidden)


def with_side_block(
    block: AttentionBlock,
    side: AttentionBlock | IndexerBlock,
    core_s: tuple[float, float],
    **fields: float,
) -> AttentionBlock:
    """``block`` with a second block run beside it in the same layer (an SSM mixer beside attention,
    :func:`cost_models.ssm.parallel_block`; DSA's indexer beside MLA, :func:`_with_indexer`): the
    ``side`` block's projection GEMMs, model FLOPs, memory-bound bytes, kept activations and
    weight-gradient inputs added field by field, ``core_s`` (its forward and backward kernel seconds)
    added to the core attention's; ``fields`` are the fields each caller prices its own way
    (parameters, communication)."""
    return replace(
        block,
        gemm=block.gemm + side.gemm,
        attn_fwd_s=block.attn_fwd_s + core_s[0],
        attn_bwd_s=block.attn_bwd_s + core_s[1],
        model_flop=block.model_flop + side.model_flop,
        elem_bytes=block.elem_bytes + side.elem_bytes,
        act_bytes=block.act_bytes + side.act_bytes,
        wgrad_bytes=block.wgrad_bytes + side.wgrad_bytes,
        **fields,
    )


def _with_indexer(block: AttentionBlock, dsa: IndexerBlock, model: ModelSpec) -> AttentionBlock:
    """MLA's block with DeepSeek sparse attention's lightning indexer added: its projections, its
    scores beside the core attention, its gathers; K/V become the shared latent and the indexer's
    key."""
    return with_side_block(
        block,
        dsa,
        (dsa.score_fwd_s, dsa.score_bwd_s),
        params_replicated=block.params_replicated + dsa.params,
        tp_fwd_s=block.tp_fwd_s + dsa.gather_fwd_s,
        tp_bytes=block.tp_bytes + 2 * dsa.gather_bytes,
        kv_width=model.kv_lora_rank + model.qk_pos_emb_head_dim + model.dsa_indexer_head_dim,
    )
