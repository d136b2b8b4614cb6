"""Every golden Megatron export round-trips through ``planner check`` (issue 54, item 4; issue 55):
the plan of each golden case (tests/test_megatron.py CASES, whose exports tests/golden holds) and
the README's main job, exported with both launchers, then checked as a user checks a launch: the
step time predicted from the exported files is the plan's, within 0.5%. A slow-marked variant does
the same for the default plan of every preset model (planner search's best on the preset's own
cluster size)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner import api
from planner.launch.check import check_file
from planner.plans.plan_file import plan_document, write_plan
from planner.profiles.hardware import load_cluster
from planner.profiles.software import cluster_families, default_software
from tests.test_megatron import CASES

LAUNCH_FILES = ("megatron_args.txt", "launch_torchrun.sh", "launch_slurm.sh")


def _step_time(path: Path, cluster=None) -> float:
    verdict = check_file(str(path), cluster)
    errors = [f.message for f in verdict.findings if f.level == "error"]
    assert not errors, f"{path.name}: {errors}"
    assert not [f for f in verdict.findings if "not interpreted" in f.message], verdict.findings
    return verdict.metrics["step_time_s"]


def _round_trip(plan_path: Path, cluster, out: Path) -> dict[str, float]:
    """The plan's step time and each exported launch file's, as check predicts them."""
    times = {"plan": _step_time(plan_path)}
    for launcher in ("torchrun", "slurm"):
        api.write_export(out, api.export_megatron(plan_path, launcher), force=True)
    for name in LAUNCH_FILES:
        times[name] = _step_time(out / name, cluster)
    return times


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_export_re_checks_at_the_plans_step_time(name, tmp_path):
    plan = CASES[name]()
    software = default_software("megatron", cluster_families(plan.cluster))
    plan = replace(plan, software=software)
    path = tmp_path / "plan.yaml"
    write_plan(path, plan_document(plan, {}, None))
    times = _round_trip(path, plan.cluster, tmp_path / "launch")
    for name_, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (name_, times)


def test_readme_main_job_re_checks_at_the_plans_step_time(run_cli, tmp_path):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "planner search --model llama3-70b" in x)
    argv = line[line.index("planner search") :].split()[1:]
    if "--out" in argv:
        del argv[argv.index("--out") : argv.index("--out") + 2]
    plan = tmp_path / "plan.yaml"
    assert run_cli(*argv, "--out", str(plan), "-q").exit_code == 0
    option = next(f for f in ("--cluster", "-c") if f in argv)
    nodes = next(argv[argv.index(f) + 1] for f in ("--nodes", "-n") if f in argv)
    cluster = load_cluster(argv[argv.index(option) + 1], int(nodes))
    times = _round_trip(plan, cluster, tmp_path / "launch")
    for name_, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (name_, times)
