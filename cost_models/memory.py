"""Memory per GPU: weights, gradients, optimizer states, activations and a documented reserve.

Bytes per parameter with mixed precision and Adam (Megatron-LM ``docs/.../dist_optimizer.md`` and
``megatron/training/theoretical_memory_usage.py``): a 16-bit weight (2), a main gradient
(``grad_dtype``, fp32 = 4), and the optimizer's master weight (``master_dtype``, 4) plus two
Adam moments (``optimizer_state_dtype``, fp32: 8; bf16 under Megatron's precision-aware optimizer:
4): 18 bytes unsharded; with 16-bit gradients (fp16 training reduces in fp16) an
fp32 copy of the gradient joins the optimizer states: 20 bytes, 4 + 16/d distributed, except where
the precision-aware optimizer reads the 16-bit shard in place (:func:`step_reads_16bit_grads`). Sharding
over the ``d`` data-parallel ranks (Rajbhandari et
al. 2020, ZeRO, arXiv:1910.02054): distributed optimizer / ZeRO-1 shards the optimizer (2 + 4 +
12/d), ZeRO-2 also the gradients (2 + 16/d), full sharding / FSDP everything (18/d, plus the
gathered weights of the layers in use). Dense parameters shard over dp x cp (Megatron's
distributed optimizer uses the ``intra_dp_cp`` group); experts over the expert data-parallel group.

Activations come from :mod:`cost_models.layers` per micro-batch and are multiplied by the
in-flight count read from the schedule's :class:`~cost_models.schedules.Timeline`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.parallel import ParallelConfig
from planner.inputs.job_spec import DTYPE_BYTES, JobSpec

FRAGMENTATION_FRACTION = 0.05
"""Share of activation memory lost to allocator fragmentation (planner's assumption; Megatron's
``compute_activation_memory_without_sp`` applies the same 5% overhead)."""

HOST_MEMORY_USABLE_FRACTION = 0.8
"""Share of a node's system memory that offloaded activations may fill (planner's margin, not a
measurement): the rest stays for the operating system and page cache, the data-loader workers and
the pinned buffers of checkpoint staging. A node's GPUs split it evenly. A cluster file's
``host_memory_gb`` can state what a node really has free."""


def host_share_bytes(host_memory_bytes: float, gpus_per_node: int) -> float:
    """One GPU's share of its node's usable system memory (0 when the host memory is unknown)."""
    return host_memory_bytes * HOST_MEMORY_USABLE_FRACTION / gpus_per_node


PREFETCHED_LAYERS = 2
"""Layers whose full weights FSDP holds gathered at once (current + prefetched)."""


@dataclass(frozen=True, slots=True)
class StaticMemory:
    """Memory resident all iteration on one GPU, in bytes."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        """Sum of the three."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


def step_reads_16bit_grads(job: JobSpec) -> bool:
    """Whether the optimizer step reads each rank's 16-bit gradient shard in place, with no fp32
    copy: Megatron-Core's precision-aware optimizer (planner: master weights or Adam moments below
    fp32, which is when the Megatron export passes ``--use-precision-aware-optimizer``) hands
    Transformer Engine's FusedAdam a view of the gradient buffer (``decoupled_grad``) unless it
    keeps fp32 master weights under an FP8 recipe other than delayed scaling, where the shard is
    copied with ``.float()`` as without it (megatron/core/optimizer/distrib_optimizer.py
    ``_copy_model_grads_to_main_grads``; the condition is OptimizerConfig's
    ``use_precision_aware_optimizer_no_fp8_or_ds_fp8``, megatron-core 0.19.2)."""
    if not job.optimizer_below_fp32:
        return False
    return job.master_dtype != "fp32" or job.precision != "fp8" or job.fp8_recipe == "delayed"


def optimizer_state_bytes(job: JobSpec) -> float:
    """Bytes per parameter of Adam's persistent state: the master weight and the two moments at the
    job's dtypes (Megatron-LM dist_optimizer.md, its bytes-per-parameter table: 4 + 4 + 4 with fp32 master
    and moments). No gradient: :func:`bytes_per_param` adds the step's fp32 gradient copy."""
    return float(DTYPE_BYTES[job.master_dtype] + 2 * DTYPE_BYTES[job.optimizer_state_dtype])


def checkpoint_bytes_per_param(job: JobSpec) -> float:
    """Bytes per parameter of a training checkpoint: the 16-bit weight plus the optimizer state
    (:func:`optimizer_state_bytes`). Gradients, and the fp32 copy of 16-bit gradients the step
    reads, are not saved (Megatron-Core's distributed optimizer checkpoints its ``param``,
    ``exp_avg`` and ``exp_avg_sq`` state beside the model's weights)."""
    return 2.0 + optimizer_state_bytes(job)


