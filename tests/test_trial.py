"""``planner trial``: the top plans written as short benchmark jobs, and collected back from logs in
Megatron-LM's format (synthetic, generated here), re-ranked by what they measured."""

from __future__ import annotations

import random

import pytest

from planner.inputs.errors import SpecError
from planner.outputs import trial as tr
from tests.calibrate_synthetic import megatron_log

JOB = dict(model="llama3-8b", cluster="dgx-h100", nodes=1, global_batch_size=64, seq_length=4096)


@pytest.fixture(scope="module")
def plans():
    from planner.outputs import views
    from planner.plans.problem import load_problem, plan_inputs, run_search

    problem = load_problem(**JOB)
    result = run_search(problem, top_k=3)
    assert len(result.plans) == 3
    return [
        tr.TrialPlan(plan_inputs(problem, r), r.estimate, views.predictions_dict(r.estimate), tied=i < 2)
        for i, r in enumerate(result.plans)
    ]


def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_trial_writes_one_launch_per_plan_and_a_script_that_runs_them(tmp_path, plans):
    files = tr.trial_files(plans, "megatron", "torchrun", steps=12)
    for i in (1, 2, 3):
        assert f"plan-{i}/plan.yaml" in files
        script = files[f"plan-{i}/launch_torchrun.sh"]
        assert "TRAINING_ARGS=(--train-iters 12 --log-interval 1 --eval-iters 0" in script
    runner = files["run_trials.sh"]
    assert "seq 1 3" in runner and "launch_torchrun.sh" in runner and "train-node" in runner
    assert "kind: trial" in files["trial.yaml"] and "kind: cluster" in files["cluster.yaml"]
    slurm = tr.trial_files(plans, "megatron", "slurm", steps=12)
    assert "#SBATCH --array=1-3%1" in slurm["trial_array.sbatch"]
    assert "#SBATCH --output=plan-%a/train.log" in slurm["trial_array.sbatch"]
    assert "plan-2/launch_slurm.sh" in slurm
    titan = tr.trial_files(plans, "torchtitan", "torchrun", steps=12)
    assert "EXTRA_ARGS=(--training.steps 12 --metrics.log_freq 1)" in titan["plan-1/launch_torchrun.sh"]


def test_trial_refuses_what_it_cannot_run(plans):
    with pytest.raises(SpecError, match="allowed values: megatron, torchtitan"):
        tr.trial_files(plans, "deepspeed", "torchrun")
    with pytest.raises(SpecError, match="3 to 100000 steps"):
        tr.trial_files(plans, "megatron", "torchrun", steps=1)
    with pytest.raises(SpecError, match="at least one plan"):
        tr.trial_files([], "megatron", "torchrun")


def test_collect_names_the_plan_the_logs_say_is_fastest(tmp_path, plans):
    _write(tmp_path, tr.trial_files(plans, "megatron", "torchrun", steps=12))
    rng = random.Random(3)
    # the logs disagree with the model's order: plan-3 (predicted slowest of the three) runs fastest
    factors = {1: 1.10, 2: 1.05, 3: 0.92}
    measured = {}
    for i, p in enumerate(plans, 1):
        step = p.estimate.step_time_s * factors[i]
        measured[i] = step
        c = p.estimate.config
        log = megatron_log(step, 64, 8, 400.0, rng, iters=12, tp=c.tp, pp=c.pp)
        (tmp_path / f"plan-{i}" / "train-node0.log").write_text(log)
    result = tr.collect(tmp_path)
    assert result.winner == "plan-3"
    assert [r.name for r in result.rows] == ["plan-3", "plan-2", "plan-1"]
    for r in result.rows:
        i = int(r.name.split("-")[1])
        assert r.measured_step_time_s == pytest.approx(measured[i], rel=0.02)
        assert r.fitted_step_time_s is not None
    data = tr.result_dict(result)
    assert data["winner"] == "plan-3"
    assert data["plans"][0]["predicted_error"] == pytest.approx(1 / 0.92 - 1, rel=0.05)


def test_collect_reports_plans_that_did_not_run_and_refuses_a_trial_without_logs(tmp_path, plans):
    _write(tmp_path, tr.trial_files(plans, "megatron", "torchrun", steps=12))
    with pytest.raises(SpecError, match="no plan has a log yet"):
        tr.collect(tmp_path)
    c = plans[0].estimate.config
    log = megatron_log(
        plans[0].estimate.step_time_s, 64, 8, 400.0, random.Random(1), iters=12, tp=c.tp, pp=c.pp
    )
    (tmp_path / "plan-1" / "train-node0.log").write_text(log)
    result = tr.collect(tmp_path)
    assert result.winner == "plan-1"
    assert [r.name for r in result.rows] == ["plan-1", "plan-2", "plan-3"]
    assert result.rows[1].measured_step_time_s is None and "not run" in result.rows[1].note


def test_collect_refuses_a_directory_that_is_no_trial(tmp_path):
    with pytest.raises(SpecError, match="no trial.yaml here"):
        tr.collect(tmp_path)
    (tmp_path / "trial.yaml").write_text("schema_version: 1\nkind: plan\n")
    with pytest.raises(SpecError, match="kind"):
        tr.collect(tmp_path)


def test_cli_trial_then_collect_end_to_end(tmp_path, run_cli):
    import json

    out = tmp_path / "trial"
    res = run_cli(
        "trial",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "1",
        "-b",
        "64",
        "-s",
        "4096",
        "--top",
        "3",
        "--steps",
        "12",
        "--out",
        str(out),
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert [p["name"] for p in d["plans"]] == ["plan-1", "plan-2", "plan-3"]
    assert (out / "run_trials.sh").exists() and (out / "plan-3" / "launch_torchrun.sh").exists()
    again = run_cli(
        "trial", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096", "--out", str(out)
    )
    assert again.exit_code == 1 and "--force" in again.stderr  # an earlier trial is not replaced silently
    manifest = __import__("yaml").safe_load((out / "trial.yaml").read_text())
    rng = random.Random(5)
    for i, p in enumerate(manifest["plans"], 1):
        step = p["predicted_step_time_s"] * (0.9 if i == 2 else 1.1)
        plan = __import__("yaml").safe_load((out / p["name"] / "plan.yaml").read_text())["config"]
        log = megatron_log(step, 64, 8, 400.0, rng, iters=12, tp=plan["tp"], pp=plan["pp"])
        (out / p["name"] / "train-node0.log").write_text(log)
    res = run_cli("trial", "collect", str(out), "--json")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["winner"] == "plan-2" and d["plans"][0]["name"] == "plan-2"
    assert (out / "profile.yaml").exists()
    text = run_cli("trial", "collect", str(out))
    assert text.exit_code == 0 and "winner: plan-2" in text.stderr
    assert run_cli("trial", "collect", str(tmp_path / "nothing")).exit_code == 1
    assert (
        run_cli("trial", "-m", "llama3-8b", "--out", str(tmp_path / "x")).exit_code == 2
    )  # no cluster, batch...
