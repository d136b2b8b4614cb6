"""``planner calibrate``: fit the cost model to the user's cluster from the user's runs (thin: read,
fit, write the profile, render). See docs/calibrate.md."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__
from planner.cli.common import emit_json, emit_note, print_rich
from planner.cli.options import ClusterOpt, JsonOpt, NodesOpt, QuietOpt
from planner.cli.root import app
from planner.outputs import views


@app.command()
def calibrate(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Runs YAML files, nccl-tests outputs, and training logs joined to their launch file "
            "(train.log,launch.sh for Megatron-LM; train.log,job.toml for torchtitan)."
        ),
    ],
    cluster: ClusterOpt,
    nodes: NodesOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the profile YAML here.")] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Fit GEMM/attention/memory efficiency, NVLink and network bandwidth and latency and the
    overlap factor to measured runs; report each value with its uncertainty and the error before,
    after and left out. Exit 1 on a bad input (file and line named)."""
    from planner.calibration.user.fit import fit, report_dict, summary
    from planner.calibration.user.sources import base_cluster, read_sources
    from planner.cli.render_calibrate import calibrate_tables
    from planner.profiles.calibrated import profile_from_report, write_profile

    sources = read_sources(runs, cluster, nodes)
    if sys.stderr.isatty() and not as_json and not quiet:
        typer.echo(f"fitting {len(sources.runs)} runs and {len(sources.nccl)} nccl-tests rows ...", err=True)
    report = fit(list(sources.runs), list(sources.nccl), base_cluster(cluster), sources.skipped)
    data = report_dict(report)
    if out is not None:
        nccl_files = [p.origin.rsplit(":", 1)[0] for p in sources.nccl]
        write_profile(out, profile_from_report(report, sources.runs, nccl_files, summary(report)))
        emit_note(f"wrote {out}", quiet)
    if as_json:
        emit_json({"schema_version": views.SCHEMA_VERSION, "planner_version": __version__, **data})
    else:
        print_rich(*calibrate_tables(data))
        if report.skipped:
            emit_note(f"note: {len(report.skipped)} runs not used (--json lists each with why)", quiet)
