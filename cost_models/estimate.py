"""One configuration -> step time, throughput, MFU, memory per stage, and breakdowns.

Flow: layer table per pipeline stage (its node group's GPU and links) -> per-virtual-stage F/B/W
durations and activation bytes -> the schedule's :class:`Timeline` -> data-parallel
synchronisation and optimizer step after the last backward (:mod:`cost_models.data_parallel`)
-> :class:`Estimate`.

Iteration time = max over ranks of (end of its last backward + its exposed gradient reduction)
+ the slowest optimizer step + the exposed parameter all-gather. The data-parallel reduction
overlaps the last micro-batch's backward (Megatron ``--overlap-grad-reduce`` launches buckets as
their gradients become final); the last bucket (Megatron's default 40M parameters,
``--ddp-bucket-size``) is always exposed. The parameter all-gather of the distributed optimizer
overlaps the next iteration's first forward (``--overlap-param-gather``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models import communication as comm
from cost_models import fsdp, schedules
from cost_models import memory as mem
from cost_models.compute import COMPUTE_DTYPE, memory_bound_s
from cost_models.data_parallel import (
    DDP_BUCKET_PARAMS,
    DPSync,
    adam_bytes_per_param,
    ddp_bucket_params,
    dp_sync,
    unfused_accumulation_applies,
    unfused_accumulation_bytes,
)
from cost_models.layers import (
    ZERO,
    LayerCost,
    LayerTable,
    hardware_flop_per_iteration,
    layer_table,
    loss_transient_bytes,
    model_flop_per_iteration,
)
from cost_models.parallel import LAYER_RECOMPUTE, Group, ParallelConfig, group
from cost_models.tensors import pipeline_transfer_s
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.job_spec import DTYPE_BYTES, JobSpec
from planner.inputs.model_spec import ModelSpec

__all__ = [
    # the data-parallel terms live in cost_models.data_parallel; they stay importable from here
    "DDP_BUCKET_PARAMS",
    "DPSync",
    "Estimate",
    "OffloadTerms",
    "StageEstimate",
    "adam_bytes_per_param",
    "ddp_bucket_params",
    "dp_sync",
    "estimate",
    "node_of_stage",
    "offload_terms",
    "table_for",
    "table_key",
    "unfused_accumulation_applies",
    "unfused_accumulation_bytes",
]


@dataclass(frozen=True, slots=True)
class StageEstimate:
    """One pipeline rank (all its model chunks), per micro-batch unless named per iteration."""

    stage: int
    gpu: str
    layers: tuple[int, ...]
    """Decoder layers of each of this rank's chunks."""
    forward_s: float
    backward_s: float
    """Backward (B + W, including recompute) per micro-batch over all chunks."""
    recompute_s: float
    tp_cp_ep_comm_s: float
    """Exposed tensor/context/expert-parallel communication per micro-batch (F + B)."""
    p2p_s: float
    """Send time of one activation to the next stage (the slowest of its chunks' sends)."""
    dp_comm_s: float
    """Gradient reduction (+ parameter gather) time per iteration, before overlap."""
    dp_exposed_s: float
    optimizer_s: float
    busy_s: float
    idle_s: float
    """Idle time within the pipeline phase (until the iteration's last backward)."""
    memory: mem.MemoryBreakdown
    model_flop_per_microbatch: float
    devices: int = 0
    """GPUs of this stage in one pipeline replica (graph plans); 0 = tp x cp x dp of the config."""
    fsdp_exposed_s: float = 0.0
    """Per micro-batch: FSDP / ZeRO-2 collectives inside the passes that compute did not hide."""
    reduce_exposed_s: float = 0.0
    """Per iteration: the part of ``dp_exposed_s`` paid after this rank's last backward."""
    gather_exposed_s: float = 0.0
    """Per iteration: the part of ``dp_exposed_s`` paid before the next first forward."""
    end_s: float = 0.0
    """When this rank's last backward ends (pipeline phase, from the timeline)."""
    offload_exposed_s: float = 0.0
    """Per micro-batch: activation copies to and from host memory that the neighbouring layers'
    compute did not hide (``ParallelConfig.offload_layers``; :func:`offload_terms`)."""
    host_bytes: float = 0.0
    """Offloaded activations this GPU parks in host memory at the peak: the offloaded layers'
    activations of every micro-batch in flight (one without pipelining)."""
    host_share_bytes: float = 0.0
    """This GPU's share of its node's usable host memory
    (:func:`cost_models.memory.host_share_bytes`); 0 when the node's host memory is unknown."""

    @property
    def host_fits(self) -> bool:
        """Whether the offloaded activations fit in this GPU's share of host memory (always, when
        nothing is offloaded or the host memory is unknown)."""
        return not self.host_bytes or not self.host_share_bytes or self.host_bytes <= self.host_share_bytes


