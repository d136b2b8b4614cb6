"""Megatron-Bridge recipe import: a recipe's Python (a function returning a ``ConfigContainer``)
read with :mod:`ast`, never imported or run, into the sections the override import maps to a plan
(:func:`.importer.read_sections`; one mapping for both).

Read as Megatron-Bridge v0.6.0 (tag ``v0.6.0``, commit 51885cf1) writes its recipes
(``src/megatron/bridge/recipes/<family>/h100/*.py``): ``cfg = _pretrain_common()`` (the cited
:data:`PRETRAIN_COMMON`), ``cfg.model = AutoBridge.from_hf_pretrained(ID).to_megatron_provider()``
(the preset whose source is that Hugging Face id, :func:`.recipe_eval.hf_presets`) or a provider class
(:data:`.recipe_eval.PROVIDERS`), then ``cfg.<section>.<field> = value``; the older form too (v0.2-v0.3: keyword
parameters with defaults, ``ConfigContainer(model=..., train=TrainingConfig(...), ...)``, and
``**user_kwargs`` merged into a common builder's keywords, :mod:`.recipe_dicts`; a PEFT recipe's
LoRA becomes planner's LoRA job, :func:`peft_job`). What is
statically determinable is evaluated: literals, arithmetic, the file's constants, the function's
parameter defaults (``--set NAME=VALUE`` replaces one), ``if`` on those values, another recipe of
the same file. A value the plan needs that is not (a call whose result matters, a branch on a
runtime value, a config passed to a function that may change it) is a one-line error naming the
file, the line and the expression; a Bridge override ``--set section.field=VALUE`` (applied after
the recipe, as ``process_config_with_overrides`` applies a run script's) supplies it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import yaml

from planner.inputs.errors import SpecError
from planner.launch.bridge.export import FIELDS, architecture_fields
from planner.launch.bridge.importer import (
    CONTAINER_SECTIONS,
    IGNORED_SECTIONS,
    PRECISION_FLAGS,
    SPECIAL,
    BridgeImported,
    read_sections,
)
from planner.launch.bridge.peft import peft_job
from planner.launch.bridge.recipe_eval import PRECISION_FIELDS, Container, Evaluator, Section, Unknown
from planner.launch.megatron.tokenizers import known_vocabulary

# -- the recipe read to sections ------------------------------------------------------------

NEEDED = {p for p, _, _ in FIELDS} | SPECIAL
"""The ``section.field`` paths the plan is read from (:data:`.export.FIELDS` and the import's
:data:`.importer.SPECIAL`)."""
VOCABULARY = ("tokenizer.tokenizer_type", "tokenizer.tokenizer_model", "tokenizer.vocab_size")


def find_recipe(tree: ast.Module, where: str, name: str | None) -> ast.FunctionDef:
    """The recipe function: ``name``, else the file's only ``*_config`` function."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    configs = sorted(n for n in functions if n.endswith("_config"))
    if name is not None:
        if name not in functions:
            raise SpecError(
                f"{where}: no function {name!r} (--recipe); recipe functions: {', '.join(configs) or 'none'}"
            )
        return functions[name]
    if len(configs) != 1:
        found = (
            f"{len(configs)} *_config functions ({', '.join(configs)})" if configs else "no *_config function"
        )
        raise SpecError(f"{where}: {found}: name the recipe with --recipe NAME")
    return functions[configs[0]]


def parse_overrides(items: list[str] | tuple[str, ...], where: str) -> tuple[dict, dict]:
    """``--set`` items of a recipe: ``section.field=VALUE`` Bridge overrides (the value read as
    YAML, as OmegaConf's dotlist reads it) and ``NAME=VALUE`` recipe parameters. SpecError naming
    the key and the allowed sections for another key."""
    fields: dict = {}
    params: dict = {}
    for item in items:
        key, eq, text = item.partition("=")
        try:
            value = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            value = text
        parts = key.split(".")
        if not eq or not all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in parts) or len(parts) > 2:
            raise SpecError(
                f"{where}: --set {item!r}: expected section.field=VALUE (a Megatron-Bridge override), "
                "mixed_precision=NAME or PARAMETER=VALUE (a recipe parameter)"
            )
        if len(parts) == 2 or key == "mixed_precision":
            if parts[0] not in CONTAINER_SECTIONS:
                raise SpecError(
                    f"{where}: --set {key}: {parts[0]!r} is not a ConfigContainer section; allowed: "
                    + ", ".join(CONTAINER_SECTIONS)
                )
            fields[key] = value
        else:
            params[key] = value
    return fields, params


