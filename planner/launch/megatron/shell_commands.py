"""The simple commands of a launch script and the lists they form (bash(1) "SIMPLE COMMAND
EXPANSION", "Lists", "SHELL BUILTIN COMMANDS"), read into a :class:`.shell_state.Script`:
an assignment is recorded (:mod:`.assignments`), any other command's words are expanded
(:mod:`.expansion`) and kept for the flag parser, with the builtins planner follows (``source``,
``cd``, ``set``, ``exit``, ``return``, ``shift``, ``break`` / ``continue``, ``envsubst``, a call of
a function the script defined) run on the state instead; ``( LIST )`` on one line is
:mod:`.subshell`'s. A statement in a branch whose condition cannot be known is
:func:`undetermined`'s. :mod:`.shell` reads the compound commands (``if``, ``case``, loops, brace
groups) around these and passes its reader of logical lines (``read_lines``) down, for what a
command reads in turn: a sourced file, a function's body, a job script, a subshell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from planner.inputs.errors import SpecError
from planner.launch.megatron.assignments import ASSIGN, PREFIXES, assign, unset
from planner.launch.megatron.child_scripts import SHELLS, child_script_words, job_script, script_command
from planner.launch.megatron.conditions import command_status, with_pattern_marks
from planner.launch.megatron.expansion import UNRESOLVED, Required, Unbound, expand
from planner.launch.megatron.functions import Return, call, make_local, shift
from planner.launch.megatron.heredoc import JOB_READERS, here_operator
from planner.launch.megatron.loops import Undecidable, loop_control
from planner.launch.megatron.shell_arithmetic import (
    arithmetic_maybe,
    is_arithmetic,
    protect,
    run_arithmetic,
    shown,
)
from planner.launch.megatron.shell_builtins import change_directory, envsubst, inner_commands
from planner.launch.megatron.shell_exit import (
    after_list,
    after_pipefail,
    exec_replaces,
    exit_builtin,
    maybe_stop,
    pipeline_status_of,
    set_builtin,
    set_maybe,
)
from planner.launch.megatron.shell_printf import printf_assign, printf_maybe
from planner.launch.megatron.shell_state import Exit, Script, branch_of
from planner.launch.megatron.shell_text import (
    NOT_LAUNCHERS,
    SEPARATORS,
    Logical,
    and_or_segments,
    is_separator,
    logical_lines,
    split_words,
)
from planner.launch.megatron.sourcing import source_file
from planner.launch.megatron.speculative import maybe, training_in_unknown
from planner.launch.megatron.subshell import run_subshell, subshell

__all__ = ["ReadLines", "run_statement", "subshell_list", "undetermined"]

ReadLines = Callable[[list[Logical], Script], None]
""":mod:`.shell`'s reader: logical lines (a file's, a function's body, a subshell's list) read
into a script's state."""

_ASSIGN_LINE = re.compile(
    r"^(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?[A-Za-z_]\w*(?:\[[^\]]*\])?\+?="
)
"""A line that starts with an assignment (its words, expanded unsplit, decide: :func:`.assignments.assign`)."""
_BUILTINS = (
    "source",
    ".",
    "cd",
    "pushd",
    "popd",
    "set",
    "envsubst",
    "return",
    "shift",
    "exit",
    "break",
    "continue",
    "let",
)
"""Commands :func:`_builtin` runs on the script's state instead of keeping their words."""


def _text_reader(read_lines: ReadLines) -> Callable[[str, Script], None]:
    """A reader of a whole text (a sourced file, a job script) from ``read_lines``."""
    return lambda text, s: read_lines(logical_lines(text), s)


