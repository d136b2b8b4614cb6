"""The shell a Megatron launch script is written in, as far as planning needs: a bash script's own
variable assignments resolved into the words of the ``pretrain_gpt.py`` command.

Resolved (bash(1) "Parameter Expansion", "Arrays", "Arithmetic Expansion"): ``NAME=value``,
``export NAME=value``, ``declare``/``readonly`` prefixes, ``NAME=( ... )`` and ``NAME+=( ... )``
arrays over several lines, ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``,
``${NAME:=default}``, ``"${NAME[@]}"``/``${NAME[*]}``, integer ``$(( ... ))`` over resolved
names, ``bash -c '...' name args`` (the string re-split with ``"$@"`` bound to the args),
``unset NAME``, ``set -a`` (allexport), ``cd``/``pushd``/``popd`` and ``source FILE`` / ``. FILE``
(bash(1) "SHELL BUILTIN COMMANDS": the file read and run in the same shell, its assignments the
script's; :func:`_source`). A reference nothing in the script defines becomes a marker that names
it, so a flag whose value needs it is an error naming the variable; command substitution
``$( ... )`` is never run, except that the pure path commands of :func:`.paths.path_command`
(``$(dirname "$0")``, ``$(cd DIR && pwd)``) give the path they print. The expansion of a word
is :mod:`.expansion`'s; this module reads the statements (assignments, branches, builtins, sources),
split from the text by :mod:`.shell_text`, into a :class:`.shell_state.Script`; :mod:`.conditions`
evaluates the tests and :mod:`.shell_builtins` runs ``cd`` and ``envsubst``. Functions and their
calls (positional parameters, ``local``, ``return``, ``shift``) are :mod:`.functions`', the
assignments (``declare -A``, ``local -n``, ``NAME[KEY]=``) :mod:`.assignments`', an ``sbatch <<EOF``
job script :mod:`.heredoc`'s; loops are not evaluated (read as an undeterminable ``if``).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import MAX_FILE_BYTES, printable, read_text_capped
from planner.launch.megatron.assignments import ASSIGN, PREFIXES, assign, unset
from planner.launch.megatron.conditions import command_status, condition
from planner.launch.megatron.expansion import (
    ROOT_KEY,
    UNRESOLVED,
    YamlReadError,
    expand,
    expand_word,
    unresolved_in,
)
from planner.launch.megatron.functions import (
    Frame,
    Return,
    bind,
    call,
    definition,
    header,
    make_local,
    shift,
    unbind,
)
from planner.launch.megatron.heredoc import JOB_READERS, exported, here_operator, job_script
from planner.launch.megatron.paths import joined
from planner.launch.megatron.shell_builtins import change_directory, envsubst
from planner.launch.megatron.shell_state import NAME, Script, display, why_unknown
from planner.launch.megatron.shell_text import Logical, logical_lines, statements

__all__ = ["MAX_SOURCE_DEPTH", "REDIRECT", "SEPARATORS", "Script", "read_script", "unresolved_in"]

_ASSIGN_LINE = re.compile(
    r"^(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?[A-Za-z_]\w*(?:\[[^\]]*\])?\+?="
)
"""A line that starts with an assignment (its words, expanded unsplit, decide: :func:`.assignments.assign`)."""
SEPARATORS = {"|", "||", "&&", ";", "&", "|&"}
"""Words that end a simple command (bash(1) "Lists")."""
REDIRECT = re.compile(r"^\d*(>|<|>>|>&|<&)")
"""A redirection word (bash(1) "Redirection"): ends the arguments of a command."""
MAX_SOURCE_DEPTH = 16
"""How deep ``source`` may nest. Bash itself has no bound but its memory (a file that sources
itself recurses until the shell dies); no launch needs more than a few levels."""
MAX_SOURCED_FILES = 100
"""How many files one script may source in all (a file sourcing itself twice doubles per level)."""
_BUILTINS = ("source", ".", "cd", "pushd", "popd", "set", "envsubst", "return", "shift")
"""Commands :func:`_builtin` runs on the script's state instead of keeping their words."""


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
_LOOPS = ("while", "until", "for", "select")
"""Loops are not evaluated: each is read as an ``if`` whose condition cannot be known (its body
may run any number of times)."""


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


