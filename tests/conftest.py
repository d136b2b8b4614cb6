"""Shared fixtures: small problems built from presets, and a CLI runner that separates stdout/stderr."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli():
    """Run ``planner`` in-process; returns exit code, stdout and stderr separately."""
    from planner.cli import main

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            old = sys.argv
            sys.argv = ["planner", *args]
            try:
                code = main(list(args))
            finally:
                sys.argv = old
        return CliResult(code, out.getvalue(), err.getvalue())

    return run
