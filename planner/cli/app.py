"""The ``planner`` command: parse, load, call :mod:`planner.api`, render. Nothing else.

The typer app, its command groups and the root options live in :mod:`planner.cli.root`; the
commands live in their own modules and register themselves on the app when imported below, in the
order ``planner --help`` lists them. This module maps errors to exit codes (:func:`main`). The
options the commands share are in :mod:`planner.cli.options`, their helpers in
:mod:`planner.cli.common`.

Exit codes: 0 ok; 1 spec or user error (bad file, unknown name, invalid configuration, failed
check); 2 usage error (bad flags); 3 no feasible plan. Errors print one line on stderr; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import inspect
import sys
import warnings

import numpy
import typer

from planner.cli.root import app, state
from planner.inputs.errors import PlannerError, UsageError
from planner.inputs.validation import printable


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; maps errors to exit codes.

    typer may use its own vendored click, so click's exceptions are recognised by their shape
    (``exit_code`` and ``show``) rather than by class.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _refuse_empty_values(args)
        # numpy's floating-point warnings never reach stderr ahead of the one-line error: a
        # non-finite result is refused at the JSON edge (planner.inputs.validation.clean) instead.
        with numpy.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result = app(args=args, standalone_mode=False)
        return int(result or 0)
    except PlannerError as exc:
        if state["debug"]:
            raise
        sys.stderr.write(f"error: {printable(str(exc))}\n")
        return exc.exit_code
    except typer.Exit as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("aborted\n")
        return 130
    except Exception as exc:
        if type(exc).__name__ == "Exit":  # click's own Exit, when typer uses the click package
            return int(getattr(exc, "exit_code", 0) or 0)
        if type(exc).__name__ == "Abort":
            sys.stderr.write("aborted\n")
            return 130
        code = getattr(exc, "exit_code", None)
        if code is not None and callable(getattr(exc, "show", None)):
            message = ""
            if callable(getattr(exc, "format_message", None)) and type(exc).__name__ != "NoArgsIsHelpError":
                message = printable(" ".join(str(exc.format_message()).split()))
            if state["debug"] or not message:
                exc.show()  # help for a bare command
            else:
                # One line, like every other error (click's own shows usage and a hint as well).
                sys.stderr.write(f"error: {message} (see --help)\n")
            return int(code)
        raise


def _refuse_empty_values(args: list[str]) -> None:
    """An empty value is an error, never "not given": ``--framework ''``, ``--out ''``, an empty
    argument, or a comma-separated list with an empty item (``-c dgx-h100,,``). No planner option
    or argument takes an empty value: names, paths, numbers and lists all have characters."""
    for i, arg in enumerate(args):
        flag, value = None, arg
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
        elif i > 0 and args[i - 1].startswith("-") and args[i - 1] != "-":
            flag = args[i - 1]
        what = f"{flag}" if flag else "an argument"
        if not value.strip():
            raise UsageError(
                f"{printable(what)}: an empty value is not allowed; give a value or leave it out"
            )
        if "," in value and any(not item.strip() for item in value.split(",")):
            raise UsageError(
                f"{printable(what)} '{printable(value)}': an empty item in a comma-separated list is not allowed"
            )


def entry() -> None:
    """``planner`` console script."""
    raise SystemExit(main())


# The command modules register their commands as they are imported, in this order: the order
# ``planner --help`` lists them in.
# isort: off
from planner.cli import presets as _presets  # noqa: E402,F401  (registers commands)
from planner.cli import estimate as _estimate  # noqa: E402,F401  (registers commands)
from planner.cli import search as _search  # noqa: E402,F401  (registers commands)
from planner.cli import export_megatron as _export_megatron  # noqa: E402,F401  (registers commands)
from planner.cli import check as _check  # noqa: E402,F401  (registers commands)
from planner.cli import calibrate as _calibrate  # noqa: E402,F401  (registers commands)
from planner.cli import export_torchtitan as _export_torchtitan  # noqa: E402,F401  (registers commands)
from planner.cli import export_bridge as _export_bridge  # noqa: E402,F401  (registers commands)
from planner.cli import report as _report  # noqa: E402,F401  (registers commands)
from planner.cli import sweep as _sweep  # noqa: E402,F401  (registers commands)
from planner.cli import whatif as _whatif  # noqa: E402,F401  (registers commands)
from planner.cli import trial as _trial  # noqa: E402,F401  (registers commands)
# isort: on


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """Give every command a one-line summary for its group's listing (``planner --help``): typer
    lists a command by its docstring's first paragraph with the source's line breaks kept, which
    breaks a wrapped docstring mid-sentence. The command's own ``--help`` is unchanged."""
    for info in typer_app.registered_commands:
        if info.short_help is None and info.callback is not None:
            first = (inspect.getdoc(info.callback) or "").split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for group in typer_app.registered_groups:
        _one_line_summaries(group.typer_instance)


_one_line_summaries(app)