def bytes_per_param(job: JobSpec, sharding: str, d: int) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per parameter under ``sharding`` over ``d`` ranks."""
    weight = 2.0
    grad = float(DTYPE_BYTES[job.grad_dtype])
    opt = optimizer_state_bytes(job)
    if grad < 4 and not step_reads_16bit_grads(job):
        # 16-bit gradients are copied to fp32 for the step, a buffer sharded like the optimizer
        # states (Megatron-LM dist_optimizer.md: "fp16 parameters, fp16 gradients" 20 bytes,
        # 4 + 16/d distributed).
        opt += 4.0
    d = max(d, 1)
    if sharding == "none":
        return weight, grad, opt
    if sharding == "distributed":
        return weight, grad, opt / d
    if sharding == "zero2":
        return weight, grad / d, opt / d
    if sharding == "full":
        return weight / d, grad / d, opt / d
    raise ValueError(f"unknown optimizer sharding {sharding!r}")


def shard_degrees(c: ParallelConfig) -> tuple[int, int]:
    """Ranks the dense and the expert parameters' sharded state is split over (what
    :func:`bytes_per_param` divides by): full sharding over its shard group (HSDP's, or dp*cp), the
    distributed optimizer over one instance (dp*cp / optimizer_instances; the expert data-parallel
    group likewise), ZeRO-2 over dp*cp; 1 without sharding."""
    if c.optimizer_sharding == "none":
        return 1, 1
    if c.optimizer_sharding == "distributed":
        return c.shard_degree, c.expert_shard_degree
    if c.optimizer_sharding == "full":
        return c.shard_degree, c.expert_dp
    return c.dp * c.cp, c.expert_dp


def static_memory(
    dense_params: float,
    expert_params: float,
    job: JobSpec,
    c: ParallelConfig,
    largest_layer_params: float = 0.0,
    frozen_weight_bytes: float = 0.0,
) -> StaticMemory:
    """Weights, gradients and optimizer states of one GPU holding the given (trained) parameters, and
    ``frozen_weight_bytes`` of frozen weights (a LoRA job's base, :mod:`cost_models.finetune`), which
    have no gradient and no optimizer state."""
    d_dense, d_expert = shard_degrees(c)
    wd, gd, od = bytes_per_param(job, c.optimizer_sharding, d_dense)
    we, ge, oe = bytes_per_param(job, c.optimizer_sharding, d_expert)
    weights = dense_params * wd + expert_params * we + frozen_weight_bytes
    if c.optimizer_sharding == "full":
        weights += PREFETCHED_LAYERS * largest_layer_params * 2.0
    return StaticMemory(
        weights_bytes=weights,
        gradients_bytes=dense_params * gd + expert_params * ge,
        optimizer_bytes=dense_params * od + expert_params * oe,
    )


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Peak memory of one GPU and its parts, in bytes."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    """Activations of the in-flight micro-batches at the peak (from the timeline)."""
    transient_bytes: float
    """Short-lived buffers at the peak: one recomputed layer's working set (full recompute), the
    loss's logits, or one offloaded layer's activations in transit (the largest)."""
    reserve_bytes: float
    """CUDA context, NCCL buffers, workspaces and fragmentation."""
    gpu_reserve_bytes: float
    """The fixed part of ``reserve_bytes`` (CUDA context, NCCL buffers, workspaces), resident all
    iteration; the rest is fragmentation that scales with activations."""
    capacity_bytes: float
    peak_inflight_microbatches: float
    """Micro-batches (in stage-chunk units) resident at the peak."""

    @property
    def static_bytes(self) -> float:
        """Weights + gradients + optimizer."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def peak_bytes(self) -> float:
        """Everything at the peak."""
        return self.static_bytes + self.activations_bytes + self.transient_bytes + self.reserve_bytes

    @property
    def headroom_bytes(self) -> float:
        """Capacity minus peak (negative: does not fit)."""
        return self.capacity_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        """Whether the peak fits in the GPU."""
        return self.headroom_bytes >= 0


def breakdown(
    static: StaticMemory,
    peak_activation_bytes: float,
    transient_bytes: float,
    gpu_reserve_bytes: float,
    capacity_bytes: float,
    peak_inflight: float,
) -> MemoryBreakdown:
    """Assemble a :class:`MemoryBreakdown`; the reserve adds fragmentation of activations."""
    reserve = gpu_reserve_bytes + FRAGMENTATION_FRACTION * (peak_activation_bytes + transient_bytes)
    return MemoryBreakdown(
        gpu_reserve_bytes=gpu_reserve_bytes,
        weights_bytes=static.weights_bytes,
        gradients_bytes=static.gradients_bytes,
        optimizer_bytes=static.optimizer_bytes,
        activations_bytes=peak_activation_bytes,
        transient_bytes=transient_bytes,
        reserve_bytes=reserve,
        capacity_bytes=capacity_bytes,
        peak_inflight_microbatches=peak_inflight,
    )
