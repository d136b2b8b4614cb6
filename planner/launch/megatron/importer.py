"""Megatron-LM import: read an arguments file or a launch script back into a model, a job and a
configuration (see docs/megatron.md), with the line of every flag for annotations.

The words and flags of a launch are read by :mod:`.arguments` (shell variables resolved from the
script's own assignments by :mod:`.shell`; every flag checked against the parser of the pinned
release, :data:`.flags.ACCEPTED`): a word argparse would reject is recorded in
:attr:`Imported.rejected`, a flag it accepts that planning does not need in
:attr:`Imported.ignored`, one that could matter but planner does not model in
:attr:`Imported.unknown`. This module turns the flags into the model, the job and the
configuration, section by section. What Megatron's ``validate_args`` would reject is judged by
:mod:`.rules`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cost_models.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    RANK_ORDERS,
    RECOMPUTE_MODULES,
    SHARDED_GRADIENTS,
    ParallelConfig,
    account_for_split,
    canonical_modules,
    first_last_split,
)
from planner.inputs.errors import ConfigError, SpecError
from planner.inputs.job_spec import DTYPES, FP8_RECIPES, MOE_DISPATCHERS, JobSpec
from planner.inputs.jobs import cuda_graph_scope
from planner.inputs.layer_pattern import PatternError, parse_pattern
from planner.inputs.model_spec import SOFTMAX_TYPES, ModelSpec
from planner.inputs.model_yaml import validate_model
from planner.inputs.validation import check_number, limit
from planner.launch.megatron import hybrid
from planner.launch.megatron.arguments import Arguments, megatron_words, read_arguments
from planner.launch.megatron.shell import read_script, unresolved_in
from planner.launch.megatron.tokenizers import TABLE, known_vocabulary, padded_vocabulary
from planner.launch.megatron.yaml_cfg import YamlConfig, read_yaml_cfg


@dataclass(frozen=True, slots=True)
class Imported:
    """A Megatron launch read back: model, job, configuration, and what was not understood."""

    model: ModelSpec
    job: JobSpec
    config: ParallelConfig
    world_size: int | None
    ignored: tuple[str, ...]
    """Flags Megatron accepts that do not matter for planning."""
    unknown: tuple[str, ...]
    """Flags Megatron accepts that planner does not interpret (warnings)."""
    flag_lines: dict
    """Line number (1-based) of each flag in the source, for annotations."""
    flags: dict = field(default_factory=dict)
    """Every Megatron flag given, with its value (None for switches)."""
    rejected: tuple[str, ...] = ()
    """``--`` words the pinned release's parser does not accept (argparse exits with an error)."""
    env: dict = field(default_factory=dict)
    """Environment the script sets (``export NAME=v``; None for ``unset NAME``)."""
    is_script: bool = False
    """Whether the source is a launch script (it runs pretrain_gpt.py or pretrain_hybrid.py), not an
    arguments file."""
    notes: tuple[str, ...] = ()
    """How something the launch does not state was found (the vocabulary from the tokenizer table)."""
    yaml_cfg: YamlConfig | None = None
    """The launch's ``--yaml-cfg`` file, whose keys replace its flags (:mod:`.yaml_cfg`); None
    without one. Its flags' lines in :attr:`flag_lines` are the ``--yaml-cfg`` line."""


def _dispatcher(flags: dict, at) -> str:
    """``--moe-token-dispatcher-type`` (Megatron's default: allgather)."""
    value = flags.get("--moe-token-dispatcher-type") or "allgather"
    if value not in MOE_DISPATCHERS:
        raise SpecError(
            f"{at('--moe-token-dispatcher-type')}: --moe-token-dispatcher-type {value!r}: allowed values: "
            f"{', '.join(MOE_DISPATCHERS)}"
        )
    return value


def _fp8_recipe(flags: dict, at) -> str:
    """JobSpec.fp8_recipe from ``--fp8-recipe`` (absent: Megatron-Core's default ``delayed``,
    TransformerConfig.fp8_recipe); ``custom`` (a user quantizer factory) has no price."""
    recipe = flags.get("--fp8-recipe") or "delayed"
    if recipe not in FP8_RECIPES:
        raise SpecError(
            f"{at('--fp8-recipe')}: --fp8-recipe {recipe!r}: planner prices {', '.join(FP8_RECIPES)}"
        )
    return recipe


