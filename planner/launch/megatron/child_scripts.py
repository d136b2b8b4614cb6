"""Script files a launch script runs as another process: ``sbatch [OPTIONS] FILE [ARGS]`` (the job
script a submit wrapper hands Slurm) and ``bash [OPTIONS] FILE [ARGS]`` / ``sh FILE`` (a launcher
that calls the script holding the training command, also after ``srun ...``). Such a file runs in
a new shell (bash(1) "COMMAND EXECUTION ENVIRONMENT": "the shell's execution environment ... is
not" inherited, only "shell variables and functions marked for export"), so it is read as a
script of its own, as :mod:`.heredoc` reads a job given on standard input:

* its environment is the exported variables of the script that runs it (:func:`.heredoc.exported`);
  for ``sbatch``, as sbatch(1) ``--export`` says: ``ALL`` (the default) passes them all, ``NONE``
  none, and ``[ALL,]NAME[=VALUE],...`` those named (with ``ALL``, all of them, the named ones
  given their values);
* its positional parameters are ARGS, ``$0`` and ``${BASH_SOURCE[0]}`` its path;
* it runs in the working directory of the command (sbatch(1): "The batch script ... is run in the
  working directory from which sbatch was invoked", or ``--chdir`` / ``-D``), where a relative FILE
  is found too;
* a Slurm job's ``SLURM_*`` variables are set there (:data:`.expansion.SLURM_KEY`); ``#SBATCH``
  lines are comments to bash and are not read;
* its ``exit`` ends it, not the script that runs it.

The words it runs replace the command, after what came before the runner (``srun -N 2 bash
FILE``: ``srun -N 2`` and FILE's words), each on the line of the command. A FILE planner cannot
find (a path that depends on what it cannot know, a file that is not there) is left as the command
it is; for ``sbatch`` the message of a script with no launch names it (:func:`.shell_exit.no_launch`).
Nesting is bounded as ``source`` is (:data:`.sourcing.MAX_SOURCE_DEPTH`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import MAX_FILE_BYTES, read_text_capped
from planner.launch.megatron.expansion import ROOT_KEY, SLURM_KEY, unresolved_in
from planner.launch.megatron.functions import bind
from planner.launch.megatron.heredoc import exported
from planner.launch.megatron.paths import joined
from planner.launch.megatron.shell_exit import Exit, launch_after_maybe_stop
from planner.launch.megatron.shell_state import NAME, Script, display
from planner.launch.megatron.shell_text import is_separator, redirections, training_scripts
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
        if found is None:
            out += command
        else:
            k, path, args, environment, pwd, runner = found
            out += command[:k] + _run_file(path, args, environment, pwd, runner, number, s, read)
        if w is not None:
            out.append(w)
        command = []
    return out


def script_command(
    command: list[str], s: Script
) -> tuple[int, str, list[str], Environment, str | None, str] | None:
    """Where ``command`` runs a script file, and how: (the runner's index, the file's absolute
    path, its arguments, its environment's variables, its working directory, the runner's name),
    or None (not such a command, or a file planner cannot find or read)."""
    pwd = s.scalars.get("PWD")
    pwd = pwd if pwd is not None and unresolved_in(pwd) is None else None
    dropped = redirections(command)  # bash(1) "Redirection": not the command's arguments
    command = [w for j, w in enumerate(command) if j not in dropped]
    if command and command[0] == "sbatch":
        parsed = _sbatch(command[1:], s)
        if parsed is None:
            return None
        target, args, env, chdir = parsed
        if chdir is not None:
            pwd = joined(pwd, chdir)
        return _located(0, target, args, env, pwd, "sbatch")
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
            return _located(k, command[i], command[i + 1 :], exported(s), pwd, w)
        return None
    return None


def _located(
    k: int, target: str, args: list[str], environment: Environment, pwd: str | None, runner: str
) -> tuple[int, str, list[str], Environment, str | None, str] | None:
    """The found file's tuple for :func:`script_command`, or None when it cannot be read there: its
    path depends on what planner cannot know, or no such file is in the working directory (bash
    would also look for a relative FILE on ``$PATH``, which a launch does not rely on)."""
    if unresolved_in(target) is not None:
        return None
    full = joined(pwd, target)
    if full is None or not os.path.isfile(full):
        return None
    return k, full, args, environment, pwd, runner


def _sbatch(words: list[str], s: Script) -> tuple[str, list[str], Environment, str | None] | None:
    """sbatch's job script, its arguments, the job's environment (``--export``) and ``--chdir``;
    None for ``--wrap`` (no file) or no file given (the script on standard input, :mod:`.heredoc`)."""
    export, chdir = "ALL", None
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        option = words[i]
        name, eq, value = option.partition("=")
        if option == "--":
            i += 1
            break
        if name == "--wrap":
            return None
        if not eq and option in SBATCH_VALUE_OPTIONS:
            if i + 1 >= len(words):
                return None
            value = words[i + 1]
            i += 1
        elif (
            not eq and option[:2] in SBATCH_VALUE_OPTIONS and len(option) > 2 and not option.startswith("--")
        ):
            name, value = option[:2], option[2:]
        if name == "--export":
            export = value
        elif name in ("--chdir", "-D"):
            chdir = value
        i += 1
    if i >= len(words):
        return None
    env = _job_environment(export, s)
    if env is None:
        return None
    return words[i], words[i + 1 :], env, chdir


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


def _run_file(
    path: str,
    args: list[str],
    environment: Environment,
    pwd: str | None,
    runner: str,
    number: int,
    s: Script,
    read: Callable[[str, Script], None],
) -> list[str]:
    """The words the script file ``path`` runs, read in a new shell (see the module's docstring)."""
    shown = display(os.path.relpath(path, s.root) if s.root else path)
    where = f"line {number}: {shown} (run by {runner})"
    if s.depth >= MAX_SOURCE_DEPTH or s.sourced >= MAX_SOURCED_FILES:
        raise NestingBound(
            f"scripts nest deeper than {MAX_SOURCE_DEPTH} (or more than {MAX_SOURCED_FILES} files are "
            f"read): does {shown} run itself?"
        )
    try:
        text = read_text_capped(Path(path))
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if s.sourced_bytes + len(text) > MAX_FILE_BYTES:
        raise SpecError(
            f"{where}: the files read hold more than {MAX_FILE_BYTES // 2**20} MiB in all; not a launch"
        )
    job = Script(
        root=s.root, depth=s.depth + 1, sourced=s.sourced + 1, sourced_bytes=s.sourced_bytes + len(text)
    )
    env, scalars = environment
    job.env.update(env)
    job.exported.update(env)
    job.scalars.update(scalars)
    if ROOT_KEY in s.scalars:
        job.scalars[ROOT_KEY] = s.scalars[ROOT_KEY]
    if pwd is not None:
        job.scalars["PWD"] = pwd
    if runner == "sbatch" or SLURM_KEY in s.scalars:
        job.scalars[SLURM_KEY] = "1"
    job.scalars["0"] = path
    job.arrays["BASH_SOURCE"] = [path]
    bind(job, args)
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
    return words
