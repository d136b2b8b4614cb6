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
* Memory-bound elementwise work: bytes at the GPU's HBM bandwidth; fused kernels by default, the
  job's eager op groups (``JobSpec.eager_ops``) at the bytes :mod:`cost_models.elementwise` derives
  from torchtitan's and PyTorch's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import communication as comm
from cost_models import elementwise, ssm
from cost_models import moe as moe_terms
from cost_models import recompute as op_sac
from cost_models.attention import AttentionBlock, attention_block
from cost_models.compute import LinearTimes, linear_s, memory_bound_s
from cost_models.flops import (
    hardware_flop_per_iteration,
    layer_flop_per_token,
    model_flop_per_iteration,
    model_flop_per_token,
    mtp_flop_per_token,
)
from cost_models.layer_blocks import NO_MLP, DenseMlp, dense_mlp, layer_comm
from cost_models.layer_cost import FIELD_NAMES, ZERO, LayerCost, LayerTable
from cost_models.parallel import DEFAULT_RECOMPUTE_MODULES, ParallelConfig
from cost_models.tensors import ACT_BYTES, tokens_per_gpu, tp_collectives_s
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.job_spec import QUANTIZED_PRECISIONS, JobSpec
from planner.inputs.model_spec import ModelSpec

__all__ = [
    # the FLOP counts live in cost_models.flops; they stay importable from here
    "hardware_flop_per_iteration",
    "layer_flop_per_token",
    "model_flop_per_iteration",
    "model_flop_per_token",
    "mtp_flop_per_token",
    # the layer cost record and table live in cost_models.layer_cost; they stay importable from here
    "ZERO",
    "LayerCost",
    "LayerTable",
    "layer_table",
    "loss_transient_bytes",
]


def _norm_params(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.normalization == "layernorm" else 1)


