"""Megatron-LM export, its argument list: the ``pretrain_gpt.py`` arguments of a plan
(``pretrain_hybrid.py`` for hybrid layer patterns, :mod:`.hybrid`) as (flag, value) pairs, the
refusals of plans Megatron-LM cannot run as priced, and the argv words and ``megatron_args.txt``
they become. The launch scripts around them are :mod:`.export`.

Every flag and rule was checked against the installed megatron-core 0.19.2
``megatron/training/arguments.py`` (``validate_args``) and
``megatron/core/transformer/transformer_config.py`` (``__post_init__``); the accepted spellings are
:data:`planner.launch.megatron.flags.ACCEPTED`. What each plan field becomes is tabled in
docs/megatron.md. Pure functions built from one table of flags and golden-tested.
"""

from __future__ import annotations

import shlex

from cost_models.parallel import PP_DP, SHARDED_GRADIENTS, ParallelConfig
from planner.frameworks.megatron import MEGATRON
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import default_grad_dtype
from planner.inputs.layer_pattern import pattern_text
from planner.inputs.model_spec import ATTENTION_DROPOUT_DEFAULT, ModelSpec
from planner.launch.megatron import hybrid
from planner.launch.megatron.flags import ACCEPTED
from planner.plans.plan_file import PlanInputs

ACTIVATION_FLAGS = {"swiglu": "--swiglu", "squared_relu": "--squared-relu", "gelu": None}
NORMALIZATION = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
FSDP_STRATEGY = {"zero2": "optim_grads", "full": "optim_grads_params"}
"""Megatron-FSDP ``--data-parallel-sharding-strategy`` of each planner sharding: ZeRO-2 shards
optimizer state and gradients, ZeRO-3 also parameters (megatron_fsdp ``ShardingStrategy``)."""
FSDP_REQUIRED: list[tuple[str, str | None]] = [
    ("--use-distributed-optimizer", None),
    ("--no-gradient-accumulation-fusion", None),
    ("--ckpt-format", "fsdp_dtensor"),
]
"""Flags NVIDIA's Megatron-FSDP user guide lists as required ("Required Configurations",
docs/discussions/megatron-fsdp-user-guide); in 0.19.2 ``validate_args`` asserts
``ckpt_format == "fsdp_dtensor"`` and forces the distributed optimizer, and only warns about
gradient-accumulation fusion."""


def layout_for(layers: tuple[int, ...]) -> str:
    """``--pipeline-model-parallel-layout`` for a partition given per virtual stage in Megatron's
    order (virtual stage ``v * pp + rank``, as ``PipelineParallelLayerLayout`` reads it): E
    embedding, t decoder layer, L loss, stages separated by |, written out in full."""
    stages = ["t" * n for n in layers]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return "|".join(stages)


def partition_flags(c: ParallelConfig, model: ModelSpec) -> list[tuple[str, str | None]]:
    """How the layer partition and the virtual stages map to Megatron.

    Even split: ``--num-virtual-stages-per-pipeline-rank`` when vpp > 1, nothing else. Uneven
    without virtual stages: first/last counts when every middle stage is equal and neither end is
    empty, else an explicit layout (an embedding-only first or loss-only last stage is ``E|`` /
    ``|L``). Uneven with virtual stages: always the layout (it fixes vpp itself; validate_args
    forbids it beside ``--num-virtual-stages-per-pipeline-rank``). A hybrid model's stages are the
    ``|`` segments of its pattern (:func:`.hybrid.pattern_args`), beside which validate_args refuses
    all of these."""
    if model.is_hybrid:
        return []
    layers = c.layers_per_stage
    uneven = bool(layers) and len(set(layers)) > 1
    if not uneven:
        return [("--num-virtual-stages-per-pipeline-rank", str(c.vpp))] if c.vpp > 1 else []
    if c.vpp > 1:
        return [("--pipeline-model-parallel-layout", layout_for(layers))]
    first, last, middle = layers[0], layers[-1], layers[1:-1]
    if (not middle or len(set(middle)) == 1) and first and last:
        # validate_args wants first/last counts > 0: an embedding- or loss-only stage is a layout.
        out = []
        if not middle or first != middle[0]:
            out.append(("--decoder-first-pipeline-num-layers", str(first)))
        if not middle or last != middle[0]:
            out.append(("--decoder-last-pipeline-num-layers", str(last)))
        return out
    return [("--pipeline-model-parallel-layout", layout_for(layers))]


