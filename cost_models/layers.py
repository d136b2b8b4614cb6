"""Per-layer cost table: parameters, FLOPs (F, B, W), activations, communication, per micro-batch.

One :class:`LayerCost` per layer *kind* (embedding, dense decoder layer, MoE decoder layer,
output layer and loss), for one GPU of one pipeline stage, one micro-batch. A stage's cost is the
sum over its layers. Sources:

* FLOPs: Narayanan et al. 2021 (arXiv:2104.04473) eq. (3) and Megatron-LM
  ``megatron/training/training.py: num_floating_point_operations`` (model FLOPs: GEMMs, non-causal
  attention, backward = 2 x forward, logits included). Executed attention is causal (half),
  and flash-attention's backward does 5 matmuls to the forward's 2 (Dao 2023, FlashAttention-2,
  arXiv:2307.08691, Sec. 3.1), so it is 2.5 x forward.
* Activations: Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4, Table 2, generalised to GQA
  (K and V of width groups x head dim), gated MLPs (two input projections) and MoE (routed token
  copies); flash attention keeps no s^2 buffers (only a fp32 log-sum-exp per head and token).
* Communication volumes: Megatron tensor parallelism, 2 all-reduces (or all-gather +
  reduce-scatter with sequence parallelism) per layer per direction (Korthikanti et al. Sec. 4.2.2);
  context parallelism as a ring over K/V chunks (Liu et al. 2023, Ring Attention,
  arXiv:2310.01889); expert parallelism as two all-to-alls per direction (Lepikhin et al. 2020,
  GShard, arXiv:2006.16668).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from cost_models import communication as comm
from cost_models.compute import attention_s, gemm_s, memory_bound_s
from cost_models.parallel import ParallelConfig, group
from planner.specs import JobSpec, ModelSpec, NodeGroup

ACT_BYTES = 2
"""Bytes per activation element (16-bit activations, also under FP8 recipes)."""


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Cost of one layer for one micro-batch on one GPU. Times in seconds, sizes in bytes."""

    params_sharded: float = 0.0
    """Parameters on this GPU that tensor parallelism shards (already divided by tp)."""
    params_replicated: float = 0.0
    """Parameters every tensor-parallel rank holds in full (norms, router, position table)."""
    params_expert: float = 0.0
    """Routed-expert parameters on this GPU (divided by expert tp x ep)."""
    model_flop: float = 0.0
    """Model FLOPs of forward + backward on this GPU (Megatron convention; no recompute)."""
    forward_s: float = 0.0
    """Forward compute time."""
    backward_input_s: float = 0.0
    """Backward time for input gradients (B); includes all attention backward."""
    backward_weight_s: float = 0.0
    """Backward time for weight gradients (W)."""
    forward_comm_s: float = 0.0
    """Exposed tensor/context/expert-parallel communication in forward."""
    backward_comm_s: float = 0.0
    """Exposed tensor/context/expert-parallel communication in backward."""
    selective_recompute_s: float = 0.0
    """Extra backward time with selective recompute (core attention forward again)."""
    activation_bytes: float = 0.0
    """Activations kept for backward without recompute."""
    checkpoint_bytes: float = 0.0
    """Activations kept with full recompute (the layer input)."""
    weight_grad_bytes: float = 0.0
    """Part of ``activation_bytes`` needed only by the weight-gradient pass (freed by W)."""
    tp_comm_bytes: float = 0.0
    """Bytes each GPU sends for tensor parallelism per micro-batch (forward + backward)."""
    cp_comm_bytes: float = 0.0
    """Bytes each GPU sends for context parallelism per micro-batch (forward + backward)."""
    ep_comm_bytes: float = 0.0
    """Bytes each GPU sends in expert all-to-alls per micro-batch (forward + backward)."""

    def __add__(self, other: LayerCost) -> LayerCost:
        return LayerCost(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def scaled(self, k: float) -> LayerCost:
        """This cost times ``k`` (k identical layers)."""
        return LayerCost(*(a * k for a in self.astuple()))

    def astuple(self) -> tuple[float, ...]:
        """Field values in declaration order."""
        return tuple(getattr(self, name) for name in _FIELD_NAMES)

    @property
    def params(self) -> float:
        """All parameters on this GPU."""
        return self.params_sharded + self.params_replicated + self.params_expert

    @property
    def recompute_forward_s(self) -> float:
        """Time of re-running this layer's forward (full recompute)."""
        return self.forward_s + self.forward_comm_s


_FIELD_NAMES = tuple(f.name for f in fields(LayerCost))
ZERO = LayerCost()


@dataclass(frozen=True, slots=True)
class LayerTable:
    """The cost of every layer kind under one configuration, for one micro-batch."""

    embedding: LayerCost
    dense: LayerCost
    moe: LayerCost
    output: LayerCost
    edges: LayerCost
    """Embedding + output layer (what the first and last stages add), precomputed."""

    def decoder(self, model: ModelSpec, index: int) -> LayerCost:
        """Cost of decoder layer ``index``."""
        return self.moe if model.is_moe_layer(index) else self.dense


def _norm_params(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.normalization == "layernorm" else 1)


def _tp_collectives_s(volume: float, c: ParallelConfig, node: NodeGroup, count: int) -> float:
    """``count`` all-reduces (or AG+RS pairs with SP, same time) of ``volume`` bytes over tp."""
    if c.tp == 1:
        return 0.0
    link = comm.link_for(group(c, "tp"), node)
    if c.sp:
        return count * (comm.all_gather_s(volume, c.tp, link) + comm.reduce_scatter_s(volume, c.tp, link))
    return count * comm.all_reduce_s(volume, c.tp, link)


def layer_table(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerTable:
    """Costs of all layer kinds for configuration ``c`` on GPUs of ``node``."""
    embedding, output = _embedding(model, job, c, node), _output(model, job, c, node)
    return LayerTable(
        embedding=embedding,
        dense=_decoder(model, job, c, node, moe=False),
        moe=_decoder(model, job, c, node, moe=True) if model.is_moe else ZERO,
        output=output,
        edges=embedding + output,
    )


def tokens_per_gpu(job: JobSpec, c: ParallelConfig) -> float:
    """Tokens of one micro-batch held by one GPU (sequence split by cp)."""
    return c.micro_batch_size * job.seq_length / c.cp


def p2p_activation_bytes(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Bytes one GPU sends to the next pipeline stage per micro-batch: the hidden states, split over
    tp with sequence parallelism (Megatron's scatter-gather of pipeline sends)."""
    return tokens_per_gpu(job, c) * model.hidden_size * ACT_BYTES / (c.tp if c.sp else 1)


def _decoder(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, *, moe: bool) -> LayerCost:
    gpu, prec = node.gpu, job.precision
    h, q, kv, t = model.hidden_size, model.query_projection_size, model.kv_projection_size, c.tp
    T = tokens_per_gpu(job, c)
    s = job.seq_length
    sp_div = t if c.sp else 1
    n_in = 2 if model.gated else 1
    kv_local = max(kv / t, model.kv_channels)  # with tp > groups, K/V heads are replicated

    # --- attention block ---------------------------------------------------------------------
    qkv_n = q / t + 2 * kv_local
    gemm_fwd = gemm_s(T, qkv_n, h, gpu, prec) + gemm_s(T, h, q / t, gpu, prec)
    # Causal attention executed: half of 4*T*s*q/t per cp rank (load-balanced ring, Megatron CP).
    attn_exec_flop = 2 * T * s * q / t
    attn_fwd = attention_s(attn_exec_flop, gpu, prec)
    attn_bwd = 2.5 * attn_fwd
    model_flop = 3 * (2 * T * h * (q + 2 * kv) + 2 * T * q * h + 4 * T * s * q) / t

    # Memory-bound work per layer forward (bytes): 2 norms (read+write), 2 residual adds (2 reads,
    # 1 write), rotary on Q and K (read+write); with SP the norm/residual work is split over tp.
    elem = (4 * T * h + 6 * T * h) * ACT_BYTES / sp_div
    if model.position_embedding_type == "rope":
        elem += 2 * T * (q / t + kv_local) * ACT_BYTES

    act = (2 * T * h + T * h) * ACT_BYTES / sp_div  # 2 norm inputs, QKV input
    act += 2 * T * h * 1 / sp_div  # two dropout masks (1 byte), as Megatron's formula counts them
    act += T * qkv_n * ACT_BYTES + T * q / t * ACT_BYTES  # Q, K, V and attention output
    act += 4 * T * model.num_attention_heads / t  # fp32 log-sum-exp of flash attention
    wgrad_act = (T * h + T * q / t) * ACT_BYTES  # inputs of QKV and output projections

    params_sharded = (h * (q + 2 * kv) + q * h) / t
    if model.add_bias_linear:
        params_sharded += (q + 2 * kv) / t
    elif model.add_qkv_bias:
        params_sharded += (q + 2 * kv) / t
    params_replicated = 2 * _norm_params(model) + (h if model.add_bias_linear else 0)
    if model.qk_layernorm:
        params_replicated += 2 * model.kv_channels
    params_expert = 0.0
    ep_bytes = 0.0
    ep_s_fwd = 0.0

    # --- MLP / MoE -----------------------------------------------------------------------------
    if not moe:
        f = model.ffn_hidden_size
        gemm_fwd += gemm_s(T, n_in * f / t, h, gpu, prec) + gemm_s(T, h, f / t, gpu, prec)
        model_flop += 3 * 2 * T * h * f * (n_in + 1) / t
        elem += (n_in + 1) * T * f / t * ACT_BYTES
        act += T * h * ACT_BYTES / sp_div + (n_in * T * f + T * f) / t * ACT_BYTES  # fc1 in, fc1 out, act out
        wgrad_act += (T * h + T * f / t) * ACT_BYTES
        params_sharded += (n_in + 1) * h * f / t + ((n_in * f) / t + h if model.add_bias_linear else 0)
    else:
        E, k, fe = model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size
        etp, ep = c.expert_tp, c.ep
        cf = model.moe_expert_capacity_factor or 1.0
        # Each GPU starts with T/sp_div tokens; the expert-tensor-parallel group gathers etp of those
        # sets, so a GPU processes P token copies with experts sliced etp ways (balanced routing).
        P = (T / sp_div) * etp * k * cf
        local_experts = E / ep
        tok_per_expert = P * ep / E
        gemm_fwd += gemm_s(T / sp_div, E, h, gpu, "bf16")  # router
        gemm_fwd += gemm_s(tok_per_expert, n_in * fe / etp, h, gpu, prec, count=local_experts)
        gemm_fwd += gemm_s(tok_per_expert, h, fe / etp, gpu, prec, count=local_experts)
        model_flop += 3 * (2 * T * h * E / sp_div + 2 * (T * k / t) * h * fe * (n_in + 1))
        elem += (n_in + 1) * P * fe / etp * ACT_BYTES + 4 * P * h * ACT_BYTES  # activation, permutes
        act += P * h * ACT_BYTES + P * (n_in + 1) * fe / etp * ACT_BYTES
        act += T * E * 4 / sp_div  # router logits/probabilities (fp32)
        wgrad_act += (P * h + P * fe / etp) * ACT_BYTES
        params_expert = E * (n_in + 1) * h * fe / (etp * ep)
        params_replicated += h * E
        if model.moe_shared_expert_intermediate_size:
            fs = model.moe_shared_expert_intermediate_size
            gemm_fwd += gemm_s(T, n_in * fs / t, h, gpu, prec) + gemm_s(T, h, fs / t, gpu, prec)
            model_flop += 3 * 2 * T * h * fs * (n_in + 1) / t
            act += (n_in + 1) * T * fs / t * ACT_BYTES
            params_sharded += (n_in + 1) * h * fs / t
        if ep > 1:
            # dispatch + combine, each moving every routed token copy's hidden state
            volume = (T / sp_div) * k * cf * h * ACT_BYTES
            link = comm.link_for(group(c, "ep"), node)
            ep_s_fwd = 2 * comm.all_to_all_s(volume, ep, link)
            ep_bytes = 4 * volume * (ep - 1) / ep

    # --- tensor / context parallel communication --------------------------------------------------
    tp_volume = T * h * ACT_BYTES
    tp_fwd = _tp_collectives_s(tp_volume, c, node, 2)
    tp_bytes = 4 * 2 * (t - 1) / t * tp_volume if t > 1 else 0.0
    cp_fwd = cp_bwd = cp_bytes = 0.0
    if c.cp > 1:
        chunk = T * 2 * kv_local * ACT_BYTES  # this rank's K and V
        link = comm.link_for(group(c, "cp"), node)
        ring_fwd = (c.cp - 1) * comm.p2p_s(chunk, link)
        ring_bwd = (c.cp - 1) * comm.p2p_s(2 * chunk, link)  # K/V and their gradients
        # The ring overlaps with the attention of the chunk already received (Ring Attention).
        cp_fwd = max(0.0, ring_fwd - attn_fwd * (c.cp - 1) / c.cp)
        cp_bwd = max(0.0, ring_bwd - attn_bwd * (c.cp - 1) / c.cp)
        cp_bytes = (c.cp - 1) * 3 * chunk

    elem_fwd = memory_bound_s(elem, gpu)
    overhead = gpu.efficiency.kernel_overhead_s
    forward = gemm_fwd + attn_fwd + elem_fwd + overhead
    # Backward: input-gradient GEMMs (same FLOPs as forward), all attention backward, and the
    # elementwise backward (twice the forward bytes) go to B; weight-gradient GEMMs go to W.
    backward_input = gemm_fwd + attn_bwd + 2 * elem_fwd + overhead
    backward_weight = gemm_fwd
    return LayerCost(
        params_sharded=params_sharded,
        params_replicated=params_replicated,
        params_expert=params_expert,
        model_flop=model_flop,
        forward_s=forward,
        backward_input_s=backward_input,
        backward_weight_s=backward_weight,
        forward_comm_s=tp_fwd + cp_fwd + ep_s_fwd,
        backward_comm_s=tp_fwd + cp_bwd + ep_s_fwd,
        selective_recompute_s=attn_fwd,
        activation_bytes=act,
        checkpoint_bytes=T * h * ACT_BYTES / sp_div,
        weight_grad_bytes=wgrad_act,
        tp_comm_bytes=tp_bytes,
        cp_comm_bytes=cp_bytes,
        ep_comm_bytes=ep_bytes,
    )


def _embedding(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerCost:
    """Word (+ position) embedding on the first stage: a gather forward, a scatter-add backward."""
    T, h, t = tokens_per_gpu(job, c), model.hidden_size, c.tp
    sp_div = t if c.sp else 1
    gpu = node.gpu
    fwd = memory_bound_s(T * h * ACT_BYTES * 2, gpu)
    bwd = memory_bound_s(T * h * 4 * 2, gpu)
    pos = model.max_position_embeddings * h if model.position_embedding_type == "learned_absolute" else 0
    tp_fwd = _tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2 if t > 1 else 0.0  # one AR / RS
    return LayerCost(
        params_sharded=model.vocab_size * h / t,
        params_replicated=pos,
        forward_s=fwd,
        backward_input_s=0.0,
        backward_weight_s=bwd,
        forward_comm_s=tp_fwd,
        activation_bytes=(8 * T + T * h) / sp_div,  # token ids (int64) and the dropout mask
        checkpoint_bytes=(8 * T + T * h) / sp_div,
    )


def _output(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerCost:
    """Final norm, output projection and cross-entropy on the last stage."""
    gpu, prec = node.gpu, job.precision
    T, h, t, V = tokens_per_gpu(job, c), model.hidden_size, c.tp, model.vocab_size
    sp_div = t if c.sp else 1
    # The output GEMM stays in 16-bit under Transformer Engine's FP8 recipes.
    logits = gemm_s(T, V / t, h, gpu, "bf16" if prec == "fp8" else prec)
    # Cross-entropy over fp32 logits: ~3 passes (max, exp-sum, gradient) over T x V/t floats.
    ce = memory_bound_s(3 * T * V / t * 4, gpu)
    norm = memory_bound_s(2 * T * h * ACT_BYTES / sp_div, gpu)
    tp_fwd = _tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2 if t > 1 else 0.0
    return LayerCost(
        params_sharded=(V * h / t) if (model.untie_embeddings_and_output_weights or c.pp > 1) else 0.0,
        params_replicated=_norm_params(model),
        model_flop=3 * 2 * T * h * V / t,
        forward_s=logits + ce + norm,
        backward_input_s=logits + ce + norm,
        backward_weight_s=logits,
        forward_comm_s=tp_fwd,
        backward_comm_s=tp_fwd,
        activation_bytes=4 * T * h / sp_div + 4 * T * V / t,
        checkpoint_bytes=4 * T * h / sp_div + 4 * T * V / t,
        weight_grad_bytes=2 * T * h / sp_div,
    )


def model_flop_per_iteration(model: ModelSpec, job: JobSpec) -> float:
    """Model FLOPs of one iteration (Megatron's ``num_floating_point_operations``; no recompute).

    For a GPT with ffn = 4h and MHA this is ``72 B s L h^2 (1 + s/(6h) + V/(12 L h))``
    (Narayanan et al. 2021; Korthikanti et al. 2022 eq. 7).
    """
    h, q, kv, s = model.hidden_size, model.query_projection_size, model.kv_projection_size, job.seq_length
    n_in = 2 if model.gated else 1
    per_token = 0.0
    for i in range(model.num_layers):
        per_token += 2 * h * (q + 2 * kv) + 2 * q * h + 4 * s * q
        if model.is_moe_layer(i):
            per_token += 2 * h * model.num_experts
            per_token += model.moe_router_topk * 2 * h * model.moe_ffn_hidden_size * (n_in + 1)
            per_token += 2 * h * model.moe_shared_expert_intermediate_size * (n_in + 1)
        else:
            per_token += 2 * h * model.ffn_hidden_size * (n_in + 1)
    per_token += 2 * h * model.vocab_size
    return 3 * per_token * job.tokens_per_step


def hardware_flop_per_iteration(
    model: ModelSpec, job: JobSpec, recompute: str, recomputed_fraction: float = 1.0
) -> float:
    """Model FLOPs plus the forward passes that recomputation repeats (hardware FLOPs, HFU).

    Full recompute of every layer repeats each decoder layer's forward (a third of its model
    FLOPs), giving Narayanan et al. 2021 eq. (3): ``96 B s L h^2 (1 + s/(6h) + V/(16 L h))`` for GPT.
    Selective recompute repeats the attention score and value products, ``4 s q`` per token per
    layer (Korthikanti et al. 2022 eq. 8).
    """
    model_flop = model_flop_per_iteration(model, job)
    if recompute == "full":
        logits = 3 * 2 * model.hidden_size * model.vocab_size * job.tokens_per_step
        return model_flop + recomputed_fraction * (model_flop - logits) / 3
    if recompute == "selective":
        return (
            model_flop
            + 4 * job.seq_length * model.query_projection_size * model.num_layers * job.tokens_per_step
        )
    return model_flop
