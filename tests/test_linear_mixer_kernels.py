"""Measured efficiencies of the linear-time token mixers' kernels (GPUSpec.linear_mixer_efficiency,
``linear_mixer_kernels`` in the GPU files): the files carry what planner.calibration.mixer_kernels
derives from the cited measurements, the SSD / gated delta rule / KDA times use them, a GPU without
them keeps the roofline, bad values are clear errors, and calibrate.py's rewrite of the
``efficiency:`` block leaves them alone."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.constraints import resolve
from cost_models.delta_rule import gated_delta_s, kda_s
from cost_models.parallel import ParallelConfig
from cost_models.scans import at_measured_rate
from cost_models.ssm import mamba_block, ssd_scan_s
from planner.calibration import mixer_kernels as mk
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import gpu_names, load_cluster, load_gpu

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_files_carry_the_derived_figures():
    for name in gpu_names():
        gpu = load_gpu(name)
        assert dict(gpu.linear_mixer_efficiency) == mk.gpu_efficiencies(name), name
    assert set(mk.ARCHITECTURE) <= set(gpu_names())
    assert load_gpu("a100-sxm4-80gb").linear_mixer_efficiency == ()


def test_the_figures_are_the_measured_medians_and_their_transfer():
    m = mk.measured_efficiencies()
    # a few percent of the dense peak: these chunked Triton kernels are small products per chunk
    assert all(0.01 < v < 0.2 for v in m.values())
    ratio = mk.architecture_ratio()
    # chunk_kda reaches about half the fraction of the GB200's peak it reaches of the H200's
    assert 0.4 < ratio < 0.6
    hopper, blackwell = mk.architecture_efficiencies()["hopper"], mk.architecture_efficiencies()["blackwell"]
    assert blackwell["ssd_scan"] == pytest.approx(hopper["ssd_scan"] * ratio)
    assert hopper["gated_delta_rule"] == pytest.approx(blackwell["gated_delta_rule"] / ratio)
    assert load_gpu("gb300").linear_mixer_efficiency == load_gpu("b200").linear_mixer_efficiency
    assert (
        load_gpu("h100-sxm5-80gb").linear_mixer_efficiency
        == load_gpu("h200-sxm-141gb").linear_mixer_efficiency
    )


def test_a_measured_shape_is_priced_at_its_measured_time():
    """The GB200 chunk_kda row of 2 x 16,384 tokens (5.340 ms, cuLA BENCHMARK_GB200.md) is within the
    spread of the rows the median is taken over; the priced forward is the median rate on its FLOPs."""
    gpu = load_gpu("gb200")
    forward, _, flop = kda_s(32768, 64, 128, gpu, "bf16")
    assert forward == pytest.approx(flop / (gpu.peak("bf16") * gpu.mixer_kernel_efficiency("kda")))
    assert forward == pytest.approx(5.340e-3, rel=0.03)


@pytest.mark.parametrize(
    "kernel, call",
    [
        ("ssd_scan", lambda g: ssd_scan_s(16384, 64, 8, 64, 128, 128, g, "bf16")),
        ("gated_delta_rule", lambda g: gated_delta_s(16384, 32, 128, 128, g, "bf16")),
        ("kda", lambda g: kda_s(16384, 32, 128, g, "bf16")),
    ],
)
def test_the_kernel_time_uses_the_measured_rate_and_absent_data_is_the_roofline(kernel, call):
    gpu = load_gpu("b200")
    bare = replace(gpu, linear_mixer_efficiency=())
    roof_fwd, roof_bwd, flop = call(bare)
    fwd, bwd, flop_measured = call(gpu)
    assert flop_measured == flop
    eff = gpu.mixer_kernel_efficiency(kernel)
    assert eff > 0 and bare.mixer_kernel_efficiency(kernel) == 0.0
    # slower than the roofline on a B200 (a few percent of 2.25 PFLOP/s), at exactly the measured rate
    assert fwd == pytest.approx(flop / (gpu.peak("bf16") * eff)) and fwd > roof_fwd
    assert bwd > roof_bwd and bwd > 2 * fwd
    # other kernels' figures do not touch this one
    others = tuple((k, v) for k, v in gpu.linear_mixer_efficiency if k != kernel)
    assert call(replace(gpu, linear_mixer_efficiency=others))[:2] == (roof_fwd, roof_bwd)


def test_the_measured_rate_never_beats_the_roofline():
    gpu = load_gpu("h100-sxm5-80gb")
    assert at_measured_rate(1.0, 1.0, gpu, "bf16", "ssd_scan") == 1.0
    assert at_measured_rate(1e-9, 1e12, gpu, "bf16", "ssd_scan") == pytest.approx(
        1e12 / (gpu.peak("bf16") * gpu.mixer_kernel_efficiency("ssd_scan"))
    )
    bare = replace(gpu, linear_mixer_efficiency=())
    assert at_measured_rate(1e-9, 1e12, bare, "bf16", "ssd_scan") == 1e-9


def test_a_mamba_layer_uses_the_measured_scan_on_blackwell():
    m, cluster = load_model("nemotron-h-8b"), load_cluster("dgx-b200", 1)
    job = make_job(global_batch_size=16, seq_length=8192, precision="bf16")
    c = resolve(m, cluster, job, ParallelConfig(tp=1, micro_batch_size=1, optimizer_sharding="full"))
    node = cluster.groups[0]
    bare = replace(node, gpu=replace(node.gpu, linear_mixer_efficiency=()))
    measured, roofline = mamba_block(m, job, c, node), mamba_block(m, job, c, bare)
    assert measured.attn_fwd_s > roofline.attn_fwd_s and measured.attn_bwd_s > roofline.attn_bwd_s
    assert measured.gemm == roofline.gemm and measured.model_flop == roofline.model_flop


@pytest.mark.parametrize(
    "block, message",
    [
        ("linear_mixer_kernels:\n  ssd_scan: 0\n", "linear_mixer_kernels.ssd_scan"),
        ("linear_mixer_kernels:\n  kda: 1.5\n", "linear_mixer_kernels.kda"),
        ("linear_mixer_kernels:\n  ssd: 0.1\n", "unknown key 'linear_mixer_kernels.ssd'"),
        ("linear_mixer_kernels: 0.1\n", "linear_mixer_kernels: expected a mapping"),
        ("linear_mixer_kernels:\n  kda: fast\n", "linear_mixer_kernels.kda"),
    ],
)
def test_bad_linear_mixer_kernels_are_a_clear_error(tmp_path, block, message):
    source = (ROOT / "hardware_profiles" / "gpus" / "a100-sxm4-80gb.yaml").read_text()
    path = tmp_path / "gpu.yaml"
    path.write_text(source + block)
    with pytest.raises(SpecError, match=str(path).replace(".", r"\.") + ".*" + message.replace(".", r"\.")):
        load_gpu(str(path))


def test_calibrate_rewrite_of_the_efficiency_block_keeps_the_kernels(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "_efficiency_blocks", ROOT / "scripts" / "_efficiency_blocks.py"
    )
    blocks = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_efficiency_blocks", blocks)
    spec.loader.exec_module(blocks)
    for name in ("b200", "gb200", "b300"):
        shutil.copy(ROOT / "hardware_profiles" / "gpus" / f"{name}.yaml", tmp_path / f"{name}.yaml")
    monkeypatch.setattr(blocks, "GPU_DIR", tmp_path)
    before = {p.name: p.read_text() for p in tmp_path.glob("*.yaml")}
    values = {"gemm_efficiency_max": 0.5, "gemm_half_efficiency_gflop": 10.0, "attention_efficiency": 0.3}
    values |= {"hbm_efficiency": 0.8}
    blocks.write_block("b200", values, "test refit")
    for name, text in before.items():
        after = (tmp_path / name).read_text()
        assert after != text
        kept = text[text.index("\nsource:") :]
        assert after.endswith(kept) and "linear_mixer_kernels:" in kept
        gpu = load_gpu(str(tmp_path / name))
        assert gpu.efficiency.gemm_efficiency_max == 0.5
        assert gpu.linear_mixer_efficiency == load_gpu(name.removesuffix(".yaml")).linear_mixer_efficiency
