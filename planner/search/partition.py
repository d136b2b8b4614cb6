"""Stage partition: how many decoder layers each pipeline stage gets.

The partition objective is the AMP / Alpa pipeline latency (Li et al. 2022, arXiv:2210.07297;
Zheng et al. 2022, arXiv:2201.12023; ../shared/reference/algorithms.md §1.3 and §5.2):

    T(n) = sum_i tau_i(n_i) + (m - 1) * max_i tau_i(n_i)

where ``tau_i(n)`` is stage i's forward + backward time per micro-batch with ``n`` layers
(including the embedding on the first stage and the output layer on the last, and the recompute
of its layers), subject to each stage's memory with the in-flight micro-batches its schedule keeps
(read from the schedule, not a formula). The chosen partition is then timed by the simulator,
which is the final score; the simulator is not closed-form, so the partition objective is the
documented stand-in inside the search.

Three exact solvers of the same problem, which agree (tested):
* :func:`dp_partition`: dynamic program over the bottleneck value (AMP's idea of carrying the
  running maximum, here as an outer loop over candidate maxima with a min-sum DP inside).
* :func:`ilp_partition`: an integer linear program (PuLP; HiGHS when ``highspy`` is installed,
  else the bundled CBC) that also assigns node groups of different GPU types to stages
  (AMP / Metis style heterogeneous placement).
* :func:`placement_partition`: the same heterogeneous problem as the ILP, solved exactly by a
  dynamic program over stages whose state is (node-group slots left, layers left), inside the same
  loop over candidate bottlenecks as :func:`dp_partition`. Stage positions form a chain, so this
  replaces the ILP in the search (milliseconds instead of seconds per shape).
* :func:`brute_force_partition`: every composition, the oracle for small instances.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

INF = float("inf")


@dataclass(frozen=True, slots=True)
class StageModel:
    """Linear cost and memory of one stage position (on one GPU type) as a function of its layers.

    time(n) = layer_s * n + recompute_s * min(n, recompute_layers) + extra_s
    memory(n) = layer_bytes * n + recompute_saving(n) ... see :meth:`memory`
    """

    layer_s: float
    """Forward + backward time of one layer per micro-batch (without recompute)."""
    recompute_s: float
    """Extra backward time per recomputed layer."""
    extra_s: float
    """Embedding / output layer time on this stage."""
    static_per_layer_bytes: float
    """Weights, gradients and optimizer state of one layer."""
    act_per_layer_bytes: float
    """Activations one layer keeps per micro-batch without recompute."""
    ckpt_per_layer_bytes: float
    """Activations one recomputed layer keeps per micro-batch."""
    transient_bytes: float
    """Working set of one layer during recompute (added once when any layer is recomputed)."""
    extra_static_bytes: float
    """Embedding / output parameters' state on this stage."""
    extra_act_bytes: float
    """Embedding / output activations per micro-batch."""
    inflight: float
    """Micro-batches resident at this stage's peak (from the schedule)."""
    reserve_bytes: float
    """Fixed reserve (CUDA context, NCCL buffers)."""
    fragmentation: float
    """Fraction of activation memory added for allocator fragmentation."""
    capacity_bytes: float
    recompute_layers: int = 0
    """Layers recomputed per stage (full recompute); 0 = none."""
    offload_saved_bytes: float = 0.0
    """Activations per micro-batch that offloading to host memory takes off the GPU (pp 1 only,
    where the stage holds every layer; :func:`cost_models.estimate.offload_terms`); its exposed
    copy time is part of ``extra_s``."""
    offload_transit_bytes: float = 0.0
    """One offloaded layer's activations, held while in transit (a transient)."""

    def time(self, n: int) -> float:
        return self.layer_s * n + self.recompute_s * min(n, self.recompute_layers) + self.extra_s

    def memory(self, n: int) -> float:
        k = min(n, self.recompute_layers)
        act = self.inflight * (
            self.act_per_layer_bytes * (n - k)
            + self.ckpt_per_layer_bytes * k
            + self.extra_act_bytes
            - self.offload_saved_bytes
        )
        transient = max(self.transient_bytes if k else 0.0, self.offload_transit_bytes)
        return (
            self.static_per_layer_bytes * n
            + self.extra_static_bytes
            + self.reserve_bytes
            + (act + transient) * (1.0 + self.fragmentation)
        )

    def max_layers(self, limit: int) -> int:
        """Most layers (<= limit) that fit in memory; 0 when not even one does."""
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.memory(mid) <= self.capacity_bytes:
                lo = mid
            else:
                hi = mid - 1
        return lo


