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

from dataclasses import dataclass

import numpy as np

from cost_models import fsdp, schedules
from cost_models import memory as mem
from cost_models.compute import COMPUTE_DTYPE
from cost_models.data_parallel import (
    DDP_BUCKET_PARAMS,
    DPSync,
    adam_bytes_per_param,
    ddp_bucket_params,
    dp_sync,
    embedding_sync_s,
    synced_embedding_params,
    unfused_accumulation_applies,
    unfused_accumulation_bytes,
)
from cost_models.flops import hardware_flop_per_iteration, model_flop_per_iteration
from cost_models.parallel import ParallelConfig
from cost_models.stage_terms import (
    ChunkTerms,
    OffloadTerms,
    RankTotals,
    chunk_terms,
    node_of_stage,
    offload_terms,
    pass_durations,
    rank_totals,
    recomputed_layers,
    sharded_passes,
    stage_link,
    table_for,
    table_key,
)
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

__all__ = [
    # the data-parallel terms (cost_models.data_parallel) and the per-chunk terms
    # (cost_models.stage_terms) stay importable from here
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


def estimate(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> Estimate:
    """Predict one resolved configuration (see :func:`cost_models.constraints.resolve`)."""
    p, v = c.pp, c.vpp
    m = c.num_microbatches(job)
    layers = c.stage_layers(model)
    nodes = [node_of_stage(cluster, c, r) for r in range(p)]
    chunks = chunk_terms(model, cluster, job, c, layers, nodes)
    totals = tuple(rank_totals(chunks, r) for r in range(p))
    passes = sharded_passes(job, c, m, layers, chunks, totals, nodes)
    durations = pass_durations(chunks, passes)
    act_units = np.array([t.activation_bytes for t in chunks], dtype=float)
    wfrac = np.array([t.weight_grad_fraction for t in chunks], dtype=float)
    p2p = np.array([t.p2p_s for t in chunks], dtype=float)
    orders = schedules.generate(c.schedule, p, m, v)
    timeline = schedules.simulate(orders, durations, p2p, m, wfrac, act_units, (c.schedule, p, m, v))
    if c.schedule in schedules.POST_VALIDATION:
        timeline = timeline.aligned()
    embedding_s = _embedding_sync_s(model, cluster, job, c)
    stages = tuple(
        _stage_estimate(
            job,
            c,
            r,
            m,
            layers,
            nodes[r],
            totals[r],
            chunks,
            passes,
            timeline,
            durations,
            act_units,
            p2p,
            embedding_s=embedding_s if r in (0, p - 1) else 0.0,
        )
        for r in range(p)
    )
    step = (
        max(s.end_s + s.reduce_exposed_s for s in stages)
        + max(s.optimizer_s for s in stages)
        + max(s.gather_exposed_s for s in stages)
    )
    tokens = job.tokens_per_step
    world = c.world_size
    peak_total = sum(g.num_gpus * g.gpu.peak(COMPUTE_DTYPE[job.precision]) for g in cluster.groups)
    model_flop = model_flop_per_iteration(model, job)
    recomputed = sum(recomputed_layers(c, n) for n in layers) / model.num_layers
    hardware_flop = hardware_flop_per_iteration(model, job, c.recompute, recomputed)
    return Estimate(
        config=c,
        num_microbatches=m,
        step_time_s=step,
        pipeline_time_s=timeline.makespan_s,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / world,
        mfu=model_flop / (step * peak_total),
        hfu=hardware_flop / (step * peak_total),
        bubble_fraction=timeline.bubble_fraction(),
        stages=stages,
        timeline=timeline,
    )


def _embedding_sync_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> float:
    """The shared word embedding's gradient all-reduce between the first and the last pipeline
    rank (:func:`cost_models.data_parallel.embedding_sync_s` of
    :func:`~cost_models.data_parallel.synced_embedding_params`), over the slower of their links."""
    params = synced_embedding_params(model, job, c)
    if params <= 0:
        return 0.0
    return embedding_sync_s(job, c, params, stage_link(cluster, c, 0, c.pp - 1))


def _stage_estimate(
    job: JobSpec,
    c: ParallelConfig,
    r: int,
    m: int,
    layers: tuple[int, ...],
    node: NodeGroup,
    acc: RankTotals,
    chunks: tuple[ChunkTerms, ...],
    passes: tuple[fsdp.PassExposure | None, ...],
    timeline: schedules.Timeline,
    durations: np.ndarray,
    act_units: np.ndarray,
    p2p: np.ndarray,
    embedding_s: float = 0.0,
) -> StageEstimate:
    """Pipeline rank ``r`` after the timeline: its memory at the timeline's in-flight peak, its
    data-parallel synchronisation and optimizer step (:func:`cost_models.data_parallel.dp_sync`),
    and its totals per micro-batch (``durations``, ``act_units``, ``p2p``: the timeline's inputs,
    indexed by virtual stage); ``embedding_s``: the shared embedding's gradient all-reduce this rank
    pays after its reduction (:func:`cost_models.data_parallel.embedding_sync_s`; first and last
    rank only)."""
    own = schedules.rank_stages(c.schedule, c.pp, c.vpp, r)
    gpu = node.gpu
    cost = acc.cost
    dense = cost.params_sharded + cost.params_replicated
    static = mem.static_memory(
        dense, cost.params_expert, job, c, acc.largest_layer_params / c.tp, cost.frozen_weight_bytes
    )
    sync = dp_sync(
        job,
        c,
        node,
        dense,
        cost.params_expert,
        m,
        backward_window_s=acc.backward_s / c.vpp,
        forward_window_s=float(durations[r, 0]),
    )
    # FSDP / ZeRO-2 collectives inside the passes, summed in virtual-stage order
    fsdp_exposed = fsdp_comm = 0.0
    for t, px in zip(chunks, passes):
        if t.rank == r and px is not None:
            fsdp_exposed += px.forward_s + px.backward_s
            fsdp_comm += px.comm_s
    peak_level = timeline.peak_inflight(r)
    mean_unit = float(np.mean(act_units[own])) if c.vpp else 1.0
    memory = mem.breakdown(
        static,
        peak_level,
        acc.transient_bytes,
        gpu.memory_reserve_bytes,
        gpu.memory_bytes,
        peak_level / mean_unit if mean_unit else 0.0,
    )
    return StageEstimate(
        stage=r,
        gpu=gpu.name,
        layers=tuple(layers[vs] for vs in own),
        forward_s=acc.forward_s,
        backward_s=acc.backward_s,
        recompute_s=acc.recompute_s,
        tp_cp_ep_comm_s=acc.comm_s,
        p2p_s=float(max(p2p[own])),
        dp_comm_s=sync.reduce_s + sync.gather_s + fsdp_comm * m + embedding_s,
        dp_exposed_s=sync.reduce_exposed_s + sync.gather_exposed_s + embedding_s,
        optimizer_s=sync.optimizer_s,
        busy_s=timeline.busy_s(r),
        idle_s=timeline.idle_s(r),
        memory=memory,
        model_flop_per_microbatch=acc.model_flop,
        fsdp_exposed_s=fsdp_exposed,
        offload_exposed_s=acc.offload_exposed_s,
        host_bytes=acc.host_bytes * memory.peak_inflight_microbatches,
        host_share_bytes=mem.host_share_bytes(node.host_memory_bytes, node.gpus_per_node),
        reduce_exposed_s=sync.reduce_exposed_s + embedding_s,
        gather_exposed_s=sync.gather_exposed_s,
        end_s=float(timeline.end_s[r][-1]),
    )
