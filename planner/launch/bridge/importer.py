"""Megatron-Bridge import: a ``ConfigContainer`` override YAML (:mod:`.export`'s, or one written by
hand) read back into a model, a job and a configuration.

The file's fields become the Megatron-LM flags they stand for (:data:`.export.FIELDS`, read
backwards) and those go through the Megatron-LM import (:func:`planner.launch.megatron.importer.
parse_megatron`), so a Bridge launch and the equivalent Megatron-LM launch are priced alike. A field
the file does not set takes megatron-core's default, not the recipe's (the recipe is Python that
planner does not run): a notice says so. A key planner does not read is reported, as Megatron's
flags that are not interpreted are; a value of the wrong type is a one-line error naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import yaml

from planner.inputs.errors import SpecError
from planner.inputs.layer_pattern import pattern_text
from planner.launch.bridge.export import COMM_OVERLAP_TARGET, FIELDS, MIXED_PRECISION
from planner.launch.bridge.peft import yaml_peft_job
from planner.launch.megatron.importer import Imported, parse_megatron
from planner.launch.megatron.tokenizers import padded_vocabulary

CONTAINER_SECTIONS = (
    "env_vars",
    "rng",
    "rerun_state_machine",
    "train",
    "model",
    "optimizer",
    "optimizer_config_override_provider",
    "ddp",
    "validation",
    "scheduler",
    "dataset",
    "logger",
    "tokenizer",
    "checkpoint",
    "dist",
    "ft",
    "straggler",
    "nvrx_straggler",
    "profiling",
    "peft",
    "comm_overlap",
    "mixed_precision",
    "tensor_inspect",
    "inprocess_restart",
)
"""``ConfigContainer``'s fields (Megatron-Bridge v0.6.0, src/megatron/bridge/training/config.py)."""

IGNORED_SECTIONS = {"rng", "validation", "scheduler", "logger", "tokenizer", "profiling", "env_vars"}
"""Sections that change no planned cost (learning-rate schedule, logging, seeds, the tokenizer's
files: the vocabulary is ``model.vocab_size``)."""

IGNORED = {
    "train.train_iters",
    "train.train_samples",
    "train.eval_iters",
    "train.eval_interval",
    "train.exit_duration_in_mins",
    "train.manual_gc",
    "train.manual_gc_interval",
    "optimizer.optimizer",
    "optimizer.lr",
    "optimizer.min_lr",
    "optimizer.weight_decay",
    "optimizer.adam_beta1",
    "optimizer.adam_beta2",
    "optimizer.adam_eps",
    "optimizer.clip_grad",
    "checkpoint.save",
    "checkpoint.load",
    "checkpoint.save_interval",
    "checkpoint.pretrained_checkpoint",
    "model.make_vocab_size_divisible_by",
    "model.hf_model_id",
    "model.init_method_std",
    "model.hidden_dropout",
    "model.attention_dropout",
    "model.layernorm_epsilon",
    "model.rotary_percent",
    "model.masked_softmax_fusion",
    "model.cross_entropy_loss_fusion",
    "model.bias_activation_fusion",
    "model.bias_dropout_fusion",
    "model.apply_rope_fusion",
    "model.persist_layer_norm",
    "model.moe_aux_loss_coeff",
    "model.moe_router_load_balancing_type",
    "ddp.check_for_nan_in_grad",
    "ddp.bucket_size",
    "ddp.average_in_collective",
    "dataset.random_seed",
    "dataset.num_workers",
    "dataset.data_path",
    "dataset.blend",
    "dataset.split",
    "dataset.path_to_cache",
    "dist.distributed_timeout_minutes",
}
"""Fields that change no planned cost (what the Megatron-LM import ignores, in Bridge's names)."""

SPECIAL = {
    "model.num_query_groups",
    "model.gated_linear_unit",
    "model.activation_func",
    "model.window_size",
    "model.moe_layer_freq",
    "model.seq_length",
    "model.should_pad_vocab",
    "model.virtual_pipeline_model_parallel_size",
    "model.cpu_offloading",
    "dataset.seq_length",
    "ddp.grad_reduce_in_fp32",
    "optimizer.use_distributed_optimizer",
    "comm_overlap._target_",
    "comm_overlap.overlap_grad_reduce",
    "comm_overlap.overlap_param_gather",
    "mixed_precision",
}
"""Fields read by :func:`_special_flags` rather than by the table."""