def _fp4_precision(flags: dict, at) -> str:
    """``nvfp4`` for ``--fp4-format e2m1`` with ``--fp4-recipe nvfp4`` (its default,
    TransformerConfig.fp4_recipe), '' without ``--fp4-format``; a ``custom`` recipe (a user quantizer
    factory) or another format has no price."""
    fmt = flags.get("--fp4-format")
    if not fmt:
        return ""
    recipe = flags.get("--fp4-recipe") or "nvfp4"
    if fmt != "e2m1" or recipe != "nvfp4":
        bad = "--fp4-format" if fmt != "e2m1" else "--fp4-recipe"
        raise SpecError(
            f"{at(bad)}: --fp4-format {fmt} --fp4-recipe {recipe}: planner prices FP4 as NVFP4 "
            "(--fp4-format e2m1 --fp4-recipe nvfp4)"
        )
    return "nvfp4"


def _cuda_graphs(flags: dict, at) -> tuple[str, ...]:
    """What CUDA graphs capture (JobSpec.cuda_graph_scope) from megatron-core 0.19.2's
    ``--cuda-graph-impl {none,local,transformer_engine,full_iteration}`` and
    ``--cuda-graph-modules`` (empty: whole layers), the deprecated ``--cuda-graph-scope`` (whose
    ``full_iteration`` value means the full-iteration graph) and ``--enable-cuda-graph`` (whole layers,
    TransformerConfig's migration)."""
    impl = flags.get("--cuda-graph-impl") or (
        "transformer_engine" if "--enable-cuda-graph" in flags else "none"
    )
    words = str(flags.get("--cuda-graph-modules") or flags.get("--cuda-graph-scope") or "").split()
    if impl == "none":
        return ()
    if impl == "full_iteration" or "full_iteration" in words:
        return ("full_iteration",)
    words = [w for w in words if w not in ("full", "mamba")] or ["full"]
    flag = "--cuda-graph-modules" if "--cuda-graph-modules" in flags else "--cuda-graph-scope"
    return cuda_graph_scope(words, at(flag))


UNFUSED_BACKENDS = ("unfused", "local")
"""``--attention-backend`` values that materialise the score matrix (megatron/core/transformer/enums.py
``AttnBackend``: ``unfused``, Transformer Engine's ``UnfusedDotProductAttention``; ``local``,
Megatron-Core's own ``DotProductAttention``, baddbmm + fused softmax + bmm)."""


def _attention_impl(flags: dict) -> str:
    """``JobSpec.attention_impl`` of a launch: ``unfused`` with an :data:`UNFUSED_BACKENDS`
    ``--attention-backend``, or with ``--transformer-impl local`` and no backend named (its layer
    spec's core attention is ``DotProductAttention``); else ``fused``."""
    backend = flags.get("--attention-backend")
    if backend:
        return "unfused" if backend in UNFUSED_BACKENDS else "fused"
    return "unfused" if flags.get("--transformer-impl") == "local" else "fused"


OPTIMIZER_DTYPE_FLAGS = ("--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype")
"""Megatron's optimizer dtype flags, each fp32 unless given (OptimizerConfig)."""


def below_fp32(flags: dict, flag: str) -> bool:
    """Whether a launch sets one of :data:`OPTIMIZER_DTYPE_FLAGS` to a dtype other than fp32."""
    return flags.get(flag) not in (None, "fp32")


def _grad_dtype(flags: dict, precision: str) -> str:
    """Gradient reduction dtype as validate_args settles it (megatron/training/arguments.py):
    fp16 training reduces in fp16 unless ``--accumulate-allreduce-grads-in-fp32``; bf16 (and FP8,
    which runs with ``--bf16``) in fp32 unless ``--grad-reduce-in-bf16``, or ``--main-grads-dtype``
    below fp32 without ``--accumulate-allreduce-grads-in-fp32`` (validate_args then leaves
    ``accumulate_allreduce_grads_in_fp32`` off; with it, it asserts, which the checker reports)."""
    if precision == "fp16":
        return "fp32" if "--accumulate-allreduce-grads-in-fp32" in flags else "fp16"
    if "--grad-reduce-in-bf16" in flags:
        return "bf16"
    lowered = below_fp32(flags, "--main-grads-dtype")
    return "bf16" if lowered and "--accumulate-allreduce-grads-in-fp32" not in flags else "fp32"


def _optimizer_dtypes(flags: dict, at) -> tuple[str, str]:
    """(``JobSpec.master_dtype``, ``JobSpec.optimizer_state_dtype``) of a launch: fp32 / fp32
    unless ``--use-precision-aware-optimizer`` sets ``--main-params-dtype`` and ``--exp-avg-dtype``
    / ``--exp-avg-sq-dtype`` (OptimizerConfig asserts every one fp32 without it, which the checker
    reports; planner prices both moments in one dtype and not fp8 moments)."""
    if "--use-precision-aware-optimizer" not in flags:
        return "fp32", "fp32"
    master = flags.get("--main-params-dtype") or "fp32"
    avg = flags.get("--exp-avg-dtype") or "fp32"
    avg_sq = flags.get("--exp-avg-sq-dtype") or "fp32"
    if avg != avg_sq:
        raise SpecError(
            f"{at('--exp-avg-sq-dtype')}: --exp-avg-dtype {avg} with --exp-avg-sq-dtype {avg_sq}: "
            "planner prices both Adam moments in one dtype (give both the same: fp32, bf16 or fp16)"
        )
    if avg not in DTYPES:
        raise SpecError(
            f"{at('--exp-avg-dtype')}: --exp-avg-dtype {avg!r}: planner prices Adam moments in "
            f"{', '.join(DTYPES)}"
        )
    return master, avg


