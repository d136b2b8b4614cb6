"""The data-parallel side of an iteration: gradient accumulation, gradient reduction, parameter
gather and optimizer step, per pipeline rank.

The data-parallel reduction overlaps the last micro-batch's backward (Megatron
``--overlap-grad-reduce`` launches buckets as their gradients become final); the last bucket
(Megatron's default 40M parameters, ``--ddp-bucket-size``) is always exposed. The parameter
all-gather of the distributed optimizer overlaps the next iteration's first forward
(``--overlap-param-gather``). :func:`cost_models.estimate.estimate` adds these per-iteration terms
after the pipeline phase; the per-micro-batch passes of FSDP / ZeRO-2 are priced by
:mod:`cost_models.fsdp`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import communication as comm
from cost_models import memory as mem
from cost_models.compute import memory_bound_s
from cost_models.parallel import SHARDED_GRADIENTS, ParallelConfig
from cost_models.placement import group
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.job_spec import DTYPE_BYTES, JobSpec
from planner.inputs.model_spec import ModelSpec

DDP_BUCKET_PARAMS = 40_000_000
"""Megatron's default gradient bucket size in parameters (``--ddp-bucket-size``) at small dp."""


def ddp_bucket_params(dp_cp: int) -> int:
    """Megatron-Core's default bucket size for a data-parallel group of ``dp_cp`` ranks:
    max(40M, 1M x dp) parameters, "larger DP sizes need larger buckets to ensure collectives do not
    become latency-bound" (megatron/core/distributed/distributed_data_parallel_config.py
    ``bucket_size``; megatron/training/models/dist_utils.py sets it from the dp-cp group's size)."""
    return max(DDP_BUCKET_PARAMS, 1_000_000 * dp_cp)


def adam_bytes_per_param(job: JobSpec) -> float:
    """HBM traffic of one optimizer step per optimizer-owned parameter, kernel by kernel as
    Megatron-Core runs it (megatron/core/optimizer/optimizer.py ``step``: ``prepare_grads``,
    ``clip_grad_norm``, the inner ``optimizer.step()``, ``_copy_main_params_to_model_params``;
    megatron-core 0.19.2). With ``g`` the gradient's bytes (``JobSpec.grad_dtype``), ``m`` the
    master weight's and ``s`` a moment's:

    * the main gradient the step reads: the 16-bit gradient shard in place when the
      precision-aware optimizer takes it (:func:`cost_models.memory.step_reads_16bit_grads`), else
      an fp32 one; 16-bit gradients are first copied to it (``.float()`` in
      ``_copy_model_grads_to_main_grads``: read ``g``, write 4);
    * fp16 training unscales the main gradient and checks it for inf/NaN (read and write it,
      ``_unscale_main_grads_and_check_for_nan``; bf16 has no loss scaler);
    * the gradient norm for clipping reads it once (``get_grad_norm_fp32``, ``multi_tensor_l2norm``;
      the data-dependent rescale when the norm exceeds ``clip_grad`` is not charged);
    * Adam reads the main gradient, reads and writes the master weight (2 m) and the moments (4 s);
    * the 16-bit weight is written from the master weight: a separate copy (read m, write 2) unless
      the precision-aware optimizer's FusedAdam writes it inside its kernel (write 2, Transformer
      Engine ``FusedAdam(master_weights=...)``). Megatron-FSDP copies too
      (``copy_main_weights_to_model_weights``); PyTorch FSDP (torchtitan, Composer) keeps the
      sharded fp32 parameter and casts it at the gather instead, a difference the cost model does
      not know the framework to make (6 bytes per parameter and step, milliseconds).

    fp32 everything under bf16: 4 + 28 + 6 = 38 bytes; the DeepSeek-V3 recipe's bf16 gradients
    and moments, precision-aware: 2 + 2 + 8 + 8 + 2 = 22."""
    grad = float(DTYPE_BYTES[job.grad_dtype])
    master = float(DTYPE_BYTES[job.master_dtype])
    state = float(DTYPE_BYTES[job.optimizer_state_dtype])
    in_place = mem.step_reads_16bit_grads(job)
    main = grad if in_place else 4.0
    prepare = grad + 4.0 if not in_place and grad < 4.0 else 0.0
    if job.precision == "fp16":
        prepare += 2.0 * main
    weight_copy = 2.0 if in_place else master + 2.0
    return prepare + main + (main + 2.0 * master + 4.0 * state) + weight_copy


def unfused_accumulation_bytes(job: JobSpec) -> float:
    """HBM traffic per parameter per micro-batch of unfused gradient accumulation (Megatron-LM
    ``--no-gradient-accumulation-fusion``): the weight-gradient GEMM writes a 16-bit gradient, which
    the data-parallel wrapper's hook adds to the main gradient (``param.main_grad.add_(param.grad)``,
    megatron/core/distributed/distributed_data_parallel.py ``_make_backward_post_hook``): a
    memory-bound kernel that reads the 16-bit gradient and reads and writes the main gradient
    (``JobSpec.grad_dtype``): 10 bytes with fp32 main gradients. The GEMM's own output traffic
    (a 16-bit write unfused; a read-modify-write of the main gradient fused, beta = 1 in the
    epilogue) stays inside a compute-bound kernel either way and is part of the calibrated GEMM
    efficiency, so only the extra kernel is charged."""
    main = float(DTYPE_BYTES[job.grad_dtype])
    return 2.0 + 2.0 * main


