"""``planner export megatron-bridge``: a Megatron-Bridge ConfigContainer override YAML, the driver
that applies it to a recipe and a torchrun launch (:mod:`planner.launch.bridge.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import finish_export
from planner.cli.options import PANEL_OUTPUT, JsonOpt, QuietOpt
from planner.cli.root import export_app
from planner.inputs.errors import SpecError


@export_app.command("megatron-bridge")
def export_megatron_bridge(
    plan: Annotated[Path, typer.Argument(help="Plan file from planner search --out.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Directory for bridge_overrides.yaml, pretrain_bridge.py and the launch script.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = Path("bridge_launch"),
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files in --out.", rich_help_panel=PANEL_OUTPUT)
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write a Megatron-Bridge ConfigContainer override (YAML) and a torchrun launch for a plan
    (Megatron-Bridge v0.6.0). Exit 1 when Bridge cannot run the plan as priced, naming the reason."""
    from planner.launch.bridge import export as bx
    from planner.plans.graph_plan import is_graph_plan
    from planner.plans.plan_file import read_plan

    if is_graph_plan(plan):
        raise SpecError(
            f"{plan}: a graph plan; Megatron-Bridge's GPT recipes run sequential pipelines (planner export "
            "megatron --sequential offers the best sequential plan)"
        )
    inputs = read_plan(str(plan))
    files = bx.export_files(inputs)
    payload = {
        "recipe": bx.recipe_for(inputs),
        "overrides": bx.overrides(inputs),
        "world_size": inputs.cluster.num_gpus,
        "framework": {"name": "megatron-bridge", "version": bx.VERSION},
    }
    finish_export(out, files, force, "torchrun", as_json, payload, quiet)
