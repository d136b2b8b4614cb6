"""What Megatron-LM runs at the pinned release (megatron-core 0.19.2, whose wheel ships
``megatron/training/arguments.py``; ../shared/reference/megatron-args.md).

* Schedules: ``megatron/core/pipeline_parallel/schedules.py`` has
  ``forward_backward_pipelining_without_interleaving`` (1F1B) and ``..._with_interleaving``
  (interleaved 1F1B, ``--num-virtual-stages-per-pipeline-rank``); no GPipe and no zero-bubble
  schedule upstream.
* Sharding: ``--use-distributed-optimizer`` (ZeRO-1); Megatron-FSDP (``--use-megatron-fsdp``) with
  ``--data-parallel-sharding-strategy optim_grads`` (ZeRO-2) or ``optim_grads_params`` (ZeRO-3), see
  Megatron-LM docs/discussions/megatron-fsdp-user-guide. Megatron-FSDP is planned without pipeline
  parallelism (the cost model prices FSDP gathers per layer of a single stage).
* Recompute: ``--recompute-granularity selective|full``, ``--recompute-method uniform|block``,
  ``--recompute-num-layers`` (partial full recompute), ``--recompute-modules`` (selective:
  ``TransformerConfig.recompute_modules``).
* Uneven stages: ``--decoder-first/last-pipeline-num-layers`` and
  ``--pipeline-model-parallel-layout`` (also with virtual stages).
* Partial distributed optimizer: ``--num-distributed-optimizer-instances N`` (optimizer states
  sharded inside N instances of dp*cp/N ranks; parallel_state.py asserts N divides dp*cp and the
  expert data-parallel size, DistributedDataParallel that it runs with the distributed optimizer).
* Rank layout: Megatron's default ``tp-cp-ep-dp-pp`` or ``--use-tp-pp-dp-mapping``
  (``tp-cp-ep-pp-dp``: a pipeline's stages adjacent, data-parallel replicas outermost), the latter
  only where the dense and expert data-parallel sizes agree when pp > 1.
* Activation offloading: ``--cpu-offloading-num-layers`` (TransformerConfig: pp 1, no recompute,
  CUDA graphs only over the full iteration).
* Mixed GPU types: Megatron places ranks in launch order; planner exports a Slurm heterogeneous job
  whose components are the plan's node groups in pipeline order.
* Models it has no flags for (:func:`model_reasons`): chunked attention (Llama 4's
  ``attention_chunk_size``; ``--window-size`` is a sliding window only), a plain ReLU MLP
  (``--squared-relu``, ``--swiglu`` and GeLU only), a GeGLU MLP (Gemma's; ``--quick-geglu`` gates
  another GELU), Mamba-2 mixers of another convolution width
  or scan chunk than ``MambaMixer``'s fixed ones, Mamba-1 mixers (Jamba's; megatron-core has
  Mamba-2 only), Kimi Delta Attention (Kimi Linear's; ``experimental_attention_variant`` is
  ``gated_delta_net`` or ``dsa``), attention and Mamba-2 side by side in one layer (Falcon-H1's;
  Megatron-Bridge's own ``FalconH1Model`` builds it, megatron-core does not) and a per-layer linear-attention list (the export writes the
  integer ``--linear-attention-freq``). The search leaves such models out under
  ``--framework megatron`` with the reason, so it never returns a plan its export refuses.
* Hybrid layer patterns (Mamba-2 / gated DeltaNet / attention / MLP / MoE layers) run in
  ``pretrain_hybrid.py --hybrid-layer-pattern`` (megatron/core/models/hybrid/), gated DeltaNet in a
  GPT with ``--experimental-attention-variant gated_delta_net`` (planner.launch.megatron.hybrid).
  Their parallel forms (megatron-core 0.19.2): tensor parallelism over Mamba heads and groups
  (``MambaMixer``) and gated DeltaNet heads (``TransformerConfig``: key and value heads divisible by
  tp x cp), context parallelism over heads (``MambaContextParallel``), expert parallelism for the
  ``E`` layers, any pipeline split and virtual stages as ``|`` segments of the pattern; those
  divisibility rules hold for every framework (cost_models.constraints). What Megatron-Core adds for
  hybrid stacks is :func:`hybrid_reasons`: no activation offloading, and FP8's width rule on the
  Mamba input projection.
"""

from dataclasses import dataclass

from cost_models.parallel import RANK_ORDERS, ParallelConfig
from planner.frameworks.base import Capabilities, Framework
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

MAMBA_FIXED = {"mamba_conv_kernel": 4, "mamba_chunk_size": 128}
"""``MambaMixer``'s ``d_conv`` and ``chunk_size`` (megatron/core/ssm/mamba_mixer.py ``__init__``
defaults), which no flag and no field of the hybrid layer spec changes."""


