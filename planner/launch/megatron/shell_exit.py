"""Where a launch script stops: ``exit``, ``set -e`` (errexit), ``set -u`` (nounset) and
``set -o pipefail``, as bash(1) "SHELL BUILTIN COMMANDS" describes them (bash 5.2):

* ``exit [n]``: "Cause the shell to exit with a status of n": nothing after it runs, in a function
  or a sourced file too (``return`` ends only those). :class:`Exit` carries where.
* ``set -e``: "Exit immediately if a pipeline ..., a list, or a compound command returns a
  non-zero status. The shell does not exit if the command that fails is part of the command list
  immediately following a while or until keyword, part of the test following the if or elif
  reserved words, part of any command executed in a && or || list except the command following
  the final && or ||, any command in a pipeline but the last, or if the command's return value is
  being inverted with !", and "If a compound command or shell function executes in a context where
  -e is being ignored, none of the commands executed within ... will be affected by the -e
  setting". Planner runs no command: a status it cannot know (``mkdir``, ``python``) is taken as
  success, as the launch intends; a status it knows (``false``, a failed test, a function's
  ``return 1``, ``return`` outside a function, ``shift`` past ``$#``) stops the script.
* ``set -o pipefail``: "the return value of a pipeline is the value of the last (rightmost)
  command to exit with a non-zero status, or zero if all commands ... exit successfully".
* ``set -u``: an unset variable's expansion is an error and the non-interactive shell exits
  (:class:`.expansion.Unbound`; ``${NAME:-word}`` and the other operators, ``"$@"``, ``"${A[@]}"``
  are not). A name the script never sets may be in the environment it starts with: planner cannot
  know whether bash stops there, an error naming it and ``--set``.

A stop inside a branch that cannot be known (an ``if`` on a variable nothing sets) is recorded
(:class:`MaybeStop`): a training command after it is an error naming the variable, as planner
cannot know whether the script gets there. So is one that needs an option set in such a branch
(:func:`set_maybe`): a command failing under a ``set -e``, a variable expanded unset under a
``set -u``, a pipeline failing only under a ``set -o pipefail``, the message naming the ``set``. :mod:`.shell` reads the statements; this module holds
the options, the stops and their messages."""

from __future__ import annotations

__all__ = ["Exit", "MaybeStop", "set_builtin", "set_maybe"]

import copy
from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.errors import SpecError
from planner.launch.megatron.expansion import NOUNSET_KEY, Required, Unbound
from planner.launch.megatron.functions import bind
from planner.launch.megatron.shell_state import Exit, Script, branch_of
from planner.launch.megatron.shell_text import is_separator, redirections, training_scripts


@dataclass(frozen=True, slots=True)
class MaybeStop:
    """A stop in a branch that cannot be known: at word ``index`` of the script's words, on
    ``line``, for ``why``, the branch's condition ``unknown`` (``if:NAME:LINE``)."""

    index: int
    line: int
    why: str
    unknown: str


_OPTIONS = {"a": "allexport", "e": "errexit", "u": "nounset"}
"""``set``'s one-letter options planner follows, by their ``-o`` names."""


def set_builtin(args: list[str], number: int, s: Script) -> bool:
    """``set [-+aeu] [-+o NAME] [--] [ARG ...]`` (bash(1) "set"): allexport, errexit, nounset and
    pipefail on (``-``) or off (``+``); the others (``-x``, ``-o xtrace``) change nothing planned.
    Words after ``--`` (or the first word that is not an option) become the positional
    parameters."""
    options, rest = _parsed(args)
    for name, on in options:
        _option(name, on, number, s)
    if rest is not None:
        bind(s, rest)
    return True


def _parsed(args: list[str]) -> tuple[list[tuple[str, bool]], list[str] | None]:
    """``set``'s arguments: the options it turns on (True) or off, by their ``-o`` names, and
    the positional parameters it sets (None: it sets none)."""
    options: list[tuple[str, bool]] = []
    k = 0
    while k < len(args):
        a = args[k]
        k += 1
        if a == "--" or a[:1] not in ("-", "+") or a in ("-", "+"):
            rest = args[k:] if a == "--" else args[k - 1 :]
            return options, (rest if a != "-" and (a == "--" or rest) else None)
        on = a[0] == "-"
        for letter in a[1:]:
            if letter == "o":
                options.append((args[k] if k < len(args) else "", on))
                k += 1
            elif letter in _OPTIONS:
                options.append((_OPTIONS[letter], on))
    return options, None


