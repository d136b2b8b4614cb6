"""Blackwell Ultra's attention kernels (GPUSpec.attention_kernel_speed): the GB300 and B300 files
carry the speed-up NVIDIA's cuDNN benchmark measured over the GB200, full and sliding-window
attention apart, and the cost model charges exactly that, to the fused kernels only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.attention import attention_block, kernel_speed
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.calibration.kernel_curves import blackwell_ultra_attention_speed
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster, load_gpu


def test_the_gpu_files_carry_the_measured_medians():
    measured = blackwell_ultra_attention_speed()
    # the benchmark's gain: causal BF16 kernels, forward more than backward, windows much less
    assert 1.15 < measured["forward"] < 1.2 and 1.05 < measured["backward"] < measured["forward"]
    assert 1.0 < measured["local_forward"] < 1.1 and 1.0 < measured["local_backward"] < 1.1
    for name in ("gb300", "b300"):
        gpu = load_gpu(name)
        assert gpu.attention_kernel_speed == (round(measured["forward"], 3), round(measured["backward"], 3))
        assert gpu.local_attention_kernel_speed == (
            round(measured["local_forward"], 3),
            round(measured["local_backward"], 3),
        )
    for name in ("gb200", "b200", "h100-sxm5-80gb"):
        gpu = load_gpu(name)
        assert gpu.attention_kernel_speed == (1.0, 1.0) == gpu.local_attention_kernel_speed


def _blocks(model_name, template, impl="fused"):
    m, cluster = load_model(model_name), load_cluster(template, 1)
    job = make_job(global_batch_size=16, seq_length=8192, precision="bf16", attention_impl=impl)
    c = resolve(m, cluster, job, ParallelConfig(tp=1, micro_batch_size=1, optimizer_sharding="full"))
    node = cluster.groups[0]
    return m, cluster, job, c, node


def test_gb300_attention_is_the_gb200_one_at_the_measured_speed():
    """The GB300 is a fitted family of its own (planner.calibration.fitting.LINEAGE), but its attention
    efficiency is tied to the b200 family's: the shipped files agree on it, so a GB300's fused
    attention is exactly the GB200's divided by the measured kernel speed."""
    from planner.calibration.fitting import LINEAGE

    assert "attention_efficiency" in LINEAGE["gb300"].tied
    m, gb200, job, c, node200 = _blocks("llama3-8b", "gb200-nvl72")
    _, gb300, _, _, node300 = _blocks("llama3-8b", "gb300-nvl72")
    assert node300.gpu.efficiency.attention_efficiency == node200.gpu.efficiency.attention_efficiency
    span = m.attention_span(0, job.seq_length)
    a = attention_block(m, job, c, node200, span)
    b = attention_block(m, job, c, node300, span)
    fwd, bwd = node300.gpu.attention_kernel_speed
    assert kernel_speed(job, node300.gpu) == (fwd, bwd)
    assert b.attn_fwd_s == pytest.approx(a.attn_fwd_s / fwd, rel=1e-12)
    assert b.attn_bwd_s == pytest.approx(a.attn_bwd_s / bwd, rel=1e-12)
    # the same FLOPs; the projections differ only by the families' GEMM numbers
    assert b.model_flop == a.model_flop
    same = replace(node300, gpu=replace(node300.gpu, efficiency=node200.gpu.efficiency))
    assert attention_block(m, job, c, same, span).gemm == a.gemm
    assert estimate(m, gb300, job, c).step_time_s < estimate(m, gb200, job, c).step_time_s


def test_sliding_window_layers_get_the_window_speed():
    m, _, job, c, node = _blocks("gpt-oss-120b", "gb300-nvl72")
    local = [i for i in range(m.num_layers) if m.is_local_attention_layer(i)]
    full = [i for i in range(m.num_layers) if not m.is_local_attention_layer(i)]
    assert local and full
    gpu = node.gpu
    assert (
        kernel_speed(job, gpu, local=True) == gpu.local_attention_kernel_speed != gpu.attention_kernel_speed
    )
    _, _, _, _, node200 = _blocks("gpt-oss-120b", "gb200-nvl72")
    for index, speed in ((local[0], gpu.local_attention_kernel_speed), (full[0], gpu.attention_kernel_speed)):
        span = m.attention_span(index, job.seq_length)
        a = attention_block(m, job, c, node200, span)
        b = attention_block(m, job, c, node, span)
        assert b.attn_fwd_s == pytest.approx(a.attn_fwd_s / speed[0], rel=1e-12)
        assert b.attn_bwd_s == pytest.approx(a.attn_bwd_s / speed[1], rel=1e-12)