@dataclass(frozen=True, slots=True)
class Partition:
    """Layers per stage and the partition objective."""

    layers: tuple[int, ...]
    objective_s: float
    stage_groups: tuple[int, ...] = ()
    """Node group hosting each stage (heterogeneous ILP only)."""


TIE_RTOL = 1e-9
"""Objective values this close are ties, broken by the lexicographically smaller layer tuple."""


def better(
    value: float, layers: tuple[int, ...], best_value: float, best_layers: tuple[int, ...] | None
) -> bool:
    """Whether (value, layers) beats the incumbent under the shared tie rule."""
    if best_layers is None:
        return value < INF
    if value < best_value * (1 - TIE_RTOL):
        return True
    if value <= best_value * (1 + TIE_RTOL):
        return layers < best_layers
    return False


def objective(stages: list[StageModel], layers: tuple[int, ...], m: int) -> float:
    """T = sum tau + (m - 1) max tau, or inf when a stage does not fit."""
    times = []
    for st, n in zip(stages, layers):
        if n < 1 or st.memory(n) > st.capacity_bytes:
            return INF
        times.append(st.time(n))
    return sum(times) + (m - 1) * max(times)


def brute_force_partition(stages: list[StageModel], num_layers: int, m: int) -> Partition | None:
    """Every composition of ``num_layers`` into ``len(stages)`` positive parts (test oracle)."""
    p = len(stages)
    best: Partition | None = None
    for cuts in itertools.combinations(range(1, num_layers), p - 1):
        bounds = (0, *cuts, num_layers)
        layers = tuple(b - a for a, b in zip(bounds, bounds[1:]))
        value = objective(stages, layers, m)
        if value < INF and better(
            value, layers, best.objective_s if best else INF, best.layers if best else None
        ):
            best = Partition(layers, value)
    return best


def dp_partition(stages: list[StageModel], num_layers: int, m: int) -> Partition | None:
    """Exact minimum of the partition objective (ties: lexicographically smallest layers).

    For each candidate bottleneck value ``B`` in increasing order, a min-sum DP over stages
    (vectorised over the number of layers used) finds the smallest ``sum tau`` with every
    ``tau_i <= B``; the objective is then at most ``sum + (m - 1) B``. The loop stops once
    ``(m - 1) B + min_sum`` cannot beat the best found.
    """
    p, L = len(stages), num_layers
    if p > L:
        return None
    caps = [st.max_layers(L - (p - 1)) for st in stages]
    if min(caps) < 1 or sum(caps) < L:
        return None
    if _constant_sum(stages, L):
        return _bottleneck_partition(stages, L, m, caps)
    n = np.arange(L + 1)
    times = [
        np.array([st.time(int(k)) if 1 <= k <= caps[i] else INF for k in n]) for i, st in enumerate(stages)
    ]
    candidates = np.unique(np.concatenate([t[np.isfinite(t)] for t in times]))
    floor_sum = _min_sum(times, L, INF)[0]
    if not np.isfinite(floor_sum):
        return None
    # Skip the bounds no partition meets: feasibility is monotone in the bound (a larger one admits
    # every term a smaller one does), so the smallest feasible one is a binary search away. The
    # loop below would only have skipped them one DP each.
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if np.isfinite(_min_sum(times, L, candidates[mid])[0]):
            hi = mid
        else:
            lo = mid + 1
    best_value, best_layers = INF, None
    for bound in candidates[lo:]:
        if (m - 1) * bound + floor_sum > best_value + 1e-12:
            break
        total, layers = _min_sum(times, L, bound)
        if not np.isfinite(total):
            continue
        value = objective(stages, tuple(layers), m)
        if better(value, tuple(layers), best_value, best_layers):
            best_value, best_layers = value, tuple(layers)
    if best_layers is None:
        return None
    return Partition(best_layers, best_value)


