"""The per-stage model the chain search partitions with (:mod:`planner.search.chain`): layers in
flight per stage under each schedule, and a :class:`planner.search.partition.StageModel` of one
shape's stage on one node group (per-layer time, recompute, memory terms)."""

from __future__ import annotations

from dataclasses import replace

from cost_models import memory as mem
from cost_models.estimate import offload_terms, table_for, table_key
from cost_models.parallel import LAYER_RECOMPUTE, ParallelConfig
from cost_models.schedules import SPLIT_W, peak_inflight, stage_rank
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.search.partition import StageModel


def schedule_inflight(
    schedule: str, p: int, m: int, v: int, weight_fraction: float = 0.0
) -> tuple[float, ...]:
    """Peak micro-batches in flight per rank, read from the schedule's operation order (cached)."""
    return peak_inflight(schedule, p, m, v, weight_fraction)


def _weight_fraction(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> float:
    if c.schedule not in SPLIT_W:
        return 0.0
    t = table_for(model, job, c, node)
    return round(min(1.0, t.dense.weight_grad_bytes / t.dense.activation_bytes), 6)


def inflight_for(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> tuple[float, ...]:
    """Per-stage peak in-flight micro-batches of a shape."""
    return schedule_inflight(
        c.schedule, c.pp, c.num_microbatches(job), c.vpp, _weight_fraction(model, job, c, node)
    )


def stage_model(
    model: ModelSpec,
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    stage: int,
    inflight: float,
    headroom_bytes: float = 0.0,
) -> StageModel:
    """Cost and memory of pipeline stage ``stage`` on ``node`` as a function of its layer count."""
    first, last = _ends(c, stage)
    position = int(first) + 2 * int(last)  # which of the embedding and the output layer it holds
    key = (
        *table_key(model, job, c, node),
        c.dp,
        c.optimizer_sharding,
        c.optimizer_instances,
        c.fsdp_shard,
        c.recompute,
        c.recompute_num_layers,
        c.offload_layers,
        position,
        inflight,
        headroom_bytes,
    )
    sm = _STAGE_MODELS.get(key)
    if sm is None:
        if len(_STAGE_MODELS) > 200_000:
            _STAGE_MODELS.clear()
        sm = _STAGE_MODELS[key] = _stage_model(model, job, c, node, stage, inflight)
        if headroom_bytes:
            sm = _STAGE_MODELS[key] = replace(sm, capacity_bytes=sm.capacity_bytes - headroom_bytes)
    return sm


_STAGE_MODELS: dict[tuple, StageModel] = {}


def _ends(c: ParallelConfig, stage: int) -> tuple[bool, bool]:
    """Whether rank ``stage`` holds the embedding (the first virtual stage) and the output layer (the
    last one: rank pp - 1, or rank 0 under a V placement, cost_models.schedules.V_SHAPE)."""
    return stage == 0, stage == stage_rank(c.schedule, c.pp, c.pp * c.vpp - 1)


def _stage_model(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, stage: int, inflight: float
) -> StageModel:
    t, layer = layer_of(model, job, c, node)
    extra = t.dense.scaled(0.0)
    first, last = _ends(c, stage)
    if first:
        extra = extra + t.embedding
    if last:
        extra = extra + t.output
    d_dense, d_exp = mem.shard_degrees(c)
    wd, gd, od = mem.bytes_per_param(job, c.optimizer_sharding, d_dense)
    we, ge, oe = mem.bytes_per_param(job, c.optimizer_sharding, d_exp)

    def state(cost) -> float:
        return (
            (cost.params_sharded + cost.params_replicated) * (wd + gd + od)
            + cost.params_expert * (we + ge + oe)
            + cost.frozen_weight_bytes
        )

    extra_static = state(extra)
    if c.optimizer_sharding == "full":
        extra_static += mem.PREFETCHED_LAYERS * layer.params * 2.0
    layer_s = (
        layer.forward_s
        + layer.forward_comm_s
        + layer.backward_input_s
        + layer.backward_comm_s
        + layer.backward_weight_s
    )
    recompute_s = layer.recompute_s(c.recompute)
    if c.recompute == "selective":
        layer_s += layer.selective_recompute_s
    extra_s = (
        extra.forward_s
        + extra.forward_comm_s
        + extra.backward_input_s
        + extra.backward_comm_s
        + extra.backward_weight_s
    )
    # Activation offloading runs with pp 1 (cost_models.constraints.violations), where this stage
    # holds every layer: the first offload_layers layers' activations leave the GPU, their copies'
    # exposed time is paid per micro-batch, as cost_models.estimate prices them.
    offload = (
        offload_terms(model, t, c, 0, model.num_layers, node) if c.offload_layers and c.pp == 1 else None
    )
    if offload is not None:
        extra_s += offload.forward_exposed_s + offload.backward_exposed_s
    return StageModel(
        layer_s=layer_s,
        recompute_s=recompute_s,
        extra_s=extra_s,
        static_per_layer_bytes=state(layer),
        # Selective recompute keeps every layer's activations but what its modules drop
        # (LayerCost.recomputed_bytes), as cost_models.estimate prices it.
        act_per_layer_bytes=layer.recomputed_bytes("selective")
        if c.recompute == "selective"
        else layer.activation_bytes,
        ckpt_per_layer_bytes=layer.recomputed_bytes(c.recompute),
        transient_bytes=layer.activation_bytes,
        extra_static_bytes=extra_static,
        extra_act_bytes=extra.activation_bytes,
        inflight=inflight,
        reserve_bytes=node.gpu.memory_reserve_bytes,
        fragmentation=mem.FRAGMENTATION_FRACTION,
        capacity_bytes=node.gpu.memory_bytes,
        recompute_layers=(model.num_layers if c.recompute_num_layers == 0 else c.recompute_num_layers)
        if c.recompute in LAYER_RECOMPUTE
        else 0,
        offload_saved_bytes=offload.resident_bytes_saved if offload is not None else 0.0,
        offload_transit_bytes=offload.transit_bytes if offload is not None else 0.0,
    )


def layer_of(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup):
    """(cost table, the layer cost a stage is priced by) of ``c`` on ``node``: the MoE layer when
    every layer is one, else the model's mean layer (mixed dense/MoE, local/global or hybrid
    layers), else the dense layer."""
    t = table_for(model, job, c, node)
    uniform_moe = model.moe_layer_freq == 1 and not model.moe_layer_pattern and not model.window_size
    if model.is_moe and uniform_moe and not t.parts:
        return t, t.moe
    if model.is_moe or model.window_size or t.parts:
        return t, t.mean_layer(model)
    return t, t.dense
