"""The parallel configuration of one training run, its Megatron-LM constraints, and rank placement.

Rank placement is a pure function of the degrees and Megatron's default order ``tp-cp-ep-dp-pp``
(tensor parallel fastest-varying, pipeline slowest; Megatron-LM
``megatron/core/parallel_state.py`` and ``HyperCommGrid``). Expert parallelism folds inside the
``tp x cp x dp`` ranks of a pipeline stage (expert grid ``etp x ep x edp``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
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
    planner prices it under the same conditions (:func:`violations`)."""

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


def resolve(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig) -> ParallelConfig:
    """Fill the derived dp from the cluster size and check every constraint; raise ConfigError."""
    world = cluster.num_gpus
    mp = config.tp * config.pp * config.cp
    if world % mp:
        raise ConfigError(
            f"world size {world} is not divisible by tp*pp*cp = {config.tp}*{config.pp}*{config.cp} = {mp}"
        )
    cfg = config.with_(dp=world // mp)
    for reason in violations(model, cluster, job, cfg):
        raise ConfigError(reason)
    return cfg


def violations(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig) -> list[str]:
    """Every Megatron-LM constraint the configuration breaks (../shared/reference/megatron-args.md §2.6),
    in a fixed order: degrees, choices and divisibility, pipeline, experts, recompute and offload,
    rank order, optimizer sharding."""
    out = _degree_violations(c)
    if out:
        return out
    out += _choice_violations(cluster, c)
    out += _shape_violations(model, job, c)
    out += _mixer_violations(model, c)
    out += _pipeline_violations(model, job, c, earlier=bool(out))
    out += _expert_violations(model, c)
    out += _memory_saving_violations(model, cluster, job, c)
    out += _rank_order_violations(cluster, c)
    out += _sharding_violations(model, job, c)
    out += _finetune_violations(job, c)
    return out


def _finetune_violations(job: JobSpec, c: ParallelConfig) -> list[str]:
    """A LoRA job's adapter rank over tp (Megatron-Bridge's ``ParallelLinearAdapter`` builds
    ``linear_in`` beside a column-parallel layer as a Megatron-Core ``ColumnParallelLinear`` of
    ``dim`` outputs, which it splits with ``divide(output_size, world_size)``, asserting divisibility),
    and its optimizer sharding: the frozen base is priced held whole on each data-parallel rank
    (DDP or the distributed optimizer, which shard only trained parameters), not sharded by
    Megatron-FSDP (zero2, full)."""
    if not job.is_lora:
        return []
    out: list[str] = []
    if job.lora_rank % c.tp:
        out.append(f"lora_rank ({job.lora_rank}) must be divisible by tp ({c.tp})")
    if c.optimizer_sharding in SHARDED_GRADIENTS:
        out.append(
            f"finetune lora is priced with optimizer sharding none or distributed, not {c.optimizer_sharding}"
        )
    return out


def _degree_violations(c: ParallelConfig) -> list[str]:
    """Degrees and the micro-batch size below 1 (the other checks divide by them)."""
    return [
        f"{name} must be >= 1, got {getattr(c, name)}"
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size")
        if getattr(c, name) < 1
    ]


def _choice_violations(cluster: ClusterSpec, c: ParallelConfig) -> list[str]:
    """Unknown recompute, sharding or schedule names; a world size other than the cluster's."""
    out: list[str] = []
    if c.recompute not in RECOMPUTE:
        out.append(f"recompute {c.recompute!r} not in {', '.join(RECOMPUTE)}")
    if c.optimizer_sharding not in OPTIMIZER_SHARDING:
        out.append(f"optimizer sharding {c.optimizer_sharding!r} not in {', '.join(OPTIMIZER_SHARDING)}")
    if c.schedule not in SCHEDULES:
        out.append(f"schedule {c.schedule!r} not in {', '.join(SCHEDULES)}")
    if c.world_size != cluster.num_gpus:
        out.append(f"tp*pp*cp*dp = {c.world_size} does not equal the cluster's {cluster.num_gpus} GPUs")
    return out


def _mixer_violations(model: ModelSpec, c: ParallelConfig) -> list[str]:
    """Mamba-2 and gated DeltaNet heads over tp and cp, as megatron-core 0.19.2 asserts them:
    ``MambaMixer`` (nheads and ngroups divisible by tp), ``MambaContextParallel`` (nheads / tp
    divisible by cp; ngroups / tp divisible by cp or dividing it) and ``TransformerConfig`` for
    gated DeltaNet (key and value heads divisible by tp x cp; KDA's heads alike, as vLLM's
    ``KimiDeltaAttention`` asserts ``num_heads % tp_size == 0``). Mamba-1 (Jamba's; no Megatron-Core
    layer): channels over tp, and no context parallelism, which neither its Hugging Face model nor
    Megatron's ``MambaContextParallel`` (Mamba-2 heads) provides."""
    out: list[str] = []
    if "M" in model.hybrid_layer_pattern and model.mamba_version == 1:
        di = model.mamba_inner_size
        if di % c.tp:
            out.append(f"Mamba-1 d_inner ({di}) must be divisible by tp ({c.tp})")
        if c.cp > 1:
            out.append(
                f"Mamba-1 layers are not context-parallel (cp {c.cp}): no framework splits the selective "
                "scan's sequence"
            )
    elif "M" in model.hybrid_layer_pattern or model.parallel_mamba_attention:
        heads, groups = model.mamba_num_heads, model.mamba_num_groups
        if heads % c.tp or groups % c.tp:
            out.append(
                f"mamba_num_heads ({heads}) and mamba_num_groups ({groups}) must be divisible by tp ({c.tp})"
            )
        elif (heads // c.tp) % c.cp:
            out.append(f"mamba_num_heads / tp ({heads // c.tp}) is not divisible by cp ({c.cp})")
        elif (groups // c.tp) % c.cp and c.cp % (groups // c.tp):
            out.append(f"mamba_num_groups / tp ({groups // c.tp}) and cp ({c.cp}): one must divide the other")
    if "G" in model.hybrid_layer_pattern or model.has_linear_attention:
        for name in ("linear_num_key_heads", "linear_num_value_heads"):
            if getattr(model, name) % (c.tp * c.cp):
                out.append(f"{name} ({getattr(model, name)}) is not divisible by tp x cp ({c.tp * c.cp})")
    return out


def _shape_violations(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> list[str]:
    """Heads, query groups and MLP width over tp; the global batch over micro-batch x dp; the
    sequence over context parallelism and the position table."""
    out: list[str] = []
    if model.num_attention_heads % c.tp:
        out.append(f"num_attention_heads ({model.num_attention_heads}) is not divisible by tp ({c.tp})")
    g = model.num_query_groups
    if g % c.tp and c.tp % g:
        out.append(f"num_query_groups ({g}) and tp ({c.tp}): one must divide the other")
    if model.ffn_hidden_size % c.tp:
        out.append(f"ffn_hidden_size ({model.ffn_hidden_size}) is not divisible by tp ({c.tp})")
    batch = c.micro_batch_size * c.dp
    if job.global_batch_size % batch:
        out.append(
            f"global batch size {job.global_batch_size} is not divisible by micro-batch size x dp = "
            f"{c.micro_batch_size} x {c.dp} = {batch}"
        )
    if c.cp > 1 and job.seq_length % (2 * c.cp):
        out.append(f"seq_length ({job.seq_length}) must be divisible by 2*cp = {2 * c.cp}")
    if job.seq_length > model.max_position_embeddings and model.position_embedding_type == "learned_absolute":
        out.append(
            f"seq_length ({job.seq_length}) exceeds max_position_embeddings ({model.max_position_embeddings})"
        )
    return out


def _pipeline_violations(model: ModelSpec, job: JobSpec, c: ParallelConfig, *, earlier: bool) -> list[str]:
    """The pipeline partition and schedule. ``earlier``: whether a check before this one failed
    (the micro-batch count the interleaved schedule divides is only counted when none did)."""
    out: list[str] = []
    n_virtual = c.num_virtual_stages
    if c.pp > model.num_layers + 2 * bool(c.layers_per_stage):
        # An explicit split may give the first stage only the embedding and the last only the output
        # layer and loss (checked below), so pp reaches num_layers + 2 there (DeepSpeed's
        # 'type:transformer|embedding' partition, Megatron-LM's account-for-* flags).
        out.append(
            f"pp ({c.pp}) exceeds num_layers ({model.num_layers})"
            + (" + 2 (an embedding-only first and a loss-only last stage)" if c.layers_per_stage else "")
        )
    if c.layers_per_stage:
        if len(c.layers_per_stage) != n_virtual:
            out.append(
                f"layers_per_stage has {len(c.layers_per_stage)} entries, expected pp*vpp = {n_virtual}"
            )
        elif sum(c.layers_per_stage) != model.num_layers:
            out.append(
                f"layers_per_stage sums to {sum(c.layers_per_stage)}, expected num_layers = {model.num_layers}"
            )
        elif min(c.layers_per_stage) < 0:
            out.append("layers_per_stage entries must not be negative")
        elif 0 in c.layers_per_stage[1:-1]:
            out.append(
                "every pipeline stage needs at least one layer, except the first (embedding only) and "
                "the last (output layer and loss only) virtual stage"
            )
    elif model.num_layers % n_virtual:
        out.append(
            f"num_layers ({model.num_layers}) is not divisible by pp*vpp = {c.pp}*{c.vpp} = {n_virtual} "
            "(give an uneven layers_per_stage instead)"
        )
    if c.schedule == "zb-v" and (c.vpp != 2 or c.pp < 2):
        out.append(
            f"the zb-v schedule runs exactly 2 chunks per rank (vpp = 2) with pp > 1, got pp = {c.pp}, "
            f"vpp = {c.vpp}"
        )
    if c.vpp > 1:
        if c.schedule not in ("interleaved", "zb-v"):
            out.append(
                f"vpp = {c.vpp} needs the interleaved (or, with vpp = 2, zb-v) schedule, got {c.schedule}"
            )
        if c.pp < 2:
            out.append("virtual pipeline stages need pp > 1")
        elif not earlier and not out and c.schedule == "interleaved" and c.num_microbatches(job) % c.pp:
            out.append(
                f"interleaved schedule needs the number of micro-batches ({c.num_microbatches(job)}) "
                f"divisible by pp ({c.pp})"
            )
    elif c.schedule == "interleaved":
        out.append("the interleaved schedule needs vpp > 1")
    return out


def _expert_violations(model: ModelSpec, c: ParallelConfig) -> list[str]:
    """Mixture of experts: ep over the experts, expert tp x ep over the dense ranks, the expert
    MLP width over expert tp."""
    out: list[str] = []
    if c.ep > 1:
        if not model.is_moe:
            out.append(f"ep = {c.ep} needs an MoE model (num_experts > 0)")
        elif model.num_experts % c.ep:
            out.append(f"num_experts ({model.num_experts}) is not divisible by ep ({c.ep})")
    if c.expert_tp < 1:
        out.append(f"etp (expert tp) must be >= 1, got {c.expert_tp}")
    elif (c.tp * c.cp * c.dp) % (c.expert_tp * c.ep):
        # Also with ep == 1: an explicit etp must tile the dense ranks (else the expert
        # data-parallel group has no member).
        out.append(
            f"tp*cp*dp = {c.tp * c.cp * c.dp} is not divisible by expert tp x ep = {c.expert_tp} x {c.ep}"
        )
    if model.is_moe and model.moe_ffn_hidden_size % c.expert_tp:
        out.append(
            f"moe_ffn_hidden_size ({model.moe_ffn_hidden_size}) is not divisible by expert tp ({c.expert_tp})"
        )
    return out


def _memory_saving_violations(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
) -> list[str]:
    """Recompute (layer count, module list: :func:`module_violations`) and activation offloading."""
    out: list[str] = []
    if c.recompute != "full" and c.recompute_num_layers:
        out.append("recompute_num_layers needs full recompute")
    out += module_violations(model, job, c)
    if c.offload_layers < 0:
        out.append(f"offload_layers must be >= 0, got {c.offload_layers}")
    elif c.offload_layers:
        # Megatron-Core TransformerConfig.__post_init__: cpu_offloading_num_layers in [0, num_layers),
        # no pipeline parallelism, no activation recomputation.
        if c.offload_layers >= model.num_layers:
            out.append(
                f"offload_layers ({c.offload_layers}) must be fewer than num_layers ({model.num_layers})"
            )
        if c.pp > 1:
            out.append(
                "activation offloading (offload_layers) runs without pipeline parallelism (pp must be 1)"
            )
        if c.recompute != "none":
            out.append("activation offloading (offload_layers) runs without activation recompute")
        unknown = sorted({g.gpu.name for g in cluster.groups if not g.gpu.host_link_bytes_per_s})
        if unknown:
            out.append(
                f"activation offloading needs the GPU's host link bandwidth: {', '.join(unknown)} "
                "has no host_link_gb_per_s in its GPU file"
            )
    return out


def _rank_order_violations(cluster: ClusterSpec, c: ParallelConfig) -> list[str]:
    """The rank order: a known one; ``tp-cp-ep-pp-dp`` only where it is priced (one node group of
    NVSwitch nodes, sharded groups that tile cp)."""
    out: list[str] = []
    if c.rank_order not in RANK_ORDERS:
        out.append(f"rank order {c.rank_order!r} not in {', '.join(RANK_ORDERS)}")
    elif c.rank_order == PP_DP:
        if len(cluster.groups) > 1:
            out.append(
                "the tp-cp-ep-pp-dp rank order spreads every pipeline stage over the whole cluster; "
                "planner places stages on node groups of different GPU types only in Megatron's default order"
            )
        if any(g.nvlink_mesh is not None for g in cluster.groups):
            out.append(
                "the tp-cp-ep-pp-dp rank order is priced on NVSwitch nodes only (an NVLink mesh's rings "
                "are counted for Megatron's default order)"
            )
        # Only a well-formed sharded group is placed: instances or a shard degree that do not
        # divide dp*cp are reported by _sharding_violations (naming optimizer_instances or
        # fsdp_shard), and their shard degree (dp*cp // instances) may be 0.
        for what in ("shard", "replicate") if _shard_divides(c) else ():
            if _dpcp_subgroup(c, what) is None:
                out.append(
                    f"with the tp-cp-ep-pp-dp rank order the sharded group (dp*cp / optimizer instances or "
                    f"fsdp_shard = {c.shard_degree}) must be a multiple or a divisor of cp ({c.cp})"
                )
                break
    return out


def _shard_divides(c: ParallelConfig) -> bool:
    """Whether the sharded group tiles the dp*cp ranks: the HSDP shard degree, or the
    distributed-optimizer instances, at least 1 and dividing dp*cp (Megatron-Core parallel_state.py
    asserts ``dp*cp % num_distributed_optimizer_instances == 0``)."""
    n = c.fsdp_shard or c.optimizer_instances
    return n >= 1 and (c.dp * c.cp) % n == 0


def _sharding_violations(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> list[str]:
    """Optimizer sharding: partial distributed-optimizer instances, the sharded gradient
    reduction, the HSDP shard degree, FSDP without pipelining."""
    out: list[str] = []
    if c.optimizer_instances < 1:
        out.append(f"optimizer_instances must be >= 1, got {c.optimizer_instances}")
    elif c.optimizer_instances > 1:
        # megatron/core/distributed/distributed_data_parallel.py: "Partial DistOpt cannot be used
        # without DistOpt"; parallel_state.py: dp*cp and the expert dp divisible by the instances.
        if c.optimizer_sharding != "distributed":
            out.append(
                f"optimizer_instances ({c.optimizer_instances}) needs the distributed optimizer "
                f"(optimizer sharding 'distributed', got {c.optimizer_sharding!r})"
            )
        if (c.dp * c.cp) % c.optimizer_instances:
            out.append(f"optimizer_instances ({c.optimizer_instances}) must divide dp*cp ({c.dp * c.cp})")
        elif model.is_moe and c.expert_dp % c.optimizer_instances:
            out.append(
                f"optimizer_instances ({c.optimizer_instances}) must divide the expert data-parallel "
                f"degree ({c.expert_dp})"
            )
    if job.sharded_grad_reduce != "reduce_scatter" and c.optimizer_sharding in ("zero2", "full"):
        out.append(
            f"sharded_grad_reduce {job.sharded_grad_reduce!r} describes a distributed (ZeRO-1) optimizer; "
            f"optimizer sharding {c.optimizer_sharding!r} reduce-scatters gradients per micro-batch"
        )
    if c.fsdp_shard < 0:
        out.append(f"fsdp_shard must be >= 0 (0 = all of dp*cp), got {c.fsdp_shard}")
    elif c.fsdp_shard and (c.optimizer_sharding != "full" or (c.dp * c.cp) % c.fsdp_shard):
        out.append(f"fsdp_shard ({c.fsdp_shard}) needs full sharding and must divide dp*cp ({c.dp * c.cp})")
    if c.optimizer_sharding == "full" and c.pp > 1:
        out.append(
            "full sharding (FSDP) is not supported with pipeline parallelism (Megatron: FSDP needs pp == 1)"
        )
    return out


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


def module_violations(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> list[str]:
    """What Megatron-Core's ``TransformerConfig.__post_init__`` (0.19.2) refuses in a selective
    recompute module list, for this model and job."""
    mods = c.recompute_modules
    if not mods:
        return []
    out: list[str] = []
    unknown = [m for m in mods if m not in RECOMPUTE_MODULES]
    if unknown:
        out.append(f"recompute module(s) {', '.join(unknown)} not in {', '.join(RECOMPUTE_MODULES)}")
    if c.recompute != "selective":
        out.append("recompute_modules needs selective recompute")
    if len(set(mods)) != len(mods) or [m for m in RECOMPUTE_MODULES if m in mods] != list(mods):
        out.append(f"recompute_modules must be distinct and in the order {', '.join(RECOMPUTE_MODULES)}")
    if "moe_act" in mods and not model.is_moe:
        out.append("recompute module moe_act needs an MoE model (Megatron: moe_grouped_gemm)")
    if "mla_up_proj" in mods and not model.multi_latent_attention:
        out.append("recompute module mla_up_proj needs multi-latent attention")
    if job.precision == "fp8" and job.fp8_recipe == "delayed" and {"moe_act", "layernorm"} & set(mods):
        out.append("recompute modules moe_act and layernorm do not support FP8 delayed scaling")
    if "moe" in mods and job.moe_a2a_overlap and c.ep > 1:
        out.append("recompute module moe cannot be used with the expert-parallel all-to-all overlap")
    return out


# ------------------------------------------------------------------------------------------------
# Rank placement (the orders: RANK_ORDERS)


@dataclass(frozen=True, slots=True)
class Group:
    """The ranks of one communication group: ``first + k * stride`` for ``k < size``; or, with
    ``inner`` > 0, blocks of ``inner`` ranks ``stride`` apart whose starts are ``outer_stride``
    apart (``first + (k % inner) * stride + (k // inner) * outer_stride``): the data-parallel
    group spanning cp and dp when pipeline stages sit between them (``tp-cp-ep-pp-dp``)."""

    stride: int
    size: int
    inner: int = 0
    outer_stride: int = 0

    def offsets(self) -> list[int]:
        """Member offsets from the group's first rank."""
        if not self.inner:
            return [k * self.stride for k in range(self.size)]
        return [
            (k % self.inner) * self.stride + (k // self.inner) * self.outer_stride for k in range(self.size)
        ]


def _dpcp_stride(c: ParallelConfig) -> int:
    """Rank distance between consecutive data-parallel replicas."""
    return c.tp * c.cp * (c.pp if c.rank_order == PP_DP else 1)


def _dpcp_subgroup(c: ParallelConfig, what: str) -> Group | None:
    """A group of the dp-cp ranks in Megatron's enumeration (cp fastest, then dp; the instances of a
    partial distributed optimizer and HSDP's shard groups are consecutive runs of it): ``shard`` the
    first ``shard_degree`` of them, ``replicate`` every ``shard_degree``-th; None when the run does
    not map onto (at most) two strides."""
    if c.shard_degree < 1:  # instances above dp*cp (refused by violations())
        return None
    step, count = (
        (1, c.shard_degree) if what == "shard" else (c.shard_degree, max(1, c.cp * c.dp // c.shard_degree))
    )
    outer = _dpcp_stride(c)
    if outer == c.tp * c.cp or count == 1:  # cp and dp contiguous: one stride
        return Group(c.tp * step, count)
    if step * count <= c.cp and c.cp % (step * count) == 0:  # inside one cp block
        return Group(c.tp * step, count)
    if step % c.cp == 0:  # whole cp blocks: dp strides only
        return Group(outer * (step // c.cp), count)
    if c.cp % step == 0 and count % (c.cp // step) == 0:  # part of each cp block, every dp replica
        return Group(c.tp * step, count, c.cp // step, outer)
    return None


def group(config: ParallelConfig, dim: str) -> Group:
    """Stride and size of the group along ``dim`` in the configuration's rank order (:data:`RANK_ORDERS`).

    ``dim`` is one of tp, cp, dp, pp, ``dpcp`` (the data-parallel gradient group, which spans cp
    and dp), ``ep`` (expert group, stride etp inside tp*cp*dp), ``edp`` (expert data-parallel),
    ``shard`` / ``replicate`` (the consecutive dp*cp ranks a sharded state is split over, and the
    groups across those: HSDP's shard and replica groups, or the distributed optimizer's instance
    and inter-instance groups) and ``eshard`` / ``ereplicate`` (the same over the expert
    data-parallel ranks).
    """
    c = config
    match dim:  # only the group asked for is built (the cost model asks ~300 times per estimate)
        case "tp":
            return Group(1, c.tp)
        case "cp":
            return Group(c.tp, c.cp)
        case "dp":
            return Group(_dpcp_stride(c), c.dp)
        case "dpcp":
            if c.cp == 1:
                return Group(_dpcp_stride(c), c.dp)
            if c.dp == 1 or _dpcp_stride(c) == c.tp * c.cp:  # cp and dp contiguous
                return Group(c.tp, c.cp * c.dp)
            return Group(c.tp, c.cp * c.dp, c.cp, _dpcp_stride(c))
        case "pp":
            return Group(c.tp * c.cp if c.rank_order == PP_DP else c.tp * c.cp * c.dp, c.pp)
        case "ep":
            return Group(c.expert_tp, c.ep)
        case "edp":
            return Group(_edp_stride(c), c.expert_dp)
        case "shard" | "replicate":
            sub = _dpcp_subgroup(c, dim)
            if sub is None:  # refused by violations(); a single stride as the fallback
                return Group(c.tp, c.shard_degree) if dim == "shard" else Group(c.tp * c.shard_degree, 1)
            return sub
        case "eshard":
            return Group(_edp_stride(c), c.expert_shard_degree)
        case "ereplicate":
            return Group(_edp_stride(c) * c.expert_shard_degree, max(1, c.optimizer_instances))
    raise KeyError(dim)


def _edp_stride(c: ParallelConfig) -> int:
    """Rank distance between consecutive expert data-parallel replicas (the expert grid puts pp
    between ep and dp in the tp-pp-dp mapping)."""
    return c.expert_tp * c.ep * (c.pp if c.rank_order == PP_DP else 1)


def group_ranks(config: ParallelConfig, dim: str, first: int = 0) -> list[int]:
    """Ranks of the ``dim`` group that contains rank ``first`` of the first pipeline stage's or
    replica's block (for tests and reports)."""
    g = group(config, dim)
    period = g.outer_stride * (g.size // g.inner) if g.inner else g.stride * g.size
    base = (first // period) * period + first % g.stride
    return [base + o for o in g.offsets()]


@dataclass(frozen=True, slots=True)
class Span:
    """Where a group's members sit: whether it leaves the NVLink domain, and members per domain."""

    crosses_network: bool
    members_per_domain: int


def span(g: Group, node: NodeGroup) -> Span:
    """How a group with ranks ``first + k*stride`` sits in NVLink domains of ``node``.

    Domains hold ``nvlink_domain_size`` consecutive ranks. A group fits in one domain when its
    extent ``stride*size`` divides into the domain; otherwise ``members_per_domain`` of its
    members share each domain (and so that many network links).
    """
    d = node.nvlink_domain_size
    if g.size == 1:
        return Span(False, 1)
    if g.inner:
        # Blocks of ``inner`` ranks: inside one domain when the whole pattern's period divides
        # into it; otherwise the members of one block (and of any further blocks that share the
        # domain) share its network links.
        period = g.outer_stride * (g.size // g.inner)
        if period <= d and d % period == 0:
            return Span(False, g.size)
        in_block = max(1, min(g.inner, d // g.stride)) if g.stride < d else 1
        blocks = max(1, min(g.size // g.inner, d // g.outer_stride)) if g.outer_stride < d else 1
        return Span(True, in_block * (blocks if in_block == g.inner else 1))
    extent = g.stride * g.size
    if extent <= d and d % extent == 0:
        return Span(False, g.size)
    per_domain = max(1, min(g.size, d // g.stride)) if g.stride < d else 1
    return Span(True, per_domain)
