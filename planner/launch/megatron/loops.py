"""Loops in a launch script, run as bash runs them where what they run over is known (bash(1)
"Compound Commands", "SHELL BUILTIN COMMANDS"):

* ``for NAME in WORDS; do ...; done``: "The list of words following in is expanded, generating a
  list of items. The variable name is set to each element of this list in turn, and list is
  executed each time" (``for NAME; do`` iterates over ``"$@"``); NAME keeps the last word.
* ``while LIST; do ...; done`` / ``until LIST; do ...; done``: the body runs as long as LIST
  succeeds (``until``: fails), LIST evaluated as an ``if`` condition is
  (:func:`.conditions.condition`: ``[ "$i" -lt 3 ]``, ``(( i < 3 ))``, ``true``, ...) before each
  round.
* ``for (( INIT; COND; STEP ))``: "expr1 is evaluated ... expr2 is then evaluated repeatedly until
  it evaluates to zero. Each time expr2 evaluates to a non-zero value, list is executed and the
  arithmetic expression expr3 is evaluated" (an omitted expression is 1), each as ``(( ))``
  evaluates it (:mod:`.shell_arithmetic`, through :func:`.conditions.condition`); a ``continue``
  still evaluates STEP, a ``break`` does not.
* ``break [N]`` / ``continue [N]``: leave (go on with the next round of) the N-th enclosing loop;
  outside a loop, and in a function called from one, they do nothing (bash says "only meaningful
  in a `for', `while', or `until' loop").

A loop is run on the script's state, and when it turns out it cannot be run here the state is put
back as it was and the loop left to :mod:`.shell`'s undeterminable branch (``loop:?:LINE``: its
body may run any number of times; what it assigns is unknown, a flag needing it an error naming
the loop's line): a word list that holds an unresolved value or more than
:data:`MAX_ITERATIONS` words, a condition planner cannot evaluate (``while read -r f``, ``while
(( i < n ))`` with ``n`` never set) at any round, a ``break`` / ``continue`` in a branch that cannot be known, a
redirection or pipe after ``done`` (``done < FILE``) or text after ``done`` on its line. A
``while`` / ``until`` still running after :data:`MAX_ITERATIONS` rounds is left the same way
(``cap:?:LINE``, a message naming the cap), so a script never hangs planner; more than
:data:`MAX_LOOP_RUNS` bodies run in all (nested loops) is an error naming it. ``select`` is
always left (its rounds are run-time).
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.inputs.errors import SpecError
from planner.launch.megatron.conditions import condition
from planner.launch.megatron.expansion import expand, unresolved_in
from planner.launch.megatron.shell_state import MAX_ITERATIONS, MAX_LOOP_RUNS, Script
from planner.launch.megatron.shell_text import Logical, statements

__all__ = [
    "MAX_ITERATIONS",
    "MAX_LOOP_RUNS",
    "Lines",
    "Loop",
    "LoopControl",
    "Undecidable",
    "read_loop",
    "run_loop",
]

_FOR = re.compile(r"^for\s+([A-Za-z_]\w*)(\s+in(?:\s+(.*?))?)?\s*$")
"""``for NAME in WORDS`` (the words may be empty) or ``for NAME`` (over ``"$@"``)."""
_WHILE = re.compile(r"^(while|until)\s+(.*\S)\s*$", re.S)
"""``while LIST`` / ``until LIST`` (LIST one command list, up to its ``; do``)."""
_ARITH_FOR = re.compile(r"^for\s*\(\((.*)\)\)$", re.S)
"""``for (( INIT; COND; STEP ))`` (bash(1) "Compound Commands")."""
_OPENERS = ("for", "while", "until", "select")


class LoopControl(Exception):
    """``break [N]`` / ``continue [N]`` run inside a loop: ``kind`` is which, ``levels`` N."""

    def __init__(self, kind: str, levels: int):
        super().__init__(kind)
        self.kind, self.levels = kind, levels


class Undecidable(Exception):
    """A loop being run cannot be run here (a ``break`` in a branch that cannot be known, its
    ``KIND:NAME:LINE`` ``unknown``): it is read as an undeterminable branch instead (the module
    docstring)."""

    def __init__(self, unknown: str):
        super().__init__(unknown)
        self.unknown = unknown


class Lines:
    """An iterator over logical lines that can take back what a reader looked ahead at."""

    def __init__(self, lines: list[Logical]) -> None:
        self._lines = lines
        self._at = 0

    def __iter__(self) -> Iterator[Logical]:
        return self

    def __next__(self) -> Logical:
        if self._at >= len(self._lines):
            raise StopIteration
        self._at += 1
        return self._lines[self._at - 1]

    def mark(self) -> int:
        return self._at

    def rewind(self, mark: int) -> None:
        self._at = mark


@dataclass(frozen=True, slots=True)
class Loop:
    kind: str
    """``for``, ``while`` or ``until``."""
    name: str
    """A ``for``'s variable ("" for the others)."""
    words: str | None
    """A ``for``'s text after ``in`` (None: ``for NAME``, over ``"$@"``); a ``while`` / ``until``'s
    condition."""
    body: list[Logical]
    line: int
    """The line the loop starts on."""


