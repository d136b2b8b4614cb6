"""What a ``source``, a function call or a job script does in a branch of a launch script that
cannot be known (an ``if`` on a variable nothing sets): run on a copy of the script's state, what
it changes becomes a marker naming the branch's condition, a training command in it an error
naming it, a stop in it a possible stop (:mod:`.shell_exit`)."""

from __future__ import annotations

from collections.abc import Callable

from planner.inputs.errors import SpecError
from planner.launch.megatron.expansion import NOUNSET_KEY, UNRESOLVED
from planner.launch.megatron.functions import Frame, Return
from planner.launch.megatron.loops import LoopControl, Undecidable
from planner.launch.megatron.shell_exit import maybe_stop
from planner.launch.megatron.shell_state import Exit, Script, branch_of
from planner.launch.megatron.shell_text import training_scripts


def training_in_unknown(number: int, unknown: str) -> None:
    """The error for a training command in a branch that cannot be known (``if:NAME:LINE``)."""
    name = unknown.split(":")[1]
    what = (
        f"on {name}, which the script never sets" if name != "?" else "on a condition planner cannot evaluate"
    )
    raise SpecError(
        f"line {number}: the training command runs in a branch of {branch_of(unknown)}, which depends "
        f"{what}; pass planner check --set {name if name != '?' else 'NAME'}=VALUE or set it in the script"
    )


def maybe(run: Callable[[Script], None], number: int, s: Script, unknown: str) -> None:
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
        exported=set(s.exported),
        root=s.root,
        allexport=s.allexport,
        dirs=list(s.dirs),
        depth=s.depth,
        sourced=s.sourced,
        sourced_bytes=s.sourced_bytes,
        errexit=s.errexit,
        errexit_unknown=s.errexit_unknown,
        nounset_unknown=s.nounset_unknown,
        pipefail=s.pipefail,
        pipefail_unknown=s.pipefail_unknown,
        errexit_ignored=s.errexit_ignored,
        assumed=s.assumed,
        loops=s.loops,
        loop_runs=s.loop_runs,
    )
    try:
        run(scratch)
    except Exit as stop:
        maybe_stop(s, number, stop.why, unknown)
    except (SpecError, Return):
        return
    except LoopControl:  # a break in a branch that may not run: the loop cannot be run
        raise Undecidable(unknown) from None
    if scratch.maybe_stop is not None:
        maybe_stop(s, number, scratch.maybe_stop.why, unknown)
    if training_scripts([w for w, _ in scratch.words]):
        training_in_unknown(number, unknown)
    marker = UNRESOLVED.format(unknown)
    for name in (set(scratch.scalars) | set(scratch.arrays)) - {NOUNSET_KEY}:
        if scratch.scalars.get(name) != s.scalars.get(name) or scratch.arrays.get(name) != s.arrays.get(name):
            s.scalars[name] = marker
            s.arrays.pop(name, None)
            s.assigned_lines[name] = number
            if name in scratch.env or name in scratch.exported:
                s.env[name] = marker
    s.sourced, s.sourced_bytes, s.calls = scratch.sourced, scratch.sourced_bytes, scratch.calls
    s.loop_runs = scratch.loop_runs