def model_reasons(who: str, model: ModelSpec) -> list[str]:
    """Why Megatron-LM (``who``, its title) has no model for ``model`` (empty when it has one)."""
    out = []
    if getattr(model, "window_size", 0) and getattr(model, "window_type", "") == "chunked":
        out.append(
            f"{who} has no chunked attention (Llama 4's attention_chunk_size; only --window-size "
            "sliding windows)"
        )
    if getattr(model, "activation", "") == "relu":
        out.append(f"{who} has no plain ReLU MLP flag (GeLU, --swiglu, --squared-relu)")
    if getattr(model, "activation", "") == "geglu":
        # arguments.py: --swiglu gates F.silu and --quick-geglu gates quick_gelu (x * sigmoid(1.702 x));
        # gated_linear_unit with GELU has no flag (TransformerConfig field excluded from the parser).
        out.append(
            f"{who} has no GeGLU flag (--swiglu gates SiLU, --quick-geglu gates quick-GELU; Gemma's "
            "tanh-GELU gate runs in Megatron-Bridge's Gemma3ModelProvider)"
        )
    if getattr(model, "linear_attention_type", "") == "kda":
        # TransformerConfig.experimental_attention_variant: Literal['gated_delta_net', 'dsa'].
        out.append(
            f"{who} has no Kimi Delta Attention (KDA) layer: its only linear attention is gated DeltaNet "
            "(--experimental-attention-variant takes gated_delta_net or dsa)"
        )
    elif getattr(model, "linear_attention_pattern", ()):
        out.append(
            f"{who} export writes the integer --linear-attention-freq, not a per-layer "
            "linear_attention_pattern"
        )
    if getattr(model, "parallel_mamba_attention", False):
        # hybrid_layer_allocation.Symbols: one mixer (M, G, *, D, +) or MLP (-, E) per layer.
        out.append(
            f"{who} has no layer running attention and a Mamba-2 mixer side by side (Falcon-H1's; each "
            "HybridStack layer holds one mixer; Megatron-Bridge's FalconH1Model builds it)"
        )
    if "M" in getattr(model, "hybrid_layer_pattern", "") and getattr(model, "mamba_version", 2) == 1:
        # megatron/core/ssm/: MambaMixer is Mamba-2 (SSD; heads, groups, no dt_rank / x_proj).
        out.append(
            f"{who} has no Mamba-1 layer (MambaMixer is Mamba-2; Jamba's selective-SSM layers with "
            "dt_rank and x_proj are not in megatron-core)"
        )
    elif "M" in getattr(model, "hybrid_layer_pattern", ""):
        out += [
            f"{who} builds Mamba-2 mixers with {key} {fixed} (MambaMixer; no flag changes it), "
            f"not {getattr(model, key)}"
            for key, fixed in MAMBA_FIXED.items()
            if getattr(model, key) != fixed
        ]
    return out


def hybrid_reasons(who: str, model: ModelSpec, job: JobSpec, c: ParallelConfig) -> list[str]:
    """What Megatron-Core refuses or does not do for a hybrid layer pattern beyond the shared rules:

    * activation offloading: ``HybridStack`` (megatron/core/models/hybrid/hybrid_block.py) builds no
      CPU-offload context, which ``TransformerBlock`` does (transformer_block.py
      ``get_cpu_offload_context``), so ``--cpu-offloading-num-layers`` offloads nothing there;
    * FP8: ``MambaMixer`` asserts the input projection's width ``2 d_inner + 2 G N + H`` is a
      multiple of 16 ("For FP8, the innermost dimension of the Mamba layer input projection output
      tensor must be a multiple of 16")."""
    if not getattr(model, "hybrid_layer_pattern", ""):
        return []
    out = []
    if c.offload_layers:
        out.append(
            f"{who} offloads no activations of hybrid layer patterns (HybridStack has no CPU offloading)"
        )
    if job.precision == "fp8" and "M" in model.hybrid_layer_pattern and model.mamba_version == 2:
        width = 2 * model.mamba_inner_size + 2 * model.mamba_num_groups * model.mamba_state_dim
        width += model.mamba_num_heads
        if width % 16:
            out.append(
                f"{who} trains Mamba-2 in FP8 only when the input projection's width (2 d_inner + 2 G N "
                f"+ H = {width}) is a multiple of 16 (MambaMixer)"
            )
    return out


def dsa_reasons(who: str, model: ModelSpec, c: ParallelConfig) -> list[str]:
    """What Megatron-Core 0.19.2 refuses for DeepSeek sparse attention
    (megatron/core/transformer/transformer_config.py ``__post_init__``): linear biases ("DSA uses
    AbsorbedMLASelfAttention, which requires add_bias_linear=False"), and context parallelism other
    than ``--cp-comm-type allgather`` ("DSAttention context parallelism currently supports
    cp_comm_type=allgather only"), which planner does not price (its context parallelism is the
    K/V ring)."""
    if not getattr(model, "dsa_indexer_topk", 0):
        return []
    out = []
    if model.add_bias_linear:
        out.append(f"{who} builds DeepSeek sparse attention without linear biases (AbsorbedMLASelfAttention)")
    if c.cp > 1:
        out.append(
            f"{who} runs DeepSeek sparse attention with context parallelism only as --cp-comm-type "
            "allgather, which planner does not price (its context parallelism is the K/V ring): cp 1"
        )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronFramework(Framework):
    """Megatron-LM: the shared capabilities plus the models it has no flags for and its limits on
    hybrid layer patterns."""

    def violations(
        self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig
    ) -> list[str]:
        return [
            *Framework.violations(self, model, cluster, job, c),
            *model_reasons(self.title, model),
            *hybrid_reasons(self.title, model, job, c),
            *dsa_reasons(self.title, model, c),
        ]


