"""Here-documents in a launch script (bash(1) "Here Documents"): ``sbatch <<EOF ... EOF``, the
way the MoE Model Zoo's ``sbatch_benchmarking.sh`` submits its job, gives sbatch the job script
on its standard input, and the job runs it with the submitting shell's exported environment
(sbatch(1) ``--export``: "ALL", the default) in the directory sbatch ran in. This module finds the
operator and says what a new shell inherits (:func:`exported`); :func:`.child_scripts.job_script`
reads the job as a script of its own, as it reads a job script file. A here-document given to any
other command (``cat <<EOF``) is only printed and not read."""

from __future__ import annotations

import re

from planner.launch.megatron.shell_state import NAME, Script

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
