"""Strict loading of jobs (what is trained per step, with which numerics) from flags and plan
files: every error names where, the key and the allowed values (:class:`~planner.inputs.errors.SpecError`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.documents import Reader
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import (
    ATTENTION_IMPLS,
    CUDA_GRAPH_SCOPES,
    DTYPES,
    EAGER_OPS,
    FINETUNES,
    FP8_RECIPES,
    FROZEN_WEIGHT_DTYPES,
    LORA_TARGET_GROUPS,
    LORA_TARGETS,
    MOE_DISPATCHERS,
    PRECISIONS,
    SHARDED_GRAD_REDUCES,
    JobSpec,
)
from planner.inputs.validation import check_number, limit


def make_job(
    *,
    global_batch_size: int,
    seq_length: int,
    precision: str = "bf16",
    where: str = "command line",
    **kwargs: Any,
) -> JobSpec:
    """A validated :class:`JobSpec` (from flags or a plan file)."""
    check_number(global_batch_size, where, "global_batch_size", integer=True, positive=True)
    check_number(seq_length, where, "seq_length", integer=True, positive=True)
    if precision not in PRECISIONS:
        raise SpecError(
            f"{where}: precision {precision!r} is not allowed; allowed values: {', '.join(PRECISIONS)}"
        )
    if kwargs.get("grad_dtype") is None:
        kwargs["grad_dtype"] = default_grad_dtype(precision)
    for key in ("grad_dtype", "master_dtype", "optimizer_state_dtype"):
        if key in kwargs and kwargs[key] not in DTYPES:
            raise SpecError(
                f"{where}: {key} {kwargs[key]!r} is not allowed; allowed values: {', '.join(DTYPES)}"
            )
    if kwargs.get("moe_dispatcher", "alltoall") not in MOE_DISPATCHERS:
        raise SpecError(
            f"{where}: moe_dispatcher {kwargs['moe_dispatcher']!r} is not allowed; allowed values: "
            f"{', '.join(MOE_DISPATCHERS)}"
        )
    if "cuda_graph_scope" in kwargs:
        kwargs["cuda_graph_scope"] = cuda_graph_scope(kwargs["cuda_graph_scope"], where)
    if "eager_ops" in kwargs:
        kwargs["eager_ops"] = eager_ops_tuple(kwargs["eager_ops"], where)
    if kwargs.get("attention_impl", "fused") not in ATTENTION_IMPLS:
        raise SpecError(
            f"{where}: attention_impl {kwargs['attention_impl']!r} is not allowed; allowed values: "
            f"{', '.join(ATTENTION_IMPLS)}"
        )
    if kwargs.get("sharded_grad_reduce", "reduce_scatter") not in SHARDED_GRAD_REDUCES:
        raise SpecError(
            f"{where}: sharded_grad_reduce {kwargs['sharded_grad_reduce']!r} is not allowed; allowed values: "
            f"{', '.join(SHARDED_GRAD_REDUCES)}"
        )
    recipe = kwargs.pop("fp8_recipe", None)
    if recipe is not None:
        if recipe not in FP8_RECIPES:
            raise SpecError(
                f"{where}: fp8_recipe {recipe!r} is not allowed; allowed values: {', '.join(FP8_RECIPES)}"
            )
        if precision != "fp8":
            raise SpecError(f"{where}: fp8_recipe {recipe!r} needs precision fp8, not {precision}")
        kwargs["fp8_recipe"] = recipe
    _check_finetune(kwargs, precision, seq_length, where)
    return JobSpec(global_batch_size=global_batch_size, seq_length=seq_length, precision=precision, **kwargs)


def _check_finetune(kwargs: dict, precision: str, seq_length: int, where: str) -> None:
    """Validate the fine-tuning fields of ``kwargs`` in place (lora_targets made canonical): the
    LoRA fields only with ``finetune`` lora, FP8 base weights only with FP8 compute."""
    finetune = kwargs.get("finetune", "full")
    if finetune not in FINETUNES:
        raise SpecError(
            f"{where}: finetune {finetune!r} is not allowed; allowed values: {', '.join(FINETUNES)}"
        )
    if "lora_targets" in kwargs:
        kwargs["lora_targets"] = lora_targets_tuple(kwargs["lora_targets"], where)
    if "lora_rank" in kwargs:
        check_number(kwargs["lora_rank"], where, "lora_rank", integer=True, positive=True, maximum=65536)
    dtype = kwargs.get("frozen_weight_dtype", "bf16")
    if dtype not in FROZEN_WEIGHT_DTYPES:
        raise SpecError(
            f"{where}: frozen_weight_dtype {dtype!r} is not allowed; allowed values: "
            f"{', '.join(FROZEN_WEIGHT_DTYPES)}"
        )
    if finetune != "lora":
        for key, default in (("lora_rank", 16), ("lora_targets", LORA_TARGET_GROUPS["attention"])):
            if kwargs.get(key, default) != default:
                raise SpecError(f"{where}: {key} needs finetune lora (got finetune {finetune})")
        if dtype != "bf16":
            raise SpecError(
                f"{where}: frozen_weight_dtype {dtype} needs finetune lora (got finetune {finetune})"
            )
    if dtype == "fp8" and precision != "fp8":
        raise SpecError(f"{where}: frozen_weight_dtype fp8 needs precision fp8, not {precision}")
    if "packed_avg_doc_len" in kwargs:
        check_number(
            kwargs["packed_avg_doc_len"],
            where,
            "packed_avg_doc_len",
            integer=True,
            maximum=limit("seq_length"),
        )
        if kwargs["packed_avg_doc_len"] > seq_length:
            raise SpecError(
                f"{where}: packed_avg_doc_len {kwargs['packed_avg_doc_len']} exceeds seq_length {seq_length} "
                "(documents are packed into a sequence)"
            )


def lora_targets_tuple(values: Any, where: str) -> tuple[str, ...]:
    """LoRA target modules (names of :data:`planner.inputs.job_spec.LORA_TARGETS` or the shorthands of
    :data:`planner.inputs.job_spec.LORA_TARGET_GROUPS`; a list or one comma-separated string) in
    canonical order, or a SpecError naming ``where`` and the allowed values."""
    items = values.split(",") if isinstance(values, str) else values
    if not isinstance(items, (list, tuple)):
        raise SpecError(f"{where}: lora_targets: expected a list of module names ({', '.join(LORA_TARGETS)})")
    names: list[str] = []
    for item in items:
        word = str(item).strip()
        if word in LORA_TARGET_GROUPS:
            names.extend(LORA_TARGET_GROUPS[word])
        elif word in LORA_TARGETS:
            names.append(word)
        else:
            allowed = ", ".join((*LORA_TARGET_GROUPS, *LORA_TARGETS))
            raise SpecError(f"{where}: lora_targets: {word!r} is not allowed; allowed values: {allowed}")
    if not names:
        raise SpecError(f"{where}: lora_targets: give at least one of {', '.join(LORA_TARGETS)}")
    return tuple(t for t in LORA_TARGETS if t in names)


def finetune_mapping(job: JobSpec) -> dict:
    """The fine-tuning fields of ``job`` that differ from a pre-training job's, for plan files and
    ``--json`` (nothing for a full fine-tune of unpacked sequences, so such outputs read as before)."""
    out: dict = {}
    if job.is_lora:
        out["finetune"] = job.finetune
        out["lora_rank"] = job.lora_rank
        out["lora_targets"] = list(job.lora_targets)
        out["frozen_weight_dtype"] = job.frozen_weight_dtype
    if job.packed_avg_doc_len:
        out["packed_avg_doc_len"] = job.packed_avg_doc_len
    return out


def default_grad_dtype(precision: str) -> str:
    """Dtype in which gradients are accumulated and reduced across data-parallel ranks when the job
    does not say: 16-bit for fp16 training, fp32 otherwise. Megatron-LM reduces fp16 gradients in
    fp16 unless ``--accumulate-allreduce-grads-in-fp32`` is given, and forces fp32 for bf16 unless
    ``--grad-reduce-in-bf16`` (megatron/training/arguments.py, ``validate_args``; the distributed
    optimizer's table "fp16 parameters, fp16 gradients" vs "bf16 parameters, fp32 gradients",
    docs/user-guide/features/dist_optimizer.md)."""
    return "fp16" if precision == "fp16" else "fp32"


def cuda_graph_scope(values: Any, where: str) -> tuple[str, ...]:
    """Validated CUDA graph scopes (:data:`planner.inputs.job_spec.CUDA_GRAPH_SCOPES`), sorted and deduplicated
    so equal settings compare equal; ``none`` (alone) is the empty tuple."""
    items = [values] if isinstance(values, str) else list(values or ())
    items = [str(v).strip() for v in items if str(v).strip() and str(v).strip() != "none"]
    bad = [v for v in items if v not in CUDA_GRAPH_SCOPES]
    if bad:
        raise SpecError(
            f"{where}: cuda_graph_scope {bad[0]!r} is not allowed; allowed values: "
            f"none, {', '.join(CUDA_GRAPH_SCOPES)}"
        )
    if "moe_preprocess" in items and "moe_router" not in items:
        raise SpecError(
            f"{where}: cuda_graph_scope moe_preprocess needs moe_router too (Megatron-Core: "
            '\'"moe_preprocess" ... must be used together with "moe_router"\')'
        )
    return tuple(sorted(set(items), key=CUDA_GRAPH_SCOPES.index))


def eager_ops_tuple(ops: Any, where: str, key: str = "eager_ops") -> tuple[str, ...]:
    """``ops`` (names of :data:`planner.inputs.job_spec.EAGER_OPS`, any order, no repeats) in canonical order,
    or a SpecError naming ``where``, ``key`` and the allowed values."""
    if isinstance(ops, str) or not isinstance(ops, (list, tuple)):
        raise SpecError(f"{where}: {key}: expected a list of op groups ({', '.join(EAGER_OPS)})")
    for op in ops:
        if op not in EAGER_OPS:
            raise SpecError(f"{where}: {key}: {op!r} is not allowed; allowed values: {', '.join(EAGER_OPS)}")
    if len(set(ops)) != len(ops):
        raise SpecError(f"{where}: {key}: an op group is listed twice: {', '.join(ops)}")
    return tuple(op for op in EAGER_OPS if op in ops)


def job_from_mapping(data: dict, where: str) -> JobSpec:
    """A job from a mapping (the ``job`` section of a plan file). An FP8 job without ``fp8_recipe``
    was planned before the field existed, when every FP8 plan was priced and exported with delayed
    scaling (``--fp8-recipe delayed``): it reads as ``delayed``."""
    r = Reader(data, where, "job")
    precision = r.get("precision", str, "bf16", choices=PRECISIONS)
    recipe = r.get("fp8_recipe", str, None, choices=FP8_RECIPES)
    if recipe is None and precision == "fp8":
        recipe = "delayed"
    job = make_job(
        global_batch_size=r.get("global_batch_size", int, positive=True),
        seq_length=r.get("seq_length", int, positive=True),
        precision=precision,
        fp8_recipe=recipe,
        optimizer=r.get("optimizer", str, "adam", choices=("adam",)),
        grad_dtype=r.get("grad_dtype", str, None, choices=DTYPES),
        master_dtype=r.get("master_dtype", str, "fp32", choices=DTYPES),
        optimizer_state_dtype=r.get("optimizer_state_dtype", str, "fp32", choices=DTYPES),
        overlap_grad_reduce=r.get("overlap_grad_reduce", bool, True),
        overlap_param_gather=r.get("overlap_param_gather", bool, True),
        gradient_accumulation_fusion=r.get("gradient_accumulation_fusion", bool, True),
        tp_comm_overlap=r.get("tp_comm_overlap", bool, False),
        moe_dispatcher=r.get("moe_dispatcher", str, "alltoall", choices=MOE_DISPATCHERS),
        moe_a2a_overlap=r.get("moe_a2a_overlap", bool, False),
        cuda_graph_scope=r.get("cuda_graph_scope", (list, str), []),
        eager_ops=eager_ops_tuple(r.get("eager_ops", list, []), where, "key 'job.eager_ops'"),
        attention_impl=r.get("attention_impl", str, "fused", choices=ATTENTION_IMPLS),
        pipeline_scatter_gather=r.get("pipeline_scatter_gather", bool, False),
        sharded_grad_reduce=r.get("sharded_grad_reduce", str, "reduce_scatter", choices=SHARDED_GRAD_REDUCES),
        finetune=r.get("finetune", str, "full", choices=FINETUNES),
        lora_rank=r.get("lora_rank", int, 16, positive=True),
        lora_targets=r.get("lora_targets", (list, str), list(LORA_TARGET_GROUPS["attention"])),
        frozen_weight_dtype=r.get("frozen_weight_dtype", str, "bf16", choices=FROZEN_WEIGHT_DTYPES),
        packed_avg_doc_len=r.get("packed_avg_doc_len", int, 0),
        where=where,
    )
    r.done()
    return job
