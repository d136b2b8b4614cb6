"""Per-micro-batch tensor sizes the layer cost modules share: bytes per activation element, tokens
one GPU holds, the hidden states one GPU passes to the next pipeline stage and the time they take,
and the tensor-parallel collectives of a hidden-state tensor (:mod:`cost_models.layers`,
:mod:`cost_models.attention`, :mod:`cost_models.graph_units`, :mod:`cost_models.estimate`)."""

from __future__ import annotations

from cost_models import communication as comm
from cost_models.compute import MXFP4_COPY_BYTES, NVFP4_COPY_BYTES
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

ACT_BYTES = 2
"""Bytes per activation element (16-bit activations, also under FP8 recipes)."""


def gemm_input_bytes(job: JobSpec) -> float:
    """Bytes per element of the input a linear layer keeps for its weight gradient: under FP8
    recipes Transformer Engine keeps the quantized input (one byte; ``_Linear.forward``,
    ``transformer_engine/pytorch/module/linear.py``: "Cached input tensor", ``saved_inputmat =
    inputmat`` after the FP8 cast, only the column-wise data the wgrad GEMM reads), else the
    16-bit input itself; under NVFP4 the column-wise NVFP4 copy, an E2M1 value and its block scale's
    share (0.5625 bytes, :data:`cost_models.compute.NVFP4_COPY_BYTES`; MXFP4's 0.53125,
    :data:`cost_models.compute.MXFP4_COPY_BYTES`). Core attention's tensors and
    the activation function's input stay 16-bit."""
    return {"fp8": 1.0, "nvfp4": NVFP4_COPY_BYTES, "mxfp4": MXFP4_COPY_BYTES}.get(job.precision, ACT_BYTES)


def tokens_per_gpu(job: JobSpec, c: ParallelConfig) -> float:
    """Tokens of one micro-batch held by one GPU (sequence split by cp)."""
    return c.micro_batch_size * job.seq_length / c.cp


def p2p_activation_bytes(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Bytes one GPU sends to the next pipeline stage per micro-batch: the hidden states, split over
    tp with sequence parallelism (Megatron's scatter-gather of pipeline sends)."""
    return tokens_per_gpu(job, c) * model.hidden_size * ACT_BYTES / (c.tp if c.sp else 1)


def pipeline_transfer_s(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, pp_link: comm.Link, tp_link: comm.Link
) -> float:
    """Time from one stage's output to the next stage's input, per micro-batch and direction (the
    hidden states forward, their gradient backward): one send of :func:`p2p_activation_bytes` over
    the pipeline link; with :attr:`JobSpec.pipeline_scatter_gather` and no sequence parallelism,
    1/tp of the hidden states over the pipeline link and the receivers' all-gather of the whole
    over tp (Narayanan et al. 2021, arXiv:2104.04473, Sec. 4.1, the scatter/gather optimization:
    the sending stage's tensor-parallel ranks each send a distinct 1/t chunk, and the receiving
    stage rebuilds the tensor with an all-gather over NVLink)."""
    volume = p2p_activation_bytes(model, job, c)
    if job.pipeline_scatter_gather and c.tp > 1 and not c.sp:  # volume is then the whole tensor
        return comm.p2p_s(volume / c.tp, pp_link) + comm.all_gather_s(volume, c.tp, tp_link)
    return comm.p2p_s(volume, pp_link)


def tp_collectives_s(volume: float, c: ParallelConfig, node: NodeGroup, count: int) -> float:
    """``count`` all-reduces (or AG+RS pairs with SP, same time) of ``volume`` bytes over tp."""
    if c.tp == 1:
        return 0.0
    link = comm.link_for(group(c, "tp"), node)
    if c.sp:
        return count * (comm.all_gather_s(volume, c.tp, link) + comm.reduce_scatter_s(volume, c.tp, link))
    return count * comm.all_reduce_s(volume, c.tp, link)
