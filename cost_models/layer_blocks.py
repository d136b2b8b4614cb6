"""The parts of a decoder layer besides its token mixer and routed experts, per micro-batch on one GPU:
the dense MLP (:class:`DenseMlp`) and the layer's exposed tensor- and context-parallel communication
(:class:`LayerComm`, with Megatron-LM's ``--tp-comm-overlap``). :func:`cost_models.layers._decoder`
combines them with the attention block (:mod:`cost_models.attention`), the Mamba and DeltaNet mixers
(:mod:`cost_models.ssm`) and the MoE block (:mod:`cost_models.moe`). Sources: Korthikanti et al. 2022
(arXiv:2205.05198) Sec. 4 for the activations and the tensor-parallel collectives, Ring Attention (Liu
et al. 2023, arXiv:2310.01889) for the context-parallel K/V ring, each term's docstring for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import communication as comm
from cost_models.attention import AttentionBlock
from cost_models.compute import LinearTimes, linear_s, memory_bound_s
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tp_collectives_s
from planner.inputs.cluster_spec import NodeGroup, compute_capability_major
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, slots=True)
class DenseMlp:
    """The dense MLP of one decoder layer for one micro-batch on one GPU (the counterpart of
    :class:`cost_models.moe.RoutedBlock`). Times in seconds, sizes in bytes."""

    gemm: LinearTimes
    """fc1 (behind the pre-MLP norm) and fc2: forward, input- and weight-gradient times."""
    model_flop: float
    elem_bytes: float
    """Memory-bound forward bytes: the activation function's input and output."""
    act_bytes: float
    """Activations kept for backward: fc1's input, the activation's input, fc2's input."""
    wgrad_bytes: float
    """The part of ``act_bytes`` only the weight gradients need (the GEMMs' inputs)."""
    params_sharded: float
    ffn_elements: float
    """Elements of the activation function's output on this GPU, for eager pricing."""
    forward_s: float
    """The MLP's forward again (what the ``mlp`` recompute module re-runs): GEMMs, activation
    function, its tensor-parallel collectives."""


def dense_mlp(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, T: float, sp_div: int
) -> DenseMlp:
    """The MLP of a dense layer: ``T`` tokens per GPU, ``sp_div`` = tp with sequence parallelism."""
    gpu, prec = node.gpu, job.precision
    h, t = model.hidden_size, c.tp
    n_in = 2 if model.gated else 1
    f = model.ffn_hidden_size
    # fc1's input is the pre-MLP norm's output (TELayerNormColumnParallelLinear: quantized by the norm)
    mlp = linear_s(T, n_in * f / t, h, gpu, prec, recipe=job.fp8_recipe, behind_norm=True)
    mlp += linear_s(T, h, f / t, gpu, prec, recipe=job.fp8_recipe)
    mlp_elem = (n_in + 1) * T * f / t * ACT_BYTES
    # fc1 in and act out (fc2 in) as the GEMMs keep them (FP8 under FP8 recipes); fc1 out, the
    # activation function's input, in 16 bits
    g_in = gemm_input_bytes(job)
    return DenseMlp(
        gemm=mlp,
        model_flop=3 * 2 * T * h * f * (n_in + 1) / t,
        elem_bytes=mlp_elem,
        act_bytes=T * h * g_in / sp_div + n_in * T * f / t * ACT_BYTES + T * f / t * g_in,
        wgrad_bytes=(T * h + T * f / t) * g_in,
        params_sharded=(n_in + 1) * h * f / t + ((n_in * f) / t + h if model.add_bias_linear else 0),
        ffn_elements=T * f / t,
        forward_s=(
            mlp.forward_s + memory_bound_s(mlp_elem, gpu) + tp_collectives_s(T * h * ACT_BYTES, c, node, 1)
        ),
    )


NO_MLP = DenseMlp(
    gemm=LinearTimes(),
    model_flop=0.0,
    elem_bytes=0.0,
    act_bytes=0.0,
    wgrad_bytes=0.0,
    params_sharded=0.0,
    ffn_elements=0.0,
    forward_s=0.0,
)
"""The MLP of a mixer-only layer of a hybrid pattern (``M``, ``G``, ``*``): none."""


@dataclass(frozen=True, slots=True)
class LayerComm:
    """Exposed tensor- and context-parallel communication of one decoder layer per micro-batch
    (seconds), and the bytes each GPU sends for it."""

    tp_fwd_s: float
    tp_bwd_s: float
    tp_bytes: float
    cp_fwd_s: float
    cp_bwd_s: float
    cp_bytes: float


