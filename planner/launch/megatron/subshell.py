"""``( LIST )`` in a launch script, run as bash runs it (bash(1) "Compound Commands": "list is
executed in a subshell environment"; "COMMAND EXECUTION ENVIRONMENT": "Changes made to the
subshell environment cannot affect the shell's execution environment"): LIST is read on a copy of
the script's state, so its assignments, ``cd`` and ``set`` stay there, while the commands it runs
(a training command inside, ``(cd "$DIR" && torchrun ...)``) are the script's; an ``exit`` in it
ends only the subshell, whose status is the exit's (``exit 0`` succeeds) or else its last list's,
for ``&&`` / ``||`` after it and for ``set -e`` (:mod:`.shell_exit`); an exit in a branch that
cannot be known makes that status unknown (under ``set -e`` the script may stop there).

A subshell on one logical line is :func:`subshell`'s; one whose ``(`` starts a line and whose
``)`` closes on a later one is :func:`read_subshell`'s (its lines, as bash reads them: the
parentheses of ``$( )`` and of a ``case`` pattern ``PATTERN)`` do not close it), followed by
redirections, ``&&`` / ``||`` / ``|`` and the rest of a list, ``;`` or ``&`` and another command.
One that never closes, or with a word after its ``)``, is an error naming its line, as bash's
syntax error.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from planner.inputs.errors import SpecError
from planner.launch.megatron.shell_exit import launch_after_maybe_stop
from planner.launch.megatron.shell_state import Exit, Script
from planner.launch.megatron.shell_text import Logical, unquoted

__all__ = ["Subshell", "opened_after", "read_subshell", "run_subshell", "subshell"]


def subshell(statement: str) -> tuple[str, str, str] | None:
    """(LIST, the operator after its ``)``: ``""``, ``&&``, ``||`` or ``|``, the text after the
    operator) when ``statement`` is ``( LIST )`` (not the arithmetic ``(( ))``), followed by nothing
    but redirections or by one of those operators; else None."""
    if not statement.startswith("(") or statement.startswith("(("):
        return None
    depth = 0
    for i, ch in unquoted(statement):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ")" and depth == 0:
            break
    else:
        return None
    inner, after = statement[1:i].strip(), statement[i + 1 :].strip()
    found = _after(after, ("&&", "||", "|"))
    return (inner, *found) if found is not None else None


def _after(text: str, ops: tuple[str, ...]) -> tuple[str, str] | None:
    """(the operator, the text after it) that follows a subshell's ``)`` (``""`` when nothing but
    redirections does), or None when something else does; ``ops`` in the order they are tried
    (``&&`` before ``&``)."""
    text = text[_REDIRECTIONS.match(text).end() :]
    if not text:
        return "", ""
    for op in ops:
        if text.startswith(op) and not text.startswith("|&"):
            return op, text[len(op) :].strip()
    return None


_REDIRECTIONS = re.compile(
    r"(?:(?:\d*|&)(?:>>|>&|>\||<&|<>|>|<)\s*(?:'[^']*'|\"[^\"]*\"|[^\s|&;<>'\"])+\s*)*"
)
"""Redirections after a subshell's ``)`` (``> log``, ``2>&1``, ``&>>"$LOG"``): they change none of
its words (bash(1) "Redirection")."""


class Subshell(NamedTuple):
    """A subshell over several lines (:func:`read_subshell`)."""

    body: list[Logical]
    """LIST's lines (the text after ``(`` and before ``)`` on theirs)."""
    shown: str
    """LIST on one line, ``( A; B )``, for messages."""
    op: str
    """What follows the ``)``: ``""``, ``&&``, ``||``, ``|``, ``;`` or ``&``."""
    rest: str
    """The text after that operator."""
    line: int
    """The line of its ``(``."""
    end: int
    """The line of its ``)``."""