def _constant_sum(stages: list[StageModel], L: int) -> bool:
    """Whether sum_i tau_i is the same for every partition (identical per-layer cost everywhere)."""

    def per_layer(st: StageModel) -> float | None:
        if st.recompute_layers == 0:
            return st.layer_s
        if st.recompute_layers >= L:
            return st.layer_s + st.recompute_s
        return None  # partial recompute: time is not linear in n

    rates = {per_layer(st) for st in stages}
    return len(rates) == 1 and None not in rates


def _bottleneck_partition(stages: list[StageModel], L: int, m: int, caps: list[int]) -> Partition | None:
    """Exact when sum tau is partition-independent: minimise the bottleneck, then take the
    lexicographically smallest partition under it (each stage as few layers as the rest allow)."""
    p = len(stages)
    candidates = sorted({st.time(n) for i, st in enumerate(stages) for n in range(1, caps[i] + 1)})

    def limits(bound: float) -> list[int]:
        out = []
        for i, st in enumerate(stages):
            lo, hi = 0, caps[i]
            while lo < hi:  # largest n <= cap with time(n) <= bound (time increases with n)
                mid = (lo + hi + 1) // 2
                if st.time(mid) <= bound * (1 + 1e-15):
                    lo = mid
                else:
                    hi = mid - 1
            out.append(lo)
        return out

    lo, hi = 0, len(candidates) - 1
    if sum(limits(candidates[hi])) < L or min(limits(candidates[hi])) < 1:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lim = limits(candidates[mid])
        if min(lim) >= 1 and sum(lim) >= L:
            hi = mid
        else:
            lo = mid + 1
    # With one micro-batch the bottleneck does not matter: every feasible partition ties.
    lim = limits(candidates[lo] if m > 1 else candidates[-1])
    layers, remaining = [], L
    for i in range(p):
        rest = sum(lim[i + 1 :])
        n = max(1, remaining - rest)
        layers.append(n)
        remaining -= n
    best = tuple(layers)
    return Partition(best, objective(stages, best, m))


def _min_sum(times: list[np.ndarray], L: int, bound: float) -> tuple[float, list[int]]:
    """Min over compositions of sum times[i][n_i] with every term <= bound; and the argmin.

    Stage by stage, ``g[j] = min_k f[j - k] + t[k]`` over the stage's admissible layer counts
    ``k``, taken in increasing ``k``; a later ``k`` replaces an earlier one only when it is smaller
    by more than 1e-15 (:func:`_scan`), so the smallest ``k`` wins ties, float noise included. The
    candidates of one stage are one matrix (a sliding window over ``f``); where a column has at
    most one candidate within 1e-12 of its minimum, that rule picks the minimum's first index, and
    only the other columns are scanned, over their near-minimum candidates."""
    p = len(times)
    f = np.full(L + 1, INF)
    f[0] = 0.0
    pad = np.full(L, INF)
    choice = np.zeros((p, L + 1), dtype=np.int64)
    for i in range(p):
        t = np.where(times[i] <= bound + 1e-15, times[i], INF)
        ks = np.flatnonzero(np.isfinite(t[1:])) + 1
        if len(ks) == 0:
            return INF, []
        # rows[r][j] = f[j - k] + t[k] for k = ks[r] (INF where j < k): window L - k of [INF] * L + f
        windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([pad, f]), L + 1)
        rows = windows[L - ks] + t[ks][:, None]
        g = rows.min(axis=0)
        arg = np.where(np.isfinite(g), ks[rows.argmin(axis=0)], 0)
        near = (rows <= g + 1e-12) & np.isfinite(rows)
        tied = np.flatnonzero(near.sum(axis=0) > 1)
        if len(tied):
            # Only candidates within 1e-12 of a column's minimum can end the scan there, and
            # scanning those alone ends where scanning every candidate does (the others are
            # replaced by the minimum, which is more than 1e-15 below them).
            sub = np.where(near[:, tied], rows[:, tied], INF)
            used = np.flatnonzero(near[:, tied].any(axis=1))
            g[tied], arg[tied] = _scan(sub[used], ks[used])
        f, choice[i] = g, arg
    if not np.isfinite(f[L]):
        return INF, []
    layers, j = [], L
    for i in range(p - 1, -1, -1):
        k = int(choice[i][j])
        layers.append(k)
        j -= k
    return float(f[L]), layers[::-1]


