"""Keyword dicts, the builtins and the helpers of Megatron-Bridge's older recipes, for
:mod:`.recipe_eval`.

Before v0.4.0 (v0.2.0 to v0.3.x; tag ``v0.3.0``, commit 21b02e0c,
``src/megatron/bridge/recipes/llama/llama3.py``) a recipe was a function of the caller's keywords,
``def llama3_8b_pretrain_config(**user_kwargs)``, that merged its recommended keywords with them
(``combined_kwargs = {**recommended_kwargs, **user_kwargs}``) and passed the result to a common
builder with defaults (``return _llama3_common(**combined_kwargs)``); its fine-tuning recipes
(``llama3_8b_finetune_config``) pop the PEFT scheme from the keywords
(``peft = user_kwargs.pop("peft", "lora")``), fill others (``user_kwargs["finetune_lr"] = ...``),
call ``_llama3_finetune_common(hf_path=..., **user_kwargs)`` and set
``config.peft = default_peft_config(peft)`` (``recipes/utils/finetune_utils.py``: ``LoRA()`` for
``"lora"``, ``DoRA()`` for ``"dora"``, None for None or ``"none"``, a ``ValueError`` for another
name). So this module evaluates dict literals with ``**`` (Python's merge: later keys win), the
``dict`` builtin, the dict methods (``get``, ``pop``, ``setdefault``, ``update``, ``copy``),
``fn(**merged)`` keyword binding (a keyword given twice is Python's ``TypeError``), ``isinstance``
against the builtin types, ``str.lower``/``upper``/``strip``, and the helpers those recipes call,
as Megatron-Bridge v0.3.0 defines them (each cited where it is read)."""

from __future__ import annotations

import ast

from planner.inputs.errors import SpecError
from planner.launch.bridge.recipe_values import Section, Unknown

NOT_BUILTIN = object()
""":func:`builtin_call`'s answer for a call it does not evaluate."""

MUTATING = ("update", "pop", "setdefault", "clear")
"""Dict methods a statement calls for their effect."""

_DICT_METHODS = (*MUTATING, "get", "copy", "keys", "values", "items")
_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "dict": dict, "list": list, "tuple": tuple}
"""The builtin types ``isinstance`` is evaluated against (a config object is none of them)."""

PEFT_CLASSES = {"LoRA": "lora", "DoRA": "dora", "CanonicalLoRA": "canonical_lora"}
"""PEFT config classes (src/megatron/bridge/peft/lora.py, dora.py, canonical_lora.py at v0.3.0),
by the scheme they stand for."""


def literal(ev, node: ast.Dict, scope: dict):
    """A dict display: ``{KEY: VALUE, **OTHER}`` in order, later keys replacing earlier ones."""
    out: dict = {}
    for key_node, value_node in zip(node.keys, node.values):
        if key_node is None:
            other = ev.ev(value_node, scope)
            if not isinstance(other, dict):
                return other if isinstance(other, Unknown) else ev.unknown(node)
            out.update(other)
            continue
        key = ev.ev(key_node, scope)
        if isinstance(key, Unknown):
            return key
        out[key] = ev.ev(value_node, scope)
    return out


def keywords(ev, node: ast.Call, scope: dict):
    """A call's keyword arguments in order, ``**MAPPING`` expanded; an Unknown when a ``**`` value
    is not a known dict of names; SpecError for a keyword given twice (Python's ``TypeError: got
    multiple values for keyword argument``)."""
    out: dict = {}
    for k in node.keywords:
        if k.arg is not None:
            items = {k.arg: ev.ev(k.value, scope)}
        else:
            items = ev.ev(k.value, scope)
            if not isinstance(items, dict) or not all(isinstance(x, str) for x in items):
                return items if isinstance(items, Unknown) else ev.unknown(node)
        for key, value in items.items():
            if key in out:
                raise SpecError(
                    f"{ev.where}: line {node.lineno}: {ev.src(node)}: keyword argument {key!r} is given twice "
                    "(Python's TypeError)"
                )
            out[key] = value
    return out


