"""``planner sweep``: the best plan at each cluster size and GPU type, with throughput, time and
cost to train, and scaling efficiency against the smallest point.

A point is a cluster: a node template with a node count (``--cluster dgx-h100 --nodes 8,16``) or a
cluster file (its node counts are its own). Points are independent searches, so they run in
parallel across local cores (:class:`concurrent.futures.ProcessPoolExecutor`); results come back
in the order the points were given, whatever finishes first, so the output is deterministic.

Scaling efficiency of a point is its tokens/s per GPU over that of the smallest point of the same
cluster (fewest GPUs; the first given among equals): 1.0 is perfect weak scaling of the fixed global batch, as
in Narayanan et al. 2021 (SC'21, Fig. 15, "weak scaling" reported as per-GPU throughput).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from planner.inputs.errors import InfeasibleError, UsageError
from planner.outputs.costing import TrainingTarget, training_cost
from planner.profiles.hardware import cluster_template_names, load_cluster


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point: a node template with a node count, or a cluster file (``nodes`` None)."""

    cluster: str
    nodes: int | None


def sweep_points(clusters: list[str], nodes: list[int] | None) -> list[SweepPoint]:
    """Every (cluster, node count) point, in the order given: templates need ``nodes``, cluster
    files take none (their node counts are their own). Usage errors name the flag."""
    templates = set(cluster_template_names())
    points: list[SweepPoint] = []
    for c in clusters:
        if c in templates:
            if not nodes:
                raise UsageError(f"--cluster {c} is a node template: give --nodes, e.g. --nodes 8,16,32")
            points.extend(SweepPoint(c, n) for n in nodes)
        else:
            points.append(SweepPoint(c, None))
    if not points:
        raise UsageError("--cluster names no cluster")
    for p in points:
        load_cluster(p.cluster, p.nodes)  # spec errors here, before any search starts
    return points


@dataclass(frozen=True, slots=True)
class SweepTask:
    """Everything one worker needs (picklable)."""

    point: SweepPoint
    model: str
    global_batch_size: int
    seq_length: int
    precision: str
    restrictions: object
    target: TrainingTarget | None
    software: str = "base"
    """The software profile (:mod:`planner.profiles.software`; resolved, never None)."""
    fp8_recipe: str | None = None
    """``JobSpec.fp8_recipe`` (None: the default)."""


def run_point(task: SweepTask) -> dict:
    """Search one point; its row (a plain dict), or the reason nothing fits."""
    from planner.plans import problem as problems

    p = task.point
    problem = problems.load_problem(
        task.model,
        p.cluster,
        p.nodes,
        task.global_batch_size,
        task.seq_length,
        task.precision,
        software=task.software,
        fp8_recipe=task.fp8_recipe,
    )
    cluster = problem.cluster
    row = {
        "cluster": p.cluster,
        "nodes": p.nodes if p.nodes is not None else sum(g.num_nodes for g in cluster.groups),
        "num_gpus": cluster.num_gpus,
        "gpus": "+".join(sorted({g.gpu.name for g in cluster.groups})),
        "software_base_values": "+".join(g for g, _ in problem.software.base_values),
    }
    try:
        result = problems.run_search(problem, task.restrictions, 1)
    except InfeasibleError as exc:
        return {**row, "feasible": False, "reason": str(exc)}
    best = result.plans[0]
    c = best.estimate.config
    est = best.estimate
    row.update(
        feasible=True,
        reason="",
        tp=c.tp,
        pp=c.pp,
        dp=c.dp,
        cp=c.cp,
        ep=c.ep,
        vpp=c.vpp,
        micro_batch_size=c.micro_batch_size,
        recompute=c.recompute,
        recompute_modules=list(c.recompute_modules),
        schedule=c.schedule,
        optimizer_sharding=c.optimizer_sharding,
        step_time_s=est.step_time_s,
        tokens_per_s=est.tokens_per_s,
        tokens_per_s_per_gpu=est.tokens_per_s_per_gpu,
        mfu=est.mfu,
        peak_memory_bytes=est.peak_memory_bytes,
    )
    if task.target is not None:
        row.update(training_cost(est.tokens_per_s, best.cluster, task.target).as_dict())
    return row


def run_sweep(
    tasks: list[SweepTask], jobs: int = 1, progress: Callable[[int, int, float | None], None] | None = None
) -> list[dict]:
    """Rows in the order of ``tasks``, searched on ``jobs`` processes, with scaling efficiency.
    ``progress(done, total, best_step_time_s)`` is called as points finish (points done of all)."""
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    best: list[float] = []

    def report(done: int, row: dict) -> None:
        if row.get("step_time_s") is not None:
            best.append(row["step_time_s"])
        if progress:
            progress(done, len(tasks), min(best) if best else None)

    if jobs == 1 or len(tasks) == 1:
        rows = []
        for t in tasks:
            rows.append(run_point(t))
            report(len(rows), rows[-1])
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            futures = [pool.submit(run_point, t) for t in tasks]
            for done, f in enumerate(as_completed(futures), 1):
                report(done, f.result())
            rows = [f.result() for f in futures]
    return with_efficiency(rows)


def with_efficiency(rows: list[dict]) -> list[dict]:
    """Add ``scaling_efficiency``: tokens/s per GPU over that of the same cluster's feasible point
    with the fewest GPUs (the first given among equals)."""
    base: dict[str, dict] = {}
    for r in rows:
        if r["feasible"] and (r["cluster"] not in base or r["num_gpus"] < base[r["cluster"]]["num_gpus"]):
            base[r["cluster"]] = r
    return [
        {**r, "scaling_efficiency": r["tokens_per_s_per_gpu"] / base[r["cluster"]]["tokens_per_s_per_gpu"]}
        if r["feasible"]
        else r
        for r in rows
    ]


def best_point(rows: list[dict], objective: str) -> int | None:
    """Index of the recommended point: fastest to train (``time``) or cheapest (``cost``)."""
    feasible = [(i, r) for i, r in enumerate(rows) if r["feasible"]]
    if not feasible:
        return None
    if objective == "cost":
        return min(feasible, key=lambda x: (x[1]["cost_usd"], x[0]))[0]
    return min(feasible, key=lambda x: (x[1]["step_time_s"], x[0]))[0]


CSV_COLUMNS = (
    "cluster",
    "nodes",
    "num_gpus",
    "gpus",
    "feasible",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "recompute",
    "recompute_modules",
    "schedule",
    "optimizer_sharding",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "peak_memory_bytes",
    "scaling_efficiency",
    "days_to_train",
    "gpu_hours",
    "cost_usd",
    "energy_kwh",
    "reason",
)


def sweep_csv(rows: list[dict]) -> str:
    """The rows as CSV (columns :data:`CSV_COLUMNS`; empty where a value does not apply)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        w.writerow([_cell(r.get(k, "")) for k in CSV_COLUMNS])
    return buf.getvalue()


def _cell(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return " ".join(map(str, v))
    return repr(v) if isinstance(v, float) else str(v)
