"""What Megatron-LM requires of a ``--yaml-cfg`` file and rejects in it before training starts,
restated in the order it meets them (Megatron-LM core_r0.19.0 @ f8837c04, whose
megatron/training/arguments.py and yaml_arguments.py the megatron-core 0.19.2 wheel ships):

1. ``load_yaml`` (yaml_arguments.py): ``yaml.safe_load``, then ``json.loads(json.dumps(config),
   object_hook=SimpleNamespace)``, so a value JSON cannot hold (a date, a set, binary) stops it;
2. ``parse_args`` (arguments.py) reads ``args.disable_msc_deprecated`` and ``args.enable_msc`` of
   the namespace the file became, and ``parse_and_validate_args`` ``args.use_checkpoint_args``
   (true: the arguments come from a checkpoint planner cannot read);
3. ``validate_yaml`` (yaml_arguments.py), line by line: every ``args.X`` it reads is a key the
   file must have (the namespace has nothing else: a missing key is an ``AttributeError``), every
   ``assert`` an error naming its key; it lowers ``tensor_model_parallel_size`` to the world size
   and ``pipeline_model_parallel_size`` to what is left, turns sequence parallelism off at tp 1, and
   merges ``model_parallel`` then ``language_model`` into the arguments
   (``SimpleNamespace(**args.__dict__, **args.model_parallel.__dict__)``: a name twice is a
   ``TypeError``);
4. ``core_transformer_config_from_yaml`` (when ``gpt_builder`` builds the model):
   ``core_config_from_args`` takes every ``TransformerConfig`` field (``MLATransformerConfig``'s
   with ``multi_latent_attention``) from ``language_model`` and ``model_parallel`` and raises
   "Missing argument" for the first it lacks; the activation must be swiglu, squaredrelu or gelu.

The first rule the file breaks is where Megatron stops: it is kept as one line naming the file,
the key (and its line when the file has it) and the rule (:attr:`YamlArgs.stop`), which ``planner
check`` reports as an error while it still prices what the file says; a file planner cannot read
at all (no section) is a SpecError. The world size is the cluster's; the environment
(``CUDA_DEVICE_MAX_CONNECTIONS``) the launch script's, unknown for an arguments file (that check is
then left out).

No file passes all of them at this release: ``validate_yaml`` reads
``args.account_for_embedding_in_pipeline_split`` at the top level, ``core_config_from_args`` needs
it in a section (a TransformerConfig field since "Uneven Virtual Pipeline Parallelism", ef490839e8,
February 2025), and the merge refuses a name in both. Each file stops on one of the three; the
message says so (:data:`CONTRADICTORY`).
"""

from __future__ import annotations

import datetime
import json

from planner.inputs.errors import SpecError
from planner.launch.megatron.yaml_fields import MLA_CONFIG, SOURCE, TRANSFORMER_CONFIG

SECTIONS = ("model_parallel", "language_model")
"""The sections ``validate_yaml`` reads (``args.model_parallel.tensor_model_parallel_size``,
``args.language_model.num_layers``)."""

ACTIVATIONS = ("swiglu", "squaredrelu", "gelu")
"""What ``core_transformer_config_from_yaml`` asserts of ``activation_func``."""

SET_AT_TOP = (
    "rank",
    "world_size",
    "yaml_cfg",
    "_is_global_batch_size_explicitly_specified",
    "data_parallel_size",
    "global_batch_size",
    "eval_global_batch_size",
    "eval_micro_batch_size",
    "dataloader_type",
    "consumed_train_samples",
    "consumed_valid_samples",
    "encoder_num_layers",
    "encoder_seq_length",
    "seq_length",
    "accumulate_allreduce_grads_in_fp32",
    "start_weight_decay",
    "end_weight_decay",
    "tokenizer_type",
)
"""Top-level names ``load_yaml``, ``parse_args`` and ``validate_yaml`` set whatever the file says
(``tokenizer_type`` from pretrain_gpt.py's ``args_defaults``): part of the namespace the sections
are merged into."""

