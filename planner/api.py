"""The library surface: load inputs, estimate a configuration, and turn results into plain data.

The CLI (:mod:`planner.cli`) is a thin skin over these functions; everything returned as a dict is
JSON-ready, with stable key order, and echoes its resolved inputs (STYLE lesson 7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.estimate import Estimate, estimate
from cost_models.graph_costs import StageGraph
from cost_models.memory import HOST_MEMORY_USABLE_FRACTION
from cost_models.parallel import ParallelConfig, resolve
from planner import __version__
from planner.errors import ConfigError
from planner.graph_api import graph_config_dict, graph_model_dict, stage_graph_dict
from planner.graph_model import GraphModelSpec
from planner.hardware import load_cluster
from planner.jobs import make_job
from planner.loading import load_model
from planner.software import BASE, SoftwareUse
from planner.specs import ClusterSpec, JobSpec, ModelSpec

SCHEMA_VERSION = 1
"""Version of every command's ``--json`` output (its ``schema_version`` key); input files carry
:data:`planner.loading.SCHEMA_VERSION`, plan files :data:`planner.plan.PLAN_SCHEMA_VERSION`."""


@dataclass(frozen=True, slots=True)
class Problem:
    """The resolved inputs of every planning question."""

    model: ModelSpec | GraphModelSpec
    cluster: ClusterSpec
    job: JobSpec
    stage_graph: StageGraph | None = None
    """For a graph-model plan: the stage graph the estimate is for."""
    profile: object | None = None
    """The calibrated profile (:class:`planner.calibrate.profile.Profile`) applied to the cluster,
    recorded in plan files (``--profile``; see docs/calibrate.md)."""
    software: SoftwareUse | None = None
    """The software profile the cluster's efficiencies come from (``--software``, or the default of
    the framework; :mod:`planner.software`), recorded in plan files and ``--json``."""


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
    cluster's GPU families, none for ``any``; :func:`planner.software.resolve_software`), then ``profile``: a calibrated profile file, applied
    to the cluster (:func:`planner.software.configure`: the calibration wins);
    ``tp_comm_overlap``, ``moe_dispatcher``, ``moe_a2a_overlap``, ``cuda_graph_scope``,
    ``eager_ops``, ``grad_dtype`` (None: the precision's default,
    :func:`planner.jobs.default_grad_dtype`), ``optimizer_state_dtype``, ``attention_impl``,
    ``gradient_accumulation_fusion``, ``fp8_recipe`` (None: the default, ``tensorwise``; given, it
    needs ``precision`` fp8): the :class:`JobSpec` fields of those names."""
    from planner.calibrate.profile import read_profile
    from planner.graph_model import is_graph_model, load_graph_model
    from planner.software import cluster_families, configure, resolve_software
    from planner.validation import require_precision

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
    from planner.errors import InfeasibleError
    from planner.search.chain import search

    result = search(
        problem.model, problem.cluster, problem.job, restrictions, top_k, progress, collect=collect
    )
    if not result.plans:
        raise InfeasibleError(result.infeasible_reason)
    return result


def plan_summary(problem: Problem, ranked, target=None) -> dict:
    """One ranked plan as the JSON of ``planner search``: its configuration, then
    :func:`predictions_dict` (the same fields as ``planner estimate --json`` and plan files), with
    the time, cost and energy to train when ``target`` (:class:`planner.costing.TrainingTarget`)
    is given, and its equivalent variants under ``alternatives``."""
    out = config_dict(ranked.estimate.config, problem.model, problem.job)
    if ranked.stage_groups:
        out["stage_groups"] = list(ranked.stage_groups)
    out.update(predictions_dict(ranked.estimate, training_dict(ranked, target)))
    out["plausibility"] = plausibility_dict(problem, ranked.estimate)
    out["alternatives"] = [
        {
            **config_dict(a.estimate.config, problem.model, problem.job),
            **rounded(
                {
                    "step_time_s": a.estimate.step_time_s,
                    "tokens_per_s_per_gpu": a.estimate.tokens_per_s_per_gpu,
                    "peak_memory_bytes": a.estimate.peak_memory_bytes,
                }
            ),
        }
        for a in ranked.alternatives
    ]
    return out


