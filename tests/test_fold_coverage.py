"""What the calibration runs cover (planner.calibration.coverage): the shipped table's coverage is
the calibration set's, and a held-out run is judged against what the *other* sources' runs cover,
as planner estimate judges a plan against the whole set."""

from __future__ import annotations

import pytest

from planner.calibration.cases import cases
from planner.calibration.coverage import coverage_table, fold_extrapolation, run_class
from planner.profiles.plausibility import coverage_extrapolation, published_classes


@pytest.fixture(scope="module")
def runs():
    return [c for c in cases() if not c.skip_reason]


def test_the_shipped_coverage_is_the_calibration_sets(runs):
    table = coverage_table(runs)
    shipped = published_classes()
    assert set(table) <= set(shipped)
    for key, entry in table.items():
        assert entry["coverage"] == shipped[key]["coverage"], key


def test_a_held_out_run_beyond_the_other_sources_runs_is_outside(runs):
    by_id = {c.run_id: c for c in runs}
    # MLPerf v3.1's 10,752-GPU GPT-3 runs: without MLPerf v3.1 the largest H100 FP8 run has 8,192
    big = "mlperf31_eos_h100_fp8_gpt3_175b_10752gpu"
    # a vTrain 64-GPU run: the other sources have A100 FP16 runs of up to 3,072 GPUs
    small = "vtrain_a100_gpt3.6b_64gpu_tp1_pp1_dp64_mbs2"
    predicted = {rid: by_id[rid].measured_tokens_per_s_per_gpu for rid in (big, small)}
    out = fold_extrapolation(runs, predicted)
    assert out[big][0].startswith("10752 GPUs: the class's largest calibration run has 8192")
    assert out[small] == ()
    # the step is judged at the held-out prediction: predicted ten times faster than it ran, the
    # vTrain run steps shorter than any other A100 FP16 dense run measured
    fast = fold_extrapolation(runs, {small: 10 * predicted[small]})[small]
    assert len(fast) == 1 and "step: the class's shortest calibration run steps" in fast[0]
    # the whole set covers the 10,752-GPU run (it is one of its own)
    table = coverage_table(runs)
    c = by_id[big]
    assert coverage_extrapolation(table, c.cluster.groups[0].gpu.name, "fp8", False, gpus=10752) == ()
    assert run_class(c) == "h100-sxm5-80gb fp8 dense"


def test_a_class_no_run_has_is_outside():
    table = {"h100-sxm5-80gb bf16 dense": {"coverage": {"largest_run": {"gpus": 64, "run_id": "r"}}}}
    assert coverage_extrapolation(table, "l40s", "bf16", False, gpus=8) == (
        "no published run of class l40s bf16 dense in the calibration set",
    )
    # an H200 is judged by its family's (H100) runs
    assert coverage_extrapolation(table, "h200-sxm-141gb", "bf16", False, gpus=64) == ()
    assert coverage_extrapolation(table, "h200-sxm-141gb", "bf16", False, gpus=128)[0].startswith("128 GPUs")
