"""One predicted iteration as a Chrome trace (opens in Perfetto and chrome://tracing).

Format: the JSON Object Format of Google's "Trace Event Format" document (the format
chrome://tracing and Perfetto's legacy JSON importer read,
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): an object with
``traceEvents``, a list of

* complete events (``"ph": "X"``) with ``name``, ``cat``, ``ts`` and ``dur`` in microseconds,
  ``pid``, ``tid`` and ``args``;
* metadata events (``"ph": "M"``) ``process_name`` / ``process_sort_index`` naming each process
  and ``thread_name`` / ``thread_sort_index`` naming each thread.

Mapping: one process per pipeline stage (named with its GPU type, devices and layers per chunk),
thread 0 its compute stream (F, B, W operations from the :class:`~cost_models.schedules.Timeline`,
then its optimizer step), thread 1 its exposed communication (FSDP / ZeRO-2 exposure inside each
pass, the exposed data-parallel gradient reduction after its last backward, the exposed parameter
gather at the end), threads 2.. the point-to-point sends (an activation after each forward, a
gradient after each backward; a send that outlasts the next one of the stage goes to the next
row, so that the events of one thread never overlap). A last process, ``iteration``, holds the
phases: pipeline, data-parallel sync, optimizer step, parameter gather. Its span is the predicted
step time, with the same formula as :func:`cost_models.estimate.estimate`.

Times are rounded to nanoseconds (three decimals of a microsecond); the output is deterministic.
"""

from __future__ import annotations

from cost_models.estimate import Estimate
from cost_models.schedules import KIND_NAMES, B, F, W, stage_rank
from planner.inputs.validation import json_text

COMPUTE_TID = 0
COMM_TID = 1
P2P_TID = 2
US_PER_S = 1e6
KIND_LABELS = {F: "forward", B: "backward", W: "weight gradient"}


def _us(t_s: float) -> float:
    return round(t_s * US_PER_S, 3)


def _event(name: str, cat: str, pid: int, tid: int, t0_s: float, t1_s: float, args: dict) -> dict:
    ts = _us(t0_s)
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": round(max(0.0, _us(t1_s) - ts), 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _meta(name: str, pid: int, tid: int, value) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def stage_label(est: Estimate, r: int) -> str:
    """``stage r: GPU xN, layers a+b`` (devices per stage and decoder layers of each chunk)."""
    s = est.stages[r]
    c = est.config
    devices = s.devices or c.tp * c.cp * c.dp
    return f"stage {r}: {s.gpu} x{devices}, layers {'+'.join(map(str, s.layers))}"


def _sends(est: Estimate, r: int) -> list[tuple[float, float, str, dict]]:
    """Point-to-point sends of chain-pipeline rank ``r``: after each F to the next virtual stage,
    after each B to the previous one; the transfer time is the sending link's (the simulator's lag)."""
    tl, p = est.timeline, est.timeline.num_stages
    last = p * tl.num_chunks - 1
    schedule = est.config.schedule
    out = []
    for i in range(len(tl.kind[r])):
        k, j, vs = int(tl.kind[r][i]), int(tl.mb[r][i]), int(tl.vstage[r][i])
        if k == F and vs < last:
            to, what = vs + 1, "activation"
        elif k == B and vs > 0:
            to, what = vs - 1, "gradient"
        else:
            continue
        dest = stage_rank(schedule, p, to)
        lag = est.stages[r if k == F else dest].p2p_s
        if lag <= 0 or dest == r:  # ZB-V's turn stays on its rank
            continue
        t0 = float(tl.end_s[r][i])
        args = {"microbatch": j, "from_virtual_stage": vs, "to_virtual_stage": to, "stage": dest}
        out.append((t0, t0 + lag, f"send {what} mb {j}", args))
    return out


def lanes(intervals: list[tuple[float, float, str, dict]]) -> list[list[tuple[float, float, str, dict]]]:
    """Greedy interval colouring in start order: each interval goes to the first row free at its start."""
    rows: list[list[tuple[float, float, str, dict]]] = []
    for item in sorted(intervals, key=lambda x: (x[0], x[1], x[2])):
        for row in rows:
            if _us(row[-1][1]) <= _us(item[0]):
                row.append(item)
                break
        else:
            rows.append([item])
    return rows


def chrome_trace(est: Estimate, title: str, point_to_point: bool = True) -> dict:
    """The trace of one iteration of ``est`` (see the module docstring). ``point_to_point``: draw
    the sends of a chain pipeline (virtual stage ``vs`` feeds ``vs + 1``); graph pipelines pass
    False (their edges are not the chain's)."""
    tl = est.timeline
    p = tl.num_stages
    events: list[dict] = []
    meta: list[dict] = []
    ends = [float(tl.end_s[r][-1]) if len(tl.end_s[r]) else 0.0 for r in range(p)]
    sync = max(e + s.reduce_exposed_s for e, s in zip(ends, est.stages))
    opt_end = sync + max(s.optimizer_s for s in est.stages)
    for r in range(p):
        meta += _stage_meta(est, r)
        events += _pass_events(est, r)
        events += _end_events(est, r, ends[r], sync, opt_end)
        if point_to_point and p > 1:
            p2p_meta, p2p_events = _p2p_rows(est, r)
            meta += p2p_meta
            events += p2p_events
    it_meta, it_events = _iteration_events(est, p, max(ends), sync, opt_end)
    meta += it_meta
    events += it_events
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], e["dur"], e["name"]))
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "title": title,
            "step_time_s": est.step_time_s,
            "pipeline_time_s": est.pipeline_time_s,
            "bubble_fraction": est.bubble_fraction,
            "num_microbatches": est.num_microbatches,
            "schedule": est.config.schedule,
            "source": "planner analytic prediction",
        },
    }