def _with_overrides(c: Container, overrides: dict) -> None:
    for key, value in overrides.items():
        if key == "mixed_precision":
            c.sections[key] = value
            continue
        section, name = key.split(".")
        body = c.sections.get(section)
        if not isinstance(body, Section):
            body = c.sections[section] = Section(section)
        body.fields[name] = value
        body.lines.pop(name, None)
        body.after_taint.add(name)


def _error(where: str, path: str, u: Unknown) -> SpecError:
    return SpecError(
        f"{where}: line {u.line}: {u.text}: not statically evaluable, and planner reads {path} from it; "
        f"give --set {path}=VALUE"
    )


def _vocabulary(model: dict, tokenizer: dict, where: str, line: int | None, vocab_size: int | None) -> None:
    """The model's vocabulary as Bridge's setup fixes it (training/setup.py,
    ``_validate_and_set_vocab_size``): the tokenizer's, padded, when ``use_tokenizer_vocab_size``
    (``_pretrain_common`` sets it) or the model gives none; else the model's."""
    if not (tokenizer.get("use_tokenizer_vocab_size") or model.get("vocab_size") is None):
        return
    size = vocab_size
    kind, name = tokenizer.get("tokenizer_type"), tokenizer.get("tokenizer_model")
    if size is None and kind == "NullTokenizer":
        size = tokenizer.get("vocab_size")  # megatron-core NullTokenizer: vocab_size as given
    elif size is None:
        known = known_vocabulary(kind, name if isinstance(name, str) else None)
        size = known[0] if known else None
    if not isinstance(size, int) or isinstance(size, bool):
        at = f"line {line}: " if line else ""
        raise SpecError(
            f"{where}: {at}the vocabulary is the tokenizer's ({kind} {name!r}), which planner does not know; "
            "give --vocab-size N or --set tokenizer.vocab_size=N with tokenizer.tokenizer_type=NullTokenizer"
        )
    model["vocab_size"], model["should_pad_vocab"] = size, True


def container_sections(c: Container, where: str, vocab_size: int | None) -> tuple[dict, dict]:
    """(override document, line of each ``section.field``) of an evaluated recipe; SpecError for
    the first value the plan needs that is not known."""
    doc: dict = {}
    lines: dict = {}
    for name in CONTAINER_SECTIONS:
        body = c.sections.get(name)
        if name == "mixed_precision":
            _precision(body, doc, lines, where, c.lines.get(name))
            continue
        if name == "peft":  # the fine-tuning fields of the job (peft_job)
            continue
        if isinstance(body, Unknown):
            if name in IGNORED_SECTIONS and name != "tokenizer":
                continue
            raise _error(where, name, body)
        if not isinstance(body, Section):
            continue
        fields = {}
        if name == "model":
            fields = architecture_fields(_load_preset(body.preset)) if body.preset else {}
        for key, value in body.fields.items():
            path = f"{name}.{key}"
            if isinstance(value, Unknown):
                if path in NEEDED or path in VOCABULARY:
                    raise _error(where, path, value)
                value = None
            fields[key] = value
            if body.lines.get(key):
                lines[path] = body.lines[key]
        if body.taint is not None:
            for path in sorted(NEEDED | set(VOCABULARY)):
                if path.startswith(name + ".") and path.split(".")[1] not in body.after_taint:
                    raise _error(where, path, body.taint)
        if name == "comm_overlap":
            fields = {"_target_": "megatron.bridge.training.comm_overlap.CommOverlapConfig", **fields}
        doc[name] = fields
    if "model" not in doc:
        raise SpecError(f"{where}: the recipe sets no model (cfg.model); planner reads the model from it")
    doc["peft"] = peft_job(c.sections.get("peft"), where, c.lines.get("peft"))
    tokenizer = doc.pop("tokenizer", {})
    _vocabulary(doc["model"], tokenizer, where, lines.get("tokenizer.vocab_size"), vocab_size)
    return doc, lines


