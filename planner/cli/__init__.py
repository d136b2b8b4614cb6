"""The ``planner`` command (typer) and all rich rendering; see :mod:`planner.cli.app`."""

from planner.cli.app import app, entry, main

__all__ = ["app", "entry", "main"]
