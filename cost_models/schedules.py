"""Pipeline schedules as per-stage operation orders, and the event simulator that times them.

A schedule gives, for each pipeline rank, the ordered list of operations ``(kind, chunk, mb)``:
kind ``F`` (forward), ``B`` (backward for inputs; the whole backward when W is not split) or ``W``
(backward for weights), model chunk ``chunk`` (virtual stage ``chunk * p + rank``, Megatron's
interleaving; ZB-V's V: :func:`virtual_stage`) and micro-batch ``mb``. Generators:

* GPipe (Huang et al. 2019, arXiv:1811.06965): all forwards, then all backwards.
* 1F1B / PipeDream-Flush (Narayanan et al. 2021, arXiv:2104.04473, Sec. 2.2.1): rank r runs
  ``p - r - 1`` warm-up forwards, then alternates one forward and one backward.
* Interleaved 1F1B (same paper, Sec. 2.2.2; Megatron-Core 0.19.2 ``schedules.py``
  ``get_pp_rank_microbatches``): warm-up ``2(p - r - 1) + (v - 1) p`` chunk micro-batches, at most
  all ``m v`` of them, chunk of the k-th forward ``(k mod p v) div p``. torch's
  ``ScheduleInterleaved1F1B`` (torchtitan; ``_get_warmup_ops``) warms up the same count with
  ``microbatches_per_round = p``. Megatron-LM before 2024-11 (commit 4295be1a6c, "tunable schedule
  with overlapping") ran every forward first when m == p; neither pinned framework does.
* ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241): 1F1B with the
  backward split into B and W; rank r keeps its W passes r behind its B passes.
* ZB-H2 (same paper, Sec. 2.2 and Fig. 3; the memory budget of its automatically scheduled
  "ZB-2p", Sec. 3): rank r warms up with ``2(p - r) - 1`` forwards, then runs B, W and F in turn
  with its W passes ``2r`` behind its B passes and the deferred W's at the tail; at most ``2p - 1``
  micro-batches wait for their W on any rank. Without a barrier between iterations
  (:data:`POST_VALIDATION`) no rank idles after its first forward when F, B and W take equal time.
* ZB-V (same paper, Sec. 6; torch ``ScheduleZBVZeroBubble``, torchtitan's ``ZBVZeroBubble``): two
  chunks per rank placed as a V (:data:`V_SHAPE`: rank r holds virtual stages r and 2p - 1 - r, so
  the turn at the bottom of the V stays on rank p - 1), W split from B, and the activation memory of
  1F1B. The order is torch 2.14's ``_calculate_single_rank_operations``: ``2(p - r) - 1`` forwards of
  chunk 0, r pairs (chunk 1, chunk 0), p - r triples (F, B, W of chunk 1), then F, B, W of chunk 0
  and of chunk 1 in turn, and the cool-down; with fewer than 2p - 1 micro-batches the operations
  of the missing ones are dropped, as torch does.

The simulator (../shared/reference/algorithms.md §4.4): an operation starts when its stage is
free and its dependency has finished plus the point-to-point transfer time. ``F(vs, mb)`` needs
``F(vs - 1, mb)``; ``B(vs, mb)`` needs ``B(vs + 1, mb)`` (``F`` of the same micro-batch on the last
virtual stage); ``W`` follows its ``B`` on the same stage. It runs in O(number of operations), in
an execution order that depends only on the schedule and is cached per (schedule, p, m, v).
The :class:`Timeline` is the single source of step time, idle time, bubble fraction and
in-flight activations (STYLE lesson 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

F, B, W = 0, 1, 2
KIND_NAMES = ("F", "B", "W")
SPLIT_W = ("zb-h1", "zb-h2", "zb-v")
"""Schedules that split the backward into B (input gradients) and W (weight gradients)."""
POST_VALIDATION = ("zb-h2",)
"""Schedules that run without a pipeline-wide barrier at the optimizer step: Qi et al. 2023's
"optimizer post-validation" (Sec. 4; ``--enable-optimizer-post-validation`` in
sail-sg/zero-bubble-pipeline-parallelism, set with every zero-bubble run of its
``examples/pretrain_zero_bubble.sh``) steps each rank's optimizer as soon as its own backward work
is done and checks the global gradient norm and overflow afterwards, so consecutive iterations
overlap across ranks: rank r starts iteration k + 1 while later ranks finish iteration k (the
"parallelogram" of the paper's Fig. 3). ZB-H2's warm-up forwards and deferred W's fill each rank
only under that overlap, so its iteration lasts the longest rank's own span
(:meth:`Timeline.aligned`)."""


V_SHAPE = ("zb-v",)
"""Schedules whose two chunks per rank are placed as a V (torch ``generate_stage_to_rank_mapping``
``style="v"``; torchtitan 0.2.2 ``distributed/pipeline_parallel.py`` ``_get_stage_indices``): chunk
0 of rank r is virtual stage r, chunk 1 is 2p - 1 - r."""


def virtual_stage(schedule: str | None, p: int, rank: int, chunk):
    """The virtual stage (position in the model's layer order) of ``chunk`` on ``rank``; ``chunk``
    may be an array of chunks (0 or 1 under a V)."""
    if schedule in V_SHAPE:
        return rank + chunk * (2 * p - 1 - 2 * rank)  # chunk 0: rank; chunk 1: 2p - 1 - rank
    return chunk * p + rank


def stage_rank(schedule: str, p: int, vs: int) -> int:
    """The pipeline rank holding virtual stage ``vs`` (inverse of :func:`virtual_stage`)."""
    if schedule in V_SHAPE:
        return vs if vs < p else 2 * p - 1 - vs
    return vs % p


def rank_stages(schedule: str, p: int, v: int, rank: int) -> list[int]:
    """The virtual stages of ``rank``, chunk 0 first."""
    return [virtual_stage(schedule, p, rank, k) for k in range(v)]


class ScheduleError(ValueError):
    """The schedule's constraints are not met (e.g. interleaving with m not divisible by p)."""


def generate(schedule: str, p: int, m: int, v: int = 1) -> list[list[tuple[int, int, int]]]:
    """Operation order of every pipeline rank for ``schedule`` with p ranks, m micro-batches, v chunks."""
    return [list(ops) for ops in _generate(schedule, p, m, v)]


@lru_cache(maxsize=256)
def _generate(schedule: str, p: int, m: int, v: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    return tuple(tuple(ops) for ops in _generate_lists(schedule, p, m, v))


def _generate_lists(schedule: str, p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    if p < 1 or m < 1 or v < 1:
        raise ScheduleError(f"need p, m, v >= 1, got p={p} m={m} v={v}")
    if schedule == "gpipe":
        return [[(F, 0, j) for j in range(m)] + [(B, 0, j) for j in range(m)] for _ in range(p)]
    if schedule == "1f1b":
        return [_one_f_one_b(p, m, r) for r in range(p)]
    if schedule == "zb-h1":
        return [_zb_h1(p, m, r) for r in range(p)]
    if schedule == "zb-h2":
        return [_zb_h2(p, m, r) for r in range(p)]
    if schedule == "zb-v":
        if v != 2:
            raise ScheduleError(f"the zb-v schedule needs exactly 2 chunks per rank, got v={v}")
        return [_zb_v(p, m, r) for r in range(p)]
    if schedule == "interleaved":
        if v < 2:
            raise ScheduleError("interleaved schedule needs v >= 2 chunks per rank")
        if m % p:
            raise ScheduleError(f"interleaved schedule needs m ({m}) divisible by p ({p})")
        return [_interleaved(p, m, v, r) for r in range(p)]
    raise ScheduleError(f"unknown schedule {schedule!r}")


def _one_f_one_b(p: int, m: int, r: int) -> list[tuple[int, int, int]]:
    warm = min(p - r - 1, m)
    ops = [(F, 0, j) for j in range(warm)]
    for i in range(m - warm):
        ops += [(F, 0, warm + i), (B, 0, i)]
    ops += [(B, 0, j) for j in range(m - warm, m)]
    return ops


def _zb_h1(p: int, m: int, r: int) -> list[tuple[int, int, int]]:
    # Rank r keeps its W passes r behind its B passes, so backward passes travel up the pipeline
    # without waiting for weight gradients, and the deferred W's fill the tail. Every rank holds
    # the same number of in-flight micro-batches as 1F1B's first rank at most (Qi et al. 2023,
    # Sec. 2.1); the simulated bubble equals the paper's (p - 1)(t_F + t_B - t_W) (tested).
    warm = min(p - r - 1, m)
    ops = [(F, 0, j) for j in range(warm)]
    pending: list[int] = []

    def backward(j: int) -> None:
        ops.append((B, 0, j))
        pending.append(j)
        if len(pending) > r:
            ops.append((W, 0, pending.pop(0)))

    for i in range(m - warm):
        ops.append((F, 0, warm + i))
        backward(i)
    for j in range(m - warm, m):
        backward(j)
    ops += [(W, 0, j) for j in pending]
    return ops


def _zb_h2(p: int, m: int, r: int) -> list[tuple[int, int, int]]:
    # Rank r warms up with the 2(p - r) - 1 forwards that fit before its first B arrives, then
    # runs B, W, F in turn with its W passes 2r behind its B passes, and ends with the 2r + 1
    # deferred W's: at equal F, B and W times the last B reaches rank r exactly 2r + 1 units before
    # its span of 3m units ends, so no rank waits after its first forward (the parallelogram of
    # Qi et al. 2023, Fig. 3, ZB-H2; tested). Every rank keeps at most 2p - 1 micro-batches whose W
    # has not run, the paper's 2p M_B budget of ZB-H2 / ZB-2p.
    warm = min(2 * (p - r) - 1, m)
    ops = [(F, 0, j) for j in range(warm)]
    w = 0
    for i in range(m):
        ops.append((B, 0, i))
        if i >= 2 * r:
            ops.append((W, 0, w))
            w += 1
        if warm + i < m:
            ops.append((F, 0, warm + i))
    ops += [(W, 0, j) for j in range(w, m)]
    return ops


def _zb_v(p: int, m: int, r: int) -> list[tuple[int, int, int]]:
    # torch 2.14 ScheduleZBVZeroBubble._calculate_single_rank_operations, step for step: it plans
    # for at least 2p - 1 micro-batches and drops the operations of those beyond m.
    n = max(2 * p - 1, m)
    ops: list[tuple[int, int, int]] = []
    f0 = f1 = b0 = b1 = 0
    for _ in range(2 * (p - r) - 1):
        ops.append((F, 0, f0))
        f0 += 1
    for _ in range(r):
        ops += [(F, 1, f1), (F, 0, f0)]
        f1, f0 = f1 + 1, f0 + 1
    for _ in range(p - r):
        ops += [(F, 1, f1), (B, 1, b1), (W, 1, b1)]
        f1, b1 = f1 + 1, b1 + 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            ops.append((F, 0, f0))
            f0 += 1
        ops += [(B, 0, b0), (W, 0, b0), (F, 1, f1), (B, 1, b1), (W, 1, b1)]
        b0, f1, b1 = b0 + 1, f1 + 1, b1 + 1
    w0, w1 = b0, b1
    for _ in range(r):
        ops += [(B, 0, b0), (B, 1, b1)]
        b0, b1 = b0 + 1, b1 + 1
    for _ in range(p - r):
        ops += [(B, 0, b0), (W, 0, w0)]
        b0, w0 = b0 + 1, w0 + 1
    ops += [(W, 1, j) for j in range(w1, b1)]
    ops += [(W, 0, j) for j in range(w0, b0)]
    return [op for op in ops if op[2] < m]


def _interleaved(p: int, m: int, v: int, r: int) -> list[tuple[int, int, int]]:
    total = m * v

    def chunk_mb(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k % (p * v)) // p
        mb = (k // (p * v)) * p + k % p
        return (chunk if forward else v - 1 - chunk), mb

    warm = min(2 * (p - r - 1) + (v - 1) * p, total)
    ops = [(F, *chunk_mb(k, True)) for k in range(warm)]
    for k in range(total - warm):
        ops.append((F, *chunk_mb(warm + k, True)))
        ops.append((B, *chunk_mb(k, False)))
    ops += [(B, *chunk_mb(k, False)) for k in range(total - warm, total)]
    return ops


@dataclass(frozen=True, slots=True)
class Timeline:
    """Start and end of every operation on every pipeline rank, and what follows from them.

    Arrays are per rank, in execution order: ``kind``, ``chunk``, ``mb``, ``start_s``, ``end_s``
    and ``inflight`` (activation units resident after the operation: +1 per forward of a chunk,
    released by B, and by W for the part only W needs); ``vstage``: the operation's virtual stage
    (:func:`virtual_stage` of its chunk; empty for graph pipelines, whose stages are not a chain).
    """

    num_stages: int
    num_microbatches: int
    num_chunks: int
    kind: tuple[np.ndarray, ...]
    chunk: tuple[np.ndarray, ...]
    mb: tuple[np.ndarray, ...]
    start_s: tuple[np.ndarray, ...]
    end_s: tuple[np.ndarray, ...]
    inflight: tuple[np.ndarray, ...]
    vstage: tuple[np.ndarray, ...] = ()

    def aligned(self) -> Timeline:
        """The same operations with every rank's times shifted so that its first operation starts
        at 0: one iteration of each rank as it repeats without a barrier between iterations
        (:data:`POST_VALIDATION`), whose length is the longest rank's span. Dependencies across
        ranks then hold between consecutive iterations, not inside the drawn one."""
        shift = [float(s[0]) if len(s) else 0.0 for s in self.start_s]
        return Timeline(
            num_stages=self.num_stages,
            num_microbatches=self.num_microbatches,
            num_chunks=self.num_chunks,
            kind=self.kind,
            chunk=self.chunk,
            mb=self.mb,
            start_s=tuple(s - d for s, d in zip(self.start_s, shift)),
            end_s=tuple(e - d for e, d in zip(self.end_s, shift)),
            inflight=self.inflight,
            vstage=self.vstage,
        )

    @property
    def makespan_s(self) -> float:
        """From the first operation's start to the last operation's end."""
        return float(max(e[-1] for e in self.end_s)) if self.end_s else 0.0

    def busy_s(self, stage: int) -> float:
        """Compute time of ``stage``."""
        return float(np.sum(self.end_s[stage] - self.start_s[stage]))

    def idle_s(self, stage: int, horizon_s: float | None = None) -> float:
        """Idle time of ``stage`` within ``[0, horizon]`` (default: the makespan); never negative
        (a fully busy stage's difference is float round-off such as -5.7e-14)."""
        return max(0.0, (self.makespan_s if horizon_s is None else horizon_s) - self.busy_s(stage))

    def bubble_fraction(self) -> float:
        """Idle over total stage-time: sum of idle / (stages x makespan)."""
        total = self.num_stages * self.makespan_s
        return sum(self.idle_s(s) for s in range(self.num_stages)) / total if total else 0.0

    def peak_inflight(self, stage: int) -> float:
        """Largest number of activation units resident on ``stage``."""
        return float(np.max(self.inflight[stage], initial=0.0))

    def op_name(self, stage: int, index: int) -> str:
        """Readable name of operation ``index`` on ``stage``, e.g. ``F(mb=3,chunk=1)``."""
        k, c, j = int(self.kind[stage][index]), int(self.chunk[stage][index]), int(self.mb[stage][index])
        return f"{KIND_NAMES[k]}(mb={j})" if self.num_chunks == 1 else f"{KIND_NAMES[k]}(mb={j},chunk={c})"


def simulate(
    orders: list[list[tuple[int, int, int]]],
    durations: np.ndarray,
    p2p_s: np.ndarray | float = 0.0,
    num_microbatches: int | None = None,
    weight_fraction: np.ndarray | float = 0.0,
    activation_units: np.ndarray | float = 1.0,
    schedule_key: tuple[str, int, int, int] | None = None,
) -> Timeline:
    """Time the operation ``orders`` of p ranks.

    ``durations[vs, kind]`` is the time of kind F/B/W on virtual stage ``vs`` (shape ``(p*v, 3)``;
    a W column of zeros with no W operations means an unsplit backward). ``p2p_s[vs]`` is the
    transfer time from virtual stage ``vs`` to ``vs + 1`` (and back). ``weight_fraction[vs]`` is the
    share of a chunk's activations that only W needs (freed by W rather than B).
    ``activation_units[vs]`` is what one forward of virtual stage ``vs`` adds to the resident
    activations (1 counts micro-batches; bytes give the activation memory). ``schedule_key``
    (schedule, p, m, v) says that ``orders`` is ``generate(*schedule_key)``, so the dependency
    structure can be reused from a cache; it also names the chunks' placement, so orders of a
    :data:`V_SHAPE` schedule need it (without it chunk c of rank r is virtual stage ``c * p + r``).

    Which operation can run after which depends only on the orders, not on the durations, so
    :func:`_structure` settles one execution order of all operations once (a topological order of
    the dependency graph, raising on a deadlock); timing is then one pass over it: an operation
    starts at ``max(its rank's previous end, its dependency's end + transfer)``. The resident
    level changes only at operations, so it is a running sum over each rank's order.
    """
    p = len(orders)
    durations = np.asarray(durations, dtype=float)
    n_virtual = durations.shape[0]
    v = n_virtual // p
    if v * p != n_virtual:
        raise ScheduleError(f"durations have {n_virtual} virtual stages, not a multiple of {p} ranks")
    m = num_microbatches if num_microbatches is not None else 1 + max(op[2] for ops in orders for op in ops)
    comm = np.broadcast_to(np.asarray(p2p_s, dtype=float), (n_virtual,))
    wfrac = np.broadcast_to(np.asarray(weight_fraction, dtype=float), (n_virtual,))
    has_w = any(op[0] == W for op in orders[0]) if orders else False
    units = np.broadcast_to(np.asarray(activation_units, dtype=float), (n_virtual,))
    b_release = units * (1.0 - wfrac) if has_w else units
    st = (
        _cached_structure(*schedule_key, n_virtual)
        if schedule_key
        else _structure(tuple(tuple(o) for o in orders), p, m, n_virtual, None)
    )
    comm_a = np.append(comm, 0.0)
    seq = zip(
        st.rank,
        st.op,
        st.dep,
        comm_a[st.lag].tolist(),
        durations[st.vs, st.kind].tolist(),
    )
    end = [0.0] * (3 * n_virtual * m)
    free = [0.0] * p
    starts = []
    for r, op, dep, lag, d in seq:
        t_free = free[r]
        if dep >= 0:
            t_dep = end[dep] + lag
            start = t_dep if t_dep > t_free else t_free
        else:
            start = t_free
        t_free = start + d
        free[r] = end[op] = t_free
        starts.append(start)
    start_a = np.asarray(starts)
    end_a = np.asarray(end)
    delta_table = np.stack([units, -b_release, -(units * wfrac)], axis=1)
    # a running sum in each rank's order, added one operation at a time as the level changes
    inflight = [np.add.accumulate(delta_table[vs, kind]) for vs, kind in zip(st.rank_vs, st.rank_kind)]
    return Timeline(
        num_stages=p,
        num_microbatches=m,
        num_chunks=v,
        kind=st.rank_kind,
        chunk=st.rank_chunk,
        mb=st.rank_mb,
        start_s=tuple(start_a[pos] for pos in st.rank_position),
        end_s=tuple(end_a[ids] for ids in st.rank_op),
        inflight=tuple(inflight),
        vstage=st.rank_vs,
    )


@dataclass(frozen=True)
class _Structure:
    """One execution order of every operation of a schedule (global position k), and each rank's
    operations in its own order. Arrays are read-only: cached structures are shared."""

    rank: list[int]
    op: list[int]
    """Flat operation id ``(kind * n_virtual + vs) * m + mb``."""
    dep: list[int]
    """Id of the operation it waits for, -1 for none."""
    lag: np.ndarray
    """Index into the transfer times (``n_virtual``: no transfer)."""
    vs: np.ndarray
    kind: np.ndarray
    rank_position: tuple[np.ndarray, ...]
    """Global positions of each rank's operations, in the rank's order."""
    rank_op: tuple[np.ndarray, ...]
    rank_kind: tuple[np.ndarray, ...]
    rank_chunk: tuple[np.ndarray, ...]
    rank_mb: tuple[np.ndarray, ...]
    rank_vs: tuple[np.ndarray, ...]


@lru_cache(maxsize=64)
def _cached_structure(schedule: str, p: int, m: int, v: int, n_virtual: int) -> _Structure:
    return _structure(_generate(schedule, p, m, v), p, m, n_virtual, schedule)


def _frozen(values, dtype=np.int64) -> np.ndarray:
    a = np.asarray(values, dtype=dtype)
    a.flags.writeable = False
    return a


def _structure(orders, p: int, m: int, n_virtual: int, schedule: str | None) -> _Structure:
    """Dependencies of every operation, and an order in which each follows what it waits for: each
    rank runs its operations in turn until one waits for an operation not yet placed, and resumes
    once that one is (ScheduleError naming the rank and operation when some never can).
    ``schedule`` places the chunks (:func:`virtual_stage`; None: Megatron's interleaving)."""
    arr = [np.asarray(o, dtype=np.int32).reshape(-1, 3) for o in orders]
    last = n_virtual - 1
    op_r, dep_r, lag_r, vs_r = [], [], [], []
    for r, a in enumerate(arr):
        kind, chunk, j = (a[:, i].astype(np.int64) for i in range(3))
        vs = virtual_stage(schedule, p, r, chunk)
        # F(vs) waits for F(vs - 1); B(vs) for B(vs + 1), or F(vs) on the last virtual stage; W(vs)
        # for B(vs). Transfers: F from vs - 1, B from vs + 1 (indexed vs), none otherwise.
        f_dep = np.where(vs > 0, (vs - 1) * m + j, -1)
        f_lag = np.where(vs > 0, vs - 1, n_virtual)
        b_dep = np.where(vs < last, (n_virtual + vs + 1) * m + j, vs * m + j)
        b_lag = np.where(vs < last, vs, n_virtual)
        w_dep = (n_virtual + vs) * m + j
        op_r.append((kind * n_virtual + vs) * m + j)
        dep_r.append(np.select([kind == F, kind == B], [f_dep, b_dep], w_dep))
        lag_r.append(np.select([kind == F, kind == B], [f_lag, b_lag], n_virtual))
        vs_r.append(vs)
    ops = [x.tolist() for x in op_r]
    deps = [x.tolist() for x in dep_r]
    done = bytearray(3 * n_virtual * m)
    ptr = [0] * p
    waiting: dict[int, list[int]] = {}
    order: list[int] = []
    work = list(range(p - 1, -1, -1))
    while work:
        r = work.pop()
        ops_of, deps_of = ops[r], deps[r]
        i, n = ptr[r], len(ops_of)
        while i < n:
            dep = deps_of[i]
            if dep >= 0 and not done[dep]:
                waiting.setdefault(dep, []).append(r)
                break
            op = ops_of[i]
            done[op] = 1
            order.append(r)
            i += 1
            woken = waiting.pop(op, None)
            if woken:
                work.extend(woken)
        ptr[r] = i
    stuck = [r for r in range(p) if ptr[r] < len(orders[r])]
    if stuck:
        r = stuck[0]
        raise ScheduleError(
            f"schedule deadlocks: rank {r} waits forever at operation {tuple(orders[r][ptr[r]])}"
        )
    ranks = np.asarray(order, dtype=np.int64)
    position = [np.flatnonzero(ranks == r) for r in range(p)]
    where = np.concatenate(position)  # global position of each operation, ranks concatenated

    def in_order(per_rank: list[np.ndarray]) -> np.ndarray:
        out = np.empty(len(order), dtype=np.int64)
        out[where] = np.concatenate(per_rank)
        return out

    return _Structure(
        rank=order,
        op=in_order(op_r).tolist(),
        dep=in_order(dep_r).tolist(),
        lag=_frozen(in_order(lag_r)),
        vs=_frozen(in_order(vs_r)),
        kind=_frozen(in_order([a[:, 0] for a in arr])),
        rank_position=tuple(_frozen(x) for x in position),
        rank_op=tuple(_frozen(x) for x in op_r),
        rank_kind=tuple(_frozen(a[:, 0], np.int32) for a in arr),
        rank_chunk=tuple(_frozen(a[:, 1], np.int32) for a in arr),
        rank_mb=tuple(_frozen(a[:, 2], np.int32) for a in arr),
        rank_vs=tuple(_frozen(x) for x in vs_r),
    )


def uniform_durations(p: int, v: int, t_f: float, t_b: float, t_w: float = 0.0) -> np.ndarray:
    """Durations array for identical virtual stages (a convenience for tests and oracles)."""
    return np.tile(np.array([t_f, t_b, t_w], dtype=float), (p * v, 1))


@lru_cache(maxsize=1024)
def peak_inflight(
    schedule: str, p: int, m: int, v: int = 1, weight_fraction: float = 0.0
) -> tuple[float, ...]:
    """Peak micro-batches resident on each rank (in stage units: chunks / v), from the op order.

    The resident level changes only at operations (+1 per forward chunk, released by B, and by W
    for the ``weight_fraction`` only W needs), so its peak is a running maximum over each rank's
    operation order and does not depend on durations. It equals :meth:`Timeline.peak_inflight`
    of any simulation of the same schedule (tested).
    """
    orders = _generate(schedule, p, m, v)
    has_w = schedule in SPLIT_W
    release_b = 1.0 - weight_fraction if has_w else 1.0
    delta = np.array([1.0, -release_b, -weight_fraction])
    out = []
    for ops in orders:
        kinds = np.fromiter((op[0] for op in ops), dtype=np.int64, count=len(ops))
        out.append(float(np.max(np.cumsum(delta[kinds]), initial=0.0)) / v)
    return tuple(out)
