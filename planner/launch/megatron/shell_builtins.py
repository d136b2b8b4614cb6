"""The builtins of a launch script that change where it runs and what files it holds, run on the
:class:`.shell_state.Script` without running anything: ``cd``/``pushd``/``popd`` (``$PWD``) and
``envsubst < IN > OUT`` (OUT kept in memory for a later ``$(yq ...)``); and the words a
``bash -c STRING`` runs (:func:`inner_commands`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import read_text_capped
from planner.launch.megatron import yq
from planner.launch.megatron.expansion import (
    FILE_KEY,
    UNRESOLVED,
    command_marker,
    expand,
    known_value,
    unresolved_in,
)
from planner.launch.megatron.heredoc import exported
from planner.launch.megatron.paths import inside, joined
from planner.launch.megatron.shell_state import NAME, Script, display
from planner.launch.megatron.shell_text import is_separator, redirections


def envsubst(args: list[str], number: int, s: Script) -> None:
    """``envsubst < IN > OUT`` (the MoE Model Zoo's way to fill its model YAML from the
    environment): OUT becomes IN with each ``$NAME`` / ``${NAME}`` replaced by its value in the
    environment envsubst runs in: an exported variable, or one ``planner check --set`` gives; a
    variable the script sets without exporting is empty there, as envsubst(1) writes an unset one;
    one the script never sets is kept unknown (a flag read from it is an error naming it). OUT is
    kept in memory (planner writes no file) for a later ``$(yq ... OUT)``. IN is a file the script
    wrote so, or one inside the script's directory; any other IN, or any other form, leaves OUT
    unknown (a yq on it is not evaluated)."""
    if (
        len(args) != 4
        or args[0] != "<"
        or args[2] != ">"
        or any(unresolved_in(a) for a in (args[1], args[3]))
    ):
        return
    pwd = known_value(s.scalars.get("PWD"))
    source, target = joined(pwd, args[1]), joined(pwd, args[3])
    if source is None or target is None:
        return
    text = s.scalars.get(FILE_KEY + source)
    if text is None:
        if s.root is None or not inside(source, s.root) or not os.path.isfile(source):
            s.scalars.pop(FILE_KEY + target, None)
            return
        text = read_text_capped(Path(source))

    def value_of(name: str) -> str:
        if s.env.get(name) is not None:
            value = s.env[name]
        elif name in s.scalars and name not in s.assigned_lines and NAME.fullmatch(name):
            value = s.scalars[name]  # planner check --set: the environment the script starts in
        elif name in s.scalars or name in s.env:
            return ""
        else:
            return yq.placeholder(UNRESOLVED.format(name))
        return value if unresolved_in(value) is None else yq.placeholder(value)

    s.scalars[FILE_KEY + target] = yq.envsubst(text, value_of)


def change_directory(command: list[str], number: int, s: Script) -> None:
    """``cd DIR`` / ``pushd DIR`` / ``popd``: ``$PWD`` (and ``$OLDPWD``) as bash sets them, DIR
    taken against the old ``$PWD``; a directory that cannot be known makes ``$PWD`` a marker saying
    which command on which line."""
    name = command[0]
    args = [a for a in command[1:] if a not in ("-L", "-P", "--", "-e", "-@", "-n")]
    old = s.scalars.get("PWD")
    if name == "popd":
        new = s.dirs.pop() if s.dirs else None
    else:
        target = args[0] if args else s.scalars.get("HOME")
        new = None
        if target is not None and target != "-" and unresolved_in(target) is None:
            new = joined(old if old is not None and unresolved_in(old) is None else None, target)
        if name == "pushd" and old is not None:
            s.dirs.append(old)
    if new is None:
        new = command_marker(f"the {' '.join(display(w) for w in command)} on line {number}")
    if old is not None:
        s.scalars["OLDPWD"] = old
    s.scalars["PWD"] = new


def inner_commands(parts: list[str], s: Script) -> list[str]:
    """``bash -c 'STRING' name args...``: the words bash would run (STRING re-split with ``"$@"``
    bound to args, and its references expanded in the environment the inner shell inherits,
    :func:`.heredoc.exported`); the shell's options may come before ``-c`` (:func:`_command_string`).
    STRING's ``;``, ``&&`` and ``||`` separate its commands (``cd DIR; python pretrain_gpt.py ...``);
    an unquoted ``|``, ``&``, ``<``, ``>`` or parenthesis inside it splits the command there, as
    bash would: a SpecError naming it (a value such as a pipeline layout must be quoted)."""
    for k, w in enumerate(parts[:-1]):
        at = _command_string(parts, k) if w in ("bash", "sh", "/bin/bash", "/bin/sh") else None
        if at is not None:
            inner, rest = parts[at], parts[at + 2 :]
            end = next((j for j, x in enumerate(rest) if is_separator(x)), len(rest))
            dropped = redirections(rest[:end])
            rest, tail = [x for j, x in enumerate(rest[:end]) if j not in dropped], rest[end:]
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
                if x and set(x) <= set("|;&<>()") and x not in (";", "&&", "||"):
                    before = " ".join(words[max(0, i - 2) : i])
                    raise SpecError(
                        f"the bash -c command string has an unquoted {x!r} after {before!r}: the inner "
                        'shell splits the command there (quote the value, or pass the arguments as "$@")'
                    )
            return parts[:k] + inner_commands(words, s) + tail
    return parts


def _command_string(parts: list[str], k: int) -> int | None:
    """The index of the command string of the shell ``parts[k]`` (``bash -c STRING``, also after
    the shell's options, ``bash -x -c``, ``bash -ex -c``, ``bash -lc``, ``bash -o pipefail -c``;
    bash(1) "OPTIONS": "commands are read from the first non-option argument"), None when it is
    not run with ``-c``."""
    i = k + 1
    while i < len(parts) and len(parts[i]) > 1 and parts[i][0] in "-+" and not is_separator(parts[i]):
        option = parts[i]
        if option[0] == "-" and "c" in option[1:] and option[1:].isalpha():
            return i + 1 if i + 1 < len(parts) else None
        i += 2 if option in ("-o", "+o", "-O", "+O") else 1
    return None
