"""Lower bounds of a shape's step time that the chain search orders and prunes by
(:mod:`planner.search.chain`, step 2): the cheap average-work bound, the refined pipeline bound
(path with point-to-point lags, pigeonhole on ceil(L/p) layers, the exposed data-parallel tail;
on mixed GPU types an integer water-filling with memory caps and the best two-group placement),
and the bound of a partitioned shape. Every one is a proven lower bound of what the simulator
reports (tested against it on random pipelines)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from cost_models import communication as comm
from cost_models.estimate import DDP_BUCKET_PARAMS, dp_sync, node_of_stage
from cost_models.parallel import LAYER_RECOMPUTE, ParallelConfig
from cost_models.placement import group
from cost_models.schedules import POST_VALIDATION, SPLIT_W, V_SHAPE
from cost_models.tensors import pipeline_transfer_s
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.job_spec import DTYPE_BYTES, JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.search.shape_partition import hetero_slots, solve_partition
from planner.search.space import Restrictions
from planner.search.stage_model import inflight_for, layer_of, stage_model


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
    slots = hetero_slots(cluster, c) if cluster.is_heterogeneous else None
    if slots:
        return [g for g, k in zip(cluster.groups, slots) for _ in range(k)]
    return [node_of_stage(cluster, c, i) for i in range(c.pp)]


def _layer_rates(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup
) -> tuple[float, float, int]:
    """(time per layer, extra time per recomputed layer, recomputed layers per stage) of a shape."""
    t, layer = layer_of(model, job, c, node)
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
    slots = hetero_slots(cluster, c)
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


def cheap_bound(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> float:
    """The average-work term of :func:`refined_bound` alone (a weaker bound, cheap to compute)."""
    m = c.num_microbatches(job)
    L, p = model.num_layers, c.pp
    best = math.inf
    for node in {g.gpu.name: g for g in cluster.groups}.values():
        t, layer = layer_of(model, job, c, node)
        per_layer = _layer_rates(model, job, c, node)[0]
        extra = t.edges
        work = L * per_layer + extra.forward_s + extra.backward_input_s + extra.backward_weight_s
        if c.recompute in LAYER_RECOMPUTE:
            k = c.recompute_num_layers or L
            work += (min(k, L) if p == 1 else (p - 1) + min(k, L - p + 1)) * layer.recompute_s(c.recompute)
        best = min(best, m * work / p)
    return max(best, _heterogeneous_bound(model, cluster, job, c))


def refined_bound(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Step-time lower bound of a shape over every partition and full-recompute variant."""
    return _bound_terms(model, cluster, job, c)[0]


@lru_cache(maxsize=8192)
def _bound_terms(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
) -> tuple[float, float, float, float]:
    """:func:`refined_bound`, and the terms it was built from that hold for any partition: the least path
    share over GPU types, the point-to-point lag per hop, and the least exposed data-parallel tail."""
    m = c.num_microbatches(job)
    L, p = model.num_layers, c.pp
    fewest, most = max(1, L // p), math.ceil(L / p)
    best = math.inf
    tails: list[float] = []
    shares: list[float] = []
    for node in {g.gpu.name: g for g in cluster.groups}.values():
        t, layer = layer_of(model, job, c, node)
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
        if c.schedule in POST_VALIDATION or c.schedule in V_SHAPE:
            # POST_VALIDATION: each rank's iteration is timed from its own first forward
            # (Timeline.aligned), so no path through the earlier stages precedes it. V_SHAPE: the
            # path runs through one chunk of each earlier rank, which an uneven split may leave
            # nearly empty, so no share of a rank's work is sure to lie on it (the even split's
            # start delay is bounded below, with the pigeonhole term).
            share = 0.0
        elif c.schedule in SPLIT_W:
            share = min((f_l + b_l) / (f_l + b_l + w_l), (f_e + b_e) / max(f_e + b_e + w_e, 1e-30))
        elif c.schedule == "interleaved":
            share = 1.0 / c.vpp
        else:
            share = 1.0
        lag = 0.0
        if p > 1 and share > 0.0:
            lag = min(
                pipeline_transfer_s(
                    model, job, c, comm.link_for(group(c, "pp"), g), comm.link_for(group(c, "tp"), g)
                )
                for g in cluster.groups
            )
        shares.append(share)
        pipeline = pipeline_lower_bound(work, m, p, share, lag)
        if not cluster.is_heterogeneous:
            # pigeonhole: some stage holds at least ceil(L/p) layers and does them every micro-batch
            per_layer = f_l + b_l + w_l
            chunk = math.ceil(most / c.vpp)  # full recompute applies K layers per model chunk
            k = c.recompute_num_layers or chunk
            rec = layer.recompute_s(c.recompute) * c.vpp * min(k, chunk)
            pipeline = max(pipeline, m * (most * per_layer + rec))
            if c.schedule in V_SHAPE and not c.layers_per_stage and L % (2 * p) == 0:
                # ZB-V on an even split (chunks of n layers): the last rank's first forward waits for
                # the first micro-batch's chunk-0 forwards on the p - 1 ranks before it, then the
                # rank does its m micro-batches of 2n layers (its two chunks; the embedding and
                # the output layer sit on rank 0)
                n = L // (2 * p)
                pipeline = max(pipeline, (p - 1) * n * f_l + m * (2 * n * per_layer + rec))

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


def partition_bound(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, r: Restrictions
) -> float:
    """On mixed GPU types, a lower bound of the simulated time of the partition and placement the
    search will simulate for this shape (its score; not a bound over every partition, which
    :func:`refined_bound` gives). With that partition's stage times ``tau_i`` the path argument of
    :func:`pipeline_lower_bound` holds without its relaxation:
    ``T >= max_k sum_{i<k} (r tau_i + 2 c) + m tau_k``, plus the least exposed data-parallel tail.
    0 where the search does not choose a partition (one stage, interleaving, even split)."""
    if not cluster.is_heterogeneous or c.pp == 1 or c.vpp > 1 or not r.uneven_partitions:
        return 0.0
    stages, part = solve_partition(model, cluster, job, c, r.memory_headroom_bytes)
    if part is None:
        return 0.0
    _, share, lag, tail = _bound_terms(model, cluster, job, c)
    m = c.num_microbatches(job)
    path, bound = 0.0, 0.0
    for st, n in zip(stages, part.layers):
        bound = max(bound, path + m * st.time(n))
        path += min(1.0, share) * st.time(n) + 2 * lag
    return bound + tail