def undetermined(statement: str, number: int, s: Script, unknown: str, read_lines: ReadLines) -> None:
    """A statement in a branch of an ``if`` whose condition cannot be known (``unknown``,
    ``if:NAME:LINE``): a variable it assigns becomes a marker naming the condition; running the
    training script there is an error naming it; any other command (an echo, an exit) is not
    read."""
    m = re.match(
        r"^(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?([A-Za-z_]\w*)(?:\[[^\]]*\])?\+?=",
        statement,
    )
    if m:
        if statement.startswith("local") and s.frames:
            make_local(s, m.group(1))
        s.scalars[m.group(1)] = UNRESOLVED.format(unknown)
        s.arrays.pop(m.group(1), None)
        s.assigned_lines[m.group(1)] = number
        return
    first = statement.split(None, 1)[0] if statement.strip() else ""
    if first == "exit":
        maybe_stop(s, number, statement, unknown)
        return
    if first in ("break", "continue") and s.loops:
        raise Undecidable(unknown)  # the loop being run: whether it goes on cannot be known
    if first == "set":
        set_maybe(statement.split()[1:], number, s, unknown)
        return
    if s.errexit is not None and first == "false" and not s.errexit_ignored:
        maybe_stop(s, number, f"set -e (line {s.errexit}) and {statement!r} fails", unknown)
        return
    # bash FILE or ./FILE: read when FILE is found
    runs_file = any(w in SHELLS or "/" in w for w in statement.split())
    if first in s.functions or first in ("return", "sbatch") or runs_file:
        try:
            words = shlex.split(expand(statement, s.scalars, s.arrays), posix=True)
        except ValueError:
            return
        except Required as exc:  # ${NAME:?} refused in a branch that may not run: a stop that may not be
            maybe_stop(s, number, f"${{{exc.name}:?}} refuses {exc.name}", unknown)
            return
        end = next((k for k, w in enumerate(words) if w in SEPARATORS), len(words))
        if first in s.functions or first in ("return", "sbatch") or script_command(words[:end], s):
            _builtin_maybe(words[:end], number, s, unknown, read_lines)
            return
    if first in ("cd", "pushd", "popd"):
        s.scalars["PWD"] = UNRESOLVED.format(unknown)
        return
    if first in ("source", "."):
        try:
            words = shlex.split(expand(statement, s.scalars, s.arrays), posix=True)
        except ValueError:
            return
        except Required as exc:
            maybe_stop(s, number, f"${{{exc.name}:?}} refuses {exc.name}", unknown)
            return
        end = next((k for k, w in enumerate(words) if w in SEPARATORS), len(words))
        _source_undetermined(words[1:end], number, s, unknown, read_lines)
        return
    if first == "let" or first.startswith("(("):
        try:
            words = shlex.split(expand(protect(statement), s.scalars, s.arrays), posix=True)
        except (ValueError, Required, Unbound):
            return
        end = next((k for k, w in enumerate(words) if w in SEPARATORS), len(words))
        arithmetic_maybe(words[:end], number, s, unknown)
        return
    if re.search(r"\.py\b", statement) and first not in NOT_LAUNCHERS:
        training_in_unknown(number, unknown)


def _source_undetermined(
    args: list[str], number: int, s: Script, unknown: str, read_lines: ReadLines
) -> None:
    """``source FILE`` in a branch that may or may not run: when FILE can be read, every variable
    it sets becomes a marker naming the branch's condition (and a training command in it an error
    naming it); a file that cannot be read there (``[ -f "$HOME/.env" ] && source``, the file on
    the cluster) is not read, as another command of that branch is not."""
    maybe(lambda scratch: source_file(args, number, scratch, _text_reader(read_lines)), number, s, unknown)


