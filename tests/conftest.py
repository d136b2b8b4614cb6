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


@pytest.fixture
def a100_h100_cluster(tmp_path):
    """A cluster file of 2 DGX A100 then 2 DGX H100 nodes (two GPU types, pipeline order), loaded."""
    from planner.profiles.hardware import load_cluster

    path = tmp_path / "mixed.yaml"
    path.write_text(
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-a100\n    num_nodes: 2\n"
        "  - template: dgx-h100\n    num_nodes: 2\n"
    )
    return load_cluster(str(path))
