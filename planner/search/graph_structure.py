"""The shape of a multi-branch model for graph pipelines (:mod:`planner.search.graph`, steps 1-2):
the series-parallel decomposition of its block DAG (non-series-parallel parts linearised in
topological order), the branched / serialised mode assignments of its parallel nodes, and the chains
and branched nodes one assignment leaves."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from cost_models.graph_units import UnitLayout, block_order
from planner.inputs.graph_model import GraphModelSpec

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
