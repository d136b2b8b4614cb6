"""The static evaluation behind :mod:`.recipe`: a recipe function's statements run on known values
(literals, arithmetic, the file's constants, parameter defaults, ``if`` on known values, the
``ConfigContainer`` and section constructors, model providers, other functions of the file), each
value not statically determinable kept as an :class:`Unknown` naming its line and expression.
Every table cites the Megatron-Bridge source it was read from."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from planner.inputs.documents import did_you_mean
from planner.inputs.errors import SpecError
from planner.launch.bridge import recipe_dicts
from planner.launch.bridge.config_fields import SECTION_FIELDS
from planner.launch.bridge.importer import PRECISION_FLAGS
from planner.launch.bridge.recipe_values import Section, Unknown

PRETRAIN_COMMON = {
    "train": {"global_batch_size": 32, "micro_batch_size": 2},
    "ddp": {
        "grad_reduce_in_fp32": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "average_in_collective": True,
        "data_parallel_sharding_strategy": "optim_grads_params",
        "use_distributed_optimizer": True,
    },
    "dataset": {"seq_length": 4096},
    "optimizer": {"use_distributed_optimizer": True},
    "tokenizer": {
        "tokenizer_type": "HuggingFaceTokenizer",
        "tokenizer_model": None,
        "use_tokenizer_vocab_size": True,
    },
    "checkpoint": {"ckpt_format": "torch_dist"},
    "dist": {},
}
"""What ``_pretrain_common()`` sets that planning reads (Megatron-Bridge v0.6.0,
src/megatron/bridge/recipes/common.py, ``_pretrain_common``; the optimizer from
recipes/utils/optimizer_utils.py, ``distributed_fused_adam_with_cosine_annealing``:
``use_distributed_optimizer=True``); ``comm_overlap=None``, ``mixed_precision="bf16_mixed"``."""

SECTION_CLASSES = {
    "TrainingConfig": "train",
    "DistributedDataParallelConfig": "ddp",
    "GPTDatasetConfig": "dataset",
    "OptimizerConfig": "optimizer",
    "TokenizerConfig": "tokenizer",
    "CheckpointConfig": "checkpoint",
    "DistributedInitConfig": "dist",
    "CommOverlapConfig": "comm_overlap",
    "LoggerConfig": "logger",
    "RNGConfig": "rng",
    "ValidationConfig": "validation",
    "SchedulerConfig": "scheduler",
    "ProfilingConfig": "profiling",
}
"""A ``ConfigContainer`` section's dataclass (training/config.py; ``CommOverlapConfig``
training/comm_overlap.py, ``DistributedDataParallelConfig`` megatron-core's): built with keywords,
the rest at its defaults."""

PROVIDERS = {
    "Llama2ModelProvider7B": "llama2-7b",
    "Llama2ModelProvider13B": "llama2-13b",
    "Llama2ModelProvider70B": "llama2-70b",
    "Llama3ModelProvider8B": "llama3-8b",
    "Llama3ModelProvider70B": "llama3-70b",
    "Llama31ModelProvider405B": "llama3.1-405b",
    "Qwen3MoEModelProvider30B_A3B": "qwen3-30b-a3b",
    "Qwen3MoEModelProvider235B_A22B": "qwen3-235b-a22b",
}
"""Provider classes of the older recipes and the preset of the same shape (Megatron-Bridge v0.3.0,
src/megatron/bridge/models/llama/llama_provider.py and models/qwen/qwen_provider.py: each class's
dataclass defaults, checked against the preset by tests/test_bridge_recipe.py). ``GPTModelProvider``
names no preset: its keywords are the model."""

MUTATORS = {
    "apply_flex_dispatcher_backend": (
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "moe_shared_expert_overlap",
    ),
}
"""Functions recipes call on ``cfg.model`` and the fields they may write, on the GPU found at run time
(training/flex_dispatcher_backend.py, ``apply_flex_dispatcher_backend``: flex on Hopper, else
alltoall)."""

CONSTANTS = {
    ("megatron.bridge.recipes.utils.tokenizer_utils", "DEFAULT_NULL_TOKENIZER_VOCAB_SIZE"): 32000,
}
"""Constants recipes import, by (module, name) (v0.6.0 src/megatron/bridge/recipes/utils/
tokenizer_utils.py: ``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE: int = 32000``)."""

PRECISION_FIELDS = ("fp8", "fp8_recipe", "fp4", "fp4_recipe", "bf16", "fp16")
"""``MixedPrecisionConfig`` fields that change what the recipe name says (training/mixed_precision.py);
planner reads the precision from the name, so setting one is an error; other fields are warnings."""

MAX_DEPTH = 8


@lru_cache(maxsize=1)
def hf_presets() -> dict[str, str]:
    """Preset by Hugging Face id: every preset whose ``source`` begins with ``ORG/NAME config.json``
    (the file it was read from), graph models left out."""
    from planner.inputs.documents import preset_files

    out: dict[str, str] = {}
    for name, path in sorted(preset_files("planner.presets", "models").items()):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        found = re.match(r"([\w.-]+/[\w.-]+) config\.json", str(doc.get("source", "")))
        if found and doc.get("kind") == "model":
            out.setdefault(found.group(1), name)
    return out


@dataclass
class Container:
    sections: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _HFBridge:
    hf_id: str
    line: int


class _Return(Exception):
    def __init__(self, value) -> None:
        self.value = value


def _pretrain_common(line: int) -> Container:
    c = Container()
    for name, fields in PRETRAIN_COMMON.items():
        c.sections[name] = Section(name, dict(fields), {k: line for k in fields})
    c.sections["mixed_precision"] = Section("mixed_precision", preset="bf16_mixed")
    c.sections["comm_overlap"] = None
    return c


class Evaluator:
    """Statements of one recipe file evaluated on known values (see the module docstring)."""

    def __init__(self, text: str, where: str, tree: ast.Module) -> None:
        self.text, self.where = text, where
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.module: dict = {}
        self.depth = 0
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (node.module, alias.name) in CONSTANTS:
                        self.module[alias.asname or alias.name] = CONSTANTS[(node.module, alias.name)]
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                self.assign(node, self.module, None)

    def src(self, node: ast.AST) -> str:
        text = (ast.get_source_segment(self.text, node) or ast.dump(node)).split("\n")[0]
        return text if len(text) <= 90 else text[:87] + "..."

    def unknown(self, node: ast.AST) -> Unknown:
        return Unknown(node.lineno, self.src(node))

    # -- functions -------------------------------------------------------------------------
    def call_function(self, fn: ast.FunctionDef, args: dict, line: int):
        if self.depth >= MAX_DEPTH:
            raise SpecError(f"{self.where}: line {line}: recipes call each other deeper than {MAX_DEPTH}")
        scope = dict(self.module)
        params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        defaults = [None] * (len(fn.args.posonlyargs + fn.args.args) - len(fn.args.defaults))
        defaults += list(fn.args.defaults) + list(fn.args.kw_defaults)
        extra = {k: v for k, v in args.items() if k not in {p.arg for p in params}}
        if extra and fn.args.kwarg is None:
            raise SpecError(
                f"{self.where}: line {line}: {fn.name}() got an unexpected keyword argument {next(iter(extra))!r} "
                f"(Python's TypeError); its parameters: {', '.join(p.arg for p in params) or 'none'}"
            )
        if fn.args.kwarg is not None:  # def f(**user_kwargs): the keywords no parameter names, a dict
            scope[fn.args.kwarg.arg] = extra
        if fn.args.vararg is not None:
            scope[fn.args.vararg.arg] = []
        for param, default in zip(params, defaults):
            if param.arg in args:
                scope[param.arg] = args[param.arg]
            elif default is not None:
                scope[param.arg] = self.ev(default, self.module)
            else:
                scope[param.arg] = Unknown(param.lineno, f"parameter {param.arg} (no default)")
        self.depth += 1
        try:
            self.block(fn.body, scope, None)
        except _Return as ret:
            return ret.value
        finally:
            self.depth -= 1
        return Unknown(fn.lineno, f"{fn.name}() returns nothing")

    # -- statements ------------------------------------------------------------------------
    def block(self, body: list, scope: dict, doubt: Unknown | None) -> None:
        for node in body:
            self.statement(node, scope, doubt)

    def statement(self, node: ast.stmt, scope: dict, doubt: Unknown | None) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assign(node, scope, doubt)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.call_statement(node.value, scope, doubt)
        elif isinstance(node, ast.Return):
            value = self.ev(node.value, scope) if node.value is not None else None
            raise _Return(doubt if doubt is not None else value)
        elif isinstance(node, ast.If):
            test = self.ev(node.test, scope)
            if isinstance(test, Unknown) or doubt is not None:
                why = doubt or Unknown(node.lineno, "if " + self.src(node.test))
                self.block(node.body, scope, why)
                self.block(node.orelse, scope, why)
            else:
                self.block(node.body if test else node.orelse, scope, None)
        elif isinstance(node, ast.With):
            self.block(node.body, scope, doubt)
        elif isinstance(node, (ast.For, ast.While, ast.Try)):
            why = doubt or Unknown(node.lineno, self.src(node))
            for part in ("body", "orelse", "finalbody"):
                self.block(getattr(node, part, []) or [], scope, why)
            for handler in getattr(node, "handlers", []):
                self.block(handler.body, scope, why)

    def assign(self, node, scope: dict, doubt: Unknown | None) -> None:
        if node.value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.AugAssign):
            value = self.ev(ast.BinOp(node.target, node.op, node.value), scope)
            value = self.unknown(node) if isinstance(value, Unknown) else value
        else:
            value = self.ev(node.value, scope)  # once: ``a = b = X()`` names one object
        for target in targets:
            self.store(target, doubt if doubt is not None else value, scope, node.lineno)

    def store(self, target: ast.expr, value, scope: dict, line: int) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)):
            if len(value) != len(target.elts):
                raise SpecError(
                    f"{self.where}: line {line}: {self.src(target)}: {len(value)} values to unpack"
                )
            for t, v in zip(target.elts, value):
                self.store(t, v, scope, line)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.store(
                    t,
                    Unknown(line, self.src(target)) if not isinstance(value, Unknown) else value,
                    scope,
                    line,
                )
        elif isinstance(target, ast.Subscript):
            base, key = self.ev(target.value, scope), self.ev(target.slice, scope)
            if isinstance(base, dict) and isinstance(key, str):
                base[key] = value
        elif isinstance(target, ast.Attribute):
            base = self.ev(target.value, scope)
            if isinstance(base, Container):
                base.sections[target.attr] = _section_value(target.attr, value)
                base.lines[target.attr] = line
            elif isinstance(base, Section):
                base.fields[target.attr] = value
                base.lines[target.attr] = line
                if base.taint is not None:
                    base.after_taint.add(target.attr)

    def call_statement(self, call: ast.Call, scope: dict, doubt: Unknown | None) -> None:
        """A call for its effect: a function of the file is evaluated; a known mutator marks its
        fields unknown; any other function or method given a config (or called on one) may write
        any field of it."""
        name = _name(call.func)
        if doubt is None and isinstance(call.func, ast.Name) and name in self.functions:
            self.call(call, scope)  # a helper of the file: its assignments land on the same objects
            return
        if isinstance(call.func, ast.Attribute) and name in recipe_dicts.MUTATING:
            base = self.ev(call.func.value, scope)
            if isinstance(base, dict):
                recipe_dicts.mutate(self, base, call, scope, doubt)
                return
        passed = [self.ev(a, scope) for a in [*call.args, *(k.value for k in call.keywords)]]
        if isinstance(call.func, ast.Attribute):
            passed.append(self.ev(call.func.value, scope))
        why = doubt or self.unknown(call)
        for value in passed:
            if isinstance(value, Section) and name in MUTATORS:
                for key in MUTATORS[name]:
                    value.fields[key] = why
                    value.lines[key] = call.lineno
            elif isinstance(value, Section):
                value.taint, value.after_taint = why, set()
            elif isinstance(value, Container):
                for section in value.sections.values():
                    if isinstance(section, Section):
                        section.taint, section.after_taint = why, set()

    # -- expressions -----------------------------------------------------------------------
    def ev(self, node: ast.expr | None, scope: dict):
        if node is None:
            return None
        try:
            return self._ev(node, scope)
        except (ArithmeticError, TypeError, ValueError, KeyError, IndexError):
            return self.unknown(node)

    def _ev(self, node: ast.expr, scope: dict):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return scope[node.id] if node.id in scope else self.unknown(node)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.ev(e, scope) for e in node.elts]
            bad = next((i for i in items if isinstance(i, (Unknown, Section, Container))), None)
            return bad if isinstance(bad, Unknown) else self.unknown(node) if bad else items
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        if isinstance(node, ast.Dict):
            return recipe_dicts.literal(self, node, scope)
        if isinstance(node, ast.Subscript):
            base, key = self.ev(node.value, scope), self.ev(node.slice, scope)
            if isinstance(base, Unknown) or isinstance(key, Unknown):
                return base if isinstance(base, Unknown) else key
            if isinstance(base, (dict, list, tuple, str)):
                return base[key]
            return self.unknown(node)
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value, scope)
            if isinstance(base, Container) and node.attr in base.sections:
                return base.sections[node.attr]
            if isinstance(base, Section) and node.attr in base.fields:
                return base.fields[node.attr]
            return base if isinstance(base, Unknown) else self.unknown(node)
        if isinstance(node, ast.BoolOp):  # short-circuit, as Python: `x is None or x.lower() == ...`
            value = None
            for operand in node.values:
                value = self.ev(operand, scope)
                if isinstance(value, Unknown) or isinstance(node.op, ast.And) != bool(value):
                    return value
            return value
        if isinstance(node, ast.IfExp):
            test = self.ev(node.test, scope)
            return test if isinstance(test, Unknown) else self.ev(node.body if test else node.orelse, scope)
        operands = [node.operand] if isinstance(node, ast.UnaryOp) else []
        operands += [node.left, node.right] if isinstance(node, ast.BinOp) else []
        operands += list(node.values) if isinstance(node, ast.BoolOp) else []
        operands += [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        values = [self.ev(o, scope) for o in operands]
        if not operands or any(isinstance(v, (Unknown, Section, Container)) for v in values):
            return next((v for v in values if isinstance(v, Unknown)), self.unknown(node))
        return _operate(node, values)

    def call(self, node: ast.Call, scope: dict):
        name = _name(node.func)
        kwargs = recipe_dicts.keywords(self, node, scope)
        if isinstance(kwargs, Unknown):
            return kwargs
        known = recipe_dicts.builtin_call(self, node, name, kwargs, scope)
        if known is not recipe_dicts.NOT_BUILTIN:
            return known
        if name == "_pretrain_common" and not node.args:
            return _pretrain_common(node.lineno)
        if name == "ConfigContainer":
            c = Container()
            for key, value in kwargs.items():
                c.sections[key], c.lines[key] = _section_value(key, value), node.lineno
            return c
        if name in SECTION_CLASSES:
            self.check_keywords(name, SECTION_CLASSES[name], kwargs, node)
            return Section(SECTION_CLASSES[name], kwargs, {k: node.lineno for k in kwargs})
        if name in PROVIDERS or name == "GPTModelProvider":
            return Section("model", kwargs, {k: node.lineno for k in kwargs}, PROVIDERS.get(name))
        if name == "from_hf_pretrained" and node.args:
            hf_id = self.ev(node.args[0], scope)
            return hf_id if isinstance(hf_id, Unknown) else _HFBridge(str(hf_id), node.lineno)
        if name == "to_megatron_provider" and isinstance(node.func, ast.Attribute):
            bridge = self.ev(node.func.value, scope)
            if isinstance(bridge, _HFBridge):
                return self.hf_model(bridge, node)
            return bridge if isinstance(bridge, Unknown) else self.unknown(node)
        if name in PRECISION_FLAGS and not node.args and not kwargs:
            return Section("mixed_precision", preset=name)
        if name == "get_mixed_precision_config" and len(node.args) == 1:
            recipe = self.ev(node.args[0], scope)
            return recipe if isinstance(recipe, Unknown) else Section("mixed_precision", preset=recipe)
        if name in self.functions and isinstance(node.func, ast.Name):
            fn = self.functions[name]
            names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            args = dict(zip(names, (self.ev(a, scope) for a in node.args)))
            return self.call_function(fn, {**args, **kwargs}, node.lineno)
        return self.unknown(node)

    def check_keywords(self, cls: str, section: str, kwargs: dict, node: ast.Call) -> None:
        """A keyword the section's dataclass has no field for (:data:`.config_fields.SECTION_FIELDS`):
        the ``TypeError`` its generated ``__init__`` raises, an error naming the line, the field, the
        section and its fields (the closest first). A field set afterwards (``cfg.train.x = v``)
        raises nothing in Python and stays a "not interpreted" warning."""
        known = SECTION_FIELDS.get(section)
        if known is None or known[0] != cls:
            return
        for key in kwargs:
            if key not in known[1]:
                raise SpecError(
                    f"{self.where}: line {node.lineno}: {cls}(..., {key}=...): {key!r} is not a field of {cls} "
                    f"(the {section} section; its __init__ raises TypeError){did_you_mean(key, known[1])}; "
                    f"allowed: {', '.join(sorted(known[1]))}"
                )

    def hf_model(self, bridge: _HFBridge, node: ast.Call) -> Section | Unknown:
        preset = hf_presets().get(bridge.hf_id)
        if preset is None:
            return Unknown(
                node.lineno,
                f"{self.src(node)} (no planner preset is read from {bridge.hf_id}'s config.json; presets by "
                f"id: {', '.join(sorted(hf_presets()))})",
            )
        return Section("model", {}, {}, preset)


def _section_value(name: str, value):
    """A section as assigned: a precision recipe's name becomes its config, so that fields set on
    it afterwards are seen (``cfg.mixed_precision.fp8 = ...``)."""
    if name == "mixed_precision" and isinstance(value, str):
        return Section("mixed_precision", preset=value)
    return value


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _operate(node: ast.expr, values: list):
    """An operator on known values (TypeError for one planner does not evaluate)."""
    if isinstance(node, ast.UnaryOp):
        ops = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a, ast.Not: lambda a: not a}
        return ops[type(node.op)](values[0])
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](*values)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(values) and values[-1]
        return next((v for v in values if v), values[-1])
    if isinstance(node, ast.Compare):
        left = values[0]
        for op, right in zip(node.ops, values[1:]):
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise TypeError(type(node).__name__)
