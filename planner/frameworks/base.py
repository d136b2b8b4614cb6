"""A training framework as part of the problem statement: what it runs at a pinned version.

A plan the search ranks first is only useful if the framework the user runs can launch it. Each
framework declares its :class:`Capabilities` (schedules, optimizer/gradient/parameter sharding,
recompute forms, context/expert parallelism, uneven layer splits, precisions, mixed GPU types) at
a pinned version; :meth:`Framework.violations` turns them into reasons a configuration is out of
the framework's space. The search enumerates only configurations with no violation, ``check``
compares a launch with the best plan of the same framework, and plan files record the framework
and its version.

``any`` is the model's whole space (every schedule and sharding the cost model knows): for
research, never for export.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cost_models.parallel import OPTIMIZER_SHARDING, PP_DP, RANK_ORDERS, RECOMPUTE, SCHEDULES, ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import SpecError, UsageError
from planner.inputs.job_spec import (
    ATTENTION_IMPLS,
    FP8_RECIPES,
    MOE_DISPATCHERS,
    SHARDED_GRAD_REDUCES,
    JobSpec,
)
from planner.inputs.model_spec import ModelSpec


def stage_size(c: ParallelConfig, num_layers: int) -> int:
    """Layers of the largest (virtual) pipeline stage of ``c``."""
    if c.layers_per_stage:
        return max(c.layers_per_stage)
    return -(-num_layers // (c.pp * c.vpp))


def every_nth(k: int, stage: int) -> int:
    """The n (>= 2) whose every-n-th-block checkpointing recomputes ``k`` of a ``stage``-layer
    stage (``stage // n == k``), preferring the n that divides the stage exactly; 0 if none.
    Of the n with ``stage // n == k`` (an interval), the largest is ``stage // k``."""
    if k < 1 or k >= stage:
        return 0
    n = stage // k
    return n if n >= 2 and stage // n == k else 0


def every_nth_counts(stage: int) -> list[int]:
    """Layer counts every-n-th-block checkpointing can recompute in a ``stage``-layer stage."""
    return sorted({stage // n for n in range(2, stage + 1)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What one framework version runs. Names are the cost model's (``cost_models.parallel``)."""

    schedules: tuple[str, ...]
    """Pipeline schedules it runs (1f1b, interleaved, gpipe, zb-h1, zb-h2, zb-v)."""
    optimizer_sharding: tuple[str, ...]
    """Sharding modes it runs: none, distributed (ZeRO-1), zero2, full (ZeRO-3 / FSDP)."""
    sharding_with_pipeline: tuple[str, ...]
    """Sharding modes it combines with pp > 1."""
    recompute: tuple[str, ...]
    """Recompute forms (``cost_models.parallel.RECOMPUTE``): none, selective, op, full."""
    partial_recompute: bool
    """Full recompute of any number of layers per stage (Megatron ``--recompute-num-layers``)."""
    sequence_parallel_optional: bool
    """False when tensor parallelism always shards norms/dropout over the sequence (SP on)."""
    context_parallel: bool
    expert_parallel: bool
    uneven_layers: bool
    """Stages may hold different numbers of layers."""
    uneven_interleaved: bool
    """Uneven layer counts also with virtual pipeline stages."""
    precisions: tuple[str, ...]
    heterogeneous_gpus: bool
    """One job over node groups of different GPU types, each stage on the type the plan chose."""
    tp_comm_overlap: bool = False
    """Its exported launch can overlap sequence-parallel collectives with GEMMs
    (``JobSpec.tp_comm_overlap``)."""
    hsdp: bool = False
    """Hybrid sharding (``ParallelConfig.fsdp_shard``): FSDP inside a shard group, replicas across."""
    rank_orders: tuple[str, ...] = (RANK_ORDERS[0],)
    """Rank layouts its launch can select (``ParallelConfig.rank_order``)."""
    pp_dp_order_same_expert_dp: bool = False
    """With the ``tp-cp-ep-pp-dp`` order and pp > 1, the expert grid's data-parallel degree must
    equal the dense one's (megatron-core 0.19.2 ``initialize_model_parallel``: "When not using
    pp-last rank ordering, the data parallel size of the attention and moe layers must be the
    same"; dense models too, whose expert grid has ep 1 and expert tp = tp, so cp must be 1)."""
    partial_distributed_optimizer: bool = False
    """The distributed optimizer sharded inside instances of dp*cp/N ranks and replicated across N
    (``ParallelConfig.optimizer_instances``; Megatron ``--num-distributed-optimizer-instances``)."""
    moe_dispatchers: tuple[str, ...] = ("alltoall",)
    """MoE token dispatchers its launch can select (``JobSpec.moe_dispatcher``)."""
    moe_a2a_overlap: bool = False
    """Hides expert-parallel all-to-alls under another micro-batch (``JobSpec.moe_a2a_overlap``),
    under Megatron-Core's conditions (TransformerConfig: ep > 1, alltoall or flex dispatcher,
    virtual stages when pp > 1, no full recompute)."""
    cuda_graphs: bool = False
    """Its launch can capture CUDA graphs (``JobSpec.cuda_graph_scope``)."""
    grad_dtypes: tuple[tuple[str, str], ...] | None = None
    """(precision, gradient reduction dtype) pairs its launch can set (``JobSpec.grad_dtype``);
    ``None`` = any."""
    optimizer_dtypes: tuple[tuple[str, str], ...] | None = None
    """(master weight, Adam moment) dtype pairs its optimizer can hold (``JobSpec.master_dtype``,
    ``JobSpec.optimizer_state_dtype``); ``None`` = any."""
    optimizer_dtypes_sharding: tuple[str, ...] | None = None
    """Optimizer shardings (``ParallelConfig.optimizer_sharding``) under which dtypes other than
    fp32 / fp32 can be set; ``None`` = any."""
    eager_ops: tuple[tuple[str, ...], ...] | None = ((),)
    """The sets of eager elementwise op groups (``JobSpec.eager_ops``) its launches run: ``((),)``
    always fused, ``None`` any set."""
    attention_impls: tuple[str, ...] = ("fused",)
    """Core attention implementations (``JobSpec.attention_impl``) its launch can select."""
    unfused_grad_accumulation: bool = False
    """Its launch can turn off fused weight-gradient accumulation
    (``JobSpec.gradient_accumulation_fusion`` False; Megatron ``--no-gradient-accumulation-fusion``)."""
    fp8_recipes: tuple[str, ...] = FP8_RECIPES
    """FP8 scaling recipes (``JobSpec.fp8_recipe``) its launch can select."""
    pipeline_scatter_gather: bool = False
    """Without sequence parallelism, its pipeline sends are scattered over the tensor-parallel ranks
    and all-gathered by the receivers (``JobSpec.pipeline_scatter_gather``); Megatron-Core and
    torch's pipelining send whole tensors."""
    sharded_grad_reduces: tuple[str, ...] = ("reduce_scatter",)
    """How its distributed (ZeRO-1) optimizer reduces gradients (``JobSpec.sharded_grad_reduce``):
    Megatron-Core and torchtitan reduce-scatter them."""
    activation_offload: bool = False
    """Its launch can offload the first layers' activations to host memory
    (``ParallelConfig.offload_layers``; Megatron ``--cpu-offloading-num-layers``)."""
    recompute_modules: bool = False
    """Selective recompute of modules other than core attention (Megatron-Core
    ``--recompute-modules``; ``ParallelConfig.recompute_modules``)."""
    every_nth_recompute: bool = False
    """Full recompute of every n-th block (n >= 2) instead of any number of layers: a stage of S
    layers recomputes ``S // n`` (torchtitan ``selective_ac_option = "<n>"``; :func:`every_nth`)."""

    lora: bool = False
    """It trains LoRA adapters on a frozen base (``JobSpec.finetune`` lora)."""

    def eager_text(self) -> str:
        """The eager op sets it runs, in words (for refusals)."""
        if self.eager_ops is None:
            return "any elementwise op groups eager or fused"
        return " or ".join(
            "every elementwise op fused" if not ops else f"{','.join(ops)} eager" for ops in self.eager_ops
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Framework:
    """A framework at a pinned version, with the source its capabilities were read from."""

    name: str
    """Short name used on the command line and in plan files: megatron, torchtitan, any."""
    title: str
    """Human name with the pinned version, e.g. 'Megatron-LM (megatron-core 0.15.0)'."""
    version: str
    """The pinned release the capabilities describe."""
    capabilities: Capabilities
    source: str
    """Where the capabilities were read (files of the pinned release)."""
    exportable: bool = True
    """False for ``any`` (no launcher runs the whole space)."""

    def violations(
        self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
    ) -> list[str]:
        """Why the framework cannot run ``c`` (empty when it can). Each reason names the framework."""
        cap, who = self.capabilities, self.title
        return [
            *_finetune(cap, who, job),  # first: no layout helps a framework that trains no adapters
            *_schedule_and_sharding(cap, who, c),
            *_recompute(cap, who, model, c),
            *_parallelism(cap, who, c),
            *_precision(cap, who, job),
            *_placement(cap, who, cluster, c),
            *_overlaps(cap, who, model, job, c),
            *_dtypes(cap, who, job, c),
            *_kernels(cap, who, job),
            *_offload_and_transfers(cap, who, job, c),
        ]

    def require(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> None:
        """Raise SpecError naming the first reason ``c`` cannot run here."""
        reasons = self.violations(model, cluster, job, c)
        if reasons:
            raise SpecError(f"{reasons[0]}; re-run planner search with --framework {self.name}")

    def check_choices(self, flag: str, chosen: tuple[str, ...] | None, allowed: tuple[str, ...]) -> None:
        """A user's ``--schedule``/``--optimizer-sharding``/``--recompute`` list must lie inside the
        framework's space: a usage error otherwise, naming what the framework runs."""
        if chosen is None:
            return
        outside = [x for x in chosen if x not in allowed]
        if outside:
            raise UsageError(
                f"{flag} {','.join(outside)}: {self.title} runs {', '.join(allowed)}; "
                "pick another --framework (or --framework any for the whole space)"
            )


Reasons = Iterator[str]
"""The reasons of one family of :meth:`Framework.violations`, in a fixed order; each family takes
the framework's :class:`Capabilities` and its title (``who``), which every reason names."""


def _schedule_and_sharding(cap: Capabilities, who: str, c: ParallelConfig) -> Reasons:
    """The pipeline schedule and the optimizer sharding (alone and with pipeline parallelism)."""
    if c.pp > 1 and c.schedule not in cap.schedules:
        yield f"{who} has no {c.schedule!r} schedule (it runs {', '.join(cap.schedules)})"
    if c.optimizer_sharding not in cap.optimizer_sharding:
        yield f"{who} has no {c.optimizer_sharding!r} sharding (it runs {', '.join(cap.optimizer_sharding)})"
    elif c.pp > 1 and c.optimizer_sharding not in cap.sharding_with_pipeline:
        yield f"{who} does not combine {c.optimizer_sharding!r} sharding with pipeline parallelism"


def _recompute(cap: Capabilities, who: str, model: ModelSpec, c: ParallelConfig) -> Reasons:
    """The recompute form, how many layers of a stage full recompute can cover, the module list."""
    if c.recompute not in cap.recompute:
        yield f"{who} has no {c.recompute!r} recompute (it runs {', '.join(cap.recompute)})"
    if c.recompute == "full" and c.recompute_num_layers and not cap.partial_recompute:
        k, stage = c.recompute_num_layers, stage_size(c, model.num_layers)
        if not cap.every_nth_recompute:
            yield f"{who} cannot recompute only {k} layers per stage"
        elif not every_nth(k, stage):
            yield (
                f"{who} recomputes every n-th block of a stage: {k} of {stage} layers is no "
                f"{stage} // n (recompute {', '.join(map(str, every_nth_counts(stage)))} layers, or all)"
            )
    if c.recompute_modules and not cap.recompute_modules:
        yield f"{who} has no recompute module list (Megatron --recompute-modules)"


def _parallelism(cap: Capabilities, who: str, c: ParallelConfig) -> Reasons:
    """Sequence, context and expert parallelism; uneven layer splits over the pipeline stages."""
    if c.tp > 1 and not c.sequence_parallel and not cap.sequence_parallel_optional:
        yield f"{who} always uses sequence parallelism with tensor parallelism"
    if c.cp > 1 and not cap.context_parallel:
        yield f"{who} has no context parallelism"
    if c.ep > 1 and not cap.expert_parallel:
        yield f"{who} has no expert parallelism"
    if c.layers_per_stage and len(set(c.layers_per_stage)) > 1:
        if not cap.uneven_layers:
            yield f"{who} splits layers evenly over pipeline stages"
        elif c.vpp > 1 and not cap.uneven_interleaved:
            yield f"{who} has no uneven split with virtual pipeline stages"


def _precision(cap: Capabilities, who: str, job: JobSpec) -> Reasons:
    """The training precision and, for FP8, the scaling recipe."""
    if job.precision not in cap.precisions:
        yield f"{who} has no {job.precision} training (it runs {', '.join(cap.precisions)})"
    elif job.precision == "fp8" and job.fp8_recipe not in cap.fp8_recipes:
        yield f"{who} has no {job.fp8_recipe!r} FP8 recipe (it runs {', '.join(cap.fp8_recipes)})"


def _placement(cap: Capabilities, who: str, cluster: ClusterSpec, c: ParallelConfig) -> Reasons:
    """Where ranks go: GPU types, the rank order, optimizer instances and hybrid sharding groups."""
    if len({g.gpu.name for g in cluster.groups}) > 1 and not cap.heterogeneous_gpus:
        yield f"{who} cannot place stages on different GPU types"
    if c.rank_order not in cap.rank_orders:
        yield f"{who} lays ranks out as {', '.join(cap.rank_orders)} only (not {c.rank_order})"
    elif c.rank_order == PP_DP and c.pp > 1 and cap.pp_dp_order_same_expert_dp and c.expert_dp != c.dp:
        yield (
            f"{who} refuses the tp-cp-ep-pp-dp rank order with pp > 1 when the expert grid's "
            f"data-parallel degree ({c.expert_dp}) differs from dp ({c.dp}): expert tp x ep must "
            "equal tp x cp (for a dense model: cp 1)"
        )
    if c.optimizer_instances > 1 and not cap.partial_distributed_optimizer:
        yield (
            f"{who} shards the distributed optimizer over all data-parallel ranks "
            "(no optimizer instances); use optimizer_instances 1"
        )
    if c.fsdp_shard and not cap.hsdp:
        yield f"{who} is not planned with HSDP (fsdp_shard); use full sharding over all dp ranks"


def _overlaps(cap: Capabilities, who: str, model: ModelSpec, job: JobSpec, c: ParallelConfig) -> Reasons:
    """Tensor-parallel communication overlap, the MoE dispatcher, CUDA graphs and the MoE all-to-all
    overlap under Megatron-Core's conditions (:attr:`Capabilities.moe_a2a_overlap`)."""
    if job.tp_comm_overlap and c.sp and not cap.tp_comm_overlap:
        yield f"{who} launches no overlap of tensor-parallel communication with GEMMs"
    moe = getattr(model, "is_moe", False)
    if moe and job.moe_dispatcher not in cap.moe_dispatchers:
        yield f"{who} has no {job.moe_dispatcher!r} MoE dispatcher (it runs {', '.join(cap.moe_dispatchers)})"
    if job.cuda_graph_scope and not cap.cuda_graphs:
        yield f"{who} launches no CUDA graphs"
    if job.moe_a2a_overlap and moe:
        if not cap.moe_a2a_overlap:
            yield f"{who} has no overlap of MoE all-to-alls with another micro-batch"
        elif c.ep <= 1:
            yield f"{who} overlaps MoE all-to-alls only with expert parallelism (ep > 1)"
        elif job.moe_dispatcher not in ("alltoall", "flex"):
            yield f"{who} overlaps MoE all-to-alls only with the alltoall or flex dispatcher"
        elif c.pp > 1 and c.vpp <= 1:
            yield f"{who} overlaps MoE all-to-alls with pipeline parallelism only with virtual stages"
        elif c.recompute == "full":
            yield f"{who} does not overlap MoE all-to-alls with full recompute"


def _dtypes(cap: Capabilities, who: str, job: JobSpec, c: ParallelConfig) -> Reasons:
    """The gradient reduction dtype, master weight and Adam moment dtypes, and the optimizer
    sharding low-precision optimizer states need."""
    if cap.grad_dtypes is not None and (job.precision, job.grad_dtype) not in cap.grad_dtypes:
        allowed = sorted(g for p, g in cap.grad_dtypes if p == job.precision)
        yield (
            f"{who} does not reduce {job.precision} gradients in {job.grad_dtype} "
            f"(it reduces them in {' or '.join(allowed) or 'no dtype'})"
        )
    dtypes = (job.master_dtype, job.optimizer_state_dtype)
    if cap.optimizer_dtypes is not None and dtypes not in cap.optimizer_dtypes:
        yield (
            f"{who} keeps no {dtypes[0]} master weights with {dtypes[1]} Adam moments (it keeps "
            + ", ".join(f"{m} / {s}" for m, s in cap.optimizer_dtypes)
            + ")"
        )
    elif (
        job.optimizer_below_fp32
        and cap.optimizer_dtypes_sharding is not None
        and c.optimizer_sharding not in cap.optimizer_dtypes_sharding
    ):
        yield (
            f"{who} keeps optimizer states below fp32 only with optimizer sharding "
            f"{' or '.join(cap.optimizer_dtypes_sharding)}, not {c.optimizer_sharding!r}"
        )


def _kernels(cap: Capabilities, who: str, job: JobSpec) -> Reasons:
    """Eager or fused elementwise ops, the core attention implementation, fused weight-gradient
    accumulation."""
    if cap.eager_ops is not None and job.eager_ops not in cap.eager_ops:
        yield f"{who} runs {cap.eager_text()}, not {','.join(job.eager_ops) or 'every op fused'}"
    if job.attention_impl not in cap.attention_impls:
        yield f"{who} runs {' or '.join(cap.attention_impls)} core attention, not {job.attention_impl}"
    if not job.gradient_accumulation_fusion and not cap.unfused_grad_accumulation:
        yield f"{who} has no switch for unfused gradient accumulation"


def _offload_and_transfers(cap: Capabilities, who: str, job: JobSpec, c: ParallelConfig) -> Reasons:
    """Activation offloading (and CUDA graphs with it), pipeline sends, the distributed optimizer's
    gradient reduction."""
    if c.offload_layers and not cap.activation_offload:
        yield f"{who} has no activation offloading to host memory"
    elif c.offload_layers and job.cuda_graph_scope and "full_iteration" not in job.cuda_graph_scope:
        # Megatron-Core TransformerConfig: "CUDA graphs not supported with CPU offloading"
        # unless cuda_graph_impl is full_iteration.
        yield f"{who} captures CUDA graphs with activation offloading only over the full iteration"
    if job.pipeline_scatter_gather and not cap.pipeline_scatter_gather:
        yield f"{who} sends whole hidden states between pipeline stages (no scatter/gather over tp)"
    if c.optimizer_sharding == "distributed" and job.sharded_grad_reduce not in cap.sharded_grad_reduces:
        yield f"{who}'s distributed optimizer reduce-scatters gradients, not {job.sharded_grad_reduce}"


def _finetune(cap: Capabilities, who: str, job: JobSpec) -> Reasons:
    """LoRA adapters on a frozen base."""
    if job.is_lora and not cap.lora:
        yield f"{who} trains no LoRA adapters (finetune lora)"


ANY = Framework(
    name="any",
    title="any framework (the cost model's whole space)",
    version="-",
    capabilities=Capabilities(
        schedules=SCHEDULES,
        optimizer_sharding=OPTIMIZER_SHARDING,
        sharding_with_pipeline=OPTIMIZER_SHARDING,
        recompute=RECOMPUTE,
        partial_recompute=True,
        recompute_modules=True,
        sequence_parallel_optional=True,
        context_parallel=True,
        expert_parallel=True,
        uneven_layers=True,
        uneven_interleaved=True,
        precisions=("bf16", "fp16", "fp8", "nvfp4", "mxfp4"),
        heterogeneous_gpus=True,
        tp_comm_overlap=True,
        hsdp=True,
        moe_dispatchers=MOE_DISPATCHERS,
        moe_a2a_overlap=True,
        cuda_graphs=True,
        activation_offload=True,
        partial_distributed_optimizer=True,
        rank_orders=RANK_ORDERS,
        eager_ops=None,
        attention_impls=ATTENTION_IMPLS,
        unfused_grad_accumulation=True,
        pipeline_scatter_gather=True,
        sharded_grad_reduces=SHARDED_GRAD_REDUCES,
        lora=True,
    ),
    source="cost_models/parallel.py (SCHEDULES, OPTIMIZER_SHARDING, RECOMPUTE)",
    exportable=False,
)
