"""Here-documents in a launch script (bash(1) "Here Documents"): ``sbatch <<EOF ... EOF``, the
way the MoE Model Zoo's ``sbatch_benchmarking.sh`` submits its job, gives sbatch the job script
on its standard input, and the job runs it with the submitting shell's exported environment
(sbatch(1) ``--export``: "ALL", the default) in the directory sbatch ran in. So the job script is
read as a script of its own: its lines expanded as bash expands an unquoted here-document
(:func:`.expansion.expand_heredoc`; a quoted delimiter keeps them as written), then read in a
shell holding only the exported variables; the words it runs carry the ``sbatch`` line. A
here-document given to any other command (``cat <<EOF``) is only printed and not read."""

from __future__ import annotations

import re
from collections.abc import Callable

from planner.inputs.errors import SpecError
from planner.launch.megatron.expansion import ROOT_KEY, expand_heredoc
from planner.launch.megatron.functions import bind
from planner.launch.megatron.shell_exit import Exit, launch_after_maybe_stop
from planner.launch.megatron.shell_state import NAME, Script
from planner.launch.megatron.shell_text import Heredoc, training_scripts

JOB_READERS = ("sbatch", "bash", "sh", "/bin/bash", "/bin/sh")
"""Commands that run the here-document they read as a script."""

_OPERATOR = re.compile(r"(?<![<\d])<<-?\s*(['\"]?)[A-Za-z_][\w.-]*\1(?!<)")


def here_operator(statement: str) -> str:
    """The statement without its ``<<WORD`` (the here-document is read separately)."""
    return _OPERATOR.sub(" ", statement, count=1)


def exported(s: Script) -> tuple[dict[str, str], dict[str, str]]:
    """The environment a child process of ``s`` starts with (the exported variables, and the ones
    the script started with, ``planner check --set``, that it never assigned), and the same with
    each variable the script set without exporting as empty: absent in the child, so empty there,
    not unknown."""
    env: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name, value in s.scalars.items():
        if not NAME.fullmatch(name):
            continue
        if s.env.get(name) is not None:
            env[name] = s.env[name]
        elif name not in s.assigned_lines and name not in s.env:
            env[name] = value
        else:
            seen[name] = ""
    return env, {**seen, **env}


def job_script(
    heredoc: Heredoc, number: int, s: Script, read: Callable[[str, Script], None]
) -> list[tuple[str, int]]:
    """The words the job script a here-document gives ``sbatch`` (or ``bash``) runs, each on line
    ``number``; ``read`` reads a script's text into a :class:`.shell_state.Script`. Functions are
    not in the job (bash passes one only with ``export -f``)."""
    text = heredoc.body if heredoc.quoted else expand_heredoc(heredoc.body, s.scalars, s.arrays)
    job = Script(root=s.root, depth=s.depth, sourced=s.sourced, sourced_bytes=s.sourced_bytes)
    env, scalars = exported(s)
    job.env.update(env)
    job.exported.update(env)  # the job inherits them: exported there too
    job.scalars.update(scalars)
    for key in (ROOT_KEY, "PWD"):
        if key in s.scalars:
            job.scalars[key] = s.scalars[key]
    bind(job, [])
    try:
        read(text, job)
        launch_after_maybe_stop(job)
    except Exit:
        pass  # the job script's own exit (or set -e) ends the job, not the script that submits it
    except SpecError as exc:
        raise SpecError(f"line {number}: the job script of this here-document: {exc}") from None
    s.sourced, s.sourced_bytes = job.sourced, job.sourced_bytes
    if training_scripts([w for w, _ in job.words]):
        s.launch_env = dict(job.launch_env if job.launch_env is not None else job.env)
    return [(w, number) for w, _ in job.words]
