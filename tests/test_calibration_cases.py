"""How published runs become cases: the facts each source gives about its software and cluster
(gradient-reduction overlap, tensor-parallel overlap, Jean Zay's Omni-Path links)."""

from __future__ import annotations

from functools import cache

import pytest

from planner.calibration import cases


@cache
def _by_id():
    return {c.run_id: c for c in cases() if c.job is not None}


@pytest.mark.parametrize(
    "prefix, overlapped",
    [
        ("bigscience_prequel_", False),  # Megatron-DeepSpeed pipeline engine: ReduceGrads at the end
        ("narayanan2021_t1_gpt1.7b", True),  # --DDP-impl torch: buckets under the last backward
        ("narayanan2021_t1_gpt3.6b", True),
        ("narayanan2021_t1_gpt7.5b", True),
        ("narayanan2021_t1_gpt18.4b", True),
        ("narayanan2021_t1_gpt39", False),  # Megatron-LM 2021, --DDP-impl local: after the flush
        ("narayanan2021_t1_gpt1008", False),
        ("narayanan2021_t2_", False),
        ("korthikanti2022_", False),
        ("megatronlm_readme_h100_", True),  # Megatron-Core r0.8 with --overlap-grad-reduce
        ("mbridge2511_", True),
        ("dlperf_megatron_", False),  # Megatron-LM 8aa4619 (2021), --DDP-impl local
        ("dlperf_oneflow_", True),
    ],
)
def test_gradient_reduction_overlap_follows_the_software(prefix, overlapped):
    runs = [c for rid, c in _by_id().items() if rid.startswith(prefix)]
    assert runs
    assert {c.job.overlap_grad_reduce for c in runs} == {overlapped}


def test_jean_zay_inter_node_bandwidth_from_its_omni_path_links():
    bloom = _by_id()["bigscience_prequel_0225_h14336_l72_dp24_tp8_pp2_mbs1_gbs2016"]
    group = bloom.cluster.groups[0]
    assert group.inter_node_bandwidth_bytes_per_s == pytest.approx(4 * 100e9 / 8 / 8)
    dgx = _by_id()["narayanan2021_t1_gpt1.7b"].cluster.groups[0]
    assert dgx.inter_node_bandwidth_bytes_per_s == pytest.approx(25e9)


def test_dlperf_v100_server_links_and_memory():
    """DLPerf's 8x V100-SXM2-16GB servers: NVLink2 150 GB/s per direction, one 100 Gb/s EDR port per
    node shared by 8 GPUs, 16 GiB per GPU, fp16."""
    v100 = _by_id()["dlperf_megatron_gpt1536x16_8v100_dp2_tp4_mbs8"]
    group = v100.cluster.groups[0]
    assert group.intra_node_bandwidth_bytes_per_s == pytest.approx(150e9)
    assert group.inter_node_bandwidth_bytes_per_s == pytest.approx(100e9 / 8 / 8)
    assert group.gpu.memory_bytes == 16 * 2**30 and v100.job.precision == "fp16"


def test_tensor_parallel_overlap_only_where_the_source_says_so():
    by = _by_id()
    assert by["torchtitan_h100_202506_asynctp_bench_llama3_8b_64gpu_bf16_async_tp"].job.tp_comm_overlap
    assert not by["torchtitan_h100_202506_asynctp_bench_llama3_8b_64gpu_bf16_vanilla_tp"].job.tp_comm_overlap
    assert by["megatronlm_readme_h100_70B"].job.tp_comm_overlap
    assert not by["narayanan2021_t1_gpt1.7b"].job.tp_comm_overlap


def test_korthikanti_model_flops_give_the_same_tokens_as_its_step_time():
    """Korthikanti et al. 2022 eq. 7 (model FLOPs) turns the Appendix C MFU into tokens/s; on the
    Table 5 row that also gives a step time, the two ways agree within 0.5%."""
    by = _by_id()
    appc = by["korthikanti2022_appC_175B_microbatch_level_recompute"]
    assert appc.measured_from == "TFLOP/s by Korthikanti eq. 7"
    assert appc.config.recompute == "selective"
    assert any("micro-batch-level" in note for note in appc.assumptions)
    t5 = by["korthikanti2022_t5_175B_sp_selective"]  # 160.4 TFLOP/s = 0.514 MFU x 312; 13.75 s/step
    m = t5.model
    per_token = (
        72
        * m.num_layers
        * m.hidden_size**2
        * (1 + 2048 / (6 * m.hidden_size) + m.vocab_size / (12 * m.hidden_size * m.num_layers))
    )
    assert 160.4e12 / per_token == pytest.approx(t5.measured_tokens_per_s_per_gpu, rel=0.005)
    assert appc.measured_tokens_per_s_per_gpu == pytest.approx(163.2e12 / per_token)


def test_the_unpredicted_runs_say_why():
    """Only OPT-175B is unpredicted (FLOP counting not stated). The Megatron-MoE-ModelZoo Qwen3-235B
    row with pp 32 x vpp 3 = 96 virtual stages for 94 layers is predicted with embedding-only and
    loss-only stages (tests/test_embedding_stages.py)."""
    skipped = {c.run_id: c.skip_reason for c in cases() if c.skip_reason}
    assert set(skipped) == {"opt175b_meta"}
    assert "FLOP counting not stated" in skipped["opt175b_meta"]


def test_bigscience_runs_form_their_software_class():
    """BigScience's Megatron-DeepSpeed runs (CUDA_LAUNCH_BLOCKING=1 on Jean Zay) get their own
    software profile; Megatron-LM's own runs of the same years do not."""
    by_id = _by_id()
    bloom = [c for rid, c in by_id.items() if rid.startswith(("bigscience_prequel_", "bloom176b_reshape_"))]
    assert len(bloom) == 40
    assert {c.software for c in bloom} == {"megatron-deepspeed-bigscience-2022"}
    assert by_id["narayanan2021_t1_gpt1.7b"].software == ""


def test_bigscience_micro_batch_sweep_peaks_inside():
    """The 02-21 sweep (tp 8, pp 12, dp 4) measured tokens/s rising from micro-batch 1 to 4 and
    falling at 8; with GEMM wave quantization and the class's per-layer launch cost the prediction
    rises from 1 to 2 and falls from 4 to 8 (before both it fell monotonically)."""
    from planner.fitting import predict

    by_id = _by_id()
    pred = {
        mbs: predict(by_id[f"bigscience_prequel_0221_h14336_l72_dp4_tp8_pp12_mbs{mbs}_gbs2048"]).predicted
        for mbs in (1, 2, 4, 8)
    }
    assert pred[1] < pred[2] and pred[8] < pred[4], pred
