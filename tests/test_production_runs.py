"""tests/data/production_runs.yaml (unseen production benchmark runs) and scripts/validate_production.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from planner.calibration.cases import cases
from planner.inputs.documents import read_document

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "tests" / "data" / "production_runs.yaml"
SCRIPT = ROOT / "scripts" / "validate_production.py"


def _script():
    spec = importlib.util.spec_from_file_location("validate_production", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_builds_and_is_cited():
    doc = read_document(RUNS)
    runs = doc["runs"]
    assert doc["schema_version"] == 1
    assert doc["run_count"] == len(runs)
    ids = [r["id"] for r in runs]
    assert len(ids) == len(set(ids))
    for run in runs:
        src = run["source"]
        assert src.get("ref") and src.get("locator"), run["id"]
        assert src["recipe"].get("ref") and src["recipe"].get("locator"), run["id"]
    built = cases(RUNS)
    assert [c.run_id for c in built] == ids
    assert {c.run_id: c.skip_reason for c in built if c.skip_reason} == {}


def test_script_json(capsys):
    assert _script().main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["out_of_sample"] is True
    assert out["skipped"] == {}
    assert out["overall"]["count"] == len(read_document(RUNS)["runs"])
    assert sum(s["count"] for s in out["by_class"].values()) == out["overall"]["count"]
    for row in out["runs"]:
        measured, predicted = row["measured_tokens_per_s_per_gpu"], row["predicted_tokens_per_s_per_gpu"]
        assert row["signed_error"] == pytest.approx(predicted / measured - 1)


def test_script_unreadable_file(tmp_path, capsys):
    assert _script().main(["--runs", str(tmp_path / "missing.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_each_run_is_priced_with_the_profile_planner_had_when_its_table_appeared():
    """``--profile then``: the newest shipped Megatron profile released by the run's container month
    with an entry for its GPU family, else base; ``today`` the default a search gets now."""
    script = _script()
    assert script.released_month("Megatron-Bridge / NeMo 26.02 container") == "2026-02"
    assert script.released_month("NeMo 25.04 container") == "2025-04"
    assert script.released_month("") == ""
    # no container named: its source's publication month (MLPerf Training v6.0 appeared 2026-06-16)
    assert script.released_month("NeMo 2 on the PyTorch NGC container", "MLPerf Training v6.0") == "2026-06"
    assert script.released_month("NeMo 25.04 container", "MLPerf Training v6.0") == "2025-04"
    assert script.profile_for("h100", "2026-02", "then") == "megatron-bridge-25.11"
    assert script.profile_for("h100", "2025-04", "then") == "base"  # before any fitted Megatron profile
    assert script.profile_for("h100", "", "then") == "base"
    assert script.profile_for("h100", "2025-04", "base") == "base"
    from planner.profiles.software import default_software

    assert script.profile_for("h100", "2025-04", "today") == default_software("megatron", ("h100",))
    out = script.report(RUNS, "then")
    used = {r["id"]: r["software"] for r in out["runs"]}
    assert used["mbridge2602_h100_fp8cs_qwen3_30b_16gpu"] == "megatron-bridge-25.11"
    assert used["nemo2504_gb200_fp8_llama3_70b_64gpu"] == "base"
    assert set(out["overall_with_other_profiles"]) == {"today", "base"}


def test_nemotron_3_nano_rows_build_from_their_preset():
    """The 20 Nemotron 3 Nano rows of Megatron-Bridge's 26.02.01-26.08 tables (6 GB300, 5 GB200, 4
    B300, 1 B200, 4 H100) are built from the preset their records name, as the hybrid model it is."""
    nano = [c for c in cases(RUNS) if "_nemotron3nano_" in c.run_id]
    gpus = [c.run_id.split("_")[1] for c in nano]
    assert {g: gpus.count(g) for g in set(gpus)} == {"gb300": 6, "gb200": 5, "b300": 4, "b200": 1, "h100": 4}
    for c in nano:
        assert not c.skip_reason, c.run_id
        assert c.model.hybrid_layer_pattern.count("M") == 23 and c.model.num_experts == 128
        assert (c.config.tp, c.config.pp, c.config.ep) == (1, 1, 8)
        assert c.job.fp8_recipe == ("tensorwise" if "_h100_" in c.run_id else "mxfp8")
        assert c.job.moe_dispatcher == "flex"


def _nano_record(**model):
    run = next(
        r for r in read_document(RUNS)["runs"] if r["id"] == "mbridge2606_gb300_mxfp8_nemotron3nano_8gpu"
    )
    run["model"].update(model)
    return {"schema_version": 1, "run_count": 1, "runs": [run]}


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ({"hidden_size": 4096}, "model.hidden_size 4096 disagrees with preset nemotron3-nano-30b-a3b (2688)"),
        ({"preset": "no-such-model"}, "model.preset 'no-such-model' is not a planner model preset"),
        ({"preset": "../../etc/passwd"}, "is not a planner model preset"),
        ({"preset": ["a"]}, "is not a planner model preset"),
    ],
)
def test_a_record_naming_a_preset_must_agree_with_it(tmp_path, model, reason):
    """A record's dimensions that disagree with the preset it names, or a name that is no preset
    (a path included: a runs file reads no other file), leave the run out with the reason."""
    import yaml

    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(_nano_record(**model)))
    (case,) = cases(path)
    assert reason in case.skip_reason


def test_amd_mi355x_rows_build_with_their_recipe():
    """MLPerf Training v5.1's Llama 3.1 8B results on 8 MI355X (AMD, Dell, GigaComputing, Supermicro
    running AMD's implementation) are priced on the mi355x-node template as the recipe ran them:
    data parallel 8 at micro-batch 2, FP8 delayed scaling, gradients reduced in bf16 after the last
    backward (Megatron-Core's default overlap_grad_reduce False, which the recipe keeps)."""
    amd = [c for c in cases(RUNS) if c.run_id.startswith("mlperf51_") and "_mi355x_" in c.run_id]
    assert sorted(c.run_id.split("_")[1] for c in amd) == ["amd", "dell", "giga", "smc"]
    for c in amd:
        assert not c.skip_reason, c.run_id
        assert c.cluster.groups[0].gpu.name == "mi355x" and c.cluster.num_gpus == 8
        assert (c.config.tp, c.config.pp, c.config.dp, c.config.micro_batch_size) == (1, 1, 8, 2)
        assert c.job.precision == "fp8" and c.job.fp8_recipe == "delayed"
        assert c.job.overlap_grad_reduce is False and c.job.grad_dtype == "bf16"
        assert 29_000 < c.measured_tokens_per_s_per_gpu < 32_000


def test_interval_coverage_on_unseen_runs_is_reported_and_quoted():
    """Each run is judged as estimate judges a plan: its 80% interval, and whether it is outside
    calibration; the share inside the interval is reported apart for the two, and the figure the CLI
    quotes for out-of-calibration intervals (UNSEEN_OUTSIDE_COVERAGE) is the script's."""
    from planner.profiles.uncertainty import UNSEEN_OUTSIDE_COVERAGE

    out = _script().report(RUNS, "then")
    for row in out["runs"]:
        low, high = row["interval_tokens_per_s_per_gpu"]
        assert low < row["predicted_tokens_per_s_per_gpu"] < high
        assert row["in_interval"] == (low <= row["measured_tokens_per_s_per_gpu"] <= high)
    cov = out["interval_coverage"]
    assert cov["all"]["runs"] == len(out["runs"])
    assert cov["inside_calibration"]["runs"] + cov["outside_calibration"]["runs"] == cov["all"]["runs"]
    outside = cov["outside_calibration"]
    assert (outside["in_interval"], outside["runs"]) == UNSEEN_OUTSIDE_COVERAGE
    flagged = {r["id"] for r in out["runs"] if r["outside_calibration"]}
    assert "mlperf60_nvidia_gb300_mxfp8_gptoss20b_512gpu" in flagged  # a 0.04 s step, 512 GPUs


def test_the_mamba_warning_quotes_the_unseen_nemotron_rows():
    """What estimate says of a model with Mamba-2 layers (UNCALIBRATED_MIXERS) quotes the unseen
    Nemotron 3 Nano rows as the script predicts them: too fast on Blackwell, too slow on H100."""
    import re

    from planner.profiles.uncertainty import UNCALIBRATED_MIXERS

    out = _script().report(RUNS, "then")
    rows = [r for r in out["runs"] if "nemotron3nano" in r["id"]]
    blackwell = [100 * r["signed_error"] for r in rows if "_h100_" not in r["id"]]
    hopper = [-100 * r["signed_error"] for r in rows if "_h100_" in r["id"]]
    quoted = [int(x) for x in re.findall(r"(\d+)-(\d+)% too", UNCALIBRATED_MIXERS["mamba"])[0]]
    quoted += [int(x) for x in re.findall(r"(\d+)-(\d+)% too", UNCALIBRATED_MIXERS["mamba"])[1]]
    assert quoted == [round(min(blackwell)), round(max(blackwell)), round(min(hopper)), round(max(hopper))]


UNSEEN_NOT_FITTING = {
    "nemo2504_gb200_fp8_llama3_70b_64gpu": 1.06,
    "mbridge2509_gb200_fp8cs_llama3_70b_64gpu": 1.09,
    "mbridge2602_gb200_fp8cs_llama3_70b_64gpu": 1.09,
    "mbridge2602_gb300_fp8cs_llama3_70b_64gpu": 1.02,
    "mbridge2602_gb200_mxfp8_llama31_405b_256gpu": 1.01,
    "mbridge2602_gb200_fp8cs_llama31_405b_256gpu": 1.08,
}
"""Unseen runs that ran and are predicted not to fit, with the most their peak may exceed the GPU by
(docs/calibration.md, "Unseen production runs"): Llama 3 70B and 3.1 405B on GB200 / GB300, Megatron-FSDP
(with CPU-offloaded activations in the 26.02 / 25.09 rows) or tp 4 / pp 16 / vp 4 without recompute."""


def test_the_unseen_runs_predicted_not_to_fit_are_the_named_ones():
    out = _script().report(RUNS, "then")
    over = out["predicted_not_to_fit"]
    assert sorted(over) == sorted(UNSEEN_NOT_FITTING)
    for rid, ratio in over.items():
        assert 1.0 < ratio <= UNSEEN_NOT_FITTING[rid], (rid, ratio)
