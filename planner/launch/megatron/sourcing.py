"""``source FILE`` / ``. FILE`` in a launch script (bash(1) "SHELL BUILTIN COMMANDS": "Read and
execute commands from filename in the current shell environment"): the file found, bounded and
read into the same :class:`.shell_state.Script`; :mod:`.shell` reads the statements."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import MAX_FILE_BYTES, printable, read_text_capped
from planner.launch.megatron.expansion import known_value, unresolved_in
from planner.launch.megatron.functions import Return, bind, unbind
from planner.launch.megatron.paths import joined
from planner.launch.megatron.shell_state import Exit, Script, display, why_unknown

MAX_SOURCE_DEPTH = 16
"""How deep ``source`` may nest. Bash itself has no bound but its memory (a file that sources
itself recurses until the shell dies); no launch needs more than a few levels."""
MAX_SOURCED_FILES = 100
"""How many files one script may source in all (a file sourcing itself twice doubles per level)."""


class NestingBound(SpecError):
    """Sourcing or running scripts past :data:`MAX_SOURCE_DEPTH` or :data:`MAX_SOURCED_FILES`
    (here and in :mod:`.child_scripts`): said once, at the outermost script's line, not once per
    nested file."""


def source_file(args: list[str], number: int, s: Script, read: Callable[[str, Script], None]) -> None:
    """``source FILE`` / ``. FILE`` (bash(1): "Read and execute commands from filename in the
    current shell environment"): FILE's statements read into ``s`` with the same semantics, the
    words it contributes to a command carrying the ``source`` line. A relative FILE is found from
    ``$PWD`` (the script's directory until a ``cd``; bash would also search ``$PATH`` for a name
    without a slash, which a launch does not rely on). An undeterminable path, a missing or
    unreadable file, a text given without its file, nesting deeper than :data:`MAX_SOURCE_DEPTH` or
    more than :data:`MAX_SOURCED_FILES` files are errors naming the line; an error inside FILE names
    FILE and its line; ``read`` reads a text's statements into ``s`` (:func:`.shell._read`)."""
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
    full = joined(known_value(pwd), target)
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
        raise NestingBound(
            f"{bound}: {here} sources {shown} on its line {number} (does a file source itself?)"
        )
    if not os.path.isfile(full):
        what = "is not a file" if os.path.exists(full) else "does not exist"
        raise SpecError(f"line {number}: source {shown}: {printable(full)} {what}")
    try:
        text = read_text_capped(Path(full), expected="a shell script")
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
        read(text, s)
    except Return:
        pass  # bash(1) "return": in a sourced file, it stops reading the file
    except Exit as stop:
        stop.trail.append(f"in {shown}, sourced on line {number}")
        raise
    except NestingBound as exc:
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