def unfused_accumulation_applies(job: JobSpec, c: ParallelConfig) -> bool:
    """Whether the unfused accumulation pass is charged: only on the DDP / distributed-optimizer
    path; Megatron-FSDP's sharded gradients (zero2, full) are priced by their own path."""
    return not job.gradient_accumulation_fusion and c.optimizer_sharding not in SHARDED_GRADIENTS


@dataclass(frozen=True, slots=True)
class DPSync:
    """Data-parallel synchronisation and optimizer step of one pipeline rank, per iteration."""

    reduce_s: float
    reduce_exposed_s: float
    gather_s: float
    gather_exposed_s: float
    optimizer_s: float


def _exposed(comm_s: float, window_s: float, node: NodeGroup, floor_s: float = 0.0) -> float:
    """:func:`cost_models.communication.overlapped_s` with the node's GPU slowdown."""
    return comm.overlapped_s(comm_s, window_s, node.gpu.efficiency.comm_overlap_slowdown, floor_s)


def dp_sync(
    job: JobSpec,
    c: ParallelConfig,
    node: NodeGroup,
    dense_params: float,
    expert_params: float,
    m: int,
    backward_window_s: float,
    forward_window_s: float,
) -> DPSync:
    """Gradient reduction, parameter gather and optimizer step of a rank holding these parameters.

    The reduction overlaps ``backward_window_s`` (the last micro-batch's backward), the gather
    overlaps ``forward_window_s`` (the next iteration's first forward); the last bucket of each is
    always exposed.
    """
    grad_b = float(DTYPE_BYTES[job.grad_dtype])
    d_dense, d_exp = c.dp * c.cp, (c.tp * c.cp * c.dp) // (c.expert_tp * c.ep)
    link_d = comm.link_for(group(c, "dpcp"), node)
    link_e = comm.link_for(group(c, "edp"), node)
    if c.optimizer_sharding == "none":
        reduce_s = comm.all_reduce_s(dense_params * grad_b, d_dense, link_d) + comm.all_reduce_s(
            expert_params * grad_b, d_exp, link_e
        )
        gather_s = 0.0
    elif c.optimizer_sharding == "zero2" and m > 1:
        # gradients were reduce-scattered per micro-batch; only the parameter all-gather remains
        reduce_s = 0.0
        gather_s = comm.all_gather_s(dense_params * 2.0, d_dense, link_d) + comm.all_gather_s(
            expert_params * 2.0, d_exp, link_e
        )
    elif c.optimizer_sharding == "distributed" and job.sharded_grad_reduce == "all_reduce":
        # The whole gradient all-reduced on every rank, then the updated shards all-gathered inside
        # the sharding group (JobSpec.sharded_grad_reduce: DeepSpeed's pipeline BF16_Optimizer,
        # Aleph Alpha's ZeRO).
        reduce_s = comm.all_reduce_s(dense_params * grad_b, d_dense, link_d) + comm.all_reduce_s(
            expert_params * grad_b, d_exp, link_e
        )
        gather_s = comm.all_gather_s(
            dense_params * 2.0, c.shard_degree, comm.link_for(group(c, "shard"), node)
        ) + comm.all_gather_s(
            expert_params * 2.0, c.expert_shard_degree, comm.link_for(group(c, "eshard"), node)
        )
    elif c.optimizer_sharding == "distributed" and c.optimizer_instances > 1:
        # Partial distributed optimizer: reduce-scatter inside the instance, all-reduce of the
        # shard across instances (one stream, in that order), all-gather inside the instance
        # (megatron/core/distributed/param_and_grad_buffer.py ``start_grad_sync`` /
        # ``start_param_sync``).
        reduce_s = gather_s = 0.0
        for params, shard, n_shard, replicas in (
            (dense_params, c.shard_degree, group(c, "shard"), group(c, "replicate")),
            (expert_params, c.expert_shard_degree, group(c, "eshard"), group(c, "ereplicate")),
        ):
            inside, across = comm.link_for(n_shard, node), comm.link_for(replicas, node)
            reduce_s += comm.reduce_scatter_s(params * grad_b, shard, inside) + comm.all_reduce_s(
                params * grad_b / shard, replicas.size, across
            )
            gather_s += comm.all_gather_s(params * 2.0, shard, inside)
    elif c.optimizer_sharding in ("distributed", "zero2"):
        reduce_s = comm.reduce_scatter_s(dense_params * grad_b, d_dense, link_d) + comm.reduce_scatter_s(
            expert_params * grad_b, d_exp, link_e
        )
        gather_s = comm.all_gather_s(dense_params * 2.0, d_dense, link_d) + comm.all_gather_s(
            expert_params * 2.0, d_exp, link_e
        )
    else:  # full sharding: gathers and reduce-scatters are paid per micro-batch inside the pipeline
        gather_s = 0.0
        # HSDP: the shard group's gradient shard is all-reduced across the replicas (Zhao et al.
        # 2023, arXiv:2304.11277, Sec. 3.2.2 "hybrid sharding"; torchtitan
        # data_parallel_replicate_degree), once per iteration, overlapping the last backward.
        replicas = group(c, "replicate")
        reduce_s = comm.all_reduce_s(
            dense_params * grad_b / c.shard_degree, replicas.size, comm.link_for(replicas, node)
        )
    last_bucket = min(1.0, ddp_bucket_params(d_dense) / max(dense_params + expert_params, 1.0))
    reduce_exposed = (
        _exposed(reduce_s, backward_window_s, node, reduce_s * last_bucket)
        if job.overlap_grad_reduce
        else reduce_s
    )
    gather_exposed = (
        _exposed(gather_s, forward_window_s, node, gather_s * last_bucket)
        if job.overlap_param_gather
        else gather_s
    )
    shard, shard_e = mem.shard_degrees(c)
    opt_s = memory_bound_s(
        (dense_params / shard + expert_params / shard_e) * adam_bytes_per_param(job), node.gpu
    )
    return DPSync(reduce_s, reduce_exposed, gather_s, gather_exposed, opt_s)