def read_script(text: str, preset: dict[str, str] | None = None, path: str | Path | None = None) -> Script:
    """Read a bash script (or a plain arguments file): assignments are recorded, every other
    line's words are expanded and kept for the flag parser. ``preset`` is the environment the script
    starts with (``planner check --set NAME=VALUE``); its own assignments override it, as bash's do.
    ``path`` is the script's file: ``$0`` and ``${BASH_SOURCE[0]}`` are its absolute path, ``$PWD``
    (unless ``preset`` gives it) its directory, where a relative ``source FILE`` is found (see
    :mod:`.paths`).

    ``if``/``elif``/``else``/``fi`` are followed on conditions the script (or ``preset``)
    determines (:func:`condition`): only the branch bash runs is read. A condition that cannot be
    known makes every variable its branches assign a marker naming the condition's variable, and a
    branch that runs the training script an error naming it."""
    s = Script()
    s.scalars.update(preset or {})
    if path is not None:
        full = os.path.abspath(path)
        s.root = os.path.realpath(os.path.dirname(full))
        s.scalars[ROOT_KEY] = s.root
        s.scalars["0"] = full  # not a name an assignment can set
        s.scalars.setdefault("PWD", os.path.dirname(full))
        s.arrays["BASH_SOURCE"] = [full]
    bind(s, [])  # run as ``bash SCRIPT``: no arguments ($# is 0, "$@" empty)
    _read(text, s)
    return s


def _read(text: str, s: Script) -> None:
    """The statements of one file (the script or a file it sources) read into ``s``."""
    _read_lines(logical_lines(text), s)


def _read_lines(lines: list[Logical], s: Script) -> None:
    """Logical lines (a file's, or a function's body) read into ``s``; an ``if`` or ``case``
    opened in them must close in them, as bash requires. A function definition is recorded (only
    when the branch it is in runs; one in a branch that cannot be known is unknown)."""
    stack: list[_Branch] = []
    it = iter(lines)
    for logical in it:
        stripped, number = logical.text.strip(), logical.number
        if not stripped:
            continue
        head = header(stripped)
        if head is not None:
            fn = definition(head[0], head[1], number, it)
            unknown = next((b.unknown for b in stack if b.unknown), None)
            if all(b.active for b in stack):
                s.functions[fn.name] = fn
            elif unknown and all(b.active or b.unknown for b in stack):
                s.functions[fn.name] = unknown
            continue
        s.heredoc = logical.heredoc
        first = stripped.split(None, 1)[0].rstrip(";")
        if first in _KEYWORDS or stack:
            split = first in _KEYWORDS or (stack and stack[-1].case is not None)
            for statement in statements(stripped) if split else [stripped]:
                _conditional(statement, number, s, stack)
            continue
        try:
            for statement in statements(stripped) if ";" in stripped else [stripped]:
                _statement(statement, number, s)
        except YamlReadError as exc:
            raise SpecError(f"line {number}: {exc}") from None
    if stack:
        raise SpecError("the script ends inside an if (no closing fi)")


def _conditional(statement: str, number: int, s: Script, stack: list[_Branch]) -> None:
    """One statement inside (or opening or closing) an ``if`` or a ``case``."""
    first, _, rest = statement.partition(" ")
    rest = rest.strip()
    if stack and stack[-1].case is not None and _case_statement(statement, first, number, s, stack):
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
        known = condition(rest, number, s) if first == "if" else f"if:?:{number}"
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
    top = stack[-1]
    if first in ("elif", "else"):
        if top.unknown or top.taken or not all(b.active for b in stack[:-1]):
            top.active = False
        elif first == "else":
            top.active = top.taken = True
        else:
            known = condition(rest, number, s)
            if isinstance(known, str):
                top.unknown, top.active = known, False
            else:
                top.active = top.taken = known
        if first == "else" and rest:
            _conditional(rest, number, s, stack)
        return
    unknown = next((b.unknown for b in stack if b.unknown), None)
    if unknown and all(b.active or b.unknown for b in stack):
        _undetermined(statement, number, s, unknown)
    elif all(b.active for b in stack):
        _statement(statement, number, s)


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


def _undetermined(statement: str, number: int, s: Script, unknown: str) -> None:
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
    first = statement.split(None, 1)[0]
    if first in s.functions or first in ("return", "sbatch"):
        try:
            words = shlex.split(expand(statement, s.scalars, s.arrays), posix=True)
        except ValueError:
            return
        end = next((k for k, w in enumerate(words) if w in SEPARATORS), len(words))
        _builtin_maybe(words[:end], number, s, unknown)
        return
    if first in ("cd", "pushd", "popd"):
        s.scalars["PWD"] = UNRESOLVED.format(unknown)
        return
    if first in ("source", "."):
        try:
            words = shlex.split(expand(statement, s.scalars, s.arrays), posix=True)
        except ValueError:
            return
        end = next((k for k, w in enumerate(words) if w in SEPARATORS), len(words))
        _source_undetermined(words[1:end], number, s, unknown)
        return
    if re.search(r"\.py\b", statement):
        _training_in_unknown(number, unknown)