def builtin_call(ev, node: ast.Call, name: str, kwargs: dict, scope: dict):
    """The value of a call of a builtin, a dict or str method or an older recipe helper;
    :data:`NOT_BUILTIN` for any other call."""
    func = node.func
    if isinstance(func, ast.Attribute):
        base = ev.ev(func.value, scope)
        if isinstance(base, dict) and name in _DICT_METHODS:
            return _dict_method(base, name, [ev.ev(a, scope) for a in node.args], kwargs)
        if isinstance(base, str) and name in ("lower", "upper", "strip") and not node.args:
            return getattr(base, name)()
        return NOT_BUILTIN
    if not isinstance(func, ast.Name) or name in ev.functions:
        return NOT_BUILTIN
    if name == "isinstance" and len(node.args) == 2:
        value, types = ev.ev(node.args[0], scope), _types(node.args[1])
        if types is None or isinstance(value, Unknown):
            return value if isinstance(value, Unknown) else ev.unknown(node)
        return isinstance(value, types)
    args = [ev.ev(a, scope) for a in node.args]
    unknown = next((a for a in args if isinstance(a, Unknown)), None)
    if name == "dict" and len(args) <= 1:
        base = args[0] if args else {}
        return {**base, **kwargs} if isinstance(base, dict) else unknown or ev.unknown(node)
    if name == "default_peft_config" and len(args) == 1:
        return unknown or _default_peft(ev, args[0], kwargs, node)
    if name in PEFT_CLASSES:
        return Section("peft", dict(kwargs), {k: node.lineno for k in kwargs}, PEFT_CLASSES[name])
    if name == "distributed_fused_adam_with_cosine_annealing":
        # recipes/utils/optimizer_utils.py (v0.3.0 and v0.6.0): OptimizerConfig(...,
        # use_distributed_optimizer=True, ...) and a SchedulerConfig, returned as a pair.
        return (
            Section(
                "optimizer", {"use_distributed_optimizer": True}, {"use_distributed_optimizer": node.lineno}
            ),
            Section("scheduler"),
        )
    if name == "default_squad_config" and args:
        # recipes/utils/finetune_utils.py (v0.3.0): HFDatasetConfig(..., seq_length=seq_length, ...).
        return Section("dataset", {"seq_length": args[0]}, {"seq_length": node.lineno})
    return NOT_BUILTIN


def _types(node: ast.expr):
    """The builtin types of ``isinstance``'s second argument (a name or a tuple of names)."""
    names = node.elts if isinstance(node, ast.Tuple) else [node]
    if not all(isinstance(n, ast.Name) and n.id in _TYPES for n in names):
        return None
    return tuple(_TYPES[n.id] for n in names)


def _dict_method(base: dict, name: str, args: list, kwargs: dict):
    """A dict method on a known dict (a missing key without a default: KeyError, which
    :meth:`.recipe_eval.Evaluator.ev` makes unknown)."""
    if name == "update":
        for other in args:
            base.update(other)
        base.update(kwargs)
        return None
    if name == "copy":
        return dict(base)
    if name in ("keys", "values", "items"):
        return list(getattr(base, name)())
    return getattr(base, name)(*args)


def mutate(ev, base: dict, call: ast.Call, scope: dict, doubt) -> None:
    """A statement ``D.update(...)`` / ``D.pop(...)`` / ``D.setdefault(...)`` on a known dict; in a
    branch that cannot be known (``doubt``), each key it may write becomes unknown."""
    if doubt is None:
        ev.call(call, scope)
        return
    kwargs = keywords(ev, call, scope)
    args = [ev.ev(a, scope) for a in call.args]
    keys = set(kwargs) if isinstance(kwargs, dict) else set()
    keys |= {k for a in args if isinstance(a, dict) for k in a}
    if call.func.attr in ("pop", "setdefault") and args and isinstance(args[0], str):
        keys.add(args[0])
    for key in keys:
        base[key] = doubt


def _default_peft(ev, scheme, kwargs: dict, node: ast.Call):
    """``default_peft_config(scheme)`` (recipes/utils/finetune_utils.py, v0.3.0)."""
    if scheme is None or isinstance(scheme, Section):
        return scheme
    if isinstance(scheme, str) and scheme.lower() == "none":
        return None
    if isinstance(scheme, str) and scheme.lower() in ("lora", "dora"):
        return Section("peft", dict(kwargs), {k: node.lineno for k in kwargs}, scheme.lower())
    raise SpecError(
        f"{ev.where}: line {node.lineno}: {ev.src(node)}: PEFT scheme {scheme!r}: Megatron-Bridge's "
        "default_peft_config raises ValueError; allowed: 'lora', 'dora', None"
    )
