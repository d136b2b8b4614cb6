"""One chain of a graph-pipeline structure under one stage option (:mod:`planner.search.graph_partition`'s
DP, step 5): prefix sums of its units' times and bytes, the first start of a stage ending at each
position within a bottleneck and in memory, and the sweeps of cut positions reachable with each
stage count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.graph_structure import Chain


@dataclass(frozen=True, slots=True)
class StageLimits:
    """What a stage must satisfy: memory terms shared by all stages of a shape."""

    capacity_bytes: float
    """GPU memory minus the fixed reserve and the user's headroom."""
    fragmentation: float
    m: int


class ChainData:
    """Prefix sums of one chain's units, and its cut-position sweeps."""

    def __init__(self, chain: Chain, uc, lim: StageLimits, tail_max: int | None = None) -> None:
        idx = list(chain.units)
        self.n = len(idx)
        self.tail_max = tail_max
        """When set, the last stage starts at or before this position (a branch's tail sharing its
        last stage with the head after it: the stage keeps at least one of the branch's units)."""
        self.pt = np.concatenate([[0.0], np.cumsum(uc.tau_s[idx])])
        self.ps = np.concatenate([[0.0], np.cumsum(uc.static_bytes[idx])])
        self.pa = np.concatenate([[0.0], np.cumsum(uc.act_bytes[idx])])
        tr = uc.transient_bytes[idx]
        self.lim = lim
        self.b = np.arange(self.n + 1)
        # For each distinct transient value v: the first start position after the last unit (< b)
        # whose transient exceeds v, so [a, b) has max transient <= v iff a >= after[v][b].
        self.transients = []
        for v in sorted(set(tr.tolist())):
            last = np.full(self.n + 1, 0)
            pos = -1
            for b in range(1, self.n + 1):
                if tr[b - 1] > v:
                    pos = b - 1
                last[b] = pos + 1
            self.transients.append((v, last))
        self._lo_mem: dict[int, np.ndarray] = {}
        self._lo: dict[tuple[float, int], np.ndarray] = {}
        self._sweeps: dict[tuple[float, int, int], list[np.ndarray]] = {}
        self.signature = (self.pt.tobytes(), self.ps.tobytes(), self.pa.tobytes(), tr.tobytes(), tail_max)

    def segment_times(self) -> np.ndarray:
        if self.tail_max is not None:  # the other segments are the branch chain's own
            return self.pt[self.n] - self.pt[: self.tail_max + 1]
        d = self.pt[None, :] - self.pt[:, None]
        return d[np.triu_indices(self.n + 1, 1)]

    def lo_mem(self, inflight: int) -> np.ndarray:
        hit = self._lo_mem.get(inflight)
        if hit is not None:
            return hit
        lim = self.lim
        f = 1.0 + lim.fragmentation
        q = self.ps + f * inflight * self.pa
        lo = np.full(self.n + 1, self.n + 1)
        for v, after in self.transients:
            room = lim.capacity_bytes - f * v
            lo_v = np.searchsorted(q, q - room, side="left")
            lo = np.minimum(lo, np.maximum(lo_v, after))
        self._lo_mem[inflight] = lo
        return lo

    def lo(self, T: float, inflight: int) -> np.ndarray:
        """lo[b]: the first start a with [a, b) within T and in memory at this in-flight count."""
        key = (T, inflight)
        hit = self._lo.get(key)
        if hit is None:
            if len(self._lo) > 4096:
                self._lo.clear()
            lo_t = np.searchsorted(self.pt, self.pt - T * (1 + 1e-12) - 1e-15, side="left")
            hit = self._lo[key] = np.maximum(lo_t, self.lo_mem(inflight))
        return hit

    def _cached(self, key: tuple) -> list | None:
        """The sweep stored under ``key``, or None; on a miss the store is emptied once it holds
        more than 4,096 sweeps (a bound on memory, not on correctness)."""
        hit = self._sweeps.get(key)
        if hit is None and len(self._sweeps) > 4096:
            self._sweeps.clear()
        return hit

    def sweep(self, T: float, depth: int, max_stages: int) -> list[np.ndarray]:
        """reach[j][a]: units a.. can be covered by exactly j stages (downstream depth ``depth``).

        ``lo`` is non-decreasing in the end position, so a start ``a`` is reachable in j stages iff
        the first reachable end after it, b, has ``lo[b] <= a`` (a later end only starts later).
        """
        n = self.n
        free = self.lo_mem(self.lim.m)[n] == 0
        # deeper than m: the same in-flight counts; memory never binding: no depth matters
        depth = -1 if free else min(depth, self.lim.m)
        key = (T, depth, max_stages)
        hit = self._cached(key)
        if hit is not None:
            return hit
        positions = self.b
        if free:
            # Memory never binds (the whole chain fits at the most in-flight micro-batches): the
            # stage counts covering units a.. are exactly [fewest, n - a] (splitting a stage keeps
            # every part within T), the fewest by greedy longest stages.
            lo_t = self.lo(T, 0)
            furthest = np.searchsorted(lo_t, positions, side="right") - 1
            js = np.arange(min(n, max_stages) + 1)[:, None]
            if self.tail_max is None:
                fewest = np.full(n + 1, n + 1)
                fewest[n] = 0
                for a in range(n - 1, -1, -1):
                    b = furthest[a]
                    if b > a:
                        fewest[a] = fewest[b] + 1
                most = n - positions
            else:
                # The last stage starts at some s in [lo_t[n], tail_max]; the stages before it
                # cover [a, s): from the fewest reaching lo_t[n] (greedy, cut back to end there) to
                # one unit each up to tail_max, every count between (one more unit, one more stage).
                s0, tail = int(lo_t[n]), self.tail_max
                fewest = np.full(n + 1, n + 1)
                fewest[n] = 0
                if s0 <= tail:
                    fewest[s0 : tail + 1] = 1
                    for a in range(min(s0, tail + 1) - 1, -1, -1):
                        b = furthest[a]
                        if b > a:
                            fewest[a] = (1 if b >= s0 else fewest[b]) + 1
                most = np.where(positions <= tail, tail - positions + 1, 0)
            rows = (fewest[None, :] <= js) & (js <= most[None, :])
            out = list(rows)
            self._sweeps[key] = out
            return out
        reach = np.zeros(n + 1, dtype=bool)
        reach[n] = True
        out = [reach]
        for j in range(1, min(n, max_stages) + 1):
            lo = self.lo(T, min(depth + j, self.lim.m))
            ends = np.flatnonzero(out[-1])
            nxt = np.searchsorted(ends, positions, side="right")
            valid = nxt < ends.size
            nxt_end = ends[np.minimum(nxt, ends.size - 1)]
            row = valid & (lo[nxt_end] <= positions)
            if j == 1 and self.tail_max is not None:
                row &= positions <= self.tail_max
            if not row.any():
                break
            out.append(row)
        self._sweeps[key] = out
        return out

    def tail_times(self) -> np.ndarray:
        """Every time a shared stage may take: from a start at or before ``tail_max`` to any end
        after it (the chain is a branch's last chain followed by a head; see :meth:`sweep_tail`)."""
        tail = self.tail_max
        return (self.pt[tail + 2 :, None] - self.pt[None, : tail + 1]).ravel()

    def sweep_tail(self, T: float, depth: int, max_stages: int, end: int) -> list:
        """:meth:`sweep` of the chain's units ``[0, end)`` with the last stage starting at or
        before ``tail_max`` (``end`` after it): rows 1.. as the chain cut at ``end`` would give them.

        The last stage's starts are ``[lo[end], tail_max]``, and every earlier stage ends at or
        before ``tail_max``, where the positions, and so the rows, do not depend on ``end``: the
        rows are cached by that first start, shared by every end that has it. Row 0 (the end
        itself) is not kept (None): the rows are read from row 1 on.
        """
        n, m = self.n, self.lim.m
        free = self.lo_mem(m)[end] == 0
        depth = -1 if free else min(depth, m)
        start = min(int(self.lo(T, min(depth + 1, m) if not free else 0)[end]), self.tail_max + 1)
        key = ("tail", T, depth, max_stages, start)
        hit = self._cached(key)
        if hit is not None:
            return hit
        positions = self.b
        out: list = [None]
        row = (positions >= start) & (positions <= self.tail_max)
        if max_stages >= 1 and row.any():
            out.append(row)
            for j in range(2, min(n, max_stages) + 1):
                lo = self.lo(T, min(depth + j, m) if not free else 0)
                ends = np.flatnonzero(out[-1])
                nxt = np.searchsorted(ends, positions, side="right")
                valid = nxt < ends.size
                row = valid & (lo[ends[np.minimum(nxt, ends.size - 1)]] <= positions)
                if not row.any():
                    break
                out.append(row)
        self._sweeps[key] = out
        return out

    def cuts(self, T: float, depth: int, j: int, reach: list[np.ndarray]) -> list[tuple[int, int]]:
        """Lexicographically smallest segments (front to back) covering the chain in j stages."""
        segs, a = [], 0
        for i in range(j):
            remaining = j - i
            lo = self.lo(T, min(depth + remaining, self.lim.m))
            cand = np.flatnonzero(reach[remaining - 1][a + 1 :] & (lo[a + 1 :] <= a)) + a + 1
            b = int(cand[0])
            segs.append((a, b))
            a = b
        return segs
