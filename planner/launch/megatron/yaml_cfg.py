"""Megatron-LM's ``--yaml-cfg FILE`` (megatron/training/yaml_arguments.py, still in the pinned
release, "experimental"): ``parse_args`` parses the command line, then ``load_yaml`` replaces the
whole namespace by the file's (``yaml.safe_load``, nested mappings as namespaces; it prints
"argparse arguments will be ignored"), and ``validate_yaml`` checks it instead of
``validate_args``. So every other flag of the command line is ignored; the file's top-level keys
are the argparse destinations (``micro_batch_size``), its ``model_parallel:`` section the
ModelParallelConfig fields and its ``language_model:`` section the TransformerConfig fields, both
merged into the namespace at the end of ``validate_yaml`` (``SimpleNamespace(**args.__dict__,
**args.model_parallel.__dict__)``: a key both at the top and in a section stops it) with
``num_experts`` taken from ``language_model.num_moe_experts``.

``yaml.safe_load`` does not run the ``!pathex`` resolver the module registers (PyYAML adds an
implicit resolver to the Loader, FullLoader and UnsafeLoader, not SafeLoader), so ``${VAR}`` in a
value is kept as written, not substituted.

What Megatron requires of the file and rejects in it (every key ``validate_yaml`` reads, every
TransformerConfig field, its asserts) is :mod:`.yaml_rules`, applied first.

Each key then becomes the flag planner reads (:func:`read_yaml_cfg`): a destination's flag
(``micro_batch_size`` is ``--micro-batch-size``; a switch true is given, false is not), or, in a
section, the flag of the TransformerConfig field (:data:`RENAMED`, as
``core_transformer_config_from_args`` maps the arguments to the fields; a field true by default is
off by its ``--no-`` switch). A section's field at its TransformerConfig default stands for no flag
(it is what the flag's absence gives); any other key with no flag is reported, unless null or
false.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError
from planner.inputs.validation import printable, read_text_capped
from planner.launch.megatron.arguments import MODELLED
from planner.launch.megatron.flags import ACCEPTED
from planner.launch.megatron.paths import joined
from planner.launch.megatron.yaml_fields import MLA_CONFIG, NOT_LITERAL, TRANSFORMER_CONFIG
from planner.launch.megatron.yaml_rules import SECTIONS, check_yaml_args

QUIET = {
    "layernorm_epsilon",  # --norm-epsilon, no cost
    "params_dtype",  # set by validate_yaml from bf16/fp16
    "pipeline_dtype",  # core_transformer_config_from_yaml sets it to params_dtype
    "batch_p2p_comm",  # set from overlap_p2p_comm
    "deallocate_pipeline_outputs",  # set true
    "virtual_pipeline_model_parallel_size",  # validate_yaml sets it (below)
    "transformer_pipeline_model_parallel_size",
    "variable_seq_lengths",  # validate_yaml sets it false
    "bias_activation_fusion",  # kernel fusions: no cost (as --no-bias-*-fusion are ignored)
    "bias_swiglu_fusion",
    "persist_layer_norm",
}
"""Section fields ``validate_yaml`` or ``core_transformer_config_from_yaml`` overwrite, or that
change no cost: read as nothing. ``virtual_pipeline_model_parallel_size`` is computed from the
top-level ``num_layers_per_virtual_pipeline_stage`` whatever the file says."""

NOT_READ = {"num_virtual_stages_per_pipeline_rank"}
"""Destinations the YAML path never reads: ``validate_yaml`` sets the virtual pipeline size from
``num_layers_per_virtual_pipeline_stage`` alone."""

QUIET_TOP = {"weight_decay_incr_style"}
"""Top-level keys ``validate_yaml`` requires that change no cost (the weight-decay schedule)."""


def _activation(value, key: str, at: str) -> list[str]:
    if value == "swiglu":
        return ["--swiglu"]
    if value == "squaredrelu":
        return ["--squared-relu"]
    if value == "gelu":
        return []
    raise SpecError(
        f"{at}: {key} is {value!r}; Megatron's core_transformer_config_from_yaml asserts swiglu, "
        "squaredrelu or gelu"
    )


def _valued(flag: str):
    return lambda v, k, at: [] if v is None else [flag, str(v)]


def _switch(flag: str, when: bool):
    return lambda v, k, at: [flag] if bool(v) is when else []


RENAMED = {
    "num_moe_experts": _valued("--num-experts"),
    "activation_func": _activation,
    "num_query_groups": lambda v, k, at: (
        [] if v is None else ["--group-query-attention", "--num-query-groups", str(v)]
    ),
    "fp8": lambda v, k, at: [] if v in (None, False) else ["--fp8-format", str(v)],
    "fp4": lambda v, k, at: [] if v in (None, False) else ["--fp4-format", str(v)],
    "add_bias_linear": _switch("--disable-bias-linear", False),
    "num_layers_in_first_pipeline_stage": _valued("--decoder-first-pipeline-num-layers"),
    "num_layers_in_last_pipeline_stage": _valued("--decoder-last-pipeline-num-layers"),
    "fp8_param": _switch("--fp8-param-gather", True),
    "fp4_param": _switch("--fp4-param-gather", True),
}
"""TransformerConfig / ModelParallelConfig fields (in either section: the config takes both) whose
flag has another name, as megatron/training/argument_utils.py ``core_transformer_config_from_args``
maps the arguments to the fields (``num_moe_experts = args.num_experts``,
``num_layers_in_first_pipeline_stage = args.decoder_first_pipeline_num_layers``, ``fp8_param =
args.fp8_param_gather``) and the fields' ``argparse_meta`` renames them (``add_bias_linear`` is
``--disable-bias-linear``, ``fp8`` ``--fp8-format``): the flags they stand for. A false or null
``add_bias_linear`` is no bias (TransformerConfig tests its truth). TransformerConfig takes
``num_query_groups`` as written, so it needs no ``group_query_attention``."""


@dataclass(frozen=True, slots=True)
class YamlConfig:
    """A ``--yaml-cfg`` file read: the flags its keys stand for, with the key and line of each."""

    file: str
    """The file as the launch names it, for messages."""
    line: int
    """The launch's line with ``--yaml-cfg``."""
    words: list = field(default_factory=list)
    """Flag words with the file's line of their key."""
    flag_keys: dict = field(default_factory=dict)
    """The key path each flag came from."""
    key_lines: dict = field(default_factory=dict)
    """Line (1-based) of each key path."""
    unknown: list = field(default_factory=list)
    """Key paths with no flag planner reads (warnings)."""
    overridden: tuple = ()
    """The command line's flags besides ``--yaml-cfg``, which Megatron ignores."""
    notes: tuple = ()
    """What ``validate_yaml`` changed (a parallel size lowered to the world size), with the line."""
    stop: str | None = None
    """The first of Megatron's rules the file breaks, where it stops (:mod:`.yaml_rules`)."""

    def at(self, key: str) -> str:
        return f"{self.file}: line {self.key_lines.get(key, '?')}"


