"""A planning problem: the resolved model, cluster and job (with software and calibrated profiles
applied), and the steps every command takes on one: load it, estimate a configuration, search,
turn a ranked plan into a plan file's inputs, re-estimate a plan file.

The defaults here are ``planner search``'s: the command and :mod:`planner.api` both call these
functions (:func:`load_problem`, :func:`search_restrictions`, :func:`run_search`), so the plan the
library finds for a job is the plan the command prints for it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cost_models.constraints import resolve
from cost_models.estimate import Estimate, estimate
from cost_models.finetune import check_model as check_finetune_model
from cost_models.graph_costs import StageGraph
from cost_models.parallel import ParallelConfig
from planner.frameworks import DEFAULT_FRAMEWORK, get_framework
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError, UsageError
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model
from planner.inputs.validation import check_flag
from planner.profiles.hardware import load_cluster
from planner.profiles.software import BASE, SoftwareUse
from planner.search.space import Restrictions

HEADROOM_GIB_DEFAULT = 2.0
"""Default of ``--headroom-gib`` in ``planner search``, ``planner sweep`` and ``planner check``, and
of :func:`search_restrictions`: GiB kept free on every GPU beyond the modelled reserve, so that a
launch check passes fits as a searched plan must. The 90th percentile of the caching allocator's
reserved peak over planner's predicted allocated peak on 13 measured Megatron-Core steps (1.50 GiB),
rounded up to a whole GiB: derived, and kept equal to the derivation by a test, in
:mod:`planner.calibration.memory_validation` (``derived_headroom_gib``; docs/calibration.md
"Memory")."""

TOP_K_DEFAULT = 5
"""How many distinct plans a search returns by default (``planner search --top``)."""


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
    framework: str = DEFAULT_FRAMEWORK
    """The target framework the problem was loaded for (:data:`planner.frameworks.FRAMEWORKS`):
    its newest software profile prices the cluster unless ``software`` names another, and
    :func:`run_search` searches its space when given no restrictions."""


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
    framework: str = DEFAULT_FRAMEWORK,
    moe_dispatcher: str = "alltoall",
    moe_a2a_overlap: bool = False,
    cuda_graph_scope: tuple[str, ...] = (),
    eager_ops: tuple[str, ...] = (),
    grad_dtype: str | None = None,
    optimizer_state_dtype: str = "fp32",
    attention_impl: str = "fused",
    gradient_accumulation_fusion: bool = True,
    fp8_recipe: str | None = None,
    finetune: str = "full",
    lora_rank: int = 16,
    lora_targets: tuple[str, ...] | str = ("linear_qkv", "linear_proj"),
    frozen_weight_dtype: str = "bf16",
    packed_avg_doc_len: int = 0,
) -> Problem:
    """Load a model (preset, YAML or HF config.json), a cluster (template + nodes, or file) and a job;
    ``software``: a software profile name (None: the newest of ``framework`` fitted on the
    cluster's GPU families, none for ``any``; :func:`planner.profiles.software.resolve_software`),
    then ``profile``: a calibrated profile file, applied to the cluster
    (:func:`planner.profiles.software.configure`: the calibration wins). ``framework`` defaults to
    ``planner search``'s and ``planner estimate``'s (``megatron``); ``framework="any"`` prices with
    the GPU files' base values (``--framework any``);
    ``tp_comm_overlap``, ``moe_dispatcher``, ``moe_a2a_overlap``, ``cuda_graph_scope``,
    ``eager_ops``, ``grad_dtype`` (None: the precision's default,
    :func:`planner.inputs.jobs.default_grad_dtype`), ``optimizer_state_dtype``, ``attention_impl``,
    ``gradient_accumulation_fusion``, ``fp8_recipe`` (None: the default, ``tensorwise``; given, it
    needs ``precision`` fp8), ``finetune``, ``lora_rank``, ``lora_targets``, ``frozen_weight_dtype``,
    ``packed_avg_doc_len`` (docs/finetune.md): the :class:`JobSpec` fields of those names."""
    from planner.inputs.graph_model import is_graph_model, load_graph_model
    from planner.inputs.validation import require_precision
    from planner.profiles.calibrated import read_profile
    from planner.profiles.software import cluster_families, configure, resolve_software

    framework = get_framework(framework).name
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
            finetune=finetune,
            lora_rank=lora_rank,
            lora_targets=lora_targets,
            frozen_weight_dtype=frozen_weight_dtype,
            packed_avg_doc_len=packed_avg_doc_len,
            where="command line",
        ),
        profile=prof,
        software=use,
        framework=framework,
    )
    require_precision(problem.cluster, problem.job, "--precision")
    check_finetune_model(problem.model, problem.job, "--finetune")
    return problem


def search_restrictions(
    framework: str = DEFAULT_FRAMEWORK, headroom_gib: float = HEADROOM_GIB_DEFAULT, **fields
) -> Restrictions:
    """The space ``planner search`` covers, with its defaults: ``framework``'s space
    (:data:`planner.frameworks.FRAMEWORKS`; ``megatron``), ``headroom_gib`` GiB kept free on every
    GPU beyond the modelled reserve (:data:`HEADROOM_GIB_DEFAULT`), and any other
    :class:`planner.search.space.Restrictions` field given by name (``tp=(4, 8)``,
    ``recompute=("none",)``, ``max_micro_batch_size=4``, ``uneven_partitions=False``...; each left
    out is free, as when its flag is not given). Usage errors name the command's flag."""
    if not math.isfinite(headroom_gib):
        raise UsageError(f"--headroom-gib must be a finite number, got {headroom_gib}")
    if headroom_gib < 0:
        raise UsageError("--headroom-gib must not be negative")
    check_flag(headroom_gib, "--headroom-gib", "headroom_gib", positive=False)  # <= 10,000 GiB
    for key in ("max_tp", "max_pp"):  # given 0: an error, never "not given"
        check_flag(fields.get(key), f"--{key.replace('_', '-')}", key[4:], integer=True)
    return Restrictions(
        memory_headroom_bytes=headroom_gib * 2**30, framework=get_framework(framework).name, **fields
    )


TIE_POOL = 10
"""Distinct plans searched for ties whatever ``top_k`` (so the first plan does not depend on how
many are asked for): ties are ordered among the 10 fastest."""


def run_search(
    problem: Problem,
    restrictions: Restrictions | None = None,
    top_k: int = TOP_K_DEFAULT,
    progress=None,
    collect: bool = False,
    rank_ties: bool = False,
):
    """The ``top_k`` fastest distinct plans for ``problem`` within ``restrictions`` (None:
        :func:`search_restrictions` of the problem's framework, ``planner search``'s defaults): the
        chain search (:func:`planner.search.chain.search`, a ``SearchResult``) or, on a graph model,
        graph pipelines beside the best sequential one (:func:`planner.search.graph.run_graph_search`,
        a ``GraphSearchResult``). Raises InfeasibleError when nothing fits. ``progress(done, total,
        best_step_time_s)`` is called as candidates are settled; ``collect`` keeps every candidate
        (``result.candidates``, chain models only). With ``rank_ties`` (as ``planner search`` and
    :func:`planner.api.search` rank), the chain plans
        statistically tied with the fastest (closer than the model can resolve:
        :func:`planner.profiles.uncertainty.resolution`) are listed most robust first
        (:func:`planner.search.ties.order_ties`, among the :data:`TIE_POOL` fastest whatever
        ``top_k``) and ``result.ties`` says how many; without (a sweep comparing points by their
        fastest plans), the ranking is the point estimates' alone."""
    from planner.inputs.errors import InfeasibleError
    from planner.search.chain import search
    from planner.search.graph import run_graph_search

    if top_k < 1:
        raise UsageError("--top must be at least 1")
    r = restrictions if restrictions is not None else search_restrictions(problem.framework)
    if isinstance(problem.model, GraphModelSpec):
        if collect:
            raise UsageError("--csv applies to sequential models, not graph models")
        return run_graph_search(problem.model, problem.cluster, problem.job, r, top_k, progress)
    pool = max(top_k, TIE_POOL) if rank_ties else top_k
    # a copy: chain.search caches its results, and the caller may re-rank this one (ties, cost)
    result = replace(search(problem.model, problem.cluster, problem.job, r, pool, progress, collect=collect))
    if not result.plans:
        raise InfeasibleError(result.infeasible_reason)
    if rank_ties:
        from planner.profiles.uncertainty import resolution
        from planner.search.ties import order_ties

        plans, result.ties = order_ties(result.plans, resolution())
        result.plans = plans[:top_k]
    return result


def plan_inputs(problem: Problem, ranked, restrictions: Restrictions | None = None):
    """The inputs of a plan file for one ranked plan of a chain search within ``restrictions``
    (None: :func:`search_restrictions` of the problem's framework): the framework searched for and
    the memory kept free per GPU are recorded with it."""
    from planner.plans.plan_file import PlanInputs

    r = restrictions if restrictions is not None else search_restrictions(problem.framework)
    return PlanInputs(
        problem.model,
        ranked.cluster,
        problem.job,
        ranked.estimate.config,
        ranked.stage_groups,
        r.framework,
        r.memory_headroom_bytes,
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
    problem = Problem(inputs.model, inputs.cluster, inputs.job, None, inputs.profile, use, inputs.framework)
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