def _first(statement: str) -> str:
    if statement.startswith("for(("):
        return "for"
    return statement.split(None, 1)[0] if statement.strip() else ""


def read_loop(logical: Logical, lines: Lines) -> Loop | None:
    """The ``for``, ``while`` or ``until`` loop that starts at ``logical`` with its body (the
    following lines read from ``lines`` up to its ``done``), or None (``lines`` left where they
    were) when it is not a loop this module runs (the module docstring)."""
    parts = statements(logical.text.strip())
    head = parts[0] if parts else ""
    m, w, a = _FOR.match(head), _WHILE.match(head), _ARITH_FOR.match(head)
    if a is not None:
        m = None
    elif m is None and (w is None or _first(w.group(2)) in ("do", "done")):
        return None
    mark = lines.mark()
    rest = parts[1:]
    if not rest:  # "do" on a line of its own
        nxt = next(lines, None)
        if nxt is None:
            lines.rewind(mark)
            return None
        rest = statements(nxt.text.strip())
    if not rest or _first(rest[0]) != "do":
        lines.rewind(mark)
        return None
    rest = [rest[0][2:].strip(), *rest[1:]]
    body: list[Logical] = []
    depth, current = 1, (rest, logical.number, logical.heredoc)
    while True:
        stmts, number, heredoc = current
        kept: list[str] = []
        for i, st in enumerate(stmts):
            word = _first(st)
            if word in _OPENERS:
                depth += 1
            elif word == "done":
                depth -= 1
                if depth == 0:
                    if st.strip() != "done" or stmts[i + 1 :]:
                        lines.rewind(mark)  # "done < FILE", "done | tee", "done; more"
                        return None
                    if kept:
                        body.append(Logical("; ".join(kept), number, heredoc))
                    if a is not None:
                        return Loop("for((", "", a.group(1), body, logical.number)
                    if m is not None:
                        words = (m.group(3) or "") if m.group(2) else None
                        return Loop("for", m.group(1), words, body, logical.number)
                    return Loop(w.group(1), "", w.group(2), body, logical.number)
            if st:
                kept.append(st)
        if kept:
            body.append(Logical("; ".join(kept), number, heredoc))
        nxt = next(lines, None)
        if nxt is None:
            lines.rewind(mark)
            return None
        current = (statements(nxt.text.strip()), nxt.number, nxt.heredoc)


def _for_words(loop: Loop, s: Script) -> list[str] | None:
    """The items a ``for`` runs over (bash's expansion and word splitting of the list), or None
    when one is unresolved or there are more than :data:`MAX_ITERATIONS`."""
    if loop.words is None:
        return list(s.arrays.get("@", []))
    try:
        items = shlex.split(expand(loop.words, s.scalars, s.arrays), posix=True)
    except ValueError:
        return None
    if len(items) > MAX_ITERATIONS or any(unresolved_in(w) is not None for w in items):
        return None
    return items


