"""Hybrid models for Megatron-LM at the pinned release (megatron-core 0.19.2, branch core_r0.19.0):
the arguments of Mamba-2 and gated DeltaNet layers, written by :mod:`.export` and read back by
:mod:`.importer`.

* A hybrid layer pattern (``ModelSpec.hybrid_layer_pattern``) runs in ``pretrain_hybrid.py``
  (``pretrain_mamba.py`` is its deprecated wrapper), with ``--hybrid-layer-pattern`` (one symbol per
  layer, megatron/core/models/hybrid/hybrid_layer_allocation.py ``Symbols``), the Mamba-2 shape
  (``--mamba-state-dim``, ``--mamba-head-dim``, ``--mamba-num-heads``, ``--mamba-num-groups``;
  TransformerConfig) and the layer spec ``--spec megatron.core.models.hybrid.hybrid_layer_specs
  hybrid_stack_spec``, as examples/mamba/train.sh runs it. ``validate_args`` derives
  ``--num-layers`` from the pattern, so the export leaves it out (examples/mamba/README.md: "the
  number of layers is derived from the pattern length, so --num-layers should not be specified").
* Pipeline stages are ``|`` separators in the pattern ("flexible virtual pipeline parallelism":
  ``select_pipeline_segment`` gives pipeline rank r, virtual stage v the segment ``v * pp + r``, the
  order of planner's ``stage_layers``; the segment count over pp is the virtual stages per rank).
  ``validate_args`` asserts no ``--num-layers-per-virtual-pipeline-stage``,
  ``--num-virtual-stages-per-pipeline-rank``, ``--pipeline-model-parallel-layout`` or
  ``--account-for-embedding/loss-in-pipeline-split`` beside the pattern, and no
  ``--decoder-first/last-pipeline-num-layers`` beside pipes.
* Gated DeltaNet inside a GPT (``ModelSpec.linear_attention_freq``, Qwen3-Next) runs in
  ``pretrain_gpt.py`` with ``--experimental-attention-variant gated_delta_net``,
  ``--linear-attention-freq N`` (layer i softmax attention iff ``(i + 1) % N == 0``,
  megatron/core/models/gpt/experimental_attention_variant_module_specs.py
  ``get_linear_attention_pattern``) and the ``--linear-*`` shape; ``G`` layers of a hybrid pattern
  take the same ``--linear-*`` shape. The attention output gate is ``--attention-output-gate``.
* DeepSeek sparse attention (``ModelSpec.is_dsa``, DeepSeek-V3.2) runs in ``pretrain_gpt.py`` with
  ``--experimental-attention-variant dsa`` beside ``--multi-latent-attention``, the indexer's shape
  (``--dsa-indexer-n-heads``, ``--dsa-indexer-head-dim``, ``--dsa-indexer-topk``; TransformerConfig
  fields, None by default), ``--no-rope-fusion`` (TransformerConfig asserts "RoPE fusion is not
  supported for DSAttention") and the indexer's KL loss that the cost model prices
  (:data:`DSA_LOSS`).
"""

from __future__ import annotations

from cost_models.parallel import ParallelConfig, first_last_split
from planner.frameworks.megatron import MAMBA_FIXED
from planner.inputs.errors import ConfigError, SpecError
from planner.inputs.model_spec import HYBRID_SYMBOLS, ModelSpec
from planner.launch.megatron.arguments import Arguments