def _precision(body, doc: dict, lines: dict, where: str, line: int | None) -> None:
    """``mixed_precision``: the recipe name (a string, or a recipe function's config with fields
    set on it: :data:`PRECISION_FIELDS` an error, the others kept for the not-interpreted warning)."""
    if isinstance(body, Unknown):
        raise _error(where, "mixed_precision", body)
    if body is None:
        return
    if isinstance(body, Section):
        for key, value in body.fields.items():
            if key in PRECISION_FIELDS:
                raise SpecError(
                    f"{where}: line {body.lines.get(key)}: mixed_precision.{key}: planner reads the precision "
                    f"from the recipe name ({body.preset}); give --set mixed_precision=NAME of "
                    + ", ".join(PRECISION_FLAGS)
                )
            lines[f"mixed_precision.{key}"] = body.lines.get(key)
        doc["mixed_precision.fields"] = sorted(body.fields)
        body = body.preset
    doc["mixed_precision"], lines["mixed_precision"] = body, line


def _load_preset(name: str):
    from planner.inputs.models import load_model

    return load_model(name)


def evaluate_recipe(
    text: str, where: str, recipe: str | None = None, params: dict | None = None
) -> Container:
    """The ``ConfigContainer`` the recipe function returns, as far as it is statically known."""
    try:
        tree = ast.parse(text, filename=where)
    except SyntaxError as exc:
        raise SpecError(f"{where}: line {exc.lineno}: not valid Python ({exc.msg})") from None
    fn = find_recipe(tree, where, recipe)
    names = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for key in params or {}:
        if (
            key not in names and fn.args.kwarg is None
        ):  # **user_kwargs takes any keyword (checked where bound)
            raise SpecError(
                f"{where}: --set {key}: not a parameter of {fn.name}; its parameters: "
                + (", ".join(sorted(names)) or "none")
            )
    result = Evaluator(text, where, tree).call_function(fn, dict(params or {}), fn.lineno)
    if isinstance(result, Unknown):
        raise SpecError(
            f"{where}: line {result.line}: {result.text}: not statically evaluable, and {fn.name} returns it"
        )
    if not isinstance(result, Container):
        raise SpecError(f"{where}: {fn.name} returns {type(result).__name__}, not a ConfigContainer")
    return result


def is_recipe_file(path: str) -> bool:
    """Whether ``path`` is a Megatron-Bridge recipe: a ``.py`` file that imports ``megatron.bridge``
    and names ``ConfigContainer`` (a file that cannot be read is not; check reports it)."""
    from pathlib import Path

    from planner.inputs.validation import read_text_capped

    if Path(path).suffix != ".py" or not Path(path).is_file():
        return False
    try:
        text = read_text_capped(Path(path), expected="a Python recipe")
    except SpecError:
        return False
    return "megatron.bridge" in text and "ConfigContainer" in text


def read_recipe(
    text: str,
    where: str,
    recipe: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    world_size: int | None = None,
    vocab_size: int | None = None,
) -> BridgeImported:
    """A recipe file read to the Megatron launch it stands for (the module docstring); ``sets``
    the ``--set`` items (:func:`parse_overrides`). SpecError (one line) for what cannot be read."""
    overrides, params = parse_overrides(sets, where)
    container = evaluate_recipe(text, where, recipe, params)
    _with_overrides(container, overrides)
    doc, lines = container_sections(container, where, vocab_size)
    precision_fields = [f"mixed_precision.{k}" for k in doc.pop("mixed_precision.fields", [])]
    finetune = doc.pop("peft")
    note = (
        "fields the recipe does not set take megatron-core's defaults (its model's architecture the "
        "preset of the model it names)"
    )
    read = read_sections(doc, where, lines, world_size, None, note)
    if finetune:
        read = replace(read, imported=replace(read.imported, job=replace(read.imported.job, **finetune)))
    return replace(read, unknown=(*read.unknown, *precision_fields))
