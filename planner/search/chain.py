"""Search: enumerate shapes -> bound -> partition -> simulate -> rank (STYLE lesson 5).

1. :func:`planner.search.space.enumerate_shapes` yields every valid shape (degrees, micro-batch,
   recompute, sharding, schedule); each full-recompute shape also comes in variants recomputing
   fewer layers per stage.
2. Every (shape, variant) enters a heap keyed by a cheap lower bound of its step time (the
   average per-stage work, :func:`_cheap_bound`). When an item reaches the top, its bound is
   refined once (:func:`_bounds`: the pipeline path bound with point-to-point lags, pigeonhole on
   ceil(L/p) layers, the exposed data-parallel tail, and on mixed GPU types an integer
   water-filling with memory caps and, for two node groups, the best placement), then its memory
   feasibility is checked exactly from the stage models, and only then it is partitioned
   (:mod:`planner.search.partition`: DP, or the DP that also places node groups) and simulated through
   :func:`cost_models.estimate.estimate`.
3. The search stops when the key at the top of the heap is not below the k-th best simulated step
   time. Every key is a proven lower bound of what the simulator reports (the pipeline bounds are
   also checked against the simulator on random pipelines in the tests), so pruning never loses
   the best plan; the tests compare the result with an exhaustive brute force.
Ties break on a fixed key of the configuration, so the same inputs give the same ranking.
4. The ranking is folded into distinct choices (:func:`planner.search.candidates.fold_equivalent`:
   a plan within 0.1% of a better one's time and with no less memory is listed under it as an
   alternative); the search runs until it has ``top_k`` distinct plans.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cost_models import communication as comm
from cost_models import memory as mem
from cost_models.estimate import DDP_BUCKET_PARAMS, Estimate, dp_sync, estimate, node_of_stage, table_for
from cost_models.parallel import LAYER_RECOMPUTE, RECOMPUTE, ParallelConfig, group, resolve, violations
from cost_models.schedules import peak_inflight
from cost_models.tensors import p2p_activation_bytes
from planner.errors import ConfigError
from planner.search.candidates import Candidate, fold_equivalent
from planner.search.partition import Partition, StageModel, dp_partition, placement_partition
from planner.search.space import Rejections, Restrictions, enumerate_shapes
from planner.specs import DTYPE_BYTES, ClusterSpec, JobSpec, ModelSpec, NodeGroup

ProgressFn = Callable[[int, int, "float | None"], None]
"""``progress(done, total, best_step_time_s)``: candidates settled of ``total`` (non-decreasing,
last ``done == total``) and the best predicted step time so far (None before the first plan)."""


@dataclass(frozen=True, slots=True)
class RankedPlan:
    """One plan: the resolved configuration, the cluster in rank order, and its prediction."""

    config: ParallelConfig
    cluster: ClusterSpec
    estimate: Estimate
    stage_groups: tuple[int, ...] = ()
    """For heterogeneous clusters: the input node group hosting each stage."""
    alternatives: tuple[RankedPlan, ...] = ()
    """Equivalent variants folded into this plan (same time within 0.1%, no less memory)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one shape (for ``--explain``)."""

    config: ParallelConfig
    bound_s: float
    step_time_s: float | None = None
    reason: str = ""
    breakdown: tuple[tuple[str, float], ...] = ()
    """Per-iteration time components of evaluated shapes (for ``--explain``)."""


@dataclass
class SearchResult:
    plans: list[RankedPlan]
    shapes_enumerated: int = 0
    shapes_evaluated: int = 0
    pruned_by_memory: int = 0
    pruned_by_bound: int = 0
    rejections: Rejections = field(default_factory=Rejections)
    outcomes: list[Outcome] = field(default_factory=list)
    infeasible_reason: str = ""
    candidates: list[Candidate] | None = None
    """Every enumerated configuration and what became of it (only with ``collect=True``)."""


def sort_key(c: ParallelConfig) -> tuple:
    """Deterministic tie-break: prefer fewer model-parallel GPUs, simpler schedules, less recompute."""
    return (
        c.tp * c.pp * c.cp,
        c.tp,
        c.pp,
        c.cp,
        c.ep,
        c.vpp,
        -c.micro_batch_size,
        RECOMPUTE.index(c.recompute),
        c.recompute_num_layers or 10**9,
        ("distributed", "none", "zero2", "full").index(c.optimizer_sharding),
        ("1f1b", "interleaved", "zb-h1", "gpipe").index(c.schedule),
        c.layers_per_stage,
    )


@lru_cache(maxsize=4096)
def schedule_inflight(
    schedule: str, p: int, m: int, v: int, weight_fraction: float = 0.0
) -> tuple[float, ...]:
    """Peak micro-batches in flight per rank, read from the schedule's operation order (cached)."""
    return peak_inflight(schedule, p, m, v, weight_fraction)


