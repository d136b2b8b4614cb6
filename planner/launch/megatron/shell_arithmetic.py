"""The arithmetic commands of a launch script, run on its state (bash(1) "Compound Commands":
``(( expression ))`` "is evaluated according to the rules described below under ARITHMETIC
EVALUATION. If the value of the expression is non-zero, the return status is 0; otherwise the
return status is 1"; "SHELL BUILTIN COMMANDS": ``let arg [arg ...]`` "Each arg is an arithmetic
expression to be evaluated ... If the last arg evaluates to 0, let returns 1; 0 is returned
otherwise"). The expressions are :mod:`.arithmetic`'s; this module reads and writes the script's
variables for them:

* ``(( ... ))`` undergoes "the same expansions as if it were within double quotes, but double
  quote characters in expression are not treated specially and are removed", when it runs (so
  ``((i++)) && ((i++))`` sees each increment); :func:`protect` keeps the expression whole, one
  word, until then, so that its ``|``, ``&&`` or ``<`` are not read as the list's operators.
* A variable the script never sets may come from the environment: the expression's value cannot
  be known, its status is unknown (``if:NAME:LINE``), and every variable it assigns becomes a
  marker naming what it needed. A variable the script ``unset`` is 0, as in bash; under ``set -u``
  either is bash's "unbound variable" (:class:`.expansion.Unbound`).
* An array element is read (an indexed array's subscript is itself arithmetic); assigning one is
  not followed (the array becomes unknown).
* What bash refuses (a syntax error, ``division by 0``) is an error naming the line and bash's
  words: bash prints them and goes on with the command failed, which a launch does not mean.
* In a branch that cannot be known, the command is not evaluated: every variable it may assign
  becomes a marker naming the branch (:func:`arithmetic_maybe`).
"""

from __future__ import annotations

import re

from planner.inputs.errors import SpecError
from planner.launch.megatron.arithmetic import (
    ArithmeticFailure,
    Node,
    NotFollowed,
    UnknownOperand,
    assigned,
    evaluate,
    parse,
)
from planner.launch.megatron.expansion import (
    NOUNSET_KEY,
    UNRESOLVED,
    UNRESOLVED_RE,
    Unbound,
    command_marker,
    environment_sets,
    expand_heredoc,
    expand_word,
    unresolved_in,
)
from planner.launch.megatron.shell_state import NAME, Script, exports
from planner.launch.megatron.shell_text import unquoted
from planner.launch.megatron.variables import resolve

__all__ = ["arithmetic_maybe", "is_arithmetic", "protect", "run_arithmetic", "shown"]

_WORD = re.compile(r"@@arith:([0-9a-f]*)@@")
"""The one word a ``(( expression ))`` command stands as until it runs (its text hex-encoded, so
that no character of it is read by the list's lexer; not a word a script writes)."""


def protect(text: str) -> str:
    """``text`` (a command list) with each ``(( expression ))`` that starts a command (the text's
    start, or after ``&&``, ``||``, ``|``, ``&``, ``;``, ``!`` or ``{``) made one :data:`_WORD`; a ``((``
    whose ``))`` does not close it (``((cd x) )``, a nested subshell) is left as it is."""
    out: list[str] = []
    i, quote, command = 0, None, True
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            out.append(text[i : i + 2])
            i, command = i + 2, False
            continue
        if quote is not None or ch in "'\"":
            quote = ch if quote is None else (None if ch == quote else quote)
            out.append(ch)
            i, command = i + 1, False
            continue
        end = _closing(text, i) if command and text.startswith("((", i) else None
        if end is not None:
            out.append(f"@@arith:{text[i + 2 : end].encode('utf-8').hex()}@@")
            i, command = end + 2, False
            continue
        if ch in "&|;":
            command = True
        elif ch not in " \t\n" and not (ch in "!{" and command and text[i + 1 : i + 2] in ("", " ", "\t")):
            command = False  # a word other than ! and {, after which a command starts
        out.append(ch)
        i += 1
    return "".join(out)


def _closing(text: str, start: int) -> int | None:
    """The index of the ``))`` that closes the ``((`` at ``start`` (parentheses inside counted,
    quoted ones not), or None when a single ``)`` closes it first."""
    depth, body = 0, start + 2
    for k, ch in unquoted(text[body:]):
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                return body + k if text.startswith("))", body + k) else None
            depth -= 1
    return None


def is_arithmetic(command: list[str]) -> bool:
    """Whether a command (its words) is ``(( ... ))`` or ``let``."""
    return bool(command) and (command[0] == "let" or _WORD.fullmatch(command[0]) is not None)


def shown(command: list[str]) -> list[str]:
    """A command's words for a message, a ``(( ... ))`` as written."""
    m = _WORD.fullmatch(command[0]) if command else None
    if m is None:
        return command
    return [f"(({bytes.fromhex(m.group(1)).decode('utf-8')}))", *command[1:]]