def _key_lines(root) -> dict:
    lines: dict = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for k, v in root.value:
        lines[str(k.value)] = k.start_mark.line + 1
        if k.value in SECTIONS and isinstance(v, yaml.MappingNode):
            for k2, _ in v.value:
                lines[f"{k.value}.{k2.value}"] = k2.start_mark.line + 1
    return lines


def read_yaml_cfg(
    value: str,
    line: int,
    where: str,
    pwd: str | None,
    root: str | None,
    overridden: tuple = (),
    world_size: int | None = None,
    env: dict | None = None,
) -> YamlConfig:
    """The ``--yaml-cfg`` file ``value`` of the launch ``where`` (its line ``line``), found as the
    training process opens it: from the working directory the command runs in (``pwd``, the
    script's directory unless it moved), inside the script's directory ``root``; judged by
    Megatron's rules (:func:`.yaml_rules.check_yaml_args`) on ``world_size`` GPUs with the launch's
    environment ``env`` (None: not known), the first rule it breaks kept as :attr:`YamlConfig.stop`.
    SpecError (one line naming the file, its line and the key) for a file planner cannot read."""
    here = f"{where}: line {line}: --yaml-cfg {printable(value)}"
    if root is None:
        raise SpecError(
            f"{here}: planner reads the file beside the launch, and this text was given without its file"
        )
    full = joined(pwd, value)
    if full is None:
        raise SpecError(f"{here}: a relative path is found from the working directory, which is unknown here")
    if os.path.commonpath([os.path.realpath(full), root]) != root:
        raise SpecError(f"{here}: planner reads only files inside the launch's directory {printable(root)}")
    if not os.path.isfile(full):
        raise SpecError(f"{here}: {printable(full)} does not exist")
    text = read_text_capped(Path(full))
    shown = printable(value)
    try:
        node = yaml.compose(text)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{shown}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{shown}: expected a mapping of Megatron arguments at the top")
    lines = _key_lines(node)
    checked = check_yaml_args(doc, shown, lines, world_size, env)
    cfg = YamlConfig(
        shown,
        line,
        key_lines=lines,
        overridden=tuple(overridden),
        notes=tuple(checked.notes),
        stop=checked.stop,
    )
    values: dict = {}
    for key, v in doc.items():
        if key in SECTIONS:
            for k2, v2 in v.items():
                values[f"{key}.{k2}"] = checked.changed.get(f"{key}.{k2}", v2)
        else:
            values[str(key)] = v
    activation = {**doc["model_parallel"], **doc["language_model"]}.get("activation_func")
    for key, v in values.items():
        _add(cfg, key, v, activation)
    return cfg


