"""What the H200 and H100 linear-pass timings say about the GEMM model (planner.calibration.kernel_measurements):
no wave quantization at the kernel level on Hopper, the misaligned head dimension's speed, and the
FP8 speed-up's size dependence; and the GPU files' ``gemm_tile: null``."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cost_models.compute import gemm_quantization
from planner.calibration.kernel_measurements import (
    GROUPED_GEMMS,
    H100_FP8_GEMMS,
    H100_LINEAR_PASSES,
    fp8_speedup_fits,
    gpu_of,
    grouped_stream_bandwidth,
    linear_pass_fits,
    load,
    misaligned_gemm_speed,
    misaligned_ratios,
    model_shape,
)
from planner.inputs.errors import SpecError
from planner.profiles.hardware import load_gpu

ROOT = Path(__file__).resolve().parent.parent


def test_the_measured_files_cover_what_the_docs_say():
    data = load()
    assert data["device"] == "NVIDIA H200" and data["multiprocessors"] == 132
    assert len(data["linear"]) == 1800
    assert {r["pass"] for r in data["linear"]} == {"forward", "input_grad", "weight_grad"}
    assert {r["tp"] for r in data["linear"]} == {1, 2, 4, 8, 16}
    assert all(r["time_s"] > 0 for r in data["linear"] + data["bmm"])


def test_model_shape_follows_linear_s():
    row = {"tokens": 32768, "n_out": 3072, "k_in": 384}
    assert model_shape(row | {"pass": "forward"}) == (32768, 3072, 384)
    assert model_shape(row | {"pass": "input_grad"}) == (32768, 384, 3072)
    assert model_shape(row | {"pass": "weight_grad"}) == (384, 3072, 32768)


def test_without_quantization_the_size_curve_fits_hopper_best():
    fits = {f["tile"]: f for f in linear_pass_fits()}
    assert set(fits) == {"none", "128x128", "256x128"}
    none = fits["none"]
    for tiled in ("128x128", "256x128"):
        assert none["median"] < fits[tiled]["median"]
        assert none["p90"] < fits[tiled]["p90"]
        assert none["max"] < fits[tiled]["max"]
    # no pass is biased once quantization is gone: weight gradients run like the other two
    assert all(abs(v) < 0.01 for v in none["median_signed_by_pass"].values())
    assert none["median"] < 0.03 and none["p90"] < 0.12


def test_gemm_tile_null_means_no_quantization():
    gpu = replace(load_gpu("h200-sxm-141gb"), gemm_tile=None)
    # a weight gradient whose output is 2 x 24 tiles of 128 x 128 (a third of a wave): unpenalised
    assert gemm_quantization(384, 3072, 32768, gpu, "bf16") == 1.0
    assert gemm_quantization(384, 3072, 32768, load_gpu("h200-sxm-141gb"), "bf16") < 1.0


def test_gemm_tile_null_loads_and_a_bad_tile_is_refused(tmp_path):
    base = yaml.safe_load((ROOT / "hardware_profiles" / "gpus" / "h200-sxm-141gb.yaml").read_text())
    for tile, expected in ((None, None), ([64, 256], (64, 256))):
        p = tmp_path / "g.yaml"
        p.write_text(yaml.safe_dump(base | {"gemm_tile": tile}))
        assert load_gpu(str(p)).gemm_tile == expected
    p.write_text(yaml.safe_dump(base | {"gemm_tile": [128]}))
    with pytest.raises(SpecError, match="gemm_tile"):
        load_gpu(str(p))


def test_misaligned_head_dimension_runs_at_a_third_of_the_speed():
    rows = misaligned_ratios(load())
    assert len(rows) == 6 and all(0.25 < r["speed"] < 0.45 for r in rows)
    assert 0.3 < misaligned_gemm_speed() < 0.4


def test_fp8_shortens_only_the_flop_part_as_measured():
    for column in ("fp8_s", "fp8_fast_accum_s"):
        fits = {f["form"]: f for f in fp8_speedup_fits(column=column)}
        fixed, constant = fits["fixed_part"], fits["constant"]
        assert fixed["rows"] == 222
        assert fixed["median"] < constant["median"] and fixed["p90"] < constant["p90"]
        # the small expert GEMMs are where a constant speed-up goes wrong
        assert fixed["expert_median"] < constant["expert_median"] / 1.5


def test_the_h100_confirms_the_h200():
    h100 = load(H100_LINEAR_PASSES)
    assert h100["device"].startswith("NVIDIA H100") and len(h100["linear"]) == 900
    fits = {f["tile"]: f for f in linear_pass_fits(h100)}
    assert fits["none"]["p90"] < fits["128x128"]["p90"] and fits["none"]["max"] < fits["128x128"]["max"]
    fp8 = {f["form"]: f for f in fp8_speedup_fits(load(H100_FP8_GEMMS), "fp8_s", h100)}
    assert fp8["fixed_part"]["p90"] < fp8["constant"]["p90"]
    assert fp8["fixed_part"]["expert_median"] < fp8["constant"]["expert_median"]


def test_measurement_files_name_their_gpu():
    assert gpu_of(load()) == "h200-sxm-141gb"
    assert gpu_of(load(H100_LINEAR_PASSES)) == "h100-sxm5-80gb"
    with pytest.raises(ValueError, match="no GPU file"):
        gpu_of({"device": "NVIDIA A100-SXM4-80GB"})


def test_compare_script_prints_and_refuses_bad_files(tmp_path):
    import json
    import subprocess
    import sys

    script = ROOT / "scripts" / "compare_linear_passes.py"
    ok = subprocess.run([sys.executable, str(script), "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert [f["tile"] for f in out["fits"]] == ["none", "128x128", "256x128"]
    assert 0.3 < out["misaligned_speed"] < 0.4
    for text in ("not json", json.dumps({"device": "NVIDIA H200", "linear": [{"flop": 1}]})):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        r = subprocess.run([sys.executable, str(script), str(bad)], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "not a measure_linear_passes.py file" in r.stderr
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "missing.json")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "no such file" in r.stderr


def test_gpu_files_stream_rate_is_the_grouped_gemm_measurement():
    """``gemm_stream_gb_per_s`` of the H100 and H200 files is what their grouped-GEMM files measure;
    the two rates are within 10% although the H200's HBM is 1.43x faster (the SMs' loads limit)."""
    rates = {}
    for gpu, path in GROUPED_GEMMS.items():
        data = load(path)
        assert gpu_of(data) == gpu
        rates[gpu] = grouped_stream_bandwidth(data)
        assert load_gpu(gpu).gemm_stream_bytes_per_s == pytest.approx(rates[gpu], rel=0.005)
    h100, h200 = load_gpu("h100-sxm5-80gb"), load_gpu("h200-sxm-141gb")
    assert h200.hbm_bandwidth_bytes_per_s / h100.hbm_bandwidth_bytes_per_s > 1.4
    assert rates["h200-sxm-141gb"] / rates["h100-sxm5-80gb"] < 1.1
    # below the HBM roofline on both
    assert rates["h100-sxm5-80gb"] < h100.hbm_bandwidth_bytes_per_s


def test_gemm_stream_rate_must_be_positive(tmp_path):
    data = yaml.safe_load((ROOT / "hardware_profiles" / "gpus" / "h100-sxm5-80gb.yaml").read_text())
    data["gemm_stream_gb_per_s"] = -5
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="gemm_stream_gb_per_s"):
        load_gpu(str(path))
