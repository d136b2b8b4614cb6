"""The YAML a launch script reads with ``yq`` and ``envsubst``, answered without running either, as
the Megatron MoE Model Zoo's ``sbatch_benchmarking.sh`` uses them: the model's YAML has an
``ENV_VARS`` and a ``MODEL_ARGS`` section (``--num-layers: 32``, ``--use-distributed-optimizer:
true``, ``--tensor-model-parallel-size: ${TP}``); the script writes it through ``envsubst < F >
F.tmp`` and turns ``MODEL_ARGS`` into the training flags with

    $(yq '... comments="" | .MODEL_ARGS | to_entries | .[] | select(.value != "false") |
        with(select(.value == "true"); .value = "") | [.key + " " + .value] | join("")' F | tr '\\n' ' ')

and reads one value with ``$(yq '.MODEL_ARGS."--max-position-embeddings"' F)``.

Read here (mikefarah yq v4, the ``yq`` whose language the Zoo writes: ``to_entries``, ``with``,
``... comments=""``): ``yq [e|eval] [-r|-M|-e] 'PROGRAM' FILE``, PROGRAM a pipeline of a path
(``.a.b``, ``.a."--key"``, ``.a["--key"]``), ``... comments=""`` (comments dropped: no value
changes), ``to_entries``, ``.[]``, ``select(.key|.value ==|!= "S")``, ``with(select(...); .value =
"S")``, ``[.key + "S" + .value] | join("S")``; each result printed on its own line as yq prints
a scalar (its text as written in the file, a quoted string unquoted, ``null`` for a missing key).
yq's ``==`` compares a scalar's text whatever its tag, so the boolean ``true`` equals ``"true"``
(the Zoo relies on it). Then ``| tr 'A' 'B'`` of single characters. Any other program or command
gives None: the substitution is not evaluated, and a flag needing it is an error naming it.
"""

from __future__ import annotations

import re

import yaml

from planner.inputs.errors import SpecError

NULL = "null"


class _Null:
    """A missing key or a YAML null: yq prints ``null``."""


def _scalar_text(node) -> str | None:
    """A scalar node's text as yq prints it (None for a mapping or a sequence)."""
    if isinstance(node, _Null) or node is None:
        return NULL
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:null" and node.style is None and node.value in ("", "~", "null"):
            return NULL
        return node.value
    if isinstance(node, str):
        return node
    return None


_PATH_PART = re.compile(r'\.(?:([A-Za-z_][\w-]*)|"((?:[^"\\]|\\.)*)"|\["((?:[^"\\]|\\.)*)"\])')


def _path(expr: str) -> list[str] | None:
    """The keys of a path expression ``.a.b."--c"`` (None when ``expr`` is not one; ``.`` is [])."""
    if expr == ".":
        return []
    keys, i = [], 0
    while i < len(expr):
        m = _PATH_PART.match(expr, i)
        if not m:
            # ."x" and .["x"] after a key: the dot of the second part may be left out (.a["x"])
            m2 = re.compile(r'\["((?:[^"\\]|\\.)*)"\]').match(expr, i) if keys else None
            if not m2:
                return None
            keys.append(m2.group(1))
            i = m2.end()
            continue
        keys.append(next(g for g in m.groups() if g is not None))
        i = m.end()
    return keys


def _get(node, key: str):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
        return _Null()
    if isinstance(node, _Null) or (isinstance(node, yaml.ScalarNode) and _scalar_text(node) == NULL):
        return _Null()
    raise _Refused(f"yq cannot index a {_kind(node)} with {key!r}")