def _training_in_unknown(number: int, unknown: str) -> None:
    """The error for a training command in a branch that cannot be known (``if:NAME:LINE``)."""
    _, name, line = unknown.split(":")
    what = (
        f"on {name}, which the script never sets" if name != "?" else "on a condition planner cannot evaluate"
    )
    raise SpecError(
        f"line {number}: the training command runs in a branch of the if/case on line {line}, which depends "
        f"{what}; pass planner check --set {name if name != '?' else 'NAME'}=VALUE or set it in the script"
    )


def _source_undetermined(args: list[str], number: int, s: Script, unknown: str) -> None:
    """``source FILE`` in a branch that may or may not run: when FILE can be read, every variable
    it sets becomes a marker naming the branch's condition (and a training command in it an error
    naming it); a file that cannot be read there (``[ -f "$HOME/.env" ] && source``, the file on
    the cluster) is not read, as another command of that branch is not."""
    _maybe(lambda scratch: _source(args, number, scratch), number, s, unknown)


def _maybe(run, number: int, s: Script, unknown: str) -> None:
    """``run`` (a source, a function call, a job script) on a copy of ``s``, for a branch that may
    or may not run: what it changes becomes a marker naming the branch's condition, a training
    command in it an error naming it; one that cannot be read there is not read."""
    scratch = Script(
        scalars=dict(s.scalars),
        arrays={k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in s.arrays.items()},
        functions=dict(s.functions),
        frames=[Frame(function=f.function, saved=dict(f.saved)) for f in s.frames],
        calls=s.calls,
        env=dict(s.env),
        root=s.root,
        allexport=s.allexport,
        dirs=list(s.dirs),
        depth=s.depth,
        sourced=s.sourced,
        sourced_bytes=s.sourced_bytes,
    )
    try:
        run(scratch)
    except (SpecError, Return):
        return
    if any(re.search(r"\.py\b", w) for w, _ in scratch.words):
        _training_in_unknown(number, unknown)
    marker = UNRESOLVED.format(unknown)
    for name in set(scratch.scalars) | set(scratch.arrays):
        if scratch.scalars.get(name) != s.scalars.get(name) or scratch.arrays.get(name) != s.arrays.get(name):
            s.scalars[name] = marker
            s.arrays.pop(name, None)
            s.assigned_lines[name] = number
            if name in scratch.env:
                s.env[name] = marker
    s.sourced, s.sourced_bytes, s.calls = scratch.sourced, scratch.sourced_bytes, scratch.calls


def _statement(stripped: str, number: int, s: Script) -> None:
    """One command or assignment of the script, read into ``s``."""
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
    expanded = expand(stripped.replace("\n", " "), s.scalars, s.arrays)
    try:
        parts = shlex.split(expanded, posix=True)
    except ValueError:
        parts = expanded.split()
    # Leading NAME=value words set the command's environment (bash(1) "Simple Command Expansion").
    while parts and ASSIGN.match(parts[0]) and not parts[0].startswith("-"):
        m = ASSIGN.match(parts[0])
        s.env[m.group(1)] = m.group(3)
        s.scalars[m.group(1)] = m.group(3)
        s.assigned_lines[m.group(1)] = number
        parts = parts[1:]
    s.words += [(w, number) for w in _inner_commands(_run_builtins(parts, number, s), s)]
    if heredoc is not None and parts and parts[0] in JOB_READERS:
        s.words += job_script(heredoc, number, s, _read)


