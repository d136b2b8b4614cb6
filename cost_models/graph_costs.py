"""The estimate of a stage graph of a graph model (a DAG of blocks), from the costs of its units
(:mod:`cost_models.graph_units`).

A stage graph (:class:`StageGraph`) is timed by the generalised 1F1B of
:mod:`cost_models.graph_schedule`; memory, data-parallel synchronisation and the optimizer step
follow :func:`cost_models.estimate.estimate` term for term, so the result is an ordinary
:class:`~cost_models.estimate.Estimate` (bubble budgets and reports read it unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models import communication as comm
from cost_models import memory as mem
from cost_models.compute import COMPUTE_DTYPE
from cost_models.data_parallel import dp_sync, embedding_sync_s, synced_embedding_params
from cost_models.estimate import Estimate, StageEstimate
from cost_models.graph_schedule import depths, simulate_graph, topological_order
from cost_models.graph_units import UnitLayout, unit_costs, unit_layout
from cost_models.layer_cost import LayerCost
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.graph_spec import GraphModelSpec
from planner.inputs.job_spec import JobSpec


@dataclass(frozen=True, slots=True)
class StageGraph:
    """Stages (unit indices each, in stage order) and the stage edges they induce."""

    stages: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[int, int], ...]
    replicas: tuple[int, ...] = ()
    """Data-parallel replicas of each stage inside one pipeline (each takes ``1/replicas`` of the
    micro-batch, PipeDream's replicated stages); empty = one each."""
    tps: tuple[int, ...] = ()
    """Tensor-parallel degree of each stage; empty = the plan's tp for every stage."""

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def replicas_of(self, stage: int) -> int:
        """Replicas of ``stage`` (1 when not given)."""
        return self.replicas[stage] if self.replicas else 1

    def tp_of(self, stage: int, default: int) -> int:
        """Tensor-parallel degree of ``stage`` (``default``, the plan's, when not given)."""
        return self.tps[stage] if self.tps else default

    @property
    def depths(self) -> list[int]:
        """Stages on the longest path to the sink, each stage included."""
        return depths(self.num_stages, self.edges)


def reachability(sg: StageGraph) -> np.ndarray:
    """reach[a, b]: stage b is stage a or one of its descendants."""
    S = sg.num_stages
    reach = np.eye(S, dtype=bool)
    for u in reversed(topological_order(S, sg.edges)):
        for a, b in sg.edges:
            if a == u:
                reach[u] |= reach[b]
    return reach


def check_stage_graph(layout: UnitLayout, sg: StageGraph) -> str:
    """Why ``sg`` is not a valid stage graph of ``layout`` ('' when it is): every unit in exactly one
    stage, the stage edges acyclic, and every unit edge running inside a stage or to a descendant."""
    owner: dict[int, int] = {}
    for i, units in enumerate(sg.stages):
        if not units:
            return f"stage {i} has no units"
        for u in units:
            if u in owner or not 0 <= u < layout.num_units:
                return f"unit {u} is assigned twice or does not exist"
            owner[u] = i
    if len(owner) != layout.num_units:
        return f"units {sorted(set(range(layout.num_units)) - set(owner))[:5]} are in no stage"
    try:
        reach = reachability(sg)
    except ValueError as exc:
        return str(exc)
    for u, v, _ in layout.edges:
        if not reach[owner[u], owner[v]]:
            return f"unit {v} needs unit {u}, but stage {owner[v]} does not follow stage {owner[u]}"
    return ""


def stage_node(cluster: ClusterSpec) -> NodeGroup:
    """The node group of a single-GPU-type cluster (graph plans need one GPU type)."""
    return cluster.groups[0]


def replicated_config(
    c: ParallelConfig, replicas: int, pipelined: bool, tp: int | None = None
) -> ParallelConfig:
    """The configuration a stage's GPUs see: ``c.dp`` pipelines x ``replicas``, each replica with
    ``micro_batch_size / replicas`` sequences per micro-batch (``c`` holds the pipeline's shape) on
    ``tp`` GPUs (default ``c.tp``); ``pipelined``: the plan has more than one stage (tied output
    weights)."""
    return ParallelConfig(
        tp=tp or c.tp,
        pp=2 if pipelined else 1,
        dp=c.dp * replicas,
        micro_batch_size=c.micro_batch_size // replicas,
        recompute=c.recompute,
        sequence_parallel=c.sequence_parallel,
        optimizer_sharding=c.optimizer_sharding,
        schedule=c.schedule,
    )


def _embedding_sync_s(
    g: GraphModelSpec,
    layout: UnitLayout,
    owner: np.ndarray,
    job: JobSpec,
    configs: list[ParallelConfig],
    link: comm.Link,
) -> list[float]:
    """Per stage, the shared word embedding's gradient all-reduce after its data-parallel reduction
    (:func:`cost_models.data_parallel.embedding_sync_s`, as :func:`cost_models.estimate.estimate`
    prices it for chains): for every transformer block whose first layer carries the embedding and
    whose last the output head tied to it, paid by the two stages holding them when they differ,
    each at the longer of the two stages' times (a stage with more replicas or a wider tensor
    parallelism holds a smaller shard; the pair finishes together)."""
    out = [0.0] * len(configs)
    units = np.asarray(layout.block)
    for bi, block in enumerate(g.blocks):
        if block.transformer is None or not (block.embedding and block.output_head):
            continue
        at = np.flatnonzero(units == bi)
        pair = {int(owner[at[0]]), int(owner[at[-1]])}
        if len(pair) < 2:
            continue
        t = max(
            embedding_sync_s(
                job, configs[i], synced_embedding_params(block.transformer, job, configs[i]), link
            )
            for i in pair
        )
        for i in pair:
            out[i] += t
    return out


def _tied_copy_params(
    g: GraphModelSpec, layout: UnitLayout, owner: np.ndarray, configs: list[ParallelConfig]
) -> list[float]:
    """Per stage, the output-weight copy its units were priced with but do not hold: a block whose
    output head is tied to its word embedding (``untie_embeddings_and_output_weights`` false) is
    priced, in a plan of several stages, as Megatron-Core places it on a pipeline, with a copy of
    the ``V x h / tp`` embedding on the head's stage (:func:`cost_models.layers._output`; Megatron-Core
    ``LanguageModule.setup_embeddings_and_output_layer``, which allocates and syncs the copy only on
    a last stage that is not also the first). When the block's embedding and head are on the same
    stage, that stage holds the one shared tensor, as a single-stage model does, and no copy (nor
    its gradient all-reduce, :func:`_embedding_sync_s`). The searches' memory screens sum the units'
    own bytes (:attr:`cost_models.graph_units.UnitCosts.static_bytes`), copy included: they may
    pass over such a stage that fits by this saving, never admit one that does not fit."""
    out = [0.0] * len(configs)
    if len(configs) < 2:
        return out
    units = np.asarray(layout.block)
    for bi, block in enumerate(g.blocks):
        m = block.transformer
        if m is None or not (block.embedding and block.output_head) or m.untie_embeddings_and_output_weights:
            continue
        at = np.flatnonzero(units == bi)
        first, last = int(owner[at[0]]), int(owner[at[-1]])
        if first == last:
            out[first] += m.vocab_size * m.hidden_size / configs[first].tp
    return out


def estimate_graph(
    g: GraphModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, sg: StageGraph
) -> Estimate:
    """Predict a stage graph. ``c`` is the pipeline's shape: ``c.dp`` identical pipelines, each
    micro-batch ``c.micro_batch_size`` sequences, ``c.pp`` stages; stage i runs on
    ``tp_i x replicas_i`` GPUs of every pipeline (:func:`replicated_config`)."""
    layout = unit_layout(g)
    node = stage_node(cluster)
    m = c.num_microbatches(job)
    S = sg.num_stages
    configs = [replicated_config(c, sg.replicas_of(i), S > 1, sg.tp_of(i, c.tp)) for i in range(S)]
    ucs = [unit_costs(g, job, ci, node) for ci in configs]
    owner = np.empty(layout.num_units, dtype=int)
    for i, units in enumerate(sg.stages):
        owner[list(units)] = i
    durations = np.zeros((S, 2))
    acts = np.zeros(S)
    for i, units in enumerate(sg.stages):
        idx = list(units)
        durations[i] = (ucs[i].fwd_s[idx].sum(), ucs[i].bwd_s[idx].sum())
        acts[i] = ucs[i].act_bytes[idx].sum()
    link = comm.link_for(group(c, "pp"), node)
    # A tensor from stage a to stage b crosses every stage edge (x, y) with x at or after a and y at
    # or before b (a sequential pipeline carries it through the stages in between). Per GPU, the
    # side with fewer replicas moves the larger share.
    reach = reachability(sg)
    stage_bytes = {e: 0.0 for e in sg.edges}
    for u, v, _ in layout.edges:
        a, b = int(owner[u]), int(owner[v])
        if a != b:
            for x, y in sg.edges:
                if reach[a, x] and reach[y, b]:
                    stage_bytes[(x, y)] += max(ucs[x].edge_bytes[(u, v)], ucs[y].edge_bytes[(u, v)])
    lags = [comm.p2p_s(stage_bytes[e], link) for e in sg.edges]
    timeline = simulate_graph(S, list(sg.edges), durations, m, lags, acts)
    embedding_s = _embedding_sync_s(g, layout, owner, job, configs, link)
    no_copy = _tied_copy_params(g, layout, owner, configs)

    stages, ends, opt_times, gather_exposed = [], [], [], []
    flop_iter = hw_extra = 0.0
    for i, units in enumerate(sg.stages):
        idx, ci, uc = list(units), configs[i], ucs[i]
        cost = LayerCost(*uc.cost_matrix[idx].sum(axis=0).tolist())
        dense = cost.params_sharded + cost.params_replicated - no_copy[i]
        static = mem.static_memory(dense, cost.params_expert, job, ci)
        sync = dp_sync(
            job, ci, node, dense, cost.params_expert, m, float(durations[i, 1]), float(durations[i, 0])
        )
        reduce_exposed = sync.reduce_exposed_s + embedding_s[i]
        ends.append(float(timeline.end_s[i][-1]) + reduce_exposed)
        opt_times.append(sync.optimizer_s)
        gather_exposed.append(sync.gather_exposed_s)
        peak = float(timeline.peak_inflight(i))
        transient = float(uc.transient_bytes[idx].max())  # recomputed layer or loss working set
        memory = mem.breakdown(
            static,
            peak,
            transient,
            node.gpu.memory_reserve_bytes,
            node.gpu.memory_bytes,
            peak / float(acts[i]) if acts[i] else 0.0,
        )
        out_lags = [lag for (a, _), lag in zip(sg.edges, lags) if a == i]
        gpus = ci.tp * ci.dp  # this stage's GPUs over all pipelines
        flop_iter += cost.model_flop * m * gpus
        hw_extra += float(uc.recompute_flop[idx].sum()) * m * gpus
        stages.append(
            StageEstimate(
                stage=i,
                gpu=node.gpu.name,
                layers=(len(idx),),
                forward_s=float(durations[i, 0]),
                backward_s=float(durations[i, 1]),
                recompute_s=float(uc.recompute_s[idx].sum()),
                tp_cp_ep_comm_s=cost.forward_comm_s + cost.backward_comm_s,
                p2p_s=max(out_lags, default=0.0),
                dp_comm_s=sync.reduce_s + sync.gather_s + embedding_s[i],
                dp_exposed_s=reduce_exposed + sync.gather_exposed_s,
                optimizer_s=sync.optimizer_s,
                busy_s=timeline.busy_s(i),
                idle_s=timeline.idle_s(i),
                memory=memory,
                model_flop_per_microbatch=cost.model_flop,
                devices=ci.tp * sg.replicas_of(i),
                reduce_exposed_s=reduce_exposed,
                gather_exposed_s=sync.gather_exposed_s,
                end_s=float(timeline.end_s[i][-1]),
            )
        )
    step = max(ends) + max(opt_times) + max(gather_exposed)
    world = sum(s.devices for s in stages) * c.dp
    tokens = job.global_batch_size * job.seq_length
    peak_flops = world * node.gpu.peak(COMPUTE_DTYPE[job.precision])
    return Estimate(
        config=c,
        num_microbatches=m,
        step_time_s=step,
        pipeline_time_s=timeline.makespan_s,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / world,
        mfu=flop_iter / (step * peak_flops),
        hfu=(flop_iter + hw_extra) / (step * peak_flops),
        bubble_fraction=timeline.bubble_fraction(),
        stages=tuple(stages),
        timeline=timeline,
    )
