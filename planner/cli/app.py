"""The ``planner`` command: parse, load, call :mod:`planner.api`, render. Nothing else.

This module creates the typer app and its command groups, takes the root options (``--version``,
``--debug``) and maps errors to exit codes (:func:`main`). The commands live in their own modules
and register themselves on the app when imported at the bottom of this file; the options they share
are in :mod:`planner.cli.options`, their helpers in :mod:`planner.cli.common`.

Exit codes: 0 ok; 1 spec or user error (bad file, unknown name, invalid configuration, failed
check); 2 usage error (bad flags); 3 no feasible plan. Errors print one line on stderr; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import inspect
import sys
from typing import Annotated

import typer

from planner import __version__
from planner.errors import PlannerError


def _flags_take_no_value() -> None:
    """Help shows no type for on/off flags (typer >= 0.20 prints ``<bool>`` beside ``--json``)."""
    from typer import core

    option = getattr(core, "TyperOption", None)
    show = getattr(option, "display_type_rich", None)
    if show is None or getattr(show, "_planner", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else show(self, ctx)

    display_type_rich._planner = True
    option.display_type_rich = display_type_rich


_flags_take_no_value()

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find the fastest way to train a large transformer on a GPU cluster, and prove it fits.",
)
models_app = typer.Typer(no_args_is_help=True, help="Built-in model presets.")
hardware_app = typer.Typer(no_args_is_help=True, help="Built-in GPU types and node templates.")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")
export_app = typer.Typer(no_args_is_help=True, help="Export a plan to a training framework.")
app.add_typer(export_app, name="export")

_state = {"debug": False}


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"planner {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """planner: parallelism planning for large-model training."""
    _state["debug"] = debug


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; maps errors to exit codes.

    typer may use its own vendored click, so click's exceptions are recognised by their shape
    (``exit_code`` and ``show``) rather than by class.
    """
    try:
        result = app(args=argv, standalone_mode=False)
        return int(result or 0)
    except PlannerError as exc:
        if _state["debug"]:
            raise
        sys.stderr.write(f"error: {exc}\n")
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
                message = " ".join(str(exc.format_message()).split())
            if _state["debug"] or not message:
                exc.show()  # help for a bare command
            else:
                # One line, like every other error (click's own shows usage and a hint as well).
                sys.stderr.write(f"error: {message} (see --help)\n")
            return int(code)
        raise


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
from planner.cli import report as _report  # noqa: E402,F401  (registers commands)
from planner.cli import sweep as _sweep  # noqa: E402,F401  (registers commands)
from planner.cli import whatif as _whatif  # noqa: E402,F401  (registers commands)
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