def run_loop(
    loop: Loop,
    s: Script,
    read_lines: Callable[[list[Logical], Script], None],
    test_of: Callable[[str, int, Script], bool | str] = condition,
) -> str | None:
    """Run ``loop`` on ``s`` as bash runs it (``read_lines`` reads its body; ``test_of`` evaluates
    a ``while`` / ``until`` condition as an ``if``'s, a function call run: :func:`.shell._if_condition`):
    None when it ran, or the undeterminable branch it is to be read as (``loop:?:LINE``,
    ``cap:?:LINE``), ``s`` then as it was before the loop."""
    unknown = f"loop:?:{loop.line}"
    items = _for_words(loop, s) if loop.kind == "for" else None
    if loop.kind == "for" and items is None:
        return unknown
    saved = copy.deepcopy(s.__dict__)
    s.loops += 1
    try:
        if items is not None:
            for item in items:
                s.scalars[loop.name] = item
                if _round(loop, s, read_lines):
                    break
            return None
        test, step = loop.words, None
        if loop.kind == "for((":
            init, cond, step = _arithmetic_parts(loop)
            _expression(init, loop.line, s)
            test = f"(( {cond.strip() or 1} ))"  # an empty COND is 1
        for _ in range(MAX_ITERATIONS):
            # set -e ignores the condition (bash(1): "part of the command list immediately
            # following a while or until keyword"): test_of runs a function call that way
            known = test_of(test, loop.line, s)
            if isinstance(known, str):
                unknown = f"loop:{known.split(':')[1]}:{loop.line}"  # the variable it depends on
                break
            if known == (loop.kind == "until") or _round(loop, s, read_lines):
                return None
            _expression(step, loop.line, s)  # after the body and after a continue, not a break
        else:
            unknown = f"cap:?:{loop.line}"
    except Undecidable as exc:
        unknown = f"loop:{exc.unknown.split(':')[1]}:{loop.line}"
    finally:
        s.loops -= 1
    runs = s.loop_runs  # the bodies run count against the cap, put back or not
    s.__dict__.update(saved)
    s.loop_runs = runs
    return unknown


def _arithmetic_parts(loop: Loop) -> tuple[str, str, str]:
    """INIT, COND and STEP of ``for (( INIT; COND; STEP ))``; any of them may be empty. Not three
    (bash's syntax error): the loop cannot be run (:class:`Undecidable`)."""
    parts = loop.words.split(";")
    if len(parts) != 3:
        raise Undecidable(f"loop:?:{loop.line}")
    return parts[0], parts[1], parts[2]


def _expression(text: str | None, line: int, s: Script) -> None:
    """An arithmetic for's INIT or STEP run on ``s`` (its value does not matter); one that needs a
    value planner cannot know makes the loop one it cannot run."""
    if text is None or not text.strip():
        return
    known = condition(f"(( {text} ))", line, s)
    if isinstance(known, str):
        raise Undecidable(known)


def _round(loop: Loop, s: Script, read_lines: Callable[[list[Logical], Script], None]) -> bool:
    """One run of the body; whether a ``break`` ends the loop (one for an outer loop, or a
    ``continue`` for one, goes on up)."""
    s.loop_runs += 1
    if s.loop_runs > MAX_LOOP_RUNS:
        raise SpecError(
            f"line {loop.line}: the script's loops run more than {MAX_LOOP_RUNS} bodies in all (planner's cap)"
        )
    try:
        read_lines(loop.body, s)
    except LoopControl as jump:
        if jump.levels > 1:
            raise LoopControl(jump.kind, jump.levels - 1) from None
        return jump.kind == "break"
    return False


def loop_control(name: str, args: list[str], s: Script) -> bool:
    """``break [N]`` / ``continue [N]`` (bash(1) "SHELL BUILTIN COMMANDS"): inside a loop,
    :class:`LoopControl` for the N-th enclosing one (N past the loops: the outermost); outside one
    nothing (status 0, as bash's); an N that is not a positive number: the loop cannot be run."""
    if not s.loops:
        return True
    if args and not (args[0].isdigit() and int(args[0]) > 0):
        raise Undecidable("loop:?:0")
    raise LoopControl(name, min(int(args[0]) if args else 1, s.loops))