@dataclass(frozen=True, slots=True)
class Estimate:
    """The prediction for one configuration."""

    config: ParallelConfig
    num_microbatches: int
    step_time_s: float
    pipeline_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs (Megatron convention, no recompute) over dense BF16/FP16 peak x GPUs x time."""
    hfu: float
    """Hardware FLOPs (with recompute) over the same peak."""
    bubble_fraction: float
    stages: tuple[StageEstimate, ...]
    timeline: schedules.Timeline

    @property
    def peak_memory_bytes(self) -> float:
        """Largest peak over all GPUs."""
        return max(s.memory.peak_bytes for s in self.stages)

    @property
    def fits(self) -> bool:
        """Whether every stage fits: its GPU memory, and the host memory its offloaded activations
        fill (:attr:`host_fits`)."""
        return self.gpu_fits and self.host_fits

    @property
    def gpu_fits(self) -> bool:
        """Whether every stage's peak fits in its GPU's memory."""
        return all(s.memory.fits for s in self.stages)

    @property
    def host_fits(self) -> bool:
        """Whether every GPU's offloaded activations fit in its share of its node's host memory."""
        return all(s.host_fits for s in self.stages)

    @property
    def host_shortfall(self) -> str:
        """Why the offloaded activations overflow host memory, in words ('' when they fit)."""
        s = next((s for s in self.stages if not s.host_fits), None)
        if s is None:
            return ""
        return (
            f"stage {s.stage} offloads {s.host_bytes / 2**30:.1f} GiB of activations per GPU to host "
            f"memory, more than its share of the node's ({s.host_share_bytes / 2**30:.1f} GiB: "
            f"{mem.HOST_MEMORY_USABLE_FRACTION:.0%} of host_memory_gb over the node's GPUs)"
        )

    def time_breakdown(self) -> tuple[tuple[str, float], ...]:
        """Where the iteration's time goes, summing exactly to ``step_time_s``.

        The step is ``max_r(end_r + reduce_exposed_r) + max_r optimizer_r + max_r gather_exposed_r``
        (see :func:`estimate`); the first maximum is the pipeline phase. The terms itemise the
        busiest stage (the most busy time, :attr:`StageEstimate.busy_s`; the lowest such stage): its
        compute, recompute, tensor/context/expert-parallel and FSDP communication (per micro-batch
        x m) and its exposed data-parallel reduction; the rest of the pipeline phase is waiting, the
        pipeline bubble and point-to-point lags. (The rank that ends last can be a lightly loaded
        one, an embedding-only first stage say, whose terms would call the whole step a bubble.)"""
        crit, busy = self.critical_stage, self.busiest_stage
        m = self.num_microbatches
        compute = (busy.forward_s + busy.backward_s - busy.recompute_s - busy.tp_cp_ep_comm_s) * m
        parts = (
            ("compute", compute),
            ("recompute", busy.recompute_s * m),
            ("tensor/context/expert-parallel communication", busy.tp_cp_ep_comm_s * m),
            ("exposed FSDP / ZeRO-2 communication", busy.fsdp_exposed_s * m),
        )
        if self.config.offload_layers:
            # Only plans that offload activations carry the term (others' breakdowns read as before).
            parts += (("exposed activation offload", busy.offload_exposed_s * m),)
        waiting = crit.end_s + crit.reduce_exposed_s - busy.reduce_exposed_s - sum(v for _, v in parts)
        return parts + (
            ("pipeline bubble", waiting),
            ("exposed data-parallel communication", busy.reduce_exposed_s),
            ("optimizer step", max(s.optimizer_s for s in self.stages)),
            ("exposed parameter gather", max(s.gather_exposed_s for s in self.stages)),
        )

    @property
    def critical_stage(self) -> StageEstimate:
        """The stage whose pipeline phase plus exposed reduction ends last (the lowest such stage):
        it sets the pipeline part of the step."""
        return max(self.stages, key=lambda s: (s.end_s + s.reduce_exposed_s, -s.stage))

    @property
    def busiest_stage(self) -> StageEstimate:
        """The stage with the most busy time (the lowest such stage): :meth:`time_breakdown`
        itemises it."""
        return max(self.stages, key=lambda s: (s.busy_s, -s.stage))

    @property
    def worst_stage(self) -> StageEstimate:
        """The stage with the least headroom."""
        return min(self.stages, key=lambda s: (s.memory.headroom_bytes, s.stage))


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
        table = _TABLES[key] = layer_table(model, job, normalised, node)
    return table


def _virtual_stage_cost(model: ModelSpec, table: LayerTable, first_layer: int, n_layers: int) -> LayerCost:
    if not model.is_moe and not model.window_size:
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


def _recomputed_layers(c: ParallelConfig, n_layers: int) -> int:
    if c.recompute not in LAYER_RECOMPUTE:
        return 0
    return n_layers if c.recompute_num_layers == 0 else min(c.recompute_num_layers, n_layers)


def _stage_link(cluster: ClusterSpec, c: ParallelConfig, r: int, to: int | None = None) -> comm.Link:
    """Link from pipeline rank r to rank ``to`` (default r+1, wrapping for interleaving): the slower
    side's."""
    g: Group = group(c, "pp")
    a = node_of_stage(cluster, c, r)
    b = node_of_stage(cluster, c, (r + 1) % c.pp if to is None else to)
    la, lb = comm.link_for(g, a), comm.link_for(g, b)
    return la if la.bandwidth_bytes_per_s <= lb.bandwidth_bytes_per_s else lb


