"""``( LIST )`` in a launch script, run as bash runs it (bash(1) "Compound Commands": "list is
executed in a subshell environment"; "COMMAND EXECUTION ENVIRONMENT": "Changes made to the
subshell environment cannot affect the shell's execution environment"): LIST is read on a copy of
the script's state, so its assignments, ``cd`` and ``set`` stay there, while the commands it runs
(a training command inside, ``(cd "$DIR" && torchrun ...)``) are the script's; an ``exit`` in it
ends only the subshell, whose status is the exit's (``exit 0`` succeeds) or else its last list's,
for ``&&`` / ``||`` after it and for ``set -e`` (:mod:`.shell_exit`); an exit in a branch that
cannot be known makes that status unknown (under ``set -e`` the script may stop there). A subshell on one logical
line is run; one over several lines is read as before (its words kept as they are).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from planner.launch.megatron.shell_exit import launch_after_maybe_stop
from planner.launch.megatron.shell_state import Exit, Script
from planner.launch.megatron.shell_text import Logical, unquoted

__all__ = ["run_subshell", "subshell"]


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
    after = after[_REDIRECTIONS.match(after).end() :]
    if not after:
        return inner, "", ""
    for op in ("&&", "||", "|"):
        if after.startswith(op) and not after.startswith("|&"):
            return inner, op, after[len(op) :].strip()
    return None


_REDIRECTIONS = re.compile(
    r"(?:(?:\d*|&)(?:>>|>&|>\||<&|<>|>|<)\s*(?:'[^']*'|\"[^\"]*\"|[^\s|&;<>'\"])+\s*)*"
)
"""Redirections after a subshell's ``)`` (``> log``, ``2>&1``, ``&>>"$LOG"``): they change none of
its words (bash(1) "Redirection")."""


def run_subshell(
    inner: str, number: int, s: Script, read_lines: Callable[[list[Logical], Script], None]
) -> bool | str:
    """LIST run in a subshell of ``s`` on line ``number`` (``read_lines`` reads it): the words of
    the commands it runs join ``s``'s, nothing else it changes does (the files and calls it counts
    do, against planner's bounds); its status."""
    child = copy.deepcopy(s)
    child.words, child.stop, child.maybe_stop, child.loops = [], None, None, 0
    try:
        read_lines([Logical(inner, number)], child)
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
    gives the last list's ``last``, ``exit 0`` success, any other exit or stop failure."""
    if why == "exit":
        return last
    return why == "exit 0"