def training_dict(ranked, target) -> dict | None:
    """``days_to_train``, ``gpu_hours``, ``cost_usd``, ``energy_kwh`` of a ranked plan (``None``
    without a target)."""
    from planner.costing import training_cost

    if target is None:
        return None
    return training_cost(ranked.estimate.tokens_per_s, ranked.cluster, target).as_dict()


def plan_inputs(problem: Problem, ranked, framework: str = "any", memory_headroom_bytes: float = 0.0):
    """The inputs of a plan file for one ranked plan searched for ``framework`` keeping
    ``memory_headroom_bytes`` free per GPU."""
    from planner.plan import PlanInputs

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
    from planner.calibrate.profile import read_profile
    from planner.graph_plan import is_graph_plan, read_graph_plan
    from planner.plan import read_plan
    from planner.software import check_software, software_use

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


# ------------------------------------------------------------------------------------------------
# Plain-data views


def model_dict(m: ModelSpec | GraphModelSpec) -> dict:
    """A model as JSON-ready data (Megatron field names plus derived counts)."""
    if isinstance(m, GraphModelSpec):
        return graph_model_dict(m)
    out = {
        "kind": "model",
        "name": m.name,
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups,
        "kv_channels": m.kv_channels,
        "vocab_size": m.vocab_size,
        "max_position_embeddings": m.max_position_embeddings,
        "activation": m.activation,
        "normalization": m.normalization,
        "position_embedding_type": m.position_embedding_type,
        "untie_embeddings_and_output_weights": m.untie_embeddings_and_output_weights,
        "add_bias_linear": m.add_bias_linear,
        "add_qkv_bias": m.add_qkv_bias,
        "qk_layernorm": m.qk_layernorm,
        "params_total": m.params_total,
    }
    if m.is_moe:
        out.update(
            num_experts=m.num_experts,
            moe_router_topk=m.moe_router_topk,
            moe_ffn_hidden_size=m.moe_ffn_hidden_size,
            moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
            moe_layer_freq=m.moe_layer_freq,
            params_active=m.params_active,
        )
    from planner.plan import optional_model_fields

    out.update(optional_model_fields(m))  # MLA, layer pattern, local attention, sinks, MTP when set
    return out


def gpu_dict(gpu) -> dict:
    """A GPU type as JSON-ready data (SI units)."""
    e = gpu.efficiency
    return {
        "name": gpu.name,
        "memory_bytes": gpu.memory_bytes,
        "peak_flop_per_s": dict(gpu.peak_flop_per_s),
        "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
        "memory_reserve_bytes": gpu.memory_reserve_bytes,
        "sm_count": gpu.sm_count,
        "gemm_tile": list(gpu.gemm_tile) if gpu.gemm_tile else None,
        "gemm_stream_bytes_per_s": gpu.gemm_stream_bandwidth(),
        "gemm_stream_measured": bool(gpu.gemm_stream_bytes_per_s),
        "host_link_bytes_per_s": gpu.host_link_bytes_per_s,
        "efficiency": {
            "gemm_efficiency_max": e.gemm_efficiency_max,
            "gemm_half_efficiency_flop": e.gemm_half_efficiency_flop,
            "attention_efficiency": e.attention_efficiency,
            "hbm_efficiency": e.hbm_efficiency,
            "fp8_gemm_speedup": e.fp8_gemm_speedup,
            "kernel_overhead_s": e.kernel_overhead_s,
            "comm_overlap_slowdown": e.comm_overlap_slowdown,
            "grouped_gemm_efficiency": e.grouped_gemm_efficiency,
            "host_launch_s": e.host_launch_s,
        },
        "attention_kernel_speed": {
            "forward": gpu.attention_kernel_speed[0],
            "backward": gpu.attention_kernel_speed[1],
            "local_forward": gpu.local_attention_kernel_speed[0],
            "local_backward": gpu.local_attention_kernel_speed[1],
        },
        "source": gpu.source,
    }


