"""The model section of a Megatron-LM launch (split from :mod:`.importer`): the flags planning
requires, the model's shape, attention, embeddings and experts with Megatron's defaults, and the
vocabulary the embedding is sized for (the launch's, ``planner check --vocab-size``'s, or the
tokenizer's from the cited table, :mod:`.tokenizers`)."""

from __future__ import annotations

from planner.inputs.errors import SpecError
from planner.inputs.layer_pattern import PatternError, parse_pattern
from planner.inputs.model_spec import SOFTMAX_TYPES, ModelSpec
from planner.inputs.validation import check_number, limit
from planner.launch.megatron import hybrid
from planner.launch.megatron.arguments import Arguments
from planner.launch.megatron.tokenizers import TABLE, known_vocabulary, padded_vocabulary

REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size")
"""Flags planning needs that Megatron requires too."""


def require(args: Arguments) -> None:
    """Every flag of :data:`REQUIRED` is given with a value (a hybrid launch's layers are its
    pattern's, :func:`.hybrid.layer_count`)."""
    for req in REQUIRED:
        if req == "--num-layers" and hybrid.given_pattern(args):
            continue
        if args.flags.get(req) is None:
            raise SpecError(f"{args.where}: missing {req} (needed to plan; Megatron requires it too)")


def read_model(args: Arguments, vocab_size: int | None = None) -> ModelSpec:
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
        moe_shared_expert_gate=bool(experts and num("--moe-shared-expert-intermediate-size", 0))
        and "--moe-shared-expert-gate" in flags,
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
    (:func:`planner.launch.megatron.export_args.local_attention_args`): ``--window-size L,R`` is
    Transformer Engine's (left, right) span, a query seeing itself and ``L`` earlier tokens, so
    ``window_size`` is ``L + 1`` (causal: ``R`` is 0); ``--window-attn-skip-freq N`` makes every
    N-th layer global (megatron/core/transformer/utils.py ``is_layer_window_attention``);
    ``--softmax-type`` (vanilla, off-by-one, learnable: attention sinks); ``--attention-dropout`` (a
    probability)."""
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
    dropout = args.flags.get("--attention-dropout")
    if dropout is not None:
        try:
            p = float(dropout)
        except ValueError:
            p = -1.0
        if not 0.0 <= p < 1.0:
            raise SpecError(
                f"{args.at('--attention-dropout')}: --attention-dropout {dropout!r}: expected a probability in [0, 1)"
            )
        out["attention_dropout"] = p
    elif "--attention-dropout" in args.flags:
        raise SpecError(f"{args.at('--attention-dropout')}: --attention-dropout is given without its value")
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


def vocabulary_note(args: Arguments, given: int | None, vocab: int) -> tuple[str, ...]:
    """A note saying where the vocabulary came from when the launch does not give it."""
    if given is not None or args.flags.get("--padded-vocab-size") or args.flags.get("--vocab-size"):
        return ()
    size, matched = known_vocabulary(args.flags.get("--tokenizer-type"), args.flags.get("--tokenizer-model"))
    return (
        f"vocabulary {vocab:,} from {matched} ({size:,} tokens in {TABLE.name}, padded as Megatron pads "
        "to a multiple of --make-vocab-size-divisible-by times tp)",
    )
