"""The state of a launch script being read (:class:`Script`: its words, variables, environment and
where it runs) and the words of the messages about it. :mod:`.shell` reads statements into it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from planner.inputs.validation import printable
from planner.launch.megatron.expansion import UNRESOLVED_RE, unresolved_in

NAME = re.compile(r"[A-Za-z_]\w*")
"""A shell variable name (bash(1) "DEFINITIONS": name)."""

MAX_ITERATIONS = 4096
"""Iterations one loop is run for at most (words of a ``for``, rounds of a ``while`` / ``until``):
a loop that would run longer is read as a branch that cannot be known (``cap:?:LINE``)."""
MAX_LOOP_RUNS = 16384
"""Loop bodies a script runs in all (nested loops multiply): past it, an error naming it."""

BRANCH_KINDS = ("if", "loop", "cap")
"""The kinds of a branch that cannot be known, the first field of ``KIND:NAME:LINE``: an ``if`` or
``case`` whose condition cannot be known (NAME the variable it depends on, ``?`` when none), a
loop whose rounds cannot be known, a loop stopped at :data:`MAX_ITERATIONS`."""


def is_branch(unknown: str) -> bool:
    """Whether ``unknown`` (an unresolved marker's name) is a branch's ``KIND:NAME:LINE``."""
    return unknown.split(":", 1)[0] in BRANCH_KINDS and unknown.count(":") == 2


def branch_of(unknown: str) -> str:
    """The construct a branch's ``KIND:NAME:LINE`` names, for a message: ``the if/case on line
    L``, ``the loop on line L``, or that loop with planner's cap."""
    kind, _, line = unknown.split(":")
    if kind == "if":
        return f"the if/case on line {line}"
    if kind == "cap":
        return f"the loop on line {line} (stopped at planner's cap of {MAX_ITERATIONS} iterations)"
    return f"the loop on line {line}"


@dataclass
class Script:
    """A script read: its command words with line numbers, variables and exported environment."""

    words: list[tuple[str, int]] = field(default_factory=list)
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str] | dict[str, str]] = field(default_factory=dict)
    """Indexed arrays (lists) and associative arrays (dicts, in the order keys were first set)."""
    env: dict[str, str | None] = field(default_factory=dict)
    """Environment assignments (``export NAME=v`` or ``NAME=v`` before a command); None = unset."""
    exported: set[str] = field(default_factory=set)
    """Names with bash's export attribute, set or not: ``export NAME`` / ``declare -x NAME`` given
    before the variable has a value, and the environment the script starts with (``planner check
    --set``); a later ``NAME=value`` is exported (bash(1) "ENVIRONMENT": "marked for automatic
    export"), an ``unset NAME`` clears the attribute (:func:`exports`)."""
    assigned_lines: dict[str, int] = field(default_factory=dict)
    launch_env: dict[str, str | None] | None = None
    """The environment of the shell that ran the training command, when a job or child script ran
    it (:mod:`.child_scripts`, :mod:`.heredoc`): what it exports itself, not only what this script
    exports. None: this script ran it, with :attr:`env`."""
    job_nodes: tuple[int, str] | None = None
    """The node count of the Slurm job that ran the training command, when an ``sbatch`` this
    script runs submitted it, and what says so (``sbatch -N 4 on line 7``, ``#SBATCH --nodes=4 in
    job.sh``): :mod:`.child_scripts`, read by :func:`.arguments.launch_nodes`. None otherwise."""
    root: str | None = None
    """The script's directory (links resolved), where ``if [ -f FILE ]`` is answered; None for a
    text given without its file, where ``source`` is an error."""
    allexport: bool = False
    """``set -a``: every assignment is exported."""
    dirs: list[str] = field(default_factory=list)
    """``pushd``'s directory stack."""
    depth: int = 0
    """How many ``source`` commands are being run (bounded by :data:`MAX_SOURCE_DEPTH`), the new
    shells of child scripts counted too (:mod:`.child_scripts`)."""
    shell_depth: int = 0
    """:attr:`depth` at this shell's own top level: 0 in the script read, the depth it starts at in a
    child script's new shell, where a ``return`` outside a function and a sourced file is bash's
    error as in the script read (not the end of a sourced file)."""
    sourced: int = 0
    """Files sourced so far (bounded by :data:`MAX_SOURCED_FILES`)."""
    sourced_bytes: int = 0
    """Their size in all (bounded by MAX_FILE_BYTES, the largest input file planner reads)."""
    functions: dict[str, Any] = field(default_factory=dict)
    """The functions defined so far (:class:`.functions.Function` by name)."""
    frames: list[Any] = field(default_factory=list)
    """The calls being run, innermost last (:class:`.functions.Frame`)."""
    calls: int = 0
    """Calls made so far (bounded by :data:`.functions.MAX_CALLS`)."""
    heredoc: Any = None
    """The here-document the line being read opens (:class:`.shell_text.Heredoc`), for its command."""
    errexit: int | None = None
    """The line of the ``set -e`` (``set -o errexit``) in force, None while it is off."""
    errexit_unknown: tuple[int, str] | None = None
    """The line of a ``set -e`` in a branch that cannot be known, and the branch's
    ``KIND:NAME:LINE``, while ``set -e`` is not otherwise in force (:func:`.shell_exit.set_maybe`)."""
    nounset_unknown: tuple[int, str] | None = None
    """The line of a ``set -u`` in a branch that cannot be known, and the branch's
    ``KIND:NAME:LINE``, while ``set -u`` is not otherwise in force (:func:`.shell_exit.set_maybe`)."""
    nounset_probing: bool = False
    """A copy of the state being read to see whether ``set -u`` would stop it
    (:func:`.shell_exit.nounset_probe`)."""
    pipefail: bool = False
    """``set -o pipefail``: a pipeline fails when any of its commands fails."""
    pipefail_unknown: tuple[int, str] | None = None
    """The line of a ``set -o pipefail`` in a branch that cannot be known, and the branch's
    ``KIND:NAME:LINE``, while pipefail is not otherwise in force (:func:`.shell_exit.set_maybe`)."""
    errexit_ignored: int = 0
    """How many commands being run ignore ``set -e`` (a function called before ``&&`` / ``||``)."""
    stop: Any = None
    """Where the script stopped (:class:`.shell_exit.Exit`: ``exit``, ``set -e``, ``set -u``), None
    while it runs."""
    maybe_stop: Any = None
    """The first place the script may stop, in a branch that cannot be known
    (:class:`.shell_exit.MaybeStop`), for an error if a training command comes after it."""
    loops: int = 0
    """How many loops are being run around the statement being read (``break`` / ``continue``
    leave one; 0 inside a function called from a loop, as in bash)."""
    loop_runs: int = 0
    """Loop bodies run so far (bounded by :data:`MAX_LOOP_RUNS`)."""
    loop_unknown: str | None = None
    """Why the loop about to be read as an undeterminable branch cannot be run (``loop:?:LINE``,
    ``cap:?:LINE``; :func:`.loops.run_loop`), for the branch's marker."""
    missing: list[str] = field(default_factory=list)
    """Relative paths a file test found missing from the working directory planner assumed (the
    script's own, ``$PWD`` not given), for the message of a script that then stops."""
    status: bool | str = True
    """The status of the last command list run (True, False or unknown, ``if:NAME:LINE``)."""
    assumed: set[str] = field(default_factory=set)
    """The unknown statuses (``if:?:LINE``) of a command planner does not run (``mkdir``,
    ``python``) or a test of a file outside the script's directory (on the cluster): a stop that
    hangs on one is not taken (:func:`.shell_exit.maybe_stop`)."""


