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
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cost_models import memory as mem
from cost_models.estimate import Estimate
from cost_models.graph_costs import (
    GRAPH_RECOMPUTE,
    StageGraph,
    UnitLayout,
    block_order,
    estimate_graph,
    replicated_config,
    unit_costs,
    unit_layout,
)
from cost_models.parallel import ParallelConfig
from planner.errors import InfeasibleError, UsageError
from planner.graph_model import GraphModelSpec
from planner.search.chain import sort_key
from planner.search.space import Restrictions, _divisors
from planner.specs import ClusterSpec, JobSpec

MAX_FREE_MODES = 4
"""Up to this many parallel nodes, every branched/serialised combination is searched; beyond it,
all-serialised, all-branched and each single node branched (a documented restriction)."""


# ------------------------------------------------------------------------------------------------
# Series-parallel decomposition of the block DAG


@dataclass(frozen=True, slots=True)
class SPNode:
    """``kind`` ``series`` (items in order), ``parallel`` (branches) or ``block`` (a leaf)."""

    kind: str
    children: tuple[SPNode, ...] = ()
    block: int = -1


def decompose(g: GraphModelSpec) -> tuple[SPNode, int]:
    """The series-parallel decomposition of ``g``'s blocks and the number of linearised (non-SP) parts."""
    order = block_order(g)
    index = {b.name: i for i, b in enumerate(g.blocks)}
    edges = {(index[e.src], index[e.dst]) for e in g.edges}
    linearised = [0]

    def rec(nodes: list[int]) -> SPNode:
        if len(nodes) == 1:
            return SPNode("block", block=nodes[0])
        inside = set(nodes)
        sub = {(a, b) for a, b in edges if a in inside and b in inside}
        cuts = [i for i in range(1, len(nodes)) if _is_series_cut(nodes[:i], nodes[i:], sub)]
        if cuts:
            parts, start = [], 0
            for i in [*cuts, len(nodes)]:
                parts.append(rec(nodes[start:i]))
                start = i
            items: list[SPNode] = []
            for p in parts:
                items.extend(p.children if p.kind == "series" else (p,))
            return SPNode("series", tuple(items))
        comps = _components(nodes, sub)
        if len(comps) > 1:
            return SPNode("parallel", tuple(_as_series(rec(c)) for c in comps))
        linearised[0] += 1
        return SPNode("series", tuple(SPNode("block", block=n) for n in nodes))

    root = _as_series(rec(order))
    return root, linearised[0]


def _as_series(n: SPNode) -> SPNode:
    return n if n.kind == "series" else SPNode("series", (n,))


def _is_series_cut(prefix: list[int], suffix: list[int], edges: set[tuple[int, int]]) -> bool:
    pre, suf = set(prefix), set(suffix)
    crossing = {(a, b) for a, b in edges if a in pre and b in suf}
    if not crossing:
        return False
    sinks = [a for a in prefix if not any(x == a and y in pre for x, y in edges)]
    sources = [b for b in suffix if not any(y == b and x in suf for x, y in edges)]
    return crossing == {(a, b) for a in sinks for b in sources}


def _components(nodes: list[int], edges: set[tuple[int, int]]) -> list[list[int]]:
    """Weakly connected components, each in the given (topological) order, ordered by first node."""
    parent = {n: n for n in nodes}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for n in nodes:
        groups.setdefault(find(n), []).append(n)
    return sorted(groups.values(), key=lambda c: nodes.index(c[0]))


def parallel_nodes(root: SPNode) -> list[SPNode]:
    """Parallel nodes in a fixed (pre-order) order."""
    out: list[SPNode] = []

    def walk(n: SPNode) -> None:
        if n.kind == "parallel":
            out.append(n)
        for c in n.children:
            walk(c)

    walk(root)
    return out


def mode_assignments(k: int) -> list[tuple[bool, ...]]:
    """Branched (True) / serialised (False) per parallel node: all-serialised first."""
    if k <= MAX_FREE_MODES:
        return sorted(itertools.product((False, True), repeat=k), key=lambda t: (sum(t), t))
    singles = [tuple(i == j for j in range(k)) for i in range(k)]
    return [tuple([False] * k), *singles, tuple([True] * k)]


# ------------------------------------------------------------------------------------------------
# The unit-level structure for one mode assignment