def test_flash_attention_2_is_not_credited_with_the_fused_kernels_gain():
    _, _, job, _, node = _blocks("llama3-8b", "gb300-nvl72", impl="flash2")
    _, _, _, _, node200 = _blocks("llama3-8b", "gb200-nvl72", impl="flash2")
    assert kernel_speed(job, node.gpu) == kernel_speed(job, node200.gpu)


@pytest.mark.parametrize(
    "block, message",
    [
        ("attention_kernel_speed:\n  forward: -1\n", "attention_kernel_speed.forward"),
        ("attention_kernel_speed:\n  forwards: 1.2\n", "unknown key 'attention_kernel_speed.forwards'"),
        ("attention_kernel_speed: 1.2\n", "attention_kernel_speed: expected a mapping"),
    ],
)
def test_bad_attention_kernel_speed_is_a_clear_error(tmp_path, block, message):
    source = (
        Path(__file__).resolve().parent.parent / "hardware_profiles" / "gpus" / "gb200.yaml"
    ).read_text()
    path = tmp_path / "gpu.yaml"
    path.write_text(source.replace("efficiency:\n", block + "efficiency:\n", 1))
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        load_gpu(str(path))


def test_cudnn_attention_measurements_compare_with_the_cost_model():
    """scripts/compare_cudnn_attention.py prices every stored cuDNN row on its GPU type; the GB300's
    kernel speed is the measured median, so its charged / measured ratios match the GB200's, and the
    causal backward is charged 2.5 forwards at its own speed."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "compare_cudnn", root / "scripts" / "compare_cudnn_attention.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.compare(mod.DEFAULT_FILES)
    assert set(r) == {"gb200", "gb300", "h200-sxm-141gb"}
    assert len(r["gb200"]["rows"]) == len(r["gb300"]["rows"]) == 45 and len(r["h200-sxm-141gb"]["rows"]) == 10
    m200, m300 = r["gb200"]["median_charged_over_measured"], r["gb300"]["median_charged_over_measured"]
    assert set(m200) == {"fwd", "bwd", "window fwd", "window bwd"}
    for key in m200:
        assert m300[key] == pytest.approx(m200[key], rel=0.05)
    row = next(
        x
        for x in r["gb200"]["rows"]
        if x["model"] == "llama3.1" and x["seq"] == 8192 and x["direction"] == "bwd"
    )
    fwd = next(
        x
        for x in r["gb200"]["rows"]
        if x["model"] == "llama3.1" and x["seq"] == 8192 and x["direction"] == "fwd"
    )
    assert row["charged_ms"] == pytest.approx(2.5 * fwd["charged_ms"])
    assert mod.span(8192, None) == 8192 and mod.span(8192, 128) == pytest.approx(2 * 128, rel=0.01)


@pytest.mark.parametrize("content", [None, '{"rows": [{"ms": {"gb200": 1.0}}]}', "not json"])
def test_compare_cudnn_attention_reports_bad_input_without_a_traceback(tmp_path, content):
    import subprocess
    import sys

    path = tmp_path / "rows.json"
    if content is not None:
        path.write_text(content)
    script = Path(__file__).resolve().parent.parent / "scripts" / "compare_cudnn_attention.py"
    run = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("error: cannot compare") and str(path) in run.stderr
    assert "Traceback" not in run.stderr


def test_attention_kernel_speed_is_optional_and_may_be_null(tmp_path):
    source = (
        Path(__file__).resolve().parent.parent / "hardware_profiles" / "gpus" / "gb300.yaml"
    ).read_text()
    path = tmp_path / "gpu.yaml"
    start = source.index("attention_kernel_speed:\n")
    end = source.index("efficiency:\n")
    path.write_text(source[:start] + "attention_kernel_speed:\n" + source[end:])
    gpu = load_gpu(str(path))
    assert gpu.attention_kernel_speed == (1.0, 1.0) == gpu.local_attention_kernel_speed
    assert gpu.efficiency == load_gpu("gb300").efficiency