GPT_CONFIG_READS = (
    "spec",
    "fp16_lm_cross_entropy",
    "position_embedding_type",
    "rotary_percent",
    "rotary_base",
    "make_vocab_size_divisible_by",
    "use_rope_scaling",
    "rotary_seq_len_interpolation_factor",
    "max_position_embeddings",
    "untie_embeddings_and_output_weights",
)
"""What ``gpt_config_from_args`` (megatron/training/argument_utils.py), which pretrain_gpt.py calls
right after the validation, reads of the merged arguments beside the TransformerConfig (the
vocabulary it reads the tokenizer has set by then)."""

CONTRADICTORY = {
    "account_for_embedding_in_pipeline_split": (
        "no file passes both: validate_yaml reads it at the top level, core_config_from_args needs it "
        "in language_model or model_parallel (a TransformerConfig field) and the merge refuses a name "
        "in both, so Megatron-LM at this release runs no --yaml-cfg file"
    )
}
"""Keys no file can give as the release needs them (module docstring), with the reason."""

VALIDATE = "validate_yaml"


class YamlStop(SpecError):
    """A rule Megatron stops on (its message names the file, the key and the rule)."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key
        """The key path the rule is about."""


def _hint(key: str) -> str:
    reason = CONTRADICTORY.get(key.rpartition(".")[2])
    return f"; {reason}" if reason else ""


CONFIG = "core_transformer_config_from_yaml"


class YamlArgs:
    """The namespace Megatron builds from the file, read as ``validate_yaml`` reads it: a key the
    file lacks is reported where Megatron would stop on it."""

    def __init__(self, doc: dict, file: str, lines: dict, world_size: int | None, env: dict | None):
        self.doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
        self.file, self.lines, self.world_size, self.env = file, lines, world_size, env
        self.changed: dict = {}
        """Keys whose value validate_yaml changes in a way the launch's flags must follow."""
        self.notes: list[str] = []
        self.stop: str | None = None
        """The first rule the file breaks, where Megatron stops (None: none)."""
        self.stop_key: str | None = None
        """The key path of :attr:`stop`."""

    def at(self, key: str) -> str:
        line = self.lines.get(key) or self.lines.get(key.partition(".")[0] if "." in key else "")
        return f"{self.file}: line {line}" if line else self.file

    def _scope(self, key: str) -> tuple[dict, str]:
        section, _, name = key.rpartition(".")
        return (self.doc[section] if section else self.doc), name

    def has(self, key: str) -> bool:
        scope, name = self._scope(key)
        return name in scope

    def get(self, key: str, reader: str = VALIDATE):
        scope, name = self._scope(key)
        if name not in scope:
            where = f"the {key.partition('.')[0]} section" if "." in key else "the top level"
            raise YamlStop(
                f"{self.at(key)}: {key} is missing (in {where}): Megatron-LM's {reader} reads "
                f"args.{key}, and the namespace load_yaml makes holds only the file's keys "
                f"(an AttributeError at start-up; {SOURCE}){_hint(key)}",
                key,
            )
        return scope[name]

    def set(self, key: str, value, changes_flags: bool = False) -> None:
        scope, name = self._scope(key)
        scope[name] = value
        if changes_flags:
            self.changed[key] = value

    def int(self, key: str) -> int:
        value = self.get(key)
        if isinstance(value, str) and "${" in value:
            raise YamlStop(
                f"{self.at(key)}: {key} is {value!r}: Megatron reads the file with yaml.safe_load, which "
                "does not substitute environment variables (its !pathex resolver is not on the safe loader)",
                key,
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise YamlStop(f"{self.at(key)}: {key} expects an integer, got {value!r}", key)
        return value

    def fail(self, key: str, rule: str, reader: str = VALIDATE) -> None:
        raise YamlStop(f"{self.at(key)}: {key}: {rule} (Megatron-LM's {reader} asserts it; {SOURCE})", key)


def check_yaml_args(doc: dict, file: str, lines: dict, world_size: int | None, env: dict | None) -> YamlArgs:
    """Apply Megatron's rules to the file's mapping ``doc`` (module docstring): the namespace as
    ``validate_yaml`` leaves it (the parallel sizes lowered, sequence parallelism off at tp 1), with
    a note for each value it changed and :attr:`YamlArgs.stop`, the first rule the file breaks.
    SpecError when a section is not a mapping (nothing can be read)."""
    for section in SECTIONS:
        if not isinstance(doc.get(section), dict):
            raise SpecError(
                f"{file}: no {section} section (a mapping); Megatron-LM's validate_yaml reads "
                f"args.{section} ({SOURCE})"
            )
    args = YamlArgs(doc, file, lines, world_size, env)
    try:
        _json_values(doc, file, lines)
        for key in ("disable_msc_deprecated", "enable_msc"):
            args.get(key, "parse_args")
        if args.get("use_checkpoint_args", "parse_and_validate_args"):
            args.fail(
                "use_checkpoint_args",
                "the arguments are then loaded from the checkpoint (load_args_from_checkpoint), which "
                "planner cannot read; set it false",
                "parse_and_validate_args",
            )
        args.get("data_path")
        for step in (_parallel_sizes, _batch, _virtual_stages, _precision, _run_length, _model, _features):
            step(args)
        _merge(args)
        _transformer_config(args)
        for key in GPT_CONFIG_READS:
            _flat_get(args, key, "gpt_config_from_args")
    except YamlStop as stop:
        args.stop, args.stop_key = str(stop), stop.key
    return args


def _flat_get(args: YamlArgs, name: str, reader: str):
    """A read of the merged arguments (the top level, model_parallel, language_model)."""
    for section in SECTIONS:
        if name in args.doc[section]:
            return args.doc[section][name]
    return args.get(name, reader)


def _json_values(value, file: str, lines: dict, key: str = "") -> None:
    """load_yaml's ``json.dumps(config)``: what YAML reads as a date, a set or bytes stops it."""
    if isinstance(value, dict):
        for k, v in value.items():
            _json_values(v, file, lines, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for v in value:
            _json_values(v, file, lines, key)
    elif isinstance(value, (datetime.date, set, bytes)):
        line = lines.get(key)
        raise YamlStop(
            f"{file}{f': line {line}' if line else ''}: {key} is {value!r}, which Megatron-LM's "
            f"load_yaml cannot pass through json.dumps (a {type(value).__name__}); quote it ({SOURCE})",
            key,
        )
    else:
        json.dumps(value)


def _parallel_sizes(args: YamlArgs) -> None:
    """validate_yaml's first lines: tp and pp lowered to the world size, the divisibility asserts."""
    world = args.world_size
    mp = "model_parallel."
    tp = args.int(mp + "tensor_model_parallel_size")
    if world and tp > world:
        args.notes.append(
            f"{args.at(mp + 'tensor_model_parallel_size')}: validate_yaml lowers "
            f"tensor_model_parallel_size {tp} to the world size {world}"
        )
        tp = world
        args.set(mp + "tensor_model_parallel_size", tp, changes_flags=True)
    if world and world % tp:
        args.fail(mp + "tensor_model_parallel_size", f"the world size {world} is not divisible by {tp}")
    pp = args.int(mp + "pipeline_model_parallel_size")
    if world and pp > world // tp:
        args.notes.append(
            f"{args.at(mp + 'pipeline_model_parallel_size')}: validate_yaml lowers "
            f"pipeline_model_parallel_size {pp} to {world // tp} (the world size over tp)"
        )
        pp = world // tp
        args.set(mp + "pipeline_model_parallel_size", pp, changes_flags=True)
    account = args.get("account_for_embedding_in_pipeline_split")
    args.set(mp + "transformer_pipeline_model_parallel_size", pp - 1 if account else pp)
    cp = args.int(mp + "context_parallel_size")
    if world and world % (tp * pp * cp):
        args.fail(
            mp + "context_parallel_size",
            f"the world size {world} is not divisible by tp {tp} x pp {pp} x cp {cp}",
        )
    if args.get(mp + "tp_comm_overlap") and not args.get(mp + "sequence_parallel"):
        args.fail(mp + "tp_comm_overlap", "tensor-parallel communication overlap needs sequence_parallel")


def _dp(args: YamlArgs) -> int | None:
    mp = args.doc["model_parallel"]
    size = mp["tensor_model_parallel_size"] * mp["pipeline_model_parallel_size"] * mp["context_parallel_size"]
    return args.world_size // size if args.world_size else None


def _batch(args: YamlArgs) -> None:
    """The batch sizes: micro_batch_size given and positive, no step schedule beside a global batch
    size, the eval batch divisible by eval micro-batch x dp."""
    mbs = args.get("micro_batch_size")
    if mbs is None:
        args.fail("micro_batch_size", "it must be given (not null)")
    mbs = args.int("micro_batch_size")
    if mbs <= 0:
        args.fail("micro_batch_size", f"it must be > 0, got {mbs}")
    if args.get("step_batch_size_schedule") is not None and args.get("global_batch_size") is not None:
        args.fail("step_batch_size_schedule", "it cannot be given with global_batch_size (a ValueError)")
    dp = _dp(args)
    gbs = args.get("global_batch_size")
    if gbs is None and dp:
        gbs = mbs * dp
        args.set("global_batch_size", gbs)
    if gbs is not None and (isinstance(gbs, bool) or not isinstance(gbs, int) or gbs <= 0):
        args.fail("global_batch_size", f"it must be a positive integer, got {gbs!r}")
    eval_gbs = args.doc.get("eval_global_batch_size")
    eval_mbs = args.doc.get("eval_micro_batch_size")
    eval_gbs = gbs if eval_gbs is None else eval_gbs
    eval_mbs = mbs if eval_mbs is None else eval_mbs
    if dp and isinstance(eval_gbs, int) and isinstance(eval_mbs, int) and eval_gbs % (eval_mbs * dp):
        args.fail(
            "eval_global_batch_size" if "eval_global_batch_size" in args.doc else "global_batch_size",
            f"the eval global batch size {eval_gbs} must be divisible by eval micro-batch size {eval_mbs} x "
            f"data-parallel size {dp}",
        )


def _virtual_stages(args: YamlArgs) -> None:
    """``num_layers_per_virtual_pipeline_stage`` (top level) sets the virtual stages, which
    validate_yaml asserts need pp > 2; without it there are none and p2p overlap is off."""
    key, mp = "num_layers_per_virtual_pipeline_stage", "model_parallel."
    per_virtual = args.get(key)
    if per_virtual is None:
        args.set(mp + "virtual_pipeline_model_parallel_size", None)
        args.set(mp + "overlap_p2p_comm", False)
        return
    per_virtual = args.int(key)
    pp = args.doc["model_parallel"]["pipeline_model_parallel_size"]
    if pp <= 2:
        args.fail(key, f"the interleaved schedule needs pipeline_model_parallel_size > 2, got {pp}")
    stages = args.doc["model_parallel"]["transformer_pipeline_model_parallel_size"]
    layers = args.int("language_model.num_layers")
    if layers % stages:
        args.fail("language_model.num_layers", f"{layers} layers do not divide over {stages} pipeline stages")
    if (layers // stages) % per_virtual:
        args.fail(key, f"{layers // stages} layers per pipeline stage are not divisible by {per_virtual}")
    args.set(mp + "virtual_pipeline_model_parallel_size", layers // stages // per_virtual)


def _precision(args: YamlArgs) -> None:
    """overlap_param_gather's prerequisites, fp16 xor bf16, params_dtype."""
    if args.get("overlap_param_gather"):
        if not args.get("use_distributed_optimizer"):
            args.fail("overlap_param_gather", "it is only supported with use_distributed_optimizer")
        if not args.get("overlap_grad_reduce"):
            args.fail("overlap_param_gather", "it needs overlap_grad_reduce")
    mp = "model_parallel."
    fp16 = args.get(mp + "fp16")
    if fp16 and args.get(mp + "bf16"):
        args.fail(mp + "bf16", "fp16 and bf16 exclude each other")
    if args.get(mp + "bf16"):
        args.get("accumulate_allreduce_grads_in_fp32")
        args.set("accumulate_allreduce_grads_in_fp32", True)
    if fp16 or args.get(mp + "bf16"):
        args.set(mp + "params_dtype", "float16" if fp16 else "bfloat16")
    else:
        args.get(mp + "params_dtype")  # printed: 'using {} for parameters'
    if args.get("dataloader_type") is None:
        args.set("dataloader_type", "single")
    args.set(mp + "variable_seq_lengths", False)


def _run_length(args: YamlArgs) -> None:
    """Iteration- or sample-based training, not both (its learning-rate schedule alike): the same
    four asserts each way."""
    for unit, other in (("iters", "samples"), ("samples", "iters")):
        based = "iteration" if unit == "iters" else "sample"
        if not args.get(f"train_{unit}"):
            continue
        if args.get(f"train_{other}") is not None:
            args.fail(f"train_{other}", f"expected {based}-based training (train_{unit} is given)")
        if args.get(f"lr_decay_{other}") is not None:
            args.fail(f"lr_decay_{other}", f"expected {based}-based learning rate decay")
        if args.get(f"lr_warmup_{other}") != 0:
            args.fail(f"lr_warmup_{other}", f"expected {based}-based learning rate warmup (0)")
        if args.get("lr_warmup_fraction") is not None and args.get(f"lr_warmup_{unit}") != 0:
            args.fail(f"lr_warmup_{unit}", f"only one of lr_warmup_fraction and lr_warmup_{unit}")


def _model(args: YamlArgs) -> None:
    """The model's required sizes, ffn/kv defaults, sequence lengths against the positions."""
    lm = "language_model."
    if args.get(lm + "num_layers") is not None:
        if args.get("encoder_num_layers") is not None:
            args.fail("encoder_num_layers", "it cannot be given with language_model.num_layers")
    elif args.get("encoder_num_layers") is None:
        args.fail(lm + "num_layers", "either language_model.num_layers or encoder_num_layers must be given")
    for name in ("num_layers", "hidden_size", "num_attention_heads"):
        if args.get(lm + name) is None:
            args.fail(lm + name, "it is required (not null)")
    if args.get(lm + "ffn_hidden_size") is None:
        args.get(lm + "activation_func")
    if args.get(lm + "kv_channels") is None and args.int(lm + "hidden_size") % args.int(
        lm + "num_attention_heads"
    ):
        args.fail(lm + "hidden_size", "without kv_channels it must be divisible by num_attention_heads")
    seq = args.get("seq_length")
    if seq is not None and args.get("encoder_seq_length") is not None:
        args.fail("encoder_seq_length", "it cannot be given with seq_length")
    if seq is None and args.get("encoder_seq_length") is None:
        args.fail("seq_length", "seq_length or encoder_seq_length must be given")
    seq = seq if seq is not None else args.get("encoder_seq_length")
    for key, length in (("seq_length", seq), ("decoder_seq_length", args.get("decoder_seq_length"))):
        if length is None:
            continue
        positions = args.get("max_position_embeddings")
        if not isinstance(positions, int) or not isinstance(length, int) or positions < length:
            args.fail(
                "max_position_embeddings", f"it must be an integer >= {key} ({length}), got {positions!r}"
            )
    lr = args.get("lr")
    if lr is not None:
        min_lr = args.get("min_lr")
        if not isinstance(min_lr, (int, float)) or not isinstance(lr, (int, float)) or min_lr > lr:
            args.fail("min_lr", f"it must be a number <= lr ({lr!r}), got {min_lr!r}")
    if args.get("save") is not None and args.get("save_interval") is None:
        args.fail("save_interval", "it must be given with save")


def _features(args: YamlArgs) -> None:
    """Mixed precision, weight decay, recompute, sequence parallelism, MoE and expert parallelism."""
    lm, mp = "language_model.", "model_parallel."
    if args.get("fp16_lm_cross_entropy") and not args.get("fp16"):  # the top-level fp16, as written
        args.fail("fp16_lm_cross_entropy", "lm cross entropy in fp16 needs fp16 (at the top level)")
    if args.get(lm + "fp32_residual_connection") and not (args.get(mp + "fp16") or args.get(mp + "bf16")):
        args.fail(lm + "fp32_residual_connection", "residual connection in fp32 needs fp16 or bf16")
    if args.get(lm + "moe_grouped_gemm") and not args.get(mp + "bf16"):
        args.fail(lm + "moe_grouped_gemm", "GroupedGEMM for MoE only supports bf16")
    if args.get("weight_decay_incr_style") == "constant":
        for key in ("start_weight_decay", "end_weight_decay"):
            if args.get(key) is not None:
                args.fail(key, "it must be null with weight_decay_incr_style constant")
        args.get("weight_decay")
    else:
        for key in ("start_weight_decay", "end_weight_decay"):
            if args.get(key) is None:
                args.fail(key, "it must be given unless weight_decay_incr_style is constant")
    tp = args.doc["model_parallel"]["tensor_model_parallel_size"]
    if args.get(lm + "distribute_saved_activations"):
        if tp <= 1:
            args.fail(
                lm + "distribute_saved_activations", "it distributes over tensor parallel ranks (tp > 1)"
            )
        if args.get(lm + "recompute_granularity") != "full":
            args.fail(lm + "distribute_saved_activations", "it needs recompute_granularity full")
        if args.get(lm + "recompute_method") is None:
            args.fail(lm + "distribute_saved_activations", "it needs a recompute_method")
    if (
        args.get(lm + "recompute_granularity") == "selective"
        and args.get(lm + "recompute_method") is not None
    ):
        args.fail(lm + "recompute_method", "selective recompute takes no recompute_method")
    if tp == 1 and args.doc["model_parallel"].get("sequence_parallel"):
        args.set(mp + "sequence_parallel", False, changes_flags=True)
    if args.env is not None and args.env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        if args.get(mp + "sequence_parallel"):
            raise YamlStop(
                f"{args.at(mp + 'sequence_parallel')}: {mp}sequence_parallel needs the environment "
                f"variable CUDA_DEVICE_MAX_CONNECTIONS=1, which the launch does not export "
                f"(Megatron-LM's validate_yaml raises a RuntimeError; {SOURCE})",
                mp + "sequence_parallel",
            )
    experts = args.get(lm + "num_moe_experts")
    if experts is not None and tp > 1 and not args.get(mp + "sequence_parallel"):
        args.fail(mp + "sequence_parallel", "MoE with tensor parallelism needs sequence parallelism")
    ep = args.int(mp + "expert_model_parallel_size")
    if ep > 1:
        if experts is None:
            args.fail(mp + "expert_model_parallel_size", "expert parallelism needs num_moe_experts")
        if not isinstance(experts, int) or experts % ep:
            args.fail(lm + "num_moe_experts", f"{experts!r} experts are not a multiple of ep {ep}")
        if args.get(mp + "fp16"):
            args.fail(mp + "expert_model_parallel_size", "expert parallelism is not supported with fp16")


def _merge(args: YamlArgs) -> None:
    """``SimpleNamespace(**args.__dict__, **args.model_parallel.__dict__)``, then the same with
    ``language_model``: a name both hold is a TypeError."""
    names = {*args.doc, *SET_AT_TOP}
    for section in SECTIONS:
        for name in args.doc[section]:
            if name in names:
                if name in args.doc:
                    other = "also a top-level key"
                elif name in args.doc["model_parallel"]:
                    other = "also in model_parallel"
                else:
                    other = "a name validate_yaml sets at the top level"
                raise YamlStop(
                    f"{args.at(f'{section}.{name}')}: {section}.{name} is {other}; Megatron-LM's "
                    f"validate_yaml merges the sections into the arguments and stops on a name given twice "
                    f"(a TypeError; {SOURCE}){_hint(name)}",
                    f"{section}.{name}",
                )
        names |= set(args.doc[section])


def _transformer_config(args: YamlArgs) -> None:
    """core_transformer_config_from_yaml: every field from language_model or model_parallel, the
    activation one of three (and bias_swiglu_fusion read with swiglu)."""
    given = {**args.doc["language_model"], **args.doc["model_parallel"]}
    flat = {**args.doc, **given}
    fields = list(TRANSFORMER_CONFIG)
    kind = "TransformerConfig"
    if flat.get("multi_latent_attention"):
        fields += list(MLA_CONFIG)
        kind = "MLATransformerConfig"
    missing = [f for f in fields if f not in given]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise YamlStop(
            f"{args.file}: {kind} field {missing[0]}{more} is in neither language_model nor "
            f"model_parallel; Megatron-LM's {CONFIG} takes every field from them and raises 'Missing "
            f"argument {missing[0]}' when it builds the model ({SOURCE}){_hint(missing[0])}",
            missing[0],
        )
    activation = given["activation_func"]
    section = "language_model" if "activation_func" in args.doc["language_model"] else "model_parallel"
    key = f"{section}.activation_func"
    if activation not in ACTIVATIONS:
        args.fail(key, f"it is {activation!r}; it must be one of {', '.join(ACTIVATIONS)}", CONFIG)
    if activation == "swiglu" and "bias_swiglu_fusion" not in given:
        args.get("language_model.bias_swiglu_fusion", CONFIG)