def _stage_meta(est: Estimate, r: int) -> list[dict]:
    """Stage ``r``'s process (named by :func:`stage_label`) and its compute and communication threads."""
    return [
        _meta("process_name", r, 0, stage_label(est, r)),
        _meta("process_sort_index", r, 0, r),
        _meta("thread_name", r, COMPUTE_TID, "compute"),
        _meta("thread_sort_index", r, COMPUTE_TID, COMPUTE_TID),
        _meta("thread_name", r, COMM_TID, "communication (exposed)"),
        _meta("thread_sort_index", r, COMM_TID, COMM_TID),
    ]


def _pass_events(est: Estimate, r: int) -> list[dict]:
    """Stage ``r``'s F, B and W operations from the timeline, each F and B with its share of the
    stage's FSDP / ZeRO-2 exposure on the communication thread."""
    tl, s = est.timeline, est.stages[r]
    p, v = tl.num_stages, tl.num_chunks
    passes = s.forward_s + s.backward_s + s.fsdp_exposed_s
    fsdp_share = s.fsdp_exposed_s / passes if passes else 0.0
    events = []
    for i in range(len(tl.kind[r])):
        k, c, j = int(tl.kind[r][i]), int(tl.chunk[r][i]), int(tl.mb[r][i])
        t0, t1 = float(tl.start_s[r][i]), float(tl.end_s[r][i])
        name = f"{KIND_NAMES[k]} mb {j}" + (f" chunk {c}" if v > 1 else "")
        args = {
            "op": KIND_NAMES[k],
            "kind": KIND_LABELS[k],
            "microbatch": j,
            "chunk": c,
            "virtual_stage": int(tl.vstage[r][i]) if tl.vstage else c * p + r,
            "phase": "pipeline",
        }
        events.append(_event(name, "compute", r, COMPUTE_TID, t0, t1, args))
        if fsdp_share > 0 and k != W:
            # The estimate adds FSDP / ZeRO-2 exposure to the pass; this rank's share of it is
            # drawn at the pass's start (where prefetching cannot hide the first gather).
            events.append(
                _event(
                    f"FSDP exposed mb {j}",
                    "communication",
                    r,
                    COMM_TID,
                    t0,
                    t0 + (t1 - t0) * fsdp_share,
                    {"microbatch": j, "chunk": c, "phase": "pipeline", "what": "FSDP / ZeRO-2 (exposed)"},
                )
            )
    return events


def _end_events(est: Estimate, r: int, end_s: float, sync_s: float, opt_end_s: float) -> list[dict]:
    """Stage ``r``'s events after its pipeline (which ends at ``end_s``): the exposed data-parallel
    reduction, the optimizer step from ``sync_s`` (the slowest stage's reduction end) and the exposed
    parameter gather from ``opt_end_s`` (the slowest optimizer step's end)."""
    s = est.stages[r]
    events = []
    if s.reduce_exposed_s > 0:
        events.append(
            _event(
                "data-parallel reduce (exposed)",
                "communication",
                r,
                COMM_TID,
                end_s,
                end_s + s.reduce_exposed_s,
                {"phase": "data-parallel sync", "exposed_s": s.reduce_exposed_s},
            )
        )
    events.append(
        _event(
            "optimizer step",
            "compute",
            r,
            COMPUTE_TID,
            sync_s,
            sync_s + s.optimizer_s,
            {"phase": "optimizer step", "duration_s": s.optimizer_s},
        )
    )
    if s.gather_exposed_s > 0:
        events.append(
            _event(
                "parameter gather (exposed)",
                "communication",
                r,
                COMM_TID,
                opt_end_s,
                opt_end_s + s.gather_exposed_s,
                {"phase": "parameter gather", "exposed_s": s.gather_exposed_s},
            )
        )
    return events


def _p2p_rows(est: Estimate, r: int) -> tuple[list[dict], list[dict]]:
    """Stage ``r``'s point-to-point sends (:func:`_sends`), one thread per row of :func:`lanes`:
    the threads' metadata and the send events."""
    meta: list[dict] = []
    events: list[dict] = []
    for lane, row in enumerate(lanes(_sends(est, r))):
        tid = P2P_TID + lane
        meta += [
            _meta("thread_name", r, tid, "p2p send" + (f" {lane + 1}" if lane else "")),
            _meta("thread_sort_index", r, tid, tid),
        ]
        events += [_event(n, "p2p", r, tid, t0, t1, a) for t0, t1, n, a in row]
    return meta, events


def _iteration_events(
    est: Estimate, pid: int, pipeline_end_s: float, sync_s: float, opt_end_s: float
) -> tuple[list[dict], list[dict]]:
    """The ``iteration`` process (``pid``, after the stages): its metadata and one event per
    non-empty phase, pipeline, data-parallel sync, optimizer step, parameter gather, ending at the
    step time."""
    meta = [
        _meta("process_name", pid, 0, "iteration"),
        _meta("process_sort_index", pid, 0, pid),
        _meta("thread_name", pid, 0, "phases"),
    ]
    phases = (
        ("pipeline", 0.0, pipeline_end_s),
        ("data-parallel sync", pipeline_end_s, sync_s),
        ("optimizer step", sync_s, opt_end_s),
        ("parameter gather", opt_end_s, est.step_time_s),
    )
    events = [
        _event(name, "phase", pid, 0, t0, t1, {"phase": name, "duration_s": t1 - t0})
        for name, t0, t1 in phases
        if t1 - t0 > 0
    ]
    return meta, events


def trace_json(est: Estimate, title: str, point_to_point: bool = True) -> str:
    """:func:`chrome_trace` as compact, deterministic JSON text (finite numbers only)."""
    return json_text(chrome_trace(est, title, point_to_point), separators=(",", ":")) + "\n"