def run_statement(stripped: str, number: int, s: Script, read_lines: ReadLines) -> None:
    """One command or assignment of the script, read into ``s``."""
    s.status = True
    sub = subshell(stripped)
    if sub is not None:
        inner, op, rest = sub
        subshell_list([Logical(inner, number)], f"( {inner} )", op, rest, number, s, read_lines)
        return
    if "((" in stripped:
        stripped = protect(stripped)
    try:
        words = shlex.split(stripped.replace("\n", " "), posix=True) if "=(" not in stripped else None
    except ValueError:
        words = stripped.split()
    if words is None or _ASSIGN_LINE.match(stripped) or (words and words[0] in PREFIXES):
        if assign(stripped, number, s):
            return
    heredoc, s.heredoc = s.heredoc, None
    if heredoc is not None:
        stripped = here_operator(stripped)
    if words and words[0] == "unset":
        unset(words[1:], number, s)
        return
    segments = and_or_segments(stripped) if "&&" in stripped or "||" in stripped else [stripped]
    parts = _expanded_words(segments[0], s)  # the list's other commands: when it reaches them
    # Leading NAME=value words set the command's environment (bash(1) "Simple Command Expansion");
    # followed by no command (``X=1 && ...``) they are assignments of the list (_list_assignment).
    lead = next((k for k, w in enumerate(parts) if not ASSIGN.match(w)), len(parts))
    if lead < len(parts) and not is_separator(parts[lead]):
        for word in parts[:lead]:
            m = ASSIGN.match(word)
            s.env[m.group(1)] = m.group(3)
            s.scalars[m.group(1)] = m.group(3)
            s.assigned_lines[m.group(1)] = number
        parts = parts[lead:]
    start = len(s.words)
    ran = _run_builtins(parts, number, s, read_lines, segments[1:])
    ran = child_script_words(inner_commands(ran, s), number, s, _text_reader(read_lines))
    s.words += [(w, number) for w in ran]
    if heredoc is not None and parts and parts[0] in JOB_READERS:
        s.words += job_script(heredoc, parts, number, s, _text_reader(read_lines))
    if len(s.words) > start and not is_separator(s.words[-1][0]):
        s.words.append(
            (";", number)
        )  # the command ends here: the next statement's words are not its arguments
    replaced = exec_replaces(parts, stripped) if len(segments) == 1 else None
    if replaced is not None:
        raise Exit(number, replaced)  # the command replaces the shell: nothing after it runs


def subshell_list(
    body: list[Logical], shown: str, op: str, rest: str, number: int, s: Script, read_lines: ReadLines
) -> None:
    """``( LIST )`` (``body``, its lines; ``shown`` for messages) alone, in the background (``op``
    ``&``), or before ``&&`` / ``||`` / ``|`` and the ``rest`` of its list on line ``number``, run
    as bash runs it (:mod:`.subshell`): ``set -e`` stops the script on a subshell that fails,
    except before ``&&`` / ``||`` (where it is ignored inside the subshell too), before ``|``
    (unless ``pipefail``) and in the background (whose status is 0)."""
    if op in ("&&", "||", "&"):
        s.errexit_ignored += 1
        try:
            status = run_subshell(body, s, read_lines)
        finally:
            s.errexit_ignored -= 1
        if op == "&":
            after_list(True, True, [shown], number, s)
            return
        runs = status if op == "&&" else (not status if isinstance(status, bool) else status)
        if runs is True:
            run_statement(rest, number, s, read_lines)
        elif runs is False:
            s.status = status  # the next command is skipped, the list goes on with this status
            if rest:
                run_statement(f"{'true' if status else 'false'} {op} {rest}", number, s, read_lines)
        else:
            undetermined(rest, number, s, runs, read_lines)
            s.status = runs
        return
    status = run_subshell(body, s, read_lines)
    if op == "|":
        s.errexit_ignored += 1
        try:
            run_statement(rest, number, s, read_lines)
        finally:
            s.errexit_ignored -= 1
        status, hangs = pipeline_status_of([status, s.status], s)
        if hangs:
            after_list(status, True, [shown], number, s)
            after_pipefail([shown, "|", rest], True, number, s)
            return
    after_list(status, True, [shown], number, s)
    if isinstance(status, str) and s.errexit is not None and not s.errexit_ignored:
        maybe_stop(s, number, f"set -e (line {s.errexit}) and {shown!r} may fail", status)


def _expanded_words(text: str, s: Script) -> list[str]:
    """The words of ``text`` (one command or pipeline of a list), expanded now (:mod:`.expansion`);
    in a ``[[ A == B ]]`` test the right-hand side marked a pattern where it was written unquoted
    (:func:`.conditions.with_pattern_marks`), before expansion removes the quotes that say so."""
    if re.match(r"\s*(?:!\s+)?\[\[\s", text):  # a test: never a launch's words
        text = with_pattern_marks(text)
    expanded = expand(text.replace("\n", " "), s.scalars, s.arrays)
    try:
        return split_words(expanded)
    except ValueError:
        return expanded.split()


