"""The typer app, its command groups and the root options (``--version``, ``--debug``): what every
command module registers itself on. :mod:`planner.cli.app` imports the command modules (so
registering them) and maps errors to exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from planner import __version__


def _flags_take_no_value() -> None:
    """Help shows no type for on/off flags (typer >= 0.20 prints ``<bool>`` beside ``--json``)."""
    from typer import core

    option = getattr(core, "TyperOption", None)
    show = getattr(option, "display_type_rich", None)
    if show is None or getattr(show, "_planner", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else show(self, ctx)

    display_type_rich._planner = True
    option.display_type_rich = display_type_rich


_flags_take_no_value()

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find the fastest way to train a large transformer on a GPU cluster, and prove it fits.",
)
models_app = typer.Typer(no_args_is_help=True, help="Built-in model presets.")
hardware_app = typer.Typer(no_args_is_help=True, help="Built-in GPU types and node templates.")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")
export_app = typer.Typer(no_args_is_help=True, help="Export a plan to a training framework.")
app.add_typer(export_app, name="export")

state = {"debug": False}
"""The root options the error handling of :func:`planner.cli.app.main` reads (``--debug``)."""


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"planner {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """planner: parallelism planning for large-model training."""
    state["debug"] = debug