def set_maybe(args: list[str], number: int, s: Script, unknown: str) -> None:
    """``set`` in a branch that cannot be known (``unknown``): ``-e`` / ``-o errexit``, ``-u`` /
    ``-o nounset`` and ``-o pipefail`` there may be in force after it
    (:attr:`.shell_state.Script.errexit_unknown`, ``nounset_unknown``, ``pipefail_unknown``): a
    command that then fails (:func:`after_list`), a variable then expanded unset
    (:func:`nounset_probe`) or a pipeline that then fails only under pipefail
    (:func:`after_pipefail`) is a stop that may happen, not one that does, its message naming
    the ``set``. When none of these follows, the launch is the same either way and is read."""
    for name, on in _parsed(args)[0]:
        if not on:
            continue
        if name == "errexit" and s.errexit is None and s.errexit_unknown is None:
            s.errexit_unknown = (number, unknown)
        elif name == "nounset" and NOUNSET_KEY not in s.scalars and s.nounset_unknown is None:
            s.nounset_unknown = (number, unknown)
        elif name == "pipefail" and not s.pipefail and s.pipefail_unknown is None:
            s.pipefail_unknown = (number, unknown)


def _option(name: str, on: bool, number: int, s: Script) -> None:
    if name == "allexport":
        s.allexport = on
    elif name == "errexit":
        s.errexit = number if on else None
        s.errexit_unknown = None  # decided here, either way
    elif name == "nounset":
        if on:
            s.scalars[NOUNSET_KEY] = str(number)
        else:
            s.scalars.pop(NOUNSET_KEY, None)
        s.nounset_unknown = None
    elif name == "pipefail":
        s.pipefail = on
        s.pipefail_unknown = None


_EXEC_OPTIONS = ("-c", "-l", "-cl", "-lc")
"""``exec``'s options that take no value (bash(1) "exec [-cl] [-a name] [command [arguments]]")."""


def exec_replaces(parts: list[str], text: str) -> str | None:
    """Where ``parts`` (one simple command's words, expanded) is ``exec COMMAND ...``, the stop it
    makes (``exec COMMAND``), else None. bash(1) "exec": "If command is specified, it replaces the
    shell. No new process is created"; "If the command cannot be executed for some reason, a
    non-interactive shell exits, unless the execfail shell option is enabled". Nothing after it
    runs. ``exec`` with only redirections (``exec > log 2>&1``) keeps the shell, as does a
    command in a pipeline or the background (a subshell's); ``text`` holding a process
    substitution (``exec > >(tee log)``), whose words planner does not split as bash does, is
    left alone."""
    if not parts or parts[0] != "exec" or ">(" in text or "<(" in text:
        return None
    if any(is_separator(w) for w in parts):
        return None
    dropped = redirections(parts)
    rest = [w for j, w in enumerate(parts) if j and j not in dropped]
    while rest and rest[0] in (*_EXEC_OPTIONS, "-a"):
        rest = rest[2:] if rest[0] == "-a" else rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return f"exec {rest[0]}" if rest else None


def exit_builtin(args: list[str], number: int) -> None:
    """``exit [n]``: the script stops here."""
    raise Exit(number, "exit" + (f" {args[0]}" if args else ""))


def pipeline_status(statuses: list[bool | str], pipefail: bool) -> bool | str:
    """A pipeline's status from its commands' (bash(1) "Pipelines"): the last one's, or with
    ``pipefail`` failed when any failed, unknown when none failed and one is unknown."""
    if not pipefail or len(statuses) < 2:
        return statuses[-1]
    if False in statuses:
        return False
    return next((x for x in statuses if isinstance(x, str)), True)


