"""A planning problem: the resolved model, cluster and job (with software and calibrated profiles
applied), and the steps every command takes on one: load it, estimate a configuration, search,
turn a ranked plan into a plan file's inputs, re-estimate a plan file."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.estimate import Estimate, estimate
from cost_models.graph_costs import StageGraph
from cost_models.parallel import ParallelConfig, resolve
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster
from planner.profiles.software import BASE, SoftwareUse


@dataclass(frozen=True, slots=True)
class Problem:
    """The resolved inputs of every planning question."""

    model: ModelSpec | GraphModelSpec
    cluster: ClusterSpec
    job: JobSpec
    stage_graph: StageGraph | None = None
    """For a graph-model plan: the stage graph the estimate is for."""
    profile: object | None = None
    """The calibrated profile (:class:`planner.profiles.calibrated.Profile`) applied to the cluster,
    recorded in plan files (``--profile``; see docs/calibrate.md)."""
    software: SoftwareUse | None = None
    """The software profile the cluster's efficiencies come from (``--software``, or the default of
    the framework; :mod:`planner.profiles.software`), recorded in plan files and ``--json``."""


def load_problem(
    model: str,
    cluster: str,
    nodes: int | None,
    global_batch_size: int,
    seq_length: int,
    precision: str = "bf16",
    profile: str | None = None,
    tp_comm_overlap: bool = False,
    software: str | None = None,
    framework: str = "any",
    moe_dispatcher: str = "alltoall",
    moe_a2a_overlap: bool = False,
    cuda_graph_scope: tuple[str, ...] = (),
    eager_ops: tuple[str, ...] = (),
    grad_dtype: str | None = None,
    optimizer_state_dtype: str = "fp32",
    attention_impl: str = "fused",
    gradient_accumulation_fusion: bool = True,
    fp8_recipe: str | None = None,
) -> Problem:
    """Load a model (preset, YAML or HF config.json), a cluster (template + nodes, or file) and a job;
    ``software``: a software profile name (None: the newest of ``framework`` fitted on the
    cluster's GPU families, none for ``any``; :func:`planner.profiles.software.resolve_software`), then ``profile``: a calibrated profile file, applied
    to the cluster (:func:`planner.profiles.software.configure`: the calibration wins);
    ``tp_comm_overlap``, ``moe_dispatcher``, ``moe_a2a_overlap``, ``cuda_graph_scope``,
    ``eager_ops``, ``grad_dtype`` (None: the precision's default,
    :func:`planner.inputs.jobs.default_grad_dtype`), ``optimizer_state_dtype``, ``attention_impl``,
    ``gradient_accumulation_fusion``, ``fp8_recipe`` (None: the default, ``tensorwise``; given, it
    needs ``precision`` fp8): the :class:`JobSpec` fields of those names."""
    from planner.inputs.graph_model import is_graph_model, load_graph_model
    from planner.inputs.validation import require_precision
    from planner.profiles.calibrated import read_profile
    from planner.profiles.software import cluster_families, configure, resolve_software

    base_cluster = load_cluster(cluster, nodes)
    name = resolve_software(software, framework, cluster_families(base_cluster))
    prof = read_profile(profile) if profile is not None else None
    spec, use = configure(base_cluster, name, prof)
    problem = Problem(
        model=load_graph_model(model) if is_graph_model(model) else load_model(model),
        cluster=spec,
        job=make_job(
            global_batch_size=global_batch_size,
            seq_length=seq_length,
            precision=precision,
            tp_comm_overlap=tp_comm_overlap,
            eager_ops=eager_ops,
            moe_dispatcher=moe_dispatcher,
            moe_a2a_overlap=moe_a2a_overlap,
            cuda_graph_scope=cuda_graph_scope,
            grad_dtype=grad_dtype,
            optimizer_state_dtype=optimizer_state_dtype,
            attention_impl=attention_impl,
            gradient_accumulation_fusion=gradient_accumulation_fusion,
            fp8_recipe=fp8_recipe,
            where="command line",
        ),
        profile=prof,
        software=use,
    )
    require_precision(problem.cluster, problem.job, "--precision")
    return problem


def run_search(problem: Problem, restrictions, top_k: int = 5, progress=None, collect: bool = False):
    """The search (see :mod:`planner.search.chain`); raises InfeasibleError when nothing fits.
    ``collect`` keeps every candidate (``result.candidates``)."""
    from planner.inputs.errors import InfeasibleError
    from planner.search.chain import search

    result = search(
        problem.model, problem.cluster, problem.job, restrictions, top_k, progress, collect=collect
    )
    if not result.plans:
        raise InfeasibleError(result.infeasible_reason)
    return result


def plan_inputs(problem: Problem, ranked, framework: str = "any", memory_headroom_bytes: float = 0.0):
    """The inputs of a plan file for one ranked plan searched for ``framework`` keeping
    ``memory_headroom_bytes`` free per GPU."""
    from planner.plans.plan_file import PlanInputs

    return PlanInputs(
        problem.model,
        ranked.cluster,
        problem.job,
        ranked.estimate.config,
        ranked.stage_groups,
        framework,
        memory_headroom_bytes,
        problem.profile,
        problem.software.name if problem.software is not None else BASE,
    )


def estimate_plan_file(path: str, profile: str | None = None, software: str | None = None):
    """Re-estimate a plan file (chain or graph plan): (Problem, Estimate). The plan's cluster is
    under the software and calibration profiles it records; ``software`` (a software profile name)
    and ``profile`` (a profile file) replace them."""
    from planner.plans.graph_plan import is_graph_plan, read_graph_plan
    from planner.plans.plan_file import read_plan
    from planner.profiles.calibrated import read_profile
    from planner.profiles.software import check_software, software_use

    name = check_software(software) if software is not None else None
    prof = read_profile(profile) if profile is not None else None
    if is_graph_plan(path):
        from cost_models.graph_costs import estimate_graph

        g = read_graph_plan(path, name, prof)
        use = software_use((x.gpu.name for x in g.cluster.groups), g.software, _gpus_of(prof))
        problem = Problem(g.model, g.cluster, g.job, g.stage_graph, prof, use)
        return problem, estimate_graph(g.model, g.cluster, g.job, g.config, g.stage_graph)
    inputs = read_plan(path, name, prof)
    use = software_use((x.gpu.name for x in inputs.cluster.groups), inputs.software, _gpus_of(inputs.profile))
    problem = Problem(inputs.model, inputs.cluster, inputs.job, None, inputs.profile, use)
    return problem, estimate_config(problem, inputs.config)


def _gpus_of(profile) -> tuple[str, ...]:
    """The GPU type a calibration profile is for, as a tuple (empty for none)."""
    return (profile.gpu,) if profile is not None else ()


def estimate_config(problem: Problem, config: ParallelConfig) -> Estimate:
    """Resolve ``config`` (derive dp, check every constraint) and predict it."""
    if isinstance(problem.model, GraphModelSpec):
        raise ConfigError(
            f"{problem.model.name} is a graph model: plan it with planner search, then estimate the plan "
            "file with --plan"
        )
    resolved = resolve(problem.model, problem.cluster, problem.job, config)
    if problem.job.precision == "fp8" and not all(g.gpu.supports("fp8") for g in problem.cluster.groups):
        raise ConfigError(
            "precision fp8 needs GPUs with FP8 tensor cores; "
            + ", ".join(sorted({g.gpu.name for g in problem.cluster.groups if not g.gpu.supports("fp8")}))
            + " have none"
        )
    return estimate(problem.model, problem.cluster, problem.job, resolved)