def synced_embedding_params(model: ModelSpec, job: JobSpec, c: ParallelConfig) -> float:
    """Parameters of the word-embedding gradient each rank of the embedding group all-reduces
    (:func:`embedding_sync_s`), 0 where Megatron-Core skips it.

    Megatron-Core's ``_allreduce_word_embedding_grads``
    (megatron/core/distributed/finalize_model_grads.py) reduces the weight
    ``_get_shared_word_embedding_weight`` returns: the word embedding on the first stage and its
    copy on the last when the output layer shares its weights (``share_embeddings_and_output_weights``)
    or when multi-token prediction needs the embedding on the last stage (``mtp_num_layers``, tied
    or not); nothing when the embedding group has one rank (pp = 1, ``default_embedding_ranks``)
    or the embedding is frozen (its gradient is ``None``: a LoRA job's base). The tensor is the
    whole ``V x h / tp`` main gradient (``main_grad``), also under the distributed optimizer;
    Megatron-FSDP's sharded gradients (:data:`~cost_models.parallel.SHARDED_GRADIENTS`) reduce
    only the local shard (``orig_grad._local_tensor``)."""
    if c.pp <= 1 or job.finetune != "full":
        return 0.0
    if model.untie_embeddings_and_output_weights and not model.mtp_num_layers:
        return 0.0
    shard = mem.shard_degrees(c)[0] if c.optimizer_sharding in SHARDED_GRADIENTS else 1
    return model.vocab_size * model.hidden_size / c.tp / shard


def embedding_sync_s(job: JobSpec, c: ParallelConfig, embedding_params: float, link: comm.Link) -> float:
    """All-reduce of the shared word embedding's gradient between the first and the last pipeline
    stage, per iteration, paid by both after their data-parallel reduction and before the
    optimizer step (nothing overlaps it).

    ``embedding_params``: what each rank reduces (:func:`synced_embedding_params`). The group is
    the first and the last pipeline rank of every (tp, cp, dp) slice (Megatron-Core
    ``parallel_state.default_embedding_ranks``, two ranks), and Megatron-Core's
    ``finalize_model_grads`` calls ``_allreduce_word_embedding_grads`` after
    ``finish_grad_sync`` has waited for the data-parallel reduction
    (megatron/core/distributed/finalize_model_grads.py; Shoeybi et al. 2019, arXiv:1909.08053,
    Sec. 3, for the shared embedding); DeepSpeed's pipeline engine likewise runs
    ``ReduceTiedGrads`` after its last backward (deepspeed/runtime/pipe/engine.py
    ``_exec_reduce_tied_grads``). The tensor is the main gradient, in the gradient-reduce dtype
    (:attr:`JobSpec.grad_dtype`: fp32 under ``--accumulate-allreduce-grads-in-fp32``, the grad
    buffer's ``torch.float if grad_reduce_in_fp32 else param.dtype`` in
    megatron/core/distributed/param_and_grad_buffer.py). ``link``: the slower of the two stages'
    links (:func:`cost_models.stage_terms.stage_link`); every slice's pair runs at once, which the
    per-GPU share of the link already prices. 0 without pipelining."""
    if c.pp <= 1 or embedding_params <= 0:
        return 0.0
    return comm.all_reduce_s(embedding_params * DTYPE_BYTES[job.grad_dtype], 2, link)
