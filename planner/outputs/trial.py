"""``planner trial``: a few real benchmark steps of the top plans, then the plans re-ranked by what
the steps measured.

Auto-tuners that launch many real trials (NeMo's auto-configurator, DeepSpeed's autotuner) spend GPU
hours on layouts the cost model can already rule out. A trial instead runs only the plans the model
cannot tell apart: the search's top ``k`` distinct plans (those statistically tied with the best
first), each as a short job of the framework (:func:`trial_files`): the plan's own export with a
benchmark schedule (every iteration logged, no evaluation:
:func:`planner.launch.megatron.export.benchmark_training_args`,
:func:`planner.launch.torchtitan.export.benchmark_extra_args`), one script that runs them all (one
after another with torchrun, or a Slurm array job), and a manifest. :func:`collect` reads the logs
as ``planner calibrate`` reads them (:mod:`planner.calibration.user.sources`: the median iteration
time after the first logged interval), fits the cluster's profile to them
(:func:`planner.calibration.user.fit.fit`), re-estimates every plan with it, and names the plan the
logs say is fastest, with its measured and predicted times.

A trial directory::

    trial.yaml            the manifest: framework, launcher, steps, the plans and their predictions
    cluster.yaml          the cluster the plans were searched for (what the fit calibrates)
    run_trials.sh         torchrun: every plan in turn (run on every node with NODE_RANK set)
    trial_array.sbatch    slurm: one array task per plan (sbatch trial_array.sbatch)
    plan-1/plan.yaml      each plan's plan file, its export and, once run, its log
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cost_models.constraints import resolve
from cost_models.estimate import Estimate, estimate
from planner import __version__
from planner.inputs.documents import Reader, read_document
from planner.inputs.errors import SpecError
from planner.inputs.files import plan_yaml
from planner.inputs.validation import short_path
from planner.plans.plan_file import PlanInputs, plan_document, read_plan
from planner.profiles.hardware import cluster_to_mapping

STEPS = 20
"""Benchmark steps per plan by default: the first logged interval (start-up, compilation, allocator
warm-up) is dropped and the median of the rest is used (docs/calibrate.md asks for ~10 or more)."""

FRAMEWORKS = ("megatron", "torchtitan")
LAUNCHERS = ("torchrun", "slurm")
MANIFEST = "trial.yaml"
CLUSTER_FILE = "cluster.yaml"
TRIAL_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """One plan to run: its plan-file inputs, the estimate it was ranked by, and whether the search
    found it statistically tied with the best."""

    inputs: PlanInputs
    estimate: Estimate
    predictions: dict
    """The plan's predictions as its plan file records them (:func:`planner.outputs.views.predictions_dict`)."""
    tied: bool = False


def plan_label(c) -> str:
    """A plan's layout in one line (the fields a user acts on)."""
    return (
        f"tp {c.tp} pp {c.pp} dp {c.dp} cp {c.cp} ep {c.ep} vpp {c.vpp} mbs {c.micro_batch_size} "
        f"{c.schedule} recompute {c.recompute} sharding {c.optimizer_sharding}"
    )


def _export(inputs: PlanInputs, framework: str, launcher: str, steps: int) -> dict[str, str]:
    if framework == "megatron":
        from planner.launch.megatron.export import benchmark_training_args, export_files

        return export_files(inputs, launcher, benchmark_training_args(steps))
    from planner.launch.torchtitan.export import benchmark_extra_args, export_files

    return export_files(inputs, launcher, benchmark_extra_args(steps))


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise SpecError(f"{what} {value!r} is not allowed; allowed values: {', '.join(allowed)}")


