"""Pipeline schedules over a directed acyclic graph of stages (graph pipeline parallelism).

GraphPipe (Jeon et al. 2024, arXiv:2406.17145) lets independent branches of a multi-branch model
run as concurrent pipeline stages. The stage graph's schedule here is the generalised 1F1B of
../shared/reference/algorithms.md §2.3 (a design; the paper's scheduler is not public): stage i
runs ``min(depth(i) - 1, m)`` warm-up forwards, where ``depth(i)`` is the number of stages on the
longest path from i to a sink (for a chain, ``p - i``), then alternates one forward and one
backward. ``F(i, j)`` needs ``F`` of micro-batch j on every predecessor (plus the edge's transfer
time); ``B(i, j)`` needs ``B`` of j on every successor, or its own ``F`` on a sink. For a chain
this is exactly 1F1B (tested against :func:`cost_models.schedules.simulate`).

The result is a :class:`~cost_models.schedules.Timeline`, so step time, idle time, in-flight
micro-batches and bubble-fill windows are read the same way as for chains.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cost_models.schedules import B, F, ScheduleError, Timeline


def topological_order(num_stages: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Stages in a topological order (smallest index first among ready stages); raises on a cycle."""
    indegree = [0] * num_stages
    succ: list[list[int]] = [[] for _ in range(num_stages)]
    for u, v in edges:
        if not (0 <= u < num_stages and 0 <= v < num_stages) or u == v:
            raise ScheduleError(f"edge ({u}, {v}) is not between two distinct stages of {num_stages}")
        succ[u].append(v)
        indegree[v] += 1
    ready = sorted(i for i in range(num_stages) if indegree[i] == 0)
    order = []
    while ready:
        u = ready.pop(0)
        order.append(u)
        for v in sorted(succ[u]):
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
                ready.sort()
    if len(order) != num_stages:
        raise ScheduleError("the stage graph has a cycle")
    return order


def depths(num_stages: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Stages on the longest path from each stage to a sink, itself included."""
    succ: list[list[int]] = [[] for _ in range(num_stages)]
    for u, v in edges:
        succ[u].append(v)
    depth = [1] * num_stages
    for u in reversed(topological_order(num_stages, edges)):
        if succ[u]:
            depth[u] = 1 + max(depth[v] for v in succ[u])
    return depth


def generate_graph_1f1b(
    num_stages: int, edges: Sequence[tuple[int, int]], m: int
) -> list[list[tuple[int, int, int]]]:
    """Per-stage operation order (kind, 0, micro-batch) of the generalised 1F1B schedule."""
    if m < 1:
        raise ScheduleError(f"need at least one micro-batch, got {m}")
    out = []
    for d in depths(num_stages, edges):
        warm = min(d - 1, m)
        ops = [(F, 0, j) for j in range(warm)]
        for i in range(m - warm):
            ops += [(F, 0, warm + i), (B, 0, i)]
        ops += [(B, 0, j) for j in range(m - warm, m)]
        out.append(ops)
    return out


def simulate_graph(
    num_stages: int,
    edges: Sequence[tuple[int, int]],
    durations: np.ndarray,
    m: int,
    edge_lag_s: Sequence[float] | float = 0.0,
    activation_units: Sequence[float] | float = 1.0,
) -> Timeline:
    """Time the generalised 1F1B schedule of a stage graph.

    ``durations[i] = (t_F, t_B)`` per micro-batch of stage i; ``edge_lag_s[k]`` is the transfer time
    of edge k (both directions). Each stage runs on its own devices, one operation at a time.
    """
    durations = np.asarray(durations, dtype=float)
    if durations.shape[0] != num_stages:
        raise ScheduleError(f"durations have {durations.shape[0]} rows for {num_stages} stages")
    lags = np.broadcast_to(np.asarray(edge_lag_s, dtype=float), (len(edges),)).tolist()
    units = np.broadcast_to(np.asarray(activation_units, dtype=float), (num_stages,)).tolist()
    preds: list[list[tuple[int, float]]] = [[] for _ in range(num_stages)]
    succs: list[list[tuple[int, float]]] = [[] for _ in range(num_stages)]
    for (u, v), lag in zip(edges, lags):
        preds[v].append((u, lag))
        succs[u].append((v, lag))
    orders = generate_graph_1f1b(num_stages, edges, m)

    end = np.full((2, num_stages, m), -1.0)
    ptr = [0] * num_stages
    free = [0.0] * num_stages
    level = [0.0] * num_stages
    starts = [[0.0] * len(o) for o in orders]
    ends = [[0.0] * len(o) for o in orders]
    levels = [[0.0] * len(o) for o in orders]
    waiting: dict[tuple[int, int, int], list[int]] = {}
    work = list(range(num_stages - 1, -1, -1))
    dur = durations.tolist()
    while work:
        s = work.pop()
        ops = orders[s]
        while ptr[s] < len(ops):
            kind, _, j = ops[ptr[s]]
            deps = (
                [(F, u, j, lag) for u, lag in preds[s]]
                if kind == F
                else ([(B, v, j, lag) for v, lag in succs[s]] if succs[s] else [(F, s, j, 0.0)])
            )
            blocked = next(((k, st) for k, st, _, _ in deps if end[k, st, j] < 0), None)
            if blocked is not None:
                waiting.setdefault((blocked[0], blocked[1], j), []).append(s)
                break
            ready = max((end[k, st, j] + lag for k, st, _, lag in deps), default=0.0)
            start = max(free[s], ready)
            finish = start + dur[s][kind]
            end[kind, s, j] = finish
            free[s] = finish
            level[s] += units[s] if kind == F else -units[s]
            i = ptr[s]
            starts[s][i], ends[s][i], levels[s][i] = start, finish, level[s]
            ptr[s] += 1
            woken = waiting.pop((kind, s, j), None)
            if woken:
                work.extend(woken)
    stuck = [s for s in range(num_stages) if ptr[s] < len(orders[s])]
    if stuck:
        raise ScheduleError(f"graph schedule deadlocks at stage {stuck[0]}")
    arr = [np.asarray(o, dtype=np.int32).reshape(-1, 3) for o in orders]
    return Timeline(
        num_stages=num_stages,
        num_microbatches=m,
        num_chunks=1,
        kind=tuple(a[:, 0] for a in arr),
        chunk=tuple(a[:, 1] for a in arr),
        mb=tuple(a[:, 2] for a in arr),
        start_s=tuple(np.asarray(x) for x in starts),
        end_s=tuple(np.asarray(x) for x in ends),
        inflight=tuple(np.asarray(x) for x in levels),
    )
