"""The heterogeneous stage partition solved exactly by dynamic programming: which node group hosts
each pipeline stage position and how many layers it gets, minimising the AMP / Alpa pipeline
latency ``T = sum tau + (m - 1) max tau`` (:mod:`planner.search.partition`, whose objective,
tie-break and the ILP that solves the same problem this replaces in the search, live there).
"""

from __future__ import annotations

import math

import numpy as np

from planner.search.partition import INF, Partition, StageModel, better, objective


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
