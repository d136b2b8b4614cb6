"""``planner sweep``: the best plan at each cluster size and GPU type, with throughput, time and
cost to train, and scaling efficiency against the smallest point.

A point is a cluster: a node template with a node count (``--cluster dgx-h100 --nodes 8,16``) or a
cluster file (its node counts are its own); a study file (:mod:`planner.outputs.sweep_study`)
crosses clusters with models, global batches and sequence lengths. Points are independent
searches, so they run in parallel, on local cores or on a Ray cluster
(:mod:`planner.outputs.sweep_engines`), a failed or lost point retried once; results are stored in
the order the points were given, whatever finishes first, so the output is deterministic and the
same on every engine. A journal (:mod:`planner.outputs.sweep_journal`) lets an interrupted study
resume with only its missing points.

Scaling efficiency of a point is its tokens/s per GPU over that of the smallest point of the same
series (the same model and job on the same cluster: fewest GPUs; the first given among equals): 1.0
is perfect weak scaling of the fixed global batch, as in Narayanan et al. 2021 (SC'21, Fig. 15,
"weak scaling" reported as per-GPU throughput).
"""

from __future__ import annotations

from collections.abc import Callable
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
    interval: bool = True
    """Whether the row carries its best plan's ``prediction_interval``
    (:func:`planner.outputs.views.prediction_interval_dict`; in ``--json`` for every sweep, and as
    CSV columns in a study's CSV, :func:`csv_text`)."""


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
    if task.interval:
        from planner.outputs.views import prediction_interval_dict

        row["prediction_interval"] = prediction_interval_dict(problem, est, task.restrictions.framework)
    return row


def run_sweep(
    tasks: list[SweepTask],
    jobs: int = 1,
    progress: Callable[[int, int, float | None], None] | None = None,
    *,
    engine: str = "local",
    ray_address: str | None = None,
    journal=None,
    run: Callable[[SweepTask], dict] = run_point,
) -> list[dict]:
    """Rows in the order of ``tasks``, with scaling efficiency: each point searched by ``run`` on
    ``engine`` (:func:`planner.outputs.sweep_engines.make_engine`: ``local``, ``jobs`` processes;
    ``ray``, at most ``jobs`` points in flight, 0 for no cap), a failed or lost point retried once
    and then given as :func:`failed_row`. With a :class:`planner.outputs.sweep_journal.Journal`,
    the points it holds are taken from it and each point computed is recorded as it finishes.
    ``progress(done, total, best_step_time_s)`` is called as points finish (points done of all,
    those taken from the journal first)."""
    from planner.outputs.sweep_engines import Failure, make_engine, schedule, window
    from planner.outputs.sweep_journal import task_key

    keys = [task_key(t) for t in tasks] if journal is not None else []
    rows: list[dict | None] = [None] * len(tasks)
    if journal is not None:
        rows = [journal.done.get(k) for k in keys]
    pending = {i: t for i, t in enumerate(tasks) if rows[i] is None}
    best: list[float] = []
    done = 0

    def report(row: dict) -> None:
        nonlocal done
        done += 1
        if row.get("step_time_s") is not None:
            best.append(row["step_time_s"])
        if progress:
            progress(done, len(tasks), min(best) if best else None)

    def finished(index: int, outcome) -> None:
        if isinstance(outcome, Failure):
            outcome = failed_row(tasks[index], outcome.error)
        elif journal is not None:
            journal.record(keys[index], point_inputs(tasks[index]), outcome)
        rows[index] = outcome
        report(outcome)

    for row in rows:
        if row is not None:
            report(row)
    if pending:
        runner = make_engine(engine, run, jobs, len(pending), ray_address)
        schedule(runner, pending, window(runner, jobs, len(pending)), finished)
    return with_efficiency(rows, [series_key(t) for t in tasks])


def point_inputs(task: SweepTask) -> dict:
    """What a point is, in a journal line (for a reader; the key decides what is reused)."""
    return {
        "model": task.model,
        "cluster": task.point.cluster,
        "nodes": task.point.nodes,
        "global_batch_size": task.global_batch_size,
        "seq_length": task.seq_length,
    }


def failed_row(task: SweepTask, error: str) -> dict:
    """The row of a point that failed (or whose worker was lost) twice: its cluster, and its error
    as the reason (``error`` holds it alone)."""
    cluster = load_cluster(task.point.cluster, task.point.nodes)
    return {
        "cluster": task.point.cluster,
        "nodes": task.point.nodes
        if task.point.nodes is not None
        else sum(g.num_nodes for g in cluster.groups),
        "num_gpus": cluster.num_gpus,
        "gpus": "+".join(sorted({g.gpu.name for g in cluster.groups})),
        "feasible": False,
        "reason": f"failed twice: {error}",
        "error": error,
    }


