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

Each key becomes the flag planner reads (:func:`read_yaml_cfg`): a destination's flag
(``micro_batch_size`` is ``--micro-batch-size``; a switch true is given, false is not), or one of
the TransformerConfig names of :data:`RENAMED`; a key with no flag is reported, unless null or
false (a field left unset or off).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError
from planner.inputs.validation import printable, read_text_capped
from planner.launch.megatron.flags import ACCEPTED
from planner.launch.megatron.paths import joined

SECTIONS = ("model_parallel", "language_model")
"""The sections ``validate_yaml`` reads (``args.model_parallel.tensor_model_parallel_size``,
``args.language_model.num_layers``): both are required."""

QUIET = {
    "language_model.layernorm_epsilon",  # --norm-epsilon, no cost
    "model_parallel.params_dtype",  # set by validate_yaml from bf16/fp16
    "model_parallel.pipeline_dtype",
    "model_parallel.virtual_pipeline_model_parallel_size",  # validate_yaml sets it (below)
    "model_parallel.transformer_pipeline_model_parallel_size",
}
"""Keys ``validate_yaml`` overwrites or that change no cost: read as nothing.
``virtual_pipeline_model_parallel_size`` is computed from the top-level
``num_layers_per_virtual_pipeline_stage`` whatever the file says."""

NOT_READ = {"num_virtual_stages_per_pipeline_rank"}
"""Destinations the YAML path never reads: ``validate_yaml`` sets the virtual pipeline size from
``num_layers_per_virtual_pipeline_stage`` alone."""


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


RENAMED = {
    "language_model.num_moe_experts": lambda v, k, at: [] if v is None else ["--num-experts", str(v)],
    "language_model.activation_func": _activation,
    "language_model.num_query_groups": lambda v, k, at: (
        [] if v is None else ["--group-query-attention", "--num-query-groups", str(v)]
    ),
    "language_model.fp8": lambda v, k, at: [] if v in (None, False) else ["--fp8-format", str(v)],
    "language_model.fp4": lambda v, k, at: [] if v in (None, False) else ["--fp4-format", str(v)],
    "language_model.add_bias_linear": lambda v, k, at: ["--disable-bias-linear"] if v is False else [],
    "model_parallel.gradient_accumulation_fusion": lambda v, k, at: (
        ["--no-gradient-accumulation-fusion"] if v is False else []
    ),
    "language_model.persist_layer_norm": lambda v, k, at: ["--no-persist-layer-norm"] if v is False else [],
}
"""TransformerConfig / ModelParallelConfig fields whose flag has another name (the parser's
``--num-experts``, ``--swiglu``, ``--disable-bias-linear`` storing ``add_bias_linear`` false, ...),
as ``validate_yaml`` and ``core_transformer_config_from_yaml`` read them: the flags they stand
for. TransformerConfig takes ``num_query_groups`` as written, so it needs no
``group_query_attention``."""


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
    value: str, line: int, where: str, pwd: str | None, root: str | None, overridden: tuple = ()
) -> YamlConfig:
    """The ``--yaml-cfg`` file ``value`` of the launch ``where`` (its line ``line``), found as the
    training process opens it: from the working directory the command runs in (``pwd``, the
    script's directory unless it moved), inside the script's directory ``root``. SpecError (one
    line naming the file, its line and the key) for a file planner cannot read or that
    ``validate_yaml`` would stop on."""
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
    cfg = YamlConfig(shown, line, key_lines=_key_lines(node), overridden=tuple(overridden))
    for section in SECTIONS:
        if not isinstance(doc.get(section), dict):
            raise SpecError(
                f"{shown}: no {section} section (a mapping); Megatron's validate_yaml reads args.{section}"
            )
    values: dict = {}
    for key, v in doc.items():
        if key in SECTIONS:
            for k2, v2 in v.items():
                if k2 in doc:
                    raise SpecError(
                        f"{cfg.at(f'{key}.{k2}')}: {key}.{k2} is also a top-level key; Megatron's "
                        "validate_yaml merges the sections into the arguments and stops on a name given twice"
                    )
                values[f"{key}.{k2}"] = v2
        else:
            values[str(key)] = v
    for key, v in values.items():
        _add(cfg, key, v)
    return cfg


def _add(cfg: YamlConfig, key: str, value) -> None:
    at = cfg.at(key)
    line = cfg.key_lines.get(key, 0)
    name = key.rsplit(".", 1)[-1]
    if key in QUIET:
        return
    if key in RENAMED:
        words = RENAMED[key](value, key, at)
    elif name in NOT_READ:
        words = None
    else:
        flag = "--" + name.replace("_", "-")
        kind = ACCEPTED.get(flag)
        if kind is None or flag == "--yaml-cfg":
            words = None
        elif kind == "switch":
            if value is not None and not isinstance(value, bool):
                raise SpecError(f"{at}: {key} expects true or false, got {value!r}")
            words = [flag] if value else []
        elif value is None:
            words = []
        elif isinstance(value, (dict, list)) and kind == "value":
            raise SpecError(f"{at}: {key} expects one value, got {value!r}")
        elif isinstance(value, list):
            words = [flag, *(str(v) for v in value)]
        else:
            if isinstance(value, str) and "${" in value:
                raise SpecError(
                    f"{at}: {key} is {value!r}: Megatron reads the file with yaml.safe_load, which does not "
                    "substitute environment variables (its !pathex resolver is not on the safe loader)"
                )
            words = [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    if words is None:
        if value is not None and value is not False:
            cfg.unknown.append(key)
        return
    for w in words:
        if w.startswith("--"):
            cfg.flag_keys.setdefault(w, key)
        cfg.words.append((w, line))
