"""``planner sweep``: the best plan per node count and GPU type or cluster file, or per point of a
study file (see :mod:`planner.outputs.sweep`); parse, call the library, render."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__, api
from planner.cli.common import (
    check_fp8_recipe,
    emit_json,
    emit_note,
    int_list,
    print_rich,
    progress_display,
    say_phase,
)
from planner.cli.options import (
    PANEL_INPUTS,
    PANEL_MEMORY,
    PANEL_OUTPUT,
    PANEL_SPACE,
    Fp8RecipeOpt,
    GbsOptional,
    JsonOpt,
    ModelOptional,
    NodeOverheadOpt,
    ObjectiveOpt,
    PowerFractionOpt,
    PrecisionOpt,
    PriceOpt,
    QuietOpt,
    SeqOptional,
    SoftwareOpt,
    TokensOpt,
)
from planner.cli.root import app
from planner.inputs.errors import PlannerError, UsageError
from planner.inputs.files import write_text_atomic
from planner.inputs.validation import check_flag
from planner.outputs import views
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD

PANEL_ENGINE = "Engine & resume"
"""Where the points run and how an interrupted study goes on."""

ClustersOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        "-c",
        help="Node templates and/or cluster files, comma-separated.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
NodeCountsOpt = Annotated[
    str | None,
    typer.Option(
        "--nodes", "-n", help="Node counts for the templates, e.g. 8,16,32,64.", rich_help_panel=PANEL_INPUTS
    ),
]
HeadroomOpt = Annotated[
    float,
    typer.Option(
        "--headroom-gib",
        help="Memory each GPU must keep free beyond the modelled reserve.",
        rich_help_panel=PANEL_MEMORY,
    ),
]
SweepFrameworkOpt = Annotated[
    str,
    typer.Option("--framework", help="Target framework (as planner search).", rich_help_panel=PANEL_SPACE),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        help="Points searched in parallel (default: local cores; with Ray, no cap).",
        rich_help_panel=PANEL_OUTPUT,
    ),
]
CsvOpt = Annotated[
    Path | None, typer.Option("--csv", help="Write the points as CSV.", rich_help_panel=PANEL_OUTPUT)
]
SvgOpt = Annotated[
    Path | None,
    typer.Option("--svg", help="Write a chart of tokens/s per GPU (SVG).", rich_help_panel=PANEL_OUTPUT),
]
GridOpt = Annotated[
    Path | None,
    typer.Option(
        "--grid",
        help="A study file (models, clusters, node counts, batches, sequence lengths, tokens, prices) "
        "instead of the model, cluster and job flags; docs/costing.md.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="local: a process pool on this machine; ray: one task per point on a Ray cluster "
        "(pip install 'planner[ray]').",
        rich_help_panel=PANEL_ENGINE,
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster to use (e.g. ray://head:10001 or auto); default: start a local one.",
        rich_help_panel=PANEL_ENGINE,
    ),
]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Take the points the journal holds from it; compute only the missing ones.",
        rich_help_panel=PANEL_ENGINE,
    ),
]
JournalOpt = Annotated[
    Path | None,
    typer.Option(
        "--journal",
        help="Record each finished point here (JSON lines; default: beside --csv, FILE.journal.jsonl).",
        rich_help_panel=PANEL_ENGINE,
    ),
]

STUDY_FLAGS = {
    "model": ("--model", "models"),
    "cluster": ("--cluster", "clusters"),
    "nodes": ("--nodes", "nodes"),
    "global_batch_size": ("--global-batch-size", "global_batch_sizes"),
    "seq_len": ("--seq-len", "seq_lengths"),
    "precision": ("--precision", "precision"),
    "fp8_recipe": ("--fp8-recipe", "fp8_recipe"),
    "tokens": ("--tokens", "tokens"),
    "gpu_hour_price": ("--gpu-hour-price", "gpu_hour_price_usd"),
    "gpu_power_fraction": ("--gpu-power-fraction", "gpu_power_fraction"),
    "node_power_overhead": ("--node-power-overhead", "node_power_overhead"),
    "objective": ("--objective", "objective"),
    "headroom_gib": ("--headroom-gib", "headroom_gib"),
    "framework": ("--framework", "framework"),
    "software": ("--software", "software"),
}
"""The flags a study file states instead (parameter -> flag, the file's key): with ``--grid``
they are refused, so that a study is the file alone."""


@app.command()
def sweep(
    ctx: typer.Context,
    model: ModelOptional = None,
    cluster: ClustersOpt = None,
    global_batch_size: GbsOptional = None,
    seq_len: SeqOptional = None,
    nodes: NodeCountsOpt = None,
    grid: GridOpt = None,
    precision: PrecisionOpt = "bf16",
    fp8_recipe: Fp8RecipeOpt = None,
    tokens: TokensOpt = None,
    gpu_hour_price: PriceOpt = None,
    gpu_power_fraction: PowerFractionOpt = 1.0,
    node_power_overhead: NodeOverheadOpt = DEFAULT_NODE_POWER_OVERHEAD,
    objective: ObjectiveOpt = "time",
    headroom_gib: HeadroomOpt = api.HEADROOM_GIB_DEFAULT,
    framework: SweepFrameworkOpt = "megatron",
    software: SoftwareOpt = None,
    jobs: JobsOpt = None,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    resume: ResumeOpt = False,
    journal: JournalOpt = None,
    csv_out: CsvOpt = None,
    svg: SvgOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Best plan per cluster size and GPU type: tokens/s, days, cost, scaling efficiency."""
    opts = {k: v for k, v in locals().items() if k != "ctx"}
    journal_path = _check_engine(opts)
    if grid is not None:
        _only_the_study(ctx, grid)
    else:
        _required(opts)
        restrictions = api.restrictions(framework, headroom_gib)
        check_fp8_recipe(fp8_recipe, precision)
    study = None
    with progress_display(quiet, as_json, "sweeping", "points") as progress:
        if grid is not None:
            from planner.outputs.sweep_study import load_study, study_tasks

            say_phase(progress, f"loading {grid}")
            study = load_study(grid)
            tasks = study_tasks(study)
        else:
            say_phase(progress, f"loading {cluster}")
            tasks = _tasks(opts, restrictions)
        rows = views.rounded(_run(opts, tasks, journal_path, progress))
    _outputs(opts, tasks, rows, study)
    failed = sum("error" in r for r in rows)
    if failed:
        again = " (--resume computes only them)" if journal_path is not None else ""
        raise PlannerError(
            f"{failed} of {len(rows)} point{'s' * (len(rows) > 1)} failed twice; their errors are in "
            f"the results{again}"
        )


def _run(opts: dict, tasks: list, journal_path: Path | None, progress) -> list[dict]:
    """The points' rows (:func:`planner.outputs.sweep.run_sweep`) on the chosen engine, those in
    the journal taken from it with ``--resume``, each new one recorded as it finishes."""
    from planner.outputs.sweep import run_sweep

    engine, jobs = opts["engine"], opts["jobs"]
    processes = jobs or os.cpu_count() or 1
    record = _open_journal(journal_path, opts["resume"], opts["quiet"])
    try:
        left = _left(tasks, record, journal_path, opts["quiet"])
        if left:
            say_phase(progress, _searching(left, engine, min(processes, left)))
        return run_sweep(
            tasks,
            (jobs or 0) if engine == "ray" else processes,
            progress,
            engine=engine,
            ray_address=opts["ray_address"],
            journal=record,
        )
    finally:
        if record is not None:
            record.close()


def _searching(points: int, engine: str, processes: int) -> str:
    """The sweep's search phase, in words."""
    where = "Ray" if engine == "ray" else f"{processes} process{'es' * (processes > 1)}"
    return f"searching {points} point{'s' * (points > 1)} on {where}"


def _check_engine(opts: dict) -> Path | None:
    """The engine flags checked before anything is loaded; the journal's path (``--journal``, else
    beside ``--csv``; None: no journal)."""
    from planner.outputs.sweep_engines import ENGINES
    from planner.outputs.sweep_journal import default_journal

    if opts["engine"] not in ENGINES:
        raise UsageError(f"--engine {opts['engine']!r} is not allowed; allowed values: {', '.join(ENGINES)}")
    if opts["ray_address"] is not None and opts["engine"] != "ray":
        raise UsageError("--ray-address needs --engine ray")
    check_flag(opts["jobs"], "--jobs", "jobs", integer=True)  # 1 to 1,024 (planner.inputs.validation)
    path = opts["journal"] if opts["journal"] is not None else default_journal(opts["csv_out"])
    if opts["resume"] and path is None:
        raise UsageError("--resume needs a journal: give --journal FILE, or the --csv FILE it is kept beside")
    return path


def _only_the_study(ctx: typer.Context, grid: Path) -> None:
    """With ``--grid``, the study file states the model, clusters and job: their flags are refused."""
    given = [
        (flag, key)
        for name, (flag, key) in STUDY_FLAGS.items()
        if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"
    ]
    if given:
        flags = ", ".join(f for f, _ in given)
        keys = ", ".join(k for _, k in given)
        raise UsageError(f"--grid {grid}: the study file gives {keys}: leave out {flags}")


def _required(opts: dict) -> None:
    """Without a study file, the model, cluster and job flags are required."""
    missing = [
        flag
        for name, flag in (
            ("model", "--model"),
            ("cluster", "--cluster"),
            ("global_batch_size", "--global-batch-size"),
            ("seq_len", "--seq-len"),
        )
        if opts[name] is None
    ]
    if missing:
        raise UsageError(f"missing option {', '.join(missing)} (or give a study file: --grid FILE)")


def _open_journal(path: Path | None, resume: bool, quiet: bool):
    """The sweep's journal (:class:`planner.outputs.sweep_journal.Journal`), or None."""
    from planner.outputs.sweep_journal import Journal

    if path is None:
        return None
    record = Journal(path, resume)
    if record.note:
        emit_note(f"note: {record.note}", quiet)
    return record


def _left(tasks: list, record, path: Path | None, quiet: bool) -> int:
    """The points still to compute (a note says how many the journal gave)."""
    from planner.outputs.sweep_journal import task_key

    if record is None or not record.done:
        return len(tasks)
    resumed = sum(task_key(t) in record.done for t in tasks)
    emit_note(f"resuming: {resumed} of {len(tasks)} points from {path}", quiet)
    return len(tasks) - resumed


def _tasks(opts: dict, restrictions) -> list:
    """One :class:`planner.outputs.sweep.SweepTask` per point (cluster and node count), each with its
    training target and software profile; the model and job are checked once here, so that a bad
    name fails before any worker starts."""
    from planner.outputs.costing import check_objective, make_target
    from planner.outputs.sweep import SweepTask, sweep_points
    from planner.profiles.hardware import load_cluster
    from planner.profiles.software import cluster_families, resolve_software

    names = [c.strip() for c in opts["cluster"].split(",") if c.strip()]
    nodes = opts["nodes"]
    points = sweep_points(names, list(int_list(nodes, "--nodes")) if nodes is not None else None)
    tasks = []
    for p in points:
        point_cluster = load_cluster(p.cluster, p.nodes)
        target = make_target(
            opts["tokens"],
            opts["gpu_hour_price"],
            point_cluster,
            opts["gpu_power_fraction"],
            opts["node_power_overhead"],
        )
        check_objective(opts["objective"], target)
        point_software = resolve_software(
            opts["software"], restrictions.framework, cluster_families(point_cluster)
        )
        tasks.append(
            SweepTask(
                p,
                opts["model"],
                opts["global_batch_size"],
                opts["seq_len"],
                opts["precision"],
                restrictions,
                target,
                point_software,
                opts["fp8_recipe"],
            )
        )
    api.load_problem(
        opts["model"],
        points[0].cluster,
        points[0].nodes,
        opts["global_batch_size"],
        opts["seq_len"],
        opts["precision"],
        software=tasks[0].software,
        fp8_recipe=opts["fp8_recipe"],
    )
    return tasks


def _outputs(opts: dict, tasks: list, rows: list[dict], study) -> None:
    """The sweep's JSON: written as CSV and SVG when asked, then printed (JSON or a table)."""
    from planner.cli.render_sweep import sweep_svg, sweep_table
    from planner.outputs.sweep import best_point, best_points, sweep_csv, with_inputs

    software = "+".join(dict.fromkeys(t.software for t in tasks))
    if study is None:
        data = {
            "schema_version": views.SCHEMA_VERSION,
            "planner_version": __version__,
            "model": opts["model"],
            "global_batch_size": opts["global_batch_size"],
            "seq_length": opts["seq_len"],
            "objective": opts["objective"],
            "software": software,
            "best_point": best_point(rows, opts["objective"]),
            "points": rows,
        }
    else:
        rows = with_inputs(tasks, rows)
        data = {
            "schema_version": views.SCHEMA_VERSION,
            "planner_version": __version__,
            "study": study.as_dict(),
            "objective": study.objective,
            "software": software,
            "best_points": best_points(rows, study.objective),
            "points": rows,
        }
    if opts["csv_out"] is not None:
        write_text_atomic(opts["csv_out"], sweep_csv(rows, study=study is not None))
        emit_note(f"wrote {opts['csv_out']}", opts["quiet"])
    if opts["svg"] is not None:
        write_text_atomic(opts["svg"], sweep_svg(data))
        emit_note(f"wrote {opts['svg']}", opts["quiet"])
    if opts["as_json"]:
        emit_json(data)
    else:
        print_rich(sweep_table(data))