def refuse_unlaunchable(inputs: PlanInputs) -> None:
    """SpecError (one line) when Megatron-LM at the pinned release cannot run the plan as priced:
    outside its capabilities (e.g. a zb-h1 plan searched with ``--framework any``), or a model
    it has no flag for, or a mixed-GPU cluster torchrun cannot number in stage order."""
    m, c = inputs.model, inputs.config
    if m.activation == "relu":
        raise SpecError("Megatron-LM has no plain ReLU MLP flag; this model cannot be exported")
    if m.activation == "geglu":
        raise SpecError(
            "Megatron-LM's pretrain_gpt.py has no GeGLU flag (--swiglu gates SiLU, --quick-geglu gates "
            "quick-GELU); this model (Gemma's tanh-GELU gate) cannot be exported: Megatron-Bridge's "
            "Gemma3ModelProvider runs it"
        )
    if m.window_size and m.window_type == "chunked":
        raise SpecError(
            "Megatron-LM has no chunked attention (Llama 4's attention_chunk_size; only --window-size "
            "sliding windows); this model cannot be exported"
        )
    reasons = MEGATRON.violations(m, inputs.cluster, inputs.job, c)
    if reasons:
        raise SpecError(f"{reasons[0]}; re-run planner search with --framework megatron")
    if len({g.gpus_per_node for g in inputs.cluster.groups}) > 1:
        raise SpecError(
            "the cluster's node groups have different GPUs per node; torchrun numbers ranks as "
            "node_rank x nproc_per_node, so no launch places every stage on the GPU type the plan chose"
        )


