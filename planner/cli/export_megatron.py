"""``planner export megatron``: Megatron-LM arguments and a launch script for a plan
(:mod:`planner.launch.megatron.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import emit_note, finish_export
from planner.cli.options import PANEL_OUTPUT, JsonOpt, QuietOpt
from planner.cli.root import export_app
from planner.inputs.errors import UsageError


@export_app.command("megatron")
def export_megatron(
    plan: Annotated[Path, typer.Argument(help="Plan file from planner search --out.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Directory for megatron_args.txt and the launch script.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = Path("megatron_launch"),
    launcher: Annotated[
        str, typer.Option("--launcher", help="torchrun or slurm.", rich_help_panel=PANEL_OUTPUT)
    ] = "torchrun",
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files in --out.", rich_help_panel=PANEL_OUTPUT)
    ] = False,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="For a graph plan: export its best sequential plan instead.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write Megatron-LM arguments and a launch script for a plan (megatron-core 0.19.2). Exit 1
    when Megatron-LM cannot run the plan, naming the reason."""
    from planner.launch.megatron import export as mx
    from planner.launch.megatron.export_args import megatron_args
    from planner.plans.graph_plan import is_graph_plan
    from planner.plans.plan_file import read_plan

    if launcher not in mx.LAUNCHERS:
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: {', '.join(mx.LAUNCHERS)}")
    if is_graph_plan(plan):
        from planner.plans.graph_plan import sequential_for_megatron

        inputs, note = sequential_for_megatron(plan, sequential)
        emit_note(f"note: {note}", quiet)
    else:
        if sequential:
            raise UsageError("--sequential applies to graph plans only; this plan is already sequential")
        inputs = read_plan(str(plan))
    payload = {
        "args": [[f, v] for f, v in megatron_args(inputs)],
        "world_size": inputs.cluster.num_gpus,
        "framework": {"name": "megatron", "version": mx.VERSION},
    }
    finish_export(out, mx.export_files(inputs, launcher), force, launcher, as_json, payload, quiet)