def pipeline_status_of(statuses: list[bool | str], s: Script) -> tuple[bool | str, bool]:
    """A pipeline's status under ``s``'s options (:func:`pipeline_status`), and whether it hangs
    on a ``set -o pipefail`` in a branch that cannot be known (it fails only if that ran): then
    the status is unknown, that branch's."""
    status = pipeline_status(statuses, s.pipefail)
    if s.pipefail or s.pipefail_unknown is None or pipeline_status(statuses, True) == status:
        return status, False
    return s.pipefail_unknown[1], True


def after_pipefail(pipeline: list[str], last_ran: bool | str, number: int, s: Script) -> None:
    """``set -e`` after a list whose last pipeline fails only if a ``set -o pipefail`` that may
    not have run did (:func:`pipeline_status_of`): a stop that may happen, naming both."""
    if s.errexit_ignored or last_ran is False or s.pipefail_unknown is None:
        return
    if s.errexit is not None:
        errexit = f"set -e (line {s.errexit})"
    elif s.errexit_unknown is not None:
        errexit = f"set -e (line {s.errexit_unknown[0]}, if it ran)"
    else:
        return
    line, unknown = s.pipefail_unknown
    why = f"{errexit} and {' '.join(pipeline)!r} fails under set -o pipefail (line {line}, if it ran)"
    maybe_stop(s, number, why, unknown)


def after_list(status: bool | str, last_ran: bool | str, command: list[str], number: int, s: Script) -> None:
    """``set -e`` after a command list: the script stops when the list's last pipeline ran and
    failed; when whether it ran cannot be known (after ``&&`` on an unknown test), it may stop."""
    s.status = status
    if s.errexit is None and s.errexit_unknown is not None and not s.errexit_ignored:
        if status is False and last_ran is not False:
            line, unknown = s.errexit_unknown
            maybe_stop(s, number, f"set -e (line {line}, if it ran) and {' '.join(command)!r} fails", unknown)
        return
    if s.errexit is None or s.errexit_ignored or status is not False or last_ran is False:
        return
    why = f"set -e (line {s.errexit}) and {' '.join(command)!r} fails"
    if last_ran is True:
        raise Exit(number, why)
    maybe_stop(s, number, why, last_ran)


def maybe_stop(s: Script, number: int, why: str, unknown: str) -> None:
    """Record a stop in a branch that cannot be known (the first one counts); one that hangs on a
    command planner does not run or a file on the cluster (:attr:`.shell_state.Script.assumed`) is
    not taken: the launch is read as it is meant to run."""
    if s.maybe_stop is None and unknown not in s.assumed:
        s.maybe_stop = MaybeStop(index=len(s.words), line=number, why=why, unknown=unknown)


class NounsetHit(Exception):
    """The line :func:`nounset_probe` runs expands ``name`` unset (``known``: certainly so)."""

    def __init__(self, name: str, known: bool):
        super().__init__(name)
        self.name, self.known = name, known


def nounset_probe(run: Callable[[Script], None], number: int, s: Script) -> None:
    """While a ``set -u`` in a branch that cannot be known may be in force
    (:attr:`.shell_state.Script.nounset_unknown`, bash's option not otherwise on): ``run`` (the
    line about to be read) on a copy of ``s`` with it in force; when the line expands a variable
    unset there, the script may stop on it (:func:`maybe_stop`, the message naming the ``set``).
    What else the copy does is left: the line is then read on ``s`` itself."""
    if s.nounset_unknown is None or NOUNSET_KEY in s.scalars or s.maybe_stop is not None:
        return
    line, unknown = s.nounset_unknown
    probe = copy.deepcopy(s)
    probe.scalars[NOUNSET_KEY] = str(line)
    probe.nounset_unknown, probe.nounset_probing = None, True
    try:
        run(probe)
    except (Unbound, NounsetHit) as exc:
        shown = f"${exc.name}" if exc.name.isdigit() else exc.name
        known = exc.known or (exc.name in s.env and s.env[exc.name] is None)
        what = f"{shown} is unset" if known else f"{shown}, which the script never sets, is expanded"
        maybe_stop(s, number, f"set -u (line {line}, if it ran) and {what}", unknown)
    except Exception:  # any other error or stop is the real read's to raise, next
        pass