def tp_overlapped(comm_s: float, gemm_fwd_s: float, tp: int, slowdown: float) -> tuple[float, float]:
    """Forward and backward time of a layer's sequence-parallel all-gathers and reduce-scatters
    (``comm_s`` per direction) when they are overlapped with the GEMMs that consume or produce them:
    Megatron-LM ``--tp-comm-overlap`` (Transformer Engine userbuffers), which splits each all-gather
    / reduce-scatter into ``tp`` chunks exchanged while the GEMM runs on the chunks already present
    (Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition in Large
    Deep Learning Models", ASPLOS '23, Sec. 4; NVIDIA NeMo docs, "Communication Overlap: Tensor
    Parallelism"). The window is the layer's GEMMs of that direction (forward: ``gemm_fwd_s``;
    backward: the input- and weight-gradient GEMMs, twice that); one chunk (``comm_s / tp``) stays
    exposed, as the first chunk has nothing to hide under, and the hidden part slows the GEMMs by
    ``slowdown`` per second (the SMs the userbuffer kernels take; ``comm_overlap_slowdown``)."""
    floor = comm_s / tp
    return (
        comm.overlapped_s(comm_s, gemm_fwd_s, slowdown, floor),
        comm.overlapped_s(comm_s, 2 * gemm_fwd_s, slowdown, floor),
    )


def layer_comm(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    at: AttentionBlock,
    gemm_fwd_s: float,
    T: float,
    mlp: bool = True,
) -> LayerComm:
    """Tensor-parallel collectives of a layer (``gemm_fwd_s``: its GEMMs' forward time, which
    ``--tp-comm-overlap`` hides them under; ``mlp``: whether it has an MLP) and the context-parallel
    K/V ring (or a head-parallel mixer's all-to-alls, ``at.cp_fwd_s``)."""
    gpu, h, t = node.gpu, model.hidden_size, c.tp
    # One all-reduce (AG + RS with SP) of the hidden states for the MLP per direction, plus the
    # attention block's own (Korthikanti et al. 2022 Sec. 4.2.2).
    tp_volume = T * h * ACT_BYTES
    if mlp:
        tp_fwd = tp_collectives_s(tp_volume, c, node, 1) + at.tp_fwd_s
        tp_bytes = (4 * (t - 1) / t * tp_volume if t > 1 else 0.0) + at.tp_bytes
    else:
        tp_fwd, tp_bytes = at.tp_fwd_s, at.tp_bytes
    tp_bwd = tp_fwd
    # Before Blackwell, overlapping communication with a GEMM needs CUDA_DEVICE_MAX_CONNECTIONS=1
    # (one hardware queue keeps the launch order); the MoE all-to-all overlap needs more queues,
    # and its launch takes them (Megatron-Bridge scripts/performance/perf_plugins.py
    # _set_num_cuda_device_max_connections: 8 on Hopper with tp or cp > 1 and the overlap, "1 ...
    # to schedule a communication kernel before the overlapping persistent GEMM kernel" only
    # without it; planner's Megatron export does the same), so the TP overlap is lost then.
    many_queues = bool(model.is_moe and job.moe_a2a_overlap and c.ep > 1)
    queue_order_lost = many_queues and compute_capability_major(gpu.name) < 10
    if job.tp_comm_overlap and c.sp and not queue_order_lost:
        tp_fwd, tp_bwd = tp_overlapped(tp_fwd, gemm_fwd_s, t, gpu.efficiency.comm_overlap_slowdown)
    cp_fwd = cp_bwd = at.cp_fwd_s
    cp_bytes = at.cp_bytes
    if c.cp > 1 and at.kv_width:
        chunk = T * at.kv_width * ACT_BYTES  # this rank's K and V
        link = comm.link_for(group(c, "cp"), node)
        ring_fwd = (c.cp - 1) * comm.p2p_s(chunk, link)
        ring_bwd = (c.cp - 1) * comm.p2p_s(2 * chunk, link)  # K/V and their gradients
        # The ring overlaps with the attention of the chunk already received (Ring Attention),
        # slowing it while it runs; each of the cp - 1 extra ring steps launches its own attention
        # kernels (one fixed overhead each, as a layer's launch overhead).
        slowdown = gpu.efficiency.comm_overlap_slowdown
        steps = (c.cp - 1) * gpu.efficiency.kernel_overhead_s
        # Plus a head-parallel mixer's all-to-alls beside the attention (0 for attention alone).
        cp_fwd = (
            comm.overlapped_s(ring_fwd, at.attn_fwd_s * (c.cp - 1) / c.cp, slowdown) + steps + at.cp_fwd_s
        )
        cp_bwd = (
            comm.overlapped_s(ring_bwd, at.attn_bwd_s * (c.cp - 1) / c.cp, slowdown) + steps + at.cp_fwd_s
        )
        cp_bytes = (c.cp - 1) * 3 * chunk + at.cp_bytes
    return LayerComm(tp_fwd, tp_bwd, tp_bytes, cp_fwd, cp_bwd, cp_bytes)
