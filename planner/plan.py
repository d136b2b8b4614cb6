"""Plan files: the resolved inputs, the chosen configuration with its exact layer partition, the
predictions and the bubble-fill budget, versioned (``schema_version``) and strict on read.

A plan file is YAML or JSON by extension. Its ``model`` and ``cluster`` sections are themselves
valid planner model and cluster files. ``predictions`` and ``bubble_fill_budget`` are outputs:
they are re-computed, never trusted, when a plan is read back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES, ParallelConfig
from planner import __version__
from planner.errors import SpecError
from planner.loading import (
    SCHEMA_VERSION,
    Reader,
    _check_header,
    cluster_from_mapping,
    cluster_to_mapping,
    job_from_mapping,
    model_from_mapping,
    read_document,
)
from planner.specs import ClusterSpec, JobSpec, ModelSpec

MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "vocab_size",
    "max_position_embeddings",
    "activation",
    "normalization",
    "position_embedding_type",
    "untie_embeddings_and_output_weights",
    "add_bias_linear",
    "add_qkv_bias",
    "qk_layernorm",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_expert_capacity_factor",
)


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What a plan file fixes: everything needed to re-estimate or export it."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    config: ParallelConfig
    stage_groups: tuple[int, ...] = ()


def model_to_mapping(m: ModelSpec) -> dict:
    out = {"schema_version": SCHEMA_VERSION, "kind": "model", "name": m.name}
    out.update({f: getattr(m, f) for f in MODEL_FIELDS})
    return out


def config_to_mapping(c: ParallelConfig) -> dict:
    return {
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "cp": c.cp,
        "ep": c.ep,
        "etp": c.expert_tp,
        "vpp": c.vpp,
        "micro_batch_size": c.micro_batch_size,
        "recompute": c.recompute,
        "recompute_num_layers": c.recompute_num_layers,
        "sequence_parallel": c.sp,
        "optimizer_sharding": c.optimizer_sharding,
        "schedule": c.schedule,
        "layers_per_stage": list(c.layers_per_stage),
    }


def config_from_mapping(data: dict, where: str) -> ParallelConfig:
    r = Reader(data, where, "config")
    c = ParallelConfig(
        tp=r.get("tp", int, positive=True),
        pp=r.get("pp", int, positive=True),
        dp=r.get("dp", int, positive=True),
        cp=r.get("cp", int, 1, positive=True),
        ep=r.get("ep", int, 1, positive=True),
        etp=r.get("etp", int, 0),
        vpp=r.get("vpp", int, 1, positive=True),
        micro_batch_size=r.get("micro_batch_size", int, positive=True),
        recompute=r.get("recompute", str, "none", choices=RECOMPUTE),
        recompute_num_layers=r.get("recompute_num_layers", int, 0),
        sequence_parallel=r.get("sequence_parallel", bool, True),
        optimizer_sharding=r.get("optimizer_sharding", str, "distributed", choices=OPTIMIZER_SHARDING),
        schedule=r.get("schedule", str, "1f1b", choices=SCHEDULES),
        layers_per_stage=tuple(r.get("layers_per_stage", list, [])),
    )
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in c.layers_per_stage):
        raise SpecError(f"{where}: key 'config.layers_per_stage': expected a list of integers")
    r.done()
    return c


def job_to_mapping(job: JobSpec) -> dict:
    """The job section of a plan file (read back by :func:`planner.loading.job_from_mapping`)."""
    return {
        "global_batch_size": job.global_batch_size,
        "seq_length": job.seq_length,
        "precision": job.precision,
        "optimizer": job.optimizer,
        "grad_dtype": job.grad_dtype,
        "master_dtype": job.master_dtype,
        "overlap_grad_reduce": job.overlap_grad_reduce,
        "overlap_param_gather": job.overlap_param_gather,
    }


def plan_document(inputs: PlanInputs, predictions: dict, budget: dict | None) -> dict:
    """The full plan as plain data."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "plan",
        "planner_version": __version__,
        "model": model_to_mapping(inputs.model),
        "cluster": cluster_to_mapping(inputs.cluster),
        "job": job_to_mapping(inputs.job),
        "config": config_to_mapping(inputs.config),
        "stage_groups": list(inputs.stage_groups),
        "predictions": predictions,
    }
    if budget is not None:
        doc["bubble_fill_budget"] = budget
    return doc


def write_plan(path: Path, doc: dict) -> None:
    """Write YAML (.yaml/.yml) or JSON (.json) atomically: a failed write never clobbers the file."""
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise SpecError(f"{path}: plan files end in .yaml, .yml or .json")
    text = (
        json.dumps(doc, indent=2, sort_keys=True) + "\n"
        if suffix == ".json"
        else yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, width=100)
    )
    write_text_atomic(path, text)


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename: a failed write never clobbers ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SpecError(f"{path}: cannot write: {exc.strerror}") from None


def open_plan(path: str | Path, kind: str) -> tuple[Reader, str]:
    """A strict reader over a plan file of ``kind`` (header checked) and the file's name."""
    p = Path(path)
    where = str(p)
    r = Reader(read_document(p), where)
    _check_header(r, kind)
    r.get("planner_version", str, "")
    return r, where


def read_plan(path: str | Path) -> PlanInputs:
    """Read a plan file strictly back into its inputs."""
    r, where = open_plan(path, "plan")
    model = model_from_mapping(r.get("model", dict), f"{where} (model)")
    cluster = cluster_from_mapping(r.get("cluster", dict), f"{where} (cluster)")
    job = job_from_mapping(r.get("job", dict), where)
    config = config_from_mapping(r.get("config", dict), where)
    groups = tuple(r.get("stage_groups", list, []))
    r.get("predictions", dict, {})
    r.get("bubble_fill_budget", dict, {})
    r.done()
    return PlanInputs(model, cluster, job, config, groups)
