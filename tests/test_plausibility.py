"""The plausibility check (planner.profiles.plausibility): a prediction is held to the best
published run of its class, model size band and framework, and says which run that is."""

from __future__ import annotations

import pytest

from planner.profiles.plausibility import plausibility, published_classes, size_band


def test_size_bands():
    assert size_band(8e9) == "<20B" and size_band(20e9) == "20-100B" and size_band(70e9) == "20-100B"
    assert size_band(405e9) == ">=100B"


def test_a_70b_job_is_held_to_runs_of_its_size_band_not_an_8b_run():
    cls = published_classes()["a100-sxm4-80gb bf16 dense"]
    overall = cls["mfu"]
    band = cls["by_size"]["20-100B"]
    assert band["mfu"] < overall  # the class's best is a small model's (the 8B FlagPerf run)
    p = plausibility("a100-sxm4-80gb", "bf16", False, (band["mfu"] + overall) / 2, params=70e9)
    assert p.above_best_published
    assert p.run_class == "a100-sxm4-80gb bf16 dense 20-100B"
    assert p.best_run_id == band["run_id"]
    # without a size the class's overall best applies, as before
    assert not plausibility("a100-sxm4-80gb", "bf16", False, (band["mfu"] + overall) / 2).above_best_published


def test_framework_and_size_together_when_the_set_has_both():
    cls = published_classes()["a100-sxm4-80gb bf16 dense"]
    entry = cls["by_framework_size"]["megatron 20-100B"]
    p = plausibility("a100-sxm4-80gb", "bf16", False, 0.1, "megatron", params=70e9)
    assert p.run_class == "a100-sxm4-80gb bf16 dense megatron 20-100B"
    assert p.best_run_id == entry["run_id"] and not p.above_best_published


def test_a_gpu_without_runs_of_its_own_is_held_to_its_familys():
    # the calibration set has H200 runs in FP8 only: an H200 BF16 plan is compared with the H100
    # family's BF16 runs (MFU is over each GPU's own peak), not left unchecked
    assert "h200-sxm-141gb bf16 dense" not in published_classes()
    p = plausibility("h200-sxm-141gb", "bf16", False, 0.99, params=70e9)
    assert p.best_published_mfu is not None and p.above_best_published
    assert p.run_class.startswith("h100 family bf16 dense")
    assert plausibility("l40s", "bf16", False, 0.5).best_published_mfu is None


@pytest.mark.parametrize(
    "preset, kinds",
    [
        ("nemotron-h-8b", ("mamba",)),
        ("jamba-1.5-mini", ("mamba1",)),
        ("qwen3-next-80b-a3b", ("gdn",)),
        ("kimi-linear-48b-a3b", ("kda",)),
        ("falcon-h1-7b", ("attention+mamba",)),
        ("deepseek-v3.2", ("dsa",)),
        ("llama3-8b", ()),
        ("deepseek-v3", ()),
    ],
)
def test_token_mixers_no_calibration_run_has_are_outside_calibration(preset, kinds):
    """The calibration set is softmax-attention transformers: a model with Mamba, linear or sparse
    attention layers extrapolates it, which widens its interval (views: outside_calibration)."""
    from planner.inputs.models import load_model
    from planner.profiles.plausibility import plausibility
    from planner.profiles.uncertainty import UNCALIBRATED_MIXERS, uncalibrated_mixers

    assert uncalibrated_mixers(load_model(preset)) == kinds
    p = plausibility("h100-sxm5-80gb", "bf16", False, 0.4, mixers=kinds)
    assert [x for x in p.extrapolation if x in UNCALIBRATED_MIXERS.values()] == [
        UNCALIBRATED_MIXERS[k] for k in kinds
    ]


def test_a_hybrid_estimate_says_so_and_widens_its_interval(run_cli):
    import json

    job = ["-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096", "--tp", "1", "--pp", "1", "--json"]
    hybrid = json.loads(run_cli("estimate", "-m", "nemotron-h-8b", *job).stdout)
    assert any(x.startswith("Mamba-2 layers") for x in hybrid["plausibility"]["outside_calibration"])
    assert hybrid["prediction_interval"]["outside_calibration"] is True
    dense = json.loads(run_cli("estimate", "-m", "llama3-8b", *job).stdout)
    assert dense["prediction_interval"]["outside_calibration"] is False


def test_check_widens_a_hybrid_launchs_interval_as_estimate_does(run_cli, tmp_path):
    import json

    job = ["-m", "nemotron-h-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    plan = tmp_path / "plan.yaml"
    assert run_cli("search", *job, "--top", "1", "--out", str(plan), "-q").exit_code == 0
    assert run_cli("export", "megatron", str(plan), "--out", str(tmp_path / "l"), "-q").exit_code == 0
    res = run_cli("check", str(tmp_path / "l" / "megatron_args.txt"), "-c", "dgx-h100", "-n", "2", "--json")
    interval = json.loads(res.stdout)["configs"][0]["metrics"]["prediction_interval"]
    assert interval["outside_calibration"] is True


def test_check_judges_a_plan_beyond_its_class_as_search_does(run_cli, tmp_path):
    """More GPUs than the class's largest calibration run: search's plan and check's verdict on
    it name the same reason and take the same widened interval; check says so in a notice."""
    import json

    plan = tmp_path / "plan.yaml"
    job = [
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "1024",
        "-b",
        "8192",
        "-s",
        "4096",
        "--tp",
        "1",
        "--pp",
        "1",
    ]
    searched = json.loads(run_cli("search", *job, "--top", "1", "--out", str(plan), "--json").stdout)[
        "plans"
    ][0]
    res = run_cli("check", str(plan), "--json")
    verdict = json.loads(res.stdout)["configs"][0]
    assert verdict["metrics"]["plausibility"] == searched["plausibility"]
    assert verdict["metrics"]["prediction_interval"] == searched["prediction_interval"]
    assert verdict["metrics"]["prediction_interval"]["outside_calibration"] is True
    reasons = searched["plausibility"]["outside_calibration"]
    assert reasons and reasons[0].startswith("8192 GPUs: the class's largest calibration run has")
    notices = [f["message"] for f in verdict["findings"] if f["check"] == "calibration"]
    assert notices == [f"outside calibration: {r}" for r in reasons]
    assert verdict["passed"] is True


def test_an_estimate_with_a_step_shorter_than_its_class_ran_says_so(run_cli):
    """estimate judges the predicted step against the class's shortest measured one: 8 GB300s with
    a 16-sequence batch of an 8B model step in about a third of a second, where the shortest GB300
    NVFP4 dense calibration run steps in seconds; the 64-node README-size job does not."""
    import json

    from planner.profiles.plausibility import published_classes

    shortest = published_classes()["gb300 nvfp4 dense"]["coverage"]["shortest_step"]
    small = "-m llama3-8b -c gb300-nvl72 -n 2 -b 16 -s 8192 --precision nvfp4 --tp 1 --pp 1 --json".split()
    out = json.loads(run_cli("estimate", *small).stdout)
    assert out["step_time_s"] < shortest["seconds"]
    notes = out["plausibility"]["outside_calibration"]
    assert any("s step" in x and shortest["run_id"] in x for x in notes)
    assert out["prediction_interval"]["outside_calibration"] is True
