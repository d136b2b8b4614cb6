"""``planner export torchtitan``: a job-config TOML, its command-line overrides and a launch script
for torchtitan (:mod:`planner.launch.torchtitan.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import finish_export
from planner.cli.options import PANEL_OUTPUT, JsonOpt, QuietOpt
from planner.cli.root import export_app
from planner.inputs.errors import SpecError, UsageError


@export_app.command("torchtitan")
def export_torchtitan(
    plan: Annotated[Path, typer.Argument(help="Plan file from planner search --framework torchtitan --out.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Directory for torchtitan_job.toml and the launch script.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = Path("torchtitan_launch"),
    launcher: Annotated[
        str, typer.Option("--launcher", help="torchrun or slurm.", rich_help_panel=PANEL_OUTPUT)
    ] = "torchrun",
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files in --out.", rich_help_panel=PANEL_OUTPUT)
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write a torchtitan job config (TOML), its CLI overrides and a launch script for a plan
    (torchtitan 0.2.2). Exit 1 when torchtitan cannot run the plan, naming the reason."""
    from planner.launch.torchtitan import export as tx
    from planner.plans.graph_plan import is_graph_plan
    from planner.plans.plan_file import read_plan

    if launcher not in ("torchrun", "slurm"):
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: torchrun, slurm")
    if is_graph_plan(plan):
        raise SpecError(f"{plan}: a graph plan; torchtitan runs sequential pipelines only")
    inputs = read_plan(str(plan))
    payload = {
        "overrides": [[f, v] for f, v in tx.cli_overrides(inputs)],
        "world_size": inputs.cluster.num_gpus,
        "framework": {"name": "torchtitan", "version": tx.VERSION},
    }
    finish_export(out, tx.export_files(inputs, launcher), force, launcher, as_json, payload, quiet)