def _at_default(name: str, value) -> bool:
    """A TransformerConfig field given its own default."""
    default = TRANSFORMER_CONFIG.get(name, MLA_CONFIG.get(name, NOT_LITERAL))
    return default is not NOT_LITERAL and type(value) is type(default) and value == default


def _section_words(name: str, value, key: str, at: str, activation) -> list | None:
    """The flags a section's TransformerConfig / ModelParallelConfig field stands for; None when
    the field has no flag planner reads. A switch ``--no-NAME`` (a destination true unless given)
    is given for a false or null field, whatever the field's own default: the file's value is what
    the config receives. A field at its TransformerConfig default stands for nothing unless
    planner models its flag (whose absence would give the parser's default, which may differ:
    ``kv_lora_rank`` is 512 in MLATransformerConfig, 32 in the parser)."""
    if name in QUIET or (name == "gated_linear_unit" and activation == "swiglu"):
        return []
    if name in RENAMED:
        return RENAMED[name](value, key, at)
    flag, off = f"--{name.replace('_', '-')}", f"--no-{name.replace('_', '-')}"
    if ACCEPTED.get(off) == "switch" and flag not in ACCEPTED:
        words = [] if value else [off]
    else:
        words = _flag_words(name, value, key, at)
    if _at_default(name, value) and (
        value in (None, False, [], "") or not any(w in MODELLED for w in words or ())
    ):
        return []
    return words


def _flag_words(name: str, value, key: str, at: str) -> list | None:
    """The words of the argparse destination ``name`` given ``value``; None when it has no flag."""
    if name in NOT_READ:
        return None
    flag = "--" + name.replace("_", "-")
    kind = ACCEPTED.get(flag)
    if kind is None or flag == "--yaml-cfg":
        return None
    if kind == "switch":
        if value is not None and not isinstance(value, bool):
            raise SpecError(f"{at}: {key} expects true or false, got {value!r}")
        return [flag] if value else []
    if value is None:
        return []
    if isinstance(value, (dict, list)) and kind == "value":
        raise SpecError(f"{at}: {key} expects one value, got {value!r}")
    if isinstance(value, list):
        return [flag, *(str(v) for v in value)]
    if isinstance(value, str) and "${" in value:
        raise SpecError(
            f"{at}: {key} is {value!r}: Megatron reads the file with yaml.safe_load, which does not "
            "substitute environment variables (its !pathex resolver is not on the safe loader)"
        )
    return [flag, str(value).lower() if isinstance(value, bool) else str(value)]


def _add(cfg: YamlConfig, key: str, value, activation) -> None:
    at = cfg.at(key)
    line = cfg.key_lines.get(key, 0)
    section, _, name = key.rpartition(".")
    if section:
        words = _section_words(name, value, key, at, activation)
    elif name in QUIET_TOP:
        return
    else:
        words = _flag_words(name, value, key, at)
    if words is None:
        if value is not None and value is not False:
            cfg.unknown.append(key)
        return
    for w in words:
        if w.startswith("--"):
            cfg.flag_keys.setdefault(w, key)
        cfg.words.append((w, line))
