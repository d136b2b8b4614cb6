"""Scripts a launch script runs as another process, each read in a new shell: ``sbatch [OPTIONS]
FILE [ARGS]`` (the job script a submit wrapper hands Slurm), ``sbatch --wrap STRING``, the job an
``sbatch <<EOF`` / ``bash <<EOF`` here-document gives on standard input (:mod:`.heredoc` reads its
text), ``bash [OPTIONS] FILE [ARGS]`` / ``sh FILE`` (a launcher that calls the script holding
the training command, also after ``srun ...``) and a shell script run by its path (``./train.sh``,
``srun ./train.sh``: :func:`_executed`). Such a script runs in a new shell (bash(1) "COMMAND
EXECUTION ENVIRONMENT": "the shell's execution environment ... is not" inherited, only "shell
variables and functions marked for export"), so it is read as a script of its own:

* its environment is the exported variables of the script that runs it (:func:`.heredoc.exported`);
  for ``sbatch``, as sbatch(1) ``--export`` says: ``ALL`` (the default) passes them all, ``NONE``
  none, and ``[ALL,]NAME[=VALUE],...`` those named (with ``ALL``, all of them, the named ones
  given their values);
* its positional parameters are ARGS (``bash -s ARGS <<EOF``: those after ``-s``), ``$0`` and
  ``${BASH_SOURCE[0]}`` a file's path (``$0`` is the shell's name for ``bash <<EOF``);
* it runs in the working directory of the command (sbatch(1): "The batch script ... is run in the
  working directory from which sbatch was invoked", or ``--chdir`` / ``-D``, relative to it); a
  relative FILE is found in the directory the command runs in, not in ``--chdir``;
* sbatch's options come from its command line, then the ``SBATCH_EXPORT`` variable of its
  environment, then the job script's ``#SBATCH`` lines (sbatch(1): "#SBATCH" options "before any
  executable commands"; "environment variables will override any options set in a batch script,
  and command line options will override any environment variables"); of them planner reads
  ``--export`` and ``--chdir``;
* a Slurm job's ``SLURM_*`` variables are set there (:data:`.expansion.SLURM_KEY`);
* its ``exit`` ends it, not the script that runs it.

The words it runs replace the command, after what came before the runner (``srun -N 2 bash
FILE``: ``srun -N 2`` and FILE's words), each on the line of the command. A FILE planner cannot
find (a path that depends on what it cannot know, a file that is not there) is left as the command
it is, as is a job whose ``--export`` planner cannot know; for ``sbatch`` the message of a script
with no launch names it (:func:`.shell_exit.no_launch`). Nesting is bounded as ``source`` is
(:data:`.sourcing.MAX_SOURCE_DEPTH`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import MAX_FILE_BYTES, read_text_capped
from planner.launch.megatron.expansion import ROOT_KEY, SLURM_KEY, expand_heredoc, known_value, unresolved_in
from planner.launch.megatron.functions import bind
from planner.launch.megatron.heredoc import exported
from planner.launch.megatron.paths import joined
from planner.launch.megatron.shell_exit import Exit, launch_after_maybe_stop
from planner.launch.megatron.shell_state import NAME, Script, display
from planner.launch.megatron.shell_text import Heredoc, is_separator, redirections, training_scripts
from planner.launch.megatron.sourcing import MAX_SOURCE_DEPTH, MAX_SOURCED_FILES, NestingBound

SHELLS = ("bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/usr/bin/sh")
"""Commands that run a script file given as their first non-option argument."""

_SHELL_VALUE_OPTIONS = ("-o", "+o", "-O", "+O", "--rcfile", "--init-file")
"""bash(1) "OPTIONS" that take the next word as their value."""

SBATCH_VALUE_OPTIONS = frozenset(
    "-A -a -b -c -C -D -d -e -F -G -i -J -L -M -m -N -n -o -p -q -S -t -w -x".split()
    + [
        "--" + name
        for name in (
            "account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment "
            "constraint container container-id core-spec cores-per-socket cpu-freq cpus-per-gpu "
            "cpus-per-task deadline delay-boot dependency distribution error exclude export export-file "
            "extra gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres hint input "
            "job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu "
            "mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu "
            "ntasks-per-node ntasks-per-socket open-mode output partition power prefer priority profile "
            "qos reservation segment signal sockets-per-node switches thread-spec threads-per-core time "
            "time-min tmp tres-bind tres-per-task uid wait-all-nodes wckey"
        ).split()
    ]
)
"""sbatch(1) options with a required value (Slurm's sbatch man page, "OPTIONS"): given as ``--name
VALUE`` or ``-X VALUE`` the value is the next word (``--name=VALUE`` and ``-XVALUE`` are one word).
The others are switches or take an optional value only after ``=`` (``--exclusive[=user]``,
``--nice[=adjustment]``, ``-k, --no-kill[=off]``)."""

Environment = tuple[dict[str, str], dict[str, str]]
"""A new shell's exported variables, and the same with each variable it does not inherit as empty
(:func:`.heredoc.exported`)."""

SBATCH_READ = ("--export", "--chdir", "--nodes")
"""The sbatch(1) options planner reads (``-D`` is ``--chdir``, ``-N`` ``--nodes``); the others do
not change what the job script runs. ``--nodes`` only gives the job's node count
(:func:`_job_nodes`)."""


@dataclass(frozen=True)
class Child:
    """A script that runs in a new shell (see the module's docstring), and how."""

    runner: str
    """The command that runs it: ``sbatch``, ``bash``, ``sh``, ..."""
    index: int
    """The runner's position in the command (the words before it are kept: ``srun -N 2``)."""
    pwd: str | None
    """The working directory of the command (a value of ``PWD``, possibly unresolved; None: unset)."""
    path: str | None = None
    """The script file's absolute path; None for a script given as text."""
    text: str | None = None
    """The script given as text (a here-document's job, ``sbatch --wrap``)."""
    args: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    """sbatch options of :data:`SBATCH_READ` given on its command line, as (name, value)."""
    name: str = ""
    """What messages call a script given as text."""


def child_script_words(
    parts: list[str], number: int, s: Script, read: Callable[[str, Script], None]
) -> list[str]:
    """``parts`` (a command list's words, after its builtins ran) with each command that runs a
    script file (:func:`script_command`) replaced by the words that file runs, the runner's
    prefix kept; ``read`` reads a script's text into a :class:`.shell_state.Script`."""
    out: list[str] = []
    command: list[str] = []
    for w in [*parts, None]:
        if w is not None and not is_separator(w):
            command.append(w)
            continue
        found = script_command(command, s)
        words = None if found is None else run_child(found, number, s, read)
        out += command if words is None else command[: found.index] + words
        if w is not None:
            out.append(w)
        command = []
    return out


def job_script(
    heredoc: Heredoc, command: list[str], number: int, s: Script, read: Callable[[str, Script], None]
) -> list[tuple[str, int]]:
    """The words the job script a here-document gives ``command`` (``sbatch [OPTIONS]``, ``bash
    [-s ARGS]``) on its standard input runs, each on line ``number``: its body, expanded as bash
    expands an unquoted here-document (:func:`.expansion.expand_heredoc`; a quoted delimiter keeps
    it as written), read in a new shell. Functions are not in the job (bash passes one only with
    ``export -f``)."""
    text = heredoc.body if heredoc.quoted else expand_heredoc(heredoc.body, s.scalars, s.arrays)
    dropped = redirections(command)
    command = [w for j, w in enumerate(command) if j not in dropped]
    runner, args, options = command[0], (), ()
    if runner == "sbatch":
        parsed = _sbatch(command[1:])
        if parsed is None:
            return []
        options = parsed[0]
    else:
        rest = command[1:]
        while rest and rest[0] != "-s" and rest[0][:1] in "-+":
            rest = rest[2:] if rest[0] in _SHELL_VALUE_OPTIONS else rest[1:]
        args = tuple(rest[1:]) if rest[:1] == ["-s"] else ()
    child = Child(
        runner,
        0,
        s.scalars.get("PWD"),
        text=text,
        args=args,
        options=options,
        name="the job script of this here-document",
    )
    words = run_child(child, number, s, read)
    return [(w, number) for w in words or []]


def script_command(command: list[str], s: Script) -> Child | None:
    """Where ``command`` runs a script (a file planner can read, or ``sbatch --wrap``), and how;
    None when it does not, or runs a file planner cannot find or read."""
    pwd = s.scalars.get("PWD")
    dropped = redirections(command)  # bash(1) "Redirection": not the command's arguments
    command = [w for j, w in enumerate(command) if j not in dropped]
    if command and command[0] == "sbatch":
        parsed = _sbatch(command[1:])
        if parsed is None:
            return None
        options, wrap, rest = parsed
        if wrap is not None:
            return Child("sbatch", 0, pwd, text=wrap, options=options, name="the job script of sbatch --wrap")
        if not rest:
            return None  # the script on standard input (job_script)
        return _located("sbatch", 0, rest[0], rest[1:], pwd, options)
    for k, w in enumerate(command):
        if w not in SHELLS:
            continue
        i = k + 1
        while i < len(command) and command[i][:1] in "-+" and len(command[i]) > 1:
            option = command[i]
            if option == "--":
                i += 1
                break
            if option[0] == "-" and option[1:].isalpha() and ("c" in option[1:] or "s" in option[1:]):
                return None  # bash -c STRING (.shell_builtins.inner_commands) or the standard input
            i += 2 if option in _SHELL_VALUE_OPTIONS else 1
        if i < len(command):
            return _located(w, k, command[i], command[i + 1 :], pwd, ())
        return None
    return _executed(command, pwd)


WRAPPERS = frozenset(
    (
        "srun",
        "mpirun",
        "mpiexec",
        "env",
        "nohup",
        "time",
        "exec",
        "timeout",
        "numactl",
        "taskset",
        "stdbuf",
        "nice",
    )
)
"""Commands that run the command given after their options (``srun ./train.sh``, ``nohup
./train.sh``): a script file among their words is run, as one first on the line is."""

_SHEBANG = re.compile(r"#!\s*(?:/usr)?/bin/(?:env\s+(?:-\S+\s+)*)?(bash|sh)\b")
"""A first line that runs the file with bash or sh (``#!/bin/bash``, ``#!/usr/bin/env bash``)."""


def _executed(command: list[str], pwd: str | None) -> Child | None:
    """A shell script run as a command by its path (``./train.sh ARGS``, ``"$(dirname "$0")"/run.sh``,
    ``srun ./train.sh``): the first word, or the first word after a :data:`WRAPPERS` command's
    options, naming a file with a ``/`` in it (bash(1) "COMMAND EXECUTION": a name without one is
    looked up on ``$PATH``, which a launch does not rely on) that is a bash or sh script: its first
    line says so (:data:`_SHEBANG`), or it has none and ends in ``.sh`` (bash runs a file it
    cannot execute as a shell script). The runner is that shell."""
    if not command:
        return None
    candidates = range(len(command)) if command[0].rsplit("/", 1)[-1] in WRAPPERS else range(1)
    for k in candidates:
        word = command[k]
        if "/" not in word or unresolved_in(word) is not None:
            continue
        full = joined(known_value(pwd), word)
        if full is None or not os.path.isfile(full):
            continue
        try:
            with open(full, "rb") as fh:
                first = fh.readline(256).decode("utf-8", "replace")
        except OSError:
            return None
        m = _SHEBANG.match(first)
        if m is None and (first.startswith("#!") or not word.endswith(".sh")):
            return None  # a Python file, a binary, another interpreter: not read as a shell script
        return Child(m.group(1) if m else "bash", k, pwd, path=full, args=tuple(command[k + 1 :]))
    return None


def _located(
    runner: str, k: int, target: str, args: list[str], pwd: str | None, options: tuple
) -> Child | None:
    """The found file's :class:`Child`, or None when it cannot be read: its path depends on what
    planner cannot know, or no such file is in the working directory (bash would also look for a
    relative FILE on ``$PATH``, which a launch does not rely on)."""
    if unresolved_in(target) is not None:
        return None
    full = joined(known_value(pwd), target)
    if full is None or not os.path.isfile(full):
        return None
    return Child(runner, k, pwd, path=full, args=tuple(args), options=options)


def _sbatch(
    words: list[str], read: tuple[str, ...] = SBATCH_READ
) -> tuple[tuple[tuple[str, str], ...], str | None, list[str]] | None:
    """sbatch's options named in ``read`` (``-D`` as ``--chdir``, ``-N`` as ``--nodes``), its
    ``--wrap`` string (None without one) and the words after its options (the job script and its
    arguments); None where an option's value is missing."""
    options: dict[str, str] = {}
    wrap = None
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        option = words[i]
        name, eq, value = option.partition("=")
        if option == "--":
            i += 1
            break
        if not eq and (option in SBATCH_VALUE_OPTIONS or option == "--wrap"):
            if i + 1 >= len(words):
                return None
            value = words[i + 1]
            i += 1
        elif (
            not eq and option[:2] in SBATCH_VALUE_OPTIONS and len(option) > 2 and not option.startswith("--")
        ):
            name, value = option[:2], option[2:]
        name = {"-D": "--chdir", "-N": "--nodes"}.get(name, name)
        if name == "--wrap":
            wrap = value
        elif name in read:
            options[name] = value
        i += 1
    return tuple(options.items()), wrap, words[i:]


def directives(text: str, read: tuple[str, ...] = SBATCH_READ) -> dict[str, str]:
    """The options named in ``read`` (:data:`SBATCH_READ`) a job script's ``#SBATCH`` lines give (sbatch(1): read
    "before any executable commands", up to "the first non-comment non-whitespace line"; the
    line's words split as the shell would, a ``#`` after them a comment), later lines overriding
    earlier ones. A line planner cannot split is skipped, as the rest of a directive it cannot read."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH") or stripped[7:8] not in (" ", "\t"):
            continue
        try:
            words = shlex.split(stripped[7:], comments=True)
        except ValueError:
            continue
        parsed = _sbatch(words, read)
        if parsed is not None:
            out.update(parsed[0])
    return out


def _job_environment(export: str, s: Script) -> Environment | None:
    """The variables a job starts with under sbatch(1) ``--export=VALUE``: ``ALL`` every exported
    variable, ``NONE`` none (Slurm's own ``SLURM_*`` only), ``[ALL,]NAME[=VALUE],...`` the named
    ones (and all with ``ALL``); None for a value planner cannot know. A variable of the submitting
    script the job does not get is empty there, not unknown."""
    if unresolved_in(export) is not None:
        return None
    env, scalars = exported(s)
    inherited = dict(env)  # sbatch's own environment: a variable the script did not export is not in it
    items = [x for x in export.split(",") if x]
    if "ALL" not in items:
        scalars = {name: "" for name in scalars}
        env = {}
    for item in items:
        if item in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if not NAME.fullmatch(name):
            return None
        env[name] = value if eq else inherited.get(name, "")
        scalars[name] = env[name]
    return env, scalars


def _environment_and_pwd(child: Child, text: str, s: Script) -> tuple[Environment, str | None] | None:
    """The new shell's environment and working directory (a ``PWD`` value; None: unset); None
    where the job's ``--export`` cannot be known."""
    if child.runner != "sbatch":
        return exported(s), child.pwd
    options = directives(text)
    from_env = exported(s)[0].get("SBATCH_EXPORT")  # sbatch's own environment
    if from_env is not None:
        options["--export"] = from_env
    options.update(child.options)
    environment = _job_environment(options.get("--export", "ALL"), s)
    if environment is None:
        return None
    chdir = options.get("--chdir")
    if chdir is None:
        return environment, child.pwd
    if unresolved_in(chdir) is not None:
        return environment, chdir
    full = joined(known_value(child.pwd), chdir)
    return environment, full if full is not None else child.pwd


def run_child(child: Child, number: int, s: Script, read: Callable[[str, Script], None]) -> list[str] | None:
    """The words the script ``child`` runs, read in a new shell (see the module's docstring); None
    where planner cannot know the shell it runs in (the command is then left as it is)."""
    if child.path is not None:
        shown = display(os.path.relpath(child.path, s.root) if s.root else child.path)
        where = f"line {number}: {shown} (run by {child.runner})"
    else:
        shown = child.name
        where = f"line {number}: {shown}"
    if s.depth >= MAX_SOURCE_DEPTH or s.sourced >= MAX_SOURCED_FILES:
        raise NestingBound(
            f"scripts nest deeper than {MAX_SOURCE_DEPTH} (or more than {MAX_SOURCED_FILES} files are "
            f"read): does {shown} run itself?"
        )
    text = child.text
    read_bytes = 0
    if text is None:
        try:
            text = read_text_capped(Path(child.path), expected="a shell script")
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
        read_bytes = len(text)
        if s.sourced_bytes + read_bytes > MAX_FILE_BYTES:
            raise SpecError(
                f"{where}: the files read hold more than {MAX_FILE_BYTES // 2**20} MiB in all; not a launch"
            )
    shell = _environment_and_pwd(child, text, s)
    if shell is None:
        return None
    (env, scalars), pwd = shell
    job = Script(
        root=s.root,
        depth=s.depth + 1,
        sourced=s.sourced + (child.path is not None),
        sourced_bytes=s.sourced_bytes + read_bytes,
        shell_depth=s.depth + 1,
    )
    job.env.update(env)
    job.exported.update(env)  # the job inherits them: exported there too
    job.scalars.update(scalars)
    if ROOT_KEY in s.scalars:
        job.scalars[ROOT_KEY] = s.scalars[ROOT_KEY]
    if pwd is not None:
        job.scalars["PWD"] = pwd
    if child.runner == "sbatch" or SLURM_KEY in s.scalars:
        job.scalars[SLURM_KEY] = "1"
    if child.path is not None:
        job.scalars["0"] = child.path
        job.arrays["BASH_SOURCE"] = [child.path]
    elif child.runner != "sbatch":
        job.scalars["0"] = child.runner
    bind(job, list(child.args))
    try:
        read(text, job)
        launch_after_maybe_stop(job)
    except Exit:
        pass  # its own exit (or set -e) ends it, not the script that runs it
    except NestingBound as exc:
        if s.depth > 0:
            raise
        raise SpecError(f"{where}: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    s.sourced, s.sourced_bytes = job.sourced, job.sourced_bytes
    words = [w for w, _ in job.words]
    if training_scripts(words):
        s.launch_env = dict(job.launch_env if job.launch_env is not None else job.env)
        s.job_nodes = job.job_nodes or _job_nodes(child, text, number, s)
    return words


def _job_nodes(child: Child, text: str, number: int, s: Script) -> tuple[int, str] | None:
    """The node count of the Slurm job ``child`` submits (``sbatch``; None for another runner) and
    what says so: its command line's ``-N`` / ``--nodes``, else its script's ``#SBATCH`` lines
    (sbatch(1): "command line options will override any options set in a batch script"); a
    ``MIN-MAX`` range or a value planner cannot know says no one count (None)."""
    if child.runner != "sbatch":
        return None
    given = dict(child.options).get("--nodes")
    if given is not None:
        where = f"sbatch --nodes {given} on line {number}"
    else:
        given = directives(text, ("--nodes",)).get("--nodes")
        shown = (
            display(os.path.relpath(child.path, s.root) if s.root else child.path)
            if child.path
            else child.name
        )
        where = f"#SBATCH --nodes={given} in {shown}"
    if given is None or not given.isdigit() or int(given) <= 0:
        return None
    return int(given), where
