"""``planner sweep``: the best plan per node count and GPU type or cluster file (see
:mod:`planner.outputs.sweep`); parse, call the library, render."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__, api
from planner.cli.common import _check_fp8_recipe, _emit_json, _ints, _note, _print, _progress
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


@app.command()
def sweep(
    model: ModelOpt,
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster",
            "-c",
            help="Node templates and/or cluster files, comma-separated.",
            rich_help_panel=PANEL_INPUTS,
        ),
    ],
    global_batch_size: GbsOpt,
    seq_len: SeqOpt,
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            "-n",
            help="Node counts for the templates, e.g. 8,16,32,64.",
            rich_help_panel=PANEL_INPUTS,
        ),
    ] = None,
    precision: PrecisionOpt = "bf16",
    fp8_recipe: Fp8RecipeOpt = None,
    tokens: TokensOpt = None,
    gpu_hour_price: PriceOpt = None,
    gpu_power_fraction: PowerFractionOpt = 1.0,
    node_power_overhead: NodeOverheadOpt = DEFAULT_NODE_POWER_OVERHEAD,
    objective: ObjectiveOpt = "time",
    headroom_gib: Annotated[
        float,
        typer.Option(
            "--headroom-gib",
            help="Memory each GPU must keep free beyond the modelled reserve.",
            rich_help_panel=PANEL_MEMORY,
        ),
    ] = 2.0,
    framework: Annotated[
        str,
        typer.Option(
            "--framework", help="Target framework (as planner search).", rich_help_panel=PANEL_SPACE
        ),
    ] = "megatron",
    software: SoftwareOpt = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="Points searched in parallel (default: local cores).",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = 0,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write the points as CSV.", rich_help_panel=PANEL_OUTPUT)
    ] = None,
    svg: Annotated[
        Path | None,
        typer.Option("--svg", help="Write a chart of tokens/s per GPU (SVG).", rich_help_panel=PANEL_OUTPUT),
    ] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Best plan per cluster size and GPU type: tokens/s, days, cost, scaling efficiency."""
    from planner.cli.render_sweep import sweep_svg, sweep_table
    from planner.frameworks import get_framework
    from planner.inputs.errors import UsageError
    from planner.outputs.costing import check_objective, make_target
    from planner.outputs.sweep import SweepTask, best_point, run_sweep, sweep_csv, sweep_points
    from planner.profiles.hardware import load_cluster
    from planner.profiles.software import cluster_families, resolve_software
    from planner.search.space import Restrictions

    if headroom_gib < 0:
        raise UsageError("--headroom-gib must not be negative")
    _check_fp8_recipe(fp8_recipe, precision)
    names = [c.strip() for c in cluster.split(",") if c.strip()]
    points = sweep_points(names, list(_ints(nodes, "--nodes")) if nodes is not None else None)
    restrictions = Restrictions(
        memory_headroom_bytes=headroom_gib * 2**30, framework=get_framework(framework).name
    )
    tasks = []
    for p in points:
        point_cluster = load_cluster(p.cluster, p.nodes)
        target = make_target(tokens, gpu_hour_price, point_cluster, gpu_power_fraction, node_power_overhead)
        check_objective(objective, target)
        point_software = resolve_software(software, restrictions.framework, cluster_families(point_cluster))
        tasks.append(
            SweepTask(
                p,
                model,
                global_batch_size,
                seq_len,
                precision,
                restrictions,
                target,
                point_software,
                fp8_recipe,
            )
        )
    # the model and job are checked once here, so that a bad name fails before any worker starts
    api.load_problem(
        model,
        points[0].cluster,
        points[0].nodes,
        global_batch_size,
        seq_len,
        precision,
        fp8_recipe=fp8_recipe,
    )
    progress = _progress(quiet, as_json, "sweeping", "points")
    rows = views.rounded(run_sweep(tasks, jobs or os.cpu_count() or 1, progress))
    data = {
        "schema_version": views.SCHEMA_VERSION,
        "planner_version": __version__,
        "model": model,
        "global_batch_size": global_batch_size,
        "seq_length": seq_len,
        "objective": objective,
        "software": "+".join(dict.fromkeys(t.software for t in tasks)),
        "best_point": best_point(rows, objective),
        "points": rows,
    }
    if csv_out is not None:
        write_text_atomic(csv_out, sweep_csv(rows))
        _note(f"wrote {csv_out}", quiet)
    if svg is not None:
        write_text_atomic(svg, sweep_svg(data))
        _note(f"wrote {svg}", quiet)
    if as_json:
        _emit_json(data)
    else:
        _print(sweep_table(data))