def _run_builtins(
    parts: list[str], number: int, s: Script, read_lines: ReadLines, pending: list[str] = ()
) -> list[str]:
    """The words of a command list with its builtins (:data:`_BUILTINS`, each at the start of a
    command of the list) run on ``s`` and left out, with the separator after them. A builtin after
    ``&&`` (``||``) runs when the pipeline before it succeeded (failed): a builtin planner ran
    succeeded, a test (``[ ]``, ``[[ ]]``, ``test``, ``true``, ``false``) is evaluated as an ``if``
    condition is (:func:`.conditions.condition`); after any other command it may or may not run
    (:func:`_builtin_maybe`). The list's status is recorded for ``set -e``
    (:func:`.shell_exit.after_list`); ``exit`` in a pipeline or in the background runs in a
    subshell and stops nothing. ``pending``: the rest of an ``&&`` / ``||`` list, unexpanded
    (:func:`.shell_text.and_or_segments`), each command's words expanded when the list reaches it,
    after the commands before it ran."""
    parts, pending = list(parts), list(pending)
    out, start, before = [], 0, None
    status: bool | str = True
    pipe: list[bool | str] = []
    pipe_runs: bool | str = True
    last_ran: bool | str = True
    last: list[str] = []
    pipeline: list[str] = []  # the words of the pipeline being read, for a message
    hangs = False  # the last pipeline's status hangs on a pipefail that may not be on
    k = -1
    while k < len(parts):
        k += 1
        if k == len(parts) and pending:
            item = pending.pop(0)
            parts += [item] if item in ("&&", "||") else _expanded_words(item, s)
            k -= 1
            continue
        if k < len(parts) and not is_separator(parts[k]):
            continue
        command, after = parts[start:k], (parts[k] if k < len(parts) else None)
        if before in ("|", "|&"):
            runs = pipe_runs
        else:
            runs = True
            if before in ("&&", "||"):
                runs = status if before == "&&" else (not status if isinstance(status, bool) else status)
            pipe, pipe_runs, pipeline = [], runs, []
        if command and (
            command[0] in _BUILTINS
            or command[0] in s.functions
            or is_arithmetic(command)
            or command[:2] == ["printf", "-v"]
        ):
            subshell = before in ("|", "|&") or after in ("|", "|&", "&")
            if command[0] == "exit" and subshell:
                st: bool | str = True
            elif runs is True:
                ignored = after in ("&&", "||")
                s.errexit_ignored += ignored
                try:
                    st = _builtin(command, number, s, read_lines)
                finally:
                    s.errexit_ignored -= ignored
            else:
                if runs is not False:
                    _builtin_maybe(command, number, s, runs, read_lines)
                st = runs
        elif command and all(ASSIGN.match(w) for w in command):
            st = _list_assignment(command, number, s, runs, read_lines)
        else:
            out += parts[start : k + 1]
            st = command_status(command, number, s) if runs is True else runs
            if isinstance(st, str) and runs is True and command[:1] not in (["["], ["[["], ["test"]):
                s.assumed.add(st)  # a command planner does not run: success, where a stop hangs on it
        pipe.append(st)
        pipeline += shown(command)
        if after not in ("|", "|&"):
            hangs = False
            if pipe_runs is True:
                status, hangs = pipeline_status_of(pipe, s)
            elif pipe_runs is not False:
                status = pipe_runs
            last_ran, last = pipe_runs, shown(command)
        else:
            pipeline.append(after)
        before, start = after, k + 1
    after_list(status, last_ran, last, number, s)
    if hangs:
        after_pipefail(pipeline, last_ran, number, s)
    return out


