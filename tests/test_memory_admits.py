"""Memory that admits what ran (issue 52, item 4): every counted calibration run ran, so each one
predicted not to fit is the memory model, or the record, erring. The test holds the exceptions to
a named, documented list with each one's measured excess, so a change that rejects another run
that ran, or makes a named one worse, fails here; the docs (docs/calibration.md, "Memory that
admits what ran") carry the same list. Also: the production layouts the issue names fit with the
flag that expresses the framework that ran them."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.calibration.cases import cases, excluded_reason, predict_all
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

NOT_FITTING = {
    "nemo2407_h100_fp8_nemotron-340b_128gpu": (
        1.15,
        "NeMo 24.07's launcher config reduces gradients in bf16 (nemotron_340b.yaml optim.grad_sync_dtype "
        "bf16, read by NeMo as grad_reduce_in_fp32=False), which the record does not state: with bf16 "
        "gradients the peak is 80.6 GiB, within the model's error of the 80 GiB",
    ),
    "mbridge2511_gb200_fp8cs_llama3_70b_64gpu": (
        1.10,
        "Megatron-FSDP with 40 layers' activations offloaded; the table's GBS differs from the recipe's and "
        "the offload count is inferred (the record's MISMATCH note)",
    ),
    "mbridge2511_gb300_fp8cs_llama3_70b_64gpu": (
        1.03,
        "as the GB200 row: Megatron-FSDP, 20 offloaded layers, GBS mismatch",
    ),
    "mbridge2511_gb200_fp8cs_llama31_405b_256gpu": (
        1.085,
        "the table's mapping (tp 4, pp 16, vp 4) is not the release's recipe, so its recompute is inferred "
        "as none (the record's MISMATCH note)",
    ),
    "vtrain_a100_gpt3.6b_64gpu_tp1_pp1_dp64_mbs8": (
        1.03,
        "Megatron-DeepSpeed with no stated optimizer sharding, priced unsharded (16 bytes per parameter); "
        "2% over",
    ),
}
"""Counted runs predicted not to fit: run id -> (the most their predicted peak may exceed the GPU's
memory by, as a ratio; why)."""


@pytest.fixture(scope="module")
def counted():
    return [r for r in predict_all(cases()) if not excluded_reason(r.case.run_id)]


def _ratio(result) -> float:
    m = result.estimate.worst_stage.memory
    return m.peak_bytes / m.capacity_bytes


def test_every_counted_run_that_ran_is_predicted_to_fit_but_the_named_ones(counted):
    over = {r.case.run_id: _ratio(r) for r in counted if not r.estimate.gpu_fits}
    assert sorted(over) == sorted(NOT_FITTING)
    for run_id, ratio in over.items():
        assert 1.0 < ratio <= NOT_FITTING[run_id][0], (run_id, ratio)
    assert all(r.estimate.host_fits for r in counted)  # offloaded activations fit in host memory too
    assert len(counted) >= 400 and len(over) / len(counted) < 0.015


def _llama405b(sharding: str):
    """Llama 3 405B's production layout (Llama 3 paper, arXiv:2407.21783, Table 4: 16,384 H100, tp 8,
    pp 16, dp 128, sequence 8,192; Sec. 3.3.2: the first and last stages one layer short)."""
    m, cluster = load_model("llama3.1-405b"), load_cluster("dgx-h100", 2048)
    job = make_job(global_batch_size=2048, seq_length=8192)
    layers = (7,) + (8,) * 14 + (7,)
    c = ParallelConfig(tp=8, pp=16, micro_batch_size=1, layers_per_stage=layers, optimizer_sharding=sharding)
    return estimate(m, cluster, job, resolve(m, cluster, job, c))


def test_llama3_405b_production_layout_fits_with_metas_sharding():
    """Meta's FSDP shards gradients and optimizer states and keeps the weights (Sec. 3.3.2: "we
    shard the optimizer states and gradients, but ... do not reshard after forward"), planner's
    zero2: it fits; priced with Megatron's distributed optimizer (fp32 gradients unsharded) it does
    not, which is what made the layout look impossible."""
    assert _llama405b("zero2").gpu_fits
    assert not _llama405b("distributed").gpu_fits


def test_hagemann_13b_best_layout_fits_with_its_bf16_gradients():
    """Hagemann et al. 2023's measured-best Llama 13B layout (tp 1, pp 1, micro-batch 1 on 64 A100
    80 GB, sequence 2,048, activation checkpointing; its record in the calibration set, excluded from
    the counts for its codebase) fits with 16-bit gradients (``--grad-dtype bf16``), not with the
    fp32 gradient buffer its record is priced with."""
    case = next(
        c for c in cases() if c.run_id == "hagemann2023_a100_llama13b_s2048_64gpu_tp1_pp1_mbs1_ckpt_t132405"
    )
    assert case.job.grad_dtype == "fp32"
    assert not estimate(case.model, case.cluster, case.job, case.config).gpu_fits
    bf16 = dataclasses.replace(case.job, grad_dtype="bf16")
    assert estimate(case.model, case.cluster, bf16, case.config).gpu_fits