@dataclass(frozen=True, slots=True)
class Chain:
    units: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Branched:
    branches: tuple[Series, ...]


@dataclass(frozen=True, slots=True)
class Series:
    items: tuple[Chain | Branched, ...]


def structure(root: SPNode, modes: tuple[bool, ...], layout: UnitLayout) -> Series:
    """The chains and branched nodes of one mode assignment."""
    units_of: dict[int, list[int]] = {}
    for u, b in enumerate(layout.block):
        units_of.setdefault(b, []).append(u)
    pars = parallel_nodes(root)
    branched = {id(p) for p, on in zip(pars, modes) if on}

    def linear(n: SPNode) -> list[int]:
        if n.kind == "block":
            return units_of[n.block]
        return [u for c in n.children for u in linear(c)]

    def build(series: SPNode) -> Series:
        items: list[Chain | Branched] = []
        run: list[int] = []
        for child in series.children:
            if child.kind == "parallel" and id(child) in branched:
                if run:
                    items.append(Chain(tuple(run)))
                    run = []
                items.append(Branched(tuple(build(b) for b in child.children)))
            else:
                run.extend(linear(child))
        if run:
            items.append(Chain(tuple(run)))
        return Series(tuple(items))

    return build(root)


# ------------------------------------------------------------------------------------------------
# The exact DP for one shape


@dataclass(frozen=True, slots=True)
class StageLimits:
    """What a stage must satisfy: memory terms shared by all stages of a shape."""

    capacity_bytes: float
    """GPU memory minus the fixed reserve and the user's headroom."""
    fragmentation: float
    m: int


class _ChainData:
    """Prefix sums of one chain's units, and its cut-position sweeps."""

    def __init__(self, chain: Chain, uc, lim: StageLimits) -> None:
        idx = list(chain.units)
        self.n = len(idx)
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
        self.signature = (self.pt.tobytes(), self.ps.tobytes(), self.pa.tobytes(), tr.tobytes())

    def segment_times(self) -> np.ndarray:
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

    def sweep(self, T: float, depth: int, max_stages: int) -> list[np.ndarray]:
        """reach[j][a]: units a.. can be covered by exactly j stages (downstream depth ``depth``).

        ``lo`` is non-decreasing in the end position, so a start ``a`` is reachable in j stages iff
        the first reachable end after it, b, has ``lo[b] <= a`` (a later end only starts later).
        """
        depth = min(depth, self.lim.m)  # deeper than m: the same in-flight counts
        key = (T, depth, max_stages)
        hit = self._sweeps.get(key)
        if hit is not None:
            return hit
        if len(self._sweeps) > 4096:
            self._sweeps.clear()
        n = self.n
        positions = self.b
        if self.lo_mem(self.lim.m)[n] == 0:
            # Memory never binds (the whole chain fits at the most in-flight micro-batches): the
            # stage counts covering units a.. are exactly [fewest, n - a] (splitting a stage keeps
            # every part within T), the fewest by greedy longest stages.
            lo_t = self.lo(T, 0)
            furthest = np.searchsorted(lo_t, positions, side="right") - 1
            fewest = np.full(n + 1, n + 1)
            fewest[n] = 0
            for a in range(n - 1, -1, -1):
                b = furthest[a]
                if b > a:
                    fewest[a] = fewest[b] + 1
            js = np.arange(min(n, max_stages) + 1)[:, None]
            rows = (fewest[None, :] <= js) & (js <= (n - positions)[None, :])
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


StageOption = tuple[int, int]
"""(tp, replicas) of a chain's stages: each stage runs on ``tp x replicas`` GPUs of a pipeline."""


