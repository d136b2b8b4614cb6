"""``planner sweep``: the best plan per node count and GPU type or cluster file (see
:mod:`planner.outputs.sweep`); parse, call the library, render."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__, api
from planner.cli.common import _check_fp8_recipe, _emit_json, _ints, _note, _phase, _print, _progress
from planner.cli.options import (
    PANEL_INPUTS,
    PANEL_MEMORY,
    PANEL_OUTPUT,
    PANEL_SPACE,
    Fp8RecipeOpt,
    GbsOpt,
    JsonOpt,
    ModelOpt,
    NodeOverheadOpt,
    ObjectiveOpt,
    PowerFractionOpt,
    PrecisionOpt,
    PriceOpt,
    QuietOpt,
    SeqOpt,
    SoftwareOpt,
    TokensOpt,
)
from planner.cli.root import app
from planner.inputs.files import write_text_atomic
from planner.outputs import views
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD

ClustersOpt = Annotated[
    str,
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
    int,
    typer.Option(
        "--jobs",
        "-j",
        help="Points searched in parallel (default: local cores).",
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


@app.command()
def sweep(
    model: ModelOpt,
    cluster: ClustersOpt,
    global_batch_size: GbsOpt,
    seq_len: SeqOpt,
    nodes: NodeCountsOpt = None,
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
    jobs: JobsOpt = 0,
    csv_out: CsvOpt = None,
    svg: SvgOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Best plan per cluster size and GPU type: tokens/s, days, cost, scaling efficiency."""
    from planner.outputs.sweep import run_sweep

    opts = dict(locals())
    restrictions = api.restrictions(framework, headroom_gib)
    _check_fp8_recipe(fp8_recipe, precision)
    with _progress(quiet, as_json, "sweeping", "points") as progress:
        _phase(progress, f"loading {cluster}")
        tasks = _tasks(opts, restrictions)
        processes = jobs or os.cpu_count() or 1
        _phase(progress, _searching(len(tasks), min(processes, len(tasks))))
        rows = views.rounded(run_sweep(tasks, processes, progress))
    _outputs(opts, tasks, rows)


def _searching(points: int, processes: int) -> str:
    """The sweep's search phase, in words."""
    return f"searching {points} point{'s' * (points > 1)} on {processes} process{'es' * (processes > 1)}"


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
    points = sweep_points(names, list(_ints(nodes, "--nodes")) if nodes is not None else None)
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


def _outputs(opts: dict, tasks: list, rows: list[dict]) -> None:
    """The sweep's JSON: written as CSV and SVG when asked, then printed (JSON or a table)."""
    from planner.cli.render_sweep import sweep_svg, sweep_table
    from planner.outputs.sweep import best_point, sweep_csv

    data = {
        "schema_version": views.SCHEMA_VERSION,
        "planner_version": __version__,
        "model": opts["model"],
        "global_batch_size": opts["global_batch_size"],
        "seq_length": opts["seq_len"],
        "objective": opts["objective"],
        "software": "+".join(dict.fromkeys(t.software for t in tasks)),
        "best_point": best_point(rows, opts["objective"]),
        "points": rows,
    }
    if opts["csv_out"] is not None:
        write_text_atomic(opts["csv_out"], sweep_csv(rows))
        _note(f"wrote {opts['csv_out']}", opts["quiet"])
    if opts["svg"] is not None:
        write_text_atomic(opts["svg"], sweep_svg(data))
        _note(f"wrote {opts['svg']}", opts["quiet"])
    if opts["as_json"]:
        _emit_json(data)
    else:
        _print(sweep_table(data))
