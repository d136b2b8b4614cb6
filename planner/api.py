"""The library surface: load a problem, estimate a configuration, search, write the plan file,
export it (Megatron-LM, torchtitan), check a plan file or a launch. docs/api.md documents each
function with runnable examples.

Every default is the command line's: ``planner search`` and ``planner sweep`` build their space,
load and search through these functions (:mod:`planner.plans.problem`'s), the export and check
commands call the functions these wrap, so five lines of this module find the plan ``planner
search`` prints for the same job, and write its plan file byte for byte::

    from planner import api

    problem = api.load_problem("llama3-70b", "dgx-h100", 64, 1024, 8192)
    best = api.search(problem).plans[0]  # tp 4 pp 4 cp 2, as planner search
    api.write_plan("plan.yaml", problem, best)
    api.write_export("launch", api.export_megatron("plan.yaml"))
    assert api.check("plan.yaml").passed
"""

from __future__ import annotations

from pathlib import Path

from cost_models.estimate import Estimate
from cost_models.parallel import ParallelConfig
from planner.plans.problem import (
    HEADROOM_GIB_DEFAULT,
    TOP_K_DEFAULT,
    Problem,
    estimate_config,
    estimate_plan_file,
    load_problem,
    plan_inputs,
    run_search,
    search_restrictions,
)
from planner.search.space import Restrictions

__all__ = [
    "HEADROOM_GIB_DEFAULT",
    "TOP_K_DEFAULT",
    "ParallelConfig",
    "Problem",
    "Restrictions",
    "check",
    "estimate",
    "estimate_config",
    "estimate_plan_file",
    "export_megatron",
    "export_torchtitan",
    "load_problem",
    "plan_document",
    "plan_inputs",
    "restrictions",
    "run_search",
    "search",
    "search_restrictions",
    "write_export",
    "write_plan",
]

restrictions = search_restrictions
"""``restrictions(framework="megatron", headroom_gib=2.0, **fields)``: the space ``planner search``
covers (:func:`planner.plans.problem.search_restrictions`)."""


def estimate(problem: Problem, config: ParallelConfig) -> Estimate:
    """Predict one configuration of ``problem`` (dp derived from the world size, every constraint
    checked: a ConfigError names the broken one): ``planner estimate``'s prediction, priced with the
    problem's software profile (``load_problem``'s default framework, megatron, is ``planner
    estimate --framework megatron``; ``framework="any"`` is ``planner estimate``'s own default)."""
    return estimate_config(problem, config)


def search(
    problem: Problem,
    restrictions: Restrictions | None = None,
    top_k: int = TOP_K_DEFAULT,
    progress=None,
    collect: bool = False,
    rank_ties: bool = True,
):
    """``planner search``: the ``top_k`` fastest distinct plans that fit, in ``result.plans``
    (:func:`planner.plans.problem.run_search`; restrictions None: the command's defaults for the
    problem's framework, 2 GiB headroom), those statistically tied with the fastest listed most
    robust first (``result.ties``; docs/search.md "Ties"; ``rank_ties=False``: the point estimates'
    order alone). InfeasibleError when nothing fits."""
    return run_search(problem, restrictions, top_k, progress, collect, rank_ties)


def plan_document(
    problem: Problem,
    result,
    restrictions: Restrictions | None = None,
    rank: int = 0,
    target=None,
) -> dict:
    """The plan file ``planner search --out`` writes for plan ``rank`` (0: the best) of a search
    ``result`` on ``problem`` within ``restrictions`` (None: the defaults :func:`search` used):
    inputs, configuration, predictions (with ``days_to_train`` and cost when ``target``, a
    :class:`planner.outputs.costing.TrainingTarget`, is given) and the bubble budget. A graph
    search's result gives a graph plan (with its best sequential plan). A ranked plan
    (``result.plans[i]``) stands for itself."""
    from planner.outputs import bubbles as bub
    from planner.outputs import views
    from planner.plans.plan_file import plan_document as chain_document
    from planner.search.chain import SearchResult
    from planner.search.graph import GraphSearchResult

    r = restrictions if restrictions is not None else search_restrictions(problem.framework)
    if isinstance(result, GraphSearchResult):
        return _graph_plan_document(problem, result, r, rank)
    best = result.plans[rank] if isinstance(result, SearchResult) else result
    budget = views.rounded(bub.budget_summary_dict(bub.budget(best.estimate)))
    predictions = views.predictions_dict(best.estimate, views.training_dict(best, target))
    predictions["prediction_interval"] = views.prediction_interval_dict(problem, best.estimate, r.framework)
    return chain_document(plan_inputs(problem, best, r), predictions, budget)


def _graph_plan_document(problem: Problem, result, restrictions: Restrictions, rank: int) -> dict:
    """A graph search's plan ``rank`` as a graph plan file (:func:`plan_document`)."""
    from planner.outputs import bubbles as bub
    from planner.outputs import views
    from planner.plans.graph_plan import GraphPlanInputs, graph_plan_document

    best, seq = result.plans[rank], result.sequential
    gproblem = Problem(
        problem.model, problem.cluster, problem.job, best.stage_graph, problem.profile, problem.software
    )
    predictions = {
        k: v
        for k, v in views.estimate_dict(gproblem, best.estimate).items()
        if k not in ("model", "cluster", "job", "config", "schema_version", "planner_version")
    }
    predictions["speedup_vs_sequential"] = result.speedup_vs_sequential
    inputs = GraphPlanInputs(
        problem.model,
        problem.cluster,
        problem.job,
        best.config,
        best.stage_graph,
        best.modes,
        (seq.config, seq.stage_graph) if seq is not None else None,
        restrictions.memory_headroom_bytes,
        problem.software.name,
    )
    budget = {**bub.budget_dict(bub.budget(best.estimate)), "schedule": "graph-1f1b"}
    return graph_plan_document(inputs, predictions, budget)


