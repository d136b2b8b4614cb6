"""Fine-tuning with LoRA adapters on a frozen base (``JobSpec.finetune == "lora"``): what the frozen
weights no longer cost and what the adapters add, per decoder layer and for the embedding and the
output layer, as a transformation of the pre-training :class:`cost_models.layers.LayerTable`.

Sources, each the code that runs the term:

* **Frozen base.** Megatron-Bridge's ``PEFT.freeze_model`` (``src/megatron/bridge/peft/base.py``) sets
  ``requires_grad = False`` on every base parameter. Transformer Engine then neither runs the
  weight-gradient GEMM of a frozen linear layer nor keeps its input for one
  (``transformer_engine/pytorch/module/linear.py`` and ``layernorm_linear.py``: ``backward_needs_input
  = is_grad_enabled and weight.requires_grad``; the wgrad GEMM runs only ``if ctx.requires_wgrad``),
  and Megatron-Core's ``DistributedDataParallel`` allocates gradient buffers, buckets and optimizer
  state only for parameters with ``requires_grad`` (``megatron/core/distributed/
  distributed_data_parallel.py``: ``if param.requires_grad``): the frozen weights keep their 16-bit
  (or FP8, ``JobSpec.frozen_weight_dtype``) copy and nothing else. The embedding's scatter-add and
  the output layer's weight gradient go too.
* **Adapters.** ``LoRALinear`` (``src/megatron/bridge/peft/lora_layers.py``) adds
  ``ParallelLinearAdapter(x) * alpha / dim`` to the wrapped layer's output, with ``x`` the input of
  the wrapped layer (the norm's output for ``TELayerNormColumnParallelLinear``). The adapter
  (``src/megatron/bridge/peft/utils.py``) is two Megatron-Core ``tensor_parallel`` linears (plain
  16-bit GEMMs: not Transformer Engine modules, so no FP8), sharded like the base layer:

  - beside a column-parallel layer (``linear_qkv``, ``linear_fc1``): ``linear_in`` a
    ``ColumnParallelLinear(h, r, gather_output=True)`` (A split over the rank, its output all-gathered)
    and ``linear_out`` a ``ColumnParallelLinear(r, out)`` (B split like the base output). With
    sequence parallelism the base returns its already gathered norm output
    (``return_layernorm_output_gathered``, "perf optimization for LoRA + SP") unless
    ``--tp-comm-overlap`` takes the gather into userbuffers, when the adapter gathers again
    (``gather_from_sequence_parallel_region``) and reduce-scatters its input gradient; without
    sequence parallelism ``linear_in``'s input gradient is all-reduced over tp;
  - beside a row-parallel layer (``linear_proj``, ``linear_fc2``): ``linear_in`` a
    ``RowParallelLinear(in, r, input_is_parallel=True)`` (all-reduce of the r-wide output) and
    ``linear_out`` a ``ColumnParallelLinear(r, h, gather_output=True)`` (all-gather of the
    h-wide output, scattered back to the sequence-parallel region, whose backward all-gathers the
    gradient; ``linear_out``'s input gradient is all-reduced).

  Each adapter GEMM (forward, input and weight gradient) is priced by :func:`adapter_gemm_s`: the
  GEMM size curve of :mod:`cost_models.compute`, floored by the HBM traffic of its operands, since
  a GEMM with one side of width r does about r FLOPs per byte, far below any GPU's ridge point; the
  adapters' parameters, gradients, optimizer state and data-parallel reduction are the only
  trained ones (:class:`cost_models.layers.LayerCost` ``params_*``; the frozen weights are
  ``frozen_weight_bytes``). Their backward keeps each ``linear_in``'s input (16-bit; beside
  ``linear_proj`` the attention output core attention keeps anyway) and each r-wide intermediate.
* **Model FLOPs** (MFU's numerator): Megatron-Bridge's LoRA count
  (``src/megatron/bridge/training/utils/flop_utils.py``, ``transformer_flops``): the frozen GEMMs at
  2/3 of training (forward and input gradient, no weight gradient) and core attention in full,
  plus the adapters' own GEMMs (three passes), which Bridge leaves out (under 0.1% at rank 16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models import communication as comm
from cost_models.adapters import adapter_shapes
from cost_models.attention import attention_block
from cost_models.compute import LinearTimes, gemm_efficiency, linear_s, memory_bound_s
from cost_models.layer_cost import LayerCost, LayerTable
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu, tp_collectives_s
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import COMPUTE_DTYPE, DTYPE_BYTES, JobSpec
from planner.inputs.model_spec import ModelSpec


def unsupported_reason(model: object, job: JobSpec) -> str:
    """Why planner cannot price ``job``'s LoRA adapters on ``model`` ('' when it can): the adapters
    are priced for dense decoder layers with MHA/GQA attention (no routed experts, latent attention,
    multi-token prediction modules, Mamba or linear-attention mixers, output gates) and chain models."""
    if not job.is_lora:
        return ""
    if not isinstance(model, ModelSpec):
        return "finetune lora is priced for chain models (decoder layers), not graph models"
    what = [
        name
        for name, present in (
            ("MoE layers", model.is_moe),
            ("multi-latent attention", model.multi_latent_attention),
            ("multi-token prediction modules", bool(model.mtp_num_layers)),
            ("Mamba or linear-attention layers", bool(getattr(model, "hybrid_layer_pattern", ""))),
            ("gated attention outputs", bool(getattr(model, "attention_output_gate", False))),
        )
        if present
    ]
    if what:
        return (
            f"finetune lora is priced for dense decoder layers with MHA/GQA attention; "
            f"model {model.name} has {' and '.join(what)}"
        )
    return ""


def check_model(model: object, job: JobSpec, where: str) -> None:
    """Raise a one-line SpecError naming ``where`` when :func:`unsupported_reason` says why."""
    reason = unsupported_reason(model, job)
    if reason:
        raise SpecError(f"{where}: {reason}")


def adapter_gemm_s(m: float, n: float, k: float, gpu: GPUSpec, precision: str) -> float:
    """Time of one (m x k) @ (k x n) GEMM of an adapter, one of whose dimensions is the rank r: its
    FLOPs at the GPU's size curve (:func:`cost_models.compute.gemm_efficiency`, which already prices
    a small GEMM far below peak), but never faster than reading its two operands and writing its
    output in 16 bits at the GPU's HBM bandwidth (the roofline, Williams et al. 2009, "Roofline: an
    insightful visual performance model", CACM 52(4); NVIDIA's "Matrix Multiplication Background
    User's Guide", Sec. "Understanding Performance": a GEMM whose arithmetic intensity, about r FLOPs
    per byte here, is below the GPU's FLOPs-to-bandwidth ratio is memory limited). The tile and wave
    quantization of :func:`cost_models.compute.gemm_quantization` is not applied: it assumes the GPU
    file's large-GEMM tile, whose r-wide use would charge 128/r times the work, where such a GEMM is
    bound by its memory traffic instead."""
    flop = 2.0 * m * n * k
    if flop <= 0:
        return 0.0
    compute = flop / (gpu.peak(precision) * gemm_efficiency(flop, gpu))
    return max(compute, memory_bound_s((m * k + k * n + m * n) * ACT_BYTES, gpu))


def adapter_linear_s(tokens: float, n_out: float, k_in: float, gpu: GPUSpec, precision: str) -> LinearTimes:
    """Forward ``Y = X W``, input gradient ``dX = dY W^T`` and weight gradient ``dW = X^T dY`` of one
    adapter linear ``k_in -> n_out`` over ``tokens`` rows (:func:`adapter_gemm_s` each)."""
    return LinearTimes(
        adapter_gemm_s(tokens, n_out, k_in, gpu, precision),
        adapter_gemm_s(tokens, k_in, n_out, gpu, precision),
        adapter_gemm_s(k_in, n_out, tokens, gpu, precision),
    )


@dataclass(frozen=True, slots=True)
class AdapterTerms:
    """The adapters of one decoder layer for one micro-batch on one GPU. Times in seconds, sizes in
    bytes."""

    params: float
    """Trained parameters on this GPU."""
    gemm: LinearTimes
    """A's and B's forward, input-gradient and weight-gradient GEMMs."""
    forward_elem_s: float
    """The scale by alpha / r and the add to the base output."""
    backward_elem_s: float
    """The scale's gradient and the adapter's input gradient added to the base layer's."""
    forward_comm_s: float
    backward_comm_s: float
    comm_bytes: float
    """Bytes this GPU sends for the adapters' tensor-parallel collectives (forward + backward)."""
    kept_bytes: float
    """Activations the adapters keep for their weight gradients: A's inputs not kept anyway, and the
    r-wide intermediates."""
    forward_flop: float
    """Forward FLOPs on this GPU."""