def cluster_dict(c: ClusterSpec) -> dict:
    """A cluster as JSON-ready data."""
    return {
        "name": c.name,
        "num_gpus": c.num_gpus,
        "groups": [
            {
                "gpu": g.gpu.name,
                "num_nodes": g.num_nodes,
                "gpus_per_node": g.gpus_per_node,
                "nvlink_domain_size": g.nvlink_domain_size,
                "intra_node_bandwidth_bytes_per_s": g.intra_node_bandwidth_bytes_per_s,
                "intra_node_latency_s": g.intra_node_latency_s,
                "inter_node_bandwidth_bytes_per_s": g.inter_node_bandwidth_bytes_per_s,
                "inter_node_latency_s": g.inter_node_latency_s,
                "intra_node_efficiency": g.intra_node_efficiency,
                "inter_node_efficiency": g.inter_node_efficiency,
                **(
                    {
                        "nvlink_mesh": {
                            "link_bandwidth_bytes_per_s": g.nvlink_mesh.link_bandwidth_bytes_per_s,
                            "links": [list(row) for row in g.nvlink_mesh.links],
                        }
                    }
                    if g.nvlink_mesh is not None
                    else {}
                ),
                **({"host_memory_bytes": g.host_memory_bytes} if g.host_memory_bytes else {}),
            }
            for g in c.groups
        ],
    }


def job_dict(j: JobSpec) -> dict:
    """A job as JSON-ready data."""
    return {
        "global_batch_size": j.global_batch_size,
        "seq_length": j.seq_length,
        "precision": j.precision,
        "fp8_recipe": j.fp8_recipe if j.precision == "fp8" else None,
        "optimizer": j.optimizer,
        "grad_dtype": j.grad_dtype,
        "master_dtype": j.master_dtype,
        "optimizer_state_dtype": j.optimizer_state_dtype,
        "overlap_grad_reduce": j.overlap_grad_reduce,
        "overlap_param_gather": j.overlap_param_gather,
        "gradient_accumulation_fusion": j.gradient_accumulation_fusion,
        "tp_comm_overlap": j.tp_comm_overlap,
        "moe_dispatcher": j.moe_dispatcher,
        "moe_a2a_overlap": j.moe_a2a_overlap,
        "cuda_graph_scope": list(j.cuda_graph_scope),
        "eager_ops": list(j.eager_ops),
        "attention_impl": j.attention_impl,
        "pipeline_scatter_gather": j.pipeline_scatter_gather,
        "sharded_grad_reduce": j.sharded_grad_reduce,
    }


def config_dict(c: ParallelConfig, model: ModelSpec | GraphModelSpec, job: JobSpec) -> dict:
    """A resolved configuration as JSON-ready data."""
    return {
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "cp": c.cp,
        "ep": c.ep,
        "etp": c.expert_tp,
        "vpp": c.vpp,
        "micro_batch_size": c.micro_batch_size,
        "num_microbatches": c.num_microbatches(job),
        "recompute": c.recompute,
        "recompute_num_layers": c.recompute_num_layers,
        **({"recompute_modules": list(c.recompute_modules)} if c.recompute_modules else {}),
        "sequence_parallel": c.sp,
        "optimizer_sharding": c.optimizer_sharding,
        "schedule": c.schedule,
        "layers_per_stage": list(c.stage_layers(model)) if isinstance(model, ModelSpec) else [],
        **c.optional_fields(),
    }


TIME_KEYS = {
    "compute": "compute_s",
    "recompute": "recompute_s",
    "tensor/context/expert-parallel communication": "tp_cp_ep_comm_s",
    "exposed FSDP / ZeRO-2 communication": "fsdp_exposed_s",
    "exposed activation offload": "offload_exposed_s",
    "pipeline bubble": "bubble_s",
    "exposed data-parallel communication": "dp_exposed_s",
    "optimizer step": "optimizer_s",
    "exposed parameter gather": "param_gather_exposed_s",
}
"""JSON key of each term of :meth:`Estimate.time_breakdown` (the terms sum to ``step_time_s``)."""


SIGNIFICANT_DIGITS = 4