def _kind(node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "sequence"
    return "scalar"


class _Refused(Exception):
    """A program planner reads but yq would stop on (an error yq itself prints)."""


_COMPARE = re.compile(r'^select\(\s*\.(key|value)\s*(==|!=)\s*"([^"]*)"\s*\)$')
_WITH = re.compile(
    r'^with\(\s*select\(\s*\.(key|value)\s*(==|!=)\s*"([^"]*)"\s*\)\s*;\s*\.value\s*=\s*"([^"]*)"\s*\)$'
)
_CONCAT = re.compile(r"^\[(.*)\]$")
_JOIN = re.compile(r'^join\(\s*"([^"]*)"\s*\)$')


def _stages(program: str) -> list[str] | None:
    """The program split at its top-level ``|`` (outside quotes and brackets)."""
    out, buf, depth, quote = [], "", 0, None
    for ch in program:
        if quote:
            quote = None if ch == quote else quote
        elif ch == '"':
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(buf.strip())
            buf = ""
            continue
        buf += ch
    if quote or depth:
        return None
    out.append(buf.strip())
    return out


PLACEHOLDER = re.compile("\u27e6([0-9a-f]*)\u27e7")
"""What :func:`envsubst` writes for a variable the script does not determine: the unresolved
marker of :mod:`.shell`, hex-encoded between brackets YAML takes in a plain scalar; given back as
the marker in yq's output (:func:`restore`)."""


def placeholder(marker: str) -> str:
    return "\u27e6" + marker.encode("utf-8").hex() + "\u27e7"


def restore(text: str) -> str:
    """``text`` with each :data:`PLACEHOLDER` turned back into its marker."""
    return PLACEHOLDER.sub(lambda m: bytes.fromhex(m.group(1)).decode("utf-8"), text)


class Undetermined(SpecError):
    """A yq ``select`` or ``with`` on a value that needs a variable the script does not determine."""

    def __init__(self, key: str, marker: str):
        super().__init__(key)
        self.key, self.marker = key, marker


def _matches(entry: tuple, field: str, op: str, text: str) -> bool:
    value = _scalar_text(entry[0] if field == "key" else entry[1])
    if value is None:
        return op == "!="  # a mapping or sequence equals no string
    m = PLACEHOLDER.search(value)
    if m:
        raise Undetermined(_scalar_text(entry[0]) or "?", restore(m.group(0)))
    return (value == text) == (op == "==")


def evaluate(program: str, text: str) -> list[str] | None:
    """The lines yq prints for ``program`` on the YAML ``text`` (None: a program not read here);
    SpecError (one line) for a file that is not YAML or a result yq would print as YAML."""
    stages = _stages(program.strip())
    if not stages:
        return None
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML ({str(exc).splitlines()[0]})") from None
    items: list = [root if root is not None else _Null()]
    k = 0
    try:
        while k < len(stages):
            stage = stages[k]
            if re.fullmatch(r'\.\.\.\s+comments\s*=\s*""', stage):
                pass
            elif stage == "to_entries":
                out = []
                for node in items:
                    if not isinstance(node, yaml.MappingNode):
                        raise _Refused(f"to_entries of a {_kind(node)} (yq: needs a mapping)")
                    out.append([(key, value) for key, value in node.value])
                items = out
            elif stage == ".[]":
                out = []
                for node in items:
                    if isinstance(node, list):
                        out += node
                    elif isinstance(node, yaml.SequenceNode):
                        out += node.value
                    elif isinstance(node, yaml.MappingNode):
                        out += [v for _, v in node.value]
                    else:
                        raise _Refused("'.[]' of a scalar")
                items = out
            elif (m := _COMPARE.match(stage)) and all(isinstance(e, tuple) for e in items):
                items = [e for e in items if _matches(e, *m.groups())]
            elif (m := _WITH.match(stage)) and all(isinstance(e, tuple) for e in items):
                field, op, cmp, new = m.groups()
                items = [(e[0], new) if _matches(e, field, op, cmp) else e for e in items]
            elif (m := _CONCAT.match(stage)) and k + 1 < len(stages) and _JOIN.match(stages[k + 1]):
                parts = [p.strip() for p in m.group(1).split("+")]
                out = []
                for e in items:
                    if not isinstance(e, tuple):
                        return None
                    words = []
                    for p in parts:
                        if p in (".key", ".value"):
                            v = _scalar_text(e[0] if p == ".key" else e[1])
                            if v is None:
                                raise _Refused(f"{p} of {_scalar_text(e[0])!r} is a mapping or sequence")
                            if v == NULL and not isinstance(e[1], str):
                                raise _Refused(f"the value of {_scalar_text(e[0])!r} is null")
                            words.append(v)
                        elif re.fullmatch(r'"[^"]*"', p):
                            words.append(p[1:-1])
                        else:
                            return None
                    out.append("".join(words))
                items = out
                k += 1
            elif (keys := _path(stage)) is not None:
                out = []
                for node in items:
                    for key in keys:
                        node = _get(node, key)
                    out.append(node)
                items = out
            else:
                return None
            k += 1
    except _Refused as exc:
        raise SpecError(f"yq: {exc}") from None
    lines = []
    for item in items:
        t = _scalar_text(item) if not isinstance(item, tuple) else None
        if t is None:
            raise SpecError(
                "yq prints this result as YAML (a mapping or sequence); planner reads scalar values"
            )
        lines.append(restore(t))
    return lines


_YQ_OPTIONS = {"-r", "-M", "-e", "--unwrapScalar", "--no-colors", "--exit-status"}


def yq_command(words: list[str]) -> tuple[str, str] | None:
    """(PROGRAM, FILE) of ``yq [e|eval] [options] PROGRAM FILE`` (None for any other command)."""
    if not words or words[0] != "yq":
        return None
    args = words[1:]
    if args and args[0] in ("e", "eval"):
        args = args[1:]
    args = [a for a in args if a not in _YQ_OPTIONS]
    if len(args) != 2 or args[1].startswith("-"):
        return None
    return args[0], args[1]


def tr(text: str, args: list[str]) -> str | None:
    """``tr SET1 SET2`` of single characters (``\\n``, ``\\t`` escapes), or None."""
    escapes = {"\\n": "\n", "\\t": "\t", "\\\\": "\\"}
    sets = [escapes.get(a, a) for a in args]
    if len(sets) != 2 or len(sets[0]) != 1 or len(sets[1]) != 1:
        return None
    return text.replace(sets[0], sets[1])


_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")


def envsubst(text: str, value_of) -> str:
    """envsubst(1) with no SHELL-FORMAT: every ``$NAME`` and ``${NAME}`` replaced by
    ``value_of(NAME)`` (the environment's value; envsubst writes an unset one as empty)."""
    return _ENV_REF.sub(lambda m: value_of(m.group(1) or m.group(2)), text)
