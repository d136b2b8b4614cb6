"""What the launcher in front of the training command sets: the node count it starts the training
processes on (:func:`launcher_nodes`), and the environment the training command itself starts
with (:func:`command_environment`): the environment of the shell that runs it
(:attr:`.shell_state.Script.env`, or a child script's), changed by the commands in front of it on
its line that set their command's environment, so that the environment checks
(``CUDA_DEVICE_MAX_CONNECTIONS``, :mod:`.yaml_rules`) judge what the training processes get:

* ``env [-i] [-u NAME] [NAME=VALUE]... COMMAND`` (env(1): ``-i`` / ``--ignore-environment`` / ``-``
  "start with an empty environment", ``-u`` / ``--unset`` "remove variable from the environment");
* ``srun --export=VALUE`` (srun(1) ``--export``: ``ALL``, the default, propagates the whole
  environment, ``NONE`` none of it, ``[ALL,]NAME[=VALUE],...`` the named variables, given their
  values, with every other one when ``ALL`` is listed);
* ``mpirun -x NAME[=VALUE]`` (Open MPI mpirun(1): "Export the specified environment variables to
  the remote nodes before executing the program") and ``mpirun -genv NAME VALUE`` / ``-env NAME
  VALUE`` (MPICH and Intel MPI ``mpiexec``: "set environment variable for all processes").

A value planner cannot know (``srun --export=$LIST``) leaves the environment as it was.
"""

from __future__ import annotations

from planner.launch.megatron.expansion import unresolved_in
from planner.launch.megatron.shell_state import NAME

Environment = dict[str, "str | None"]
"""Variable name -> value (None: unset)."""

_ENV_VALUE_OPTIONS = ("-C", "--chdir", "-S", "--split-string", "-P", "-a", "--argv0")
"""env(1) options whose value is the next word (GNU coreutils env)."""


def command_environment(prefix: list[str], env: Environment) -> Environment:
    """``env`` as the command after ``prefix`` (the words before the training script on its line:
    ``srun --export=ALL,X=1 torchrun --nproc-per-node 8``) gets it."""
    out = dict(env)
    launcher = None
    i = 0
    while i < len(prefix):
        word = prefix[i]
        base = word.rsplit("/", 1)[-1]
        nxt = prefix[i + 1] if i + 1 < len(prefix) else None
        if base == "env":
            i = _env(prefix, i + 1, out)
            continue
        if base == "srun" or base in ("mpirun", "mpiexec", "orterun"):
            launcher = "srun" if base == "srun" else "mpi"
        elif launcher == "srun" and (word == "--export" or word.startswith("--export=")):
            _srun_export(word.partition("=")[2] if "=" in word else (nxt or ""), out)
            i += 0 if "=" in word else 1
        elif launcher == "mpi" and word == "-x" and nxt is not None:
            name, eq, value = nxt.partition("=")
            if eq and NAME.fullmatch(name):
                out[name] = value
            i += 1
        elif launcher == "mpi" and word in ("-genv", "-env", "--genv", "--env") and i + 2 < len(prefix):
            if NAME.fullmatch(prefix[i + 1]):
                out[prefix[i + 1]] = prefix[i + 2]
            i += 2
        i += 1
    return out


def _env(words: list[str], i: int, out: Environment) -> int:
    """env(1)'s options and assignments from ``words[i]`` applied to ``out``; the index of its
    command."""
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if word in ("-i", "--ignore-environment", "-"):
            out.clear()
        elif word in ("-u", "--unset") and i + 1 < len(words):
            out[words[i + 1]] = None
            i += 1
        elif word.startswith("--unset="):
            out[word[len("--unset=") :]] = None
        elif word.startswith("-u") and not word.startswith("--"):
            out[word[2:]] = None
        elif word in _ENV_VALUE_OPTIONS:
            i += 1
        elif word.startswith("-") and not eq:
            pass  # -0, -v, --debug, --chdir=DIR, ...: the environment stays
        elif eq and NAME.fullmatch(name):
            out[name] = value
        else:
            return i
        i += 1
    return i


def _srun_export(value: str, out: Environment) -> None:
    """srun(1) ``--export=VALUE`` applied to ``out``."""
    if unresolved_in(value) is not None:
        return
    items = [x for x in value.split(",") if x]
    before = dict(out)
    if "ALL" not in items:
        for name in out:
            out[name] = None
    for item in items:
        if item in ("ALL", "NONE"):
            continue
        name, eq, given = item.partition("=")
        if NAME.fullmatch(name):
            out[name] = given if eq else before.get(name)


def launcher_nodes(prefix: list[str]) -> tuple[int, str] | None:
    """The node count the launcher in ``prefix`` starts the training processes on, and the words
    that say it: torchrun's ``--nnodes N`` (``N:N``; an elastic ``MIN:MAX`` range says no one count;
    torch.distributed.run ``--nnodes``: "Number of nodes, or the range of nodes in form
    <minimum_nodes>:<maximum_nodes>"), else srun's ``-N N`` / ``--nodes=N`` (srun(1): "-N,
    --nodes=<minnodes>[-maxnodes]"); None when neither gives a single positive count."""
    torchrun = srun = None
    launcher = None
    for k, word in enumerate(prefix):
        base = word.rsplit("/", 1)[-1]
        if base == "torchrun" or (word == "-m" and prefix[k + 1 : k + 2] == ["torch.distributed.run"]):
            launcher = "torchrun"
            continue
        if base == "srun":
            launcher = "srun"
            continue
        names = ("--nnodes", "--nnodes=") if launcher == "torchrun" else ("-N", "--nodes", "--nodes=")
        if launcher is None or not word.startswith(names):
            continue
        if word in ("--nnodes", "-N", "--nodes"):
            value = prefix[k + 1] if k + 1 < len(prefix) else ""
        elif word.startswith("-N"):
            value = word[2:]
        else:
            value = word.partition("=")[2]
        low, sep, high = value.partition(":" if launcher == "torchrun" else "-")
        if low.isdigit() and int(low) > 0 and (not sep or high == low):
            option = word.partition("=")[0] if word.startswith("--") else "-N"
            found = (int(low), f"{launcher} {option} {low}")
            if launcher == "torchrun":
                torchrun = found
            else:
                srun = found
    return torchrun or srun
