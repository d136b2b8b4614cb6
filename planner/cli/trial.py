"""``planner trial``: the search's top plans as short benchmark jobs, and ``planner trial collect``
to re-rank them by what they measured (:mod:`planner.outputs.trial`; docs/trial.md)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner import __version__, api
from planner.cli.common import emit_json, emit_note, print_rich
from planner.cli.options import (
    FrameworkOpt,
    JsonOpt,
    NodesOpt,
    PrecisionOpt,
    ProfileOpt,
    QuietOpt,
    SoftwareOpt,
)
from planner.cli.root import app
from planner.inputs.errors import UsageError
from planner.outputs import trial as tr
from planner.outputs import views

trial_app = typer.Typer(
    no_args_is_help=True,
    help="Run the top plans for a few real steps, then re-rank them by what the steps measured.",
)
app.add_typer(trial_app, name="trial")

PANEL_TRIAL = "Trial"


@trial_app.callback(invoke_without_command=True)
def trial(
    ctx: typer.Context,
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="Preset name, model YAML or HF config.json.")
    ] = None,
    cluster: Annotated[
        Optional[str], typer.Option("--cluster", "-c", help="Node template or cluster file.")
    ] = None,
    global_batch_size: Annotated[
        Optional[int], typer.Option("--global-batch-size", "-b", help="Sequences per step.")
    ] = None,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Tokens per sequence.")] = None,
    nodes: NodesOpt = None,
    precision: PrecisionOpt = "bf16",
    framework: FrameworkOpt = "megatron",
    software: SoftwareOpt = None,
    profile: ProfileOpt = None,
    top: Annotated[
        int,
        typer.Option(
            "--top", "-k", help="Plans to run: the search's top distinct plans.", rich_help_panel=PANEL_TRIAL
        ),
    ] = 3,
    steps: Annotated[
        int,
        typer.Option(
            "--steps", help="Benchmark steps per plan (the first is dropped).", rich_help_panel=PANEL_TRIAL
        ),
    ] = tr.STEPS,
    launcher: Annotated[
        str,
        typer.Option(
            "--launcher",
            help="torchrun (one plan after another) or slurm (an array job).",
            rich_help_panel=PANEL_TRIAL,
        ),
    ] = "torchrun",
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="The trial directory to write.", rich_help_panel=PANEL_TRIAL),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace files of an earlier trial there.")] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Search, then write the top --top distinct plans (those statistically tied with the best
    first) as short benchmark jobs of the framework: one directory per plan (its plan file and its
    launch with a benchmark schedule), one script that runs them all, and a manifest. Then run the
    script and call ``planner trial collect DIR``."""
    if ctx.invoked_subcommand is not None:
        return
    given = {
        "--model": model,
        "--cluster": cluster,
        "--global-batch-size": global_batch_size,
        "--seq-len": seq_len,
    }
    missing = [flag for flag, value in given.items() if value is None]
    if missing or out is None:
        raise UsageError(f"planner trial needs {', '.join(missing + (['--out'] if out is None else []))}")
    if framework not in tr.FRAMEWORKS:
        raise UsageError(f"--framework {framework!r}: a trial runs on {' or '.join(tr.FRAMEWORKS)}")
    from planner.cli.search import problem_from_options, restrictions_from_options
    from planner.cli.search import search as search_command

    opts = {
        name: p.default
        for name, p in inspect.signature(search_command).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    opts.update(
        model=model,
        cluster=cluster,
        global_batch_size=global_batch_size,
        seq_len=seq_len,
        nodes=nodes,
        precision=precision,
        framework=framework,
        software=software,
        profile=profile,
        top=top,
        quiet=quiet or as_json,
    )
    restrictions = restrictions_from_options(opts)
    problem, _ = problem_from_options(opts, restrictions, None)
    result = api.search(problem, restrictions, top)
    ties = getattr(result, "ties", None)
    plans = [
        tr.TrialPlan(
            api.plan_inputs(problem, r, restrictions),
            r.estimate,
            views.predictions_dict(r.estimate),
            tied=ties is not None and i < ties.count and ties.count > 1,
        )
        for i, r in enumerate(result.plans)
    ]
    files = api.write_export(out, tr.trial_files(plans, framework, launcher, steps), force)
    data = {
        "schema_version": views.SCHEMA_VERSION,
        "planner_version": __version__,
        "directory": str(out),
        "plans": [
            {"name": f"plan-{i}", "layout": tr.plan_label(p.estimate.config), "tied_with_best": p.tied}
            for i, p in enumerate(plans, 1)
        ],
        "files": sorted(str(f) for f in files),
    }
    if as_json:
        emit_json(data)
        return
    runner = "run_trials.sh" if launcher == "torchrun" else "trial_array.sbatch"
    for row in data["plans"]:
        emit_note(
            f"{row['name']}: {row['layout']}{'  (tied with the best)' if row['tied_with_best'] else ''}",
            quiet,
        )
    emit_note(
        f"wrote {len(files)} files to {out}; run {out / runner}, then: planner trial collect {out}", quiet
    )


@trial_app.command()
def collect(
    directory: Annotated[Path, typer.Argument(help="A directory planner trial wrote, with the runs' logs.")],
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Read the trial's logs, fit the cluster's profile to them (as planner calibrate does),
    re-estimate every plan with it and name the fastest measured plan; writes DIR/profile.yaml."""
    from planner.cli.render import trial_table
    from planner.profiles.calibrated import write_profile

    result = tr.collect(directory)
    write_profile(directory / "profile.yaml", result.profile)
    data = {"schema_version": views.SCHEMA_VERSION, "planner_version": __version__, **tr.result_dict(result)}
    data["profile"] = str(directory / "profile.yaml")
    if as_json:
        emit_json(data)
        return
    print_rich(trial_table(data))
    best = next(p for p in data["plans"] if p["name"] == data["winner"])
    emit_note(
        f"winner: {best['name']} ({best['layout']}): measured {best['measured_step_time_s']:.3f} s/step, "
        f"predicted {best['predicted_step_time_s']:.3f} s before the trial, {best['fitted_step_time_s']:.3f} s "
        f"with the fitted profile ({data['profile']}: use it with --profile)",
        quiet,
    )
