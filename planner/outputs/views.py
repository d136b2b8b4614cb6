"""The library surface: load inputs, estimate a configuration, and turn results into plain data.

The CLI (:mod:`planner.cli`) is a thin skin over these functions; everything returned as a dict is
JSON-ready, with stable key order, and echoes its resolved inputs (STYLE lesson 7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cost_models.estimate import Estimate
from cost_models.memory import HOST_MEMORY_USABLE_FRACTION
from cost_models.parallel import ParallelConfig
from planner import __version__
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import finetune_mapping
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import rounded
from planner.outputs.graph_views import graph_config_dict, graph_model_dict, stage_graph_dict
from planner.plans.problem import Problem

if TYPE_CHECKING:
    from planner.profiles.plausibility import Plausibility

SCHEMA_VERSION = 1
"""Version of every command's ``--json`` output (its ``schema_version`` key); input files carry
:data:`planner.inputs.documents.SCHEMA_VERSION`, plan files :data:`planner.plans.plan_file.PLAN_SCHEMA_VERSION`."""


def plan_summary(problem: Problem, ranked, target=None) -> dict:
    """One ranked plan as the JSON of ``planner search``: its configuration, then
    :func:`predictions_dict` (the same fields as ``planner estimate --json`` and plan files), with
    the time, cost and energy to train when ``target`` (:class:`planner.outputs.costing.TrainingTarget`)
    is given, and its equivalent variants under ``alternatives``."""
    out = config_dict(ranked.estimate.config, problem.model, problem.job)
    if ranked.stage_groups:
        out["stage_groups"] = list(ranked.stage_groups)
    out.update(predictions_dict(ranked.estimate, training_dict(ranked, target)))
    out.update(plausibility_and_interval_dict(problem, ranked.estimate))
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
    from planner.outputs.costing import training_cost

    if target is None:
        return None
    return training_cost(ranked.estimate.tokens_per_s, ranked.cluster, target).as_dict()


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
    from planner.inputs.model_yaml import optional_model_fields

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
        "linear_mixer_kernels": dict(gpu.linear_mixer_efficiency),
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
        **finetune_mapping(j),  # only when fine-tuning with LoRA or packed sequences
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


def predictions_dict(est: Estimate, training: dict | None = None) -> dict:
    """The predictions of one plan, rounded: the same fields (and the same function) for
    ``planner estimate --json``, each plan of ``planner search --json`` and a plan file's
    ``predictions`` section. ``training`` (:meth:`planner.outputs.costing.TrainingCost.as_dict`) adds
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
        **plausibility_and_interval_dict(problem, est),
    }
    if problem.stage_graph is not None:
        out["stage_graph"] = rounded(stage_graph_dict(problem.model, problem.stage_graph, est))
    return out


def software_dict(problem: Problem) -> dict:
    """``{"software": ...}``: the software profile the problem's efficiencies come from
    (:meth:`planner.profiles.software.SoftwareUse.as_dict`); empty when the problem does not say."""
    return {"software": problem.software.as_dict()} if problem.software is not None else {}


def _plausibility(problem: Problem, est: Estimate) -> Plausibility:
    """:func:`planner.profiles.plausibility.estimate_plausibility` of one estimate of the problem."""
    from planner.profiles.plausibility import estimate_plausibility

    return estimate_plausibility(problem.model, problem.job, problem.cluster, est)


def plausibility_and_interval_dict(problem: Problem, est: Estimate) -> dict:
    """``plausibility`` (the best published MFU of the estimate's class and whether the prediction
    exceeds it, :mod:`planner.profiles.plausibility`) and ``prediction_interval``
    (:func:`prediction_interval_dict`), both from one judgement of the estimate."""
    plausibility = _plausibility(problem, est)
    return {
        "plausibility": plausibility.as_dict(),
        "prediction_interval": prediction_interval_dict(problem, est, plausibility=plausibility),
    }


def prediction_interval_dict(
    problem: Problem, est: Estimate, framework: str | None = None, plausibility: Plausibility | None = None
) -> dict:
    """The 80% interval of the estimate's step time and tokens/s per GPU, from the held-out errors
    of its class (:mod:`planner.calibration.intervals`): GPU family (none for a cluster of several
    families), precision, dense/MoE, framework (the software profile's, else ``framework``) and GPU
    count; one class coarser when the plan is outside its class's calibration runs (its
    ``plausibility``, :func:`_plausibility`'s when not given)."""
    from planner.profiles.software import CLASSES
    from planner.profiles.uncertainty import predict_interval

    software = problem.software.name if problem.software is not None else ""
    if framework is None:
        framework = getattr(problem, "framework", "any")
    fw = CLASSES[software][0] if software in CLASSES else framework
    if plausibility is None:
        plausibility = _plausibility(problem, est)
    iv = predict_interval(
        problem.cluster,
        problem.job.precision,
        bool(getattr(problem.model, "is_moe", False)),
        fw,
        est.tokens_per_s_per_gpu,
        est.step_time_s,
        bool(plausibility.extrapolation),
    )
    return rounded(iv.as_dict())


# ------------------------------------------------------------------------------------------------
# Graph models (their pieces: planner.outputs.graph_views)


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