def estimate(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> Estimate:
    """Predict one resolved configuration (see :func:`cost_models.parallel.resolve`)."""
    p, v = c.pp, c.vpp
    n_virtual = p * v
    m = c.num_microbatches(job)
    layers = c.stage_layers(model)
    first_layer = np.concatenate([[0], np.cumsum(layers)[:-1]]).astype(int).tolist()
    nodes = [node_of_stage(cluster, c, r) for r in range(p)]
    split_w = c.schedule in schedules.SPLIT_W
    unfused = unfused_accumulation_applies(job, c)

    durations = np.zeros((n_virtual, 3))
    act_units = np.zeros(n_virtual)
    wfrac = np.zeros(n_virtual)
    p2p = np.zeros(n_virtual)
    per_rank: list[dict] = [
        dict(
            cost=ZERO,
            recompute=0.0,
            transient=0.0,
            fsdp=0.0,
            fsdp_comm=0.0,
            offload=0.0,
            host=0.0,
            largest=0.0,
            fwd=0.0,
            bwd=0.0,
            comm=0.0,
            flop=0.0,
        )
        for _ in range(p)
    ]
    rank_of = [schedules.stage_rank(c.schedule, p, vs) for vs in range(n_virtual)]
    for vs in range(n_virtual):
        r = rank_of[vs]
        node = nodes[r]
        table = table_for(model, job, c, node)
        n = layers[vs]
        cost = _virtual_stage_cost(model, table, first_layer[vs], n)
        k = _recomputed_layers(c, n)
        layer_unit = _virtual_stage_cost(model, table, first_layer[vs], 1)
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
        durations[vs] = (fwd, b_in, b_w) if split_w else (fwd, b_in + b_w, 0.0)
        offload = offload_terms(model, table, c, first_layer[vs], n, node) if c.offload_layers else None
        if offload is not None:
            # The copies' exposed parts lengthen the passes (the timeline's durations), and are
            # itemised apart from compute, as FSDP's exposed collectives are.
            act -= offload.resident_bytes_saved
            durations[vs, 0] += offload.forward_exposed_s
            durations[vs, 1] += offload.backward_exposed_s
            per_rank[r]["offload"] += offload.forward_exposed_s + offload.backward_exposed_s
            per_rank[r]["host"] += offload.resident_bytes_saved / v
            per_rank[r]["transient"] = max(per_rank[r]["transient"], offload.transit_bytes)
        act_units[vs] = act
        wfrac[vs] = min(1.0, wbytes / act) if act else 0.0
        # to the next virtual stage's rank (none on the last; ZB-V's turn stays on rank p - 1)
        to = rank_of[vs + 1] if vs + 1 < n_virtual else (r + 1) % p
        p2p[vs] = (
            pipeline_transfer_s(
                model, job, c, _stage_link(cluster, c, r, to), comm.link_for(group(c, "tp"), nodes[to])
            )
            if p > 1 and to != r
            else 0.0
        )
        acc = per_rank[r]
        acc["cost"] = acc["cost"] + total
        acc["recompute"] += recompute
        acc["fwd"] += fwd
        acc["bwd"] += b_in + b_w
        acc["comm"] += total.forward_comm_s + total.backward_comm_s
        acc["flop"] += total.model_flop
        if k:
            acc["transient"] = max(acc["transient"], layer_unit.activation_bytes)
        elif c.recompute == "selective":
            # one layer's recomputed modules live until its backward has used them
            acc["transient"] = max(acc["transient"], layer_unit.selective_dropped_bytes)
        if vs == n_virtual - 1:
            acc["transient"] = max(acc["transient"], loss_transient_bytes(model, job, c))
        acc["largest"] = max(acc["largest"], layer_unit.params * c.tp)

    # Fully sharded data parallelism gathers weights per micro-batch (forward and backward) and
    # reduce-scatters gradients; ZeRO-2 keeps only its gradient shard, so it reduce-scatters every
    # micro-batch's gradients too (Rajbhandari et al. 2020, Sec. 5.2). Prefetching overlaps this with
    # the neighbouring unit's compute, one unit ahead (cost_models/fsdp.py); what exceeds it is exposed.
    if (
        c.optimizer_sharding in ("full", "zero2")
        and c.dp * c.cp > 1
        and m > 1
        or c.optimizer_sharding == "full"
    ):
        for vs in range(n_virtual):
            r = rank_of[vs]
            if c.shard_degree == 1:
                continue
            link = comm.link_for(group(c, "shard"), nodes[r])
            params = per_rank[r]["cost"].params / v
            grad_b = float(DTYPE_BYTES[job.grad_dtype])
            # FSDP wraps each transformer layer as one unit: one gather (and one reduce-scatter) per
            # layer, each paying the collective's latency; ZeRO-2 reduces in DDP-sized buckets.
            units = (
                max(1, layers[vs])
                if c.optimizer_sharding == "full"
                else max(1, math.ceil(params / DDP_BUCKET_PARAMS))
            )
            n = c.shard_degree
            gather = (
                comm.all_gather_s(params * 2.0 / units, n, link) if c.optimizer_sharding == "full" else 0.0
            )
            scatter = comm.reduce_scatter_s(params * grad_b / units, n, link)
            px = fsdp.pass_exposure(
                units,
                gather,
                scatter,
                float(durations[vs, 0]),
                float(durations[vs, 1] + durations[vs, 2]),
                nodes[r].gpu.efficiency.comm_overlap_slowdown,
            )
            durations[vs, 0] += px.forward_s
            durations[vs, 1] += px.backward_s
            per_rank[r]["fsdp"] += px.forward_s + px.backward_s
            per_rank[r]["fsdp_comm"] += px.comm_s

    orders = schedules.generate(c.schedule, p, m, v)
    timeline = schedules.simulate(orders, durations, p2p, m, wfrac, act_units, (c.schedule, p, m, v))
    if c.schedule in schedules.POST_VALIDATION:
        timeline = timeline.aligned()

    stages: list[StageEstimate] = []
    ends = []
    opt_times = []
    gather_exposed = []
    for r in range(p):
        own = schedules.rank_stages(c.schedule, p, v, r)
        acc, node, gpu = per_rank[r], nodes[r], nodes[r].gpu
        cost: LayerCost = acc["cost"]
        dense = cost.params_sharded + cost.params_replicated
        static = mem.static_memory(dense, cost.params_expert, job, c, acc["largest"] / c.tp)
        sync = dp_sync(
            job,
            c,
            node,
            dense,
            cost.params_expert,
            m,
            backward_window_s=acc["bwd"] / v,
            forward_window_s=float(durations[r, 0]),
        )
        reduce_s, reduce_exposed, gather_s, g_exposed, opt_s = (
            sync.reduce_s,
            sync.reduce_exposed_s,
            sync.gather_s,
            sync.gather_exposed_s,
            sync.optimizer_s,
        )
        end_r = float(timeline.end_s[r][-1])
        ends.append(end_r + reduce_exposed)
        opt_times.append(opt_s)
        gather_exposed.append(g_exposed)
        peak_level = timeline.peak_inflight(r)
        mean_unit = float(np.mean(act_units[own])) if v else 1.0
        memory = mem.breakdown(
            static,
            peak_level,
            acc["transient"],
            gpu.memory_reserve_bytes,
            gpu.memory_bytes,
            peak_level / mean_unit if mean_unit else 0.0,
        )
        stages.append(
            StageEstimate(
                stage=r,
                gpu=gpu.name,
                layers=tuple(layers[vs] for vs in own),
                forward_s=acc["fwd"],
                backward_s=acc["bwd"],
                recompute_s=acc["recompute"],
                tp_cp_ep_comm_s=acc["comm"],
                p2p_s=float(max(p2p[own])),
                dp_comm_s=reduce_s + gather_s + acc["fsdp_comm"] * m,
                dp_exposed_s=reduce_exposed + g_exposed,
                optimizer_s=opt_s,
                busy_s=timeline.busy_s(r),
                idle_s=timeline.idle_s(r),
                memory=memory,
                model_flop_per_microbatch=acc["flop"],
                fsdp_exposed_s=acc["fsdp"],
                offload_exposed_s=acc["offload"],
                host_bytes=acc["host"] * memory.peak_inflight_microbatches,
                host_share_bytes=mem.host_share_bytes(nodes[r].host_memory_bytes, nodes[r].gpus_per_node),
                reduce_exposed_s=reduce_exposed,
                gather_exposed_s=g_exposed,
                end_s=end_r,
            )
        )
    pipeline_time = timeline.makespan_s
    step = max(ends) + max(opt_times) + max(gather_exposed)
    tokens = job.tokens_per_step
    world = c.world_size
    peak_total = sum(g.num_gpus * g.gpu.peak(COMPUTE_DTYPE[job.precision]) for g in cluster.groups)
    model_flop = model_flop_per_iteration(model, job)
    recomputed = sum(_recomputed_layers(c, n) for n in layers) / model.num_layers
    hardware_flop = hardware_flop_per_iteration(model, job, c.recompute, recomputed)
    return Estimate(
        config=c,
        num_microbatches=m,
        step_time_s=step,
        pipeline_time_s=pipeline_time,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / world,
        mfu=model_flop / (step * peak_total),
        hfu=hardware_flop / (step * peak_total),
        bubble_fraction=timeline.bubble_fraction(),
        stages=tuple(stages),
        timeline=timeline,
    )