def trial_files(plans: list[TrialPlan], framework: str, launcher: str, steps: int = STEPS) -> dict[str, str]:
    """Every file of a trial directory, by relative path (see the module docstring)."""
    _check_choice(framework, FRAMEWORKS, "framework")
    _check_choice(launcher, LAUNCHERS, "launcher")
    if not plans:
        raise SpecError("a trial needs at least one plan")
    if not 3 <= steps <= 100_000:
        raise SpecError(f"--steps {steps}: a trial runs 3 to 100000 steps (the first logged one is dropped)")
    cluster = plans[0].inputs.cluster
    if any(p.inputs.cluster != cluster for p in plans):
        raise SpecError("the plans of a trial run on one cluster")
    files: dict[str, str] = {}
    rows = []
    for i, p in enumerate(plans, 1):
        name = f"plan-{i}"
        doc = plan_document(p.inputs, p.predictions, None)
        files[f"{name}/plan.yaml"] = plan_yaml(doc)
        for fname, text in _export(p.inputs, framework, launcher, steps).items():
            files[f"{name}/{fname}"] = text
        rows.append(
            {
                "name": name,
                "layout": plan_label(p.estimate.config),
                "tied_with_best": p.tied,
                "predicted_step_time_s": p.estimate.step_time_s,
                "predicted_tokens_per_s_per_gpu": p.estimate.tokens_per_s_per_gpu,
            }
        )
    files[CLUSTER_FILE] = plan_yaml(cluster_to_mapping(cluster))
    files[MANIFEST] = plan_yaml(
        {
            "schema_version": TRIAL_SCHEMA_VERSION,
            "kind": "trial",
            "planner_version": __version__,
            "framework": framework,
            "launcher": launcher,
            "steps": steps,
            "cluster": CLUSTER_FILE,
            "plans": rows,
        }
    )
    nodes = sum(g.num_nodes for g in cluster.groups)
    if launcher == "torchrun":
        files["run_trials.sh"] = _torchrun_runner(len(plans), nodes)
    else:
        files["trial_array.sbatch"] = _slurm_array(len(plans), nodes, cluster.groups[0].gpus_per_node)
    return files


def _torchrun_runner(k: int, nodes: int) -> str:
    return f"""#!/bin/bash
# Generated by planner {__version__}: run the {k} trial plans one after another, each a short benchmark
# of its own launch (plan-N/launch_torchrun.sh). Run this script on all {nodes} node(s) at once, with
# NODE_RANK=0..{nodes - 1} (and MASTER_ADDR) set as the launches expect; each node logs to
# plan-N/train-node<NODE_RANK>.log (the node that prints the iteration lines is the one planner
# trial collect reads). Then: planner trial collect "$(pwd)"
set -uo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
for i in $(seq 1 {k}); do
    echo "trial plan-$i" >&2
    bash "$HERE/plan-$i/launch_torchrun.sh" 2>&1 | tee "$HERE/plan-$i/train-node${{NODE_RANK:-0}}.log"
done
"""


def _slurm_array(k: int, nodes: int, gpus_per_node: int) -> str:
    return f"""#!/bin/bash
# Generated by planner {__version__}: one Slurm array task per trial plan, each a short benchmark of its
# own launch (plan-N/launch_slurm.sh, run inside this allocation). Submit from this folder:
#   sbatch trial_array.sbatch        then, when the tasks are done: planner trial collect .
#SBATCH --job-name=planner-trial
#SBATCH --array=1-{k}%1
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --exclusive
#SBATCH --output=plan-%a/train.log
set -euo pipefail
cd "${{SLURM_SUBMIT_DIR:-$(pwd)}}"
bash "plan-${{SLURM_ARRAY_TASK_ID}}/launch_slurm.sh"
"""


# ------------------------------------------------------------------------------------------------
# Collecting the results


@dataclass(frozen=True, slots=True)
class TrialRow:
    """One plan of a collected trial."""

    name: str
    layout: str
    tied_with_best: bool
    predicted_step_time_s: float
    """Before the trial: the estimate the plan was ranked by."""
    fitted_step_time_s: float | None
    """Re-estimated with the profile fitted to the trial's logs (None: the plan did not run)."""
    measured_step_time_s: float | None
    log: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class TrialResult:
    rows: tuple[TrialRow, ...]
    """Measured plans fastest first, then the plans without a log."""
    winner: str
    profile: object
    """The profile fitted to the measured plans (:class:`planner.profiles.calibrated.Profile`)."""
    fit: dict


def _manifest(directory: Path) -> tuple[str, str, list[dict]]:
    """(framework, launcher, plan rows) of a trial directory's manifest, read strictly."""
    path = directory / MANIFEST
    if not path.is_file():
        raise SpecError(
            f"{short_path(directory)}: no {MANIFEST} here: is this a directory planner trial wrote?"
        )
    r = Reader(read_document(path), short_path(path))
    if r.get("schema_version", int) != TRIAL_SCHEMA_VERSION:
        raise SpecError(
            f"{short_path(path)}: schema_version is not supported; supported: {TRIAL_SCHEMA_VERSION}"
        )
    r.get("kind", str, choices=("trial",))
    r.get("planner_version", str)
    framework = r.get("framework", str, choices=FRAMEWORKS)
    launcher = r.get("launcher", str, choices=LAUNCHERS)
    r.get("steps", int, positive=True, maximum=100_000)
    r.get("cluster", str, choices=(CLUSTER_FILE,))
    plans = r.get("plans", list)
    r.done()
    rows = []
    for i, item in enumerate(plans):
        p = Reader(item, short_path(path), f"plans[{i}]")
        row = {
            "name": p.get("name", str),
            "layout": p.get("layout", str),
            "tied_with_best": p.get("tied_with_best", bool),
            "predicted_step_time_s": p.get("predicted_step_time_s", float, positive=True),
            "predicted_tokens_per_s_per_gpu": p.get("predicted_tokens_per_s_per_gpu", float, positive=True),
        }
        p.done()
        if row["name"] != f"plan-{i + 1}":
            raise SpecError(
                f"{short_path(path)}: plans[{i}].name: expected 'plan-{i + 1}', got {row['name']!r}"
            )
        rows.append(row)
    if not rows:
        raise SpecError(f"{short_path(path)}: plans: a trial has at least one plan")
    return framework, launcher, rows


