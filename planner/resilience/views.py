"""JSON-ready views of whatif and goodput results (stable key order, finite numbers or null)."""

from __future__ import annotations

from planner import __version__
from planner.outputs.views import SCHEMA_VERSION
from planner.plans.plan_file import PlanInputs
from planner.resilience.goodput import FailureModel
from planner.resilience.spares import PlanGoodput, SparesOption
from planner.resilience.strategies import StrategyResult, WhatIf


def plan_brief(inputs: PlanInputs) -> dict:
    """The plan's model, cluster, shape and framework in one line of data."""
    c = inputs.config
    node = inputs.cluster.groups[0]
    return {
        "model": inputs.model.name,
        "cluster": inputs.cluster.name,
        "gpu": node.gpu.name,
        "num_nodes": node.num_nodes,
        "gpus_per_node": node.gpus_per_node,
        "nvlink_domain_size": node.nvlink_domain_size,
        "num_gpus": inputs.cluster.num_gpus,
        "framework": inputs.framework,
        "tp": c.tp,
        "pp": c.pp,
        "cp": c.cp,
        "dp": c.dp,
        "vpp": c.vpp,
        "micro_batch_size": c.micro_batch_size,
        "num_microbatches": c.num_microbatches(inputs.job),
        "global_batch_size": inputs.job.global_batch_size,
        "seq_length": inputs.job.seq_length,
        "schedule": c.schedule,
        "optimizer_sharding": c.optimizer_sharding,
    }


def strategy_dict(s: StrategyResult) -> dict:
    """One strategy."""
    out = {
        "name": s.name,
        "variant": s.variant,
        "feasible": s.feasible,
        "tokens_per_s": s.tokens_per_s,
        "step_time_s": s.step_time_s,
        "relative": s.relative,
        "gpus_used": s.gpus_used,
        "global_batch_size": s.global_batch_size,
        "fits": s.fits,
        "replicas": [{"tp": t, "count": n, "microbatches": m} for t, n, m in s.replicas],
        "note": s.note,
    }
    if s.config:
        out["config"] = dict(s.config)
    return out


def whatif_dict(inputs: PlanInputs, w: WhatIf) -> dict:
    """The JSON of ``planner whatif``: ``healthy`` and ``strategies`` as issue 15 specifies."""
    d = w.damage
    return {
        "schema_version": SCHEMA_VERSION,
        "planner_version": __version__,
        "plan": plan_brief(inputs),
        "failure": {
            "gpus": w.failure.gpus,
            "nodes": w.failure.nodes,
            "failed_ranks": list(d.failed_ranks),
            "failed_nodes": list(d.failed_nodes),
            "hit_replicas": [{"replica": r, "surviving_tp_gpus": n} for r, n in d.survivors],
            "packed_hit_stages": [
                {"replica": r, "pipeline_rank": s, "surviving_tp_gpus": n} for r, s, n in w.packed.stages
            ]
            if w.packed is not None
            else [],
        },
        "healthy": {
            "tokens_per_s": w.healthy.tokens_per_s,
            "step_time_s": w.healthy.step_time_s,
            "gpus": inputs.cluster.num_gpus,
        },
        "strategies": [strategy_dict(s) for s in w.strategies],
    }


def failure_model_dict(fm: FailureModel) -> dict:
    """The failure model's inputs."""
    return {
        "gpu_failure_rate_per_h": fm.gpu_failure_rate_per_h,
        "checkpoint_write_bytes_per_s": fm.checkpoint_write_bytes_per_s,
        "checkpoint_read_bytes_per_s": fm.checkpoint_read_bytes_per_s,
        "restart_s": fm.restart_s,
        "repair_h": fm.repair_h,
        "run_days": fm.run_days,
        "checkpoint_interval_s": fm.checkpoint_interval_s or None,
    }


def _option(o: SparesOption) -> dict:
    return {
        "spare_nodes": o.spares,
        "replicas": o.replicas,
        "tokens_per_s": o.tokens_per_s,
        "useful_fraction": o.useful_fraction,
        "availability": o.availability,
        "goodput_tokens_per_s": o.goodput_tokens_per_s,
    }


def goodput_summary(g: PlanGoodput) -> dict:
    """The figures one plan is ranked by (also attached to ``search --failure-aware`` plans)."""
    ck = g.checkpointing
    return {
        "healthy_tokens_per_s": g.healthy_tokens_per_s,
        "goodput_tokens_per_s": g.best.goodput_tokens_per_s,
        "goodput_fraction": g.goodput_fraction,
        "best_spare_nodes": g.best.spares,
        "useful_fraction": ck.useful_fraction,
        "checkpoint_interval_s": ck.interval_s,
        "mtbf_s": ck.mtbf_s,
    }


def goodput_dict(inputs: PlanInputs, fm: FailureModel, g: PlanGoodput) -> dict:
    """The JSON of ``planner goodput``."""
    ck = g.checkpointing
    return {
        "schema_version": SCHEMA_VERSION,
        "planner_version": __version__,
        "plan": plan_brief(inputs),
        "failure_model": failure_model_dict(fm),
        "failures_per_day": g.failures_per_day,
        "checkpoint": {
            "bytes": ck.checkpoint_bytes,
            "restore_bytes": ck.restore_bytes,
            "save_s": ck.save_s,
            "restore_s": ck.restore_s,
            "restart_s": ck.restart_s,
            "mtbf_s": ck.mtbf_s,
            "young_interval_s": ck.young_interval_s,
            "daly_interval_s": ck.daly_interval_s,
            "interval_s": ck.interval_s,
            "useful_fraction": ck.useful_fraction,
        },
        "spares": [_option(o) for o in g.options],
        "best": _option(g.best),
        "summary": goodput_summary(g),
    }
