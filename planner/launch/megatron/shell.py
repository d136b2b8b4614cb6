"""The shell a Megatron launch script is written in, as far as planning needs: a bash script's own
variable assignments resolved into the words of the ``pretrain_gpt.py`` command.

Resolved (bash(1) "Parameter Expansion", "Arrays", "Arithmetic Expansion"): ``NAME=value``,
``export NAME=value``, ``declare``/``readonly`` prefixes, ``NAME=( ... )`` and ``NAME+=( ... )``
arrays over several lines, ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``,
``${NAME:=default}``, ``"${NAME[@]}"``/``${NAME[*]}``, integer ``$(( ... ))`` over resolved
names, ``bash -c '...' name args`` (the string re-split with ``"$@"`` bound to the args) and
``unset NAME``. A reference nothing in the script defines becomes a marker that names it, so a
flag whose value needs it is an error naming the variable; command substitution ``$( ... )`` is
never run.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field

from planner.inputs.errors import SpecError

UNRESOLVED = "@@unresolved:{}@@"
_UNRESOLVED_RE = re.compile(r"@@unresolved:([^@]*)@@")
_FIELD = re.compile(r"(?:@@unresolved:[^@]*@@|\S)+")
"""A field of an unquoted expansion: a run of non-whitespace, an unresolved marker kept whole."""
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_PREFIXES = ("export", "declare", "readonly", "local", "typeset")
SEPARATORS = {"|", "||", "&&", ";", "&", "|&"}
"""Words that end a simple command (bash(1) "Lists")."""
REDIRECT = re.compile(r"^\d*(>|<|>>|>&|<&)")
"""A redirection word (bash(1) "Redirection"): ends the arguments of a command."""


def unresolved_in(word: str) -> str | None:
    """The variable a word needed but the script never set (None when resolved)."""
    m = _UNRESOLVED_RE.search(word)
    return m.group(1) if m else None


@dataclass
class Script:
    """A script read: its command words with line numbers, variables and exported environment."""

    words: list[tuple[str, int]] = field(default_factory=list)
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    """Environment assignments (``export NAME=v`` or ``NAME=v`` before a command); None = unset."""
    assigned_lines: dict[str, int] = field(default_factory=dict)


def _logical_lines(text: str) -> list[tuple[str, int]]:
    """Lines joined over backslash continuations, comments dropped (outside quotes), with the
    number of their first line; a quoted string runs to its closing quote and an array assignment
    ``NAME=(`` to its closing ``)``, over several lines."""
    out: list[tuple[str, int]] = []
    buf, start, depth = "", 1, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not buf:
            start = number
        if line.rstrip().endswith("\\") and not line.rstrip().endswith("\\\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if _open_quote(buf):
            buf += "\n"
            continue
        depth = _paren_depth(buf)
        if depth > 0 and re.match(
            r"^\s*(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?\w+\+?=\(", buf
        ):
            buf += "\n"
            continue
        out.append((buf, start))
        buf = ""
    if buf:
        out.append((buf, start))
    return out


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted string (bash(1) "Quoting": the string, newlines and all,
    runs on to its closing quote; a backslash escapes the next character outside single quotes)."""
    quote, i = None, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        i += 1
    return quote is not None