GPT_SCRIPT = "pretrain_gpt.py"
HYBRID_SCRIPT = "pretrain_hybrid.py"
HYBRID_SPEC = "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec"
"""The layer spec examples/mamba/train.sh passes (``--spec MODULE NAME``); ``HybridModelBuilder``
(megatron/training/models/hybrid.py) uses the same spec when none is given."""
TRITON_ENV = (
    ("TRITON_CACHE_DIR", "./triton-cache/"),
    ("TRITON_CACHE_MANAGER", "megatron.core.ssm.triton_cache_manager:ParallelFileCacheManager"),
)
"""The Triton cache examples/mamba/train.sh sets for the Mamba kernels: one directory shared by the
ranks of a node, written through Megatron-Core's process-safe cache manager."""
MAMBA_DEFAULTS = {"--mamba-state-dim": 128, "--mamba-head-dim": 64, "--mamba-num-groups": 8}
"""TransformerConfig's Mamba defaults (megatron-core 0.19.2); ``mamba_num_heads`` None means
``2 * hidden_size / mamba_head_dim`` (``MambaMixer``'s ``expand`` 2)."""
LINEAR_FLAGS = {
    "linear_conv_kernel_dim": ("--linear-conv-kernel-dim", 4),
    "linear_key_head_dim": ("--linear-key-head-dim", 128),
    "linear_value_head_dim": ("--linear-value-head-dim", 128),
    "linear_num_key_heads": ("--linear-num-key-heads", 16),
    "linear_num_value_heads": ("--linear-num-value-heads", 32),
}
"""The gated DeltaNet shape: ModelSpec field -> (flag, TransformerConfig default)."""
DSA_FLAGS = {
    "dsa_indexer_n_heads": "--dsa-indexer-n-heads",
    "dsa_indexer_head_dim": "--dsa-indexer-head-dim",
    "dsa_indexer_topk": "--dsa-indexer-topk",
}
"""The indexer's shape: ModelSpec field -> flag (TransformerConfig: no default, DSAIndexer needs all
three)."""
DSA_LOSS = (("--dsa-indexer-loss-coeff", "0.01"), ("--dsa-indexer-use-sparse-loss", None))
"""The indexer's training: its KL loss over the selected keys (DeepSeek-V3.2-Exp report Sec. 2.1,
the sparse training stage), at the coefficient of Megatron-Bridge's DeepSeek recipes
(src/megatron/bridge/recipes/deepseek/gb200/deepseek_v4.py: ``dsa_indexer_loss_coeff = 0.01``,
``dsa_indexer_use_sparse_loss = True``) and of Megatron-LM's DSA functional test
(tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp2_dsa). Without it (TransformerConfig's
None) the indexer gets no gradient: its inputs are detached and the top-k carries none."""
PATTERN_FLAGS = ("--hybrid-layer-pattern", "--hybrid-override-pattern")
"""The pattern and its deprecated spelling (validate_args forwards the second to the first and
asserts they are not both given)."""
SPLIT_FLAGS = (
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--pipeline-model-parallel-layout",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)
"""What validate_args asserts is absent beside a hybrid layer pattern ("Pipeline stage layout is
defined by | separators in the pattern")."""


def has_gdn(model: ModelSpec) -> bool:
    """Whether some layer is gated DeltaNet (``G`` in the pattern or ``linear_attention_freq``)."""
    return "G" in model.hybrid_layer_pattern or bool(model.linear_attention_freq)


def training_script(model: ModelSpec) -> str:
    """The Megatron-LM entry point that builds ``model``."""
    return HYBRID_SCRIPT if model.is_hybrid else GPT_SCRIPT


def staged_pattern(pattern: str, layers: tuple[int, ...]) -> str:
    """``pattern`` cut into consecutive segments of ``layers[i]`` symbols, joined by ``|`` (one
    segment per virtual stage, in Megatron's order ``v * pp + rank``); one stage: no separator."""
    if len(layers) <= 1:
        return pattern
    out, start = [], 0
    for n in layers:
        out.append(pattern[start : start + n])
        start += n
    return "|".join(out)


def pattern_args(m: ModelSpec, c: ParallelConfig) -> list[tuple[str, str | None]]:
    """``--hybrid-layer-pattern`` with the plan's stages (in place of ``--num-layers``)."""
    return [("--hybrid-layer-pattern", staged_pattern(m.hybrid_layer_pattern, c.stage_layers(m)))]


def mixer_args(m: ModelSpec) -> list[tuple[str, str | None]]:
    """The Mamba-2 and gated DeltaNet shapes, the gated attention and the hybrid layer spec."""
    args: list[tuple[str, str | None]] = []
    if m.attention_output_gate:
        args.append(("--attention-output-gate", None))
    if "M" in m.hybrid_layer_pattern:
        args += [
            ("--mamba-state-dim", str(m.mamba_state_dim)),
            ("--mamba-head-dim", str(m.mamba_head_dim)),
            ("--mamba-num-heads", str(m.mamba_num_heads)),
            ("--mamba-num-groups", str(m.mamba_num_groups)),
        ]
    if m.linear_attention_freq:
        args += [
            ("--experimental-attention-variant", "gated_delta_net"),
            ("--linear-attention-freq", str(m.linear_attention_freq)),
        ]
    if has_gdn(m):
        args += [(flag, str(getattr(m, key))) for key, (flag, _) in LINEAR_FLAGS.items()]
    if m.is_dsa:
        args.append(("--experimental-attention-variant", "dsa"))
        args += [(flag, str(getattr(m, key))) for key, flag in DSA_FLAGS.items()]
        args += [*DSA_LOSS, ("--no-rope-fusion", None)]
    if m.is_hybrid:
        args.append(("--spec", HYBRID_SPEC))
    return args


# --- import -----------------------------------------------------------------------------------


def given_pattern(args: Arguments) -> tuple[str, str] | None:
    """(flag, value) of the launch's hybrid layer pattern; None for a GPT launch."""
    given = [f for f in PATTERN_FLAGS if args.flags.get(f) is not None]
    if len(given) > 1:
        raise SpecError(
            f"{args.at(given[1])}: --hybrid-override-pattern and --hybrid-layer-pattern cannot both be "
            "given (validate_args; --hybrid-override-pattern is the deprecated name)"
        )
    return (given[0], str(args.flags[given[0]])) if given else None


def _segments(args: Arguments) -> tuple[str, list[str]] | None:
    """(flag, pipeline segments of the main pattern) of a hybrid launch; an MTP part (``/``) or a
    symbol planner does not price is an error naming the flag."""
    given = given_pattern(args)
    if given is None:
        return None
    flag, text = given
    if "/" in text:
        raise SpecError(
            f"{args.at(flag)}: {flag} {text!r} has MTP layers ('/'): planner prices no MTP in hybrid models"
        )
    bad = sorted(set(text) - set(HYBRID_SYMBOLS) - {"|"})
    if bad:
        raise SpecError(
            f"{args.at(flag)}: {flag} has {bad[0]!r}; planner prices M (Mamba-2), G (gated DeltaNet), "
            "* (attention), - (MLP), E (MoE) and | between pipeline stages"
        )
    if not text.replace("|", ""):
        raise SpecError(f"{args.at(flag)}: {flag} {text!r} has no layer")
    return flag, text.split("|")


def layer_count(args: Arguments) -> int | None:
    """Layers of a hybrid launch: its pattern's symbols (validate_args sets ``--num-layers`` from
    the pattern, ignoring a different value with a warning); None for a GPT launch."""
    seg = _segments(args)
    return None if seg is None else sum(len(s) for s in seg[1])


def model_fields(args: Arguments) -> dict:
    """The ModelSpec fields of the hybrid pattern, the Mamba-2 and gated DeltaNet shapes and the
    gated attention, with TransformerConfig's defaults for the flags not given."""
    flags, num, at = args.flags, args.num, args.at
    out: dict = {"attention_output_gate": "--attention-output-gate" in flags}
    seg = _segments(args)
    variant = flags.get("--experimental-attention-variant")
    if variant not in (None, "gated_delta_net", "dsa"):
        raise SpecError(
            f"{at('--experimental-attention-variant')}: --experimental-attention-variant {variant!r} is "
            "not allowed; allowed values: gated_delta_net, dsa"
        )
    if variant == "dsa":
        return {**out, **_dsa_fields(args, seg is not None)}
    gdn = variant == "gated_delta_net"
    if gdn and seg is not None:
        raise SpecError(
            f"{at('--experimental-attention-variant')}: --experimental-attention-variant with a hybrid "
            "layer pattern: a hybrid model places gated DeltaNet layers with G"
        )
    if seg is not None:
        pattern = "".join(seg[1])
        out["hybrid_layer_pattern"] = pattern
        if "M" in pattern:
            head_dim = num("--mamba-head-dim", MAMBA_DEFAULTS["--mamba-head-dim"])
            out.update(
                mamba_state_dim=num("--mamba-state-dim", MAMBA_DEFAULTS["--mamba-state-dim"]),
                mamba_head_dim=head_dim,
                mamba_num_groups=num("--mamba-num-groups", MAMBA_DEFAULTS["--mamba-num-groups"]),
                mamba_num_heads=num("--mamba-num-heads", 2 * num("--hidden-size") // head_dim),
                **MAMBA_FIXED,
            )
    if gdn:
        out["linear_attention_freq"] = _linear_freq(args)
    if gdn or (seg is not None and "G" in out["hybrid_layer_pattern"]):
        out.update({key: num(flag, default) for key, (flag, default) in LINEAR_FLAGS.items()})
    return out


def _dsa_fields(args: Arguments, hybrid: bool) -> dict:
    """The indexer's shape of a ``--experimental-attention-variant dsa`` launch: the three flags
    are required (TransformerConfig's None would fail in ``DSAIndexer``), beside MLA."""
    at = args.at("--experimental-attention-variant")
    if hybrid:
        raise SpecError(
            f"{at}: --experimental-attention-variant dsa with a hybrid layer pattern: planner prices "
            "DeepSeek sparse attention in pretrain_gpt.py only (the pattern's D layers are not read)"
        )
    if "--multi-latent-attention" not in args.flags:
        raise SpecError(
            f"{at}: --experimental-attention-variant dsa without --multi-latent-attention (DSAttention "
            "runs over absorbed MLA)"
        )
    missing = [flag for flag in DSA_FLAGS.values() if args.flags.get(flag) is None]
    if missing:
        raise SpecError(f"{at}: --experimental-attention-variant dsa without {missing[0]} (no default)")
    coeff, sparse = DSA_LOSS[0][0], DSA_LOSS[1][0]
    try:
        trained = float(args.flags.get(coeff) or 0) > 0
    except ValueError:
        raise SpecError(f"{args.at(coeff)}: {coeff} expects a number, got {args.flags[coeff]!r}") from None
    if not trained or sparse not in args.flags:
        raise SpecError(
            f"{args.at(coeff) if coeff in args.flags else at}: planner prices DeepSeek sparse attention "
            f"with the indexer trained by its sparse KL loss ({coeff} above 0 and {sparse}); this "
            "launch trains it otherwise"
        )
    return {key: args.num(flag) for key, flag in DSA_FLAGS.items()}


def _linear_freq(args: Arguments) -> int:
    """``--linear-attention-freq`` N (TransformerConfig asserts it is given with gated_delta_net);
    planner prices the integer form (a list pattern is refused)."""
    flag = "--linear-attention-freq"
    text = args.flags.get(flag)
    if text is None:
        raise SpecError(
            f"{args.at('--experimental-attention-variant')}: --experimental-attention-variant "
            f"gated_delta_net without {flag} (TransformerConfig asserts it is set)"
        )
    if "[" in str(text):
        raise SpecError(
            f"{args.at(flag)}: {flag} {text!r}: planner prices the integer form N (every N-th layer "
            "softmax attention)"
        )
    n = args.num(flag)
    if n < 2:
        raise SpecError(f"{args.at(flag)}: {flag} {n}: every layer would be softmax attention; give N >= 2")
    return n


def known_spec(args: Arguments) -> bool:
    """Whether the launch's ``--spec`` is the hybrid layer spec planner prices (a hybrid launch
    with no ``--spec`` builds it too)."""
    return given_pattern(args) is not None and args.flags.get("--spec") in (None, HYBRID_SPEC)


def pipeline(args: Arguments, num_layers: int, pp: int) -> tuple[int, tuple[int, ...]] | None:
    """(virtual stages per rank, layers of each virtual stage) of a hybrid launch, as validate_args
    and ``select_pipeline_segment`` derive them; None for a GPT launch. Without pipes the layers
    split evenly over pp, or by ``--decoder-first/last-pipeline-num-layers``."""
    seg = _segments(args)
    if seg is None:
        return None
    flag, segments = seg
    for f in SPLIT_FLAGS:
        if f in args.flags:
            raise SpecError(
                f"{args.at(f)}: {f} with {flag}: validate_args refuses it (pipeline stages are the | "
                "segments of the pattern)"
            )
    first_last = [
        f
        for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")
        if f in args.flags
    ]
    if len(segments) > 1:
        if first_last:
            raise SpecError(
                f"{args.at(first_last[0])}: {first_last[0]} with a | in {flag}: validate_args refuses it "
                "(the pipes define the stages)"
            )
        if len(segments) % pp:
            raise SpecError(
                f"{args.at(flag)}: {flag} has {len(segments)} pipeline segments, not a multiple of "
                f"--pipeline-model-parallel-size {pp} (validate_args)"
            )
        layers = tuple(len(s) for s in segments)
        return len(segments) // pp, (() if len(set(layers)) == 1 else layers)
    if pp == 1:
        return 1, ()
    if first_last:
        try:
            ranks = first_last_split(
                num_layers,
                pp,
                args.num("--decoder-first-pipeline-num-layers"),
                args.num("--decoder-last-pipeline-num-layers"),
            )
        except ConfigError as exc:
            raise SpecError(f"{args.at(first_last[0])}: {exc} ({flag} of {num_layers} layers)") from None
        return 1, (() if len(set(ranks)) == 1 else ranks)
    if num_layers % pp:
        raise SpecError(
            f"{args.at(flag)}: the {num_layers} layers of {flag} are not divisible by "
            f"--pipeline-model-parallel-size {pp} (select_pipeline_segment without | separators)"
        )
    return 1, ()