def _weight_fraction(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> float:
    if c.schedule != "zb-h1":
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
    position = 0 if stage == 0 else (2 if stage == c.pp - 1 else 1)
    if c.pp == 1:
        position = 3
    key = (
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
        c.dp,
        c.optimizer_sharding,
        c.recompute,
        c.recompute_num_layers,
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


def _stage_model(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, stage: int, inflight: float
) -> StageModel:
    t, layer = _layer_of(model, job, c, node)
    extra = t.dense.scaled(0.0)
    if stage == 0:
        extra = extra + t.embedding
    if stage == c.pp - 1:
        extra = extra + t.output
    d_dense, d_exp = c.dp * c.cp, (c.tp * c.cp * c.dp) // (c.expert_tp * c.ep)
    wd, gd, od = mem.bytes_per_param(job, c.optimizer_sharding, d_dense)
    we, ge, oe = mem.bytes_per_param(job, c.optimizer_sharding, d_exp)

    def state(cost) -> float:
        return (cost.params_sharded + cost.params_replicated) * (wd + gd + od) + cost.params_expert * (
            we + ge + oe
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
    return StageModel(
        layer_s=layer_s,
        recompute_s=recompute_s,
        extra_s=extra_s,
        static_per_layer_bytes=state(layer),
        act_per_layer_bytes=layer.activation_bytes,
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
    )


def pipeline_lower_bound(work_s: float, m: int, p: int, path_share: float = 1.0, lag_s: float = 0.0) -> float:
    """A lower bound of the simulated pipeline time, whatever the partition.

    ``work_s`` is one micro-batch's forward + backward work summed over all stages. The busiest
    stage does at least the average, ``m W / p``. Stage k also cannot start before the first
    micro-batch's forwards through stages 0..k-1, nor finish before its last backward went back
    through them; those passes are at least ``path_share`` of the earlier stages' work (1 for
    1F1B and GPipe, (F+B)/(F+B+W) for ZB-H1 whose W is off the path, 1/v with v interleaved
    chunks), plus a point-to-point ``lag_s`` per hop each way. So ``T >= S_k + m tau_k`` with
    ``S_{k+1} >= S_k + r tau_k + 2 c``. Minimising the largest of these over all ``tau`` with
    ``sum tau = W`` equalises them: ``T >= (r W + 2 c p) / (1 - q^p) - 2 c m / r`` with
    ``q = 1 - r/m``. Relaxing integrality (and sign) only lowers the minimum, so it stays a bound
    (also checked against the simulator on random pipelines in the tests).
    """
    average = m * work_s / p
    if p == 1:
        return average
    r = min(1.0, path_share)
    q = 1.0 - r / m
    if q >= 1.0:
        return average
    return max(average, (r * work_s + 2 * lag_s * p) / (1.0 - q**p) - 2 * lag_s * m / r)


def _stage_nodes(cluster: ClusterSpec, c: ParallelConfig) -> list[NodeGroup]:
    """The node type of every stage: fixed by rank order, or, where the placement DP may reorder node groups,
    the multiset of group slots (order does not matter for the bound below)."""
    slots = _hetero_slots(cluster, c) if cluster.is_heterogeneous else None
    if slots:
        return [g for g, k in zip(cluster.groups, slots) for _ in range(k)]
    return [node_of_stage(cluster, c, i) for i in range(c.pp)]


def _layer_rates(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup
) -> tuple[float, float, int]:
    """(time per layer, extra time per recomputed layer, recomputed layers per stage) of a shape."""
    t, layer = _layer_of(model, job, c, node)
    a = (
        layer.forward_s
        + layer.forward_comm_s
        + layer.backward_input_s
        + layer.backward_comm_s
        + layer.backward_weight_s
    )
    if c.recompute == "selective":
        a += layer.selective_recompute_s
    if c.recompute not in LAYER_RECOMPUTE:
        return a, 0.0, 0
    return a, layer.recompute_s(c.recompute), c.recompute_num_layers or model.num_layers


def _layers_within(t: float, a: float, rec: float, k: int) -> int:
    """Most layers a stage can run in time t when each takes a and its first k also rec more."""
    if t >= k * (a + rec):
        return k + math.floor((t - k * (a + rec)) / a + 1e-12)
    return math.floor(t / (a + rec) + 1e-12)


def _heterogeneous_bound(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, with_memory: bool = False
) -> float:
    """On mixed GPU types the busiest stage takes at least the smallest ``T`` with
    ``sum_i min(cap_i, T / a_i) >= L``: ``a_i`` is one layer's time on stage i's GPU and ``cap_i``
    the most layers that fit there (with the fewest in-flight micro-batches any stage has, so it is
    an upper bound of the real cap). This is the continuous optimum of ``min max_i n_i a_i`` with
    ``sum n_i = L`` and ``n_i <= cap_i``; times m micro-batches."""
    if not cluster.is_heterogeneous:
        return 0.0
    L = model.num_layers
    if c.pp == 1 or c.vpp > 1:
        # even split and rank-order placement (no partition or placement search for these shapes)
        n = L // c.pp
        chunk = n // c.vpp
        slowest = 0.0
        for i in range(c.pp):
            a, rec, k = _layer_rates(model, job, c, node_of_stage(cluster, c, i))
            slowest = max(slowest, n * a + rec * c.vpp * min(k, chunk))
        return c.num_microbatches(job) * slowest
    slots = _hetero_slots(cluster, c)
    if with_memory and slots is not None and len(slots) == 2:
        return c.num_microbatches(job) * _two_group_bound(model, job, c, cluster, slots)
    inflight = min(inflight_for(model, job, c, cluster.groups[0])) if with_memory else 1.0
    stages = []
    for node in _stage_nodes(cluster, c):
        cap = stage_model(model, job, c, node, 1, inflight).max_layers(L) if with_memory else L
        stages.append((_layer_rates(model, job, c, node), cap))
    if sum(cap for _, cap in stages) < L or min(cap for _, cap in stages) < 1:
        return math.inf
    by_rate: dict[tuple, list[int]] = {}
    for rates, cap in stages:
        by_rate.setdefault(rates, []).append(cap)
    caps_of = [(rates, sorted(caps)) for rates, caps in by_rate.items()]

    def capacity(t: float) -> float:
        # integer layers: stage i holds at most what fits in t, and at least one
        total = 0
        for rates, caps in caps_of:
            n = _layers_within(t, *rates)
            if n < 1:
                return -1.0
            total += sum(min(cap, n) for cap in caps)
        return total

    return c.num_microbatches(job) * _least_bottleneck([r for r, _ in caps_of], L, lambda t: capacity(t) >= L)


def _least_bottleneck(
    rates: list[tuple[float, float, int]], L: int, feasible: Callable[[float], bool]
) -> float:
    """The least stage time ``T`` with ``feasible(T)`` (monotone in T), a hair below it.

    Stage capacities change only where some stage's integer layer count does, so ``T`` is one of
    the times of n = 1..L layers at one of the ``rates`` (per layer, extra per recomputed layer,
    recomputed layers): a binary search over those (exact, where a bisection on T would only
    approach it). Returns ``T (1 - 1e-12)``, inf when even L layers on one stage are infeasible."""
    times = set()
    for a, rec, k in rates:
        for n in range(1, L + 1):
            times.add(n * (a + rec) if n <= k else k * (a + rec) + (n - k) * a)
    candidates = sorted(times)
    lo, hi = 0, len(candidates) - 1
    if not feasible(candidates[hi]):
        return math.inf
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo] * (1.0 - 1e-12)


def _two_group_bound(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, cluster: ClusterSpec, slots: list[int]
) -> float:
    """The water-filling bound with position-aware memory caps, exact over every placement of two
    node groups: for a given T each position contributes ``min(cap_g(i), T / a_g)`` for the group it
    gets, so the best placement gives group 0 the ``slots[0]`` positions where it gains most."""
    L, p = model.num_layers, c.pp
    inflight = inflight_for(model, job, c, cluster.groups[0])
    rate, caps = [], []
    for node in cluster.groups:
        rate.append(_layer_rates(model, job, c, node))
        caps.append([stage_model(model, job, c, node, i, inflight[i]).max_layers(L) for i in range(p)])

    def capacity(t: float) -> float:
        # integer layers per stage (at least one); positions a group cannot hold are forced to the other
        n0, n1 = _layers_within(t, *rate[0]), _layers_within(t, *rate[1])
        x = [min(caps[0][i], n0) for i in range(p)]
        y = [min(caps[1][i], n1) for i in range(p)]
        forced0 = [i for i in range(p) if y[i] < 1]
        forced1 = [i for i in range(p) if x[i] < 1]
        if set(forced0) & set(forced1) or len(forced0) > slots[0] or len(forced1) > slots[1]:
            return -1.0
        free = [i for i in range(p) if x[i] >= 1 and y[i] >= 1]
        free.sort(key=lambda i: x[i] - y[i], reverse=True)
        group0 = set(forced0) | set(free[: slots[0] - len(forced0)])
        return sum(x[i] if i in group0 else y[i] for i in range(p))

    return _least_bottleneck(rate, L, lambda t: capacity(t) >= L)


def _cheap_bound(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> float:
    """The average-work term of :func:`_bounds` alone (a weaker bound, cheap to compute)."""
    m = c.num_microbatches(job)
    L, p = model.num_layers, c.pp
    best = math.inf
    for node in {g.gpu.name: g for g in cluster.groups}.values():
        t, layer = _layer_of(model, job, c, node)
        per_layer = _layer_rates(model, job, c, node)[0]
        extra = t.edges
        work = L * per_layer + extra.forward_s + extra.backward_input_s + extra.backward_weight_s
        if c.recompute in LAYER_RECOMPUTE:
            k = c.recompute_num_layers or L
            work += (min(k, L) if p == 1 else (p - 1) + min(k, L - p + 1)) * layer.recompute_s(c.recompute)
        best = min(best, m * work / p)
    return max(best, _heterogeneous_bound(model, cluster, job, c))


def _layer_of(model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup):
    t = table_for(model, job, c, node)
    if model.is_moe and model.moe_layer_freq == 1 and not model.moe_layer_pattern and not model.window_size:
        return t, t.moe
    if model.is_moe or model.window_size:
        return t, t.mean_layer(model)
    return t, t.dense


def _bounds(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Step-time lower bound of a shape over every partition and full-recompute variant."""
    return _bound_terms(model, cluster, job, c)[0]


@lru_cache(maxsize=8192)
def _bound_terms(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
) -> tuple[float, float, float, float]:
    """:func:`_bounds`, and the terms it was built from that hold for any partition: the least path
    share over GPU types, the point-to-point lag per hop, and the least exposed data-parallel tail."""
    m = c.num_microbatches(job)
    L, p = model.num_layers, c.pp
    fewest, most = max(1, L // p), math.ceil(L / p)
    best = math.inf
    tails: list[float] = []
    shares: list[float] = []
    for node in {g.gpu.name: g for g in cluster.groups}.values():
        t, layer = _layer_of(model, job, c, node)
        extra = t.edges
        f_l = layer.forward_s + layer.forward_comm_s
        b_l = (
            layer.backward_input_s
            + layer.backward_comm_s
            + (layer.selective_recompute_s if c.recompute == "selective" else 0.0)
        )
        w_l = layer.backward_weight_s
        f_e = extra.forward_s + extra.forward_comm_s
        b_e = extra.backward_input_s + extra.backward_comm_s
        w_e = extra.backward_weight_s
        work = L * (f_l + b_l + w_l) + f_e + b_e + w_e
        if c.recompute in LAYER_RECOMPUTE:
            # fewest layers any partition recomputes: p-1 one-layer stages and one with the rest
            k = c.recompute_num_layers or L
            work += (min(k, L) if p == 1 else (p - 1) + min(k, L - p + 1)) * layer.recompute_s(c.recompute)
        # Per-micro-batch sharded data parallelism exposes at least what the whole model's gathers and
        # reduce-scatters exceed its compute by (sum of max(0, x_i) >= max(0, sum x_i)).
        if (
            c.optimizer_sharding in ("full", "zero2")
            and c.dp * c.cp > 1
            and (m > 1 or c.optimizer_sharding == "full")
        ):
            link = comm.link_for(group(c, "dpcp"), node)
            params = L * layer.params + extra.params
            # As in the estimate: FSDP moves one unit per layer, ZeRO-2 one per DDP bucket; bandwidth
            # terms add up over stages and there are at least this many units, each paying latency.
            n = c.dp * c.cp
            units = L if c.optimizer_sharding == "full" else max(1, math.ceil(params / DDP_BUCKET_PARAMS))
            gather = (
                units * comm.all_gather_s(params * 2.0 / units, n, link)
                if c.optimizer_sharding == "full"
                else 0.0
            )
            scatter = units * comm.reduce_scatter_s(params * DTYPE_BYTES[job.grad_dtype] / units, n, link)
            work += max(0.0, gather - L * f_l - f_e) + max(
                0.0, gather + scatter - L * (b_l + w_l) - b_e - w_e
            )
        if c.schedule == "zb-h1":
            share = min((f_l + b_l) / (f_l + b_l + w_l), (f_e + b_e) / max(f_e + b_e + w_e, 1e-30))
        elif c.schedule == "interleaved":
            share = 1.0 / c.vpp
        else:
            share = 1.0
        lag = 0.0
        if p > 1:
            volume = p2p_activation_bytes(model, job, c)
            lag = min(comm.p2p_s(volume, comm.link_for(group(c, "pp"), g)) for g in cluster.groups)
        shares.append(share)
        pipeline = pipeline_lower_bound(work, m, p, share, lag)
        if not cluster.is_heterogeneous:
            # pigeonhole: some stage holds at least ceil(L/p) layers and does them every micro-batch
            per_layer = f_l + b_l + w_l
            chunk = math.ceil(most / c.vpp)  # full recompute applies K layers per model chunk
            k = c.recompute_num_layers or chunk
            rec = layer.recompute_s(c.recompute) * c.vpp * min(k, chunk)
            pipeline = max(pipeline, m * (most * per_layer + rec))

        def params_of(n: int) -> tuple[float, float]:
            return n * (layer.params_sharded + layer.params_replicated), n * layer.params_expert

        bwd_window = (most * (b_l + w_l) + b_e + w_e) / c.vpp
        fwd_window = most * f_l + f_e
        small = dp_sync(job, c, node, *params_of(fewest), m, bwd_window, fwd_window)
        large = dp_sync(job, c, node, *params_of(most), m, bwd_window, fwd_window)
        tail = small.reduce_exposed_s + large.optimizer_s + large.gather_exposed_s
        best = min(best, pipeline + tail)
        tails.append(tail)
    bound = max(best, _heterogeneous_bound(model, cluster, job, c, with_memory=True) + min(tails))
    return bound, min(shares), lag, min(tails)


def _partition_bound(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, r: Restrictions
) -> float:
    """On mixed GPU types, a lower bound of the simulated time of the partition and placement the
    search will simulate for this shape (its score; not a bound over every partition, which
    :func:`_bounds` gives). With that partition's stage times ``tau_i`` the path argument of
    :func:`pipeline_lower_bound` holds without its relaxation:
    ``T >= max_k sum_{i<k} (r tau_i + 2 c) + m tau_k``, plus the least exposed data-parallel tail.
    0 where the search does not choose a partition (one stage, interleaving, even split)."""
    if not cluster.is_heterogeneous or c.pp == 1 or c.vpp > 1 or not r.uneven_partitions:
        return 0.0
    stages, part = _solve_partition(model, cluster, job, c, r.memory_headroom_bytes)
    if part is None:
        return 0.0
    _, share, lag, tail = _bound_terms(model, cluster, job, c)
    m = c.num_microbatches(job)
    path, bound = 0.0, 0.0
    for st, n in zip(stages, part.layers):
        bound = max(bound, path + m * st.time(n))
        path += min(1.0, share) * st.time(n) + 2 * lag
    return bound + tail


def _fits(model, cluster, job, c: ParallelConfig, uneven: bool, headroom_bytes: float = 0.0) -> bool:
    L, p, v = model.num_layers, c.pp, c.vpp
    nodes = [node_of_stage(cluster, c, i) for i in range(p)]
    if cluster.is_heterogeneous and _hetero_slots(cluster, c):
        nodes_options = [[g for g in cluster.groups] for _ in range(p)]
    else:
        nodes_options = [[n] for n in nodes]
    inflight = inflight_for(model, job, c, nodes[0])
    caps = []
    for i in range(p):
        cap = 0
        for node in nodes_options[i]:
            sm = stage_model(model, job, c, node, i, inflight[i], headroom_bytes)
            if v > 1 or not uneven or p == 1:
                n = L // p if L % p == 0 else 0
                cap = max(cap, n if n and sm.memory(n) <= sm.capacity_bytes else 0)
            else:
                cap = max(cap, sm.max_layers(L - (p - 1)))
        caps.append(cap)
    if v > 1 or not uneven or p == 1:
        return L % p == 0 and min(caps) >= 1
    return min(caps) >= 1 and sum(caps) >= L


def _hetero_slots(cluster: ClusterSpec, c: ParallelConfig) -> list[int] | None:
    per_stage = c.tp * c.cp * c.dp
    slots = []
    for g in cluster.groups:
        if g.num_gpus % per_stage or per_stage % g.gpus_per_node:
            return None
        slots.append(g.num_gpus // per_stage)
    return slots


def reorder_cluster(cluster: ClusterSpec, c: ParallelConfig, stage_groups: tuple[int, ...]) -> ClusterSpec:
    """The cluster with node blocks in stage order: stage i runs on nodes of group ``stage_groups[i]``."""
    per_stage_nodes = [(c.tp * c.cp * c.dp) // cluster.groups[g].gpus_per_node for g in stage_groups]
    blocks: list[NodeGroup] = []
    for g, n in zip(stage_groups, per_stage_nodes):
        base = cluster.groups[g]
        if blocks and blocks[-1].gpu is base.gpu and _same_links(blocks[-1], base):
            blocks[-1] = replace(blocks[-1], num_nodes=blocks[-1].num_nodes + n)
        else:
            blocks.append(replace(base, num_nodes=n))
    return replace(cluster, groups=tuple(blocks))


def _same_links(a: NodeGroup, b: NodeGroup) -> bool:
    return replace(a, num_nodes=0) == replace(b, num_nodes=0)


def partition_shape(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    c: ParallelConfig,
    uneven: bool = True,
    headroom_bytes: float = 0.0,
) -> tuple[ParallelConfig, ClusterSpec, tuple[int, ...]] | str:
    """Choose the layer partition (and node-group placement) of a shape; a reason string on failure."""
    L, p, v = model.num_layers, c.pp, c.vpp
    if p == 1:
        return c.with_(layers_per_stage=()), cluster, ()
    if v > 1 or not uneven:
        if L % (p * v):
            return f"num_layers ({L}) not divisible by pp*vpp ({p * v}) and uneven split disabled"
        return c.with_(layers_per_stage=()), cluster, ()
    _, part = _solve_partition(model, cluster, job, c, headroom_bytes)
    if part is None:
        return "no layer partition fits in memory"
    if part.stage_groups:
        new_cluster = reorder_cluster(cluster, c, part.stage_groups)
        return c.with_(layers_per_stage=_canonical(part.layers)), new_cluster, part.stage_groups
    return c.with_(layers_per_stage=_canonical(part.layers)), cluster, ()


def _solve_partition(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, headroom_bytes: float
) -> tuple[list[StageModel], Partition | None]:
    """The chosen partition of a pipelined shape split unevenly (one chunk per rank), with the model
    of every stage where it runs; on mixed GPU types that fill whole node groups, the placement DP
    also chooses each stage's group. Memoised on the solver's inputs."""
    L, p = model.num_layers, c.pp
    m = c.num_microbatches(job)
    inflight = schedule_inflight(c.schedule, p, m, 1)
    slots = _hetero_slots(cluster, c) if cluster.is_heterogeneous else None
    if slots is not None and len(slots) > 1:
        options = [
            [stage_model(model, job, c, g, i, inflight[i], headroom_bytes) for g in cluster.groups]
            for i in range(p)
        ]
        part = _cached_placement(tuple(tuple(row) for row in options), tuple(slots), L, m)
        if part is None:
            return [], None
        return [options[i][g] for i, g in enumerate(part.stage_groups)], part
    stages = [
        stage_model(model, job, c, node_of_stage(cluster, c, i), i, inflight[i], headroom_bytes)
        for i in range(p)
    ]
    return stages, _cached_dp(tuple(stages), L, m)


@lru_cache(maxsize=4096)
def _cached_placement(options: tuple, slots: tuple, L: int, m: int) -> Partition | None:
    """Shapes that differ only in what the partition does not see (cp/dp split, sharding of a
    stage that fits either way) pose the same problem: solve it once. The placement DP solves the
    ILP's problem exactly (tests: both against brute force over every placement)."""
    return placement_partition([list(row) for row in options], list(slots), L, m)


@lru_cache(maxsize=4096)
def _cached_dp(stages: tuple, L: int, m: int) -> Partition | None:
    return dp_partition(list(stages), L, m)


def _canonical(layers: tuple[int, ...]) -> tuple[int, ...]:
    """Even partitions are stored as () (Megatron's default split)."""
    return () if len(set(layers)) == 1 else tuple(layers)


def full_recompute_variants(
    model: ModelSpec, c: ParallelConfig, partial: bool = True, every_nth: bool = False
) -> list[ParallelConfig]:
    """Full recompute of all layers, and of fewer layers per stage where the framework has it:
    any count (``partial``, Megatron --recompute-num-layers: 1, 2, and a quarter, half and three
    quarters of a stage), or every n-th block (``every_nth``, torchtitan ``selective_ac_option``:
    the counts ``S / n`` of an evenly split S-layer stage nearest those, with n dividing S, so every
    stage recomputes exactly that many; such variants are partitioned evenly, :func:`_restrict`)."""
    if c.recompute != "full" or not (partial or every_nth):
        return [c]
    L, stages = model.num_layers, c.pp * c.vpp
    per_stage = math.ceil(L / stages)
    targets = (1, 2, per_stage // 4, per_stage // 2, (3 * per_stage) // 4)
    if partial:
        ks = sorted({k for k in targets if 0 < k < per_stage})
    elif L % stages:
        ks = []
    else:
        exact = [per_stage // n for n in range(2, per_stage + 1) if per_stage % n == 0]
        ks = sorted({min(exact, key=lambda k: (abs(k - t), k)) for t in targets if t > 0}) if exact else []
    return [c.with_(recompute_num_layers=k) for k in ks] + [c]


def _restrict(c: ParallelConfig, r: Restrictions) -> Restrictions:
    """``r`` for one candidate: every-n-th-block recompute (a framework without arbitrary partial
    recompute) is searched on even splits only, where ``S // n`` is exact on every stage."""
    if c.recompute_num_layers and not r.target.capabilities.partial_recompute and r.uneven_partitions:
        return replace(r, uneven_partitions=False)
    return r


def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    restrictions: Restrictions | None = None,
    top_k: int = 5,
    progress: ProgressFn | None = None,
    exhaustive: bool = False,
    collect: bool = False,
) -> SearchResult:
    """The ``top_k`` fastest distinct plans that fit, each with its equivalent variants.
    ``exhaustive`` disables the bound (for tests); ``collect`` records every candidate
    (``SearchResult.candidates``, for ``planner search --csv``); ``progress`` is called after each
    candidate is settled (see :data:`ProgressFn`), last with ``done == total``."""
    r = restrictions or Restrictions()
    if r.uneven_partitions and not r.target.capabilities.uneven_layers:
        r = replace(r, uneven_partitions=False)
    rejected = Rejections(configs=[] if collect else None)
    shapes = list(enumerate_shapes(model, cluster, job, r, rejected))
    found: list[tuple[tuple, int, Candidate]] | None = None
    if collect:
        found = [(sort_key(c), 3, Candidate(c, "constraint", why)) for c, why in rejected.configs]
    result = SearchResult(plans=[], shapes_enumerated=len(shapes), rejections=rejected)
    # Best-first branch and bound over (shape, recompute variant). Each heap key is a lower bound of
    # the item's step time; a cheap bound is refined only when the item reaches the top, and the
    # exact memory check and the simulation run only after that.
    heap: list[tuple[float, tuple, int, int, ParallelConfig]] = []
    for index, c in enumerate(shapes):
        cap = r.target.capabilities
        for variant in full_recompute_variants(model, c, cap.partial_recompute, cap.every_nth_recompute):
            heap.append((_cheap_bound(model, cluster, job, variant), sort_key(variant), index, 0, variant))
    heapq.heapify(heap)
    plans: list[RankedPlan] = []
    threshold = math.inf  # step time of the top_k-th distinct plan found so far
    no_fit: set[int] = set()
    total = len(heap)
    settled = 0  # candidates rejected or simulated (each once: a refined item is settled later)
    while heap:
        key, tie, index, level, shape = heapq.heappop(heap)
        if progress and level == 1:
            settled += 1
            progress(settled, total, plans[0].estimate.step_time_s if plans else None)
        if not exhaustive and key >= threshold:
            heapq.heappush(heap, (key, tie, index, level, shape))
            result.pruned_by_bound = len(heap)
            left = sorted(heap)
            for k, _, _, _, c in left[: 64 * top_k]:
                result.outcomes.append(
                    Outcome(c, k, reason="lower bound already slower than the plans found")
                )
            if found is not None:
                why = f"lower bound already slower than the {top_k} distinct plans found"
                found.extend((t, 2, Candidate(c, "bound", why, k)) for k, t, _, _, c in left)
            break
        if level == 0:
            heapq.heappush(heap, (max(key, _bounds(model, cluster, job, shape)), tie, index, 1, shape))
            continue
        rs = _restrict(shape, r)
        if level == 1:
            if not _fits(model, cluster, job, shape, rs.uneven_partitions, r.memory_headroom_bytes):
                if index not in no_fit:
                    no_fit.add(index)
                result.outcomes.append(
                    Outcome(shape, key, reason="does not fit in memory with any layer partition")
                )
                if found is not None:
                    why = "does not fit in memory with any layer partition"
                    found.append((tie, 1, Candidate(shape, "memory", why, key)))
                continue
            # mixed GPU types: bound the partition this shape will be simulated with
            refined = _partition_bound(model, cluster, job, shape, rs)
            if refined > key:
                heapq.heappush(heap, (refined, tie, index, 2, shape))
                continue
        outcome = _evaluate(model, cluster, job, shape, rs)
        result.shapes_evaluated += 1
        if isinstance(outcome, str):
            result.outcomes.append(Outcome(shape, key, reason=outcome))
            if found is not None:
                memory = "fits in memory" in outcome or outcome.startswith("does not fit")
                found.append(
                    (
                        tie,
                        1 if memory else 3,
                        Candidate(shape, "memory" if memory else "constraint", outcome, key),
                    )
                )
            continue
        if found is not None:
            found.append((tie, 0, Candidate(outcome.config, "simulated", "", key, outcome.estimate)))
        plans.append(outcome)
        result.outcomes.append(
            Outcome(
                outcome.config,
                key,
                step_time_s=outcome.estimate.step_time_s,
                breakdown=time_components(outcome.estimate),
            )
        )
        plans.sort(key=lambda p: (p.estimate.step_time_s, sort_key(p.config)))
        del plans[max(top_k, 1) * 64 :]
        distinct = fold_equivalent(_dedupe(plans), top_k)
        if len(distinct) >= top_k:
            threshold = distinct[top_k - 1].estimate.step_time_s
    result.pruned_by_memory = len(no_fit)
    if progress:
        progress(total, total, plans[0].estimate.step_time_s if plans else None)
    result.plans = fold_equivalent(_dedupe(plans), top_k)
    if found is not None:
        result.candidates = [c for _, _, c in sorted(found, key=lambda x: (x[0], x[1]))]
    if not result.plans:
        result.infeasible_reason = infeasible_reason(model, cluster, job, result)
    return result


def time_components(est: Estimate) -> tuple[tuple[str, float], ...]:
    """Where one iteration's time goes (sums to the step time; see :meth:`Estimate.time_breakdown`)."""
    return est.time_breakdown()


EXPLAIN_DIMENSIONS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "recompute",
    "optimizer_sharding",
    "schedule",
)


def explain(result: SearchResult) -> list[dict]:
    """For each dimension, the best alternative value and why it lost to the top plan."""
    if not result.plans:
        return []
    best = result.plans[0]
    base = dict(time_components(best.estimate))
    out = []
    for dim in EXPLAIN_DIMENSIONS:
        mine = getattr(best.config, dim)
        others = [o for o in result.outcomes if getattr(o.config, dim) != mine]
        if not others:
            continue
        evaluated = sorted(
            (o for o in others if o.step_time_s), key=lambda o: (o.step_time_s, sort_key(o.config))
        )
        if evaluated:
            o = evaluated[0]
            slower = o.step_time_s / best.estimate.step_time_s - 1
            diffs = sorted(((v - base.get(k, 0.0), k) for k, v in o.breakdown), reverse=True)
            if slower <= 1e-9:
                cause = "same predicted time; the tie is broken by the fixed plan order"
            else:
                cause = (
                    f"more {diffs[0][1]} (+{diffs[0][0]:.3f} s)"
                    if diffs and diffs[0][0] > 0
                    else "slower overall"
                )
            out.append(
                {
                    "dimension": dim,
                    "value": getattr(o.config, dim),
                    "slower_fraction": slower,
                    "step_time_s": o.step_time_s,
                    "reason": cause,
                }
            )
            continue
        bounded = sorted(
            (o for o in others if not math.isnan(o.bound_s) and "lower bound" in o.reason),
            key=lambda o: o.bound_s,
        )
        if bounded:
            o = bounded[0]
            out.append(
                {
                    "dimension": dim,
                    "value": getattr(o.config, dim),
                    "slower_fraction": o.bound_s / best.estimate.step_time_s - 1,
                    "step_time_s": None,
                    "reason": "not simulated: its lower bound is already slower than the plans found",
                }
            )
            continue
        o = others[0]
        out.append(
            {
                "dimension": dim,
                "value": getattr(o.config, dim),
                "slower_fraction": None,
                "step_time_s": None,
                "reason": o.reason,
            }
        )
    return out


def _dedupe(plans: list[RankedPlan]) -> list[RankedPlan]:
    seen, out = set(), []
    for p in plans:
        if p.config not in seen:
            seen.add(p.config)
            out.append(p)
    return out


def _evaluate(model, cluster, job, shape: ParallelConfig, r: Restrictions) -> RankedPlan | str:
    part = partition_shape(model, cluster, job, shape, r.uneven_partitions, r.memory_headroom_bytes)
    if isinstance(part, str):
        return part
    config, placed_cluster, groups = part
    problems = violations(model, placed_cluster, job, config)
    if problems:
        return problems[0]
    try:
        config = resolve(model, placed_cluster, job, config)
    except ConfigError as exc:
        return str(exc)
    est = estimate(model, placed_cluster, job, config)
    w = est.worst_stage
    if w.memory.headroom_bytes < r.memory_headroom_bytes:
        return (
            f"does not fit: stage {w.stage} short by "
            f"{(r.memory_headroom_bytes - w.memory.headroom_bytes) / 2**30:.1f} GiB (headroom included)"
        )
    return RankedPlan(config, placed_cluster, est, groups)


def infeasible_reason(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, result: SearchResult) -> str:
    """A sentence saying why nothing fits and how many GPUs would be needed at least."""
    gpu = min((g.gpu for g in cluster.groups), key=lambda g: g.memory_bytes)
    usable = gpu.memory_bytes - gpu.memory_reserve_bytes
    # Model state alone with every byte sharded (FSDP): 18 bytes per parameter over all GPUs.
    need = math.ceil(model.params_total * 18 / usable)
    if not result.shapes_enumerated:
        return f"no configuration satisfies the constraints: {top_reasons(result.rejections)}"
    why = (
        f"nothing fits: {model.name} on {cluster.num_gpus} x {gpu.name} has no configuration within memory, "
        f"even with full recompute ({result.pruned_by_memory} of {result.shapes_enumerated} shapes do not fit"
    )
    if result.rejections.counts:
        why += f"; left out before: {top_reasons(result.rejections)}"
    return why + (
        f"); its model state alone (18 bytes x {model.params_total / 1e9:.1f}B parameters) "
        f"needs at least {need} GPUs of {gpu.memory_bytes / 2**30:.0f} GiB, before activations"
    )


def top_reasons(rejections: Rejections, n: int = 3) -> str:
    """The reasons that left out the most candidates, most first, with their counts."""
    top = sorted(rejections.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    if not top:
        return "no shape is possible"
    return "; ".join(f"{reason} ({count} left out)" for reason, count in top)
