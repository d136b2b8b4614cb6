"""Graph pipeline parallelism (GraphPipe, Jeon et al. 2024, arXiv:2406.17145): partition a
multi-branch model into a DAG of pipeline stages and compare with the best sequential pipeline.

The paper's partitioner is not public (../shared/reference/algorithms.md §2); this is planner's
design, built on the verified ideas (series-parallel decomposition, dynamic programming, stages
forming a DAG, a 1F1B-like schedule whose warm-up depends on a stage's distance to the sink):

1. **Decomposition.** The block DAG is split recursively into a series of parts (a cut where every
   sink of the prefix feeds every source of the suffix) or a parallel set of weakly connected
   components. A part that is neither (not series-parallel) is linearised in topological order:
   the documented heuristic for non-SP graphs.
2. **Modes.** Each parallel node is either *branched* (each branch gets its own stages on its own
   GPUs and runs concurrently) or *serialised* (its branches are laid out one after the other in
   the surrounding chain). Serialising every parallel node gives the sequential pipeline, so the
   best graph plan is never slower than the best sequential plan (same search, superset of plans).
3. **Stages.** A shape gives ``pipelines`` identical pipelines of ``U`` groups of ``tp`` GPUs.
   A stage is a contiguous run of units of one chain (a transformer block's layers, generic
   blocks, serialised branches) on a whole number of groups: ``tp_s x replicas`` GPUs, ``tp_s``
   dividing the shape's ``tp``, each replica taking ``1/replicas`` of the micro-batch (PipeDream's
   replicated stages). All stages of a chain share one such option. The stage graph is the chain of
   stages within a chain, joined to every branch's first stage and from every branch's last stage
   at a branched node.
4. **Objective.** The partition objective of chains (:mod:`planner.search.partition`), generalised:
   ``path + (m - 1) max_i tau_i`` where ``path`` is the critical path of per-micro-batch stage
   times. For given modes and options the path through a branched node is its heaviest branch's
   work, so the partition minimises the bottleneck ``max tau`` subject to memory with in-flight
   ``min(depth_i, m)`` (generalised 1F1B).
5. **Exact DP.** Bisection over the candidate bottleneck values (every contiguous run's time under
   every option); for a value ``T``, a DP over the decomposition (right to left, carrying the
   downstream depth) finds, for each number of groups, the least depth at which the part fits with
   every stage ``<= T`` and in memory (least depth dominates: memory only grows with depth). Within
   a chain, a sweep of reachable cut positions per stage count. Ties: chains balanced on their own,
   then lexicographically smallest stages front to back (the chain partitioner's rule).
6. **Score.** Each (shape, modes) candidate's stage graph is timed by the graph simulator
   (:func:`cost_models.graph_costs.estimate_graph`); candidates are visited best-first by a lower
   bound of the bottleneck stage's busy time (refined with every option's unit times before a
   candidate is partitioned) and pruned once the bound cannot beat the plans found.

Steps 1-2 are :mod:`planner.search.graph_structure`'s, 3-5 :mod:`planner.search.graph_partition`'s (with
:mod:`planner.search.graph_chain` and :mod:`planner.search.graph_options`);
this module searches the shapes and modes (step 6) and describes the plans.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from cost_models import memory as mem
from cost_models.estimate import Estimate
from cost_models.graph_costs import StageGraph, estimate_graph
from cost_models.graph_units import GRAPH_RECOMPUTE, unit_costs, unit_layout
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import InfeasibleError, UsageError
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec
from planner.search.chain import sort_key
from planner.search.graph_chain import StageLimits
from planner.search.graph_options import (
    StageOption,
    options_bound,
    shape_floor,
    stage_options,
    unit_config,
)
from planner.search.graph_partition import partition_graph
from planner.search.graph_structure import (
    Chain,
    Series,
    SPNode,
    decompose,
    mode_assignments,
    parallel_nodes,
    structure,
)
from planner.search.space import Restrictions, divisors

# ------------------------------------------------------------------------------------------------
# The search over shapes and modes


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """One graph-pipeline plan."""

    config: ParallelConfig
    """tp, dp (per stage), pp = number of stages, micro-batch, recompute, sharding."""
    stage_graph: StageGraph
    estimate: Estimate
    modes: tuple[bool, ...]
    """Per parallel node (decomposition pre-order): branched (True) or serialised."""

    @property
    def sequential(self) -> bool:
        """Whether every parallel node is serialised (a plain pipeline)."""
        return not any(self.modes)


@dataclass
class GraphSearchResult:
    plans: list[GraphPlan]
    sequential: GraphPlan | None
    decomposition: SPNode
    linearised_parts: int
    candidates: int = 0
    evaluated: int = 0
    pruned_by_bound: int = 0
    no_fit: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    best_by_modes: dict[tuple[bool, ...], GraphPlan] = field(default_factory=dict)
    """The fastest plan found for each branched/serialised assignment (for ``--explain``)."""

    @property
    def speedup_vs_sequential(self) -> float | None:
        if not self.plans or self.sequential is None:
            return None
        return self.sequential.estimate.step_time_s / self.plans[0].estimate.step_time_s


def graph_shapes(
    g: GraphModelSpec, cluster: ClusterSpec, job: JobSpec, r: Restrictions, rejected: dict[str, int]
) -> list[ParallelConfig]:
    """Every (tp, dp, stages, micro-batch, recompute, sharding) of a graph plan, in a fixed order."""
    if cluster.is_heterogeneous:
        raise UsageError("graph pipelines are planned on clusters of one GPU type; this cluster has several")
    for name, allowed, need in (("--cp", r.cp, 1), ("--ep", r.ep, 1), ("--vpp", r.vpp, 1)):
        if allowed is not None and need not in allowed:
            raise UsageError(f"graph pipelines use {name} 1 (no context/expert parallelism or interleaving)")
    if r.schedule is not None and "1f1b" not in r.schedule:
        raise UsageError("graph pipelines use the generalised 1F1B schedule; --schedule must allow 1f1b")
    if r.optimizer_sharding is not None and not set(r.optimizer_sharding) & {"none", "distributed"}:
        raise UsageError("graph pipelines support --optimizer-sharding none or distributed (ZeRO-1)")
    if not r.uneven_partitions:
        raise UsageError("--even-partitions applies to chain models; graph plans are partitioned by the DP")
    world = cluster.num_gpus
    node = cluster.groups[0]
    domain = node.nvlink_domain_size
    transformers = [b.transformer for b in g.blocks if b.transformer is not None]
    n_units = g.num_units
    out = []
    for tp in divisors(world):
        if r.tp is not None and tp not in r.tp:
            continue
        if (r.max_tp and tp > r.max_tp) or (tp > domain and not r.allow_cross_node_tp):
            rejected["tp leaves the NVLink domain or exceeds --max-tp"] = (
                rejected.get("tp leaves the NVLink domain or exceeds --max-tp", 0) + 1
            )
            continue
        if any(
            m.num_attention_heads % tp
            or m.ffn_hidden_size % tp
            or (m.num_query_groups % tp and tp % m.num_query_groups)
            for m in transformers
        ):
            rejected["tp does not divide every block's heads/groups/ffn"] = (
                rejected.get("tp does not divide every block's heads/groups/ffn", 0) + 1
            )
            continue
        for S in divisors(world // tp):
            if S > n_units or (r.pp is not None and S not in r.pp) or (r.max_pp and S > r.max_pp):
                continue
            dp = world // (tp * S)
            if job.global_batch_size % dp:
                rejected["global batch not divisible by dp"] = (
                    rejected.get("global batch not divisible by dp", 0) + 1
                )
                continue
            per_replica = job.global_batch_size // dp
            mbss = [b for b in divisors(per_replica) if b <= r.max_micro_batch_size]
            if r.micro_batch_size is not None:
                mbss = [b for b in mbss if b in r.micro_batch_size]
            recomputes = [x for x in GRAPH_RECOMPUTE if x in (r.recompute or ("none", "full"))]
            supported = ("none", "distributed")
            # ZeRO-1 by default, also with one pipeline: replicated stages still shard over their
            # replicas, and over one rank it equals the unsharded optimizer.
            shardings = list(r.optimizer_sharding) if r.optimizer_sharding is not None else ["distributed"]
            shardings = [s for s in supported if s in shardings]
            sps = [tp > 1] if r.sequence_parallel is None else [r.sequence_parallel and tp > 1]
            for mbs in mbss:
                for sp in sps:
                    for recompute in recomputes:
                        for sharding in shardings:
                            out.append(
                                ParallelConfig(
                                    tp=tp,
                                    pp=S,
                                    dp=dp,
                                    micro_batch_size=mbs,
                                    recompute=recompute,
                                    sequence_parallel=sp,
                                    optimizer_sharding=sharding,
                                    schedule="1f1b",
                                )
                            )
    return out


def search_graph(
    g: GraphModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    restrictions: Restrictions | None = None,
    top_k: int = 5,
    progress: Callable[[int, int, float | None], None] | None = None,
    exhaustive: bool = False,
    merge_heads: bool = True,
) -> GraphSearchResult:
    """Best graph plans and the best sequential plan; ``exhaustive`` disables pruning (tests);
    ``merge_heads``: the chain after a branched node may share one branch's last stage when that
    lowers the bottleneck (exact; False keeps every stage inside one chain)."""
    r = restrictions or Restrictions()
    layout = unit_layout(g)
    root, linearised = decompose(g)
    pars = parallel_nodes(root)
    rejected: dict[str, int] = {}
    shapes = graph_shapes(g, cluster, job, r, rejected)
    node = cluster.groups[0]
    heap = []
    structures: dict[tuple[bool, ...], Series] = {}
    for modes in mode_assignments(len(pars)):
        structures[modes] = structure(root, modes, layout)
    for index, c in enumerate(shapes):
        m = c.num_microbatches(job)
        for modes in structures:
            if c.pp == 1 and any(modes):
                continue  # one stage: nothing runs concurrently
            if _min_stages(structures[modes]) > c.pp:
                continue
            heap.append((m * shape_floor(g, job, node, c, modes), sort_key(c), modes, index, 0, c))
    heapq.heapify(heap)
    result = GraphSearchResult(plans=[], sequential=None, decomposition=root, linearised_parts=linearised)
    result.candidates = len(heap)
    result.rejections = rejected
    plans: list[GraphPlan] = []
    total = len(heap)
    done = 0
    while heap:
        bound, tie, modes, index, level, c = heapq.heappop(heap)
        serial = not any(modes)
        graph_done = len(plans) >= top_k and bound >= plans[top_k - 1].estimate.step_time_s
        seq_done = result.sequential is not None and bound >= result.sequential.estimate.step_time_s
        if not exhaustive and graph_done:
            if seq_done:  # the heap is ordered by bound: nothing left can improve either list
                result.pruned_by_bound += len(heap) + 1
                break
            if not serial:
                result.pruned_by_bound += 1
                continue
        if level == 0 and not serial:
            # refine: the least time of every unit over the options a branched plan may use
            refined = c.num_microbatches(job) * options_bound(g, job, node, c, modes)
            heapq.heappush(heap, (max(bound, refined), tie, modes, index, 1, c))
            continue
        plan = evaluate_graph(
            g, cluster, job, c, structures[modes], modes, r.memory_headroom_bytes, r.tp, merge_heads
        )
        result.evaluated += 1
        if progress:
            done = max(done, min(total - len(heap), total))  # refined items re-enter the heap
            progress(done, total, plans[0].estimate.step_time_s if plans else None)
        if plan is None:
            result.no_fit += 1
            continue
        if any(p.config == plan.config and p.stage_graph == plan.stage_graph for p in plans):
            continue  # the same plan reached from an equivalent shape (replicas folded into pipelines)
        plans.append(plan)
        known = result.best_by_modes.get(modes)
        if known is None or plan.estimate.step_time_s < known.estimate.step_time_s:
            result.best_by_modes[modes] = plan
        plans.sort(key=lambda p: (p.estimate.step_time_s, sort_key(p.config), p.modes))
        del plans[top_k * 4 :]
        if serial and (
            result.sequential is None
            or (plan.estimate.step_time_s, sort_key(plan.config))
            < (result.sequential.estimate.step_time_s, sort_key(result.sequential.config))
        ):
            result.sequential = plan
    result.plans = plans[:top_k]
    if progress:
        progress(total, total, plans[0].estimate.step_time_s if plans else None)
    return result


def _min_stages(s: Series) -> int:
    return sum(1 if isinstance(i, Chain) else sum(_min_stages(b) for b in i.branches) for i in s.items)


def _undominated(
    options: tuple[StageOption, ...], ucs: dict, units: tuple[int, ...]
) -> tuple[StageOption, ...]:
    """Drop an option when another of the same GPU count is no slower and needs no more memory on
    every unit of the chain (it can replace it in any plan)."""
    idx = list(units)

    def arrays(o):
        uc = ucs[o]
        return (uc.tau_s[idx], uc.static_bytes[idx], uc.act_bytes[idx], uc.transient_bytes[idx])

    keep = []
    for o in options:
        mine = arrays(o)
        dominated = any(
            q != o
            and q[0] * q[1] == o[0] * o[1]
            and all((x <= y).all() for x, y in zip(arrays(q), mine))
            and (any((x < y).any() for x, y in zip(arrays(q), mine)) or q < o)
            for q in options
        )
        if not dominated:
            keep.append(o)
    return tuple(keep)


def _tp_fits(g: GraphModelSpec, blocks: set[int], tp: int) -> bool:
    """Whether ``tp`` divides the heads, query groups (or is a multiple of them) and FFN of blocks."""
    for bi in blocks:
        m = g.blocks[bi].transformer
        if m is not None and (
            m.num_attention_heads % tp
            or m.ffn_hidden_size % tp
            or (m.num_query_groups % tp and tp % m.num_query_groups)
        ):
            return False
    return True


def evaluate_graph(
    g: GraphModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    c: ParallelConfig,
    root: Series,
    modes: tuple[bool, ...],
    headroom_bytes: float = 0.0,
    allowed_tp: tuple[int, ...] | None = None,
    merge_heads: bool = True,
) -> GraphPlan | None:
    """Partition one (shape, modes) candidate and time it; None when no partition fits.

    ``c.pp`` is the pipeline's number of tensor-parallel groups; the plan's ``pp`` is its stage
    count (fewer when stages are replicated).
    """
    node = cluster.groups[0]
    layout = unit_layout(g)
    options = tuple(o for o in stage_options(c, modes) if allowed_tp is None or o[0] in allowed_tp)

    def options_for(chain: Chain) -> tuple[StageOption, ...]:
        blocks = {layout.block[u] for u in chain.units}
        return _undominated(tuple(o for o in options if _tp_fits(g, blocks, o[0])), ucs, chain.units)

    ucs = {o: unit_costs(g, job, unit_config(c, o), node) for o in options}
    lim = StageLimits(
        capacity_bytes=node.gpu.memory_bytes - node.gpu.memory_reserve_bytes - headroom_bytes,
        fragmentation=mem.FRAGMENTATION_FRACTION,
        m=c.num_microbatches(job),
    )
    part = partition_graph(root, ucs, c.pp, lim, options, c.tp, options_for, merge_heads)
    if part is None:
        return None
    sg, _ = part
    config = c.with_(pp=sg.num_stages)
    if sg.replicas:
        # replicas shared by every stage are more pipelines of a smaller micro-batch: fold them
        common = math.gcd(*sg.replicas)
        if common > 1:
            config = config.with_(dp=c.dp * common, micro_batch_size=c.micro_batch_size // common)
            reps = tuple(r // common for r in sg.replicas)
            sg = StageGraph(sg.stages, sg.edges, reps if any(r > 1 for r in reps) else (), sg.tps)
    if sg.tps:  # the plan's tp is its widest stage's (the same plan found from any group size)
        widest = max(sg.tps)
        config = config.with_(tp=widest, sequence_parallel=config.sequence_parallel and widest > 1)
        sg = StageGraph(sg.stages, sg.edges, sg.replicas, sg.tps if len(set(sg.tps)) > 1 else ())
    est = estimate_graph(g, cluster, job, config, sg)
    if est.worst_stage.memory.headroom_bytes < headroom_bytes * (1 - 1e-9) - 1.0:
        return None
    return GraphPlan(config, sg, est, modes)


def run_graph_search(g, cluster, job, restrictions, top_k=5, progress=None) -> GraphSearchResult:
    """:func:`search_graph`, raising InfeasibleError when nothing fits."""
    result = search_graph(g, cluster, job, restrictions, top_k, progress)
    if not result.plans:
        raise InfeasibleError(
            f"nothing fits: {g.name} ({g.params_total / 1e9:.1f}B parameters) on {cluster.num_gpus} GPUs has no "
            "graph or sequential pipeline plan within memory"
            + (f" ({result.evaluated} candidates partitioned)" if result.evaluated else " (no valid shape)")
        )
    return result


def describe(g: GraphModelSpec, n: SPNode) -> str:
    """The decomposition as text: ``(a ; b) || c`` style (``;`` series, ``||`` parallel)."""
    if n.kind == "block":
        return g.blocks[n.block].name
    if n.kind == "series":
        inner = " ; ".join(describe(g, c) for c in n.children)
        return inner if len(n.children) == 1 else f"({inner})"
    return "(" + " || ".join(describe(g, c) for c in n.children) + ")"