def _list_assignment(
    command: list[str], number: int, s: Script, runs: bool | str, read_lines: ReadLines
) -> bool | str:
    """Assignments that form a command of a list (``[ -z "$TP" ] && TP=2``,
    ``(( PP > 2 )) && MBS=1 || MBS=2``; bash(1) "Lists"): recorded as a line of them would be
    (:func:`.assignments.assign`; the words are already expanded, so each is passed quoted) when the
    command runs, each variable a marker naming the condition when whether it runs cannot be known
    (:func:`undetermined`); an assignment's status is 0."""
    if runs is False:
        return False
    for word in command:
        name, _, value = word.partition("=")
        text = f"{name}={shlex.quote(value)}"
        if runs is True:
            assign(text, number, s)
        else:
            undetermined(text, number, s, runs, read_lines)
    return True if runs is True else runs


def _builtin_maybe(command: list[str], number: int, s: Script, unknown: str, read_lines: ReadLines) -> None:
    """A builtin that may or may not run (``unknown``, ``if:NAME:LINE``): what a sourced file sets
    becomes unknown (:func:`_source_undetermined`), so does ``$PWD`` after a ``cd``."""
    if command[0] in ("source", "."):
        _source_undetermined(command[1:], number, s, unknown, read_lines)
    elif command[0] in s.functions:
        maybe(lambda scratch: call(command[0], command[1:], number, scratch, read_lines), number, s, unknown)
    elif command[0] == "exit":
        maybe_stop(s, number, " ".join(command), unknown)
    elif command[0] in ("break", "continue") and s.loops:
        raise Undecidable(unknown)
    elif command[0] == "set":
        set_maybe(command[1:], number, s, unknown)
    elif command[0] == "return" and s.frames:
        var = unknown.split(":")[1]
        raise SpecError(
            f"line {number}: return in a branch of {branch_of(unknown)}, which depends on "
            f"{var if var != '?' else 'a condition planner cannot evaluate'}: planner cannot know whether "
            f"{s.frames[-1].function} returns here"
        )
    elif command[0] == "sbatch" and s.heredoc is not None:
        maybe(
            lambda scratch: scratch.words.extend(
                job_script(s.heredoc, command, number, scratch, _text_reader(read_lines))
            ),
            number,
            s,
            unknown,
        )
    elif script_command(command, s) is not None:
        maybe(
            lambda scratch: scratch.words.extend(
                (w, number) for w in child_script_words(command, number, scratch, _text_reader(read_lines))
            ),
            number,
            s,
            unknown,
        )
    elif command[0] in ("cd", "pushd", "popd"):
        s.scalars["PWD"] = UNRESOLVED.format(unknown)
    elif is_arithmetic(command):
        arithmetic_maybe(command, number, s, unknown)
    elif command[0] == "printf":
        printf_maybe(command[1:], number, s, unknown)


def _builtin(command: list[str], number: int, s: Script, read_lines: ReadLines) -> bool | str:
    """``source``/``.``, ``cd``/``pushd``/``popd`` (``$PWD``, where relative paths are found),
    ``set -a``/``+a``/``-o allexport``, ``return [N]``, ``shift [N]`` (bash(1) "SHELL BUILTIN
    COMMANDS") and a call of a function the script defined (:func:`.functions.call`) run on ``s``;
    their status."""
    name, args = command[0], command[1:]
    if name in s.functions:
        return call(name, args, number, s, read_lines)
    if is_arithmetic(command):
        return run_arithmetic(command, number, s)
    if name == "printf":
        return printf_assign(args, number, s)
    if name == "exit":
        exit_builtin(args, number)
    if name == "return":
        if not s.frames and s.depth == s.shell_depth:
            return False  # bash: "can only `return' from a function or sourced script"
        raise Return(args[0] == "0" if args and args[0].lstrip("-").isdigit() else f"if:?:{number}")
    if name in ("break", "continue"):
        return loop_control(name, args, s)
    if name == "shift":
        count = args[0] if args else "1"
        return shift(s, int(count)) if count.isdigit() else f"if:?:{number}"
    if name in ("source", "."):
        source_file(args, number, s, _text_reader(read_lines))
    elif name == "envsubst":
        envsubst(args, number, s)
    elif name == "set":
        return set_builtin(args, number, s)
    else:
        change_directory(command, number, s)
    return True
