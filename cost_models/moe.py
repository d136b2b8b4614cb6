"""Routed-expert (MoE) pricing terms: load imbalance, grouped GEMMs, the token dispatcher's
memory traffic, and the host time of an MoE layer; :func:`routed_block` assembles them into the
MoE MLP that :func:`cost_models.layers._decoder` adds to an MoE layer.

* **Load imbalance (dropless routing).** Each rank of the expert-parallel group holds ``E / ep``
  experts; the step waits on the rank that received the most routed token copies. Treating the
  ``m`` routed copies of a micro-batch as balls thrown into ``n = ep`` bins, the expected maximum
  load for ``m >> n ln n`` is ``m/n + sqrt(2 (m/n) ln n)`` (Raab & Steger, "Balls into bins -
  a simple and tight analysis", RANDOM 1998, Theorem 1), i.e. a factor
  ``1 + sqrt(2 ln n / (m/n))`` over the mean. An auxiliary-loss-balanced router is balanced in
  expectation (Fedus et al. 2021, Switch Transformer eq. 4; Megatron-Core ``moe_aux_loss_coeff``),
  so the per-micro-batch fluctuation is this multinomial one.
* **Capacity factor.** With ``moe_expert_capacity_factor = cf`` Megatron-Core drops the tokens an
  expert receives beyond ``cf`` times the mean (Megatron-Core MoE docs, "capacity factor"; Fedus et
  al. 2021 Sec. 2.2), so the busiest rank processes ``min(max load, cf)`` times the mean.
* **Grouped-GEMM tile quantisation.** A grouped GEMM computes each expert's rows in whole tiles;
  MegaBlocks (Gale et al. 2022, arXiv 2211.15841, Sec. 5.1) pads every expert's token count to a
  multiple of its 128-row block. For token counts not aligned to the tile, the expected padding is
  half a tile per expert (uniform remainder), and an expert with any tokens costs at least one tile.
* **Grouped-GEMM weight traffic.** A grouped GEMM reads every local expert's weight (forward, input
  gradient) or writes its gradient (weight gradient) however few tokens each expert has, so its time
  is at least that traffic at the rate the GPU's GEMMs stream weights (the roofline; Williams,
  Waterman & Patterson, CACM 2009; the rate is measured, ``GPUSpec.gemm_stream_bandwidth``):
  :func:`grouped_linear_s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models import communication as comm
from cost_models.compute import (
    ELEMENT_BYTES,
    LinearTimes,
    fp8_cast_s,
    gemm_s,
    linear_s,
    memory_bound_s,
    quantize_bytes,
)
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import gemm_input_bytes
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.job_spec import QUANTIZED_PRECISIONS, JobSpec
from planner.inputs.model_spec import ModelSpec

GROUPED_GEMM_TILE_ROWS = 128
"""Rows per tile of a grouped GEMM (MegaBlocks' block size, Gale et al. 2022 Sec. 5.1)."""


def max_load_factor(routed_copies: float, bins: int) -> float:
    """Expected busiest-bin load over the mean, for ``routed_copies`` balls in ``bins`` bins.

    Raab & Steger 1998, Theorem 1 (heavily loaded case): ``max ~ m/n + sqrt(2 (m/n) ln n)``.
    One bin (no expert parallelism) has no imbalance across ranks: factor 1.
    """
    if bins <= 1 or routed_copies <= 0:
        return 1.0
    mean = routed_copies / bins
    return 1.0 + math.sqrt(2.0 * math.log(bins) / mean)


def routed_load_factor(routed_copies: float, ep: int, capacity_factor: float | None) -> float:
    """Load of the busiest expert-parallel rank over the balanced mean.

    Dropless routing: :func:`max_load_factor`. With a capacity factor the excess is dropped, so the
    factor is capped at ``capacity_factor`` (Fedus et al. 2021 Sec. 2.2).
    """
    f = max_load_factor(routed_copies, ep)
    if capacity_factor:
        f = min(f, capacity_factor)
    return f


def grouped_gemm_rows(tokens_per_expert: float, tile: int = GROUPED_GEMM_TILE_ROWS) -> float:
    """Rows one expert's GEMM computes: its tokens plus the expected padding of its last tile.

    At least one whole tile when the expert has tokens (MegaBlocks, arXiv 2211.15841 Sec. 5.1).
    """
    if tokens_per_expert <= 0:
        return 0.0
    return max(float(tile), tokens_per_expert + tile / 2.0)


WGRAD_ACCUMULATE_BYTES = 8.0
"""HBM bytes per weight element of a training weight-gradient GEMM's output: Megatron-Core
accumulates it into the FP32 ``main_grad`` buffer inside the GEMM (``--gradient-accumulation-fusion``,
on by default; Transformer Engine ``GroupedLinear(fuse_wgrad_accumulation=True)``: the GEMM runs
with beta 1 on ``main_grad``), reading and writing 4 bytes per element. Measured on an H100, FP32
accumulation traffic streams at the GPU's measured rate (``torch.addmm`` with an FP32 output, 16
bytes per element as it copies first: docs/calibration.md, "MoE grouped GEMMs in three passes")."""


def grouped_traffic_bytes(
    tokens: float, local_experts: float, n_out: float, k_in: float, precision: str, wgrad_out_bytes: float
) -> tuple[float, float, float]:
    """HBM bytes of one MoE linear's three grouped GEMMs (forward, input gradient, weight gradient)
    over ``local_experts`` experts with ``tokens`` tokens each: every expert's ``k_in x n_out``
    weight read at the GEMM input width (:data:`cost_models.compute.ELEMENT_BYTES`; FP8 weights are
    cast once per step), or its gradient written at ``wgrad_out_bytes`` per element, plus the
    activations read (input width) and written (2 bytes; tile padding is computed, not loaded)."""
    b = ELEMENT_BYTES.get(precision, 2)
    m = tokens * local_experts
    weights = local_experts * k_in * n_out
    return (
        weights * b + m * (k_in * b + 2.0 * n_out),
        weights * b + m * (n_out * b + 2.0 * k_in),
        weights * wgrad_out_bytes + m * (k_in + n_out) * b,
    )


def grouped_linear_s(
    rows: float,
    local_experts: float,
    n_out: float,
    k_in: float,
    gpu: GPUSpec,
    precision: str,
    recipe: str = "tensorwise",
    wgrad_out_bytes: float = WGRAD_ACCUMULATE_BYTES,
    tokens_per_expert: float | None = None,
) -> LinearTimes:
    """The three GEMMs of one MoE linear over ``local_experts`` experts with ``rows`` (tile-padded)
    rows each, priced as one grouped kernel: forward and input gradient as one GEMM over all
    experts' rows, the weight gradients as one GEMM producing every expert's ``k_in x n_out`` block
    (same FLOPs, all tiles in one launch), each at least its HBM traffic
    (:func:`grouped_traffic_bytes`, for ``tokens_per_expert`` unpadded tokens, default ``rows``) at
    the rate the GPU's GEMMs stream weights (``GPUSpec.gemm_stream_bandwidth``): with few tokens
    per expert the kernel streams weights, not FLOPs. Against ``torch._grouped_mm`` timed from CUDA
    graphs on an H100 and an H200 (three passes, five published expert shapes, 16-8,192 tokens per
    expert, even and uneven routing; docs/calibration.md, "MoE grouped GEMMs in three passes";
    hardware_profiles/measurements/h*-grouped-gemm.json), FLOPs alone price 64 tokens per expert or
    fewer 1.3-1.6x fast; with the floor the median error is 5-7% and the p90 18-23% (6% / 16%
    against Transformer Engine's per-expert path on 4 streams); pricing each expert as its own GEMM
    was 1.7-1.9x slow. The FLOP term is divided by the GPU's fitted ``grouped_gemm_efficiency``
    (what of the MoE layer it stands for: ``EfficiencySpec.grouped_gemm_efficiency``). FP8 adds the
    quantization of every expert's input and output gradient at the FP8 ``recipe``'s bytes
    (cost_models.compute.fp8_cast_bytes). ``wgrad_out_bytes``: the weight gradient's output bytes
    per element (:data:`WGRAD_ACCUMULATE_BYTES` in training; 2 for a plain BF16 output)."""
    if rows <= 0 or local_experts <= 0:
        return LinearTimes()
    m = rows * local_experts
    g = gpu.efficiency.grouped_gemm_efficiency
    tokens = rows if tokens_per_expert is None else tokens_per_expert
    traffic = grouped_traffic_bytes(tokens, local_experts, n_out, k_in, precision, wgrad_out_bytes)
    stream = gpu.gemm_stream_bandwidth()
    flops = (
        gemm_s(m, n_out, k_in, gpu, precision),
        gemm_s(m, k_in, n_out, gpu, precision),
        gemm_s(k_in, n_out * local_experts, rows, gpu, precision),
    )
    times = LinearTimes(*(max(t / g, b / stream) for t, b in zip(flops, traffic, strict=True)))
    if precision not in QUANTIZED_PRECISIONS:
        return times
    # every expert's input and output gradient quantized (TE GroupedLinear, multi-tensor cast)
    per_element = quantize_bytes(precision, recipe)
    return times + LinearTimes(
        fp8_cast_s(m * k_in, gpu, per_element), fp8_cast_s(m * n_out, gpu, per_element)
    )


def remote_domain_copies(num_experts: int, topk: int, ep: int, members_per_domain: int) -> float:
    """Expected number of other NVLink domains one token's ``topk`` experts fall in, with the ``ep``
    ranks ``members_per_domain`` to a domain, the experts spread evenly over the ranks, and the
    top-k a uniform draw without repetition (a balanced router): each of the other ``D - 1``
    domains holds ``E / D`` experts and is missed with probability C(E - E/D, k) / C(E, k). This
    is the number of network copies a domain-forwarding dispatcher sends per token
    (:func:`cost_models.communication.forwarded_all_to_all_s`), against ``k (D - 1) / D`` for a
    plain all-to-all."""
    domains = max(1, ep // max(1, members_per_domain))
    if domains <= 1 or topk <= 0:
        return 0.0
    per_domain = num_experts // domains
    miss = math.comb(num_experts - per_domain, topk) / math.comb(num_experts, topk)
    return (domains - 1) * (1.0 - miss)


def dispatch_traffic(routed: float, topk: int, dispatcher: str, sort_chunks: bool) -> float:
    """HBM traffic of one forward of the token dispatcher (both directions: dispatch and combine),
    in hidden-state rows read or written, for ``routed`` token copies on this GPU.

    * ``alltoall`` (Megatron-Core ``MoEAlltoAllTokenDispatcher``, megatron/core/transformer/moe/
      token_dispatcher.py with ``moe_utils.permute`` / ``unpermute`` / ``sort_chunks_by_idxs``):
      permute the local tokens into expert order (read and write every copy: 2), after the
      all-to-all sort the received chunks by local expert (2; only with several local experts and
      expert parallelism), the reverse sort before the combine all-to-all (2), and unpermute: read
      every copy, write the probability-weighted sum per token (1 + 1/topk).
    * ``allgather`` (``MoEAllGatherTokenDispatcher``): gather the local experts' copies out of the
      all-gathered tokens (2) and scatter-add them back (1 + 1/topk); no sort.
    * ``flex`` (DeepEP / HybridEP, ``MoEFlexTokenDispatcher``): the communication kernels write the
      received tokens in expert order and reduce on the way back (DeepEP README, "normal kernels"
      for training), so only the copies' write on dispatch and read on combine remain (2).
    The backward moves the same rows (cost_models.layers charges elementwise backward at twice the
    forward's bytes, which covers the gradient's reads and writes)."""
    if dispatcher == "flex":
        rows = 2.0
    elif dispatcher == "allgather":
        rows = 3.0 + 1.0 / max(1, topk)
    else:
        rows = 2.0 + (4.0 if sort_chunks else 2.0) + 1.0 + 1.0 / max(1, topk)
    return rows * routed


MOE_LAUNCHES = {
    # part: (forward kernels, backward kernels), eager Megatron-Core with Transformer Engine
    "router": (11, 12),
    "preprocess": (8, 0),
    "dispatch": (6, 6),
    "experts": (6, 8),
    "residual": (1, 1),
}
"""Kernels one MoE layer launches outside its expert GEMMs and its attention, per part and pass,
counted on Megatron-Core's MoE layer (megatron/core/transformer/moe/moe_layer.py, router.py,
token_dispatcher.py, experts.py ``TEGroupedMLP``) with its fusions on (``--moe-router-fusion``,
``--moe-permute-fusion``): the pre-MLP norm (``TransformerLayer.pre_mlp_layernorm``, a TENorm, and
its two backward kernels), the router's gating GEMM, fused top-k/score function and auxiliary-loss
kernels and their gradients; the dispatcher's preprocess (token counts per expert, their
all-to-all or all-gather, the device-to-host copy it synchronises on); permute, all-to-all, sort and
their reverses; the experts' FP8 casts and fused activation; the MLP's residual add
(``mlp_bda``). The expert GEMMs come on top: one per local expert and linear under Transformer
Engine's multi-stream grouped GEMM (:func:`host_launches`)."""

ATTENTION_LAUNCHES = (7, 11)
"""Kernels the attention half of a decoder layer launches, (forward, backward), counted on
Megatron-Core's ``TransformerLayer._forward_attention`` with the Transformer Engine layer spec
(megatron/core/transformer/transformer_layer.py, attention.py ``SelfAttention``): the input norm
fused into the QKV GEMM (``TELayerNormColumnParallelLinear``: norm and GEMM), RoPE on queries and
keys (two fused kernels), the fused attention kernel, the output projection and the residual add
(``self_attn_bda``): 7 forward. Backward: the two GEMMs' input and weight gradients (4), the
attention backward with its dO.O preprocess (2), RoPE (2), the norm's input and weight gradients
(2) and the residual (1): 11. Query/key norms (``--qk-layernorm``) add one kernel each forward and
two backward; multi-latent attention's four projections (q down/up, kv down/up) and latent norm
replace the one QKV GEMM: 4 more forward, 8 backward (:func:`attention_launches`)."""

MOE_GRAPH_PARTS = {
    "moe": ("router", "preprocess", "dispatch", "experts"),
    "moe_router": ("router",),
    "moe_preprocess": ("preprocess",),
    "attn": ("attention",),
    "full_iteration": ("attention", "router", "preprocess", "dispatch", "experts", "residual"),
}
"""The parts of an MoE layer each CUDA-graph scope captures (Megatron-Core ``--cuda-graph-scope``
help and ``TransformerLayer._get_submodules_under_cudagraphs``: ``attn`` the input norm and
self-attention, ``moe`` the pre-MLP norm and the whole MoE MLP, ``moe_router`` the pre-MLP norm and
the router, ``moe_preprocess`` ``MoELayer.preprocess()``, ``full_iteration`` everything); ``full``
(whole dense layers) captures nothing of an MoE layer."""


def attention_launches(model: ModelSpec) -> tuple[float, float]:
    """Kernels the attention half of one decoder layer launches, (forward, backward)
    (:data:`ATTENTION_LAUNCHES`, with query/key norms and multi-latent attention's projections)."""
    fwd, bwd = ATTENTION_LAUNCHES
    if model.qk_layernorm:
        fwd, bwd = fwd + 2, bwd + 4
    if model.multi_latent_attention:
        fwd, bwd = fwd + 4, bwd + 8
    return float(fwd), float(bwd)


def host_launches(
    local_experts: float,
    dispatcher: str,
    scope: tuple[str, ...],
    attention: tuple[float, float] = ATTENTION_LAUNCHES,
) -> tuple[float, float]:
    """Kernels the host issues for one MoE decoder layer, (forward, backward).

    The dispatcher synchronises the host on the token counts once per MoE layer, so between two
    synchronisations the host issues one whole layer: its ``attention`` half
    (:func:`attention_launches`), :data:`MOE_LAUNCHES`, and the expert GEMMs: Transformer Engine's
    ``GroupedLinear`` issues one cuBLAS GEMM per local expert (``multi_stream_cublas_gemm``,
    TransformerEngine transformer_engine/common/gemm/cublaslt_gemm.cu), two linears forward (fc1,
    fc2) and their input and weight gradients backward. The flex dispatcher's fused kernels replace
    permute and sort (4 of the 6 dispatch kernels per pass). A part a CUDA-graph ``scope`` captures
    is one graph launch instead."""
    captured = {part for s in scope for part in MOE_GRAPH_PARTS.get(s, ())}
    parts = {"attention": attention, **MOE_LAUNCHES}
    fwd = bwd = 0.0
    for part, (f, b) in parts.items():
        if part == "dispatch" and dispatcher == "flex":
            f, b = f - 4, b - 4
        if part == "experts":
            f, b = f + 2 * local_experts, b + 4 * local_experts
        if part in captured:
            f, b = min(f, 1), min(b, 1)
        fwd += f
        bwd += b
    return fwd, bwd


@dataclass(frozen=True, slots=True)
class SharedExperts:
    """The shared experts of one MoE layer (every token passes them; a dense MLP of width
    ``moe_shared_expert_intermediate_size``, tensor-parallel like the dense MLP) for one
    micro-batch on one GPU. Times in seconds, sizes in bytes."""

    gemm: LinearTimes
    model_flop: float
    act_bytes: float
    """Activations they keep (what the ``shared_experts`` recompute module discards)."""
    forward_s: float
    """Their forward time (what ``shared_experts`` re-runs)."""
    params_sharded: float
    ffn_elements: float
    """Elements of their activation function's input, for the eager elementwise term."""


def shared_experts(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    tokens: float,
    sp_div: int,
    act_bytes: int,
) -> SharedExperts | None:
    """The shared experts of an MoE layer (None without them): ``tokens`` per GPU per micro-batch,
    ``sp_div`` = tp with sequence parallelism, ``act_bytes`` per activation element."""
    fs = model.moe_shared_expert_intermediate_size
    if not fs:
        return None
    gpu, prec, recipe = node.gpu, job.precision, job.fp8_recipe
    T, h, t = tokens, model.hidden_size, c.tp
    n_in = 2 if model.gated else 1
    g_in = gemm_input_bytes(job)
    shared = linear_s(T, n_in * fs / t, h, gpu, prec, recipe=recipe)
    shared += linear_s(T, h, fs / t, gpu, prec, recipe=recipe)
    # fc1's input is the router's (counted there) in 16 bits; FP8 recipes keep an FP8 copy too
    shared_bytes = n_in * T * fs / t * act_bytes + T * fs / t * g_in
    if g_in != act_bytes:
        shared_bytes += T * h / sp_div * g_in
    return SharedExperts(
        gemm=shared,
        model_flop=3 * 2 * T * h * fs * (n_in + 1) / t,
        act_bytes=shared_bytes,
        forward_s=shared.forward_s + memory_bound_s((n_in + 1) * T * fs / t * act_bytes, gpu),
        params_sharded=(n_in + 1) * h * fs / t,
        ffn_elements=T * fs / t,
    )


@dataclass(frozen=True, slots=True)
class TokenDispatch:
    """Expert-parallel communication of one MoE layer's pass (dispatch + combine), before any
    overlap, on the busiest rank."""

    pass_s: float
    bytes_sent: float
    """Bytes each GPU sends for it, forward + backward."""


def token_dispatch(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    tokens: float,
    sp_div: int,
    act_bytes: int,
    load: float,
) -> TokenDispatch:
    """The all-to-all (or, for the allgather dispatcher, all-gather + reduce-scatter) that moves the
    hidden states of ``tokens / sp_div`` tokens per GPU over the expert-parallel group, the busiest
    rank receiving ``load`` times the mean (:func:`routed_load_factor`); nothing when ep = 1."""
    ep = c.ep
    if ep <= 1:
        return TokenDispatch(0.0, 0.0)
    T, h, k, E = tokens, model.hidden_size, model.moe_router_topk, model.num_experts
    link = comm.link_for(group(c, "ep"), node)
    if job.moe_dispatcher == "allgather":
        # all-gather every rank's tokens, reduce-scatter the expert outputs back
        # (Megatron-Core MoEAllGatherTokenDispatcher)
        gathered = ep * (T / sp_div) * h * act_bytes
        ep_s = comm.all_gather_s(gathered, ep, link) + comm.reduce_scatter_s(gathered, ep, link)
        return TokenDispatch(ep_s, 4 * gathered * (ep - 1) / ep)
    # dispatch + combine, each moving every routed token copy's hidden state
    # (the busiest rank receives `load` times the mean)
    volume = (T / sp_div) * k * load * h * act_bytes
    if job.moe_dispatcher == "flex":
        # DeepEP / HybridEP send a token once per remote domain and forward it over NVLink
        remote = remote_domain_copies(E, k, ep, link.members_per_domain)
        ep_s = 2 * comm.forwarded_all_to_all_s(volume, ep, link, remote / k)
    else:
        ep_s = 2 * comm.all_to_all_s(volume, ep, link)
    return TokenDispatch(ep_s, 4 * volume * (ep - 1) / ep)


@dataclass(frozen=True, slots=True)
class RoutedBlock:
    """The MoE MLP of one decoder layer for one micro-batch on one GPU (router, routed experts,
    shared experts, token dispatch): what :func:`cost_models.layers._decoder` adds to the layer."""

    gemm: LinearTimes
    """Router, grouped expert and shared-expert GEMMs."""
    model_flop: float
    elem_bytes: float
    """Memory-bound bytes of one forward (router softmax/top-k, expert activation, dispatch)."""
    act_bytes: float
    wgrad_bytes: float
    params_expert: float
    params_replicated: float
    params_sharded: float
    ffn_elements: float
    """Elements of the activation's input (routed and shared), for the eager elementwise term."""
    ep_fwd_s: float
    """Expert-parallel communication of one pass (dispatch + combine), before any overlap."""
    ep_bytes: float
    host_launches: tuple[float, float]
    """Kernels the host issues for the whole MoE layer, (forward, backward) (:func:`host_launches`)."""
    forward_s: float = 0.0
    """Forward time of the whole block (GEMMs, memory-bound kernels, dispatch and combine), what
    the ``moe`` recompute module re-runs."""
    input_bytes: float = 0.0
    """The block's input as the router keeps it (the pre-MLP norm's output, 16-bit): the part of
    ``act_bytes`` the ``moe`` recompute module keeps, and the ``layernorm`` module discards."""
    norm_s: float = 0.0
    """Forward time of the separate pre-MLP norm (``TENorm``; what ``layernorm`` re-runs)."""
    act_fn_bytes: float = 0.0
    """The routed experts' activation output, fc2's input: what ``moe_act`` discards."""
    act_fn_s: float = 0.0
    """Forward time of the routed experts' activation function (what ``moe_act`` re-runs)."""
    shared_bytes: float = 0.0
    """Activations the shared experts keep (what ``shared_experts`` discards; their input stays)."""
    shared_s: float = 0.0
    """Forward time of the shared experts (what ``shared_experts`` re-runs)."""


def routed_block(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    tokens: float,
    sp_div: int,
    act_bytes: int,
) -> RoutedBlock:
    """Price the MoE MLP of one layer: ``tokens`` per GPU per micro-batch (``sp_div`` = tp with
    sequence parallelism), ``act_bytes`` per activation element.

    Each GPU starts with ``tokens / sp_div`` tokens; the expert-tensor-parallel group gathers etp of
    those sets, so a GPU processes P token copies with experts sliced etp ways (balanced routing).
    The busiest expert-parallel rank sets the pace (dropless: balls-into-bins maximum load; a
    capacity factor caps it, :func:`routed_load_factor`). The grouped GEMM computes each expert's
    rows in whole tiles (:func:`grouped_gemm_rows`), all local experts in one grouped call
    (:func:`grouped_linear_s`); the dispatcher's traffic is :func:`dispatch_traffic`; the
    all-to-all (or, for the allgather dispatcher, all-gather + reduce-scatter) moves the hidden
    states over the expert-parallel group (:func:`token_dispatch`); the shared experts are
    :func:`shared_experts`."""
    gpu, prec = node.gpu, job.precision
    T, h, t = tokens, model.hidden_size, c.tp
    n_in = 2 if model.gated else 1
    E, k, fe = model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size
    etp, ep = c.expert_tp, c.ep
    P_mean = (T / sp_div) * etp * k
    load = routed_load_factor(P_mean * ep, ep, model.moe_expert_capacity_factor)
    P = P_mean * load
    local_experts = E / ep
    tokens = P * ep / E
    rows = grouped_gemm_rows(tokens)
    gemm = linear_s(T / sp_div, E, h, gpu, "bf16")  # router
    recipe = job.fp8_recipe
    # the weight gradient accumulates into FP32 main_grad inside the GEMM, or (unfused) writes a
    # 16-bit gradient that cost_models.estimate adds in a separate pass
    out_bytes = WGRAD_ACCUMULATE_BYTES if job.gradient_accumulation_fusion else 2.0
    for n_out, k_in in ((n_in * fe / etp, h), (h, fe / etp)):
        gemm += grouped_linear_s(rows, local_experts, n_out, k_in, gpu, prec, recipe, out_bytes, tokens)
    elem = 3 * (T / sp_div) * E * 4  # router softmax + top-k over fp32 logits (~3 passes)
    model_flop = 3 * (2 * T * h * E / sp_div + 2 * (T * k / t) * h * fe * (n_in + 1))
    elem += (n_in + 1) * P * fe / etp * act_bytes  # the experts' activation
    sort_chunks = ep > 1 and local_experts > 1
    elem += dispatch_traffic(P, k, job.moe_dispatcher, sort_chunks) * h * act_bytes
    # The grouped GEMMs keep their inputs as the dense ones do (FP8 under FP8 recipes,
    # cost_models.tensors.gemm_input_bytes); fc1's output, the activation's input, in 16 bits.
    g_in = gemm_input_bytes(job)
    act_fn_bytes = P * fe / etp * g_in  # fc2's input
    act = P * h * g_in + P * n_in * fe / etp * act_bytes + act_fn_bytes
    act += T * E * 4 / sp_div  # router logits/probabilities (fp32)
    # The router GEMM keeps its input, the pre-MLP norm's output (a separate TENorm in MoE layers,
    # Megatron-Core's TE layer spec), in 16 bits for its weight gradient.
    input_bytes = T * h / sp_div * act_bytes
    act += input_bytes
    wgrad = (P * h + P * fe / etp) * g_in
    ffn_elements = P * fe / etp
    params_sharded = 0.0
    shared_bytes = shared_s = 0.0
    shared = shared_experts(model, job, c, node, T, sp_div, act_bytes)
    if shared is not None:
        ffn_elements += shared.ffn_elements
        gemm += shared.gemm
        model_flop += shared.model_flop
        act += shared.act_bytes
        params_sharded = shared.params_sharded
        shared_bytes, shared_s = shared.act_bytes, shared.forward_s
    dispatch = token_dispatch(model, job, c, node, T, sp_div, act_bytes, load)
    ep_s = dispatch.pass_s
    return RoutedBlock(
        gemm=gemm,
        model_flop=model_flop,
        elem_bytes=elem,
        act_bytes=act,
        wgrad_bytes=wgrad,
        params_expert=E * (n_in + 1) * h * fe / (etp * ep),
        params_replicated=h * E,
        params_sharded=params_sharded,
        ffn_elements=ffn_elements,
        ep_fwd_s=ep_s,
        ep_bytes=dispatch.bytes_sent,
        host_launches=host_launches(
            local_experts, job.moe_dispatcher, job.cuda_graph_scope, attention_launches(model)
        ),
        forward_s=gemm.forward_s + memory_bound_s(elem, gpu) + ep_s,
        input_bytes=input_bytes,
        norm_s=memory_bound_s(2 * T * h / sp_div * act_bytes, gpu),
        act_fn_bytes=act_fn_bytes,
        act_fn_s=memory_bound_s((n_in + 1) * P * fe / etp * act_bytes, gpu),
        shared_bytes=shared_bytes,
        shared_s=shared_s,
    )
