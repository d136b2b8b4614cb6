"""Megatron-LM import: read an arguments file or a launch script back into a model, a job and a
configuration (see docs/megatron.md), with the line of every flag for annotations.

The words and flags of a launch are read by :mod:`.arguments` (shell variables resolved from the
script's own assignments by :mod:`.shell`; every flag checked against the parser of the pinned
release, :data:`.flags.ACCEPTED`): a word argparse would reject is recorded in
:attr:`Imported.rejected`, a flag it accepts that planning does not need in
:attr:`Imported.ignored`, one that could matter but planner does not model in
:attr:`Imported.unknown`. This module turns the flags into the model, the job and the
configuration, section by section: the model in :mod:`.model_flags`, the pipeline split in
:mod:`.pipeline_flags`, the job and the configuration here. What Megatron's ``validate_args``
would reject is judged by :mod:`.rules`.
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
    canonical_modules,
)
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import DTYPES, FP8_RECIPES, MOE_DISPATCHERS, JobSpec
from planner.inputs.jobs import cuda_graph_scope
from planner.inputs.model_spec import ModelSpec
from planner.inputs.model_yaml import validate_model
from planner.launch.megatron import hybrid
from planner.launch.megatron.arguments import Arguments, megatron_words, read_arguments
from planner.launch.megatron.expansion import known_value
from planner.launch.megatron.model_args import is_model_args_file, model_args_words
from planner.launch.megatron.model_flags import read_model, require, vocabulary_note
from planner.launch.megatron.pipeline_flags import parse_layout, pipeline_split
from planner.launch.megatron.shell import read_script
from planner.launch.megatron.yaml_cfg import YamlConfig, read_yaml_cfg

__all__ = ["OPTIMIZER_DTYPE_FLAGS", "Imported", "below_fp32", "keys_named", "parse_layout", "parse_megatron"]
"""What other modules read from here (``parse_layout`` lives in :mod:`.pipeline_flags`)."""


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
    """Read Megatron flags from an args file, a launch script or a ``MODEL_ARGS`` model config
    (:mod:`.model_args`: Megatron-LM's test configs, the MoE Model Zoo's); ``vocab_size`` (``planner check
    --vocab-size``) is the vocabulary of a launch that gives neither --vocab-size nor
    --padded-vocab-size (see :func:`.model_flags.read_model`); ``variables`` (``planner check --set NAME=VALUE``)
    the shell variables a script starts with, as if exported before it runs; ``path`` the file
    ``text`` was read from, beside which the files the script sources are found."""
    if is_model_args_file(text, path):
        # judged as a launch: its ENV_VARS are the environment the run starts with, and a word no
        # flag takes is a positional argument Megatron's parser refuses
        words, env = model_args_words(text, where, variables)
        is_script = True
    else:
        try:
            words, env, is_script = megatron_words(text, variables, path)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    args = read_arguments(words, where, strict=is_script)
    cfg = None
    if "--yaml-cfg" in args.flags:
        cfg, args = _from_yaml_cfg(args, text, where, variables, path, world_size, env if is_script else None)
        try:
            return _imported(args, cfg, world_size, vocab_size, env, is_script)
        except SpecError as exc:
            raise SpecError(keys_named(str(exc), cfg)) from None
    return _imported(args, cfg, world_size, vocab_size, env, is_script)


def _from_yaml_cfg(
    args: Arguments, text: str, where: str, variables, path, world_size, env
) -> tuple[YamlConfig, Arguments]:
    """The flags of a launch's ``--yaml-cfg`` file in place of its command line's (Megatron's
    ``load_yaml`` replaces the parsed namespace), the file found from the working directory the
    script leaves and judged on ``world_size`` GPUs with the script's environment ``env``
    (:func:`.yaml_cfg.read_yaml_cfg`)."""
    value, line = args.flags["--yaml-cfg"], args.lines["--yaml-cfg"]
    if value is None:
        raise SpecError(f"{args.at('--yaml-cfg')}: --yaml-cfg is given without its file")
    root = pwd = None
    if path is not None:
        script = read_script(text, variables, path)
        root = script.root
        pwd = known_value(script.scalars.get("PWD"))
    others = tuple(f for f in args.flags if f != "--yaml-cfg")
    cfg = read_yaml_cfg(value, line, where, pwd, root, others, world_size, env)
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
    require(args)
    model = read_model(args, vocab_size)
    if model.is_hybrid or model.linear_attention_freq:
        # The pattern's E layers against --num-experts, Mamba heads over groups, the gated DeltaNet
        # shape: ModelSpec's own checks, as for a model file.
        validate_model(model, args.where)
    tp, pp, cp = (
        args.num("--tensor-model-parallel-size", 1),
        args.num("--pipeline-model-parallel-size", 1),
        args.num("--context-parallel-size", 1),
    )
    vpp, layers = pipeline_split(args, model.num_layers, pp)
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
        vocabulary_note(args, vocab_size, model.vocab_size),
        cfg,
    )


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