def series_key(task: SweepTask) -> tuple:
    """The series a point belongs to: the same question (model, job) on one cluster at its node
    counts; scaling efficiency is measured within a series."""
    return (task.model, task.global_batch_size, task.seq_length, task.precision, task.point.cluster)


def with_inputs(tasks: list[SweepTask], rows: list[dict]) -> list[dict]:
    """A study's rows, each with its model, global batch and sequence length (a sweep of flags has
    one of each, given once at the top of its JSON)."""
    return [
        {"model": t.model, "global_batch_size": t.global_batch_size, "seq_length": t.seq_length, **r}
        for t, r in zip(tasks, rows, strict=True)
    ]


def with_efficiency(rows: list[dict], series: list | None = None) -> list[dict]:
    """Add ``scaling_efficiency``: tokens/s per GPU over that of the feasible point of the same
    series (``series[i]`` for row i; default: its cluster) with the fewest GPUs (the first given
    among equals)."""
    keys = series if series is not None else [r["cluster"] for r in rows]
    base: dict = {}
    for k, r in zip(keys, rows, strict=True):
        if r["feasible"] and (k not in base or r["num_gpus"] < base[k]["num_gpus"]):
            base[k] = r
    return [
        {**r, "scaling_efficiency": r["tokens_per_s_per_gpu"] / base[k]["tokens_per_s_per_gpu"]}
        if r["feasible"]
        else r
        for k, r in zip(keys, rows, strict=True)
    ]


def best_point(rows: list[dict], objective: str) -> int | None:
    """Index of the recommended point: fastest to train (``time``) or cheapest (``cost``)."""
    feasible = [(i, r) for i, r in enumerate(rows) if r["feasible"]]
    if not feasible:
        return None
    if objective == "cost":
        return min(feasible, key=lambda x: (x[1]["cost_usd"], x[0]))[0]
    return min(feasible, key=lambda x: (x[1]["step_time_s"], x[0]))[0]


def best_points(rows: list[dict], objective: str) -> list[int]:
    """A study's recommended points, one per question (model, global batch, sequence length: the
    clusters and node counts that answer it compete), in the order of the rows."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["model"], r["global_batch_size"], r["seq_length"]), []).append(i)
    found = []
    for indices in groups.values():
        best = best_point([rows[i] for i in indices], objective)
        if best is not None:
            found.append(indices[best])
    return sorted(found)


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


STUDY_COLUMNS = ("model", "global_batch_size", "seq_length", "tokens")
"""A study's CSV starts with each point's question (:func:`with_inputs`) and token budget."""

INTERVAL_COLUMNS = (
    "tokens_per_s_low",
    "tokens_per_s_high",
    "days_to_train_low",
    "days_to_train_high",
    "interval_level",
)
"""The bounds of a row's ``prediction_interval`` (:func:`interval_cells`), after the point's
figures, in a study's CSV (whose rows carry one, :attr:`SweepTask.interval`)."""


def sweep_csv(rows: list[dict], study: bool = False) -> str:
    """The rows as CSV (columns :data:`CSV_COLUMNS`; empty where a value does not apply). A
    study's CSV (``study``) leads with :data:`STUDY_COLUMNS` and, when any row carries a
    ``prediction_interval``, ends with :data:`INTERVAL_COLUMNS`."""
    import csv
    import io

    columns = (*STUDY_COLUMNS, *CSV_COLUMNS) if study else CSV_COLUMNS
    intervals = study and any("prediction_interval" in r for r in rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow((*columns, *INTERVAL_COLUMNS) if intervals else columns)
    for r in rows:
        cells = [_cell(r.get(k, "")) for k in columns]
        if intervals:
            bounds = interval_cells(r)
            cells += [_cell(bounds.get(k, "")) for k in INTERVAL_COLUMNS]
        w.writerow(cells)
    return buf.getvalue()


def interval_cells(row: dict) -> dict:
    """A row's :data:`INTERVAL_COLUMNS` from its ``prediction_interval`` (an estimate's: ``level``
    and ``tokens_per_s_per_gpu: [low, high]``, :func:`planner.outputs.views.prediction_interval_dict`),
    scaled to the whole cluster's tokens/s and, with a token budget, to days (more tokens/s, fewer
    days), rounded as every prediction is; {} without one."""
    from planner.inputs.validation import rounded

    interval = row.get("prediction_interval")
    if not interval or not row.get("feasible"):
        return {}
    low, high = interval["tokens_per_s_per_gpu"]
    out = {
        "tokens_per_s_low": low * row["num_gpus"],
        "tokens_per_s_high": high * row["num_gpus"],
        "interval_level": interval["level"],
    }
    if "days_to_train" in row and low > 0:
        per_gpu = row["tokens_per_s_per_gpu"]
        out["days_to_train_low"] = row["days_to_train"] * per_gpu / high
        out["days_to_train_high"] = row["days_to_train"] * per_gpu / low
    return rounded(out)


def _cell(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return " ".join(map(str, v))
    return repr(v) if isinstance(v, float) else str(v)
