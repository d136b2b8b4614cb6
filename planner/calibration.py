"""Published training runs as prediction cases: turn each run of ``published_runs.yaml`` into
(model, cluster, job, configuration, measured tokens/s per GPU), with every assumption recorded.

The data file is a copy of ../shared/calibration/published_runs.yaml (each run carries its
citation). Sources count FLOPs differently, so the measured figure compared is tokens/s per GPU,
derived in this order: the source's tokens/s; else global batch x sequence / (step time x GPUs);
else the source's TFLOP/s divided by the FLOPs per token *by the source's own counting* (Narayanan
et al. 2021 eq. 3 with recompute; BigScience's 8 x params; Megatron-LM's model-FLOP counter).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from cost_models.estimate import Estimate, estimate
from cost_models.layers import model_flop_per_iteration
from cost_models.parallel import ParallelConfig, resolve
from planner.errors import PlannerError
from planner.loading import load_cluster, load_gpu, make_job
from planner.specs import ClusterSpec, JobSpec, ModelSpec

DEFAULT_RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_runs.yaml"
DEFAULT_MEMORY = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_memory.yaml"


def measured_memory(path: Path = DEFAULT_MEMORY) -> dict[str, float]:
    """Measured peak memory per GPU (bytes) by run id, from published_memory.yaml's
    ``measured_memory`` (torchtitan's logged peaks; see each entry's ``memory_metric``)."""
    data = yaml.safe_load(Path(path).read_text())
    return {
        m["run_id"]: m["peak_memory_gib"] * 2**30
        for m in data.get("measured_memory", [])
        if m.get("run_id") and m.get("peak_memory_gib")
    }


EXCLUDED = {
    "narayanan2021_t2_zero3_": (
        "DeepSpeed ZeRO-3 (2021): its parameter gathers ran far below NCCL ring bandwidth (step time "
        "flat from 384 to 1536 GPUs); planner's 'full' sharding models FSDP2 / Megatron-FSDP"
    ),
}
"""Runs shown in the validation table but left out of the error statistics and the fit, with why."""


def excluded_reason(run_id: str) -> str:
    """Why ``run_id`` is left out of the statistics ('' when it is not)."""
    return next((why for prefix, why in EXCLUDED.items() if run_id.startswith(prefix)), "")


@dataclass(frozen=True)
class Case:
    """One published run ready to predict, or the reason it cannot be."""

    run_id: str
    gpu: str
    """GPU type name (the calibration group)."""
    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    job: JobSpec | None = None
    config: ParallelConfig | None = None
    measured_tokens_per_s_per_gpu: float = 0.0
    measured_from: str = ""
    assumptions: tuple[str, ...] = ()
    skip_reason: str = ""


def _family(gpu: str) -> str:
    g = gpu.lower()
    for fam in ("a100", "h100", "h200", "b200", "mi300x"):
        if fam in g:
            return fam
    return g


def _cluster(hw: dict, total: int, notes: list[str]) -> ClusterSpec:
    gpu = hw["gpu"].lower()
    mem_gb = hw.get("gpu_memory_gb") or 80
    nodes = max(1, total // 8)
    if total % 8:
        raise PlannerError(f"{total} GPUs is not a whole number of 8-GPU nodes")
    if "a100" in gpu:
        return load_cluster("dgx-a100-40gb" if mem_gb == 40 else "dgx-a100", nodes)
    if "h100" in gpu:
        cluster = load_cluster("dgx-h100", nodes)
        if mem_gb == 96:
            notes.append("H100 96GB HBM2e variant (h100-sxm5-96gb)")
            group = replace(cluster.groups[0], gpu=load_gpu("h100-sxm5-96gb"))
            cluster = replace(cluster, groups=(group,))
        return cluster
    raise PlannerError(f"no node template for GPU {hw['gpu']!r}")


def _model(run_id: str, mb: dict, notes: list[str]) -> ModelSpec:
    h = mb["hidden_size"]
    heads = mb["num_attention_heads"]
    act = mb.get("activation") or "gelu"
    if mb.get("activation") is None:
        notes.append("activation gelu assumed")
    if act == "relu":
        act = "relu"
    ffn = mb.get("ffn_hidden_size")
    if ffn is None:
        ffn = 4 * h
        notes.append("ffn = 4h assumed")
    vocab = mb.get("vocab_size")
    if vocab is None:
        vocab = 256000 if act == "squared_relu" else 51200
        notes.append(f"vocab {vocab} assumed")
    llama_like = act == "swiglu" or (mb.get("num_query_groups") not in (None, heads))
    moe = mb.get("moe") or {}
    return ModelSpec(
        name=mb.get("name", run_id),
        num_layers=mb["num_layers"],
        hidden_size=h,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=mb.get("num_query_groups") or heads,
        kv_channels=h // heads,
        vocab_size=vocab,
        max_position_embeddings=mb.get("seq_length") or 8192,
        activation=act,
        normalization="rmsnorm" if act == "swiglu" else "layernorm",
        position_embedding_type="rope" if llama_like or act == "squared_relu" else "learned_absolute",
        untie_embeddings_and_output_weights=llama_like or act == "squared_relu",
        add_bias_linear=not (llama_like or act == "squared_relu"),
        num_experts=moe.get("num_experts", 0) if moe else 0,
        moe_router_topk=moe.get("topk", 0) if moe else 0,
        moe_ffn_hidden_size=moe.get("moe_ffn_hidden_size", 0) if moe else 0,
    )


def _measured(run: dict, model: ModelSpec, job: JobSpec, gpus: int) -> tuple[float, str]:
    x = run["measured"]
    if x.get("tokens_per_sec_per_gpu"):
        return float(x["tokens_per_sec_per_gpu"]), "tokens/s"
    if x.get("step_time_s"):
        return job.tokens_per_step / (x["step_time_s"] * gpus), "step time"
    tflops, counting = x.get("tflops_per_gpu"), x.get("flops_counting") or ""
    if not tflops:
        return 0.0, ""
    L, h, s, V = model.num_layers, model.hidden_size, job.seq_length, model.vocab_size
    if "eq.(3)" in counting:
        per_token = 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        return tflops * 1e12 / per_token, "TFLOP/s by Narayanan eq. 3"
    if "BigScience" in counting:
        per_token = 8 * run["model"]["params_b"] * 1e9
        return tflops * 1e12 / per_token, "TFLOP/s by BigScience 8 x params"
    if "Megatron-LM training-loop" in counting:
        per_token = model_flop_per_iteration(model, job) / job.tokens_per_step
        return tflops * 1e12 / per_token, "TFLOP/s by Megatron model FLOPs"
    return 0.0, ""


def cases(path: Path = DEFAULT_RUNS) -> list[Case]:
    """All runs of the calibration file as :class:`Case` values, in file order."""
    data = yaml.safe_load(Path(path).read_text())
    out = []
    for run in data["runs"]:
        rid, hw, par = run["id"], run["hardware"], run["parallel"]
        fam = _family(hw["gpu"])
        notes: list[str] = []
        try:
            if par.get("tp") is None or par.get("pp") is None:
                raise PlannerError("parallel degrees not published")
            model = _model(rid, run["model"], notes)
            seq = run["model"].get("seq_length")
            if seq is None:
                seq = 8192
                notes.append("seq 8192 assumed (torchtitan default)")
            prec_text = str(par.get("precision") or "bf16").lower()
            precision = (
                "fp8"
                if ("fp8" in prec_text or "float8" in prec_text)
                else ("fp16" if "fp16" in prec_text and "bf16" not in prec_text else "bf16")
            )
            job = make_job(global_batch_size=par["global_batch_size"], seq_length=seq, precision=precision)
            cluster = _cluster(hw, hw["total_gpus"], notes)
            rec_text = str(par.get("recompute") or "none").lower()
            recompute = (
                "full"
                if ("full" in rec_text or "unknown" in rec_text)
                else ("selective" if "selective" in rec_text else "none")
            )
            if "unknown" in rec_text:
                notes.append("full recompute assumed")
            tp, pp, cp = par["tp"], par["pp"], par.get("cp") or 1
            if par.get("zero_stage") == 3 or par.get("fsdp") or "ZeRO-3" in rec_text or "zero-3" in rec_text:
                sharding = "full"
            elif par.get("distributed_optimizer") is True:
                sharding = "distributed"
            elif par.get("distributed_optimizer") is False:
                sharding = "none"
            else:
                sharding = "distributed" if fam != "a100" else "none"
                notes.append(f"optimizer sharding {sharding} assumed")
            if rid.startswith("torchtitan") or "fsdp" in str(par.get("notes", "")).lower():
                # torchtitan shards with FSDP2 (its README); with pp > 1 planner models it as ZeRO-1.
                sharding = "full" if pp == 1 else "distributed"
                notes.append(f"FSDP2 modelled as '{sharding}' sharding")
            elif par.get("zero_stage") == 1:
                sharding = "distributed"
            vpp = par.get("vpp") or 1
            mbs = par.get("micro_batch_size")
            if mbs is None:
                mbs = 1
                notes.append("micro-batch size 1 assumed")
            sp = par.get("sequence_parallel")
            if sp is None:
                sp = tp > 1
            config = ParallelConfig(
                tp=tp,
                pp=pp,
                cp=cp,
                ep=par.get("ep") or 1,
                vpp=vpp,
                micro_batch_size=mbs,
                recompute=recompute,
                sequence_parallel=bool(sp),
                optimizer_sharding=sharding,
                schedule="interleaved" if vpp > 1 else "1f1b",
            )
            n_virtual = pp * vpp
            if model.num_layers % n_virtual:
                base, extra = divmod(model.num_layers, n_virtual)
                config = config.with_(
                    layers_per_stage=tuple(base + (1 if i < extra else 0) for i in range(n_virtual))
                )
                notes.append("balanced uneven layer split assumed")
            config = resolve(model, cluster, job, config)
            measured, how = _measured(run, model, job, cluster.num_gpus)
            if not measured:
                raise PlannerError("no throughput figure comparable in tokens/s")
            out.append(
                Case(
                    rid, cluster.groups[0].gpu.name, model, cluster, job, config, measured, how, tuple(notes)
                )
            )
        except PlannerError as exc:
            out.append(Case(rid, fam, skip_reason=str(exc)))
    return out


@dataclass(frozen=True)
class Result:
    """A case with its prediction."""

    case: Case
    estimate: Estimate

    @property
    def predicted(self) -> float:
        return self.estimate.tokens_per_s_per_gpu

    @property
    def error(self) -> float:
        """Absolute relative error of tokens/s per GPU."""
        return (
            abs(self.predicted - self.case.measured_tokens_per_s_per_gpu)
            / self.case.measured_tokens_per_s_per_gpu
        )


def predict_all(all_cases: list[Case]) -> list[Result]:
    """Predict every usable case."""
    return [Result(c, estimate(c.model, c.cluster, c.job, c.config)) for c in all_cases if not c.skip_reason]


def summary(results: list[Result]) -> dict[str, float]:
    """Median and 90th percentile of the absolute errors (nearest-rank percentile)."""
    errors = sorted(r.error for r in results)
    if not errors:
        return {"count": 0, "median": float("nan"), "p90": float("nan")}
    p90 = errors[min(len(errors) - 1, max(0, int(round(0.9 * len(errors))) - 1))]
    return {"count": len(errors), "median": statistics.median(errors), "p90": p90}
