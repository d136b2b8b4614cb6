"""One virtual pipeline stage (a model chunk) for one micro-batch: where it runs, what its passes
cost, what it keeps, and what it sends.

:func:`chunk_terms` prices every chunk of a configuration from the layer table of its pipeline
rank's node group (:func:`table_for`): forward, backward (input and weight gradients), recompute,
activation offload (:func:`offload_terms`), the activations one micro-batch keeps, and the send to
the next chunk's rank; :func:`rank_totals` sums a rank's chunks and :func:`sharded_passes` prices
the per-micro-batch FSDP / ZeRO-2 collectives (:mod:`cost_models.fsdp`). These are the inputs of
the schedule's timeline and of each rank's memory, which :func:`cost_models.estimate.estimate`
assembles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models import communication as comm
from cost_models import fsdp, schedules
from cost_models.compute import memory_bound_s
from cost_models.data_parallel import (
    DDP_BUCKET_PARAMS,
    unfused_accumulation_applies,
    unfused_accumulation_bytes,
)
from cost_models.finetune import lora_table
from cost_models.layer_cost import ZERO, LayerCost, LayerTable
from cost_models.layers import layer_table, loss_transient_bytes
from cost_models.parallel import LAYER_RECOMPUTE, ParallelConfig
from cost_models.placement import Group, group
from cost_models.tensors import pipeline_transfer_s
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.job_spec import DTYPE_BYTES, JobSpec
from planner.inputs.model_spec import ModelSpec


def node_of_stage(cluster: ClusterSpec, c: ParallelConfig, stage: int) -> NodeGroup:
    """Node group of pipeline rank ``stage``: pp is outermost, so a stage is a block of ranks."""
    per_stage = c.tp * c.cp * c.dp
    first = cluster.group_of_rank(stage * per_stage)
    last = cluster.group_of_rank((stage + 1) * per_stage - 1)
    if first is last:
        return first
    # A stage straddling two node groups runs at the pace of the slower GPU.
    return min((first, last), key=lambda g: g.gpu.peak("bf16") if g.gpu.supports("bf16") else 0.0)


_TABLES: dict[tuple, LayerTable] = {}


def table_key(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> tuple:
    """What a configuration's layer table depends on (not the schedule, partition, recompute form
    or sharding; the selective recompute modules change what a layer's selective terms hold):
    the cache key of :func:`table_for`, and the start of every cache key built on the table."""
    return (
        model,
        job,
        node,
        c.tp,
        c.cp,
        c.ep,
        c.expert_tp,
        c.micro_batch_size,
        c.sp,
        c.pp > 1,
        c.recompute_modules,
    )


def table_for(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerTable:
    """Layer table of a configuration, cached on :func:`table_key`."""
    key = table_key(model, job, c, node)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) > 4096:
            _TABLES.clear()
        normalised = ParallelConfig(
            tp=c.tp,
            pp=1 if c.pp == 1 else 2,
            dp=c.dp,
            cp=c.cp,
            ep=c.ep,
            etp=c.etp,
            micro_batch_size=c.micro_batch_size,
            sequence_parallel=c.sequence_parallel,
            recompute_modules=c.recompute_modules,
        )
        # a LoRA job's frozen base and adapters (cost_models.finetune; the table itself otherwise)
        table = _TABLES[key] = lora_table(
            layer_table(model, job, normalised, node), model, job, normalised, node
        )
    return table


def _virtual_stage_cost(model: ModelSpec, table: LayerTable, first_layer: int, n_layers: int) -> LayerCost:
    if not model.is_moe and not model.window_size and not table.parts:
        return table.dense.scaled(n_layers)
    return table.layers(model, first_layer, n_layers)


@dataclass(frozen=True, slots=True)
class OffloadTerms:
    """What activation offloading changes in one virtual stage, per micro-batch."""

    layers: int
    """Offloaded layers of the stage."""
    resident_bytes_saved: float
    """Activation bytes that leave the GPU after the forward of their layer."""
    transit_bytes: float
    """One offloaded layer's activations, held while they are copied (out in the forward, back in
    the backward)."""
    forward_exposed_s: float
    backward_exposed_s: float


def offload_terms(
    model: ModelSpec, table: LayerTable, c: ParallelConfig, first_layer: int, n_layers: int, node: NodeGroup
) -> OffloadTerms | None:
    """Activation offloading of the stage holding layers ``[first_layer, first_layer + n_layers)``.

    Megatron-LM's ``--cpu-offloading-num-layers N`` wraps the first N decoder layers in Transformer
    Engine's CPU offload context (``get_cpu_offload_context``, activations only): a layer's saved
    activations are copied to host memory on a side stream while the next layer computes its
    forward, and copied back one layer ahead of the backward. So each offloaded layer leaves the GPU
    except while in transit (one layer's worth), and a copy costs time only where it outlasts the
    neighbouring layer's pass: ``max(0, bytes / host_link - pass)`` per layer and direction, at the
    GPU's per-direction host link (:attr:`planner.inputs.cluster_spec.GPUSpec.host_link_bytes_per_s`)."""
    k = min(max(c.offload_layers - first_layer, 0), n_layers)
    if k == 0:
        return None
    off = _virtual_stage_cost(model, table, first_layer, k)
    per_layer = off.activation_bytes / k
    copy_s = per_layer / node.gpu.host_link_bytes_per_s
    fwd = (off.forward_s + off.forward_comm_s) / k
    bwd = (off.backward_input_s + off.backward_weight_s + off.backward_comm_s) / k
    return OffloadTerms(
        layers=k,
        resident_bytes_saved=off.activation_bytes,
        transit_bytes=per_layer,
        forward_exposed_s=k * max(0.0, copy_s - fwd),
        backward_exposed_s=k * max(0.0, copy_s - bwd),
    )


def recomputed_layers(c: ParallelConfig, n_layers: int) -> int:
    """Layers of a chunk of ``n_layers`` that full or per-op recompute re-runs
    (``ParallelConfig.recompute_num_layers``; 0 = all of them)."""
    if c.recompute not in LAYER_RECOMPUTE:
        return 0
    return n_layers if c.recompute_num_layers == 0 else min(c.recompute_num_layers, n_layers)


def stage_link(cluster: ClusterSpec, c: ParallelConfig, r: int, to: int | None = None) -> comm.Link:
    """Link from pipeline rank r to rank ``to`` (default r+1, wrapping for interleaving): the slower
    side's."""
    g: Group = group(c, "pp")
    a = node_of_stage(cluster, c, r)
    b = node_of_stage(cluster, c, (r + 1) % c.pp if to is None else to)
    la, lb = comm.link_for(g, a), comm.link_for(g, b)
    return la if la.bandwidth_bytes_per_s <= lb.bandwidth_bytes_per_s else lb


@dataclass(frozen=True, slots=True)
class ChunkTerms:
    """One virtual pipeline stage (model chunk) for one micro-batch: the timeline's inputs and its
    share of its rank's totals. Times in seconds, sizes in bytes."""

    rank: int
    """Pipeline rank that runs the chunk (:func:`cost_models.schedules.stage_rank`)."""
    cost: LayerCost
    """Its decoder layers, with the embedding on the first chunk and the output layer (and MTP
    modules) on the last."""
    recompute_s: float
    """Forward time the backward re-runs (full, per-op or selective recompute)."""
    forward_s: float
    """Forward compute plus exposed tensor/context/expert-parallel communication."""
    backward_s: float
    """Backward (B + W) with recompute and the unfused gradient accumulation pass."""
    durations: tuple[float, float, float]
    """The timeline's F, B and W durations: W folded into B unless the schedule splits it
    (:data:`cost_models.schedules.SPLIT_W`); activation offload's exposed copies added."""
    activation_bytes: float
    """Activations one micro-batch leaves on the GPU until its backward (after recompute and
    offload)."""
    weight_grad_fraction: float
    """Share of :attr:`activation_bytes` that only the weight-gradient pass (W) still needs."""
    p2p_s: float
    """Send of one activation to the next chunk's rank (0 on the last chunk and within a rank)."""
    offload_exposed_s: float
    """Activation copies to and from host memory that compute did not hide (forward + backward)."""
    host_bytes: float
    """Offloaded activations of one micro-batch, divided by vpp (a rank's chunks share them)."""
    transient_bytes: float
    """Largest working set beyond the kept activations: one recomputed layer's activations (or one
    layer's selectively dropped ones), one offloaded layer in transit, the loss on the last chunk."""
    largest_layer_params: float
    """One decoder layer's parameters on this GPU times tp (what a full-sharding prefetch gathers)."""


def chunk_terms(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    c: ParallelConfig,
    layers: tuple[int, ...] | list[int],
    nodes: tuple[NodeGroup, ...] | list[NodeGroup],
) -> tuple[ChunkTerms, ...]:
    """Every chunk of configuration ``c`` (``layers[vs]`` decoder layers in virtual stage ``vs``;
    ``nodes[r]`` the node group of pipeline rank ``r``), in virtual-stage order."""
    p, v = c.pp, c.vpp
    n_virtual = p * v
    first_layer = [0] * n_virtual
    for vs in range(1, n_virtual):
        first_layer[vs] = first_layer[vs - 1] + layers[vs - 1]
    split_w = c.schedule in schedules.SPLIT_W
    unfused = unfused_accumulation_applies(job, c)
    rank_of = [schedules.stage_rank(c.schedule, p, vs) for vs in range(n_virtual)]
    out = []
    for vs in range(n_virtual):
        r = rank_of[vs]
        node = nodes[r]
        table = table_for(model, job, c, node)
        n = layers[vs]
        cost = _virtual_stage_cost(model, table, first_layer[vs], n)
        k = recomputed_layers(c, n)
        # One decoder layer of the chunk (what recompute re-runs, a prefetch gathers); none in an
        # empty end chunk, which holds only the embedding or the output layer and loss
        # (layers_per_stage 0 at an end: Megatron-LM --pipeline-model-parallel-layout "E|...|L").
        layer_unit = _virtual_stage_cost(model, table, first_layer[vs], 1) if n else ZERO
        recompute = k * layer_unit.recompute_s(c.recompute)
        act = cost.activation_bytes - k * (
            layer_unit.activation_bytes - layer_unit.recomputed_bytes(c.recompute)
        )
        if c.recompute == "selective":
            # Every layer re-runs its selective modules (Megatron --recompute-granularity selective;
            # --recompute-modules, default core attention): none keeps what those modules drop
            # (core attention: what it keeps for its backward, Korthikanti et al. 2022 Table 2).
            recompute = cost.selective_recompute_s
            act = cost.recomputed_bytes("selective")
        wbytes = cost.weight_grad_bytes * (n - k) / n if n else 0.0
        extra = ZERO
        if vs == 0:
            extra = extra + table.embedding
        if vs == n_virtual - 1:
            extra = extra + table.output
        total = cost + extra
        act += extra.activation_bytes
        wbytes += extra.weight_grad_bytes
        fwd = total.forward_s + total.forward_comm_s
        b_in = total.backward_input_s + total.backward_comm_s + recompute
        b_w = total.backward_weight_s
        if unfused:
            b_w += memory_bound_s(total.params * unfused_accumulation_bytes(job), node.gpu)
        durations = [fwd, b_in, b_w] if split_w else [fwd, b_in + b_w, 0.0]
        offload = offload_terms(model, table, c, first_layer[vs], n, node) if c.offload_layers else None
        transient = offload_exposed = host = 0.0
        if offload is not None:
            # The copies' exposed parts lengthen the passes (the timeline's durations), and are
            # itemised apart from compute, as FSDP's exposed collectives are.
            act -= offload.resident_bytes_saved
            durations[0] += offload.forward_exposed_s
            durations[1] += offload.backward_exposed_s
            offload_exposed = offload.forward_exposed_s + offload.backward_exposed_s
            host = offload.resident_bytes_saved / v
            transient = max(transient, offload.transit_bytes)
        # A layer's pass holds its working set (unfused attention's scores) on top of what it keeps.
        # With recompute the recomputed layer's own activations are taken for it when larger, not
        # added: their sum would hold the layer's MLP activations and the attention's working set at
        # once, which backward frees and makes in turn (what of the attention's part coexists with
        # its working set is not priced: a lower bound there).
        working = max(
            (table.decoder(model, i).working_bytes for i in range(first_layer[vs], first_layer[vs] + n)),
            default=0.0,
        )
        transient = max(transient, working)
        if k:
            transient = max(transient, layer_unit.activation_bytes)
        elif c.recompute == "selective":
            # one layer's recomputed modules live until its backward has used them
            transient = max(transient, layer_unit.selective_dropped_bytes)
        if vs == n_virtual - 1:
            transient = max(transient, loss_transient_bytes(model, job, c))
        # to the next virtual stage's rank (none on the last; ZB-V's turn stays on rank p - 1)
        to = rank_of[vs + 1] if vs + 1 < n_virtual else (r + 1) % p
        p2p = (
            pipeline_transfer_s(
                model, job, c, stage_link(cluster, c, r, to), comm.link_for(group(c, "tp"), nodes[to])
            )
            if p > 1 and to != r
            else 0.0
        )
        out.append(
            ChunkTerms(
                rank=r,
                cost=total,
                recompute_s=recompute,
                forward_s=fwd,
                backward_s=b_in + b_w,
                durations=(durations[0], durations[1], durations[2]),
                activation_bytes=act,
                weight_grad_fraction=min(1.0, wbytes / act) if act else 0.0,
                p2p_s=p2p,
                offload_exposed_s=offload_exposed,
                host_bytes=host,
                transient_bytes=transient,
                largest_layer_params=layer_unit.params * c.tp,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RankTotals:
    """One pipeline rank's chunks summed, per micro-batch (in virtual-stage order, so the float
    sums are stable). Times in seconds, sizes in bytes."""

    cost: LayerCost
    recompute_s: float
    forward_s: float
    backward_s: float
    """Backward (B + W, with recompute) over the rank's chunks."""
    comm_s: float
    """Exposed tensor/context/expert-parallel communication (forward + backward)."""
    model_flop: float
    offload_exposed_s: float
    host_bytes: float
    """Offloaded activations of one micro-batch (:attr:`ChunkTerms.host_bytes` summed)."""
    transient_bytes: float
    """The largest of the chunks' :attr:`ChunkTerms.transient_bytes`."""
    largest_layer_params: float
    """The largest of the chunks' :attr:`ChunkTerms.largest_layer_params`."""


def rank_totals(chunks: tuple[ChunkTerms, ...], rank: int) -> RankTotals:
    """The chunks of pipeline rank ``rank`` summed (the transient and the largest layer: maxima)."""
    cost = ZERO
    recompute = fwd = bwd = comm_s = flop = offload = host = transient = largest = 0.0
    for t in chunks:
        if t.rank != rank:
            continue
        cost = cost + t.cost
        recompute += t.recompute_s
        fwd += t.forward_s
        bwd += t.backward_s
        comm_s += t.cost.forward_comm_s + t.cost.backward_comm_s
        flop += t.cost.model_flop
        offload += t.offload_exposed_s
        host += t.host_bytes
        transient = max(transient, t.transient_bytes)
        largest = max(largest, t.largest_layer_params)
    return RankTotals(
        cost=cost,
        recompute_s=recompute,
        forward_s=fwd,
        backward_s=bwd,
        comm_s=comm_s,
        model_flop=flop,
        offload_exposed_s=offload,
        host_bytes=host,
        transient_bytes=transient,
        largest_layer_params=largest,
    )


def sharded_passes(
    job: JobSpec,
    c: ParallelConfig,
    m: int,
    layers: tuple[int, ...] | list[int],
    chunks: tuple[ChunkTerms, ...],
    totals: tuple[RankTotals, ...],
    nodes: tuple[NodeGroup, ...] | list[NodeGroup],
) -> tuple[fsdp.PassExposure | None, ...]:
    """The per-micro-batch collectives of sharded gradients inside each chunk's passes (None where
    there are none).

    Fully sharded data parallelism gathers weights per micro-batch (forward and backward) and
    reduce-scatters gradients; ZeRO-2 keeps only its gradient shard, so it reduce-scatters every
    micro-batch's gradients too (Rajbhandari et al. 2020, Sec. 5.2). Prefetching overlaps this with
    the neighbouring unit's compute, one unit ahead (cost_models/fsdp.py); what exceeds it is exposed.
    """
    if not (
        c.optimizer_sharding in ("full", "zero2")
        and c.dp * c.cp > 1
        and m > 1
        or c.optimizer_sharding == "full"
    ):
        return (None,) * len(chunks)
    out: list[fsdp.PassExposure | None] = []
    for vs, t in enumerate(chunks):
        r = t.rank
        if c.shard_degree == 1:
            out.append(None)
            continue
        link = comm.link_for(group(c, "shard"), nodes[r])
        params = totals[r].cost.params / c.vpp
        grad_b = float(DTYPE_BYTES[job.grad_dtype])
        # FSDP wraps each transformer layer as one unit: one gather (and one reduce-scatter) per
        # layer, each paying the collective's latency; ZeRO-2 reduces in DDP-sized buckets.
        units = (
            max(1, layers[vs])
            if c.optimizer_sharding == "full"
            else max(1, math.ceil(params / DDP_BUCKET_PARAMS))
        )
        n = c.shard_degree
        gather = comm.all_gather_s(params * 2.0 / units, n, link) if c.optimizer_sharding == "full" else 0.0
        scatter = comm.reduce_scatter_s(params * grad_b / units, n, link)
        f, b, w = t.durations
        out.append(
            fsdp.pass_exposure(
                units, gather, scatter, f, b + w, nodes[r].gpu.efficiency.comm_overlap_slowdown
            )
        )
    return tuple(out)


def pass_durations(
    chunks: tuple[ChunkTerms, ...], passes: tuple[fsdp.PassExposure | None, ...]
) -> np.ndarray:
    """The schedule timeline's F, B, W durations per virtual stage (rows), in seconds: each chunk's
    :attr:`ChunkTerms.durations` with the exposed part of its FSDP / ZeRO-2 collectives
    (:func:`sharded_passes`) added to its forward and backward."""
    return np.array(
        [
            t.durations
            if px is None
            else (t.durations[0] + px.forward_s, t.durations[1] + px.backward_s, t.durations[2])
            for t, px in zip(chunks, passes)
        ],
        dtype=float,
    )
