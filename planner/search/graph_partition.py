"""The exact partition of one graph-pipeline shape (:mod:`planner.search.graph`, steps 4-5):
bisection over candidate bottleneck values with a dynamic program over the decomposition for each,
and the stage graph of the least one. The chains' sweeps are :mod:`planner.search.graph_chain`'s,
the stage options and bounds :mod:`planner.search.graph_options`'."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.graph_costs import StageGraph
from planner.search.graph_chain import ChainData, StageLimits
from planner.search.graph_options import StageOption, least_times
from planner.search.graph_structure import Branched, Chain, Series

__all__ = ["StageLimits", "partition_graph"]

# ------------------------------------------------------------------------------------------------
# The exact DP for one shape


@dataclass(frozen=True, slots=True)
class _Merge:
    """The head after a branched node sharing a stage with one branch's last stage: the head's first
    ``p`` units join that branch's last chain (``branched``, the node with that branch extended; its
    last stage keeps at least one unit of the branch), the rest of the head (``rest``, None when the
    whole head joins) is a chain of its own after it."""

    p: int
    rest: Chain | None
    branched: Branched
    head: Chain
    """The head chain (its sweeps give the rest's: ``rest`` is its units from ``p``)."""
    floor_s: float
    """Least time of the shared stage (the head's units and the branch's last unit, best option)."""


class _Solver:
    """Feasibility of a pipeline of exactly ``U`` groups of ``base_tp`` GPUs with every stage time
    <= T, over one structure. A chain's stages share one option (tp, replicas) from
    ``options_for(chain)``; a stage takes ``tp * replicas / base_tp`` groups.

    With ``merge_heads``, the chain after a branched node may start inside one branch's last stage
    (GraphPipe's stages are any convex subgraph; its case study puts the concat head in a branch's
    last stage): that stage then feeds the rest of the head and is fed by the sibling branches, which
    see one more stage downstream."""

    def __init__(
        self, root: Series, ucs: dict, U: int, lim: StageLimits, options_for, base_tp: int, merge_heads=False
    ):
        self.root, self.U, self.lim, self.base_tp = root, U, lim, base_tp
        self.ucs, self._options_for = ucs, options_for
        self.options: dict[int, tuple[StageOption, ...]] = {}
        self.chains: dict[tuple[int, StageOption], ChainData] = {}
        self.chain_units: dict[int, tuple[tuple[int, ...], tuple[StageOption, ...]]] = {}
        """Per chain of the structure: its units and every option they may run under (the floor)."""
        self.merges: dict[tuple[int, int], list[_Merge]] = {}
        self.head_branch: dict[int, tuple[int, int]] = {}
        """Per extended branched node (:class:`_Merge`): the index of the branch holding the head,
        and the id of the node it extends."""
        self._shared: dict[tuple, ChainData] = {}
        self.tails: dict[int, tuple[dict[StageOption, ChainData], int]] = {}
        """Per extended chain (a branch's last chain and the head's first ``p`` units): the data of
        the branch's chain followed by the whole head, per option, and where the extended chain
        ends in it; its sweeps are :meth:`ChainData.sweep_tail`'s."""
        self._tail_data: list[ChainData] = []
        self._memo: dict = {}
        self._maps: dict = {}
        self._merging = False
        self._collect(root)
        self._base = list(self.chains)
        if merge_heads:
            self._collect_merges(root)

    def groups(self, option: StageOption) -> int:
        return option[0] * option[1] // self.base_tp

    def _add_chain(self, item: Chain, tail_max: int | None = None) -> tuple[StageOption, ...]:
        opts = tuple(o for o in self._options_for(item) if self.groups(o) <= self.U)
        self.options[id(item)] = opts
        for o in opts:
            data = ChainData(item, self.ucs[o], self.lim, tail_max)
            # identical chains (e.g. identical towers) share one object and its sweeps
            self.chains[(id(item), o)] = self._shared.setdefault(data.signature, data)
        return opts

    def _collect(self, s: Series) -> None:
        for item in s.items:
            if isinstance(item, Chain):
                self.chain_units[id(item)] = (item.units, self._add_chain(item))
            else:
                for b in item.branches:
                    self._collect(b)

    def _widen(self, chain: Chain, opts: tuple[StageOption, ...]) -> None:
        units, have = self.chain_units[id(chain)]
        self.chain_units[id(chain)] = (units, have + tuple(o for o in opts if o not in have))

    def _collect_merges(self, s: Series) -> None:
        for item in s.items:
            if isinstance(item, Branched):
                for b in item.branches:
                    self._collect_merges(b)
        for B, C in zip(s.items, s.items[1:]):
            if not (isinstance(B, Branched) and isinstance(C, Chain)) or not self.options[id(C)]:
                continue
            specs = []
            for members in self._classes(B):  # identical branches: the first stands for its class
                b = members[0]
                last = B.branches[b].items[-1]
                if not isinstance(last, Chain):
                    continue
                # one chain data for the branch's chain and the whole head: every extended chain is
                # a prefix of it (its options: those of the branch's chain and the head together)
                whole = Chain(last.units + C.units)
                opts = tuple(o for o in self._options_for(whole) if self.groups(o) <= self.U)
                if not opts:
                    continue
                data = {o: ChainData(whole, self.ucs[o], self.lim, len(last.units) - 1) for o in opts}
                self._tail_data += [data[o] for o in opts]
                self._widen(last, opts)
                self._widen(C, opts)
                for p in range(1, len(C.units) + 1):
                    ext = Chain(last.units + C.units[:p])
                    self.options[id(ext)] = opts
                    self.tails[id(ext)] = (data, len(last.units) + p)
                    rest = Chain(C.units[p:]) if p < len(C.units) else None
                    branches = tuple(
                        Series((*x.items[:-1], ext)) if k == b else x for k, x in enumerate(B.branches)
                    )
                    ext_branched = Branched(branches)
                    self.head_branch[id(ext_branched)] = (b, id(B))
                    shared = list(ext.units[len(last.units) - 1 :])
                    floor = min(float(self.ucs[o].tau_s[shared].sum()) for o in opts)
                    specs.append(_Merge(p, rest, ext_branched, C, floor))
            if specs:
                self.merges[(id(B), id(C))] = specs

    def data(self, chain: Chain, option: StageOption) -> ChainData:
        """The chain data of ``chain`` under ``option``; an extended chain or the rest of a head
        after a shared stage gets its own when its stages are emitted."""
        key = (id(chain), option)
        if key not in self.chains:
            tail = self.tails.get(id(chain))
            tail_max = None if tail is None else tail[0][option].tail_max
            self.chains[key] = ChainData(chain, self.ucs[option], self.lim, tail_max)
        return self.chains[key]

    def candidates(self, merging: bool) -> np.ndarray:
        """Every stage time a plan may have as its bottleneck (with ``merging``, shared stages too)."""
        times = [self.chains[k].segment_times() for k in self._base]
        if merging:
            times += [c.tail_times() for c in self._tail_data]
        return np.unique(np.concatenate(times))

    def solve(self, T: float, merging: bool = False):
        """(least depth, choice) of a plan of exactly ``U`` groups within ``T``, or None; with
        ``merging``, heads may share a branch's last stage."""
        self._memo = {}
        self._merging = merging
        return self._series(self.root, 0, T).get(self.U)

    def _series(self, s: Series, depth: int, T: float) -> dict:
        key = (id(s), depth)
        if key in self._memo:
            return self._memo[key]
        state = {0: (depth, ())}
        items = s.items
        i = len(items) - 1
        while i >= 0 and state:
            item = items[i]
            pair = (items[i - 1], item) if i > 0 else None
            if self._merging and pair is not None and (id(pair[0]), id(item)) in self.merges:
                # the branched node and the head after it: apart (first: it wins ties), or sharing
                after = self._step(self._step(state, item, T), pair[0], T)
                for k, v in self._step(state, pair, T).items():
                    if k not in after or v[0] < after[k][0]:
                        after[k] = v
                state = after
                i -= 2
            else:
                state = self._step(state, item, T)
                i -= 1
        self._memo[key] = state
        return state

    def _step(self, state: dict, item, T: float) -> dict:
        """``state`` (groups used downstream -> least depth, choices) extended by ``item`` in front."""
        new: dict = {}
        for used in sorted(state):
            dep, rest = state[used]
            if isinstance(item, tuple):
                opts = self._merged(item[0], item[1], dep, T)
            elif isinstance(item, Chain):
                opts = self._chain(item, dep, T)
            else:
                opts = self._branched(item, dep, T)
            for k in sorted(opts):
                total = used + k
                if total > self.U:
                    break
                dep2, choice = opts[k]
                if total not in new or dep2 < new[total][0]:
                    new[total] = (dep2, ((choice,) + rest))
        return new

    def _chain(self, item: Chain, depth: int, T: float) -> dict:
        key = (id(item), depth)
        if key in self._memo:
            return self._memo[key]
        out: dict = {}
        tail = self.tails.get(id(item))
        for o in self.options[id(item)]:
            per_stage = self.groups(o)
            if tail is None:
                reach = self.chains[(id(item), o)].sweep(T, depth, self.U // per_stage)
            else:
                reach = tail[0][o].sweep_tail(T, depth, self.U // per_stage, tail[1])
            for j in range(1, len(reach)):
                used = j * per_stage
                if reach[j][0] and (used not in out or depth + j < out[used][0]):
                    out[used] = (depth + j, ("chain", item, j, depth, o))
        self._memo[key] = out
        return out

    def _merged(self, B: Branched, C: Chain, depth: int, T: float) -> dict:
        """Groups -> least depth of ``B ; C`` with ``C``'s first units in one branch's last stage.

        A split ``p`` of the head whose rest takes ``used`` groups at depth ``d0`` is dominated by
        an earlier split of the same branch with the same ``used`` at a depth no greater: the
        earlier shared stage ends sooner, so it may start sooner (:meth:`ChainData.sweep_tail`
        reaches a superset), and a shallower rest leaves more memory upstream. Such splits add
        nothing (an equal depth never replaces the first) and are not tried."""
        key = ("merged", id(B), id(C), depth)
        if key in self._memo:
            return self._memo[key]
        out: dict = {}
        shallowest: dict[tuple[int, int], int] = {}
        for spec in self.merges[(id(B), id(C))]:
            if spec.floor_s > T * (1 + 1e-12):
                continue
            rest = {0: (depth, None)} if spec.rest is None else self._rest(spec, depth, T)
            b = self.head_branch[id(spec.branched)][0]
            for used in sorted(rest):
                d0, rest_choice = rest[used]
                if shallowest.get((b, used), d0 + 1) <= d0:
                    continue
                shallowest[(b, used)] = d0
                inner = self._branched(spec.branched, d0, T)
                for k in sorted(inner):
                    total = used + k
                    if total > self.U:
                        break
                    dep2, choice = inner[k]
                    if total not in out or dep2 < out[total][0]:
                        out[total] = (dep2, ("merged", choice, rest_choice))
        self._memo[key] = out
        return out

    def _rest(self, spec: _Merge, depth: int, T: float) -> dict:
        """:meth:`_chain` of the head's units from ``spec.p``, read from the head's own sweeps
        (units ``p..`` covered by ``j`` stages), at the head's options."""
        key = ("rest", id(spec.head), spec.p, depth)
        if key in self._memo:
            return self._memo[key]
        out: dict = {}
        for o in self.options[id(spec.head)]:
            per_stage = self.groups(o)
            reach = self.chains[(id(spec.head), o)].sweep(T, depth, self.U // per_stage)
            for j in range(1, len(reach)):
                used = j * per_stage
                if reach[j][spec.p] and (used not in out or depth + j < out[used][0]):
                    out[used] = (depth + j, ("chain", spec.rest, j, depth, o))
        self._memo[key] = out
        return out

    def _signature(self, s: Series) -> tuple:
        """What makes two branches interchangeable: the same chains (unit costs under every option
        they may take) in the same order, recursively."""
        out = []
        for item in s.items:
            if isinstance(item, Chain) and id(item) in self.tails:
                data, end = self.tails[id(item)]
                out.append(("tail", end, tuple((o, d.signature) for o, d in data.items())))
            elif isinstance(item, Chain):
                opts = self.options[id(item)]
                out.append(("chain", tuple((o, self.chains[(id(item), o)].signature) for o in opts)))
            else:
                out.append(("branched", tuple(self._signature(b) for b in item.branches)))
        return tuple(out)

    def _classes(self, item: Branched) -> list[list[int]]:
        """The branches of ``item`` grouped by :meth:`_signature`, in order of first appearance."""
        key = ("classes", id(item))
        if key not in self._memo:
            groups: dict[tuple, list[int]] = {}
            for i, br in enumerate(item.branches):
                groups.setdefault(self._signature(br), []).append(i)
            self._memo[key] = list(groups.values())
        return self._memo[key]

    def _unit_map(self, rep: Series, member: Series) -> dict[int, int]:
        """Unit of ``rep`` -> the unit at the same place in ``member`` (an identical branch)."""
        key = ("units", id(rep), id(member))
        if key not in self._maps:
            self._maps[key] = dict(zip(_units(rep), _units(member), strict=True))
        return self._maps[key]

    def _branched(self, item: Branched, depth: int, T: float) -> dict:
        """Groups given to the branches together -> least depth (the deepest branch), a knapsack
        over the classes of identical branches (:meth:`_knapsack`).

        In a node extended by a head (:class:`_Merge`) the other branches feed the shared stage:
        one more stage downstream. Their knapsack is the same for every split of the head, so it
        is made once per depth and the branch holding the head is added to it last."""
        key = ("branched", id(item), depth)
        if key in self._memo:
            return self._memo[key]
        classes = self._classes(item)
        start: dict = {0: (depth, ())}
        head = self.head_branch.get(id(item))
        if head is None:
            acc = self._knapsack(item, classes, depth, T, start)
        else:
            b, origin = head
            siblings = ("siblings", origin, b, depth)
            if siblings not in self._memo:
                others = [c for c in classes if c[0] != b]
                self._memo[siblings] = self._knapsack(item, others, depth + 1, T, start)
            acc = self._knapsack(item, [[b]], depth, T, self._memo[siblings])
        out = {
            x: (dep, ("branched", item, tuple(("series", *c) for _, c in sorted(chosen))))
            for x, (dep, chosen) in acc.items()
            if x > 0
        }
        self._memo[key] = out
        return out

    def _knapsack(self, item: Branched, classes: list[list[int]], below: int, T: float, acc: dict) -> dict:
        """``acc`` (groups -> least depth, chosen branches) extended by ``classes`` of ``item``'s
        branches at downstream depth ``below``.

        Identical branches (:meth:`_classes`: the same units at the same costs, four equal towers
        say) take identical resources, as GraphPipe gives symmetric branches: a class of ``k`` takes
        ``k x g`` groups, each branch ``g`` with the same stages; its first branch is solved once and
        the others repeat its choice on their own units. Among equal (groups, depth), the first
        pair in (earlier groups, later groups) order wins."""
        for members in classes:
            rep = self._series(item.branches[members[0]], below, T)
            if not rep or not acc:
                return {}
            k = len(members)
            maps = [None] + [self._unit_map(item.branches[members[0]], item.branches[i]) for i in members[1:]]
            opts = {
                g * k: (rep[g][0], tuple((i, (rep[g][1], u)) for i, u in zip(members, maps)))
                for g in sorted(rep)
                if g * k <= self.U
            }
            if not opts:
                return {}
            k1 = np.array(sorted(acc))
            k2 = np.array(sorted(opts))
            d1 = np.array([acc[x][0] for x in k1])
            d2 = np.array([opts[x][0] for x in k2])
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
                new[a + b] = (int(deps[idx]), (*acc[a][1], *opts[b][1]))
            acc = new
        return acc


def _units(s: Series) -> list[int]:
    """Every unit of ``s`` in order (chains, then each branch of a branched node in turn)."""
    out: list[int] = []
    for item in s.items:
        if isinstance(item, Chain):
            out += item.units
        else:
            for b in item.branches:
                out += _units(b)
    return out


def _covers(reach: list[np.ndarray], j: int) -> bool:
    return len(reach) > j and bool(reach[j][0])


def _emit_chain(item: tuple, solver: _Solver, T: float, stages, edges, replicas) -> tuple[list, list]:
    _, chain, j, depth, option = item
    cd = solver.data(chain, option)
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
    t_chain = float(local[lo]) if len(local) and _covers(cd.sweep(float(local[lo]), depth, j), j) else T
    reach = cd.sweep(t_chain, depth, j)
    first = len(stages)
    for a, b in cd.cuts(t_chain, depth, j, reach):
        stages.append(list(chain.units[a:b]))
        replicas.append(option)
    ids = list(range(first, len(stages)))
    edges += list(zip(ids, ids[1:]))
    return [ids[0]], [ids[-1]]


def _emit_branch(branch: tuple, solver: _Solver, T: float, stages, edges, replicas) -> tuple[list, list]:
    """Emit one branch's series choice; a branch identical to its class's first takes that
    branch's stages with every unit moved to its own."""
    _, choice, unit_map = branch
    first = len(stages)
    out = _emit(choice, solver, T, stages, edges, replicas)
    if unit_map is not None:
        stages[first:] = [[unit_map[u] for u in stage] for stage in stages[first:]]
    return out


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
            ins, outs = _emit_chain(item, solver, T, stages, edges, replicas)
        elif item[0] == "branched":
            ins, outs = [], []
            for branch in item[2]:
                i2, o2 = _emit_branch(branch, solver, T, stages, edges, replicas)
                ins += i2
                outs += o2
        else:  # "merged": the head's first units in one branch's last stage
            _, branched, rest = item
            head = solver.head_branch[id(branched[1])][0]
            ins, per_branch = [], []
            for branch in branched[2]:
                i2, o2 = _emit_branch(branch, solver, T, stages, edges, replicas)
                ins += i2
                per_branch.append(o2)
            (shared,) = per_branch[head]
            edges += [(a, shared) for k, o2 in enumerate(per_branch) if k != head for a in o2]
            outs = [shared]
            if rest is not None:
                i3, outs = _emit_chain(rest, solver, T, stages, edges, replicas)
                edges += [(shared, b) for b in i3]
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
    merge_heads: bool = True,
) -> tuple[StageGraph, float] | None:
    """The stage graph minimising the bottleneck (exact), and that bottleneck; None if nothing fits.

    The pipeline has ``U`` groups of ``base_tp`` GPUs. ``ucs[(tp, replicas)]`` are the unit costs
    of a stage with that option (a :class:`UnitCosts` alone means ``{(base_tp, 1): ucs}``);
    ``options_for(chain)`` narrows the options per chain (default: all of ``options``).
    ``merge_heads``: the chain after a branched node may share one branch's last stage
    (:class:`_Solver`); False keeps every stage inside one chain.
    """
    if not isinstance(ucs, dict):
        ucs = {(base_tp, 1): ucs}
    options = options or tuple(ucs)
    solver = _Solver(root, ucs, U, lim, options_for or (lambda chain: options), base_tp, merge_heads)
    floor = options_floor(ucs, solver, U) * (1 - 1e-9)
    if not np.isfinite(floor):
        return None
    base = solver.candidates(False)
    if lim.m == 1:
        base = base[-1:]  # one micro-batch: the bottleneck does not matter, any fitting plan ties
    T = _least(solver, base, floor, False)
    merging = False
    if solver.merges and (T is None or lim.m > 1):
        # A head shares a branch's stage only when that is faster: below the best without it.
        every = solver.candidates(True)
        every = every[every < T] if T is not None else every
        if lim.m == 1:
            every = every[-1:]
        # a plan with a shared stage is no faster than its shared stage's least time
        least_shared = min(spec.floor_s for specs in solver.merges.values() for spec in specs)
        shared = _least(solver, every, max(floor, least_shared * (1 - 1e-9)), True)
        if shared is not None:
            T, merging = shared, True
    if T is None:
        return None
    _, choice = solver.solve(T, merging)
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


def _least(solver: _Solver, cand: np.ndarray, floor: float, merging: bool) -> float | None:
    """The least candidate bottleneck at which a plan fits (exact: feasibility only grows with T).

    Without shared stages the optimum is usually close to the floor: gallop up from it. With them
    (the candidates below the best bottleneck without one) it is usually just below the top:
    gallop down. Then bisect."""
    lo, hi = int(np.searchsorted(cand, floor)), len(cand) - 1
    if lo > hi or solver.solve(float(cand[hi]), merging) is None:
        return None
    step = 1
    if merging:
        while hi - step >= lo and solver.solve(float(cand[hi - step]), merging) is not None:
            hi, step = hi - step, step * 2
        lo = max(lo, hi - step + 1)
    else:
        while lo + step < hi and solver.solve(float(cand[lo + step]), merging) is None:
            lo, step = lo + step + 1, step * 2
        hi = min(hi, lo + step)
    while lo < hi:
        mid = (lo + hi) // 2
        if solver.solve(float(cand[mid]), merging) is not None:
            hi = mid
        else:
            lo = mid + 1
    return float(cand[lo])


def options_floor(ucs: dict, solver: _Solver, U: int) -> float:
    """A lower bound of the bottleneck over the options each unit may take: every unit's least
    group-time spread over the ``U`` groups, and every unit's least time."""
    work = largest = 0.0
    for units, opts in solver.chain_units.values():
        if not opts:
            return float("inf")  # a chain with no option: nothing fits
        w, big = least_times(ucs, opts, solver.groups, list(units))
        work, largest = work + w, max(largest, big)
    return max(work / U, largest)
