"""The job specification: :class:`JobSpec`, what is trained per iteration and with which
numerics, as one frozen, keyword-only value (STYLE.md lesson 1), and the vocabularies of its
fields (precisions, dtypes, FP8 recipes, attention kernels, MoE dispatchers, CUDA graph scopes).

Built by :func:`planner.inputs.jobs.make_job` and :func:`planner.inputs.jobs.job_from_mapping`.
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4")
QUANTIZED_PRECISIONS = ("fp8", "nvfp4", "mxfp4")
"""Precisions whose linear layers run quantized GEMMs behind Transformer Engine (BF16 elsewhere:
core attention, the output layer's logits, norms): FP8 (``--fp8-format``) and NVFP4
(``--fp4-format e2m1 --fp4-recipe nvfp4``, Megatron-Core ``TransformerConfig.fp4`` /
``fp4_recipe``; Transformer Engine ``NVFP4BlockScaling``: E2M1 values with one E4M3 scale per 16
and an FP32 scale per tensor, random Hadamard transforms on the weight-gradient GEMM's inputs,
stochastic rounding of gradients, 2D 16x16 scaling of weights; NVIDIA, "Pretraining Large
Language Models with NVFP4", arXiv:2509.25149, Sec. 4) and MXFP4 (the OCP Microscaling format: E2M1
values with one E8M0 power-of-two scale per 32 elements and no per-tensor scale; OCP "Microscaling
Formats (MX) Specification" v1.0, 2023, Table 1; the recipe AMD's MLPerf Training v6.0
Llama 3.1 8B submissions ran on MI355X with Primus, ``FP4_RECIPE=mxfp4``; no Megatron-Core flag
selects it, so only ``--framework any`` plans it)."""
FP4_PRECISIONS = ("nvfp4", "mxfp4")
"""The quantized precisions whose GEMMs run on FP4 tensor cores (a GPU file's ``fp4`` peak)."""
NVFP4_MIN_COMPUTE_CAPABILITY = 10
"""NVFP4 GEMMs run on Blackwell (SM 10.0) and later only (Transformer Engine user guide, "NVFP4":
FP4 tensor cores of the Blackwell architecture; Megatron-Bridge's NVFP4 recipes are for B200,
GB200, B300 and GB300)."""
DTYPES = ("fp32", "bf16", "fp16")
ATTENTION_IMPLS = ("fused", "unfused", "flash2")
"""How core attention runs (:attr:`JobSpec.attention_impl`). ``fused`` on a GPU below Ampere (V100,
T4) is priced ``unfused`` (:func:`cost_models.attention.attention_impl_on`); ``flash2`` there is
refused (:func:`planner.inputs.validation.require_precision`)."""
SHARDED_GRAD_REDUCES = ("reduce_scatter", "all_reduce")
"""How gradients reach a distributed (ZeRO-1) optimizer (:attr:`JobSpec.sharded_grad_reduce`)."""
FP8_RECIPES = ("tensorwise", "delayed", "blockwise", "mxfp8")
"""FP8 scaling recipes (``JobSpec.fp8_recipe``), Megatron-Core's ``--fp8-recipe`` names
(``TransformerConfig.fp8_recipe``; Transformer Engine's ``Float8CurrentScaling``, ``DelayedScaling``,
``Float8BlockScaling`` and ``MXFP8BlockScaling``)."""
MXFP8_MIN_COMPUTE_CAPABILITY = 10
"""MXFP8 runs on Blackwell (SM 10.0) and later only (Transformer Engine user guide, "MXFP8": "native
hardware acceleration on Blackwell GPUs (SM 10.0+)"; Megatron-Core ``fp8_recipe``: "'mxfp8' for
Blackwell architecture only")."""

EAGER_OPS = ("norm", "rope", "activation")
"""Elementwise op groups a job may run as separate eager PyTorch kernels instead of fused ones
(:attr:`JobSpec.eager_ops`; byte counts in :mod:`cost_models.elementwise`)."""

MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
"""Values of :attr:`JobSpec.moe_dispatcher` (Megatron-Core ``--moe-token-dispatcher-type``)."""
CUDA_GRAPH_SCOPES = ("full", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")
"""Values of :attr:`JobSpec.cuda_graph_scope`: Megatron-Core's ``--cuda-graph-scope`` choices
(``megatron/training/arguments.py``; ``mamba`` left out: no Mamba layers here) and ``full``, every
whole transformer layer (``--cuda-graph-impl`` with no scope)."""

FINETUNES = ("full", "lora")
"""Values of :attr:`JobSpec.finetune`: every weight trained (pre-training, SFT) or LoRA adapters on
a frozen base."""
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
"""Linear layers of a decoder layer that LoRA adapters can wrap (:attr:`JobSpec.lora_targets`), by the
names Megatron-Bridge's ``LoRA.target_modules`` and NeMo's PEFT use (src/megatron/bridge/peft/lora.py:
"'linear_qkv' ... query, key, and value projections", "'linear_proj' ... projecting the output of
self-attention", "'linear_fc1'" and "'linear_fc2'" of the MLP)."""
LORA_TARGET_GROUPS = {
    "attention": ("linear_qkv", "linear_proj"),
    "mlp": ("linear_fc1", "linear_fc2"),
    "all": LORA_TARGETS,
}
"""Shorthands for :data:`LORA_TARGETS`: ``attention`` (NeMo's ``target_modules: ['attention']``, the
adapters of MLPerf Training's Llama 2 70B LoRA benchmark), ``mlp``, ``all`` (Megatron-Bridge's
default: "Defaults to all linear layers")."""
FROZEN_WEIGHT_DTYPES = ("bf16", "fp8")
"""Storage dtypes of a LoRA job's frozen base weights (:attr:`JobSpec.frozen_weight_dtype`)."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of each dtype."""

COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16", "nvfp4": "bf16", "mxfp4": "bf16"}
"""Peak used as the base for each job precision (FP8 is BF16 peak times the calibrated FP8 speed-up,
NVFP4 and MXFP4 that times the FP4-over-FP8 kernel speed-up, cost_models.compute.fp4_speedup)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """What is being trained per iteration and with which numerics."""

    global_batch_size: int
    """Sequences per optimizer step."""
    seq_length: int
    """Tokens per sequence."""
    precision: str = "bf16"
    """Compute precision of GEMMs: bf16, fp16, fp8, nvfp4 or mxfp4 (:data:`QUANTIZED_PRECISIONS`:
    FP8, NVFP4 or MXFP4 GEMMs in the linear layers, BF16 elsewhere)."""
    fp8_recipe: str = "tensorwise"
    """How FP8 tensors are scaled (:data:`FP8_RECIPES`; only read when ``precision`` is fp8):
    ``tensorwise`` (per-tensor current scaling, the default: the recipe both Megatron-Core and
    torchtitan's float8 run, and the one of NVIDIA's Hopper performance recipes), ``delayed``
    (per-tensor scale from an amax history; Megatron-Core's own default), ``blockwise`` (1 x 128 /
    128 x 128 blocks, FP32 scales) or ``mxfp8`` (32-element blocks, E8M0 scales; Blackwell only,
    :data:`MXFP8_MIN_COMPUTE_CAPABILITY`). The recipes quantize with different HBM traffic
    (:func:`cost_models.compute.fp8_cast_bytes`)."""
    optimizer: str = "adam"
    """Optimizer; only Adam (two moments per parameter, :attr:`optimizer_state_dtype`) is modelled."""
    grad_dtype: str = "fp32"
    """Dtype of the main gradients (Megatron accumulates bf16 grads in fp32 by default)."""
    master_dtype: str = "fp32"
    """Dtype of the master copy of the weights held by the optimizer."""
    optimizer_state_dtype: str = "fp32"
    """Dtype of Adam's two moments (``exp_avg``, ``exp_avg_sq``). Megatron-Core keeps them in fp32
    unless ``--use-precision-aware-optimizer`` with ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype``
    (Transformer Engine's ``FusedAdam``; megatron/core/optimizer/optimizer_config.py: other dtypes
    "can only be fp32 when not using precision-aware optimizer"), as Megatron-Bridge's DeepSeek-V3
    recipe sets bf16 (src/megatron/bridge/recipes/deepseek/deepseek_v3.py,
    ``opt_config.exp_avg_dtype = torch.bfloat16``)."""
    overlap_grad_reduce: bool = True
    """Overlap the data-parallel gradient reduction with backward (``--overlap-grad-reduce``)."""
    overlap_param_gather: bool = True
    """Overlap the distributed optimizer's parameter all-gather with forward."""
    gradient_accumulation_fusion: bool = True
    """Weight-gradient GEMMs accumulate straight into the main gradient buffer (Megatron-LM's
    default ``gradient_accumulation_fusion``: TE / APEX wgrad kernels with beta = 1). False
    (``--no-gradient-accumulation-fusion``): each micro-batch's weight gradient is written in
    16 bits and added to the main gradient by a separate kernel
    (:func:`cost_models.estimate.unfused_accumulation_bytes`). Megatron-FSDP always runs unfused and its
    sharded gradient path is priced as such, so the field changes nothing there."""
    tp_comm_overlap: bool = False
    """Overlap the sequence-parallel all-gathers / reduce-scatters with the GEMMs next to them
    (Megatron-LM ``--tp-comm-overlap``: Transformer Engine userbuffers; needs sequence parallelism).
    Off by default: it needs Transformer Engine's userbuffers bootstrap, and a plan only claims it
    when its launch sets it."""
    moe_dispatcher: str = "alltoall"
    """MoE token dispatcher (Megatron-Core ``--moe-token-dispatcher-type``): ``alltoall``
    (permute, all-to-all over the expert-parallel group, sort by expert; the default), ``allgather``
    (all-gather the tokens, keep the local experts' ones) or ``flex`` (DeepEP / HybridEP kernels
    that permute while they communicate, ``--moe-flex-dispatcher-backend``)."""
    moe_a2a_overlap: bool = False
    """Hide the expert-parallel all-to-alls of one micro-batch under another micro-batch's compute
    (Megatron-Core ``--overlap-moe-expert-parallel-comm``, the 1F1B "A2A overlap")."""
    cuda_graph_scope: tuple[str, ...] = ()
    """What CUDA graphs capture (Megatron-Core ``--cuda-graph-impl`` with ``--cuda-graph-scope``;
    :data:`CUDA_GRAPH_SCOPES`); () = none. A captured part of an MoE layer costs the host one graph
    launch instead of one launch per kernel (cost_models.moe.host_launches)."""
    eager_ops: tuple[str, ...] = ()
    """Elementwise op groups (of :data:`EAGER_OPS`: ``norm``, ``rope``, ``activation``) that run as
    eager PyTorch, one kernel and one HBM round trip per PyTorch op, instead of one fused kernel
    each. Empty (the default): all fused, as Megatron-Core with Transformer Engine and
    ``torch.compile`` run them. torchtitan without ``torch.compile`` runs ``rope`` and
    ``activation`` eager (``norm`` too before PyTorch's fused RMSNorm kernel); the bytes each group
    moves either way are derived in :mod:`cost_models.elementwise`. Kept in :data:`EAGER_OPS`
    order."""
    attention_impl: str = "fused"
    """Core attention (:data:`ATTENTION_IMPLS`): ``fused``, one flash-attention kernel per
    direction written for the GPU's generation (cuDNN / Transformer Engine fused attention,
    FlashAttention-3 on Hopper, FlashAttention-2 on Ampere, PyTorch SDPA where it picks cuDNN);
    ``flash2``, FlashAttention-2 kernels on any GPU (the flash-attn 2 package, and PyTorch SDPA's
    default backend on Hopper and Blackwell before PyTorch 2.11), which run at
    :data:`cost_models.attention.FLASH2_SPEED` of the fused kernel from Hopper on
    (:func:`cost_models.attention.kernel_speed`); or ``unfused``, Megatron-LM's ``CoreAttention``
    before flash attention (2019-2022 releases, Megatron-DeepSpeed): two batched GEMMs around a
    fused scale-mask-softmax kernel and attention dropout, with the score matrix written to HBM
    (:func:`cost_models.unfused_attention.unfused_core_attention`)."""
    pipeline_scatter_gather: bool = False
    """Without sequence parallelism, each tensor-parallel rank sends 1/tp of the hidden states (and
    of their gradient) to the next pipeline stage, whose ranks all-gather them over tp: the
    "scatter/gather optimization" of Narayanan et al. 2021 (arXiv:2104.04473, Sec. 4.1), on by
    default in Megatron-LM from 2021-02 (commit 72e4230bb5) until the pipeline code moved into
    Megatron-Core (2023-01, commit 39b83c7953, which sends whole tensors unless sequence
    parallelism splits them), and DeepSpeed's ``PipelineEngine`` with model parallelism
    (``is_pipe_partitioned`` / ``is_grad_partitioned``, ``deepspeed/runtime/pipe/engine.py``).
    Priced by :func:`cost_models.tensors.pipeline_transfer_s`; neither pinned framework runs it
    (their capabilities refuse it), so it describes published runs of older software."""
    sharded_grad_reduce: str = "reduce_scatter"
    """How a distributed (ZeRO-1) optimizer's gradients are reduced over the data-parallel ranks
    (:data:`SHARDED_GRAD_REDUCES`; read only with ``optimizer_sharding: distributed``):
    ``reduce_scatter``, each rank receives the reduced shard it updates (Megatron-Core's distributed
    optimizer, megatron/core/distributed/param_and_grad_buffer.py ``start_grad_sync``; DeepSpeed
    ZeRO stage 1-2, whose ``average_tensor`` reduces each slice to its owner), or ``all_reduce``,
    the whole gradient is all-reduced on every rank before each updates its shard and the updated
    parameters are all-gathered: DeepSpeed's pipeline engine with its ``BF16_Optimizer``
    (``deepspeed/runtime/pipe/engine.py`` ``_bf16_reduce_grads``: ``buffered_allreduce_fallback``
    over the optimizer's fp32 gradients, then ``all_gather_dp_groups`` in
    ``bf16_optimizer.py`` ``step``; BLOOM's BF16 runs) and Aleph Alpha's codebase with ZeRO
    (Aleph-Alpha/scaling ``src/scaling/core/optimizer/optimizer.py``, ``Optimizer.step``:
    ``allreduce_gradients`` before the sharded step). The all-reduce moves twice the bytes of the
    reduce-scatter. Priced by :func:`cost_models.estimate.dp_sync`; neither pinned framework runs
    it (their capabilities refuse it), so it describes published runs of other software."""

    finetune: str = "full"
    """:data:`FINETUNES`: ``full`` trains every weight (pre-training, and supervised fine-tuning);
    ``lora`` freezes the base model and trains LoRA adapters of rank :attr:`lora_rank` beside the
    linear layers of :attr:`lora_targets` (Hu et al. 2021, arXiv:2106.09685; Megatron-Bridge
    ``src/megatron/bridge/peft/lora.py``, whose ``PEFT.freeze_model`` sets ``requires_grad = False``
    on every base parameter). Priced by :mod:`cost_models.finetune`."""
    lora_rank: int = 16
    """Adapter rank r (Megatron-Bridge ``LoRA.dim``): 16 as MLPerf Training's Llama 2 70B LoRA
    benchmark and Megatron-Bridge's Llama 3 70B PEFT recipe (``llama3_70b_peft_config``: "70B uses
    dim=16"). Read only with ``finetune: lora``."""
    lora_targets: tuple[str, ...] = ("linear_qkv", "linear_proj")
    """The decoder layers' linear layers that get adapters (:data:`LORA_TARGETS`, in that order);
    the attention projections by default, as MLPerf's LoRA benchmark. Read only with ``finetune: lora``."""
    frozen_weight_dtype: str = "bf16"
    """Storage of the frozen base weights (:data:`FROZEN_WEIGHT_DTYPES`): 16-bit, or FP8 (one byte, as
    Transformer Engine's FP8 parameters keep them: Megatron-Bridge's ``fp8_param``, which its FP8
    current-scaling precision sets, ``bf16_with_fp8_current_scaling_mixed``: ``fp8_param_gather = True``;
    needs ``precision`` fp8). Read only with ``finetune: lora``."""
    packed_avg_doc_len: int = 0
    """Average length in tokens of the documents packed into each sequence (0: one document fills the
    sequence, as pre-training data is priced). Packed sequences (THD layout, Megatron-Core
    ``PackedSeqParams`` with ``cu_seqlens``; Megatron-Bridge's ``packed_sequence_specs`` for SFT and
    PEFT) attend only within each document, so core attention is priced over documents of this
    length (:attr:`doc_length`); every other FLOP is per token and unchanged."""

    @property
    def is_lora(self) -> bool:
        """Whether the base model is frozen and LoRA adapters are trained."""
        return self.finetune == "lora"

    @property
    def doc_length(self) -> int:
        """Tokens one query can attend over: the packed documents' length, else the sequence."""
        return min(self.packed_avg_doc_len, self.seq_length) if self.packed_avg_doc_len else self.seq_length

    @property
    def tokens_per_step(self) -> int:
        """Tokens processed per optimizer step."""
        return self.global_batch_size * self.seq_length

    @property
    def optimizer_below_fp32(self) -> bool:
        """Whether the optimizer keeps its master weights or Adam's moments below fp32: Megatron-Core's
        precision-aware optimizer (``--use-precision-aware-optimizer``), the only one that does."""
        return (self.master_dtype, self.optimizer_state_dtype) != ("fp32", "fp32")
