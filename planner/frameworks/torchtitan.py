"""What torchtitan runs at the pinned release: torchtitan 0.2.2 from PyPI, the last release whose
job config is a TOML file (``torchtitan/config/manager.py``: ``--job.config_file``; 0.3.0 replaced
it with Python config registries). File names below are of the 0.2.2 wheel.

* Schedules (``parallelism.pipeline_parallel_schedule``, resolved by
  ``torch.distributed.pipelining.schedules.get_schedule_class``): ``1F1B`` and ``GPipe`` (one
  stage per rank), ``Interleaved1F1B`` (looped, ``pp * vpp`` stages), ``InterleavedZeroBubble``
  (ZB1P of Qi et al. 2024, a looped schedule run here with one stage per rank: ZB-H1),
  ``ZBVZeroBubble`` (ZB-V, exactly two stages per rank). ``distributed/pipeline_parallel.py``
  places stage ``k`` on pp rank ``k % pp`` (chunk-major, as Megatron), and for ZBVZeroBubble (and
  DualPipeV) stages ``r`` and ``2 pp - 1 - r`` on rank ``r`` (``_get_stage_indices``, style
  ``"v"``); it takes the stages from ``module_fqns_per_model_part`` (uneven splits, also with
  virtual stages).
* Looped schedules (torch 2.14 ``schedules.py``) need the micro-batch count ``m`` to be a
  multiple of ``max(1, m // pp)`` (ZBVZeroBubble plans for ``max(2 pp - 1, m)`` and drops the
  missing micro-batches: any m). ``InterleavedZeroBubble`` and ``ZBVZeroBubble`` refuse compiled
  stage modules (``_check_torch_compile_compatibility``), so zb-h1 and zb-v run without
  ``compile.enable``: RoPE and SwiGLU eager (found by ``scripts/validate_exports.py``, torchtitan's
  own pipeline construction).
* Sharding (``models/llama3/infra/parallelize.py``): FSDP2 ``fully_shard`` over
  ``data_parallel_shard_degree * context_parallel_degree``. ``fsdp_reshard_after_forward =
  "always"`` is ZeRO-3; ``"never"`` keeps the gathered parameters until the backward: ZeRO-2
  (``"default"`` is ``never`` with pp > 1, ``always`` otherwise). DDP
  (``data_parallel_replicate_degree``, no sharding) raises "DDP has not supported > 1D
  parallelism" with any other parallelism. No ZeRO-1. FSDP + pp runs (ZeRO-2; ZeRO-3 with pp is
  outside the cost model).
* Mixed precision: bf16 parameters through ``fully_shard``; with TP or PP and no FSDP/CP
  ``distributed/utils.py:maybe_enable_amp`` turns mixed precision off (fp32 training).
* Tensor parallelism always shards norms over the sequence (``SequenceParallel``); the sequence
  length must divide by ``2 * tp * cp`` (``ParallelDims.seq_len_divisor``).
* Experts (``distributed/parallel_dims.py``): ``expert_tensor_parallel_degree`` is 1 or tp, and
  ``ep * etp`` divides ``dp_shard * cp * tp`` (the ``efsdp`` mesh).
* Recompute (``distributed/activation_checkpoint.py``): ``activation_checkpoint.mode = none |
  full`` (every block), and ``selective`` with ``selective_ac_option = "op"``: the per-op policy
  (``_apply_op_sac`` with ``models/llama3/infra/parallelize.py`` ``_op_sac_save_list``), planner's
  recompute ``op`` (:mod:`cost_models.recompute`). ``selective_ac_option = "<n>"`` checkpoints
  every n-th block (``_apply_layer_sac``, a counter over the blocks ``apply_ac`` wraps on the rank):
  full recompute of ``S // n`` layers of an S-layer stage (``planner.frameworks.base.every_nth``),
  searched with n dividing S, where the count is exact on every stage. Megatron's selective
  recompute of core attention does not exist here.
* float8 (torchao, ``quantize.linear.float8``) for linear layers; float8 grouped GEMMs for
  experts are a prototype needing torchao nightly, so fp8 is dense models only.
* Models: see :mod:`planner.frameworks.torchtitan_models` (qwen3 has no pipelining function).
* Elementwise fusion: ``compile.enable`` compiles every ``TransformerBlock`` (and, with the
  default ``compile.components``, the loss); without it RoPE and SwiGLU run eager
  (:data:`EAGER_TORCHTITAN`, priced by :mod:`cost_models.elementwise`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.parallel import ParallelConfig
from planner.frameworks.base import Capabilities, Framework
from planner.frameworks.torchtitan_models import VERSION, titan_model
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

EAGER_TORCHTITAN = ("rope", "activation")
"""``JobSpec.eager_ops`` of torchtitan 0.2.2 without ``compile.enable``: ``apply_rotary_emb``
(``x.float()``, complex multiply, ``type_as``) and ``FeedForward`` (``F.silu(w1(x)) * w3(x)``) as
eager PyTorch ops (``models/llama3/model/model.py``); its ``nn.RMSNorm`` runs PyTorch's fused
``_fused_rms_norm`` CUDA kernel (``aten/src/ATen/native/layer_norm.cpp`` ``rms_norm_symint``;
pytorch/pytorch#153666, in the nightlies 0.2.2 pins), so ``norm`` stays fused."""


def layer_sac_recomputed_layers(stage_layers: int, every: int) -> int:
    """Layers of a stage that ``selective_ac_option = "<n>"`` fully checkpoints: every n-th block
    (``distributed/activation_checkpoint.py`` ``_apply_layer_sac``), read as full recompute of
    ``stage_layers // n`` layers per stage."""
    return stage_layers // every


def dp_shard_degree(c: ParallelConfig) -> int:
    """``data_parallel_shard_degree`` of a configuration (FSDP for zero2/full, else 1; with HSDP the
    shard group ``fsdp_shard`` = dp_shard x cp, torchtitan's mesh order dp_replicate, dp_shard, cp)."""
    if c.fsdp_shard:
        return c.fsdp_shard // c.cp
    return c.dp if c.optimizer_sharding in ("zero2", "full") else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchtitanFramework(Framework):
    """torchtitan: the shared capabilities plus the rules of its meshes, DDP and models."""

    def violations(
        self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
    ) -> list[str]:
        out = Framework.violations(self, model, cluster, job, c)
        who = self.title
        try:
            tm = titan_model(model)
            if c.pp > 1 and not tm.pipelining:
                out.append(f"{who} has no pipeline parallelism for {tm.name} models")
        except SpecError as exc:
            out.append(str(exc))
        shard = dp_shard_degree(c)
        if c.fsdp_shard % c.cp:
            out.append(
                f"{who} shards over dp_shard x cp: fsdp_shard ({c.fsdp_shard}) must be a multiple of cp ({c.cp})"
            )
        if c.optimizer_sharding == "none" and c.dp > 1 and max(c.tp, c.pp, c.cp) > 1:
            out.append(f"{who} runs DDP (no sharding) only without tensor, pipeline or context parallelism")
        elif c.optimizer_sharding == "none" and c.cp > 1:
            out.append(f"{who} always shards parameters over context-parallel ranks (FSDP)")
        if max(c.tp, c.pp) > 1 and shard * c.cp == 1:
            out.append(
                f"{who} trains in fp32 with tensor or pipeline parallelism unless FSDP is on (dp*cp > 1)"
            )
        if job.seq_length % (2 * c.tp * c.cp):
            out.append(f"{who} needs seq_length ({job.seq_length}) divisible by 2*tp*cp = {2 * c.tp * c.cp}")
        if c.ep > 1:
            if c.expert_tp not in (1, c.tp):
                out.append(f"{who} runs expert tp 1 or tp, got {c.expert_tp}")
            elif (shard * c.cp * c.tp) % (c.ep * c.expert_tp):
                out.append(
                    f"{who} needs ep*etp = {c.ep * c.expert_tp} to divide dp_shard*cp*tp = {shard * c.cp * c.tp}"
                )
        if c.pp > 1 and c.schedule in ("interleaved", "zb-h1") and c.dp and c.micro_batch_size:
            # torch 2.14 ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble: rounds = max(1, m // pp)
            m = c.num_microbatches(job)
            if m and m % max(1, m // c.pp):
                out.append(
                    f"{who} needs the {m} micro-batches to be a multiple of max(1, m // pp) = {max(1, m // c.pp)}"
                )
        if c.pp > 1 and c.schedule in ("zb-h1", "zb-v") and not job.eager_ops:
            # torch.distributed.pipelining ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble
            # (schedules.py _check_torch_compile_compatibility, torch 2.14): "not supported with stage
            # modules that have used torch.compile"; the export compiles exactly when the job is all
            # fused.
            name = "InterleavedZeroBubble" if c.schedule == "zb-h1" else "ZBVZeroBubble"
            out.append(
                f"{who} runs {name} ({c.schedule}) only without torch.compile: "
                f"price it with --eager-ops {','.join(EAGER_TORCHTITAN)}"
            )
        if job.precision == "fp8" and model.is_moe:
            out.append(f"{who} has float8 for dense models only (float8 grouped GEMMs are a prototype)")
        return out


TORCHTITAN = TorchtitanFramework(
    name="torchtitan",
    title=f"torchtitan ({VERSION})",
    version=f"torchtitan {VERSION}",
    capabilities=Capabilities(
        schedules=("1f1b", "interleaved", "gpipe", "zb-h1", "zb-v"),
        optimizer_sharding=("none", "zero2", "full"),
        sharding_with_pipeline=("zero2",),
        recompute=("none", "op", "full"),
        partial_recompute=False,
        # selective_ac_option = "<n>" (activation_checkpoint.py _apply_layer_sac)
        every_nth_recompute=True,
        sequence_parallel_optional=False,
        context_parallel=True,
        expert_parallel=True,
        uneven_layers=True,
        uneven_interleaved=True,
        precisions=("bf16", "fp8"),
        # quantize.linear.float8 (torchao Float8Linear): its default recipe scales each tensor by its
        # current amax ("tensorwise"), the recipe_name the export writes.
        fp8_recipes=("tensorwise",),
        heterogeneous_gpus=False,
        # HSDP: data_parallel_replicate_degree x data_parallel_shard_degree (parallelize.py, 2-D mesh)
        hsdp=True,
        # Async TP (parallelism.enable_async_tensor_parallel) needs torch.compile of the model;
        # the export does not enable async TP: tensor-parallel collectives stay exposed.
        tp_comm_overlap=False,
        # compile.enable (job_config.py Compile; torch.compile of every TransformerBlock and the
        # loss) fuses the elementwise ops; without it RoPE (apply_rotary_emb: float(), complex
        # multiply, type_as) and SwiGLU (F.silu(w1(x)) * w3(x)) run eager
        # (models/llama3/model/model.py), while nn.RMSNorm dispatches to PyTorch's fused
        # _fused_rms_norm kernel on CUDA (the nightly torch 0.2.2 pins). The export sets compile.enable
        # exactly when the plan's job is all fused.
        eager_ops=((), EAGER_TORCHTITAN),
        # training.mixed_precision_reduce: Literal["float32"] (job_config.py): FSDP reduces in fp32.
        grad_dtypes=(("bf16", "fp32"), ("fp8", "fp32")),
        # FSDP2's MixedPrecisionPolicy(param_dtype=bf16) keeps the sharded fp32 parameters as the
        # optimizer's weights, and torch.optim.AdamW keeps its moments in the parameters' dtype.
        optimizer_dtypes=(("fp32", "fp32"),),
    ),
    source=(
        f"torchtitan/config/job_config.py, torchtitan/distributed/{{parallel_dims,pipeline_parallel,"
        f"activation_checkpoint}}.py, torchtitan/models/llama3/infra/parallelize.py (torchtitan {VERSION})"
    ),
)