def parse_megatron(
    text: str,
    where: str,
    world_size: int | None = None,
    vocab_size: int | None = None,
    variables: dict | None = None,
    path: str | Path | None = None,
) -> Imported:
    """Read Megatron flags from an args file or a launch script; ``vocab_size`` (``planner check
    --vocab-size``) is the vocabulary of a launch that gives neither --vocab-size nor
    --padded-vocab-size (see :func:`_vocabulary`); ``variables`` (``planner check --set NAME=VALUE``)
    the shell variables a script starts with, as if exported before it runs; ``path`` the file
    ``text`` was read from, beside which the files the script sources are found."""
    try:
        words, env, is_script = megatron_words(text, variables, path)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    args = read_arguments(words, where, strict=is_script)
    cfg = None
    if "--yaml-cfg" in args.flags:
        cfg, args = _from_yaml_cfg(args, text, where, variables, path)
        try:
            return _imported(args, cfg, world_size, vocab_size, env, is_script)
        except SpecError as exc:
            raise SpecError(keys_named(str(exc), cfg)) from None
    return _imported(args, cfg, world_size, vocab_size, env, is_script)


def _from_yaml_cfg(args: Arguments, text: str, where: str, variables, path) -> tuple[YamlConfig, Arguments]:
    """The flags of a launch's ``--yaml-cfg`` file in place of its command line's (Megatron's
    ``load_yaml`` replaces the parsed namespace), the file found from the working directory the
    script leaves (:func:`.yaml_cfg.read_yaml_cfg`)."""
    value, line = args.flags["--yaml-cfg"], args.lines["--yaml-cfg"]
    if value is None:
        raise SpecError(f"{args.at('--yaml-cfg')}: --yaml-cfg is given without its file")
    root = pwd = None
    if path is not None:
        script = read_script(text, variables, path)
        root = script.root
        pwd = script.scalars.get("PWD")
        pwd = pwd if pwd is not None and unresolved_in(pwd) is None else None
    others = tuple(f for f in args.flags if f != "--yaml-cfg")
    cfg = read_yaml_cfg(value, line, where, pwd, root, others)
    read = read_arguments(cfg.words, cfg.file)
    read.rejected[:0] = args.rejected  # argparse still parses (and refuses) the command line first
    read.lines.update({w: args.lines[w] for w in args.rejected})
    return cfg, read


def keys_named(message: str, cfg: YamlConfig) -> str:
    """A message about a flag with the flag named by the ``--yaml-cfg`` key it came from."""
    for flag, key in sorted(cfg.flag_keys.items(), key=lambda kv: -len(kv[0])):
        message = re.sub(re.escape(flag) + r"(?![\w-])", key, message)
    return message


def _imported(
    args: Arguments, cfg: YamlConfig | None, world_size, vocab_size, env: dict, is_script: bool
) -> Imported:
    """The model, job and configuration of a launch's flags (:func:`parse_megatron`)."""
    _require(args)
    model = _model(args, vocab_size)
    if model.is_hybrid or model.linear_attention_freq:
        # The pattern's E layers against --num-experts, Mamba heads over groups, the gated DeltaNet
        # shape: ModelSpec's own checks, as for a model file.
        validate_model(model, args.where)
    tp, pp, cp = (
        args.num("--tensor-model-parallel-size", 1),
        args.num("--pipeline-model-parallel-size", 1),
        args.num("--context-parallel-size", 1),
    )
    vpp, layers = _pipeline(args, model.num_layers, pp)
    recompute, modules, rnl = _recompute(args, model.num_layers, pp, vpp, layers)
    sharding = _sharding(args.flags)
    dp = world_size // (tp * pp * cp) if world_size and world_size % (tp * pp * cp) == 0 else 1
    job = _job(args, dp, sharding)
    ep = args.num("--expert-model-parallel-size", 1)
    etp = args.num("--expert-tensor-parallel-size", 0) or tp  # Megatron's default is tp (arguments.py)
    instances, unknown = _optimizer_instances(args, sharding)
    if hybrid.known_spec(args):
        unknown = [w for w in unknown if w != "--spec"]
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        micro_batch_size=args.num("--micro-batch-size"),
        recompute=recompute,
        recompute_num_layers=rnl,
        recompute_modules=modules,
        sequence_parallel="--sequence-parallel" in args.flags,
        optimizer_sharding=sharding,
        schedule="interleaved" if vpp > 1 else "1f1b",
        layers_per_stage=() if len(set(layers)) <= 1 else layers,
        offload_layers=args.num("--cpu-offloading-num-layers", 0) or 0,
        optimizer_instances=instances,
        rank_order=RANK_ORDERS[1] if "--use-tp-pp-dp-mapping" in args.flags else RANK_ORDERS[0],
    )
    lines = (
        args.lines
        if cfg is None
        else {f: args.lines[f] if f in args.rejected else cfg.line for f in args.lines}
    )
    return Imported(
        model,
        job,
        config,
        world_size,
        tuple(args.ignored),
        tuple(sorted(set(unknown))),
        lines,
        args.flags,
        tuple(dict.fromkeys(args.rejected)),
        env,
        is_script,
        _vocabulary_note(args, vocab_size, model.vocab_size),
        cfg,
    )


