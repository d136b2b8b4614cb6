"""Shell functions in a launch script, as bash runs them (bash(1) "Shell Function Definitions",
"FUNCTIONS"): a definition ``name() { ...; }`` or ``function name { ...; }`` is recorded with
its body, a call runs the body in the same shell with the call's words as the positional
parameters (``$1`` ... ``${10}``, ``$#``, ``$@``, ``$*``; ``$0`` unchanged), ``local`` (and
``declare`` without ``-g`` inside a function) gives a name a value visible to the function and
the ones it calls until it returns, dynamically scoped ("the value of a variable that a function
sees depends on its value within its caller"), and ``return`` ends the call. This module holds the
definitions and the call frames; :mod:`.shell` reads the statements."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from planner.inputs.errors import SpecError
from planner.launch.megatron.shell_state import Exit, Script, branch_of
from planner.launch.megatron.shell_text import Logical, statements
from planner.launch.megatron.variables import REF_KEY

MAX_CALL_DEPTH = 64
"""How deep calls may nest (bash's ``FUNCNEST`` is unbounded by default; a function that calls
itself without end recurses until the shell dies)."""

MAX_CALLS = 10_000
"""Calls in all, for one script (a launch makes a few)."""

_HEADER = re.compile(
    r"^\s*(?:function\s+([A-Za-z_][\w:.-]*)\s*(?:\(\s*\))?|([A-Za-z_][\w:.-]*)\s*\(\s*\))\s*(.*)$", re.S
)
"""``name ()`` or ``function name [()]``, then the compound command (bash(1) "Shell Function
Definitions")."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Function:
    """A function the script defined: its name, its body's logical lines and where it was defined."""

    name: str
    body: tuple[Logical, ...]
    line: int
    """The line of the definition, in the file it was read from."""


@dataclass(kw_only=True, slots=True)
class Frame:
    """One call being run: the caller's positional parameters and each local's value before it."""

    function: str
    saved: dict[str, tuple] = field(default_factory=dict)
    """Per name made local: its scalar, array, nameref and environment entries before (None: absent)."""


class Return(Exception):
    """``return [N]``: the call ends; ``status`` is N == 0 (without N the last command's status,
    which planner does not know there: unknown)."""

    def __init__(self, status: bool | str):
        super().__init__(status)
        self.status = status


def header(line: str) -> tuple[str, str] | None:
    """(name, the text after the header) when ``line`` starts a function definition."""
    m = _HEADER.match(line)
    return (m.group(1) or m.group(2), m.group(3)) if m else None


def definition(name: str, rest: str, number: int, lines: Iterator[Logical]) -> Function:
    """The function whose header is on line ``number`` (``rest`` the text after it), its body read
    from ``rest`` and as many following lines as the ``{ ... }`` needs. Only a brace group body is
    read (bash also allows ``( ... )`` and other compound commands: an error naming the line)."""
    pending = rest.strip()
    while not pending:
        nxt = next(lines, None)
        if nxt is None:
            raise SpecError(f"line {number}: function {name}: the script ends before its body")
        pending = nxt.text.strip()
    if not pending.startswith("{") or (len(pending) > 1 and not pending[1].isspace()):
        raise SpecError(
            f"line {number}: function {name}: only a body in braces {{ ...; }} is read (bash also "
            "allows ( ... ) and other compound commands)"
        )
    body: list[Logical] = []
    depth, current = 0, Logical(pending, number, None)
    while True:
        kept: list[str] = []
        altered = False
        for statement in statements(current.text):
            words = statement.split()
            if depth == 0:  # the function's own "{"
                depth, statement, altered = 1, statement[1:].strip(), True
                words = statement.split()
                if not words:
                    continue
            if words[0] == "}":
                depth -= 1
                if depth == 0:
                    if len(words) > 1:
                        raise SpecError(f"line {current.number}: function {name}: words after its closing }}")
                    if kept:
                        body.append(Logical("; ".join(kept), current.number, current.heredoc))
                    return Function(name=name, body=tuple(body), line=number)
            depth += _opens(words)
            kept.append(statement)
        if kept:
            body.append(Logical("; ".join(kept), current.number, current.heredoc) if altered else current)
        nxt = next(lines, None)
        if nxt is None:
            raise SpecError(f"line {number}: function {name}: no closing }} (bash: unexpected end of file)")
        current = nxt


_COMPOUND = frozenset("if then else elif fi case esac for select while until do done { } ( function".split())
"""Reserved words that open, continue or close a compound command (bash(1) "RESERVED WORDS")."""


def ends_simply(line: str) -> bool:
    """Whether the last statement of ``line`` (a function body's last line) is a simple command
    or a list of them, whose status :attr:`.shell_state.Script.status` holds once it ran: not a
    compound command (an ``if`` whose branches may all be skipped has status 0, which the status
    left by the command before it would not say), a definition, a subshell or a background job."""
    parts = statements(line)
    if not parts:
        return False
    last = parts[-1]
    words = last.split()
    return bool(words) and not (
        words[0] in _COMPOUND
        or words[0].startswith(("(", "{"))
        or last.endswith(("}", ")", "&"))
        or _HEADER.match(last)
        or any(w in _COMPOUND for w in words[1:2] if words[0] == "!")
    )


def _opens(words: list[str]) -> int:
    """Brace groups a statement opens (bash(1) "Compound Commands": ``{`` is reserved where a
    command starts: first, after a list operator, or after a nested definition's ``name()``)."""
    return sum(
        1
        for k, w in enumerate(words)
        if w == "{"
        and (k == 0 or words[k - 1] in ("||", "&&", "|", "!") or words[k - 1].endswith(")"))
        or (w == "{" and k == len(words) - 1 and words[0] == "function")
    )


def bind(s: Script, args: list[str]) -> tuple:
    """Make ``args`` the positional parameters; the ones they replace, for :func:`unbind`."""
    old = {k: s.scalars[k] for k in list(s.scalars) if (k.isdigit() and k != "0") or k == "#"}
    before = (old, s.arrays.get("@"))
    for k in old:
        del s.scalars[k]
    for k, a in enumerate(args, 1):
        s.scalars[str(k)] = a
    s.scalars["#"] = str(len(args))
    s.arrays["@"] = list(args)
    return before


def positional_parameters(args: list[str]) -> dict[str, str]:
    """``planner check --arg`` values as the preset entries :func:`.shell.read_script` binds as the
    script's positional parameters (``$1`` ... and ``$#``; names no ``--set`` can take)."""
    return {**{str(i): a for i, a in enumerate(args, 1)}, "#": str(len(args))}


def preset_arguments(preset: dict[str, str]) -> list[str]:
    """The positional parameters a preset gives (:func:`positional_parameters`), else none: the
    script run as ``bash SCRIPT`` ($# is 0, "$@" empty)."""
    count = int(preset.get("#", "0"))
    return [preset[str(i)] for i in range(1, count + 1)]


def unbind(s: Script, before: tuple) -> None:
    """The positional parameters :func:`bind` replaced, back."""
    old, at = before
    for k in [k for k in s.scalars if (k.isdigit() and k != "0") or k == "#"]:
        del s.scalars[k]
    s.scalars.update(old)
    if at is None:
        s.arrays.pop("@", None)
    else:
        s.arrays["@"] = at


def shift(s: Script, count: int) -> bool:
    """``shift [N]``: ``$N+1`` ... become ``$1`` ...; False (nothing shifted) when N exceeds ``$#``."""
    args = list(s.arrays.get("@", []))
    if count < 0 or count > len(args):
        return False
    bind(s, args[count:])
    return True


def make_local(s: Script, name: str) -> None:
    """``local NAME``: NAME's current value saved in the innermost call's frame (once per call),
    restored when it returns (bash's dynamic scoping)."""
    frame = s.frames[-1]
    if name not in frame.saved:
        frame.saved[name] = (
            s.scalars.get(name),
            s.arrays.get(name),
            s.scalars.get(REF_KEY + name),
            s.env.get(name, _ABSENT),
            s.assigned_lines.get(name),
        )


_ABSENT = object()


def restore(s: Script, frame: Frame) -> None:
    """The locals of a call that returned, back to their values before it."""
    for name, (scalar, array, ref, env, line) in frame.saved.items():
        for table, key, value in (
            (s.scalars, name, scalar),
            (s.arrays, name, array),
            (s.scalars, REF_KEY + name, ref),
        ):
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        if env is _ABSENT:
            s.env.pop(name, None)
        else:
            s.env[name] = env
        if line is None:
            s.assigned_lines.pop(name, None)
        else:
            s.assigned_lines[name] = line


def call(
    name: str, args: list[str], number: int, s: Script, read: Callable[[list[Logical], Script], None]
) -> bool | str:
    """Run the function ``name`` on line ``number`` with ``args`` (``read`` reads its body's lines
    into ``s``): its status, True or False after ``return N``, unknown (``if:?:LINE``) when it ends
    without one. The words its body contributes carry the call's line; an error inside it names
    the call and the definition's line."""
    fn = s.functions[name]
    if isinstance(fn, str):
        var = fn.split(":")[1]
        raise SpecError(
            f"line {number}: {name} is defined inside {branch_of(fn)}, which depends on "
            f"{var if var != '?' else 'a condition planner cannot evaluate'}; planner cannot know which body runs"
        )
    if len(s.frames) >= MAX_CALL_DEPTH or s.calls >= MAX_CALLS:
        raise SpecError(
            f"line {number}: {name}: calls nest deeper than {MAX_CALL_DEPTH} or number more than {MAX_CALLS} "
            "(does a function call itself without end?)"
        )
    s.calls += 1
    frame = Frame(function=name)
    before = bind(s, args)
    s.frames.append(frame)
    loops, s.loops = s.loops, 0  # bash: break / continue in a function leave no loop of its caller
    start, assigned = len(s.words), dict(s.assigned_lines)
    status: bool | str = f"if:?:{number}"
    try:
        read(list(fn.body), s)
        if fn.body and ends_simply(fn.body[-1].text):
            # bash(1) "FUNCTIONS": "the exit status of the last command executed in the body"
            status = s.status
    except Return as r:
        status = r.status
    except Exit as stop:  # the script stops inside the call (shell_exit)
        stop.trail.append(f"in {name}, called on line {number}")
        raise
    except SpecError as exc:
        raise SpecError(f"line {number}: {name} (the function defined on line {fn.line}): {exc}") from None
    finally:
        s.loops = loops
        s.frames.pop()
        restore(s, frame)
        unbind(s, before)
    if isinstance(status, str):  # unknown: named by the call's line, as the words it gives are
        renamed = f"{status.rsplit(':', 1)[0]}:{number}"
        if status in s.assumed:
            s.assumed.add(renamed)  # a command planner does not run: still assumed to succeed
        status = renamed
    s.words[start:] = [(w, number) for w, _ in s.words[start:]]
    for var, line in s.assigned_lines.items():
        if assigned.get(var) != line:
            s.assigned_lines[var] = number
    return status