def unbound(exc: Unbound, number: int, s: Script) -> Exception:
    """What ``set -u`` makes of ``exc`` on line ``number``: the :class:`Exit` bash makes of a
    variable certainly unset (a positional parameter past ``$#``, a missing element, one the script
    ``unset``), else the error naming the variable and ``--set`` (planner cannot know whether bash
    stops); in :func:`nounset_probe`'s copy, :class:`NounsetHit`, for the probe."""
    shown = f"${exc.name}" if exc.name.isdigit() else exc.name
    line = s.scalars.get(NOUNSET_KEY, "?")
    if s.nounset_probing:
        return NounsetHit(exc.name, exc.known)
    if exc.known or (exc.name in s.env and s.env[exc.name] is None):
        return Exit(number, f"set -u (line {line}) and {shown} is unset (bash: {shown}: unbound variable)")
    return SpecError(
        f"line {number}: {shown} is expanded under set -u (line {line}) and the script never sets it: bash "
        f"stops the script here unless the environment gives it; set it in the script or pass planner check "
        f"--set {exc.name}=VALUE"
    )


def required(exc: Required, number: int) -> Exit | SpecError:
    """What ``${NAME:?word}`` makes of a NAME it refuses on line ``number``: the :class:`Exit` bash
    makes of it when certain (a positional parameter, a value the script set empty), else the error
    naming the variable and ``--set`` (the environment may give it)."""
    shown = f"${exc.name}" if exc.name.isdigit() else exc.name
    said = f": {exc.word}" if exc.word else ": parameter null or not set"
    if exc.known:
        return Exit(number, f"{shown} is unset or empty (bash: {exc.name}{said})")
    return SpecError(
        f"line {number}: ${{{exc.name}:?...}} stops the script unless {exc.name} is set; the script never "
        f"sets it: set it in the script or pass planner check --set {exc.name}=VALUE"
    )


def no_launch(stop: Exit, missing: list[str] = (), submitted: list[str] = ()) -> SpecError:
    """The error for a script that stops before any training command runs; ``missing``: relative
    paths a file test did not find in the directory planner runs the script from (its own), named
    with the way to run it from another (``--set PWD=DIR``); ``submitted``: job script files
    ``sbatch FILE`` submits that planner did not find (:mod:`.child_scripts` reads one it finds)."""
    hint = ""
    if submitted:
        files = ", ".join(dict.fromkeys(submitted))
        hint += (
            f"; it submits {files} with sbatch, a job script planner did not find in the working directory: check that file, "
            "with --set for what it inherits"
        )
    if missing:
        files = ", ".join(dict.fromkeys(missing))
        hint += (
            f"; a file test found no {files} in the script's own directory, where planner runs it: "
            "for a script run from another directory (the Megatron-LM checkout), pass planner check --set PWD=DIR"
        )
    return SpecError(
        f"no launch found: the script stops on {stop.where()} ({stop.why}) before any training command runs{hint}"
    )


def launch_after_maybe_stop(s: Script) -> None:
    """A training command (a ``*.py`` word, ``torchrun``) among the words after the script's
    :attr:`~.shell_state.Script.maybe_stop`: an error, planner cannot know whether it runs."""
    maybe = s.maybe_stop
    if maybe is None:
        return
    after = s.words[maybe.index :]
    scripts = training_scripts([w for w, _ in after])
    for k, (w, line) in enumerate(after):
        if k in scripts or w.rsplit("/", 1)[-1] == "torchrun":
            raise _stop_before_launch(maybe, line)


def _stop_before_launch(maybe: MaybeStop, launch_line: int) -> SpecError:
    """The error for a training command after a stop in a branch that cannot be known."""
    var = maybe.unknown.split(":")[1]
    what = (
        f"on {var}, which the script never sets; pass planner check --set {var}=VALUE or set it in the script"
        if var != "?"
        else "on a condition planner cannot evaluate"
    )
    return SpecError(
        f"line {maybe.line}: the script may stop here ({maybe.why}) before the training command on line "
        f"{launch_line}: it is in a branch of {branch_of(maybe.unknown)}, which depends {what}"
    )