class Exit(Exception):
    """The script stops on ``line`` (of the file or body being read) for ``why`` (``exit 1``,
    ``set -e: false fails``); ``trail`` says through which calls and sources, innermost first."""

    def __init__(self, line: int, why: str):
        super().__init__(why)
        self.line, self.why = line, why
        self.trail: list[str] = []

    def where(self) -> str:
        """``line N (in f, called on line M)`` for messages."""
        return f"line {self.line}" + "".join(f" ({t})" for t in self.trail)


def exports(s: Script, name: str) -> bool:
    """Whether an assignment to ``name`` reaches the environment of the commands ``s`` runs: under
    ``set -a``, for a name with the export attribute (:attr:`Script.exported`), or one whose value
    is in the environment already (bash(1) "ENVIRONMENT")."""
    return s.allexport or name in s.exported or s.env.get(name) is not None


def display(word: str) -> str:
    """A word for a message: each unresolved marker written back as ``$NAME`` (or its command)."""

    def back(m: re.Match) -> str:
        name = unresolved_in(m.group(0)) or ""
        return f"${name}" if NAME.fullmatch(name) else name

    return printable(UNRESOLVED_RE.sub(back, word))


def why_unknown(word: str) -> str:
    """Why a word with an unresolved marker cannot be known, for a message."""
    name = unresolved_in(word) or "?"
    if is_branch(name):
        var = name.split(":")[1]
        return f"depends on {branch_of(name)}" + (
            f" (on {var}, which the script never sets; pass planner check --set {var}=VALUE)"
            if var != "?"
            else ""
        )
    if NAME.fullmatch(name):
        return f"needs {name}, which the script never sets (set it, or pass planner check --set {name}=VALUE)"
    return f"needs {name}, which planner does not run"