def write_plan(
    path: str | Path,
    problem: Problem,
    result,
    restrictions: Restrictions | None = None,
    rank: int = 0,
    target=None,
) -> Path:
    """Write :func:`plan_document` to ``path`` (.yaml or .json, atomically) and return the path."""
    from planner.plans.plan_file import write_plan as write_document

    write_document(Path(path), plan_document(problem, result, restrictions, rank, target))
    return Path(path)


def export_megatron(plan: str | Path, launcher: str = "torchrun", sequential: bool = False) -> dict[str, str]:
    """``planner export megatron``: the files (name -> text: ``megatron_args.txt`` and the
    ``launcher`` script, torchrun or slurm) that launch a plan file with Megatron-LM
    (:mod:`planner.launch.megatron.export`); a SpecError names why Megatron-LM cannot run the plan.
    A graph plan exports its best sequential plan (``sequential``: asked for explicitly)."""
    from planner.inputs.errors import UsageError
    from planner.launch.megatron import export as mx
    from planner.plans.graph_plan import is_graph_plan, sequential_for_megatron
    from planner.plans.plan_file import read_plan

    if launcher not in mx.LAUNCHERS:
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: {', '.join(mx.LAUNCHERS)}")
    if is_graph_plan(plan):
        inputs, _ = sequential_for_megatron(plan, sequential)
    else:
        inputs = read_plan(str(plan))
    return mx.export_files(inputs, launcher)


def export_torchtitan(plan: str | Path, launcher: str = "torchrun") -> dict[str, str]:
    """``planner export torchtitan``: the files (name -> text: ``torchtitan_job.toml``, its
    command-line overrides and the ``launcher`` script) that launch a plan file searched with
    ``framework="torchtitan"`` (:mod:`planner.launch.torchtitan.export`)."""
    from planner.inputs.errors import SpecError, UsageError
    from planner.launch.torchtitan import export as tx
    from planner.plans.graph_plan import is_graph_plan
    from planner.plans.plan_file import read_plan

    if launcher not in ("torchrun", "slurm"):
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: torchrun, slurm")
    if is_graph_plan(plan):
        raise SpecError(f"{plan}: a graph plan; torchtitan runs sequential pipelines only")
    return tx.export_files(read_plan(str(plan)), launcher)


def write_export(out: str | Path, files: dict[str, str], force: bool = False) -> list[Path]:
    """Write an export's ``files`` (relative paths) into the folder ``out`` (created, with the
    sub-folders the paths name), each atomically, the launch
    scripts (``*.sh``) executable; never replaces an existing file unless ``force`` (a SpecError
    names them) and never touches files the export does not write. Returns the paths written."""
    from planner.inputs.errors import SpecError
    from planner.inputs.files import write_text_atomic

    out = Path(out)
    paths = {out / name: text for name, text in files.items()}
    existing = [str(f) for f in paths if f.exists()]
    if existing and not force:
        raise SpecError(f"{', '.join(existing)} already exist; pass --force to replace them")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{out}: cannot create: {exc.strerror}") from None
    for path, text in paths.items():
        if path.parent != out:  # a file of a sub-folder (a trial's plan-N/)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SpecError(f"{path.parent}: cannot create: {exc.strerror}") from None
        write_text_atomic(path, text)
        if path.suffix == ".sh":
            path.chmod(0o755)
    return list(paths)


def check(
    path: str | Path,
    cluster: str | None = None,
    nodes: int | None = None,
    headroom_gib: float = HEADROOM_GIB_DEFAULT,
    max_slowdown: float | None = None,
    profile: str | None = None,
    software: str | None = None,
):
    """``planner check`` on one file: a plan file (its own cluster; ``cluster`` then only confirms
    the world size), a Megatron-LM args or launch file or a torchtitan TOML (judged on ``cluster``,
    a template with ``nodes`` or a cluster file). The :class:`planner.launch.verdict.Verdict`:
    ``passed``, ``findings`` (constraints, memory with ``headroom_gib`` GiB free per GPU, the
    slowdown against the best plan when ``max_slowdown`` is given) and ``metrics``. ``software``
    and ``profile`` (a calibrated profile file) replace the profiles the file records."""
    import math

    from planner.inputs.errors import UsageError
    from planner.inputs.validation import check_flag
    from planner.launch.check import check_file
    from planner.profiles.calibrated import read_profile
    from planner.profiles.hardware import load_cluster
    from planner.profiles.software import BASE, check_software, configure

    for flag, value in (("headroom-gib", headroom_gib), ("max-slowdown", max_slowdown or 0.0)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"--{flag} must be a finite, non-negative number, got {value}")
    check_flag(headroom_gib, "--headroom-gib", "headroom_gib", positive=False)  # <= 10,000 GiB, as search
    name = check_software(software) if software is not None else None
    prof = read_profile(profile) if profile is not None else None
    spec = None
    if cluster is not None:
        spec = load_cluster(cluster, nodes)
        configure(spec, name or BASE, prof)  # a profile for another GPU type: a SpecError here
    elif nodes is not None:
        raise UsageError("--nodes needs --cluster (a node template)")
    return check_file(str(path), spec, headroom_gib * 2**30, max_slowdown, prof, name)