def read_subshell(first: Logical, lines: Iterator[Logical]) -> Subshell | None:
    """The subshell whose ``(`` starts ``first`` and whose ``)`` closes on a later line read from
    ``lines``, or None when ``first`` is not one (it closes on its own line, or is ``((``)."""
    text = first.text.strip()
    if not text.startswith("(") or text.startswith("(("):
        return None
    parens = _Parens()
    if parens.close(text) is not None or parens.depth <= 0:
        return None
    body = [Logical(text[1:].strip(), first.number, first.heredoc)] if text[1:].strip() else []
    for logical in lines:
        line = logical.text.strip()
        close = parens.close(line)
        if close is None:
            if line:
                body.append(logical)
            continue
        if line[:close].strip():
            body.append(Logical(line[:close].strip(), logical.number, logical.heredoc))
        found = _after(line[close + 1 :].strip(), ("&&", "||", "|", ";", "&"))
        if found is None:
            raise SpecError(
                f"line {logical.number}: {line[close + 1 :].strip()!r} after the ')' of the subshell opened on "
                f"line {first.number} (bash: syntax error near unexpected token)"
            )
        shown = "( " + "; ".join(b.text.strip() for b in body) + " )"
        return Subshell(body, shown, *found, first.number, logical.number)
    raise SpecError(
        f"line {first.number}: the subshell opened here is never closed (no closing ')'; bash: unexpected "
        "end of file)"
    )


def opened_after(text: str) -> tuple[str, str, str] | None:
    """(the list before it, ``&&`` / ``||`` / ``|``, the text after its ``(``) when ``text`` opens
    a subshell after an operator and leaves it open at the end of the line (``cd "$DIR" && (``,
    its list on the lines after); else None."""
    depth, at = 0, None
    for i, ch in unquoted(text):
        if ch == "(" and text[i - 1 : i] != "$" and not text.startswith("((", i):
            before = text[:i].rstrip()
            op = next((o for o in ("&&", "||", "|") if before.endswith(o)), None)
            if depth == 0 and op is not None and not before.endswith("|&"):
                at = (before[: -len(op)].rstrip(), op, i)
            depth += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                at = None
    if at is None or depth <= 0 or not at[0]:
        return None
    prefix, op, i = at
    return prefix, op, text[i + 1 :]


class _Parens:
    """The depth of a subshell's parentheses over its lines, outside quotes: ``(`` opens, ``)``
    closes, except the ``)`` of a ``case`` pattern (at the depth its ``case`` stands at, before
    its ``esac``)."""

    def __init__(self) -> None:
        self.depth = 0
        self.cases: list[int] = []

    def close(self, text: str) -> int | None:
        """The index of the ``)`` in ``text`` that closes the subshell, None when none does."""
        for i, ch in unquoted(text):
            if _word_at(text, i, "case"):
                self.cases.append(self.depth)
            elif _word_at(text, i, "esac") and self.cases:
                self.cases.pop()
            elif ch == "(":
                self.depth += 1
            elif ch == ")" and not (self.cases and self.cases[-1] == self.depth):
                self.depth -= 1
                if self.depth == 0:
                    return i
        return None


def _word_at(text: str, i: int, word: str) -> bool:
    """Whether the word ``word`` stands at ``text[i]`` (a command word: after a blank, ``;``,
    ``(``, ``&``, ``|`` or the start)."""
    end = i + len(word)
    return (
        text.startswith(word, i)
        and (i == 0 or text[i - 1] in " \t;(&|")
        and (end == len(text) or text[end] in " \t;)&|")
    )


def run_subshell(
    body: list[Logical], s: Script, read_lines: Callable[[list[Logical], Script], None]
) -> bool | str:
    """LIST (``body``, its lines) run in a subshell of ``s`` (``read_lines`` reads it): the words of the commands it runs join ``s``'s, nothing else it changes does (the
    files and calls it counts do, against planner's bounds); its status."""
    child = copy.deepcopy(s)
    child.words, child.stop, child.maybe_stop, child.loops = [], None, None, 0
    try:
        read_lines(body, child)
        status = child.status
    except Exit as stop:
        status = _exit_status(stop.why, child.status)
    launch_after_maybe_stop(child)  # a training command after a stop the subshell may make
    if child.maybe_stop is not None and status is not False:
        status = child.maybe_stop.unknown  # it may end there, with a status planner cannot know
    s.words += child.words
    s.sourced, s.sourced_bytes, s.calls, s.loop_runs = (
        child.sourced,
        child.sourced_bytes,
        child.calls,
        child.loop_runs,
    )
    s.assumed |= child.assumed
    return status


def _exit_status(why: str, last: bool | str) -> bool | str:
    """A subshell's status when it stops on ``why`` (:class:`.shell_state.Exit`): ``exit`` alone
    and ``exec COMMAND`` give the last list's ``last``, ``exit 0`` success, any other exit or stop failure."""
    if why == "exit" or why.startswith("exec "):
        return last  # exec COMMAND: the command's status (.shell_exit.exec_replaces)
    return why == "exit 0"