class _Solver:
    """Feasibility of a pipeline of exactly ``U`` groups of ``base_tp`` GPUs with every stage time
    <= T, over one structure. A chain's stages share one option (tp, replicas) from
    ``options_for(chain)``; a stage takes ``tp * replicas / base_tp`` groups."""

    def __init__(self, root: Series, ucs: dict, U: int, lim: StageLimits, options_for, base_tp: int):
        self.root, self.U, self.lim, self.base_tp = root, U, lim, base_tp
        self.options: dict[int, tuple[StageOption, ...]] = {}
        self.chains: dict[tuple[int, StageOption], _ChainData] = {}
        self.chain_units: list[tuple[tuple[int, ...], tuple[StageOption, ...]]] = []
        self._shared: dict[tuple, _ChainData] = {}
        self._collect(root, ucs, options_for)

    def groups(self, option: StageOption) -> int:
        return option[0] * option[1] // self.base_tp

    def _collect(self, s: Series, ucs, options_for) -> None:
        for item in s.items:
            if isinstance(item, Chain):
                opts = tuple(o for o in options_for(item) if self.groups(o) <= self.U)
                self.options[id(item)] = opts
                self.chain_units.append((item.units, opts))
                for o in opts:
                    data = _ChainData(item, ucs[o], self.lim)
                    # identical chains (e.g. identical towers) share one object and its sweeps
                    self.chains[(id(item), o)] = self._shared.setdefault(data.signature, data)
            else:
                for b in item.branches:
                    self._collect(b, ucs, options_for)

    def candidates(self) -> np.ndarray:
        return np.unique(np.concatenate([c.segment_times() for c in self.chains.values()]))

    def solve(self, T: float):
        self._memo: dict = {}
        return self._series(self.root, 0, T).get(self.U)

    def _series(self, s: Series, depth: int, T: float) -> dict:
        key = (id(s), depth)
        if key in self._memo:
            return self._memo[key]
        state = {0: (depth, ())}
        for item in reversed(s.items):
            new: dict = {}
            for used in sorted(state):
                dep, rest = state[used]
                opts = self._chain(item, dep, T) if isinstance(item, Chain) else self._branched(item, dep, T)
                for k in sorted(opts):
                    total = used + k
                    if total > self.U:
                        break
                    dep2, choice = opts[k]
                    if total not in new or dep2 < new[total][0]:
                        new[total] = (dep2, ((choice,) + rest))
            state = new
            if not state:
                break
        self._memo[key] = state
        return state

    def _chain(self, item: Chain, depth: int, T: float) -> dict:
        key = (id(item), depth)
        if key in self._memo:
            return self._memo[key]
        out: dict = {}
        for o in self.options[id(item)]:
            per_stage = self.groups(o)
            reach = self.chains[(id(item), o)].sweep(T, depth, self.U // per_stage)
            for j in range(1, len(reach)):
                used = j * per_stage
                if reach[j][0] and (used not in out or depth + j < out[used][0]):
                    out[used] = (depth + j, ("chain", item, j, depth, o))
        self._memo[key] = out
        return out

    def _branched(self, item: Branched, depth: int, T: float) -> dict:
        """Groups given to the branches together -> least depth (the deepest branch), a knapsack.
        Among equal (groups, depth), the first pair in (earlier groups, later groups) order wins."""
        acc: dict = {0: (depth, ())}
        for br in item.branches:
            opts = self._series(br, depth, T)
            if not opts or not acc:
                return {}
            k1 = np.array(sorted(acc))
            k2 = np.array(sorted(opts))
            d1 = np.array([acc[k][0] for k in k1])
            d2 = np.array([opts[k][0] for k in k2])
            total = k1[:, None] + k2[None, :]
            dep = np.maximum(d1[:, None], d2[None, :])
            i1, i2 = np.nonzero(total <= self.U)  # row-major: earlier groups first
            if not i1.size:
                return {}
            sums, deps = total[i1, i2], dep[i1, i2]
            order = np.lexsort((np.arange(sums.size), deps, sums))
            first = np.ones(order.size, dtype=bool)
            first[1:] = sums[order][1:] != sums[order][:-1]
            new: dict = {}
            for idx in order[first].tolist():
                a, b = int(k1[i1[idx]]), int(k2[i2[idx]])
                new[a + b] = (int(deps[idx]), (*acc[a][1], ("series", opts[b][1])))
            acc = new
        return {k: (dep, ("branched", item, c)) for k, (dep, c) in acc.items() if k > 0}


def _covers(reach: list[np.ndarray], j: int) -> bool:
    return len(reach) > j and bool(reach[j][0])


def _emit(
    choice: tuple,
    solver: _Solver,
    T: float,
    stages: list[list[int]],
    edges: list[tuple[int, int]],
    replicas: list[StageOption],
):
    """Append the stages of a series choice (with each stage's option to ``replicas``); return
    (entry stages, exit stages)."""
    entries: list[int] = []
    exits: list[int] = []
    for item in choice:
        if item[0] == "chain":
            _, chain, j, depth, option = item
            cd = solver.chains[(id(chain), option)]
            # Balance the chain on its own: its least bottleneck with j stages (<= T, so the plan's
            # bottleneck is unchanged), then the lexicographically smallest cuts under it.
            local = cd.segment_times()
            local = np.unique(local[local <= T * (1 + 1e-12)])
            lo, hi = 0, len(local) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if _covers(cd.sweep(float(local[mid]), depth, j), j):
                    hi = mid
                else:
                    lo = mid + 1
            t_chain = (
                float(local[lo]) if len(local) and _covers(cd.sweep(float(local[lo]), depth, j), j) else T
            )
            reach = cd.sweep(t_chain, depth, j)
            first = len(stages)
            for a, b in cd.cuts(t_chain, depth, j, reach):
                stages.append(list(chain.units[a:b]))
                replicas.append(option)
            ids = list(range(first, len(stages)))
            edges += list(zip(ids, ids[1:]))
            ins, outs = [ids[0]], [ids[-1]]
        else:
            ins, outs = [], []
            for _, series_choice in item[2]:
                i2, o2 = _emit(series_choice, solver, T, stages, edges, replicas)
                ins += i2
                outs += o2
        if exits:
            edges += [(a, b) for a in exits for b in ins]
        else:
            entries = ins
        exits = outs
    return entries, exits


def partition_graph(
    root: Series,
    ucs,
    U: int,
    lim: StageLimits,
    options: tuple[StageOption, ...] = (),
    base_tp: int = 1,
    options_for=None,
) -> tuple[StageGraph, float] | None:
    """The stage graph minimising the bottleneck (exact), and that bottleneck; None if nothing fits.

    The pipeline has ``U`` groups of ``base_tp`` GPUs. ``ucs[(tp, replicas)]`` are the unit costs
    of a stage with that option (a :class:`UnitCosts` alone means ``{(base_tp, 1): ucs}``);
    ``options_for(chain)`` narrows the options per chain (default: all of ``options``).
    """
    if not isinstance(ucs, dict):
        ucs = {(base_tp, 1): ucs}
    options = options or tuple(ucs)
    solver = _Solver(root, ucs, U, lim, options_for or (lambda chain: options), base_tp)
    cand = solver.candidates()
    if lim.m == 1:
        cand = cand[-1:]  # one micro-batch: the bottleneck does not matter, any fitting plan ties
    floor = options_floor(ucs, solver, U) * (1 - 1e-9)
    if not np.isfinite(floor) or not len(cand):
        return None
    lo, hi = int(np.searchsorted(cand, floor)), len(cand) - 1
    if lo > hi or solver.solve(float(cand[hi])) is None:
        return None
    # The optimum is usually close to the floor: gallop up from it, then bisect.
    step = 1
    while lo + step < hi and solver.solve(float(cand[lo + step])) is None:
        lo, step = lo + step + 1, step * 2
    hi = min(hi, lo + step)
    while lo < hi:
        mid = (lo + hi) // 2
        if solver.solve(float(cand[mid])) is not None:
            hi = mid
        else:
            lo = mid + 1
    T = float(cand[lo])
    _, choice = solver.solve(T)
    stages: list[list[int]] = []
    edges: list[tuple[int, int]] = []
    chosen: list[StageOption] = []
    _emit(choice, solver, T, stages, edges, chosen)
    tps = tuple(o[0] for o in chosen)
    reps = tuple(o[1] for o in chosen)
    sg = StageGraph(
        tuple(tuple(s) for s in stages),
        tuple(sorted(set(edges))),
        reps if any(r > 1 for r in reps) else (),
        tps if any(t != base_tp for t in tps) else (),
    )
    return sg, T


def options_floor(ucs: dict, solver: _Solver, U: int) -> float:
    """A lower bound of the bottleneck over the options each unit may take: every unit's least
    group-time spread over the ``U`` groups, and every unit's least time."""
    work = largest = 0.0
    for units, opts in solver.chain_units:
        if not opts:
            return float("inf")  # a chain with no option: nothing fits
        w, big = _least_times(ucs, opts, solver.groups, list(units))
        work, largest = work + w, max(largest, big)
    return max(work / U, largest)


def _least_times(ucs: dict, opts, groups, idx) -> tuple[float, float]:
    """Over units ``idx``, each on its best option: the summed least group-time and the largest
    least time."""
    work = np.min([ucs[o].tau_s[idx] * groups(o) for o in opts], axis=0)
    least = np.min([ucs[o].tau_s[idx] for o in opts], axis=0)
    return float(work.sum()), float(least.max())


def _options_bound(
    g: GraphModelSpec, job: JobSpec, node, c: ParallelConfig, modes: tuple[bool, ...]
) -> float:
    """:func:`options_floor` over every option of the shape, each unit free to take its best
    (restricting options per chain only raises the optimum, so this stays a lower bound)."""
    options = stage_options(c, modes)
    ucs = {o: unit_costs(g, job, unit_config(c, o), node) for o in options}
    idx = list(range(len(ucs[options[0]].tau_s)))
    work, largest = _least_times(ucs, options, lambda o: o[0] * o[1] // c.tp, idx)
    return max(work / c.pp, largest)


def _shape_floor(g: GraphModelSpec, job: JobSpec, node, c: ParallelConfig, modes: tuple[bool, ...]) -> float:
    """A lower bound of the bottleneck stage time of any plan of shape ``c`` and ``modes``.

    Sequential: the work spread over the ``c.pp`` stages, or the largest unit. Branched: GPU-time
    cannot shrink below one GPU's time at tp 1 with the whole micro-batch (GEMM efficiency grows
    with size; latencies, overheads and tensor-parallel traffic do not shrink), so the bound is that
    work over all ``c.tp x c.pp`` GPUs, or the largest unit over the most GPUs a stage may take.
    """
    if not any(modes):
        uc = unit_costs(g, job, unit_config(c, (c.tp, 1)), node)
        return max(float(uc.tau_s.sum()) / c.pp, float(uc.tau_s.max()))
    uc = unit_costs(g, job, unit_config(c, (1, 1)), node)
    widest = max(t * d for t, d in stage_options(c, modes))
    return max(float(uc.tau_s.sum()) / (c.tp * c.pp), float(uc.tau_s.max()) / widest)


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
    for tp in _divisors(world):
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
        for S in _divisors(world // tp):
            if S > n_units or (r.pp is not None and S not in r.pp) or (r.max_pp and S > r.max_pp):
                continue
            dp = world // (tp * S)
            if job.global_batch_size % dp:
                rejected["global batch not divisible by dp"] = (
                    rejected.get("global batch not divisible by dp", 0) + 1
                )
                continue
            per_replica = job.global_batch_size // dp
            mbss = [b for b in _divisors(per_replica) if b <= r.max_micro_batch_size]
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
) -> GraphSearchResult:
    """Best graph plans and the best sequential plan; ``exhaustive`` disables pruning (tests)."""
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
            heap.append((m * _shape_floor(g, job, node, c, modes), sort_key(c), modes, index, 0, c))
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
            refined = c.num_microbatches(job) * _options_bound(g, job, node, c, modes)
            heapq.heappush(heap, (max(bound, refined), tie, modes, index, 1, c))
            continue
        plan = evaluate_graph(g, cluster, job, c, structures[modes], modes, r.memory_headroom_bytes, r.tp)
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


def stage_options(c: ParallelConfig, modes: tuple[bool, ...]) -> tuple[StageOption, ...]:
    """(tp, replicas) a chain's stages may take in a pipeline of ``c.pp`` groups of ``c.tp`` GPUs.

    A sequential structure uses (c.tp, 1) only (replicating every stage alike is more pipelines, a
    smaller tp everywhere is another shape). A branched one also uses any tp dividing ``c.tp`` and
    any replica count dividing the micro-batch, filling whole groups (``tp x replicas`` a multiple
    of ``c.tp``, at most all ``c.pp`` groups).
    """
    if not any(modes):
        return ((c.tp, 1),)
    return tuple(
        (t, d)
        for t in _divisors(c.tp)
        for d in _divisors(c.micro_batch_size)
        if (t * d) % c.tp == 0 and t * d // c.tp <= c.pp
    )


def unit_config(c: ParallelConfig, option: StageOption) -> ParallelConfig:
    """What a stage with ``option`` = (tp, replicas) of a shape ``c`` (pp = its groups) sees."""
    return replicated_config(c, option[1], c.pp > 1, option[0])


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
    part = partition_graph(root, ucs, c.pp, lim, options, c.tp, options_for)
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