MEGATRON = MegatronFramework(
    name="megatron",
    title="Megatron-LM (megatron-core 0.19.2)",
    version="megatron-core 0.19.2",
    capabilities=Capabilities(
        schedules=("1f1b", "interleaved"),
        optimizer_sharding=("none", "distributed", "zero2", "full"),
        sharding_with_pipeline=("none", "distributed"),
        recompute=("none", "selective", "full"),
        partial_recompute=True,
        recompute_modules=True,
        sequence_parallel_optional=True,
        context_parallel=True,
        expert_parallel=True,
        uneven_layers=True,
        uneven_interleaved=True,
        # NVFP4: --fp4-format e2m1 --fp4-recipe nvfp4 (TransformerConfig.fp4 / fp4_recipe, run with --bf16).
        precisions=("bf16", "fp16", "fp8", "nvfp4"),
        heterogeneous_gpus=True,
        # --tp-comm-overlap (arguments.py; Transformer Engine userbuffers, with --sequence-parallel).
        tp_comm_overlap=True,
        # --moe-token-dispatcher-type {allgather,alltoall,flex}, --overlap-moe-expert-parallel-comm,
        # --cuda-graph-impl / --cuda-graph-modules (arguments.py, TransformerConfig).
        moe_dispatchers=("alltoall", "allgather", "flex"),
        moe_a2a_overlap=True,
        cuda_graphs=True,
        # validate_args: fp16 reduces gradients in fp16, or fp32 with
        # --accumulate-allreduce-grads-in-fp32; bf16 (and FP8, run with --bf16) in fp32, or bf16
        # with --grad-reduce-in-bf16.
        grad_dtypes=(
            ("fp16", "fp16"),
            ("fp16", "fp32"),
            ("bf16", "fp32"),
            ("bf16", "bf16"),
            ("fp8", "fp32"),
            ("fp8", "bf16"),
            ("nvfp4", "fp32"),
            ("nvfp4", "bf16"),
        ),
        # --use-precision-aware-optimizer with --main-params-dtype {fp32,fp16} and --exp-avg-dtype /
        # --exp-avg-sq-dtype {fp32,fp16,bf16} (arguments.py; fp8 moments are not priced); without it
        # OptimizerConfig asserts every dtype fp32, and with it "--use-precision-aware-optimizer only
        # supported with distributed optimizer" (megatron/core/optimizer/optimizer_config.py).
        optimizer_dtypes=tuple((m, s) for m in ("fp32", "fp16") for s in ("fp32", "bf16", "fp16")),
        optimizer_dtypes_sharding=("distributed",),
        # Elementwise work fused: Transformer Engine's norm + GEMM modules, fused RoPE, bias-SwiGLU /
        # bias-GELU and bias-dropout-add fusions are its defaults (--no-*-fusion turns them off;
        # planner neither exports nor prices those).
        eager_ops=((),),
        # --attention-backend unfused (AttnBackend, megatron/core/transformer/enums.py); the default
        # backend is Transformer Engine's choice of fused kernel for the GPU (cuDNN or flash-attn),
        # which planner prices as the generation's fused kernel. No flag pins FlashAttention-2.
        attention_impls=("fused", "unfused"),
        # --no-gradient-accumulation-fusion (arguments.py; TransformerConfig
        # gradient_accumulation_fusion), which Megatron-FSDP launches always set.
        unfused_grad_accumulation=True,
        # --cpu-offloading-num-layers (ModelParallelConfig; arguments.py sets cpu_offloading when it
        # is > 0): Transformer Engine's activation offload of the first N layers. TransformerConfig
        # refuses it with pp > 1, with recompute, and with per-layer CUDA graphs; planner's
        # cost_models.constraints.violations holds the first two for every framework.
        activation_offload=True,
        # --num-distributed-optimizer-instances (arguments.py; DistributedDataParallelConfig): the
        # distributed optimizer sharded over dp*cp/N ranks, replicated across N instances.
        partial_distributed_optimizer=True,
        # --use-tp-pp-dp-mapping (arguments.py; initialize.py passes order="tp-cp-ep-pp-dp"), under
        # initialize_model_parallel's condition that the dense and expert data-parallel sizes agree
        # when pp > 1.
        rank_orders=RANK_ORDERS,
        pp_dp_order_same_expert_dp=True,
        # LoRA on megatron-core's model: Megatron-Bridge's PEFT (src/megatron/bridge/peft/lora.py)
        # wraps the megatron-core layers; pretrain_gpt.py itself has no PEFT, so the Megatron-LM
        # export refuses such plans (planner.launch.megatron.export).
        lora=True,
    ),
    source="megatron/training/arguments.py, megatron/core/pipeline_parallel/schedules.py (megatron-core 0.19.2)",
)