def model_args(inputs: PlanInputs) -> list[tuple[str, str | None]]:
    """Model shape, position embedding, vocabulary and MoE flags."""
    m, c, job = inputs.model, inputs.config, inputs.job
    # A hybrid model's layer count is its pattern's (validate_args derives --num-layers from it).
    args = hybrid.pattern_args(m, c) if m.is_hybrid else [("--num-layers", str(m.num_layers))]
    args += [
        ("--hidden-size", str(m.hidden_size)),
        ("--ffn-hidden-size", str(m.ffn_hidden_size)),
        ("--num-attention-heads", str(m.num_attention_heads)),
    ]
    if m.multi_latent_attention:
        args += mla_args(m)
    else:
        if m.kv_channels != m.hidden_size // m.num_attention_heads:
            args.append(("--kv-channels", str(m.kv_channels)))
        if m.num_query_groups != m.num_attention_heads:
            args += [("--group-query-attention", None), ("--num-query-groups", str(m.num_query_groups))]
    args += local_attention_args(m)
    args += hybrid.mixer_args(m)
    if job.attention_impl == "unfused":
        args.append(("--attention-backend", "unfused"))
    if ACTIVATION_FLAGS.get(m.activation):
        args.append((ACTIVATION_FLAGS[m.activation], None))
    args.append(("--normalization", NORMALIZATION[m.normalization]))
    if not m.add_bias_linear:
        args.append(("--disable-bias-linear", None))
        if m.add_qkv_bias:
            args.append(("--add-qkv-bias", None))
    if m.qk_layernorm:
        args.append(("--qk-layernorm", None))
    if m.untie_embeddings_and_output_weights:
        args.append(("--untie-embeddings-and-output-weights", None))
    # 0.19.2 spells RoPE --position-embedding-type rope (--use-rotary-position-embeddings is its
    # deprecated alias); --rotary-base defaults to 10000.
    args.append(("--position-embedding-type", m.position_embedding_type))
    if m.position_embedding_type == "rope":
        args.append(("--rotary-base", str(m.rotary_base)))
    args += [
        # validate_args asserts max_position_embeddings >= seq_length (for every embedding type).
        ("--max-position-embeddings", str(max(m.max_position_embeddings, job.seq_length))),
        ("--seq-length", str(job.seq_length)),
        ("--vocab-size", str(m.vocab_size)),
    ]
    if m.is_moe:
        args += [
            ("--num-experts", str(m.num_experts)),
            ("--moe-router-topk", str(m.moe_router_topk)),
            ("--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)),
        ]
        if m.moe_shared_expert_intermediate_size:
            args.append(("--moe-shared-expert-intermediate-size", str(m.moe_shared_expert_intermediate_size)))
            if m.moe_shared_expert_gate:
                args.append(("--moe-shared-expert-gate", None))
        if m.moe_layer_pattern:
            args.append(("--moe-layer-freq", pattern_text(m.moe_layer_pattern)))
        elif m.moe_layer_freq != 1:
            args.append(("--moe-layer-freq", str(m.moe_layer_freq)))
        args += [
            ("--expert-model-parallel-size", str(c.ep)),
            ("--expert-tensor-parallel-size", str(c.expert_tp)),
        ]
        # The dispatcher the cost model priced (JobSpec.moe_dispatcher); Megatron's own default is
        # allgather, so it is always written.
        args.append(("--moe-token-dispatcher-type", job.moe_dispatcher))
        if job.moe_a2a_overlap:
            args.append(("--overlap-moe-expert-parallel-comm", None))
        args.append(("--moe-grouped-gemm", None))
    if m.mtp_num_layers:
        args.append(("--mtp-num-layers", str(m.mtp_num_layers)))
    return args


def mla_args(m: ModelSpec) -> list[tuple[str, str | None]]:
    """Multi-latent attention (megatron-core 0.19.2 TransformerConfig/MLATransformerConfig fields;
    ``--q-lora-rank`` absent = no query compression, as ``q_lora_rank`` 0 here)."""
    args: list[tuple[str, str | None]] = [("--multi-latent-attention", None)]
    if m.q_lora_rank:
        args.append(("--q-lora-rank", str(m.q_lora_rank)))
    return args + [
        ("--kv-lora-rank", str(m.kv_lora_rank)),
        ("--qk-head-dim", str(m.qk_head_dim)),
        ("--qk-pos-emb-head-dim", str(m.qk_pos_emb_head_dim)),
        ("--v-head-dim", str(m.v_head_dim)),
    ]


def local_attention_args(m: ModelSpec) -> list[tuple[str, str | None]]:
    """Sliding-window attention, sinks and attention dropout. ``--window-size`` is Transformer
    Engine's (left, right) span: a query sees itself and ``left`` earlier tokens, so ``window_size``
    w exports as ``w-1,0``; ``--window-attn-skip-freq N`` makes every N-th layer global
    (megatron/core/transformer/utils.py ``is_layer_window_attention``); ``--attention-dropout`` only
    when it is not Megatron's default (:data:`planner.inputs.model_spec.ATTENTION_DROPOUT_DEFAULT`)."""
    args: list[tuple[str, str | None]] = []
    if m.window_size:
        args.append(("--window-size", f"{m.window_size - 1},0"))
        if m.window_attn_skip_freq:
            args.append(("--window-attn-skip-freq", str(m.window_attn_skip_freq)))
    if m.softmax_type != "vanilla":
        args.append(("--softmax-type", m.softmax_type))
    if m.attention_dropout != ATTENTION_DROPOUT_DEFAULT:
        args.append(("--attention-dropout", f"{m.attention_dropout:g}"))
    return args


def parallel_args(inputs: PlanInputs) -> list[tuple[str, str | None]]:
    """Parallel layout, batch, recompute, sharding, overlap and precision flags."""
    m, c, job = inputs.model, inputs.config, inputs.job
    args: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(c.tp)),
        ("--pipeline-model-parallel-size", str(c.pp)),
    ]
    if c.cp > 1:
        args.append(("--context-parallel-size", str(c.cp)))
    args += partition_flags(c, m)
    if c.sp:
        args.append(("--sequence-parallel", None))
    args += [
        ("--micro-batch-size", str(c.micro_batch_size)),
        ("--global-batch-size", str(job.global_batch_size)),
    ]
    if c.recompute == "selective":
        # validate_args: selective recompute takes no --recompute-method (and TransformerConfig
        # no --recompute-num-layers).
        args.append(("--recompute-granularity", "selective"))
        if c.recompute_modules:
            # TransformerConfig.recompute_modules (default core_attn alone).
            args.append(("--recompute-modules", " ".join(c.recompute_modules)))
    elif c.recompute == "full":
        # TransformerConfig: full recompute needs a method and --recompute-num-layers; "block"
        # recomputes the first k layers of each model chunk, k >= chunk size = all of them.
        k = c.recompute_num_layers or max(c.stage_layers(m))
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "block"),
            ("--recompute-num-layers", str(k)),
        ]
    if c.offload_layers:
        # ModelParallelConfig.cpu_offloading_num_layers; arguments.py turns cpu_offloading on.
        args.append(("--cpu-offloading-num-layers", str(c.offload_layers)))
    if c.optimizer_sharding == "distributed":
        args.append(("--use-distributed-optimizer", None))
        if c.optimizer_instances > 1:
            # DistributedDataParallelConfig.num_distributed_optimizer_instances (arguments.py).
            args.append(("--num-distributed-optimizer-instances", str(c.optimizer_instances)))
    elif c.optimizer_sharding in FSDP_STRATEGY:
        args += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", FSDP_STRATEGY[c.optimizer_sharding]),
            *FSDP_REQUIRED,
        ]
    if c.rank_order == PP_DP:
        # initialize.py: order="tp-cp-ep-pp-dp" if args.use_tp_pp_dp_mapping.
        args.append(("--use-tp-pp-dp-mapping", None))
    if not job.gradient_accumulation_fusion and c.optimizer_sharding not in SHARDED_GRADIENTS:
        # Megatron-FSDP launches carry the flag already (FSDP_REQUIRED).
        args.append(("--no-gradient-accumulation-fusion", None))
    if job.overlap_grad_reduce and c.dp * c.cp > 1:
        args.append(("--overlap-grad-reduce", None))
        # validate_args: --overlap-param-gather only with the distributed optimizer or
        # Megatron-FSDP, and only beside --overlap-grad-reduce.
        if job.overlap_param_gather and c.optimizer_sharding != "none":
            args.append(("--overlap-param-gather", None))
    if c.sp and job.tp_comm_overlap:
        # validate_args: --tp-comm-overlap only with sequence parallelism.
        args.append(("--tp-comm-overlap", None))
    args += cuda_graph_args(job.cuda_graph_scope)
    args.append(("--fp16" if job.precision == "fp16" else "--bf16", None))
    # Gradient reduction dtype where it differs from validate_args' default (fp16 grads for
    # --fp16, fp32 for --bf16; planner.inputs.jobs.default_grad_dtype). The capabilities leave one
    # alternative per precision: fp32 for fp16 training, bf16 otherwise.
    if job.grad_dtype != default_grad_dtype(job.precision):
        flag = "--accumulate-allreduce-grads-in-fp32" if job.precision == "fp16" else "--grad-reduce-in-bf16"
        args.append((flag, None))
    if job.precision == "fp8":
        args += [("--fp8-format", FP8_FORMAT[job.fp8_recipe]), ("--fp8-recipe", job.fp8_recipe)]
    if job.precision == "nvfp4":
        # TransformerConfig.fp4 ('e2m1', the only format) and fp4_recipe ('nvfp4', its default),
        # run with --bf16 as Megatron-Bridge's bf16_with_nvfp4_mixed recipe does.
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    args += optimizer_dtype_args(job)
    return args


