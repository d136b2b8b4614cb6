"""The shell a Megatron launch script is written in, as far as planning needs: a bash script's own
variable assignments resolved into the words of the ``pretrain_gpt.py`` command.

Resolved (bash(1) "Parameter Expansion", "Arrays", "Arithmetic Expansion"): ``NAME=value``,
``export NAME=value``, ``declare``/``readonly`` prefixes, ``NAME=( ... )`` and ``NAME+=( ... )``
arrays over several lines, ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``,
``${NAME:=default}``, ``"${NAME[@]}"``/``${NAME[*]}``, integer ``$(( ... ))`` over resolved
names, ``bash -c '...' name args`` (the string re-split with ``"$@"`` bound to the args),
``unset NAME``, ``set -a`` (allexport), ``cd``/``pushd``/``popd`` and ``source FILE`` / ``. FILE``
(bash(1) "SHELL BUILTIN COMMANDS": the file read and run in the same shell, its assignments the
script's; :func:`.sourcing.source_file`). A reference nothing in the script defines becomes a marker that names
it, so a flag whose value needs it is an error naming the variable; command substitution
``$( ... )`` is never run, except that the pure path commands of :func:`.paths.path_command`
(``$(dirname "$0")``, ``$(cd DIR && pwd)``) give the path they print. The expansion of a word
is :mod:`.expansion`'s; this module reads the compound commands (``if``, ``case``, loops, brace
groups, function definitions), split from the text by :mod:`.shell_text`, into a
:class:`.shell_state.Script`, and :mod:`.shell_commands` the simple commands and lists inside them
(assignments, builtins, sources); :mod:`.conditions` evaluates the tests and :mod:`.shell_builtins`
runs ``cd`` and ``envsubst``. Functions and their
calls (positional parameters, ``local``, ``return``, ``shift``) are :mod:`.functions`', the
assignments (``declare -A``, ``local -n``, ``NAME[KEY]=``) :mod:`.assignments`', an ``sbatch <<EOF``
job script :mod:`.heredoc`'s, the file ``sbatch FILE`` or ``bash FILE`` runs :mod:`.child_scripts`'; ``for``, ``while`` and ``until`` loops with ``break`` /
``continue`` run where what they run over is known (:mod:`.loops`), other loops are read as an
undeterminable ``if``; ``(( ... ))`` and ``let`` are :mod:`.shell_arithmetic`'s, ``( LIST )`` (on
one line or several) :mod:`.subshell`'s. Brace groups ``{ ...; }`` (alone or after ``&&`` /
``||``) are read as branches on the list before them; ``exit``, ``set -e``, ``set -u`` and ``pipefail`` stop the script where bash stops it
(:mod:`.shell_exit`); a ``source``, call or job script in a branch that cannot be known is
:mod:`.speculative`'s.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.launch.megatron.conditions import condition, condition_text
from planner.launch.megatron.expansion import (
    ROOT_KEY,
    SLURM_KEY,
    Required,
    Unbound,
    YamlReadError,
    expand_word,
    unresolved_in,
)
from planner.launch.megatron.functions import Function, bind, definition, header, preset_arguments
from planner.launch.megatron.loops import Lines, read_loop, run_loop
from planner.launch.megatron.shell_commands import run_statement, subshell_list, undetermined
from planner.launch.megatron.shell_exit import Exit, nounset_probe, required, unbound
from planner.launch.megatron.shell_state import NAME, Script
from planner.launch.megatron.shell_text import (
    SEPARATORS,
    Logical,
    is_separator,
    logical_lines,
    redirections,
    statements,
)
from planner.launch.megatron.sourcing import MAX_SOURCE_DEPTH
from planner.launch.megatron.speculative import maybe
from planner.launch.megatron.subshell import Subshell, opened_after, read_subshell

__all__ = [
    "MAX_SOURCE_DEPTH",
    "SEPARATORS",
    "Script",
    "is_separator",
    "read_script",
    "redirections",
    "unresolved_in",
]

_KEYWORDS = (
    "if",
    "elif",
    "else",
    "fi",
    "then",
    "case",
    "esac",
    "while",
    "until",
    "for",
    "select",
    "do",
    "done",
)
_TESTS = ("[", "[[", "test", "true", "false", ":", "!")
"""Commands whose status :func:`.conditions.condition` evaluates (the others are not run)."""
_LOOPS = ("while", "until", "for", "select")
"""Loops, read as an ``if`` whose condition cannot be known (their body may run any number of times)
where :mod:`.loops` cannot run them."""


@dataclass
class _Branch:
    """One ``if`` being read: whether the branch being read runs, whether one already ran, and
    (``if:NAME:LINE``) why it cannot be known when the condition is undeterminable."""

    active: bool
    taken: bool
    unknown: str | None = None
    case: str | None = None
    """A ``case``: the word its patterns are matched against (None for an ``if``)."""
    arm: bool = False
    """Inside a ``case`` arm (after its ``PATTERN)``, before its ``;;``)."""
    group: bool = False
    """A brace group ``{ ...; }``, alone or after ``&&`` / ``||`` (closed by ``}``)."""


def read_script(text: str, preset: dict[str, str] | None = None, path: str | Path | None = None) -> Script:
    """Read a bash script (or a plain arguments file): assignments are recorded, every other
    line's words are expanded and kept for the flag parser. ``preset`` is the environment the script
    starts with (``planner check --set NAME=VALUE``); its own assignments override it, as bash's do.
    ``path`` is the script's file: ``$0`` and ``${BASH_SOURCE[0]}`` are its absolute path, ``$PWD``
    (unless ``preset`` gives it) its directory, where a relative ``source FILE`` is found (see
    :mod:`.paths`). The script's positional parameters are those ``preset`` gives
    (:func:`.functions.positional_parameters`, ``planner check --arg``), else none.

    ``if``/``elif``/``else``/``fi`` are followed on conditions the script (or ``preset``)
    determines (:func:`condition`): only the branch bash runs is read. A condition that cannot be
    known makes every variable its branches assign a marker naming the condition's variable, and a
    branch that runs the training script an error naming it."""
    s = Script()
    s.scalars.update(preset or {})
    s.exported.update(name for name in preset or {} if NAME.fullmatch(name))  # inherited: exported
    if re.search(r"^#SBATCH", text, re.M):
        s.scalars[SLURM_KEY] = "1"  # a Slurm batch script: Slurm sets SLURM_* (expansion.SLURM_KEY)
    if path is not None:
        full = os.path.abspath(path)
        s.root = os.path.realpath(os.path.dirname(full))
        s.scalars[ROOT_KEY] = s.root
        s.scalars["0"] = full  # not a name an assignment can set
        s.scalars.setdefault("PWD", os.path.dirname(full))
        s.arrays["BASH_SOURCE"] = [full]
    bind(s, preset_arguments(preset or {}))  # bash SCRIPT ARG ...: none unless --arg gives them
    try:
        _read(text, s)
    except Exit as stop:
        s.stop = stop  # bash runs nothing after it (shell_exit)
    return s


def _read(text: str, s: Script) -> None:
    """The statements of one file (the script or a file it sources) read into ``s``."""
    _read_lines(logical_lines(text), s)


def _read_lines(lines: list[Logical], s: Script) -> None:
    """Logical lines (a file's, or a function's body) read into ``s``; an ``if`` or ``case``
    opened in them must close in them, as bash requires. A function definition is recorded (only
    when the branch it is in runs; one in a branch that cannot be known is unknown)."""
    stack: list[_Branch] = []
    it = Lines(lines)
    for logical in it:
        stripped, number = logical.text.strip(), logical.number
        if not stripped:
            continue
        if stripped.startswith("for(("):  # the arithmetic for written without a space
            stripped = "for " + stripped[3:]
            logical = logical._replace(text=stripped)
        if stripped.split(None, 1)[0] in ("for", "while", "until") and all(b.active for b in stack):
            mark = it.mark()
            loop = read_loop(logical, it)
            if loop is not None:
                s.loop_unknown = run_loop(loop, s, _read_lines, _if_condition)
                if s.loop_unknown is None:
                    continue
            it.rewind(mark)  # read as an undeterminable branch (loops.py)
        head = header(stripped)
        if head is not None:
            fn = definition(head[0], head[1], number, it)
            unknown = next((b.unknown for b in stack if b.unknown), None)
            if all(b.active for b in stack):
                s.functions[fn.name] = fn
            elif unknown and all(b.active or b.unknown for b in stack):
                s.functions[fn.name] = unknown
            continue
        sub = read_subshell(logical, it) if stripped.startswith("(") else None
        mid = opened_after(stripped) if sub is None and "(" in stripped else None
        if mid is not None:  # "cd DIR && (" with its list on the lines after
            sub = read_subshell(Logical("(" + mid[2], number, logical.heredoc), it)
        s.heredoc = logical.heredoc if sub is None else None
        try:
            if mid is not None:
                _after_list(mid[0], mid[1], sub, s, stack)
            elif sub is None:
                nounset_probe(
                    lambda probe: _logical(stripped, number, probe, copy.deepcopy(stack)), number, s
                )
                _logical(stripped, number, s, stack)
            else:
                _subshell(sub, s, stack)
        except Unbound as exc:
            raise unbound(exc, number if sub is None else sub.end, s) from None
        except Required as exc:
            raise required(exc, number if sub is None else sub.end) from None
    if stack:
        raise SpecError(
            "the script ends inside a { group (no closing })"
            if stack[-1].group
            else "the script ends inside an if (no closing fi)"
        )


def _subshell(sub: Subshell, s: Script, stack: list[_Branch]) -> None:
    """A subshell over several lines (:func:`.subshell.read_subshell`): run where the branch
    around it runs, on a copy of the state where that cannot be known (:func:`.speculative.maybe`:
    a training command inside is an error naming the branch), not at all where it does not run; a
    command after its ``;`` or ``&`` is read as the rest of its line."""
    op = "" if sub.op == ";" else sub.op
    unknown = next((b.unknown for b in stack if b.unknown), None)
    if all(b.active for b in stack):
        subshell_list(sub.body, sub.shown, op, sub.rest, sub.end, s, _read_lines)
    elif unknown and all(b.active or b.unknown for b in stack):
        maybe(
            lambda scratch: subshell_list(sub.body, sub.shown, op, sub.rest, sub.end, scratch, _read_lines),
            sub.line,
            s,
            unknown,
        )
    if sub.op in (";", "&") and sub.rest:
        _logical(sub.rest, sub.end, s, stack)


def _after_list(prefix: str, op: str, sub: Subshell, s: Script, stack: list[_Branch]) -> None:
    """``LIST && (`` (``||``, ``|``) with the subshell's list on the lines after: LIST runs first
    (``set -e`` ignored before ``&&`` / ``||``), then the subshell when its status says so
    (:func:`_subshell`; both sides of a ``|``), and what follows its ``)`` as bash's list goes on:
    after ``&&`` / ``||`` on the status of what ran last; a status that cannot be known makes the
    subshell a branch that cannot be known."""
    if not all(b.active for b in stack):
        _conditional(prefix, sub.line, s, stack)
        _subshell(sub, s, stack)
        return
    s.errexit_ignored += op != "|"
    try:
        run_statement(prefix, sub.line, s, _read_lines)
    finally:
        s.errexit_ignored -= op != "|"
    status = s.status
    if op == "|":
        runs: bool | str = True
    else:
        runs = status if op == "&&" else (not status if isinstance(status, bool) else status)
    if runs is True:
        _subshell(sub, s, stack)
        return
    if isinstance(runs, str):
        _subshell(sub._replace(op="", rest=""), s, [*stack, _Branch(False, False, runs)])
        s.status = runs
    else:
        s.status = status
    if sub.rest and sub.op in (";", "&"):
        _logical(sub.rest, sub.end, s, stack)
    elif not sub.rest or sub.op not in ("&&", "||"):
        return  # "( LIST ) | CMD": the pipeline the list skipped
    elif isinstance(s.status, str):
        undetermined(sub.rest, sub.end, s, s.status, _read_lines)
    else:  # the list goes on with the status of LIST (the subshell skipped)
        run_statement(f"{'true' if s.status else 'false'} {sub.op} {sub.rest}", sub.end, s, _read_lines)


_GROUP = re.compile(r"(?:^|[\s;])[{}](?=[\s;]|$)")
"""A ``{`` or ``}`` word: a brace group opens or closes on the line (bash(1) "Compound Commands")."""


def _logical(stripped: str, number: int, s: Script, stack: list[_Branch]) -> None:
    """One logical line (not a function definition) read into ``s``."""
    first = stripped.split(None, 1)[0].rstrip(";")
    group = _GROUP.search(stripped) is not None
    parts = statements(stripped) if ";" in stripped else [stripped]
    keyword = any(p.split(None, 1)[0].rstrip(";") in _KEYWORDS for p in parts[1:])  # "A=1; if ...; fi"
    if first in _KEYWORDS or stack or group or keyword:
        split = first in _KEYWORDS or group or keyword or (stack and stack[-1].case is not None)
        for statement in statements(stripped) if split else [stripped]:
            _conditional(statement, number, s, stack)
        return
    try:
        for statement in parts:
            run_statement(statement, number, s, _read_lines)
    except YamlReadError as exc:
        raise SpecError(f"line {number}: {exc}") from None


def _conditional(statement: str, number: int, s: Script, stack: list[_Branch]) -> None:
    """One statement inside (or opening or closing) an ``if`` or a ``case``."""
    first, _, rest = statement.partition(" ")
    rest = rest.strip()
    if stack and stack[-1].case is not None and _case_statement(statement, first, number, s, stack):
        return
    if first == "}" and stack and stack[-1].group:
        stack.pop()
        return
    opened = _group_open(statement)
    if opened is not None:
        _open_group(*opened, number, s, stack)
        return
    if first == "case":
        m = re.match(r"^(.*\S)\s+in$", rest)
        if not m:
            raise SpecError(f"line {number}: expected 'case WORD in'")
        word = expand_word(m.group(1), s.scalars, s.arrays)
        name = unresolved_in(word)
        outer = next((b.unknown for b in stack if b.unknown), None)
        if not all(b.active for b in stack):
            maybe = outer is not None and all(b.active or b.unknown for b in stack)
            stack.append(_Branch(False, True, outer if maybe else None, case=word))
        elif name is not None:
            blamed = name if NAME.fullmatch(name) else "?"
            stack.append(_Branch(False, False, f"if:{blamed}:{number}", case=word))
        else:
            stack.append(_Branch(False, False, None, case=word))
        return
    if first == "then" or first == "do":
        if rest:
            _conditional(rest, number, s, stack)
        return
    enclosing = all(b.active for b in stack)
    if first == "if" or first in _LOOPS:
        if not enclosing:
            # inside a branch that does not run: none of this if runs; inside one that may: all may
            outer = next((b.unknown for b in stack if b.unknown), None)
            maybe = outer is not None and all(b.active or b.unknown for b in stack)
            stack.append(_Branch(False, True, outer if maybe else None))
            return
        if first == "if":
            known = _if_condition(rest, number, s)
        else:
            known, s.loop_unknown = s.loop_unknown or f"loop:?:{number}", None
        if isinstance(known, str) and first == "if" and _runs_command(rest):
            s.assumed.add(known)  # ``if COMMAND``: a stop that hangs on its status is not taken
        if isinstance(known, str):
            stack.append(_Branch(False, False, known))
        else:
            stack.append(_Branch(known, known))
        return
    if first in ("elif", "else", "fi") and not stack:
        raise SpecError(f"line {number}: {first} without an if")
    if first == "done" and not stack:
        raise SpecError(f"line {number}: done without a loop")
    if first == "fi" or first == "done":
        stack.pop()
        return
    if first in ("elif", "else"):
        top = stack[-1]
        if top.unknown or top.taken or not all(b.active for b in stack[:-1]):
            top.active = False
        elif first == "else":
            top.active = top.taken = True
        else:
            known = _if_condition(rest, number, s)
            if isinstance(known, str):
                top.unknown, top.active = known, False
            else:
                top.active = top.taken = known
        if first == "else" and rest:
            _conditional(rest, number, s, stack)
        return
    unknown = next((b.unknown for b in stack if b.unknown), None)
    if unknown and all(b.active or b.unknown for b in stack):
        undetermined(statement, number, s, unknown, _read_lines)
    elif all(b.active for b in stack):
        run_statement(statement, number, s, _read_lines)


def _group_open(statement: str) -> tuple[str, str | None, str] | None:
    """(the list before it, ``&&`` / ``||`` or None, the text after it) when ``statement`` opens a
    brace group (bash(1) "Compound Commands": ``{ list; }``): a ``{`` word outside quotes, first or
    after a final ``&&`` / ``||``."""
    quote = None
    for i, ch in enumerate(statement):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif (
            ch == "{"
            and (i == 0 or statement[i - 1].isspace())
            and statement[i + 1 : i + 2] in ("", " ", "\t")
        ):
            before, rest = statement[:i].rstrip(), statement[i + 1 :].strip()
            if not before:
                return "", None, rest
            op = before[-2:]
            return (before[:-2].rstrip(), op, rest) if op in ("&&", "||") else None
    return None


def _open_group(prefix: str, op: str | None, rest: str, number: int, s: Script, stack: list[_Branch]) -> None:
    """A brace group opened: it runs when the branch around it runs and, after ``LIST &&`` (``||``),
    when LIST succeeds (fails); LIST's status is :func:`.shell_commands.run_statement`'s (set -e
    ignored there, as bash ignores it before ``&&`` / ``||``). A status that cannot be known makes the group a branch
    that cannot be known, as an ``if`` on it."""
    if not all(b.active for b in stack):
        outer = next((b.unknown for b in stack if b.unknown), None)
        maybe = outer is not None and all(b.active or b.unknown for b in stack)
        stack.append(_Branch(False, True, outer if maybe else None, group=True))
    elif not prefix:
        stack.append(_Branch(True, True, group=True))
    else:
        s.errexit_ignored += 1
        try:
            run_statement(prefix, number, s, _read_lines)
        finally:
            s.errexit_ignored -= 1
        runs = s.status if op == "&&" else (not s.status if isinstance(s.status, bool) else s.status)
        stack.append(
            _Branch(False, False, runs, group=True)
            if isinstance(runs, str)
            else _Branch(runs, runs, group=True)
        )
    if rest:
        _conditional(rest, number, s, stack)


def _if_condition(text: str, number: int, s: Script) -> bool | str:
    """The value of the condition ``text`` of an ``if`` / ``elif`` on line ``number``: a call of a
    function the script defined (``if setup; then``, ``if ! is_slurm; then``) is run, as bash runs
    it (``set -e`` ignored: bash(1) "set -e": not "part of the test in an if statement"), and its
    status is the condition; any other condition is evaluated by :func:`.conditions.condition`."""
    command = condition_text(text)
    words = command.split()
    negated = words[:1] == ["!"]
    name = words[1] if negated and len(words) > 1 else (words[0] if words else "")
    if not isinstance(s.functions.get(name), Function):
        return condition(text, number, s)
    s.errexit_ignored += 1
    try:
        run_statement(command[1:].strip() if negated else command, number, s, _read_lines)
    finally:
        s.errexit_ignored -= 1
    status = s.status
    return (not status) if negated and isinstance(status, bool) else status


def _runs_command(condition_text: str) -> bool:
    """Whether an ``if`` condition is a command planner does not run (not a test, maybe negated)."""
    words = condition_text.split()
    words = words[1:] if words[:1] == ["!"] else words
    return bool(words) and words[0] not in _TESTS and words[0] != "let" and not words[0].startswith("((")


def _case_statement(statement: str, first: str, number: int, s: Script, stack: list[_Branch]) -> bool:
    """A statement of a ``case`` (bash(1) "Compound Commands": ``PATTERN[|PATTERN]) list ;;``,
    patterns matched as pathname patterns, the first arm that matches runs); False when it is an
    ordinary statement of the arm being read."""
    top = stack[-1]
    if first == "esac":
        stack.pop()
        return True
    if not top.arm:
        m = re.match(r"^\(?\s*([^)]*?)\s*\)\s*(.*)$", statement, re.S)
        if not m:
            raise SpecError(f"line {number}: expected a case pattern 'PATTERN)' or esac, got {statement!r}")
        patterns, body = m.groups()
        top.arm = True
        if top.unknown or top.taken or not all(b.active for b in stack[:-1]):
            top.active = False
        else:
            words = [expand_word(p.strip(), s.scalars, s.arrays) for p in patterns.split("|")]
            top.active = top.taken = any(fnmatch.fnmatchcase(top.case, w) for w in words)
        if body:
            _conditional(body, number, s, stack)
        return True
    if statement.endswith(";;"):
        body = statement[:-2].strip()
        if body:
            _conditional(body, number, s, stack)
        top.arm, top.active = False, False
        return True
    return False
