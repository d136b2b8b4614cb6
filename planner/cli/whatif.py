"""``planner whatif`` and ``planner goodput``: what a failure costs a plan, and goodput over a run.

Thin: parse, read the plan, call :mod:`planner.resilience`, render. Registered by one import line
at the bottom of :mod:`planner.cli.app`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import emit_json, print_rich
from planner.cli.options import JsonOpt, SoftwareOpt
from planner.cli.root import app
from planner.inputs.errors import UsageError
from planner.inputs.validation import check_flag

PlanArg = Annotated[Path, typer.Argument(help="A plan file (from planner search --out).")]


def load_plan_inputs(path: Path, software: str | None = None):
    """The plan's inputs with its configuration resolved, and its healthy estimate; under the
    software profile the plan records (``software``, from ``--software``, replaces it)."""
    from planner import api
    from planner.plans.plan_file import read_plan
    from planner.profiles.software import check_software

    inputs = read_plan(path, check_software(software) if software is not None else None)
    healthy = api.estimate_config(api.Problem(inputs.model, inputs.cluster, inputs.job), inputs.config)
    return replace(inputs, config=healthy.config), healthy


@app.command()
def whatif(
    plan: PlanArg,
    fail_gpus: Annotated[int, typer.Option("--fail-gpus", help="Number of single GPUs that fail.")] = 0,
    fail_nodes: Annotated[int, typer.Option("--fail-nodes", help="Number of whole nodes that fail.")] = 0,
    headroom_gib: Annotated[
        float | None,
        typer.Option(
            "--headroom-gib", help="Memory headroom of the re-planning search (default: the plan's, else 2)."
        ),
    ] = None,
    software: SoftwareOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What a GPU or node failure costs a plan: drop the hit replicas (global batch kept or reduced),
    re-plan on the survivors, nonuniform tensor parallelism (hit replicas at a lower tp), hot spares.

    Exit codes: 0 ok, 1 bad plan file, 2 bad flags.
    """
    from planner.resilience.failures import FailureSpec
    from planner.resilience.strategies import DEFAULT_HEADROOM_BYTES
    from planner.resilience.strategies import whatif as run_whatif
    from planner.resilience.views import whatif_dict

    check_flag(fail_gpus, "--fail-gpus", "fail_gpus", integer=True, positive=False)
    check_flag(fail_nodes, "--fail-nodes", "fail_nodes", integer=True, positive=False)
    if (fail_gpus > 0) == (fail_nodes > 0):
        raise UsageError("give exactly one of --fail-gpus K or --fail-nodes K, with K >= 1")
    check_flag(headroom_gib, "--headroom-gib", "headroom_gib", positive=False)
    inputs, healthy = load_plan_inputs(plan, software)
    headroom = (
        headroom_gib * 2**30
        if headroom_gib is not None
        else inputs.memory_headroom_bytes or DEFAULT_HEADROOM_BYTES
    )
    result = run_whatif(inputs, FailureSpec(gpus=fail_gpus, nodes=fail_nodes), healthy, headroom)
    data = whatif_dict(inputs, result)
    if as_json:
        emit_json(data)
    else:
        from planner.cli import render_whatif

        print_rich(*render_whatif.whatif_tables(data))


@app.command()
def goodput(
    plan: PlanArg,
    run_days: Annotated[
        float, typer.Option("--run-days", help="Length of the run (default: 54, Llama 3's).")
    ] = 54.0,
    gpu_failure_rate: Annotated[
        float | None,
        typer.Option(
            "--gpu-failure-rate",
            help="Failures per GPU-hour (default 1.97e-5: 419 in 54 days on 16,384 GPUs, Llama 3 paper).",
        ),
    ] = None,
    storage_write_gbps: Annotated[
        float | None,
        typer.Option("--storage-write-gbps", help="Checkpoint write bandwidth, GB/s (default 2000)."),
    ] = None,
    storage_read_gbps: Annotated[
        float | None,
        typer.Option("--storage-read-gbps", help="Checkpoint read bandwidth, GB/s (default 2000)."),
    ] = None,
    restart_s: Annotated[
        float | None, typer.Option("--restart-s", help="Relaunch time after a failure, s (default 600).")
    ] = None,
    repair_h: Annotated[
        float | None, typer.Option("--repair-hours", help="Time until a failed node is back, h (default 24).")
    ] = None,
    checkpoint_interval_s: Annotated[
        float | None,
        typer.Option("--checkpoint-interval-s", help="Fixed interval (default: Daly's optimum)."),
    ] = None,
    spares: Annotated[
        int | None, typer.Option("--spares", help="Evaluate exactly this many spare nodes.")
    ] = None,
    software: SoftwareOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Goodput of a plan over a run: failure rate, checkpoint save/restore, Young/Daly interval,
    useful fraction, and the best number of hot-spare nodes.

    Exit codes: 0 ok, 1 bad plan file, 2 bad flags.
    """
    from planner.resilience.spares import plan_goodput
    from planner.resilience.views import goodput_dict

    # One rule for every quantity (planner.inputs.validation): finite, positive, within what a
    # real run could have; --restart-s and --spares may be 0.
    for value, flag, key in (
        (run_days, "--run-days", "run_days"),
        (gpu_failure_rate, "--gpu-failure-rate", "gpu_failure_rate_per_h"),
        (storage_write_gbps, "--storage-write-gbps", "storage_gb_per_s"),
        (storage_read_gbps, "--storage-read-gbps", "storage_gb_per_s"),
        (repair_h, "--repair-hours", "repair_h"),
        (checkpoint_interval_s, "--checkpoint-interval-s", "checkpoint_interval_s"),
    ):
        check_flag(value, flag, key)
    check_flag(restart_s, "--restart-s", "restart_s", positive=False)
    check_flag(spares, "--spares", "spares", integer=True, positive=False)
    fm = failure_model(
        run_days,
        gpu_failure_rate,
        storage_write_gbps,
        storage_read_gbps,
        restart_s,
        repair_h,
        checkpoint_interval_s,
    )
    inputs, _ = load_plan_inputs(plan, software)
    data = goodput_dict(inputs, fm, plan_goodput(inputs, fm, spares))
    if as_json:
        emit_json(data)
    else:
        from planner.cli import render_whatif

        print_rich(*render_whatif.goodput_tables(data))


def failure_model(
    run_days,
    gpu_failure_rate,
    storage_write_gbps,
    storage_read_gbps,
    restart_s,
    repair_h,
    checkpoint_interval_s,
):
    """A :class:`~planner.resilience.goodput.FailureModel` from flags (None = the default)."""
    from planner.resilience.goodput import FailureModel

    given = {
        "run_days": run_days,
        "gpu_failure_rate_per_h": gpu_failure_rate,
        "checkpoint_write_bytes_per_s": storage_write_gbps * 1e9 if storage_write_gbps is not None else None,
        "checkpoint_read_bytes_per_s": storage_read_gbps * 1e9 if storage_read_gbps is not None else None,
        "restart_s": restart_s,
        "repair_h": repair_h,
        "checkpoint_interval_s": checkpoint_interval_s,
    }
    return FailureModel(**{k: v for k, v in given.items() if v is not None})