PRECISION_FLAGS = {
    "bf16_mixed": [("--bf16", None)],
    "fp16_mixed": [("--fp16", None)],
    "bf16_with_fp8_delayed_scaling_mixed": [
        ("--bf16", None),
        ("--fp8-format", "hybrid"),
        ("--fp8-recipe", "delayed"),
    ],
    "bf16_with_fp8_current_scaling_mixed": [
        ("--bf16", None),
        ("--fp8-format", "hybrid"),
        ("--fp8-recipe", "tensorwise"),
    ],
    "bf16_with_fp8_subchannel_scaling_mixed": [
        ("--bf16", None),
        ("--fp8-format", "e4m3"),
        ("--fp8-recipe", "blockwise"),
    ],
    "bf16_with_mxfp8_mixed": [("--bf16", None), ("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")],
    "bf16_with_nvfp4_mixed": [("--bf16", None), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")],
}
"""What each mixed-precision recipe sets (training/mixed_precision.py: ``fp8``, ``fp8_recipe``,
``fp4``, ``fp4_recipe``, ``bf16``/``fp16``), as the Megatron-LM flags planner reads."""
assert set(PRECISION_FLAGS) == set(MIXED_PRECISION.values())


def is_bridge_overrides(doc: object) -> bool:
    """Whether a loaded YAML document is a ConfigContainer override: a mapping with a ``model``
    section and only ConfigContainer sections at the top (a planner plan or model file has
    ``kind`` or ``schema_version``; a Megatron ``--yaml-cfg`` file its own section names)."""
    return isinstance(doc, dict) and "model" in doc and all(k in CONTAINER_SECTIONS for k in doc)


@dataclass(frozen=True, slots=True)
class BridgeImported:
    """A Megatron-Bridge override read back: the Megatron import of its fields, and the keys."""

    imported: Imported
    unknown: tuple[str, ...]
    """Keys planner does not interpret (warnings)."""
    key_lines: dict = field(default_factory=dict)
    """Line (1-based) of each key path in the file."""
    flag_keys: dict = field(default_factory=dict)
    """The key path each Megatron flag came from (for findings' lines)."""
    notes: tuple[str, ...] = ()


def _key_lines(text: str) -> dict:
    """Line of every key path (``section.key``) of the document."""
    lines: dict = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                path = f"{prefix}.{k.value}" if prefix else str(k.value)
                lines[path] = k.start_mark.line + 1
                if prefix == "":
                    walk(v, path)

    walk(root, "")
    return lines


def _typed(value, kind: str, path: str, where: str):
    """A field's value as the flag's text (None: the flag is not given)."""
    if kind in ("switch", "set_switch", "negated"):
        if not isinstance(value, bool):
            raise SpecError(f"{where}: {path}: expected true or false, got {value!r}")
        return value
    if value is None:
        return None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: {path}: expected an integer, got {value!r}")
        return str(value)
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{where}: {path}: expected a list of names, got {value!r}")
        return " ".join(value) if value else None
    if not isinstance(value, str):
        raise SpecError(f"{where}: {path}: expected a string, got {value!r}")
    return value


def read_bridge(
    text: str, where: str, world_size: int | None = None, vocab_size: int | None = None
) -> BridgeImported:
    """Read an override YAML (see the module docstring); SpecError (one line) for a value planner
    cannot interpret."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not is_bridge_overrides(doc):
        raise SpecError(f"{where}: not a Megatron-Bridge ConfigContainer override (no model section)")
    note = (
        "fields this file does not set take megatron-core's defaults, not the recipe's (planner does not "
        "run the recipe's Python)"
    )
    lines = _key_lines(text)
    finetune = yaml_peft_job(doc.get("peft"), where, lines)
    read = read_sections(
        {k: v for k, v in doc.items() if k != "peft"}, where, lines, world_size, vocab_size, note
    )
    if finetune:
        job = replace(read.imported.job, **finetune)
        read = replace(read, imported=replace(read.imported, job=job))
    return read


def read_sections(
    doc: dict,
    where: str,
    key_lines: dict,
    world_size: int | None = None,
    vocab_size: int | None = None,
    note: str = "",
) -> BridgeImported:
    """A ConfigContainer's sections (``{section: {field: value}}``, ``mixed_precision`` a recipe
    name) as the Megatron launch they stand for: the override file's mapping, shared with the
    recipe import (:mod:`.recipe`); ``key_lines`` the line of each ``section.field``, ``note`` how
    unset fields are found."""
    values: dict = {}
    unknown: list[str] = []
    for section, body in doc.items():
        if section == "mixed_precision":
            values[section] = body
            continue
        if body is None:
            continue
        if not isinstance(body, dict):
            raise SpecError(f"{where}: {section}: expected a mapping of fields, got {body!r}")
        for key, value in body.items():
            values[f"{section}.{key}"] = value
    table = {path: (flag, kind) for path, flag, kind in FIELDS}
    args: list[tuple[str, str | None]] = []
    flag_keys: dict = {}

    def add(flag: str, value: str | None, path: str) -> None:
        args.append((flag, value))
        flag_keys.setdefault(flag, path)

    for path, value in values.items():
        section = path.split(".")[0]
        if path in table:
            flag, kind = table[path]
            v = _typed(value, kind, path, where)
            if kind in ("switch", "set_switch") and v:
                add(flag, None, path)
            elif kind == "negated" and not v:
                add(flag, None, path)
            elif kind not in ("switch", "set_switch", "negated") and v is not None:
                add(flag, v, path)
        elif path in SPECIAL:
            continue
        elif path not in IGNORED and section not in IGNORED_SECTIONS:
            unknown.append(path)
    args += _special_flags(values, where, flag_keys)
    offload = values.get("model.cpu_offloading", False)
    _typed(offload, "switch", "model.cpu_offloading", where)
    if not offload:
        # TransformerConfig offloads only with cpu_offloading on (the Megatron-LM parser sets it
        # from --cpu-offloading-num-layers; Bridge takes the field as written).
        args = [(f, v) for f, v in args if f != "--cpu-offloading-num-layers"]
    notes = [note] if note else []
    text_args = "".join(f"{f}\n" if v is None else f"{f} {_quoted(v)}\n" for f, v in args)
    try:
        imported = parse_megatron(text_args, where, world_size, vocab_size)
    except SpecError as exc:
        raise SpecError(renamed(str(exc), flag_keys)) from None
    return BridgeImported(imported, tuple(unknown), key_lines, flag_keys, tuple(notes))


def _quoted(value: str) -> str:
    import shlex

    return " ".join(shlex.quote(w) for w in value.split(" ")) if " " in value else shlex.quote(value)


def renamed(message: str, flag_keys: dict) -> str:
    """A Megatron import or validation message with each flag named by the key it came from."""
    import re

    message = re.sub(r": line \d+", "", message)
    for flag, path in sorted(flag_keys.items(), key=lambda kv: -len(kv[0])):
        message = re.sub(re.escape(flag) + r"(?![\w-])", path, message)
    return message


def _special_flags(values: dict, where: str, flag_keys: dict) -> list[tuple[str, str | None]]:
    """The flags of the fields read apart from the table (:data:`SPECIAL`)."""
    out: list[tuple[str, str | None]] = []

    def add(flag: str, value: str | None, path: str) -> None:
        out.append((flag, value))
        flag_keys.setdefault(flag, path)

    heads = values.get("model.num_attention_heads")
    groups = values.get("model.num_query_groups")
    if groups is not None:
        _typed(groups, "int", "model.num_query_groups", where)
        if groups != heads:
            add("--group-query-attention", None, "model.num_query_groups")
            add("--num-query-groups", str(groups), "model.num_query_groups")
    gated = values.get("model.gated_linear_unit", False)
    _typed(gated, "switch", "model.gated_linear_unit", where)
    act = values.get("model.activation_func", "gelu")
    pair = (gated, act)
    if pair == (True, "silu"):
        add("--swiglu", None, "model.activation_func")
    elif pair == (False, "squared_relu"):
        add("--squared-relu", None, "model.activation_func")
    elif pair != (False, "gelu"):
        raise SpecError(
            f"{where}: model.gated_linear_unit {str(gated).lower()} with model.activation_func {act!r}: planner "
            "models gelu, squared_relu and SwiGLU (gated_linear_unit true with silu)"
        )
    window = values.get("model.window_size")
    if window is not None:
        if not (isinstance(window, list) and len(window) == 2 and all(isinstance(w, int) for w in window)):
            raise SpecError(
                f"{where}: model.window_size: expected [LEFT, RIGHT] token counts, got {window!r}"
            )
        add("--window-size", f"{window[0]},{window[1]}", "model.window_size")
    freq = values.get("model.moe_layer_freq")
    if freq is not None:
        if isinstance(freq, list) and all(v in (0, 1) for v in freq):
            add("--moe-layer-freq", pattern_text(tuple(freq)), "model.moe_layer_freq")
        elif isinstance(freq, int) and not isinstance(freq, bool):
            add("--moe-layer-freq", str(freq), "model.moe_layer_freq")
        else:
            raise SpecError(
                f"{where}: model.moe_layer_freq: expected an integer or a list of 0/1, got {freq!r}"
            )
    seq_model, seq_data = values.get("model.seq_length"), values.get("dataset.seq_length")
    if seq_model is not None and seq_data is not None and seq_model != seq_data:
        raise SpecError(
            f"{where}: model.seq_length {seq_model} and dataset.seq_length {seq_data} differ: Megatron-Bridge's "
            "runner sets the model's from the dataset's; give one value"
        )
    seq = seq_data if seq_data is not None else seq_model
    if seq is not None:
        add("--seq-length", _typed(seq, "int", "dataset.seq_length", where), "dataset.seq_length")
        # GPTModelProvider builds the model with max_sequence_length=self.seq_length (no field of its own).
        add("--max-position-embeddings", str(seq), "dataset.seq_length")
    if values.get("model.should_pad_vocab", False) is True and values.get("model.vocab_size") is not None:
        tp = values.get("model.tensor_model_parallel_size", 1)
        divisible = values.get("model.make_vocab_size_divisible_by", 128)
        padded = padded_vocabulary(values["model.vocab_size"], divisible, tp)
        out.append(("--vocab-size", str(padded)))  # replaces the table's (the later value wins)
    vpp = values.get("model.virtual_pipeline_model_parallel_size")
    if vpp is not None:
        _typed(vpp, "int", "model.virtual_pipeline_model_parallel_size", where)
        if values.get("model.pipeline_model_parallel_layout") is None and vpp > 1:
            add(
                "--num-virtual-stages-per-pipeline-rank",
                str(vpp),
                "model.virtual_pipeline_model_parallel_size",
            )
    opt = values.get("optimizer.use_distributed_optimizer", False)
    _typed(opt, "switch", "optimizer.use_distributed_optimizer", where)
    if opt and values.get("ddp.use_distributed_optimizer") is not True:
        # ConfigContainer turns it on for both when either asks (config.py,
        # _validate_and_sync_distributed_optimizer_settings).
        add("--use-distributed-optimizer", None, "optimizer.use_distributed_optimizer")
    comm_target = values.get("comm_overlap._target_")
    if comm_target is not None and comm_target != COMM_OVERLAP_TARGET:
        raise SpecError(
            f"{where}: comm_overlap._target_ {comm_target!r}: planner reads {COMM_OVERLAP_TARGET}"
        )
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        ddp, comm = values.get(f"ddp.{name}"), values.get(f"comm_overlap.{name}")
        if comm is not None and ddp is not None and comm != ddp:
            raise SpecError(
                f"{where}: ddp.{name} {str(ddp).lower()} and comm_overlap.{name} {str(comm).lower()} differ: "
                "CommOverlapConfig writes its value over the DDP config's; give one value"
            )
        if comm is True and ddp is None:
            add(f"--{name.replace('_', '-')}", None, f"comm_overlap.{name}")
    recipe = values.get("mixed_precision", "bf16_mixed")
    if not isinstance(recipe, str) or recipe.replace("-", "_") not in PRECISION_FLAGS:
        raise SpecError(
            f"{where}: mixed_precision {recipe!r}: planner reads the recipe names "
            + ", ".join(PRECISION_FLAGS)
        )
    for flag, value in PRECISION_FLAGS[recipe.replace("-", "_")]:
        add(flag, value, "mixed_precision")
    return out