def _sent(kind: str, size: float, n: int) -> float:
    """Bytes one rank sends in a ring collective producing (or reducing) ``size`` bytes over ``n``."""
    if n <= 1:
        return 0.0
    return (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n * size


def adapter_terms(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> AdapterTerms:
    """The adapters of one decoder layer (:func:`adapter_shapes`) under configuration ``c``: 16-bit
    GEMMs over the layer's ``T`` tokens on this GPU (the whole micro-batch chunk; sequence
    parallelism gathers it before the base GEMMs too), the elementwise scale and adds, the
    tensor-parallel collectives of ``ParallelLinearAdapter.forward`` and what the backward keeps (see
    the module docstring)."""
    gpu, t = node.gpu, c.tp
    T = tokens_per_gpu(job, c)
    h, r = model.hidden_size, job.lora_rank
    sp_div = t if c.sp else 1
    prec = COMPUTE_DTYPE[job.precision]
    link = comm.link_for(group(c, "tp"), node)
    gemm = LinearTimes()
    fwd_bytes = bwd_bytes = kept = 0.0
    collectives: list[tuple[str, str, float]] = []  # (direction, kind, full size in bytes)
    for a in adapter_shapes(model, job, t):
        gemm += adapter_linear_s(T, a.a_out, a.a_in, gpu, prec) + adapter_linear_s(
            T, a.b_out, a.b_in, gpu, prec
        )
        kept += T * r * ACT_BYTES  # B's input, the r-wide intermediate
        if a.column:
            kept += T * h * ACT_BYTES  # A's input: the gathered norm output the frozen layer no longer keeps
            out_elements = T * a.b_out
            fwd_bytes += 5 * out_elements * ACT_BYTES  # scale (read, write), add (2 reads, 1 write)
            bwd_bytes += 2 * out_elements * ACT_BYTES + 3 * T * h * ACT_BYTES  # scale grad, dX add
            collectives.append(("forward", "all_gather", T * r * ACT_BYTES))  # linear_in gather_output
            if c.sp and job.tp_comm_overlap:
                collectives.append(("forward", "all_gather", T * h * ACT_BYTES))
                collectives.append(("backward", "reduce_scatter", T * h * ACT_BYTES))
            elif not c.sp:
                collectives.append(("backward", "all_reduce", T * h * ACT_BYTES))
        else:
            if a.target == "linear_fc2":
                kept += (
                    T * a.a_in * ACT_BYTES
                )  # the activation's output, kept before only as FP8 or for wgrad
            out_elements = T * h / sp_div
            fwd_bytes += 5 * out_elements * ACT_BYTES
            bwd_bytes += 2 * out_elements * ACT_BYTES + 3 * T * a.a_in * ACT_BYTES
            collectives.append(("forward", "all_reduce", T * r * ACT_BYTES))  # RowParallel linear_in
            collectives.append(("forward", "all_gather", T * h * ACT_BYTES))  # linear_out gather_output
            collectives.append(("backward", "all_reduce", T * r * ACT_BYTES))  # linear_out input grad
            if c.sp:
                collectives.append(("backward", "all_gather", T * h * ACT_BYTES))  # scatter's backward
    times = {"forward": 0.0, "backward": 0.0}
    sent = 0.0
    if t > 1:
        for direction, kind, size in collectives:
            f = {"all_gather": comm.all_gather_s, "reduce_scatter": comm.reduce_scatter_s}.get(
                kind, comm.all_reduce_s
            )
            times[direction] += f(size, t, link)
            sent += _sent(kind, size, t)
    shapes = adapter_shapes(model, job, t)
    return AdapterTerms(
        params=sum(a.params for a in shapes),
        gemm=gemm,
        forward_elem_s=memory_bound_s(fwd_bytes, gpu),
        backward_elem_s=memory_bound_s(bwd_bytes, gpu),
        forward_comm_s=times["forward"],
        backward_comm_s=times["backward"],
        comm_bytes=sent,
        kept_bytes=kept,
        forward_flop=T * sum(a.forward_flop_per_token for a in shapes),
    )


def frozen_kept_bytes(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Activations of one decoder layer that only the weight gradients of its four linear layers
    needed, which a frozen layer does not keep (``backward_needs_input`` False): the inputs of
    ``linear_qkv`` and ``linear_fc1`` (the norms' outputs), of ``linear_fc2`` (the activation's
    output) and, under FP8, ``linear_proj``'s own FP8 copy of the attention output (core attention
    keeps the 16-bit one for its backward). The same tensors, at the same widths, as
    :func:`cost_models.attention.attention_block` and :func:`cost_models.layer_blocks.dense_mlp` count."""
    T, h, t = tokens_per_gpu(job, c), model.hidden_size, c.tp
    sp_div = t if c.sp else 1
    g_in = gemm_input_bytes(job)
    q, f = model.query_projection_size, model.ffn_hidden_size
    proj = T * q / t * g_in if g_in != ACT_BYTES else 0.0
    return 2 * T * h * g_in / sp_div + proj + T * f / t * g_in


def frozen_weight_bytes(cost: LayerCost, job: JobSpec, gemm_weights: bool) -> float:
    """Bytes of a layer's frozen weights: its tensor-parallel-sharded weights at the frozen dtype when
    they are Transformer Engine GEMM weights (``gemm_weights``: FP8 parameters apply to them only),
    everything else (norms, biases; the embedding and the output layer, Megatron-Core
    ``tensor_parallel`` modules) in 16 bits."""
    sharded = DTYPE_BYTES[job.frozen_weight_dtype] if gemm_weights else ACT_BYTES
    return cost.params_sharded * sharded + (cost.params_replicated + cost.params_expert) * ACT_BYTES


def _gemm_forward_s(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float) -> float:
    """Forward time of a dense decoder layer's base GEMMs (the window ``--tp-comm-overlap`` hides its
    collectives under): the attention block's and the MLP's, as :mod:`cost_models.layers` prices them."""
    T, h, t = tokens_per_gpu(job, c), model.hidden_size, c.tp
    n_in = 2 if model.gated else 1
    f, gpu, prec, recipe = model.ffn_hidden_size, node.gpu, job.precision, job.fp8_recipe
    mlp = linear_s(T, n_in * f / t, h, gpu, prec, recipe=recipe, behind_norm=True)
    mlp += linear_s(T, h, f / t, gpu, prec, recipe=recipe)
    return attention_block(model, job, c, node, span).gemm.forward_s + mlp.forward_s


def _overlap_backward_correction(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float
) -> float:
    """With ``--tp-comm-overlap``, the backward collectives of a frozen layer hide under its
    input-gradient GEMMs alone (no weight-gradient GEMMs): the exposed time with that window minus
    the one :func:`cost_models.layer_blocks.tp_overlapped` priced with both (its floor, one chunk, kept)."""
    if not (job.tp_comm_overlap and c.sp and c.tp > 1):
        return 0.0
    raw = 2 * tp_collectives_s(model.hidden_size * tokens_per_gpu(job, c) * ACT_BYTES, c, node, 1)
    gemm_fwd = _gemm_forward_s(model, job, c, node, span)
    slow = node.gpu.efficiency.comm_overlap_slowdown
    floor = raw / c.tp
    return comm.overlapped_s(raw, gemm_fwd, slow, floor) - comm.overlapped_s(raw, 2 * gemm_fwd, slow, floor)


def lora_decoder(
    cost: LayerCost, model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float
) -> LayerCost:
    """A pre-training decoder layer's cost (``span``: its keys per query) with its base frozen and
    the job's adapters added: no weight-gradient GEMMs but the adapters', the adapters' parameters
    as the only trained ones, the frozen weights as ``frozen_weight_bytes``, the inputs only the base
    wgrad needed dropped (:func:`frozen_kept_bytes`) and the adapters' kept (:class:`AdapterTerms`)."""
    a = adapter_terms(model, job, c, node)
    core_flop = 3 * 2 * tokens_per_gpu(job, c) * span * model.core_attention_width / c.tp
    activations = cost.activation_bytes - frozen_kept_bytes(model, job, c) + a.kept_bytes
    return replace(
        cost,
        params_sharded=a.params,
        params_replicated=0.0,
        params_expert=0.0,
        frozen_weight_bytes=frozen_weight_bytes(cost, job, gemm_weights=True),
        model_flop=(cost.model_flop - core_flop) * 2 / 3 + core_flop + 3 * a.forward_flop,
        forward_s=cost.forward_s + a.gemm.forward_s + a.forward_elem_s,
        backward_input_s=cost.backward_input_s + a.gemm.input_grad_s + a.backward_elem_s,
        backward_weight_s=a.gemm.weight_grad_s,
        forward_comm_s=cost.forward_comm_s + a.forward_comm_s,
        backward_comm_s=cost.backward_comm_s
        + a.backward_comm_s
        + _overlap_backward_correction(model, job, c, node, span),
        activation_bytes=activations,
        # what selective recompute drops stays within what is kept
        selective_dropped_bytes=min(cost.selective_dropped_bytes, activations - a.kept_bytes),
        weight_grad_bytes=a.kept_bytes,
        tp_comm_bytes=cost.tp_comm_bytes + a.comm_bytes,
    )


def frozen_edge(cost: LayerCost, job: JobSpec) -> LayerCost:
    """The embedding or the output layer (and loss) frozen: no weight gradient (the embedding's
    scatter-add, the logits' wgrad GEMM) and nothing kept for one, its weights frozen (16-bit:
    Megatron-Core ``tensor_parallel`` modules, not FP8 parameters), model FLOPs at 2/3."""
    return replace(
        cost,
        params_sharded=0.0,
        params_replicated=0.0,
        params_expert=0.0,
        frozen_weight_bytes=frozen_weight_bytes(cost, job, gemm_weights=False),
        model_flop=cost.model_flop * 2 / 3,
        backward_weight_s=0.0,
        activation_bytes=cost.activation_bytes - cost.weight_grad_bytes,
        weight_grad_bytes=0.0,
    )


def lora_table(
    table: LayerTable, model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup
) -> LayerTable:
    """``table`` (a pre-training layer table of configuration ``c``) for ``job``'s LoRA fine-tune;
    ``table`` itself for a full fine-tune. Dense models only (:func:`unsupported_reason`)."""
    if not job.is_lora:
        return table
    full = float(job.doc_length)
    dense = lora_decoder(table.dense, model, job, c, node, full)
    local = table.dense_local
    local_layers = [i for i in range(model.num_layers) if model.is_local_attention_layer(i)]
    if local_layers:
        span = model.attention_span(local_layers[0], job.doc_length)
        local = lora_decoder(local, model, job, c, node, span)
    embedding = frozen_edge(table.embedding, job)
    output = frozen_edge(table.output, job)
    return replace(
        table, embedding=embedding, dense=dense, dense_local=local, output=output, edges=embedding + output
    )