def rounded(data, digits: int = SIGNIFICANT_DIGITS):
    """``data`` with every float rounded to ``digits`` significant digits (ints, booleans and
    strings unchanged): the one rounding of predictions in plan files and ``--json``. Inputs
    (model, cluster, job) are never rounded, so a plan file reads back to the same problem."""
    if isinstance(data, float):
        return float(f"{data:.{digits}g}") if math.isfinite(data) else data
    if isinstance(data, dict):
        return {k: rounded(v, digits) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [rounded(v, digits) for v in data]
    return data


def predictions_dict(est: Estimate, training: dict | None = None) -> dict:
    """The predictions of one plan, rounded: the same fields (and the same function) for
    ``planner estimate --json``, each plan of ``planner search --json`` and a plan file's
    ``predictions`` section. ``training`` (:meth:`planner.costing.TrainingCost.as_dict`) adds
    ``days_to_train``, ``gpu_hours``, ``cost_usd`` and ``energy_kwh``."""
    worst = est.worst_stage
    per_stage_mem = [
        {
            "stage": s.stage,
            "gpu": s.gpu,
            "layers": list(s.layers),
            "weights_bytes": s.memory.weights_bytes,
            "gradients_bytes": s.memory.gradients_bytes,
            "optimizer_bytes": s.memory.optimizer_bytes,
            "activations_bytes": s.memory.activations_bytes,
            "transient_bytes": s.memory.transient_bytes,
            "reserve_bytes": s.memory.reserve_bytes,
            "peak_bytes": s.memory.peak_bytes,
            "capacity_bytes": s.memory.capacity_bytes,
            "headroom_bytes": s.memory.headroom_bytes,
            "peak_inflight_microbatches": s.memory.peak_inflight_microbatches,
            "fits": s.memory.fits,
        }
        for s in est.stages
    ]
    slow = est.busiest_stage
    per_stage_time = [
        {
            "stage": s.stage,
            "forward_s_per_microbatch": s.forward_s,
            "backward_s_per_microbatch": s.backward_s,
            "recompute_s_per_microbatch": s.recompute_s,
            "tp_cp_ep_comm_s_per_microbatch": s.tp_cp_ep_comm_s,
            "p2p_s": s.p2p_s,
            "busy_s": s.busy_s,
            "idle_s": s.idle_s,
            "dp_comm_s": s.dp_comm_s,
            "dp_exposed_s": s.dp_exposed_s,
            "optimizer_s": s.optimizer_s,
        }
        for s in est.stages
    ]
    out = {
        "step_time_s": est.step_time_s,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "mfu": est.mfu,
        "hfu": est.hfu,
        "bubble_fraction": est.bubble_fraction,
        "peak_memory_bytes": est.peak_memory_bytes,
        "headroom_bytes": worst.memory.headroom_bytes,
        "fits": est.fits,
    }
    if training:
        out.update(training)
    out["memory"] = {
        "worst_stage": worst.stage,
        "shortfall_bytes": max(0.0, -worst.memory.headroom_bytes),
        "per_stage": per_stage_mem,
    }
    if est.config.offload_layers:
        out["memory"]["host"] = host_memory_dict(est)
    out["time"] = {
        "step_time_s": est.step_time_s,
        "pipeline_s": est.pipeline_time_s,
        "slowest_stage": slow.stage,
        "critical_stage": est.critical_stage.stage,
        **{TIME_KEYS[name]: seconds for name, seconds in est.time_breakdown()},
        "per_stage": per_stage_time,
    }
    return rounded(out)


def host_memory_dict(est: Estimate) -> dict:
    """Host memory of a plan that offloads activations: per stage, the bytes one GPU parks there
    and its share of the node's usable host memory (0: the node's host memory is unknown, nothing
    checked), and whether every stage fits."""
    return {
        "fits": est.host_fits,
        "usable_fraction": HOST_MEMORY_USABLE_FRACTION,
        "per_stage": [
            {
                "stage": s.stage,
                "offloaded_bytes_per_gpu": s.host_bytes,
                "share_bytes_per_gpu": s.host_share_bytes,
                "fits": s.host_fits,
            }
            for s in est.stages
        ],
    }


def estimate_dict(problem: Problem, est: Estimate, training: dict | None = None) -> dict:
    """The full JSON of ``planner estimate``: the resolved inputs, the configuration and
    :func:`predictions_dict`."""
    out = {
        "schema_version": SCHEMA_VERSION,
        "planner_version": __version__,
        "model": model_dict(problem.model),
        "cluster": cluster_dict(problem.cluster),
        "job": job_dict(problem.job),
        **software_dict(problem),
        "config": config_dict(est.config, problem.model, problem.job)
        if problem.stage_graph is None
        else graph_config_dict(est.config, problem.job),
        **predictions_dict(est, training),
        "plausibility": plausibility_dict(problem, est),
    }
    if problem.stage_graph is not None:
        out["stage_graph"] = rounded(stage_graph_dict(problem.model, problem.stage_graph, est))
    return out


def software_dict(problem: Problem) -> dict:
    """``{"software": ...}``: the software profile the problem's efficiencies come from
    (:meth:`planner.software.SoftwareUse.as_dict`); empty when the problem does not say."""
    return {"software": problem.software.as_dict()} if problem.software is not None else {}


def plausibility_dict(problem: Problem, est: Estimate, framework: str = "any") -> dict:
    """The best published MFU of the estimate's class and whether the prediction exceeds it
    (:mod:`planner.plausibility`)."""
    from planner.plausibility import plausibility

    is_moe = bool(getattr(problem.model, "is_moe", False))
    c = est.config
    p = plausibility(
        est.stages[0].gpu,
        problem.job.precision,
        is_moe,
        est.mfu,
        framework,
        gpus=problem.cluster.num_gpus,
        fsdp_shard=c.shard_degree if c.optimizer_sharding == "full" else 0,
        moe_runtime=(
            (problem.job.moe_dispatcher, problem.job.moe_a2a_overlap, bool(problem.job.cuda_graph_scope))
            if is_moe
            else None
        ),
    )
    return {
        "class": p.run_class,
        "best_published_mfu": p.best_published_mfu,
        "best_published_run": p.best_run_id,
        "above_best_published": p.above_best_published,
        "outside_calibration": list(p.extrapolation),
    }


# ------------------------------------------------------------------------------------------------
# Graph models (their pieces: planner.graph_api)


def graph_plan_summary(problem: Problem, plan) -> dict:
    """One graph plan as JSON: shape, predictions and its stage graph."""
    est = plan.estimate
    out = graph_config_dict(plan.config, problem.job)
    out.update(
        gpus_per_pipeline=sum(s.devices for s in est.stages),
        branched=list(plan.modes),
        sequential=plan.sequential,
        step_time_s=est.step_time_s,
        tokens_per_s=est.tokens_per_s,
        tokens_per_s_per_gpu=est.tokens_per_s_per_gpu,
        mfu=est.mfu,
        bubble_fraction=est.bubble_fraction,
        peak_memory_bytes=est.peak_memory_bytes,
        headroom_bytes=est.worst_stage.memory.headroom_bytes,
        stage_graph=stage_graph_dict(problem.model, plan.stage_graph, est),
    )
    return rounded(out)


def graph_search_dict(problem: Problem, result) -> dict:
    """The JSON of ``planner search`` on a graph model."""
    from planner.search.graph import describe

    seq = result.sequential
    return {
        "schema_version": SCHEMA_VERSION,
        "planner_version": __version__,
        "model": graph_model_dict(problem.model),
        "cluster": cluster_dict(problem.cluster),
        "job": job_dict(problem.job),
        **software_dict(problem),
        "decomposition": describe(problem.model, result.decomposition),
        "linearised_non_series_parallel_parts": result.linearised_parts,
        "plans": [graph_plan_summary(problem, p) for p in result.plans],
        "sequential_plan": graph_plan_summary(problem, seq) if seq is not None else None,
        "speedup_vs_sequential": result.speedup_vs_sequential,
        "search": {
            "candidates": result.candidates,
            "partitioned": result.evaluated,
            "no_fit": result.no_fit,
            "pruned_by_bound": result.pruned_by_bound,
            "rejected": dict(sorted(result.rejections.items())),
        },
    }
