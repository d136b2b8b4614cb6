"""Megatron-LM's constraints on a parallel configuration (../shared/reference/megatron-args.md §2.6):
:func:`violations` lists every one a :class:`~cost_models.parallel.ParallelConfig` breaks, as values
(a search counts them as reasons), and :func:`resolve` derives the data-parallel degree from the
cluster and raises the first as a ConfigError. Each check cites the Megatron-Core code that asserts it.
"""

from __future__ import annotations

from cost_models.parallel import (
    OPTIMIZER_SHARDING,
    PP_DP,
    RANK_ORDERS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    SHARDED_GRADIENTS,
    ParallelConfig,
)
from cost_models.placement import dpcp_subgroup
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


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
            if dpcp_subgroup(c, what) is None:
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