def _run_builtins(parts: list[str], number: int, s: Script) -> list[str]:
    """The words of a command list with its builtins (:data:`_BUILTINS`, each at the start of a
    command of the list) run on ``s`` and left out, with the separator after them. A builtin after
    ``&&`` (``||``) runs when the command before it succeeded (failed): a builtin planner ran
    succeeded, a test (``[ ]``, ``[[ ]]``, ``test``, ``true``, ``false``) is evaluated as an ``if``
    condition is (:func:`condition`); after any other command it may or may not run
    (:func:`_builtin_maybe`)."""
    if not any(w in _BUILTINS or w in s.functions for w in parts):
        return parts
    out, start, before = [], 0, None
    status: bool | str = True
    for k in range(len(parts) + 1):
        if k < len(parts) and parts[k] not in SEPARATORS:
            continue
        command = parts[start:k]
        if command and (command[0] in _BUILTINS or command[0] in s.functions):
            runs: bool | str = True
            if before == "&&":
                runs = status
            elif before == "||":
                runs = not status if isinstance(status, bool) else status
            if runs is True:
                status = _builtin(command, number, s)
            elif runs is not False:
                _builtin_maybe(command, number, s, runs)
                status = runs
        else:
            out += parts[start : k + 1]
            status = command_status(command, number, s)
        before, start = (parts[k] if k < len(parts) else None), k + 1
    return out


def _builtin_maybe(command: list[str], number: int, s: Script, unknown: str) -> None:
    """A builtin that may or may not run (``unknown``, ``if:NAME:LINE``): what a sourced file sets
    becomes unknown (:func:`_source_undetermined`), so does ``$PWD`` after a ``cd``."""
    if command[0] in ("source", "."):
        _source_undetermined(command[1:], number, s, unknown)
    elif command[0] in s.functions:
        _maybe(
            lambda scratch: call(command[0], command[1:], number, scratch, _read_lines), number, s, unknown
        )
    elif command[0] == "return" and s.frames:
        _, var, line = unknown.split(":")
        raise SpecError(
            f"line {number}: return in a branch of the if/case on line {line}, which depends on "
            f"{var if var != '?' else 'a condition planner cannot evaluate'}: planner cannot know whether "
            f"{s.frames[-1].function} returns here"
        )
    elif command[0] == "sbatch" and s.heredoc is not None:
        _maybe(
            lambda scratch: scratch.words.extend(job_script(s.heredoc, number, scratch, _read)),
            number,
            s,
            unknown,
        )
    elif command[0] in ("cd", "pushd", "popd"):
        s.scalars["PWD"] = UNRESOLVED.format(unknown)


def _builtin(command: list[str], number: int, s: Script) -> bool | str:
    """``source``/``.``, ``cd``/``pushd``/``popd`` (``$PWD``, where relative paths are found),
    ``set -a``/``+a``/``-o allexport``, ``return [N]``, ``shift [N]`` (bash(1) "SHELL BUILTIN
    COMMANDS") and a call of a function the script defined (:func:`.functions.call`) run on ``s``;
    their status."""
    name, args = command[0], command[1:]
    if name in s.functions:
        return call(name, args, number, s, _read_lines)
    if name == "return":
        if not s.frames and s.depth == 0:
            return False  # bash: "can only `return' from a function or sourced script"
        raise Return(args[0] == "0" if args and args[0].lstrip("-").isdigit() else f"if:?:{number}")
    if name == "shift":
        count = args[0] if args else "1"
        return shift(s, int(count)) if count.isdigit() else f"if:?:{number}"
    if name in ("source", "."):
        _source(args, number, s)
    elif name == "envsubst":
        envsubst(args, number, s)
    elif name == "set":
        for k, a in enumerate(args):
            if a[:1] in "-+" and a[1:] and a[1:].isalpha() and "a" in a[1:] and "o" not in a[1:]:
                s.allexport = a[0] == "-"
            elif a in ("-o", "+o") and args[k + 1 : k + 2] == ["allexport"]:
                s.allexport = a == "-o"
    else:
        change_directory(command, number, s)
    return True


class _SourceBound(SpecError):
    """Sourcing past :data:`MAX_SOURCE_DEPTH` or :data:`MAX_SOURCED_FILES`: said once, at the
    script's own ``source`` line, not once per nested file."""