def _log_of(plan_dir: Path, framework: str) -> Path | None:
    """The plan's log: Slurm's ``train.log`` or the torchrun node log that holds the step lines."""
    marker = "elapsed time per iteration" if framework == "megatron" else "tps:"
    candidates = sorted(plan_dir.glob("train*.log"))
    for path in reversed(candidates):  # the last node prints Megatron's iteration lines
        if path.is_file() and marker in path.read_text(errors="replace"):
            return path
    return None


def collect(directory: Path) -> TrialResult:
    """Read a trial directory's logs, fit the cluster's profile to them, re-estimate every plan with
    it and name the fastest measured plan (see the module docstring)."""
    from planner.calibration.user.fit import fit, summary
    from planner.calibration.user.sources import base_cluster, read_sources
    from planner.profiles.calibrated import apply_profile, profile_from_report

    framework, launcher, plans = _manifest(directory)
    cluster_path = str(directory / CLUSTER_FILE)
    launch = "launch_torchrun.sh" if launcher == "torchrun" else "launch_slurm.sh"
    if framework == "torchtitan":
        launch = "torchtitan_job.toml"
    logs: dict[str, Path] = {}
    for p in plans:
        log = _log_of(directory / p["name"], framework)
        if log is not None:
            logs[p["name"]] = log
    if not logs:
        raise SpecError(
            f"{short_path(directory)}: no plan has a log yet (plan-N/train*.log with the framework's step lines)"
        )
    pairs = [f"{logs[n]},{directory / n / launch}" for n in sorted(logs, key=_plan_number)]
    sources = read_sources(pairs, cluster_path, None)
    measured = {n: run for n, run in zip(sorted(logs, key=_plan_number), sources.runs)}
    report = fit(list(sources.runs), [], base_cluster(cluster_path), sources.skipped)
    profile = profile_from_report(report, sources.runs, [], summary(report))
    rows = []
    for p in plans:
        name = p["name"]
        inputs = read_plan(directory / name / "plan.yaml")
        run = measured.get(name)
        fitted = None
        if run is not None:
            cluster = apply_profile(inputs.cluster, profile)
            config = resolve(inputs.model, cluster, inputs.job, inputs.config)
            fitted = estimate(inputs.model, cluster, inputs.job, config).step_time_s
        rows.append(
            TrialRow(
                name,
                p["layout"],
                p["tied_with_best"],
                p["predicted_step_time_s"],
                fitted,
                run.job.tokens_per_step / (run.measured_tokens_per_s_per_gpu * run.cluster.num_gpus)
                if run is not None
                else None,
                short_path(logs[name]) if name in logs else "",
                "" if run is not None else "no log with step lines: not run yet, or failed",
            )
        )
    ran = sorted(
        (r for r in rows if r.measured_step_time_s is not None),
        key=lambda r: (r.measured_step_time_s, _plan_number(r.name)),
    )
    rest = [r for r in rows if r.measured_step_time_s is None]
    from planner.calibration.user.fit import report_dict

    return TrialResult(tuple(ran + rest), ran[0].name, profile, report_dict(report))


def _plan_number(name: str) -> int:
    return int(name.split("-")[1])


def result_dict(result: TrialResult) -> dict:
    """The JSON of ``planner trial collect``."""

    def err(pred, meas):
        return None if pred is None or meas is None else (pred - meas) / meas

    return {
        "winner": result.winner,
        "plans": [
            {
                "name": r.name,
                "layout": r.layout,
                "tied_with_best": r.tied_with_best,
                "measured_step_time_s": r.measured_step_time_s,
                "predicted_step_time_s": r.predicted_step_time_s,
                "fitted_step_time_s": r.fitted_step_time_s,
                "predicted_error": err(r.predicted_step_time_s, r.measured_step_time_s),
                "fitted_error": err(r.fitted_step_time_s, r.measured_step_time_s),
                "log": r.log,
                **({"note": r.note} if r.note else {}),
            }
            for r in result.rows
        ],
        "fit": result.fit,
    }
