"""The parallel configuration of one training run: its degrees and knobs (:class:`ParallelConfig`), the
names each knob takes, Megatron-LM's uneven pipeline splits and the selective-recompute module lists.

What Megatron-LM refuses in a configuration is :mod:`cost_models.constraints` (``violations``, and
``resolve``, which derives dp and checks); which ranks form each communication group is
:mod:`cost_models.placement` (``group``, ``span``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.inputs.errors import ConfigError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

RECOMPUTE = ("none", "selective", "op", "full")
"""Activation recomputation forms: none; selective (Megatron: core attention, Korthikanti et al.
2022 Sec. 5); op (torchtitan per-op selective checkpointing, :mod:`cost_models.recompute`); full
(every recomputed layer's forward again, Chen et al. 2016)."""
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""The modules selective recompute can re-run (Megatron-Core ``--recompute-modules``,
``TransformerConfig.recompute_modules`` of megatron-core 0.19.2, less ``gdn_norm_out``, which only
gated-delta-net attention has): core attention; the routed experts' activation function; the
separate (unfused) norms; MLA's up projections with RoPE; a dense layer's MLP; a whole MoE layer;
its shared experts. ``moe_act``, ``layernorm`` and ``mla_up_proj`` discard their outputs after the
forward and rebuild them before the backward (``CheckpointWithoutOutput``); the others checkpoint
their module (its input kept, everything inside rebuilt). Priced in :mod:`cost_models.layers`."""
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
"""Megatron-Core's default ``recompute_modules`` (TransformerConfig.__post_init__)."""
LAYER_RECOMPUTE = ("full", "op")
"""Forms that checkpoint whole layers: a recomputed layer keeps ``LayerCost.recomputed_bytes`` and
its backward adds ``LayerCost.recompute_s`` (its working set is rebuilt one layer at a time)."""
OPTIMIZER_SHARDING = ("none", "distributed", "zero2", "full")
SHARDED_GRADIENTS = ("zero2", "full")
"""The shardings that also shard gradients (ZeRO-2 and ZeRO-3 / FSDP; Megatron-FSDP's
``optim_grads`` and ``optim_grads_params``): their gradient path is the FSDP model's, not the
DDP buffer's."""
SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1", "zb-h2", "zb-v")
RANK_ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
"""How Megatron-Core lays ranks out, fastest-varying first (megatron/core/parallel_state.py
``initialize_model_parallel(order=...)``): its default ``tp-cp-ep-dp-pp`` (pipeline stages are the
outermost blocks), or ``tp-cp-ep-pp-dp`` with ``--use-tp-pp-dp-mapping`` (megatron/training/
initialize.py), which puts a pipeline's stages next to each other (inside an NVLink domain when
tp*cp*pp fits in it) and the data-parallel replicas outermost; the expert grid follows as
``tp-ep-dp-pp`` / ``tp-ep-pp-dp``."""
PP_DP = RANK_ORDERS[1]


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelConfig:
    """Degrees and knobs of one configuration; ``dp`` is derived from the world size."""

    tp: int = 1
    """Tensor-parallel degree (``--tensor-model-parallel-size``)."""
    pp: int = 1
    """Pipeline-parallel degree (``--pipeline-model-parallel-size``)."""
    dp: int = 1
    """Data-parallel degree: world / (tp * pp * cp)."""
    cp: int = 1
    """Context-parallel degree (``--context-parallel-size``)."""
    ep: int = 1
    """Expert-parallel degree (``--expert-model-parallel-size``), folded inside tp*cp*dp."""
    etp: int = 0
    """Expert tensor-parallel degree; 0 means Megatron's recommendation: 1 with EP, else tp."""
    vpp: int = 1
    """Virtual pipeline stages (model chunks) per pipeline rank."""
    micro_batch_size: int = 1
    """Sequences per micro-batch per data-parallel replica."""
    recompute: str = "none"
    """Activation recomputation (:data:`RECOMPUTE`): none, selective (core attention), op
    (torchtitan per-op selective checkpointing), or full."""
    recompute_num_layers: int = 0
    """With full recompute: layers recomputed per pipeline stage and chunk (0 = all of them)."""
    recompute_modules: tuple[str, ...] = ()
    """With selective recompute: the modules re-run (:data:`RECOMPUTE_MODULES`, in that order);
    empty = Megatron's default, core attention alone (:data:`DEFAULT_RECOMPUTE_MODULES`)."""
    sequence_parallel: bool = True
    """Sequence parallelism with tp > 1 (ignored, as by Megatron, when tp == 1)."""
    optimizer_sharding: str = "distributed"
    """none (18 B/param), distributed (ZeRO-1), zero2, or full (FSDP / ZeRO-3)."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b, interleaved (vpp > 1), gpipe, zb-h1 or zb-h2 (zero bubble, the
    second with optimizer post-validation: cost_models.schedules.POST_VALIDATION), or zb-v (zero
    bubble with vpp = 2 chunks per rank placed as a V: cost_models.schedules.V_SHAPE)."""
    layers_per_stage: tuple[int, ...] = ()
    """Decoder layers of each virtual stage in pipeline order (length pp * vpp); empty = even split.
    Pipeline order is the model's layer order: virtual stage k runs after k - 1 (on rank
    ``cost_models.schedules.stage_rank``)."""
    fsdp_shard: int = 0
    """HSDP shard degree with full sharding: parameters, gradients and optimizer states are sharded
    over this many consecutive data-parallel ranks and replicated across ``dp * cp / fsdp_shard``
    groups (torchtitan ``data_parallel_shard_degree`` / ``data_parallel_replicate_degree``); 0 = all
    of ``dp * cp`` (plain FSDP)."""
    optimizer_instances: int = 1
    """Replicas of the distributed optimizer across the data-parallel ranks (Megatron-Core
    ``--num-distributed-optimizer-instances``, the "partial distributed optimizer"): with ``N > 1``
    the optimizer states are sharded over ``dp * cp / N`` consecutive data-parallel ranks (an
    instance) and replicated across the ``N`` instances. Gradients are reduce-scattered inside an
    instance, the shard is all-reduced across instances, and parameters are all-gathered inside an
    instance (megatron/core/distributed/param_and_grad_buffer.py ``start_grad_sync``;
    parallel_state.py ``_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP``). Distributed sharding only."""
    rank_order: str = RANK_ORDERS[0]
    """Rank layout (:data:`RANK_ORDERS`): Megatron's default, or ``tp-cp-ep-pp-dp``
    (``--use-tp-pp-dp-mapping``)."""
    offload_layers: int = 0
    """Decoder layers whose activations go to host memory after their forward and come back for
    their backward (Megatron-LM ``--cpu-offloading-num-layers``: Transformer Engine's CPU offload
    context, activations only, the first layers of the model); 0 = none. Megatron-Core runs it
    without pipeline parallelism and without recompute (TransformerConfig.__post_init__), and
    planner prices it under the same conditions (:func:`cost_models.constraints.violations`)."""

    @property
    def shard_degree(self) -> int:
        """Ranks a sharded state is split over: with full sharding the HSDP shard group (or
        dp * cp), with the distributed optimizer one instance's ``dp * cp / optimizer_instances``."""
        return self.fsdp_shard or self.dp * self.cp // max(1, self.optimizer_instances)

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: tp * cp * dp / (expert tp * ep)."""
        return (self.tp * self.cp * self.dp) // (self.expert_tp * self.ep)

    @property
    def expert_shard_degree(self) -> int:
        """Ranks an expert's distributed-optimizer state is split over: the expert data-parallel
        group divided into ``optimizer_instances`` (megatron/core/parallel_state.py
        ``intra_partial_expert_data_parallel_size``)."""
        return self.expert_dp // max(1, self.optimizer_instances)

    @property
    def expert_tp(self) -> int:
        """Resolved expert tensor-parallel degree."""
        if self.etp:
            return self.etp
        return 1 if self.ep > 1 else self.tp

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect."""
        return self.sequence_parallel and self.tp > 1

    @property
    def world_size(self) -> int:
        """GPUs used."""
        return self.tp * self.pp * self.cp * self.dp

    @property
    def num_virtual_stages(self) -> int:
        """pp * vpp."""
        return self.pp * self.vpp

    def num_microbatches(self, job: JobSpec) -> int:
        """Micro-batches per pipeline per iteration: gbs / (mbs * dp)."""
        return job.global_batch_size // (self.micro_batch_size * self.dp)

    def stage_layers(self, model: ModelSpec) -> tuple[int, ...]:
        """Layers of each virtual stage, in virtual-stage order (chunk-major as Megatron)."""
        if self.layers_per_stage:
            return self.layers_per_stage
        n = self.num_virtual_stages
        base, extra = divmod(model.num_layers, n)
        return tuple(base + (1 if i < extra else 0) for i in range(n))

    def optional_fields(self) -> dict:
        """The knobs plan files and JSON write only when they differ from their default, so that
        plans without them read and print as before: HSDP's shard degree, offloaded layers,
        distributed-optimizer instances, a rank order other than Megatron's default."""
        return {
            **({"fsdp_shard": self.fsdp_shard} if self.fsdp_shard else {}),
            **({"offload_layers": self.offload_layers} if self.offload_layers else {}),
            **({"optimizer_instances": self.optimizer_instances} if self.optimizer_instances > 1 else {}),
            **({"rank_order": self.rank_order} if self.rank_order != RANK_ORDERS[0] else {}),
        }

    def with_(self, **changes) -> ParallelConfig:
        """A copy with some fields changed."""
        return replace(self, **changes)


def account_for_split(num_layers: int, n_virtual: int, embedding: bool, loss: bool) -> tuple[int, ...]:
    """Decoder layers per virtual stage under Megatron-LM's ``--account-for-embedding-in-pipeline-split``
    / ``--account-for-loss-in-pipeline-split``: the embedding (loss) counts as one layer of the first
    (last) virtual stage, every virtual stage holds the same number of such units, so the first (last)
    holds one decoder layer fewer, possibly none; ``(L + emb + loss) % (pp * vpp) == 0`` is required
    (megatron/training/arguments.py validate_args and TransformerConfig; ../shared/reference/megatron-args.md,
    "account-for-embedding/loss")."""
    units = num_layers + embedding + loss
    if units % n_virtual:
        raise ConfigError(f"num_layers + embedding + loss = {units} is not divisible by pp*vpp = {n_virtual}")
    per = units // n_virtual
    out = [per] * n_virtual
    out[0] -= embedding
    out[-1] -= loss
    if min(out) < 0 or (n_virtual > 1 and 0 in out[1:-1]):
        raise ConfigError(
            f"{num_layers} layers cannot fill {n_virtual} virtual stages with embedding/loss accounted"
        )
    return tuple(out)


def first_last_split(num_layers: int, pp: int, first: int | None, last: int | None) -> tuple[int, ...]:
    """Layers per pipeline stage under Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``: the given stages hold those counts, the remaining layers
    are split evenly over the middle stages, which must divide them
    (megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``;
    ../shared/reference/megatron-args.md)."""
    if pp < 2:
        raise ConfigError("first/last stage layer counts need pipeline parallelism (pp >= 2)")
    for name, n in (("first", first), ("last", last)):
        if n is not None and not 0 < n < num_layers:
            raise ConfigError(f"{name} pipeline stage layers must be between 1 and {num_layers - 1}, got {n}")
    middle_stages = pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if middle_stages == 0:
        if rest:
            raise ConfigError(f"first + last stage layers must equal num_layers ({num_layers}) when pp = 2")
        return (first, last)  # type: ignore[return-value]
    if rest <= 0 or rest % middle_stages:
        raise ConfigError(
            f"the {rest} layers left after the first/last stages do not split evenly over "
            f"{middle_stages} middle stages"
        )
    middle = (rest // middle_stages,) * middle_stages
    return ((first,) if first is not None else ()) + middle + ((last,) if last is not None else ())


def canonical_modules(names) -> tuple[str, ...]:
    """Recompute module names in :data:`RECOMPUTE_MODULES` order, repeats and unknown names dropped,
    Megatron's default list (core attention alone) as the empty tuple, so equal settings compare
    equal (callers report unknown names first)."""
    given = set(names)
    out = tuple(m for m in RECOMPUTE_MODULES if m in given)
    return () if out == DEFAULT_RECOMPUTE_MODULES else out


def memory_modules(model: ModelSpec, job: JobSpec) -> tuple[str, ...]:
    """The output-discarding recompute modules a layer of ``model`` has (:data:`RECOMPUTE_MODULES`
    order): the routed experts' activation (MoE), the separate norms (MoE layers' pre-MLP norm,
    MLA's input norm), MLA's up projections. Each re-runs memory-bound kernels or two small GEMMs
    and drops a tensor the size of a layer's widest activations, which is why Megatron-Bridge's MoE
    and MLA recipes set them (e.g. ``recompute_modules=["moe_act", "layernorm"]``, gpt-oss and
    Qwen3 configs; ``["mla_up_proj"]``, DeepSeek-V3). Empty for dense MHA/GQA models, whose norms
    Transformer Engine fuses into the next GEMM, and under FP8 delayed scaling, which refuses
    ``moe_act`` and ``layernorm``."""
    mods: list[str] = []
    if model.is_moe:
        mods += ["moe_act", "layernorm"]
    if model.multi_latent_attention:
        mods += ["layernorm", "mla_up_proj"]
    if job.precision == "fp8" and job.fp8_recipe == "delayed":
        mods = [m for m in mods if m not in ("moe_act", "layernorm")]
    return tuple(m for m in RECOMPUTE_MODULES if m in mods)