def _vocabulary_note(args: Arguments, given: int | None, vocab: int) -> tuple[str, ...]:
    """A note saying where the vocabulary came from when the launch does not give it."""
    if given is not None or args.flags.get("--padded-vocab-size") or args.flags.get("--vocab-size"):
        return ()
    size, matched = known_vocabulary(args.flags.get("--tokenizer-type"), args.flags.get("--tokenizer-model"))
    return (
        f"vocabulary {vocab:,} from {matched} ({size:,} tokens in {TABLE.name}, padded as Megatron pads "
        "to a multiple of --make-vocab-size-divisible-by times tp)",
    )


REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size")
"""Flags planning needs that Megatron requires too."""


def _require(args: Arguments) -> None:
    """Every flag of :data:`REQUIRED` is given with a value (a hybrid launch's layers are its
    pattern's, :func:`.hybrid.layer_count`)."""
    for req in REQUIRED:
        if req == "--num-layers" and hybrid.given_pattern(args):
            continue
        if args.flags.get(req) is None:
            raise SpecError(f"{args.where}: missing {req} (needed to plan; Megatron requires it too)")


def _model(args: Arguments, vocab_size: int | None = None) -> ModelSpec:
    """The model section: shape, attention, embeddings and experts, with Megatron's defaults (the
    ffn size 4h, or 8h/3 rounded down to a multiple of 64 with --swiglu; arguments.py)."""
    flags, num, at, where = args.flags, args.num, args.at, args.where
    h, heads = num("--hidden-size"), num("--num-attention-heads")
    gated = "--swiglu" in flags
    ffn_default = int((4 * h * 2 / 3) / 64) * 64 if gated else 4 * h
    groups = num("--num-query-groups", 1) if "--group-query-attention" in flags else heads
    experts = num("--num-experts", 0) or 0
    vocab = _vocabulary(args, vocab_size)
    seq = num("--seq-length")
    position = flags.get("--position-embedding-type") or (
        "rope" if "--use-rotary-position-embeddings" in flags else "learned_absolute"
    )
    if position not in ("learned_absolute", "rope", "none"):
        raise SpecError(
            f"{at('--position-embedding-type')}: --position-embedding-type {position!r}: planner models "
            "learned_absolute, rope and none"
        )
    rotary = num("--rotary-base", 10000)
    return ModelSpec(
        name=where,
        num_layers=hybrid.layer_count(args) or num("--num-layers"),
        hidden_size=h,
        ffn_hidden_size=num("--ffn-hidden-size", ffn_default),
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=num("--kv-channels", h // heads),
        vocab_size=vocab,
        max_position_embeddings=num("--max-position-embeddings", seq),
        activation="swiglu" if gated else ("squared_relu" if "--squared-relu" in flags else "gelu"),
        normalization="rmsnorm" if flags.get("--normalization") == "RMSNorm" else "layernorm",
        position_embedding_type=position,
        rotary_base=rotary,
        untie_embeddings_and_output_weights="--untie-embeddings-and-output-weights" in flags,
        add_bias_linear="--disable-bias-linear" not in flags,
        add_qkv_bias="--add-qkv-bias" in flags,
        qk_layernorm="--qk-layernorm" in flags,
        num_experts=experts,
        moe_router_topk=num("--moe-router-topk", 2) if experts else 0,
        moe_ffn_hidden_size=num("--moe-ffn-hidden-size", num("--ffn-hidden-size", ffn_default))
        if experts
        else 0,
        moe_shared_expert_intermediate_size=num("--moe-shared-expert-intermediate-size", 0) if experts else 0,
        **(_moe_layers(args, num("--num-layers")) if experts and not hybrid.given_pattern(args) else {}),
        **_local_attention(args),
        **hybrid.model_fields(args),
        **_latent_attention(args),
        mtp_num_layers=num("--mtp-num-layers", 0) or 0,
    )


def _latent_attention(args: Arguments) -> dict:
    """Multi-latent attention (DeepSeek-V2/V3, Kimi K2) with the parser's defaults
    (megatron/training/arguments.py ``_add_mla_args``: --q-lora-rank None, i.e. no query
    compression, 0 here; --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
    --v-head-dim 128); validate_args asserts it excludes --group-query-attention. The MLA flags
    without --multi-latent-attention change nothing in Megatron and are not read."""
    flags, num, at = args.flags, args.num, args.at
    if "--multi-latent-attention" not in flags:
        return {}
    if "--group-query-attention" in flags:
        raise SpecError(
            f"{at('--group-query-attention')}: --group-query-attention with --multi-latent-attention: "
            "Megatron asserts they exclude each other"
        )
    return {
        "multi_latent_attention": True,
        "q_lora_rank": num("--q-lora-rank", 0) or 0,
        "kv_lora_rank": num("--kv-lora-rank", 32),
        "qk_head_dim": num("--qk-head-dim", 128),
        "qk_pos_emb_head_dim": num("--qk-pos-emb-head-dim", 64),
        "v_head_dim": num("--v-head-dim", 128),
    }


def _local_attention(args: Arguments) -> dict:
    """Sliding-window attention and sinks, the inverse of the export's
    (:func:`planner.launch.megatron.export.local_attention_args`): ``--window-size L,R`` is
    Transformer Engine's (left, right) span, a query seeing itself and ``L`` earlier tokens, so
    ``window_size`` is ``L + 1`` (causal: ``R`` is 0); ``--window-attn-skip-freq N`` makes every
    N-th layer global (megatron/core/transformer/utils.py ``is_layer_window_attention``);
    ``--softmax-type`` (vanilla, off-by-one, learnable: attention sinks)."""
    out: dict = {}
    text = args.flags.get("--window-size")
    if text is not None:
        parts = str(text).split(",")
        try:
            left, right = (int(x) for x in parts)
        except ValueError:
            raise SpecError(
                f"{args.at('--window-size')}: --window-size {text!r}: expected LEFT,RIGHT token counts, e.g. 127,0"
            ) from None
        if left < 0 or right != 0:
            raise SpecError(
                f"{args.at('--window-size')}: --window-size {text!r}: planner models causal sliding windows "
                "(LEFT >= 0, RIGHT 0)"
            )
        out["window_size"] = left + 1
        if "--window-attn-skip-freq" in args.flags:
            out["window_attn_skip_freq"] = args.num("--window-attn-skip-freq")
    softmax = args.flags.get("--softmax-type")
    if softmax is not None:
        if softmax not in SOFTMAX_TYPES:
            raise SpecError(
                f"{args.at('--softmax-type')}: --softmax-type {softmax!r} is not allowed; allowed values: "
                + ", ".join(SOFTMAX_TYPES)
            )
        out["softmax_type"] = softmax
    return out


def _moe_layers(args: Arguments, num_layers: int) -> dict:
    """``moe_layer_freq`` or ``moe_layer_pattern`` from ``--moe-layer-freq``: an integer (every
    n-th layer MoE), or Megatron's list form, e.g. ``([0]*3+[1]*58)``, which its ``moe_freq_type``
    evaluates (megatron/training/arguments.py; read here without evaluating code,
    :func:`planner.inputs.layer_pattern.parse_pattern`) and whose length must be ``--num-layers``
    (megatron/core/models/gpt/gpt_layer_specs.py, get_gpt_decoder_block_spec, asserts it:
    "Invalid length of moe_layer_pattern")."""
    text = args.flags.get("--moe-layer-freq")
    if text is None or "[" not in text:
        return {"moe_layer_freq": args.num("--moe-layer-freq", 1)}
    try:
        pattern = parse_pattern(text)
    except PatternError as exc:
        raise SpecError(
            f"{args.at('--moe-layer-freq')}: --moe-layer-freq {text!r}: {exc} (expected an integer or "
            "a list pattern such as ([0]*3+[1]*58))"
        ) from None
    if len(pattern) != num_layers:
        raise SpecError(
            f"{args.at('--moe-layer-freq')}: --moe-layer-freq {text!r} gives {len(pattern)} layers, "
            f"--num-layers is {num_layers}: Megatron asserts they are equal (Invalid length of "
            "moe_layer_pattern)"
        )
    return {"moe_layer_pattern": pattern}


def _recompute(
    args: Arguments, num_layers: int, pp: int, vpp: int, layers: tuple[int, ...]
) -> tuple[str, tuple[str, ...], int]:
    """(``ParallelConfig.recompute``, ``recompute_modules``, ``recompute_num_layers``) of a launch
    whose (virtual) stages hold ``layers`` (empty: even stages of ``num_layers / (pp * vpp)``)."""
    flags, at = args.flags, args.at
    granularity = flags.get("--recompute-granularity") or (
        "selective" if "--recompute-activations" in flags else None
    )
    recompute = granularity or "none"
    if recompute not in ("none", "selective", "full"):
        raise SpecError(
            f"{at('--recompute-granularity')}: --recompute-granularity {recompute!r}: allowed values: full, selective"
        )
    # TransformerConfig.__post_init__: recompute_modules defaults to ["core_attn"] and acts only
    # with selective granularity; the deprecated --moe-layer-recompute turns selective on and adds
    # "moe" (with full granularity it is refused: planner.launch.megatron.rules).
    named = str(flags.get("--recompute-modules") or "").split() or list(DEFAULT_RECOMPUTE_MODULES)
    if "--moe-layer-recompute" in flags and recompute != "full":
        recompute, named = "selective", [*named, "moe"]
    unpriced = [m for m in named if m not in RECOMPUTE_MODULES]
    if unpriced and recompute == "selective":
        raise SpecError(
            f"{at('--recompute-modules')}: --recompute-modules {' '.join(unpriced)}: planner prices "
            f"{', '.join(RECOMPUTE_MODULES)}"
        )
    modules = canonical_modules(named) if recompute == "selective" else ()
    rnl = (args.num("--recompute-num-layers", 0) or 0) if recompute == "full" else 0
    most = max(layers) if layers else -(-num_layers // (pp * vpp))
    if recompute == "full" and rnl >= most:
        rnl = 0  # every layer of every stage: planner's "all"
    return recompute, modules, rnl


def _sharding(flags: dict) -> str:
    """``ParallelConfig.optimizer_sharding``: Megatron-FSDP's (or torch FSDP2's)
    ``--data-parallel-sharding-strategy`` (default optim_grads_params, ZeRO-3), else the
    distributed optimizer (ZeRO-1) or none."""
    if "--use-megatron-fsdp" in flags or "--use-torch-fsdp2" in flags:
        strategy = flags.get("--data-parallel-sharding-strategy") or "optim_grads_params"
        return {"optim_grads": "zero2", "optim": "distributed", "no_shard": "none"}.get(strategy, "full")
    if "--use-distributed-optimizer" in flags:
        return "distributed"
    return "none"


def _job(args: Arguments, dp: int, sharding: str) -> JobSpec:
    """The job section: batch (``--global-batch-size``, else one micro-batch per data-parallel
    rank), precision and dtypes, overlaps, MoE dispatch, CUDA graphs and attention."""
    flags, at = args.flags, args.at
    gbs = args.num("--global-batch-size")
    if gbs is None:
        gbs = args.num("--micro-batch-size") * dp
    precision = _fp4_precision(flags, at) or (
        "fp8" if flags.get("--fp8-format") else ("fp16" if "--fp16" in flags else "bf16")
    )
    master_dtype, state_dtype = _optimizer_dtypes(flags, at)
    return JobSpec(
        global_batch_size=gbs,
        seq_length=args.num("--seq-length"),
        precision=precision,
        **({"fp8_recipe": _fp8_recipe(flags, at)} if precision == "fp8" else {}),
        grad_dtype=_grad_dtype(flags, precision),
        master_dtype=master_dtype,
        optimizer_state_dtype=state_dtype,
        overlap_grad_reduce="--overlap-grad-reduce" in flags,
        overlap_param_gather="--overlap-param-gather" in flags,
        # Megatron-FSDP requires the flag (FSDP_REQUIRED), so there it says nothing about the job:
        # read as fused, the job prices the same and searches the non-FSDP layouts as fused.
        gradient_accumulation_fusion="--no-gradient-accumulation-fusion" not in flags
        or sharding in SHARDED_GRADIENTS,
        tp_comm_overlap="--tp-comm-overlap" in flags,
        # Megatron's default dispatcher is allgather (arguments.py --moe-token-dispatcher-type).
        moe_dispatcher=_dispatcher(flags, at),
        moe_a2a_overlap="--overlap-moe-expert-parallel-comm" in flags,
        cuda_graph_scope=_cuda_graphs(flags, at),
        attention_impl=_attention_impl(flags),
    )


def _optimizer_instances(args: Arguments, sharding: str) -> tuple[int, list[str]]:
    """``ParallelConfig.optimizer_instances`` and the flags left not interpreted.

    --num-distributed-optimizer-instances: the partial distributed optimizer. With Megatron-FSDP
    the same flag turns on its hybrid sharding (mcore_fsdp_adapter.py ``enable_hsdp``), which
    planner does not price: there it stays among the flags not interpreted."""
    if sharding in ("zero2", "full"):
        return 1, args.unknown
    instances = args.num("--num-distributed-optimizer-instances", 1) or 1
    return instances, [w for w in args.unknown if w != "--num-distributed-optimizer-instances"]


def parse_layout(text: str) -> list[str]:
    """The stages of a ``--pipeline-model-parallel-layout`` string, as Megatron-LM unrolls it
    (megatron/core/transformer/pipeline_parallel_layer_layout.py ``parse_str_to_list``: commas
    dropped, ``(...)*n`` and ``x*n`` repeated, stages split on |)."""
    s = text.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * min(int(m.group(2)), 100_000), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * min(int(m.group(2)), 100_000), s)
    return s.split("|")


def _vocabulary(args: Arguments, given: int | None) -> int:
    """The vocabulary the embedding is sized for: the launch's ``--padded-vocab-size`` or
    ``--vocab-size`` (as given); else ``given`` (``planner check --vocab-size``, as given); else the
    tokenizer the launch names, from the cited table (:mod:`.tokenizers`), padded as Megatron pads
    it. A ``given`` size that disagrees with the launch's own is an error naming both."""
    own_flag = "--padded-vocab-size" if args.flags.get("--padded-vocab-size") else "--vocab-size"
    own = args.num(own_flag)
    if own is not None:
        if given is not None and given != own:
            raise SpecError(
                f"{args.at(own_flag)}: the launch sets {own_flag} {own}, but --vocab-size {given} was given "
                "to check; drop one of them"
            )
        return own
    if given is not None:
        check_number(
            given, args.where, "--vocab-size", integer=True, positive=True, maximum=limit("vocab_size")
        )
        return given
    tokenizer, model = args.flags.get("--tokenizer-type"), args.flags.get("--tokenizer-model")
    known = known_vocabulary(tokenizer, model)
    if known is None:
        named = " ".join(
            f"{f} {v}" for f, v in (("--tokenizer-type", tokenizer), ("--tokenizer-model", model)) if v
        )
        raise SpecError(
            f"{args.where}: the vocabulary size cannot be known: the tokenizer "
            f"({named or 'none named'}) is not in planner's "
            f"table ({TABLE.name}); add --vocab-size N with the tokenizer's vocabulary size to the "
            "launch, or pass planner check --vocab-size N (e.g. 128256 for Llama 3)"
        )
    divisible = args.num("--make-vocab-size-divisible-by", 128)
    return padded_vocabulary(known[0], divisible, args.num("--tensor-model-parallel-size", 1))


def _pipeline(args: Arguments, num_layers: int, pp: int) -> tuple[int, tuple[int, ...]]:
    """Virtual stages and the layers of each virtual stage, with validate_args' own rules and
    messages naming the flags (megatron/training/arguments.py, "Uneven virtual pipeline
    parallelism"; TransformerConfig for first/last)."""
    flags, num, at = args.flags, args.num, args.at
    staged = hybrid.pipeline(args, num_layers, pp)
    if staged is not None:
        return staged
    given = [
        f
        for f in (
            "--num-layers-per-virtual-pipeline-stage",
            "--num-virtual-stages-per-pipeline-rank",
            "--pipeline-model-parallel-layout",
        )
        if flags.get(f) is not None
    ]
    if len(given) > 1:
        raise SpecError(
            f"{at(given[1])}: {' and '.join(given)} exclude each other (Megatron accepts one of them)"
        )
    first_last = [
        f for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers") if f in flags
    ]
    emb = "--account-for-embedding-in-pipeline-split" in flags
    loss = "--account-for-loss-in-pipeline-split" in flags
    account = [
        f
        for f, on in (
            ("--account-for-embedding-in-pipeline-split", emb),
            ("--account-for-loss-in-pipeline-split", loss),
        )
        if on
    ]
    if flags.get("--pipeline-model-parallel-layout") is not None:
        if account or first_last:
            raise SpecError(
                f"{at('--pipeline-model-parallel-layout')}: --pipeline-model-parallel-layout with "
                f"{(account + first_last)[0]}: Megatron's TransformerConfig sets the layout with no other "
                "pipeline layout argument"
            )
        return _layout_stages(args, num_layers, pp)
    if account and first_last:
        raise SpecError(
            f"{at(account[0])}: {account[0]} with {first_last[0]}: Megatron accepts one way of "
            "splitting uneven stages"
        )
    nlpvs = num("--num-layers-per-virtual-pipeline-stage")
    if nlpvs is not None:
        if first_last:
            raise SpecError(
                f"{at(first_last[0])}: {first_last[0]} with --num-layers-per-virtual-pipeline-stage: Megatron "
                "asks for --num-virtual-stages-per-pipeline-rank with uneven stages"
            )
        # validate_args: the embedding and the loss, when accounted, count as one layer each.
        units = num_layers + emb + loss
        counted = f"--num-layers {num_layers}" + "".join(f" + 1 ({f})" for f in account)
        if units % pp:
            raise SpecError(
                f"{at('--pipeline-model-parallel-size')}: {counted} is not divisible by "
                f"--pipeline-model-parallel-size {pp}"
            )
        per_stage = units // pp
        if per_stage % nlpvs:
            raise SpecError(
                f"{at('--num-layers-per-virtual-pipeline-stage')}: --num-layers-per-virtual-pipeline-stage "
                f"{nlpvs} does not divide the {per_stage} layers of each pipeline stage ({counted} / "
                f"--pipeline-model-parallel-size {pp})"
            )
        vpp = per_stage // nlpvs
    else:
        vpp = num("--num-virtual-stages-per-pipeline-rank", 1) or 1
    if account:
        try:
            return vpp, account_for_split(num_layers, pp * vpp, emb, loss)
        except ConfigError as exc:
            raise SpecError(
                f"{at(account[0])}: {' and '.join(account)}: {exc} (--num-layers {num_layers}, "
                f"--pipeline-model-parallel-size {pp}, virtual stages per rank {vpp})"
            ) from None
    if first_last:
        return vpp, _first_last_stages(args, num_layers, pp, vpp, first_last)
    return vpp, ()


def _first_last_stages(args: Arguments, num_layers: int, pp: int, vpp: int, given: list) -> tuple[int, ...]:
    """Layers of each virtual stage under --decoder-first/last-pipeline-num-layers, as Megatron
    builds them (megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``: a
    rank's layers, first/last as given and the rest split evenly over the middle ranks, then divided
    evenly over its ``vpp`` model chunks), in chunk-major order; TransformerConfig's checks: with
    virtual stages, first, last and each middle rank's count divisible by ``vpp``."""
    flags, num, at = args.flags, args.num, args.at
    first = num("--decoder-first-pipeline-num-layers")
    last = num("--decoder-last-pipeline-num-layers")
    named = " and ".join(f"{f} {flags[f]}" for f in given)
    try:
        ranks = first_last_split(num_layers, pp, first, last)
    except ConfigError as exc:
        raise SpecError(
            f"{at(given[0])}: {named}: {exc} (--num-layers {num_layers}, --pipeline-model-parallel-size {pp})"
        ) from None
    if vpp == 1:
        return ranks
    for rank, n in enumerate(ranks):
        if n % vpp:
            which = "first" if rank == 0 and first else "last" if rank == pp - 1 and last else "each middle"
            raise SpecError(
                f"{at(given[0])}: {named}: the {n} layers of the {which} pipeline stage are not divisible by "
                f"--num-virtual-stages-per-pipeline-rank {vpp} (Megatron's TransformerConfig)"
            )
    return tuple(ranks[r] // vpp for _ in range(vpp) for r in range(pp))


def _layout_stages(args: Arguments, num_layers: int, pp: int) -> tuple[int, tuple[int, ...]]:
    """Virtual stages and layers per virtual stage of ``--pipeline-model-parallel-layout``
    (:func:`parse_layout`), with the stages planner models: E first, L last, at least one decoder
    layer in every stage between."""
    at = args.at("--pipeline-model-parallel-layout")
    stages = parse_layout(args.flags["--pipeline-model-parallel-layout"])
    bad = sorted(set("".join(stages)) - set("EtLm"))
    if bad:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout has {bad[0]!r}; "
            "its letters are E (embedding), t (decoder layer), L (loss), m (MTP) and | between stages"
        )
    if len(stages) % pp:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout has {len(stages)} "
            f"stages, not a multiple of --pipeline-model-parallel-size {pp}"
        )
    layers = tuple(s.count("t") for s in stages)
    if sum(layers) != num_layers:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout holds "
            f"{sum(layers)} decoder layers (t), --num-layers is {num_layers}"
        )
    if not stages[0].startswith("E") or not stages[-1].endswith("L"):
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout must start with E (embedding) and end with L (loss)"
        )
    if 0 in layers[1:-1]:
        raise SpecError(
            f"{at}: planner models stages of at least one decoder "
            "layer, except an embedding-only first and a loss-only last stage; stage "
            f"{layers[1:-1].index(0) + 1} of the layout holds none"
        )
    return len(stages) // pp, layers