def optimizer_dtype_args(job: JobSpec) -> list[tuple[str, str | None]]:
    """The optimizer's dtypes where they are not fp32: Transformer Engine's ``FusedAdam`` through
    ``--use-precision-aware-optimizer`` with ``--main-params-dtype`` (the master weights) and
    ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` (Adam's moments); the capabilities admit them only
    with the distributed optimizer, as OptimizerConfig does."""
    if not job.optimizer_below_fp32:
        return []
    args: list[tuple[str, str | None]] = [("--use-precision-aware-optimizer", None)]
    if job.master_dtype != "fp32":
        args.append(("--main-params-dtype", job.master_dtype))
    if job.optimizer_state_dtype != "fp32":
        args += [
            ("--exp-avg-dtype", job.optimizer_state_dtype),
            ("--exp-avg-sq-dtype", job.optimizer_state_dtype),
        ]
    return args


FP8_FORMAT = {"tensorwise": "hybrid", "delayed": "hybrid", "blockwise": "e4m3", "mxfp8": "e4m3"}
"""``--fp8-format`` per recipe: E4M3 forward and E5M2 gradients (``hybrid``) for the per-tensor
recipes, E4M3 throughout for the block-scaled ones, whose per-block scales give gradients the range
E5M2 was for (Transformer Engine user guide, "FP8 Blockwise Scaling" and "MXFP8": "E4M3 is used by
default for both forward and backward passes")."""


