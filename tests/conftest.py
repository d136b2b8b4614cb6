"""Shared fixtures: small problems built from presets, and a CLI runner that separates stdout/stderr."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

TORCHRUN_STUB = '#!/bin/bash\nwhile [[ $# -gt 0 && "$1" != *.py ]]; do shift; done\n[[ $# -gt 0 ]] || exit 2\nshift\nprintf "%s\\0" "$@"\n'
"""A stub ``torchrun`` for the tests that run launch scripts under bash: it prints the training
script's arguments (the words after the first ``*.py``), NUL-separated; with no ``*.py`` word it
exits 2 (the test fails) instead of shifting forever, which outlived the test's timeout as an
orphan process."""


def bash_argv(script, tmp_path, args=()) -> tuple[list[str] | None, int]:
    """Run ``script`` (a path) under bash with ``args`` and :data:`TORCHRUN_STUB` first on PATH: the
    words the stub was given (None: it never ran) and bash's exit status."""
    import os
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "torchrun"
    stub.write_text(TORCHRUN_STUB.replace('printf "%s\\0" "$@"', 'printf "%s\\0" "$@" > "$OUT"'))
    stub.chmod(0o755)
    out = tmp_path / "argv"
    out.unlink(missing_ok=True)
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "OUT": str(out),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        [shutil.which("bash"), str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    return (out.read_text().split("\0")[:-1] if out.exists() else None), proc.returncode


def launch_script(tmp_path, text: str) -> Path:
    """``text`` written as the launch script ``launch.sh`` in ``tmp_path``, after a bash shebang."""
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n" + text)
    return path


def planner_words(tmp_path, text: str, preset: dict[str, str] | None = None) -> list[str]:
    """The words planner reads from the launch script ``text`` (:func:`launch_script`), started with
    the environment ``preset`` (``planner check --set``)."""
    from planner.launch.megatron.arguments import megatron_words

    path = launch_script(tmp_path, text)
    words, _, _ = megatron_words(path.read_text(), preset, path)
    return [w for w, _ in words]


@pytest.hookimpl(hookwrapper=True)
def pytest_cmdline_main(config):
    """The whole default run (``python -m pytest`` naming no test files, as the README and .ci/run
    run it) goes to one worker per CPU core when pytest-xdist is installed (the ``test`` extra
    installs it): on CI's two cores it takes about half the time of one process (docs/ci.md,
    "The project's own CI"). A run that names files or tests, chooses ``-n`` (``-n 0``: one process),
    disables the plugin (``-p no:xdist``), asks for ``--pdb`` or only collects stays as asked. Set
    here, before pytest-xdist's own hook turns ``numprocesses`` into workers (a hook wrapper runs
    before every plugin's implementation); never in a worker, which runs this hook too with
    ``numprocesses`` unset and has ``config.workerinput`` (it would start workers of its own)."""
    opt = config.option
    if (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and "PYTEST_XDIST_WORKER" not in os.environ
        and getattr(opt, "numprocesses", None) is None
        and not opt.file_or_dir
        and not getattr(opt, "usepdb", False)
        and not getattr(opt, "collectonly", False)
    ):
        opt.numprocesses = "auto"
    yield


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
def readme_plan(run_cli, tmp_path):
    """The README's main job searched as a user types it (its ``--out`` replaced): the plan file's
    path, the cluster it was searched on (loaded) and the ``-c NAME -n NODES`` words naming it."""
    from planner.profiles.hardware import load_cluster

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "planner search --model llama3-70b" in x)
    argv = line[line.index("planner search") :].split()[1:]
    if "--out" in argv:
        del argv[argv.index("--out") : argv.index("--out") + 2]
    plan = tmp_path / "plan.yaml"
    assert run_cli(*argv, "--out", str(plan), "-q").exit_code == 0
    option = next(f for f in ("--cluster", "-c") if f in argv)
    nodes = next(argv[argv.index(f) + 1] for f in ("--nodes", "-n") if f in argv)
    name = argv[argv.index(option) + 1]
    return plan, load_cluster(name, int(nodes)), ("-c", name, "-n", nodes)


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