def _scan(rows: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise minimum of ``rows`` taken row by row (``ks`` increasing), a later row replacing
    the running value only when smaller by more than 1e-15; the value and the ``ks`` entry that
    holds it (0 where none is finite)."""
    g = np.full(rows.shape[1], INF)
    arg = np.zeros(rows.shape[1], dtype=np.int64)
    for k, cand in zip(ks.tolist(), rows):
        better = cand < g - 1e-15  # strict: keeps the smallest k on ties
        g = np.where(better, cand, g)
        arg[better] = k
    return g, arg


def placement_partition(
    stage_options: list[list[StageModel]], group_slots: list[int], num_layers: int, m: int
) -> Partition | None:
    """Exact minimum of ``T = sum tau + (m - 1) max tau`` over node-group placements and layer counts.

    ``stage_options[i][g]`` is stage position i's model on node group g, and group g hosts exactly
    ``group_slots[g]`` stages (the problem of :func:`ilp_partition`, with the stage time exact also
    under partial recompute). For each candidate bottleneck ``B`` (every stage time any position can
    take, ascending) a suffix DP gives the least ``sum tau`` with every ``tau_i <= B`` over the state
    (slots left in groups 0..G-2, layers left); the last group's slots follow from the stage count.
    The loop stops once ``(m - 1) B + min_sum`` cannot beat the best found. Ties: the
    lexicographically smallest (groups, layers) of each bottleneck's optimum, then :func:`better`.
    """
    p, L = len(stage_options), num_layers
    if sum(group_slots) != p or p > L or p == 0:
        return None
    caps = [[st.max_layers(L - (p - 1)) for st in row] for row in stage_options]
    times = [
        [
            np.array([st.time(k) if 1 <= k <= caps[i][g] else INF for k in range(L + 1)])
            for g, st in enumerate(row)
        ]
        for i, row in enumerate(stage_options)
    ]
    finite = [t[np.isfinite(t)] for row in times for t in row]
    if not any(len(f) for f in finite):
        return None
    candidates = np.unique(np.concatenate(finite))
    solve = _PlacementDP(times, stage_options, group_slots, L)
    floor_sum = solve.min_sum(INF)
    if not np.isfinite(floor_sum):
        return None
    # the smallest feasible bottleneck (feasibility is monotone in B)
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if solve.feasible(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
    for bound in candidates[lo:] if m > 1 else candidates[-1:]:
        if best is not None and (m - 1) * bound + floor_sum > best[0] + 1e-12:
            break
        if not np.isfinite(solve.min_sum(bound)):
            continue
        groups, layers = solve.argmin(bound)
        stages = [stage_options[i][g] for i, g in enumerate(groups)]
        value = objective(stages, layers, m)
        if best is None or better(value, groups + layers, best[0], best[1] + best[2]):
            best = (value, groups, layers)
    if best is None or not math.isfinite(best[0]):
        return None
    return Partition(best[2], best[0], best[1])


class _PlacementDP:
    """Suffix tables of :func:`placement_partition` for one bottleneck at a time."""

    def __init__(
        self, times: list[list[np.ndarray]], options: list[list[StageModel]], slots: list[int], L: int
    ) -> None:
        self.times, self.options, self.slots, self.L = times, options, slots, L
        self.p, self.G = len(times), len(slots)
        self.shape = tuple(s + 1 for s in slots[:-1]) + (L + 1,)
        # slots left in the last group at stage i for each state (negative or too many: invalid)
        used = np.zeros(self.shape[:-1], dtype=np.int64)
        for axis in range(self.G - 1):
            idx = np.arange(self.shape[axis]).reshape([-1 if a == axis else 1 for a in range(self.G - 1)])
            used = used + idx
        self.others_left = used
        self.bound = None
        self.tables: list[np.ndarray] = []

    def _build(self, bound: float) -> None:
        if self.bound == bound:
            return
        p, G, L = self.p, self.G, self.L
        table = np.full(self.shape, INF)
        table[(0,) * (G - 1) + (0,)] = 0.0
        tables = [table]
        for i in range(p - 1, -1, -1):
            nxt = tables[-1]
            cur = np.full(self.shape, INF)
            last_left = (p - i) - self.others_left  # last group's slots left before stage i
            for g in range(G):
                t = self.times[i][g]
                ok = t[1:] <= bound * (1 + 1e-15)
                most = int(ok.sum())
                if not most:
                    continue
                # stage i on group g: the state before has one more slot of g than after
                if g < G - 1:
                    src = [slice(None)] * (G - 1)
                    dst = [slice(None)] * (G - 1)
                    src[g], dst[g] = slice(0, self.shape[g] - 1), slice(1, None)
                else:
                    src = dst = [slice(None)] * (G - 1)
                prev = nxt[tuple(src)]
                if ok[:most].all():  # stage times increase with layers: 1..most layers fit the bound
                    part = np.full(prev.shape, INF)
                    for k0, k1, slope, base in _linear_pieces(self.options[i][g], most):
                        np.minimum(part, _window_min_plus(prev, k0, k1, slope, base), out=part)
                else:
                    part = np.full(prev.shape, INF)
                    for k in np.flatnonzero(ok) + 1:
                        np.minimum(part[..., k:], prev[..., : L + 1 - k] + t[k], out=part[..., k:])
                if g == G - 1:
                    part[last_left < 1] = INF  # the last group has no slot left before stage i
                view = cur[tuple(dst)]
                np.minimum(view, part, out=view)
            valid = (last_left >= 0) & (last_left <= self.slots[-1])
            cur[~valid] = INF
            tables.append(cur)
        self.tables = tables[::-1]  # tables[i]: stages i..p-1
        self.bound = bound

    def feasible(self, bound: float) -> bool:
        """Whether some placement keeps every stage time within ``bound``: the most layers the stages
        can then hold (a max-sum DP over slots left, no layer axis) reach L. Where a stage's time
        does not grow with its layers, the full min-sum table decides instead."""
        p, G = self.p, self.G
        most = np.zeros((p, G), dtype=np.int64)
        for i in range(p):
            for g in range(G):
                ok = self.times[i][g][1:] <= bound * (1 + 1e-15)
                n = int(ok.sum())
                if not ok[:n].all():
                    return bool(np.isfinite(self.min_sum(bound)))
                most[i, g] = n
        shape = self.shape[:-1]
        value = np.full(shape, -np.inf)
        value[(0,) * (G - 1)] = 0.0
        for i in range(p - 1, -1, -1):
            cur = np.full(shape, -np.inf)
            last_left = (p - i) - self.others_left
            for g in range(G):
                if most[i, g] < 1:
                    continue
                if g < G - 1:
                    src, dst = [slice(None)] * (G - 1), [slice(None)] * (G - 1)
                    src[g], dst[g] = slice(0, shape[g] - 1), slice(1, None)
                    part = value[tuple(src)] + most[i, g]
                    view = cur[tuple(dst)]
                    np.maximum(view, part, out=view)
                else:
                    part = np.where(last_left >= 1, value + most[i, g], -np.inf)
                    np.maximum(cur, part, out=cur)
            cur[(last_left < 0) | (last_left > self.slots[-1])] = -np.inf
            value = cur
        return bool(value[tuple(self.slots[:-1])] >= self.L)

    def min_sum(self, bound: float) -> float:
        self._build(bound)
        return float(self.tables[0][tuple(self.slots[:-1]) + (self.L,)])

    def argmin(self, bound: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The lexicographically smallest (group, layers) choices stage by stage that stay optimal."""
        self._build(bound)
        G, L = self.G, self.L
        state = list(self.slots[:-1])
        left = L
        target = self.tables[0][tuple(state) + (left,)]
        groups, layers = [], []
        for i in range(self.p):
            nxt = self.tables[i + 1]
            chosen = None
            for g in range(G):
                after = list(state)
                if g < G - 1:
                    if after[g] == 0:
                        continue
                    after[g] -= 1
                elif (self.p - i) - sum(state) < 1:
                    continue
                t = self.times[i][g]
                for k in range(1, left + 1):
                    if not t[k] <= bound * (1 + 1e-15):
                        continue
                    rest = nxt[tuple(after) + (left - k,)]
                    if t[k] + rest <= target + abs(target) * 1e-12:
                        chosen = (g, k, after, rest)
                        break
                if chosen:
                    break
            g, k, state, target = chosen
            groups.append(g)
            layers.append(k)
            left -= k
        return tuple(groups), tuple(layers)


def _linear_pieces(st: StageModel, most: int) -> list[tuple[int, int, float, float]]:
    """``st.time(k)`` for k = 1..most as linear pieces (k0, k1, slope, intercept): one, or two when
    only the first ``recompute_layers`` layers are recomputed."""
    a, r, K, e = st.layer_s, st.recompute_s, st.recompute_layers, st.extra_s
    if not r or not K:
        return [(1, most, a, e)]
    if K >= most:
        return [(1, most, a + r, e)]
    return [(1, K, a + r, e), (K + 1, most, a, e + r * K)]


def _window_min_plus(prev: np.ndarray, k0: int, k1: int, slope: float, base: float) -> np.ndarray:
    """``out[..., j] = min over k in [k0, k1] of prev[..., j - k] + base + slope k`` (last axis).

    Equals ``base + slope j + min over j' in [j - k1, j - k0] of (prev[j'] - slope j')``: a sliding
    window minimum, taken with doubling windows (log of the window's width numpy operations
    instead of one per layer count)."""
    L1 = prev.shape[-1]
    j = np.arange(L1, dtype=float)
    u = prev - slope * j
    pad = np.full(prev.shape[:-1] + (k1,), INF)
    U = np.concatenate([pad, u], axis=-1)  # U[..., x + k1] = u[..., x]
    width = k1 - k0 + 1
    M, w = U, 1  # M[..., i] = min U[..., i : i + w]
    while 2 * w <= width:
        M = np.minimum(M[..., :-w], M[..., w:])
        w *= 2
    # window [j, j + width - 1] of U = two overlapping windows of w
    R = np.minimum(M[..., :L1], M[..., width - w : width - w + L1])
    return base + slope * j + R


def ilp_partition(
    stage_options: list[list[StageModel]],
    group_slots: list[int],
    num_layers: int,
    m: int,
    time_limit_s: float = 20.0,
) -> Partition | None:
    """Layers per stage and the node group of each stage, as a mixed-integer program.

    ``stage_options[i][g]`` is stage position i's model on node group g; group g can host
    ``group_slots[g]`` stages (its GPUs / GPUs per stage). Variables: ``y[g][i]`` (group g hosts
    stage i), ``n[g][i]`` (layers of stage i when on group g, 0 otherwise), ``T`` (bottleneck).
    Minimise sum_i tau_i + (m - 1) T subject to tau_i <= T and memory per stage. With one group
    this is the homogeneous partition problem and agrees with :func:`dp_partition`.
    """
    import pulp

    p, G, L = len(stage_options), len(group_slots), num_layers
    if sum(group_slots) != p or p > L:
        return None
    prob = pulp.LpProblem("partition", pulp.LpMinimize)

    def var(name: str, **kw):
        # PuLP >= 3.3 attaches variables to the problem; older releases construct them directly.
        add = getattr(prob, "add_variable", None)
        return add(name, **kw) if add is not None else pulp.LpVariable(name, **kw)

    y = [[var(f"y_{g}_{i}", cat="Binary") for i in range(p)] for g in range(G)]
    n = [[var(f"n_{g}_{i}", lowBound=0, upBound=L, cat="Integer") for i in range(p)] for g in range(G)]
    T = var("T", lowBound=0)
    taus = []
    for i in range(p):
        prob += pulp.lpSum(y[g][i] for g in range(G)) == 1
        prob += pulp.lpSum(n[g][i] for g in range(G)) >= 1
        tau = []
        for g in range(G):
            st = stage_options[i][g]
            cap = st.max_layers(L)
            prob += n[g][i] <= cap * y[g][i]
            prob += n[g][i] >= y[g][i]
            # Recompute of min(n, K) layers: linear when every stage's layers are recomputed (K >= n)
            # or none are; partial recompute is handled by folding it into the per-layer time.
            per_layer = st.layer_s + (st.recompute_s if st.recompute_layers >= L else 0.0)
            tau.append(per_layer * n[g][i] + st.extra_s * y[g][i])
        tau_i = pulp.lpSum(tau)
        taus.append(tau_i)
        prob += tau_i <= T
    for g in range(G):
        prob += pulp.lpSum(y[g][i] for i in range(p)) == group_slots[g]
    prob += pulp.lpSum(n[g][i] for g in range(G) for i in range(p)) == L
    main = pulp.lpSum(taus) + (m - 1) * T
    prob += main
    solver = _solver(time_limit_s)
    status = prob.solve(solver)
    if pulp.LpStatus[status] != "Optimal":
        return None

    # Ties are common (identical stage positions), and each solver breaks them its own way. A second
    # solve keeps the optimum and minimises an explicit tie-break (lower-numbered groups on earlier
    # stages, then fewer layers on earlier stages), so CBC and HiGHS return the same plan.
    def read() -> tuple[list[int], list[int]]:
        groups = [max(range(G), key=lambda gg: (y[gg][i].value() or 0.0, -gg)) for i in range(p)]
        return [int(round(n[groups[i]][i].value() or 0.0)) for i in range(p)], groups

    layers, groups = read()
    best = pulp.value(main)
    prob += main <= best * (1 + 1e-7) + 1e-9  # solver tolerances: a hair above the optimum
    prob.setObjective(
        pulp.lpSum((g + 1) * (i + 1) * y[g][i] for g in range(G) for i in range(p)) * (L + 1) * p
        + pulp.lpSum((p - i) * n[g][i] for g in range(G) for i in range(p))
    )
    if pulp.LpStatus[prob.solve(solver)] == "Optimal":
        tied = read()
        tied_stages = [stage_options[i][tied[1][i]] for i in range(p)]
        if objective(tied_stages, tuple(tied[0]), m) <= objective(
            [stage_options[i][groups[i]] for i in range(p)], tuple(layers), m
        ) * (1 + 1e-7):
            layers, groups = tied
    stages = [stage_options[i][groups[i]] for i in range(p)]
    value = objective(stages, tuple(layers), m)
    if not math.isfinite(value):
        return None
    return Partition(tuple(layers), value, tuple(groups))


def _solver(time_limit_s: float):
    import pulp

    try:
        import highspy  # noqa: F401

        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=0.0)
    except Exception:
        import warnings

        # PuLP 3.x still bundles CBC (pyproject pins pulp < 4) but announces its removal in 4.0.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=0.0)