def cuda_graph_args(scope: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """CUDA graph flags of megatron-core 0.19.2 (TransformerConfig ``cuda_graph_impl`` /
    ``cuda_graph_modules``): ``full_iteration`` is its own implementation; otherwise Transformer
    Engine's per-layer graphs over the listed modules (none listed: whole layers)."""
    if not scope:
        return []
    if "full_iteration" in scope:
        return [("--cuda-graph-impl", "full_iteration")]
    modules = [s for s in scope if s != "full"]
    args: list[tuple[str, str | None]] = [("--cuda-graph-impl", "transformer_engine")]
    if modules:
        args.append(("--cuda-graph-modules", " ".join(modules)))
    return args


def megatron_args(inputs: PlanInputs) -> list[tuple[str, str | None]]:
    """The full ``pretrain_gpt.py`` (or ``pretrain_hybrid.py``) argument list of a plan, as (flag,
    value or None); SpecError when Megatron-LM cannot run it (:func:`refuse_unlaunchable`)."""
    refuse_unlaunchable(inputs)
    return model_args(inputs) + parallel_args(inputs)


def words(flag: str, value: str | None) -> list[str]:
    """A flag and its value as the argv words the launch passes: a ``values`` flag (argparse
    ``nargs='+'``, e.g. ``--cuda-graph-modules``, ``--recompute-modules``) gets each of its
    space-separated words on its own."""
    if value is None:
        return [flag]
    if ACCEPTED.get(flag) == "values":
        return [flag, *value.split()]
    return [flag, value]


def argv(args: list[tuple[str, str | None]]) -> list[str]:
    """The argv words of an argument list (what ``megatron_args.txt`` gives the shell)."""
    return [w for flag, value in args for w in words(flag, value)]


def quoted(flag: str, value: str | None) -> str:
    """A flag and its value as shell words (:func:`words`, each quoted)."""
    return " ".join(shlex.quote(w) if i else w for i, w in enumerate(words(flag, value)))


def args_text(args: list[tuple[str, str | None]]) -> str:
    """``megatron_args.txt``: one flag (and its value) per line."""
    return "".join(quoted(flag, value) + "\n" for flag, value in args)
