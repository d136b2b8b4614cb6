"""``for NAME in WORDS; do ...; done`` in a launch script, run as bash runs it when its words are
known (bash(1) "Compound Commands": "The list of words following in is expanded, generating a list
of items. The variable name is set to each element of this list in turn, and list is executed each
time"; ``for NAME; do`` iterates over ``"$@"``): the body is read once per word with NAME set to
it, and NAME keeps the last word after the loop, as in bash.

A loop is left to :mod:`.shell`'s undeterminable branch (its body may run any number of times;
what it assigns is unknown, a flag needing it an error naming the loop's line) when it cannot be
run here: a word list that holds an unresolved value, more than :data:`MAX_ITERATIONS` words,
``break`` or ``continue`` in the body, a redirection or pipe after ``done`` (``done < FILE``), or
text after ``done`` on its line; ``while``, ``until``, ``select`` and the arithmetic
``for (( ... ))`` always are (their conditions are run-time).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.launch.megatron.expansion import expand, unresolved_in
from planner.launch.megatron.shell_state import Script
from planner.launch.megatron.shell_text import Logical, statements

MAX_ITERATIONS = 4096
"""Words a ``for`` loop is run over at most; a longer list is left undeterminable."""

_FOR = re.compile(r"^for\s+([A-Za-z_]\w*)(\s+in(?:\s+(.*?))?)?\s*$")
"""``for NAME in WORDS`` (the words may be empty) or ``for NAME`` (over ``"$@"``)."""
_OPENERS = ("for", "while", "until", "select")
_STOPS = ("break", "continue")


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
class ForLoop:
    name: str
    words: str | None
    """The text after ``in`` (None: ``for NAME``, over ``"$@"``)."""
    body: list[Logical]


def _first(statement: str) -> str:
    return statement.split(None, 1)[0] if statement.strip() else ""


def read_for(logical: Logical, lines: Lines) -> ForLoop | None:
    """The ``for`` loop that starts at ``logical`` with its body (the following lines read from
    ``lines`` up to its ``done``), or None (``lines`` left where they were) when it is not a loop
    this module runs (the module docstring)."""
    parts = statements(logical.text.strip())
    m = _FOR.match(parts[0]) if parts else None
    if m is None:
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
            if word in _STOPS:
                lines.rewind(mark)
                return None
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
                    return ForLoop(m.group(1), (m.group(3) or "") if m.group(2) else None, body)
            if st:
                kept.append(st)
        if kept:
            body.append(Logical("; ".join(kept), number, heredoc))
        nxt = next(lines, None)
        if nxt is None:
            lines.rewind(mark)
            return None
        current = (statements(nxt.text.strip()), nxt.number, nxt.heredoc)


def loop_words(loop: ForLoop, s: Script) -> list[str] | None:
    """The items the loop runs over (bash's expansion and word splitting of the list), or None
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


def run_for(
    loop: ForLoop, items: list[str], s: Script, read_lines: Callable[[list[Logical], Script], None]
) -> None:
    """The body read once per item with the loop's variable set to it (bash keeps the last)."""
    for item in items:
        s.scalars[loop.name] = item
        read_lines(loop.body, s)
