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
* :func:`planner.search.placement_dp.placement_partition`: the same heterogeneous problem as the ILP, solved exactly by a
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
    floor_sum = min_sum(times, L, INF)[0]
    if not np.isfinite(floor_sum):
        return None
    # Skip the bounds no partition meets: feasibility is monotone in the bound (a larger one admits
    # every term a smaller one does), so the smallest feasible one is a binary search away. The
    # loop below would only have skipped them one DP each.
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if np.isfinite(min_sum(times, L, candidates[mid])[0]):
            hi = mid
        else:
            lo = mid + 1
    best_value, best_layers = INF, None
    for bound in candidates[lo:]:
        if (m - 1) * bound + floor_sum > best_value + 1e-12:
            break
        total, layers = min_sum(times, L, bound)
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


def min_sum(times: list[np.ndarray], L: int, bound: float) -> tuple[float, list[int]]:
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