def layer_table(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerTable:
    """Costs of all layer kinds for configuration ``c`` on GPUs of ``node``."""
    embedding = _embedding(model, job, c, node)
    s = job.doc_length  # the sequence, or its packed documents (JobSpec.packed_avg_doc_len)
    full = float(s)
    local_layers = [i for i in range(model.num_layers) if model.is_local_attention_layer(i)]
    local = model.attention_span(local_layers[0], s) if local_layers else full
    dense = _decoder(model, job, c, node, moe=False, span=full)
    moe = _decoder(model, job, c, node, moe=True, span=full) if model.is_moe else ZERO
    mtp = _mtp(model, job, c, node) if model.mtp_num_layers else ZERO
    output = _output(model, job, c, node) + mtp
    parts = ()
    if model.has_layer_parts:
        kinds = sorted({model.layer_parts(i) for i in range(model.num_layers)})
        parts = tuple(
            (
                (mixer, ffn),
                _decoder(model, job, c, node, moe=ffn == "moe", span=full, mixer=mixer, mlp=bool(ffn)),
            )
            for mixer, ffn in kinds
        )
    return LayerTable(
        embedding=embedding,
        dense=dense,
        moe=moe,
        output=output,
        edges=embedding + output,
        dense_local=_decoder(model, job, c, node, moe=False, span=local) if local_layers else ZERO,
        moe_local=_decoder(model, job, c, node, moe=True, span=local)
        if local_layers and model.is_moe
        else ZERO,
        mtp=mtp,
        parts=parts,
    )


def loss_transient_bytes(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Memory live only while the loss runs on the last stage: the 16-bit logits beside their fp32 copy.

    Megatron-Core's ``compute_language_model_loss`` hands the 16-bit logits ``[s, b, V/t]`` to
    ``vocab_parallel_cross_entropy``, whose forward casts them to fp32
    (``VocabParallelCrossEntropy.calculate_logits_max``: ``vocab_parallel_logits.float()``). The fp32
    copy (4 T V/t bytes) is what :func:`_output` keeps for backward; the 16-bit logits (2 T V/t)
    stay alive beside it until the loss returns, and in backward the fp32 gradient is cast back to a
    16-bit one of the same size. So the last stage peaks 2 T V/t above its saved activations while
    the loss runs (one micro-batch at a time). Measured with megatron-core 0.19.2 on one H100
    (scripts/measure_memory.py; ``hardware_profiles/measurements/h100-sxm5-80gb-megatron-memory.yaml``):
    Llama 3 8B's layer shape and 128K vocabulary at 8,192 tokens peaks 2.0 GiB above the saved
    activations, 2 T V = 1.96 GiB. The logits GEMM stays 16-bit under FP8 recipes, so FP8 is the same.
    """
    return 2 * tokens_per_gpu(job, c) * model.vocab_size / c.tp


def _selective_modules(
    c: ParallelConfig, at: AttentionBlock, block: moe_terms.RoutedBlock | None, mlp: DenseMlp | None
) -> tuple[float, float]:
    """Selective recompute by module (Megatron-Core --recompute-modules): the forward time re-run in
    the backward and the activation bytes not kept, summed over the modules of
    ``c.recompute_modules`` this layer has (cost_models.parallel.RECOMPUTE_MODULES)."""
    parts = {"core_attn": (at.attn_fwd_s, at.core_kept_bytes)}
    parts["mla_up_proj"] = (at.up_proj_s, at.up_proj_bytes)
    norm_s, norm_bytes = at.separate_norm_s, at.separate_norm_bytes
    if block is not None:
        norm_s, norm_bytes = norm_s + block.norm_s, norm_bytes + block.input_bytes
        parts["moe_act"] = (block.act_fn_s, block.act_fn_bytes)
        parts["shared_experts"] = (block.shared_s, block.shared_bytes)
        parts["moe"] = (block.forward_s, block.act_bytes - block.input_bytes)
    else:
        parts["mlp"] = (mlp.forward_s, mlp.act_bytes)
    parts["layernorm"] = (norm_s, norm_bytes)
    modules = [m for m in c.recompute_modules or DEFAULT_RECOMPUTE_MODULES if m in parts]
    if "moe" in modules:
        # The whole MoE layer is checkpointed: its inner modules are rebuilt with it.
        modules = [m for m in modules if m not in ("moe_act", "shared_experts")]
    return sum(parts[m][0] for m in modules), sum(parts[m][1] for m in modules)


def _decoder(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    *,
    moe: bool,
    span: float,
    mixer: str = "attention",
    mlp: bool = True,
) -> LayerCost:
    """One decoder layer (dense or MoE MLP) attending over ``span`` keys: the attention block
    (:func:`cost_models.attention.attention_block`), the MLP (:func:`cost_models.layer_blocks.dense_mlp`,
    :func:`cost_models.moe.routed_block`), norms and residuals, tensor/context-parallel
    communication (:func:`cost_models.layer_blocks.layer_comm`) and the recompute terms. ``mixer`` (``mamba``, ``gdn``,
    ``kda``, ``""``; :func:`cost_models.ssm.mixer_block`) replaces the attention block,
    ``attention+mamba`` adds a Mamba-2 mixer beside it (:func:`cost_models.ssm.parallel_block`), and ``mlp=False``
    leaves the MLP out: a layer of a hybrid pattern holds one of the two, with its own norm and
    residual (Megatron-Core ``MambaLayer``, ``MLPLayer``, a ``TransformerLayer`` without MLP)."""
    h, t = model.hidden_size, c.tp
    T = tokens_per_gpu(job, c)
    sp_div = t if c.sp else 1
    norms = (mixer != "") + mlp  # one norm and one residual add per part

    # --- attention block and MLP / MoE --------------------------------------------------------
    at = _mixer_block(model, job, c, node, mixer, span)
    block, mlp_block = _mlp_blocks(model, job, c, node, T, sp_div, moe=moe, mlp=mlp)
    ffn = block if block is not None else mlp_block
    gemm = at.gemm + ffn.gemm
    act = (
        norms * T * h * ACT_BYTES / sp_div  # 2 norm inputs
        + norms * T * h * 1 / sp_div  # two dropout masks (1 byte), as Megatron's formula counts them
        + at.act_bytes
        + ffn.act_bytes
    )
    params_replicated = norms * _norm_params(model) + at.params_replicated
    if block is not None:
        params_replicated += block.params_replicated
    ep_s, ep_bytes = (block.ep_fwd_s, block.ep_bytes) if block is not None else (0.0, 0.0)

    passes = _passes(model, job, node, at, ffn, gemm, norms=norms, tokens=T, sp_div=sp_div)

    # --- tensor / context / expert parallel communication -----------------------------------------
    lc = layer_comm(model, job, c, node, at, gemm.forward_s, T, mlp)
    ep_s_fwd, ep_s_bwd = _expert_comm_s(job, node, passes, ep_s, moe=moe)
    fwd_comm = lc.tp_fwd_s + lc.cp_fwd_s + ep_s_fwd
    bwd_comm = lc.tp_bwd_s + lc.cp_bwd_s + ep_s_bwd
    selective_s, selective_bytes = _selective_modules(c, at, block, mlp_block)
    moe_host = block.host_launches if block is not None else (0.0, 0.0)
    forward, backward_input = _host_bound_s(node, passes, moe_host, fwd_comm, bwd_comm, moe=moe)
    return LayerCost(
        params_sharded=at.params_sharded + ffn.params_sharded,
        params_replicated=params_replicated,
        params_expert=block.params_expert if block is not None else 0.0,
        model_flop=at.model_flop + ffn.model_flop,
        forward_s=forward,
        backward_input_s=backward_input,
        backward_weight_s=passes.backward_weight_s,
        forward_comm_s=fwd_comm,
        backward_comm_s=bwd_comm,
        selective_recompute_s=selective_s,
        op_recompute_s=_op_recompute_s(model, c, node, gemm, passes, lc.tp_fwd_s, moe=moe),
        op_kept_bytes=op_sac.op_sac_kept_bytes(
            model, moe, tokens=T, tp=t, sequence_parallel=c.sp, ep=c.ep, act_bytes=ACT_BYTES
        ),
        activation_bytes=act,
        selective_dropped_bytes=selective_bytes,
        checkpoint_bytes=T * h * ACT_BYTES / sp_div,
        weight_grad_bytes=at.wgrad_bytes + ffn.wgrad_bytes,
        tp_comm_bytes=lc.tp_bytes,
        cp_comm_bytes=lc.cp_bytes,
        ep_comm_bytes=ep_bytes,
        working_bytes=at.working_bytes,
    )


def _mixer_block(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, mixer: str, span: float
) -> AttentionBlock:
    """The layer's token mixer: the attention block over ``span`` keys, a Mamba-2 mixer beside it
    (``attention+mamba``), or the mixer of :func:`cost_models.ssm.mixer_block` in its place."""
    if mixer == "attention":
        return attention_block(model, job, c, node, span)
    if mixer == "attention+mamba":  # side by side on the one normalised input (Falcon-H1)
        return ssm.parallel_block(model, job, c, node, attention_block(model, job, c, node, span))
    return ssm.mixer_block(model, job, c, node, mixer)


def _mlp_blocks(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    tokens: float,
    sp_div: int,
    *,
    moe: bool,
    mlp: bool,
) -> tuple[moe_terms.RoutedBlock | None, DenseMlp | None]:
    """The layer's MLP as (routed experts, dense MLP), one of them None: the routed experts of a
    MoE layer, else the dense MLP (:data:`~cost_models.layer_blocks.NO_MLP` for a layer without
    one)."""
    if moe and mlp:
        return moe_terms.routed_block(model, job, c, node, tokens, sp_div, ACT_BYTES), None
    return None, dense_mlp(model, job, c, node, tokens, sp_div) if mlp else NO_MLP


@dataclass(frozen=True, slots=True)
class _Passes:
    """A decoder layer's compute per pass, communication aside (seconds)."""

    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    elementwise_s: float
    """The fused elementwise forward: norms, residual adds, the blocks' own memory-bound work."""
    eager_s: float
    """What the job's eager op groups add to the forward."""


def _passes(
    model: ModelSpec,
    job: JobSpec,
    node: NodeGroup,
    at: AttentionBlock,
    ffn: moe_terms.RoutedBlock | DenseMlp,
    gemm: LinearTimes,
    *,
    norms: int,
    tokens: float,
    sp_div: int,
) -> _Passes:
    """Forward, input-gradient (B) and weight-gradient (W) times of the layer's kernels: GEMMs,
    attention, memory-bound elementwise work and the kernel overhead."""
    gpu = node.gpu
    h, T = model.hidden_size, tokens
    # Memory-bound work per layer forward (bytes): 2 norms (read+write), 2 residual adds (2 reads,
    # 1 write); with SP the norm/residual work is split over tp; plus the attention's and the MLP's.
    elem = (2 * norms * T * h + 3 * norms * T * h) * ACT_BYTES / sp_div + at.elem_bytes + ffn.elem_bytes
    elem_fwd = memory_bound_s(elem, gpu)
    # Eager op groups move more bytes than the fused kernels counted in `elem` (two norms, the
    # attention block's own norms and RoPE, the activation; cost_models.elementwise).
    eager = elementwise.eager_extra(
        model,
        job,
        norm_elements=norms * T * h / sp_div + at.norm_elements,
        rope_elements=at.rope_elements,
        ffn_elements=ffn.ffn_elements,
    )
    eager_fwd = memory_bound_s(eager.forward, gpu)
    overhead = gpu.efficiency.kernel_overhead_s
    forward = gemm.forward_s + at.attn_fwd_s + elem_fwd + eager_fwd + overhead
    # Backward: input-gradient GEMMs (same FLOPs as forward, their own shapes), all attention
    # backward, and the elementwise backward (twice the forward bytes when fused; the autograd
    # kernels' bytes when eager) go to B; weight-gradient GEMMs go to W.
    backward_input = (
        gemm.input_grad_s + at.attn_bwd_s + 2 * elem_fwd + memory_bound_s(eager.backward, gpu) + overhead
    )
    return _Passes(
        forward_s=forward,
        backward_input_s=backward_input,
        backward_weight_s=gemm.weight_grad_s,
        elementwise_s=elem_fwd,
        eager_s=eager_fwd,
    )


def _expert_comm_s(
    job: JobSpec, node: NodeGroup, passes: _Passes, ep_s: float, *, moe: bool
) -> tuple[float, float]:
    """The expert-parallel all-to-all time left exposed in the forward and in the backward."""
    if not (moe and ep_s and job.moe_a2a_overlap):
        return ep_s, ep_s
    # Each all-to-all runs under the other micro-batch's pass of the same layer (forward's under
    # a backward, backward's under a forward; Megatron-Core --overlap-moe-expert-parallel-comm).
    # Before Blackwell with tensor or context parallelism the launch gives it several hardware
    # queues (CUDA_DEVICE_MAX_CONNECTIONS 8, validate_args only warns; see layer_blocks.layer_comm).
    slow = node.gpu.efficiency.comm_overlap_slowdown
    return (
        comm.overlapped_s(ep_s, passes.backward_input_s + passes.backward_weight_s, slow),
        comm.overlapped_s(ep_s, passes.forward_s, slow),
    )


def _op_recompute_s(
    model: ModelSpec,
    c: ParallelConfig,
    node: NodeGroup,
    gemm: LinearTimes,
    passes: _Passes,
    tp_fwd_s: float,
    *,
    moe: bool,
) -> float:
    """Per-op selective recompute (cost_models.recompute): the backward re-runs the GEMMs the
    policy does not keep, every elementwise op, and the tensor-parallel all-gathers (all-reduces
    without sequence parallelism); the attention kernel and the reduce-scatters are kept."""
    return (
        op_sac.op_sac_recomputed_flop_fraction(model, moe) * gemm.forward_s
        + passes.elementwise_s
        + passes.eager_s
        + node.gpu.efficiency.kernel_overhead_s
        + (tp_fwd_s / 2 if c.sp else tp_fwd_s)
    )


def _host_bound_s(
    node: NodeGroup,
    passes: _Passes,
    moe_host: tuple[float, float],
    fwd_comm: float,
    bwd_comm: float,
    *,
    moe: bool,
) -> tuple[float, float]:
    """The forward and input-gradient times, at least the time the host takes to issue a MoE
    layer's kernels."""
    forward, backward_input = passes.forward_s, passes.backward_input_s
    if moe and node.gpu.efficiency.host_launch_s:
        # The dispatcher synchronises the host on the token counts every MoE layer, so the host
        # cannot run ahead by more than one layer: a pass takes at least the time to issue the
        # whole layer's kernels, attention included (cost_models.moe.host_launches).
        launch = node.gpu.efficiency.host_launch_s
        forward += max(0.0, moe_host[0] * launch - (forward + fwd_comm))
        backward_input += max(
            0.0, moe_host[1] * launch - (backward_input + passes.backward_weight_s + bwd_comm)
        )
    return forward, backward_input


def _embedding(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerCost:
    """Word (+ position) embedding on the first stage: a gather forward, a scatter-add backward."""
    T, h, t = tokens_per_gpu(job, c), model.hidden_size, c.tp
    sp_div = t if c.sp else 1
    gpu = node.gpu
    fwd = memory_bound_s(T * h * ACT_BYTES * 2, gpu)
    bwd = memory_bound_s(T * h * 4 * 2, gpu)
    pos = model.max_position_embeddings * h if model.position_embedding_type == "learned_absolute" else 0
    tp_fwd = tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2 if t > 1 else 0.0  # one AR / RS
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
    logits = linear_s(T, V / t, h, gpu, "bf16" if prec in QUANTIZED_PRECISIONS else prec)
    # Cross-entropy over fp32 logits: ~3 passes (max, exp-sum, gradient) over T x V/t floats.
    ce = memory_bound_s(3 * T * V / t * 4, gpu)
    norm = memory_bound_s(2 * T * h * ACT_BYTES / sp_div, gpu)
    # The final norm, eager when the job's norms are (torchtitan compiles per block, so its final
    # norm stays eager under torch.compile too: one norm in 2L + 1, priced fused there).
    eager = elementwise.eager_extra(
        model, job, norm_elements=T * h / sp_div, rope_elements=0.0, ffn_elements=0.0
    )
    tp_fwd = tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2 if t > 1 else 0.0
    return LayerCost(
        params_sharded=(V * h / t) if (model.untie_embeddings_and_output_weights or c.pp > 1) else 0.0,
        params_replicated=_norm_params(model),
        model_flop=3 * 2 * T * h * V / t,
        forward_s=logits.forward_s + ce + norm + memory_bound_s(eager.forward, gpu),
        backward_input_s=logits.input_grad_s + ce + norm + memory_bound_s(eager.backward, gpu),
        backward_weight_s=logits.weight_grad_s,
        forward_comm_s=tp_fwd,
        backward_comm_s=tp_fwd,
        activation_bytes=4 * T * h / sp_div + 4 * T * V / t,
        checkpoint_bytes=4 * T * h / sp_div + 4 * T * V / t,
        weight_grad_bytes=2 * T * h / sp_div,
    )


def _mtp(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerCost:
    """The multi-token prediction modules on the last stage (DeepSeek-V3 arXiv:2412.19437 Sec. 2.2;
    Megatron-Core ``MultiTokenPredictionBlock``, placed with the output layer): per module the
    embedding lookup of the shifted tokens, two RMSNorms and the column-parallel ``eh_proj``
    (2h -> h), one transformer layer of the last decoder layer's kind (full attention), and the
    shared output head with its own cross-entropy. With pp > 1 the last stage also holds a copy of
    the word embedding (Megatron builds ``embedding`` where ``mtp_process``; the output head is the
    main model's). Model FLOPs add Megatron's ``3 x 2 x (3h + 2h^2)`` for the norms and projection."""
    gpu, prec = node.gpu, job.precision
    T, h, t = tokens_per_gpu(job, c), model.hidden_size, c.tp
    sp_div = t if c.sp else 1
    last = model.num_layers - 1
    layer = _decoder(model, job, c, node, moe=model.is_moe_layer(last), span=float(job.seq_length))
    head = _output(model, job, c, node)
    emb = _embedding(model, job, c, node)
    proj = linear_s(T, h / t, 2 * h, gpu, prec, recipe=job.fp8_recipe)
    norms = memory_bound_s(3 * 2 * T * h * ACT_BYTES / sp_div, gpu)
    eager = elementwise.eager_extra(
        model, job, norm_elements=3 * T * h / sp_div, rope_elements=0.0, ffn_elements=0.0
    )
    module = LayerCost(
        params_sharded=2 * h * h / t,
        params_replicated=3 * _norm_params(model),
        model_flop=3 * 2 * T * (3 * h + 2 * h * h) / t,
        forward_s=proj.forward_s + norms + memory_bound_s(eager.forward, gpu),
        backward_input_s=proj.input_grad_s + 2 * norms + memory_bound_s(eager.backward, gpu),
        backward_weight_s=proj.weight_grad_s,
        forward_comm_s=tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2,
        backward_comm_s=tp_collectives_s(T * h * ACT_BYTES, c, node, 1) / 2,
        activation_bytes=(2 * T * h / sp_div + 2 * T * h / sp_div) * ACT_BYTES,
        checkpoint_bytes=2 * T * h / sp_div * ACT_BYTES,
        weight_grad_bytes=2 * T * h / sp_div * ACT_BYTES,
    )
    head_compute = LayerCost(
        *(0.0 if f.startswith("params_") else v for f, v in zip(FIELD_NAMES, head.astuple()))
    )
    lookup = LayerCost(*(0.0 if f.startswith("params_") else v for f, v in zip(FIELD_NAMES, emb.astuple())))
    total = (module + layer + head_compute + lookup).scaled(model.mtp_num_layers)
    if c.pp > 1:  # the embedding copy on the last stage (shared with the first stage's)
        total = total + LayerCost(params_sharded=model.vocab_size * h / t)
    return total
