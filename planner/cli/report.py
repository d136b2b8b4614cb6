"""``planner report PLAN --html FILE``: one self-contained HTML page for a plan (see
:mod:`planner.outputs.report`); parse, call the library, write."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import emit_json, emit_note
from planner.cli.options import JsonOpt, QuietOpt
from planner.cli.root import app
from planner.inputs.files import write_text_atomic


@app.command()
def report(
    plan: Annotated[Path, typer.Argument(help="A plan file (from planner search --out).")],
    html: Annotated[
        Path,
        typer.Option(
            "--html", help="Write the report as one self-contained HTML file (no external resources)."
        ),
    ],
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write a plan's report: timeline, memory per stage, time breakdown, configuration, alternatives."""
    from planner.outputs.report import plan_report

    text, summary = plan_report(str(plan))
    write_text_atomic(html, text)
    summary["html"] = str(html)
    if as_json:
        emit_json(summary)
    else:
        emit_note(f"wrote {html} ({summary['bytes']:,} bytes: {', '.join(summary['sections'])})", quiet)
