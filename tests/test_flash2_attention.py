"""FlashAttention-2 kernels (JobSpec.attention_impl ``flash2``): priced at FLASH2_SPEED of the
generation's fused kernel (forward, backward) from Hopper on and the same on Ampere, which calibration runs ran them,
and which frameworks run them."""

from __future__ import annotations

import json

import pytest

from cost_models.attention import FLASH2_SPEED, FUSED_BACKWARD_FORWARDS, attention_block, kernel_speed
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import compute_capability_major
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster


@pytest.mark.parametrize(
    "gpu, major",
    [("V100-SXM2-32GB", 7), ("A100-SXM4-80GB", 8), ("L40S", 8), ("H100-SXM5-80GB", 9), ("H200-SXM-141GB", 9)]
    + [("B200", 10), ("GB300", 10), ("MI300X", 0)],
)
def test_compute_capability_of_the_presets(gpu, major):
    assert compute_capability_major(gpu) == major


def _problem(template, impl, seq=8192):
    m, cluster = load_model("llama3-8b"), load_cluster(template, 1)
    job = make_job(global_batch_size=16, seq_length=seq, precision="bf16", attention_impl=impl)
    c = resolve(m, cluster, job, ParallelConfig(tp=1, micro_batch_size=1, optimizer_sharding="full"))
    return m, cluster, job, c


@pytest.mark.parametrize("template, slower", [("dgx-h100", True), ("dgx-a100", False)])
def test_flash2_is_slower_from_hopper_on_only(template, slower):
    m, cluster, fused_job, c = _problem(template, "fused")
    _, _, flash_job, _ = _problem(template, "flash2")
    node = cluster.groups[0]
    span = m.attention_span(0, fused_job.seq_length)
    fused = attention_block(m, fused_job, c, node, span)
    flash = attention_block(m, flash_job, c, node, span)
    fwd, bwd = FLASH2_SPEED if slower else (1.0, 1.0)
    assert kernel_speed(flash_job, node.gpu) == pytest.approx((fwd, bwd))
    assert flash.attn_fwd_s == pytest.approx(fused.attn_fwd_s / fwd, rel=1e-12)
    assert flash.attn_bwd_s == pytest.approx(fused.attn_bwd_s / bwd, rel=1e-12)
    assert fused.attn_bwd_s == pytest.approx(FUSED_BACKWARD_FORWARDS * fused.attn_fwd_s, rel=1e-12)
    # only the attention kernel changes: projections, FLOPs and kept bytes are the same
    assert flash.model_flop == fused.model_flop and flash.act_bytes == fused.act_bytes
    a, b = estimate(m, cluster, fused_job, c), estimate(m, cluster, flash_job, c)
    if slower:
        assert b.step_time_s > a.step_time_s and b.mfu < a.mfu
    else:
        assert b.step_time_s == pytest.approx(a.step_time_s)


def test_calibration_runs_of_flash_attention_2_frameworks():
    from planner.calibration.cases import cases
    from planner.calibration.run_records import FLASH2_ATTENTION_SOURCES

    seen = set()
    for c in cases():
        if c.job is None:
            continue
        if c.source.startswith(FLASH2_ATTENTION_SOURCES):
            assert c.job.attention_impl == "flash2", c.run_id
            seen.add(c.source.split()[0])
        elif c.run_id.startswith(("mbridge", "nemo", "megatronlm", "moezoo")):
            # fused, but where the recipe sets --attention-backend unfused (Megatron-LM's MoE CI test)
            unfused = c.run_id.startswith("megatronlm_ci_moe_")
            assert c.job.attention_impl == ("unfused" if unfused else "fused"), c.run_id
    assert seen == {"pytorch/torchtitan", "mosaicml/llm-foundry", "Hagemann"}


def test_frameworks_refuse_flash2_they_do_not_run():
    """Megatron's attention backends have no FlashAttention-2 pin; torchtitan 0.2.2 puts cuDNN first
    (torchtitan/models/attention.py), so both refuse flash2 and accept fused."""
    from planner.frameworks import get_framework

    m, cluster, job, c = _problem("dgx-h100", "flash2")
    for name in ("megatron", "torchtitan"):
        reasons = get_framework(name).violations(m, cluster, job, c)
        assert any("core attention, not flash2" in r for r in reasons), (name, reasons)
    assert not get_framework("any").violations(m, cluster, job, c)


def test_cli_prices_and_reports_flash2(run_cli):
    args = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "16", "-s", "8192")
    args += ("--tp", "1", "--micro-batch-size", "1", "--json")
    fused = json.loads(run_cli(*args).stdout)
    flash = json.loads(run_cli(*args, "--attention-impl", "flash2").stdout)
    assert flash["job"]["attention_impl"] == "flash2" and fused["job"]["attention_impl"] == "fused"
    assert flash["step_time_s"] > fused["step_time_s"]
