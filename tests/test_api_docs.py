"""docs/api.md runs as written, in order, in one session; what it says a block prints, the block
prints; and its README job, five lines of planner.api, gives the plan (and the plan file) that
``planner search`` gives for the same job: the library's defaults are the command's."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
from pathlib import Path

import pytest

from planner import api

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
README_JOB = (
    "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "64",
    "--global-batch-size", "1024", "--seq-len", "8192",
)  # fmt: skip
LAYOUT = ("tp", "pp", "cp", "dp", "vpp", "micro_batch_size", "recompute", "schedule", "optimizer_sharding")


def doc_blocks(text: str) -> list[tuple[str, str | None]]:
    """The doc's ```python blocks in order, each with the ```text block that follows it (before the
    next python block), which is what it prints, or None."""
    fences = re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.S | re.M)
    out: list[tuple[str, str | None]] = []
    for lang, body in fences:
        if lang == "python":
            out.append((body, None))
        elif lang == "text" and out and out[-1][1] is None:
            out[-1] = (out[-1][0], body)
    return out


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Every python block of docs/api.md run in one namespace in a fresh folder: (namespace, folder,
    [(printed, expected)])."""
    folder = tmp_path_factory.mktemp("api_doc")
    namespace: dict = {"__name__": "api_doc"}
    printed = []
    old = os.getcwd()
    os.chdir(folder)
    try:
        for code, expected in doc_blocks(DOC.read_text()):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, str(DOC), "exec"), namespace)
            printed.append((out.getvalue(), expected))
    finally:
        os.chdir(old)
    return namespace, folder, printed


def test_doc_blocks_are_found():
    blocks = doc_blocks(DOC.read_text())
    assert len(blocks) >= 5
    assert 'api.load_problem("llama3-70b", "dgx-h100", 64' in blocks[0][0] and blocks[0][1]


def test_doc_examples_print_what_the_doc_shows(session):
    _, folder, printed = session
    shown = [(got, want) for got, want in printed if want is not None]
    assert shown
    for got, want in shown:
        assert got == want
    assert (folder / "plan.yaml").is_file() and (folder / "launch" / "launch_torchrun.sh").is_file()
    assert os.access(folder / "launch" / "launch_torchrun.sh", os.X_OK)
    assert (folder / "launch-tt" / "torchtitan_job.toml").is_file()


def test_readme_job_api_plan_is_the_commands(session, run_cli, tmp_path):
    from planner.search import chain

    namespace, folder, _ = session
    best = namespace["best"]
    chain.search.cache_clear()  # the command searches again, it does not reuse the library's result
    plan_file = tmp_path / "plan.yaml"
    res = run_cli("search", *README_JOB, "--json", "--out", str(plan_file))
    assert res.exit_code == 0, res.stderr
    top = json.loads(res.stdout)["plans"][0]
    assert {k: top[k] for k in LAYOUT} == {k: getattr(best.config, k) for k in LAYOUT}
    assert top["step_time_s"] == pytest.approx(best.estimate.step_time_s, rel=5e-4)  # 4 significant digits
    assert plan_file.read_bytes() == (folder / "plan.yaml").read_bytes()


def test_api_estimate_is_the_commands(session, run_cli):
    namespace, _, _ = session
    args = ("estimate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "8", "-b", "64", "-s", "4096")
    args += ("--tp", "8", "--pp", "4", "--vpp", "5", "--json")
    priced = json.loads(run_cli(*args).stdout)  # the default is search's: --framework megatron
    assert priced == json.loads(run_cli(*args, "--framework", "megatron").stdout)
    assert priced["step_time_s"] == pytest.approx(namespace["est"].step_time_s, rel=5e-4)
    base = json.loads(run_cli(*args, "--framework", "any").stdout)
    plain = api.load_problem("llama3-70b", "dgx-h100", 8, 64, 4096, framework="any")
    config = api.ParallelConfig(tp=8, pp=4, vpp=5, schedule="interleaved")
    assert base["step_time_s"] == pytest.approx(api.estimate(plain, config).step_time_s, rel=5e-4)
    assert base["step_time_s"] != priced["step_time_s"]  # the framework's software profile matters


def test_library_defaults_are_the_commands():
    from planner.cli.search import search
    from planner.cli.sweep import sweep
    from planner.plans.problem import load_problem

    defaults = {n: p.default for n, p in inspect.signature(search).parameters.items()}
    assert defaults["top"] == api.TOP_K_DEFAULT == inspect.signature(api.search).parameters["top_k"].default
    r = api.restrictions()
    assert r.memory_headroom_bytes == defaults["headroom_gib"] * 2**30 == 2 * 2**30
    assert (
        r.framework
        == defaults["framework"]
        == inspect.signature(load_problem).parameters["framework"].default
    )
    assert r.max_micro_batch_size == defaults["max_micro_batch_size"]
    assert r.uneven_partitions is not defaults["even_partitions"]
    swept = {n: p.default for n, p in inspect.signature(sweep).parameters.items()}
    assert swept["headroom_gib"] == defaults["headroom_gib"] and swept["framework"] == r.framework
    assert inspect.signature(api.check).parameters["headroom_gib"].default == defaults["headroom_gib"]


def test_library_usage_errors_name_the_flag():
    from planner.inputs.errors import UsageError

    with pytest.raises(UsageError, match="--headroom-gib must not be negative"):
        api.restrictions(headroom_gib=-1)
    with pytest.raises(UsageError, match="--headroom-gib must be a finite number"):
        api.restrictions(headroom_gib=float("nan"))
    with pytest.raises(UsageError, match="--headroom-gib: 1000000.0 is above the largest allowed"):
        api.check("tests/data/plan_v1.yaml", headroom_gib=1e6)
    problem = api.load_problem("llama3-8b", "dgx-h100", 1, 32, 2048)
    with pytest.raises(UsageError, match="--top must be at least 1"):
        api.search(problem, top_k=0)


def test_readme_links_the_api_doc():
    assert "docs/api.md" in (ROOT / "README.md").read_text()
