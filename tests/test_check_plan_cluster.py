"""``planner check PLAN --cluster C``: a plan file records the cluster it was searched for; checked
against a cluster of other hardware it is judged on that cluster as its layout stands (memory on
those GPUs, their step time), with a warning naming what differs. Before, only the world size was
compared and an H100 plan checked against B200 or A100 nodes PASSed on its recorded H100s."""

from __future__ import annotations

import json

import pytest

SEARCH = ("-m", "llama3-8b", "--global-batch-size", "64", "--seq-len", "4096", "-q")


@pytest.fixture
def h100_plan(run_cli, tmp_path):
    def make(precision: str = "bf16"):
        path = tmp_path / f"plan-{precision}.yaml"
        res = run_cli(
            "search", *SEARCH, "-c", "dgx-h100", "-n", "1", "--precision", precision, "--out", str(path)
        )
        assert res.exit_code == 0, res.stderr
        return path

    return make


def _verdict(run_cli, *args):
    res = run_cli("check", *args, "--json")
    return res.exit_code, json.loads(res.stdout)["configs"][0]


def test_the_plans_own_hardware_keeps_its_recorded_cluster(run_cli, h100_plan):
    plan = h100_plan()
    code_own, own = _verdict(run_cli, str(plan))
    code_given, given = _verdict(run_cli, str(plan), "-c", "dgx-h100", "-n", "1")
    assert code_own == code_given == 0
    assert own["metrics"] == given["metrics"]
    assert not [f for f in given["findings"] if f["check"] == "cluster"]


def test_other_gpus_are_the_cluster_judged(run_cli, h100_plan):
    """On B200 nodes the plan's layout is priced on B200s under the plan's software profile: the
    step time is the estimate of that layout there, and a warning names the GPUs and links."""
    from cost_models.estimate import estimate
    from planner.plans.plan_file import read_plan
    from planner.profiles.hardware import load_cluster
    from planner.profiles.software import configure

    plan = h100_plan()
    code, d = _verdict(run_cli, str(plan), "-c", "dgx-b200", "-n", "1")
    assert code == 0 and d["passed"]
    warnings = [f["message"] for f in d["findings"] if f["check"] == "cluster"]
    assert len(warnings) == 1 and "judged on dgx-b200 as its layout stands" in warnings[0]
    assert (
        "GPUs h100-sxm5-80gb (80 GiB) -> b200" in warnings[0]
        and "intra-node link 450 -> 900 GB/s" in warnings[0]
    )
    inputs = read_plan(plan)
    b200, _ = configure(load_cluster("dgx-b200", 1), inputs.software)
    expected = estimate(
        inputs.model,
        b200,
        inputs.job,
        inputs.config.with_(dp=8 // (inputs.config.tp * inputs.config.pp * inputs.config.cp)),
    )
    assert d["metrics"]["step_time_s"] == pytest.approx(expected.step_time_s, abs=5e-4)  # rounded to ms
    _, own = _verdict(run_cli, str(plan))
    assert d["metrics"]["step_time_s"] < own["metrics"]["step_time_s"]


def test_other_gpus_that_cannot_run_the_precision_fail(run_cli, h100_plan):
    plan = h100_plan("fp8")
    code, d = _verdict(run_cli, str(plan), "-c", "dgx-a100", "-n", "1")
    assert code == 1 and not d["passed"]
    errors = [f["message"] for f in d["findings"] if f["level"] == "error"]
    assert len(errors) == 1 and "a100-sxm4-80gb" in errors[0] and "fp8" in errors[0]


def test_memory_is_judged_on_the_given_gpus(run_cli, tmp_path):
    """A layout that fits on H200's 141 GB is checked on H100's 80 GB: there it does not fit."""
    plan = tmp_path / "h200.yaml"
    res = run_cli(
        "search", "-m", "llama3-70b", "-c", "dgx-h200", "-n", "2", "--global-batch-size", "64",
        "--seq-len", "4096", "--tp", "8", "--pp", "1", "--cp", "1", "-q", "--out", str(plan),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    code, own = _verdict(run_cli, str(plan))
    assert code == 0 and own["metrics"]["peak_memory_bytes"] > 80e9
    code, d = _verdict(run_cli, str(plan), "-c", "dgx-h100", "-n", "2")
    assert code == 1 and any(f["check"] == "memory" and "does not fit" in f["message"] for f in d["findings"])


def test_a_mixed_gpu_plan_needs_its_gpu_types(run_cli, tmp_path):
    from pathlib import Path

    mixed = Path(__file__).parent.parent / "examples" / "cluster-a100-h100.yaml"
    plan = tmp_path / "mixed.yaml"
    res = run_cli("search", *SEARCH, "-c", str(mixed), "--out", str(plan))
    assert res.exit_code == 0, res.stderr
    assert json.loads(run_cli("check", str(plan), "--json").stdout)["configs"][0]["passed"]
    from planner.plans.plan_file import read_plan

    world = read_plan(plan).cluster.num_gpus
    code, d = _verdict(run_cli, str(plan), "-c", "dgx-h100", "-n", str(world // 8))
    assert code == 1
    errors = [f["message"] for f in d["findings"] if f["level"] == "error"]
    assert errors and "a plan over several GPU types is checked on the GPUs it was searched for" in errors[0]
    assert same_types_ok(run_cli, plan, mixed)


def same_types_ok(run_cli, plan, mixed) -> bool:
    """The mixed cluster file itself (its groups in file order, not the plan's stage order) is the
    plan's hardware: judged on the plan's recorded cluster, with no error."""
    code, d = _verdict(run_cli, str(plan), "-c", str(mixed))
    return code == 0 and not [f for f in d["findings"] if f["level"] == "error"]


def test_a_launch_in_fp8_on_gpus_without_it_fails_on_the_flag(run_cli, tmp_path):
    """Transformer Engine refuses FP8 below compute capability 8.9: an A100 launch with
    ``--fp8-format`` fails at start-up, so check fails it on that flag's line, and search and
    estimate refuse ``--precision fp8`` there."""
    launch = tmp_path / "train.sh"
    launch.write_text(
        "#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
        "--num-attention-heads 32 --num-query-groups 8 --group-query-attention --ffn-hidden-size 14336 "
        "--swiglu --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
        "--global-batch-size 64 --vocab-size 128256 --normalization RMSNorm --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --disable-bias-linear --bf16 \\\n  --fp8-format hybrid\n"
    )
    code, d = _verdict(run_cli, str(launch), "-c", "dgx-a100", "-n", "1")
    assert code == 1
    (error,) = [f for f in d["findings"] if f["level"] == "error"]
    assert error["check"] == "precision" and error["flags"] == ["--fp8-format"] and error["line"] == 2
    assert "a100-sxm4-80gb has no FP8 tensor cores" in error["message"]
    _, h100 = _verdict(run_cli, str(launch), "-c", "dgx-h100", "-n", "1")
    assert not [f for f in h100["findings"] if f["check"] == "precision"]
    assert any(f["check"] == "memory" for f in h100["findings"])  # judged on: 16 bytes a parameter
    for command in ("search", "estimate"):
        res = run_cli(command, *SEARCH, "-c", "dgx-a100", "-n", "1", "--precision", "fp8")
        assert res.exit_code != 0 and "has no FP8 tensor cores" in res.stderr, (command, res.stderr)