def _expressions(command: list[str], s: Script) -> list[str]:
    """The expressions a command evaluates, expanded: ``let``'s arguments (expanded with the
    command), or the text of ``(( ... ))``, expanded now as a double-quoted string is and its
    double quotes removed."""
    m = _WORD.fullmatch(command[0])
    if m is None:
        return command[1:]
    text = bytes.fromhex(m.group(1)).decode("utf-8")
    return [expand_heredoc(text, s.scalars, s.arrays).replace('"', "")]


def run_arithmetic(command: list[str], number: int, s: Script) -> bool | str:
    """``(( ... ))`` or ``let ARG ...`` on line ``number`` run on ``s``: its status (the last
    expression's value non-zero), or unknown (``if:NAME:LINE``) when a value it needs cannot be
    known (the module docstring)."""
    texts = _expressions(command, s)
    if not texts:
        raise _refused(command, number, "let: expression expected")
    status: bool | str = True
    for text in texts:
        marker = UNRESOLVED_RE.search(text)
        try:
            node = parse(UNRESOLVED_RE.sub("0", text))
        except ArithmeticFailure as exc:
            if marker is None:
                raise _refused(command, number, str(exc)) from None
            node = None
        try:
            if marker is not None:
                raise UnknownOperand(marker.group(0))
            status = evaluate(node, _reader(s, number), _writer(s, number)) != 0
        except UnknownOperand as exc:  # its name: the marker of what it needs
            _mark(assigned(node), exc.name, number, s)
            name = unresolved_in(exc.name) or "?"
            status = f"if:{name if NAME.fullmatch(name) else '?'}:{number}"
        except NotFollowed:  # for a message: an arithmetic expression planner does not evaluate
            _mark(assigned(node), command_marker(f"$(({text}))"), number, s)
            status = f"if:?:{number}"
        except ArithmeticFailure as exc:
            raise _refused(command, number, str(exc)) from None
    return status


def arithmetic_maybe(command: list[str], number: int, s: Script, unknown: str) -> None:
    """``(( ... ))`` or ``let`` in a branch that cannot be known (``unknown``): each variable it
    may assign becomes a marker naming the branch; nothing is evaluated (an expression that
    cannot be read there is not read, as another command of that branch is not)."""
    try:
        texts = _expressions(command, s)
    except Unbound:
        return
    for text in texts:
        try:
            node: Node | None = parse(UNRESOLVED_RE.sub("0", text))
        except ArithmeticFailure:
            continue
        _mark(assigned(node), UNRESOLVED.format(unknown), number, s)


def _refused(command: list[str], number: int, why: str) -> SpecError:
    return SpecError(f"line {number}: {' '.join(shown(command))!r} cannot be evaluated (bash: {why})")


def _mark(names: list[str], marker: str, number: int, s: Script) -> None:
    """Each of ``names`` made ``marker``: its value cannot be known."""
    for name in names:
        name = resolve(name, s.scalars)
        s.scalars[name] = marker
        s.arrays.pop(name, None)
        s.assigned_lines[name] = number
        if exports(s, name):
            s.env[name] = marker


def _reader(s: Script, number: int):
    """A variable's value for :func:`.arithmetic.evaluate`; one that cannot be known is
    :class:`.arithmetic.UnknownOperand` named by the marker of what it needs."""

    def read(name: str, sub: str | None) -> str:
        name = resolve(name, s.scalars)
        table = s.arrays.get(name)
        if table is not None or sub is not None:
            value = _element(name, sub, table, s, read, number)
        else:
            value = s.scalars.get(name)
        if value is None:
            known = name in s.env and s.env[name] is None  # the script unset it: 0
            shown_name = name if sub is None else f"{name}[{sub}]"
            if NOUNSET_KEY in s.scalars and not environment_sets(name, s.scalars):
                raise Unbound(shown_name, known or table is not None)
            if not known and table is None:
                raise UnknownOperand(UNRESOLVED.format(name))
            return ""
        inner = UNRESOLVED_RE.search(value)
        if inner is not None:
            raise UnknownOperand(inner.group(0))
        return value

    return read


def _element(name: str, sub: str | None, table, s: Script, read, number: int) -> str | None:
    """``name[sub]`` (``sub`` None: element 0) of the script's array ``table`` (None: a scalar,
    which is its element 0), or None when there is none."""
    if isinstance(table, dict):
        return table.get(expand_word(sub, s.scalars, s.arrays) if sub is not None else "0")
    index = 0 if sub is None else evaluate(parse(sub), read, _writer(s, number))
    if table is None:
        return s.scalars.get(name) if index == 0 or name not in s.scalars else ""
    index += len(table) if index < 0 else 0
    return table[index] if 0 <= index < len(table) else None


def _writer(s: Script, number: int):
    """A variable set by :func:`.arithmetic.evaluate`, as an assignment sets it."""

    def write(name: str, value: int) -> None:
        name = resolve(name, s.scalars)
        if name in s.arrays:
            raise NotFollowed(name)  # element 0 of an array
        s.scalars[name] = str(value)
        s.assigned_lines[name] = number
        if exports(s, name):
            s.env[name] = str(value)

    return write