def _strip_comment(line: str) -> str:
    """The line without a ``#`` comment (a # that starts a word outside quotes)."""
    quote, prev = None, " "
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t(;":
            return line[:i]
        prev = ch
    return line


def _paren_depth(text: str) -> int:
    depth, quote = 0, None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
    return depth


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def _arith(expr: str, scalars: dict[str, str]) -> str | None:
    """An integer ``$(( ))`` expression over resolved names (bash: bare names are variables)."""
    text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", expr)

    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            v = scalars.get(node.id)
            if v is None or not re.fullmatch(r"-?\d+", v.strip()):
                raise ValueError(node.id)
            return int(v)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            right = value(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError("division by zero")
            return _OPS[type(node.op)](value(node.left), right)
        raise ValueError(ast.dump(node))

    try:
        return str(value(ast.parse(text.replace("/", "//"), mode="eval")))
    except (ValueError, SyntaxError, RecursionError):
        return None


def expand(text: str, scalars: dict[str, str], arrays: dict[str, list[str]], split: bool = True) -> str:
    """``text`` with every parameter reference replaced by its value, re-quoted so that
    :func:`shlex.split` yields the words bash would (unknown names become markers).

    Word splitting as bash(1) "Word Splitting" does it with the default IFS (space, tab,
    newline): an unquoted expansion, ``$NAME`` or each element of ``${NAME[@]}`` / ``${NAME[*]}``,
    is split into words at whitespace (an empty one gives no word); inside double quotes it is
    not, and ``"${NAME[@]}"`` gives one word per element, whole. ``split=False`` is the right
    side of an assignment, which bash does not split. A marker for an unresolved value stays one
    word. Pathname expansion is not performed (a launch's flags hold no glob patterns)."""
    out: list[str] = []
    i, quote = 0, None
    n = len(text)
    while i < n:
        ch = text[i]
        if quote == "'":
            out.append(ch)
            quote = None if ch == "'" else quote
            i += 1
            continue
        if ch == "\\" and i + 1 < n:
            out.append(text[i : i + 2])
            i += 2
            continue
        if ch == "'" and quote is None:
            quote = "'"
            out.append(ch)
            i += 1
            continue
        if ch == '"':
            # "${NAME[@]}" as a whole word: one word per element.
            m = re.match(r'"\$\{([A-Za-z_]\w*)\[@\]\}"', text[i:]) if quote is None else None
            if m:
                out.append(" ".join(shlex.quote(e) for e in _array(m.group(1), scalars, arrays)))
                i += m.end()
                continue
            quote = None if quote == '"' else '"'
            out.append(ch)
            i += 1
            continue
        if ch == "$":
            value, used = _reference(text[i:], scalars, arrays)
            if used:
                if value is None:
                    out.append(text[i : i + used])
                elif isinstance(value, list):
                    joined = " ".join(value)
                    out.append(_requote(joined, quote) if quote else _unquoted(value, split))
                else:
                    out.append(_requote(value, quote) if quote else _unquoted([value], split))
                i += used
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unquoted(values: list[str], split: bool) -> str:
    """The words of an unquoted expansion, re-quoted for :func:`shlex.split`: each value split at
    IFS whitespace (bash(1) "Word Splitting"), a marker kept whole; ``split=False``: each value one
    word."""
    words: list[str] = []
    for v in values:
        words += _FIELD.findall(v) if split else [v]
    return " ".join(shlex.quote(w) for w in words)


def _requote(value: str, quote: str | None) -> str:
    """``value`` escaped for the inside of a double-quoted string as :func:`shlex.split` reads one
    (posix: a backslash escapes only ``"`` and ``\\`` there; ``$`` and a backtick stay literal)."""
    return re.sub(r'(["\\])', r"\\\1", value)


def _array(name: str, scalars: dict[str, str], arrays: dict[str, list[str]]) -> list[str]:
    if name in arrays:
        return arrays[name]
    if name in scalars:
        return [scalars[name]]
    return [UNRESOLVED.format(name)]


def _reference(s: str, scalars: dict[str, str], arrays: dict[str, list[str]]):
    """(value, characters consumed) of the reference at the start of ``s``; value None keeps
    the text (``$`` alone, ``$@``, positional parameters)."""
    m = re.match(r"\$\(\((.*?)\)\)", s)
    if m:
        value = _arith(m.group(1), scalars)
        return (value if value is not None else UNRESOLVED.format(f"$(({m.group(1)}))")), m.end()
    if s.startswith("$("):
        depth, j = 0, 1
        while j < len(s):
            depth += {"(": 1, ")": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        return UNRESOLVED.format(s[: j + 1]), j + 1
    m = re.match(r"\$\{([A-Za-z_]\w*)\[([@*]|\d+)\]\}", s)
    if m:
        items = _array(m.group(1), scalars, arrays)
        if m.group(2).isdigit():
            k = int(m.group(2))
            return (items[k] if k < len(items) else ""), m.end()
        return items, m.end()
    m = re.match(r"\$\{#([A-Za-z_]\w*)(\[[@*]\])?\}", s)
    if m:
        name = m.group(1)
        if m.group(2):
            return str(len(_array(name, scalars, arrays))), m.end()
        return (str(len(scalars[name])) if name in scalars else UNRESOLVED.format(name)), m.end()
    m = re.match(r"\$\{([A-Za-z_]\w*)(?:(:?[-=+?])([^}]*))?\}", s)
    if m:
        name, op, default = m.group(1), m.group(2), m.group(3)
        value = scalars.get(name, arrays[name][0] if arrays.get(name) else None)
        if op in (":-", ":=") and not value:
            value = expand_word(default or "", scalars, arrays)
            if op == ":=":
                scalars[name] = value
        elif op in ("-", "=") and value is None:
            value = expand_word(default or "", scalars, arrays)
            if op == "=":
                scalars[name] = value
        elif op == ":+":
            value = expand_word(default or "", scalars, arrays) if value else ""
        elif op == "+":
            value = expand_word(default or "", scalars, arrays) if value is not None else ""
        return (value if value is not None else UNRESOLVED.format(name)), m.end()
    m = re.match(r"\$([A-Za-z_]\w*)", s)
    if m:
        name = m.group(1)
        value = scalars.get(name, arrays[name][0] if arrays.get(name) else None)
        return (value if value is not None else UNRESOLVED.format(name)), m.end()
    return None, 0


def expand_word(text: str, scalars: dict[str, str], arrays: dict[str, list[str]]) -> str:
    """One word (a default value, an assignment's right side) expanded and unquoted."""
    try:
        parts = shlex.split(expand(text, scalars, arrays))
    except ValueError:
        return text
    return " ".join(parts)


def read_script(text: str) -> Script:
    """Read a bash script (or a plain arguments file): assignments are recorded, every other
    line's words are expanded and kept for the flag parser."""
    s = Script()
    for line, number in _logical_lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            words = shlex.split(stripped.replace("\n", " "), posix=True) if "=(" not in stripped else None
        except ValueError:
            words = stripped.split()
        if words is None or (words and _assignment_start(words)):
            if _assign(stripped, number, s):
                continue
        if words and words[0] == "unset":
            for name in words[1:]:
                if not name.startswith("-"):
                    s.scalars.pop(name, None)
                    s.arrays.pop(name, None)
                    s.env[name] = None
            continue
        expanded = expand(stripped.replace("\n", " "), s.scalars, s.arrays)
        try:
            parts = shlex.split(expanded, posix=True)
        except ValueError:
            parts = expanded.split()
        # Leading NAME=value words set the command's environment (bash(1) "Simple Command Expansion").
        while parts and _ASSIGN.match(parts[0]) and not parts[0].startswith("-"):
            m = _ASSIGN.match(parts[0])
            s.env[m.group(1)] = m.group(3)
            s.scalars[m.group(1)] = m.group(3)
            s.assigned_lines[m.group(1)] = number
            parts = parts[1:]
        s.words += [(w, number) for w in _inner_commands(parts)]
    return s


def _assignment_start(words: list[str]) -> bool:
    rest = words[1:] if words[0] in _PREFIXES else words
    rest = [w for w in rest if not w.startswith("-")]
    return bool(rest) and all(_ASSIGN.match(w) for w in rest)


def _assign(line: str, number: int, s: Script) -> bool:
    """Record ``[export] NAME=value ...`` or ``NAME=( ... )``; False when the line is not one."""
    text = line.strip()
    exported = False
    first = text.split(None, 1)[0]
    if first in _PREFIXES:
        exported = first == "export" or "-x" in text.split()
        text = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
        while text.startswith("-"):
            text = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
    m = re.match(r"^([A-Za-z_]\w*)(\+?)=\((.*)\)\s*$", text, re.S)
    if m:
        name, append, body = m.groups()
        body = " ".join(_strip_comment(x) for x in body.splitlines())
        try:
            items = shlex.split(expand(body, s.scalars, s.arrays), posix=True)
        except ValueError:
            items = body.split()
        s.arrays[name] = (s.arrays.get(name, []) if append else []) + items
        s.assigned_lines[name] = number
        return True
    try:
        words = shlex.split(expand(text, s.scalars, s.arrays, split=False), posix=True)
    except ValueError:
        return False
    if not words or not all(_ASSIGN.match(w) for w in words):
        return False
    for w in words:
        name, append, value = _ASSIGN.match(w).groups()
        value = (s.scalars.get(name, "") + value) if append else value
        s.scalars[name] = value
        s.arrays.pop(name, None)
        s.assigned_lines[name] = number
        if exported or name in s.env:
            s.env[name] = value
    return True


def _inner_commands(parts: list[str]) -> list[str]:
    """``bash -c 'STRING' name args...``: the words bash would run (STRING re-split with ``"$@"``
    bound to args). An unquoted ``|``, ``;``, ``&``, ``<`` or ``>`` inside STRING splits the command
    there, as bash would: a SpecError naming it (a value such as a pipeline layout must be quoted)."""
    for k, w in enumerate(parts[:-1]):
        if w in ("bash", "sh", "/bin/bash", "/bin/sh") and parts[k + 1] == "-c" and k + 2 < len(parts):
            inner, rest = parts[k + 2], parts[k + 4 :]
            end = next((j for j, x in enumerate(rest) if x in SEPARATORS or REDIRECT.match(x)), len(rest))
            rest, tail = rest[:end], rest[end:]
            bound = " ".join(shlex.quote(a) for a in rest)
            inner = inner.replace('"$@"', bound).replace("$@", bound)
            lex = shlex.shlex(inner, posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            try:
                words = list(lex)
            except ValueError as exc:
                raise SpecError(f"the bash -c command string does not parse: {exc}") from None
            for i, x in enumerate(words):
                if x and set(x) <= set("|;&<>()") and x != "&&":
                    before = " ".join(words[max(0, i - 2) : i])
                    raise SpecError(
                        f"the bash -c command string has an unquoted {x!r} after {before!r}: the inner "
                        'shell splits the command there (quote the value, or pass the arguments as "$@")'
                    )
            return parts[:k] + _inner_commands([x for x in words if x != "&&"]) + tail
    return parts