def _source(args: list[str], number: int, s: Script) -> None:
    """``source FILE`` / ``. FILE`` (bash(1): "Read and execute commands from filename in the
    current shell environment"): FILE's statements read into ``s`` with the same semantics, the
    words it contributes to a command carrying the ``source`` line. A relative FILE is found from
    ``$PWD`` (the script's directory until a ``cd``; bash would also search ``$PATH`` for a name
    without a slash, which a launch does not rely on). An undeterminable path, a missing or
    unreadable file, a text given without its file, nesting deeper than :data:`MAX_SOURCE_DEPTH` or
    more than :data:`MAX_SOURCED_FILES` files are errors naming the line; an error inside FILE names
    FILE and its line."""
    if not args:
        raise SpecError(f"line {number}: source without a file name (bash: filename argument required)")
    target = args[0]
    shown = display(target)
    if unresolved_in(target) is not None:
        raise SpecError(f"line {number}: source {shown}: the file's path {why_unknown(target)}")
    if s.root is None:
        raise SpecError(
            f"line {number}: source {shown}: planner reads the files a launch script sources beside the "
            "script, and this text was given without its file"
        )
    pwd = s.scalars.get("PWD")
    full = joined(pwd if pwd is not None and unresolved_in(pwd) is None else None, target)
    if full is None:
        raise SpecError(
            f"line {number}: source {shown}: a relative path is found from the working directory, which "
            f"{display(pwd or '')} leaves unknown"
        )
    if s.depth >= MAX_SOURCE_DEPTH or s.sourced >= MAX_SOURCED_FILES:
        bound = (
            f"sourced files nest deeper than {MAX_SOURCE_DEPTH}"
            if s.depth >= MAX_SOURCE_DEPTH
            else f"more than {MAX_SOURCED_FILES} files sourced in all"
        )
        here = (s.arrays.get("BASH_SOURCE") or [""])[0]
        here = display(os.path.relpath(here, s.root)) if os.path.isabs(here) else "a sourced file"
        raise _SourceBound(
            f"{bound}: {here} sources {shown} on its line {number} (does a file source itself?)"
        )
    if not os.path.isfile(full):
        what = "is not a file" if os.path.exists(full) else "does not exist"
        raise SpecError(f"line {number}: source {shown}: {printable(full)} {what}")
    try:
        text = read_text_capped(Path(full))
    except SpecError as exc:
        raise SpecError(f"line {number}: source {shown}: {exc}") from None
    s.sourced_bytes += len(text)
    if s.sourced_bytes > MAX_FILE_BYTES:
        raise SpecError(
            f"line {number}: source {shown}: the sourced files hold more than "
            f"{MAX_FILE_BYTES // 2**20} MiB in all; not a launch"
        )
    start, assigned = len(s.words), dict(s.assigned_lines)
    s.depth += 1
    s.sourced += 1
    s.arrays["BASH_SOURCE"] = [full] + s.arrays.get("BASH_SOURCE", [])
    # bash(1) "source": "If any arguments are supplied, they become the positional parameters when
    # filename is executed. Otherwise the positional parameters are unchanged."
    before = bind(s, args[1:]) if len(args) > 1 else None
    try:
        _read(text, s)
    except Return:
        pass  # bash(1) "return": in a sourced file, it stops reading the file
    except _SourceBound as exc:
        if s.depth > 1:
            raise
        raise SpecError(f"line {number}: source {shown}: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"line {number}: {shown}: {exc}") from None
    finally:
        s.depth -= 1
        s.arrays["BASH_SOURCE"] = s.arrays.get("BASH_SOURCE", [])[1:]
        if before is not None:
            unbind(s, before)
    s.words[start:] = [(w, number) for w, _ in s.words[start:]]
    for name, line in s.assigned_lines.items():
        if assigned.get(name) != line:
            s.assigned_lines[name] = number


def _inner_commands(parts: list[str], s: Script) -> list[str]:
    """``bash -c 'STRING' name args...``: the words bash would run (STRING re-split with ``"$@"``
    bound to args, and its references expanded in the environment the inner shell inherits,
    :func:`.heredoc.exported`). An unquoted ``|``, ``;``, ``&``, ``<`` or ``>`` inside STRING
    splits the command there, as bash would: a SpecError naming it (a value such as a pipeline
    layout must be quoted)."""
    for k, w in enumerate(parts[:-1]):
        if w in ("bash", "sh", "/bin/bash", "/bin/sh") and parts[k + 1] == "-c" and k + 2 < len(parts):
            inner, rest = parts[k + 2], parts[k + 4 :]
            end = next((j for j, x in enumerate(rest) if x in SEPARATORS or REDIRECT.match(x)), len(rest))
            rest, tail = rest[:end], rest[end:]
            bound = " ".join(shlex.quote(a) for a in rest)
            inner = inner.replace('"$@"', bound).replace("$@", bound)
            if "$" in inner:
                inner = expand(inner, exported(s)[1], {})
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
            return parts[:k] + _inner_commands([x for x in words if x != "&&"], s) + tail
    return parts
