"""How published runs become cases: the facts each source gives about its software and cluster
(gradient-reduction overlap, tensor-parallel overlap, Jean Zay's Omni-Path links and what NCCL
achieved over them)."""

from __future__ import annotations

from functools import cache

import pytest

from cost_models import communication as comm
from cost_models.placement import group as parallel_group
from planner.calibration.cases import cases
from planner.profiles.hardware import load_cluster


@cache
def _by_id():
    return {c.run_id: c for c in cases() if c.job is not None}


@cache
def _records():
    """The calibration set's records as written (tests/data/published_runs.yaml)."""
    import yaml

    from planner.calibration.cases import DEFAULT_RUNS

    return yaml.safe_load(DEFAULT_RUNS.read_text())["runs"]


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


def test_jean_zay_ports_carry_what_bigscience_measured_nccl_moving_through_them():
    """BigScience's all-reduce benchmark on Jean Zay's A100 nodes measured 40.5 Gb/s of NCCL bus
    bandwidth through one 100 Gb/s Omni-Path port: that is the link efficiency of every BigScience
    run, so a tp 8 data-parallel ring (one GPU per node, two rings per port) gets 4 x 40.5 Gb/s / 8
    GPUs; the DGX template's InfiniBand efficiency stays for everyone else."""
    by = _by_id()
    bloom = by["bigscience_prequel_0225_h14336_l72_dp24_tp8_pp2_mbs1_gbs2016"]
    group = bloom.cluster.groups[0]
    assert group.inter_node_efficiency == pytest.approx(0.405)
    dp = comm.link_for(parallel_group(bloom.config, "dpcp"), group)
    assert dp.crosses_network
    assert dp.bandwidth_bytes_per_s == pytest.approx(4 * 40.5e9 / 8 / 8)
    assert any("NCCL at 40.5%" in note for note in bloom.assumptions)
    dgx = by["narayanan2021_t1_gpt1.7b"].cluster.groups[0]
    assert dgx.inter_node_efficiency == load_cluster("dgx-a100", 1).groups[0].inter_node_efficiency


def test_vtrain_runs_priced_as_the_megatron_deepspeed_of_their_validation():
    """vTrain's measured validation runs (Megatron-DeepSpeed on A100 nodes of 8): the configurations'
    800 Gb/s per node is 12.5 GB/s per GPU (half a DGX A100's) at the template's link efficiency;
    fp16, full recompute, unfused attention, pipeline sends scattered over tp, gradients reduced
    after the backward pass; the 108 layouts form 4 groups of one model, GPU count and batch."""
    by = _by_id()
    run = by["vtrain_a100_gpt39.1b_512gpu_tp8_pp4_dp16_mbs2"]
    group = run.cluster.groups[0]
    dgx = load_cluster("dgx-a100", 1).groups[0]
    assert group.inter_node_bandwidth_bytes_per_s == pytest.approx(800e9 / 8 / 8)
    assert group.inter_node_efficiency == dgx.inter_node_efficiency
    assert group.intra_node_bandwidth_bytes_per_s == dgx.intra_node_bandwidth_bytes_per_s
    assert any("12.50 GB/s per GPU (800 Gb/s per node)" in note for note in run.assumptions)
    job = run.job
    assert job.precision == "fp16" and job.attention_impl == "unfused" and job.pipeline_scatter_gather
    assert not job.overlap_grad_reduce and run.config.recompute == "full"
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(1536 * 2048 / (512 * 14.7134), rel=1e-4)
    groups = {c.group for c in by.values() if c.run_id.startswith("vtrain_")}
    assert groups == {
        "vtrain_a100_gpt3.6b_64gpu_gbs512",
        "vtrain_a100_gpt18.4b_256gpu_gbs1024",
        "vtrain_a100_gpt39.1b_512gpu_gbs1536",
        "vtrain_a100_gpt175b_512gpu_gbs1536",
    }
    assert sum(c.run_id.startswith("vtrain_") for c in by.values()) == 108
    narayanan = by["narayanan2021_t1_gpt1.7b"].cluster.groups[0]
    assert narayanan.inter_node_bandwidth_bytes_per_s == dgx.inter_node_bandwidth_bytes_per_s


def test_flagperf_a800_runs_priced_as_megatron_core_on_a100s_with_the_a800s_nvlink():
    """FlagPerf's Llama 3 8B sweep (Megatron-Core 0.6, one DGX A800): the A100's GPU with NVLink
    at 200 GB/s per direction (A800: 400 GB/s bidirectional, A100: 600), no recompute, the
    distributed optimizer, the reduction after the last backward (no --overlap-grad-reduce in the
    launch), bf16; seven layouts in one group at GBS 512 x 8,192 tokens, tokens/s as measured."""
    by = _by_id()
    runs = [c for c in by.values() if c.run_id.startswith("flagperf_a800_")]
    assert len(runs) == 7 and {c.group for c in runs} == {"flagperf_a800_llama3_8b_8gpu_gbs512"}
    dgx = load_cluster("dgx-a100", 1).groups[0]
    best = by["flagperf_a800_llama3_8b_8gpu_pp2_dp4_tp1"]
    group = best.cluster.groups[0]
    assert group.gpu == dgx.gpu and group.intra_node_bandwidth_bytes_per_s == 200e9
    assert group.inter_node_bandwidth_bytes_per_s == dgx.inter_node_bandwidth_bytes_per_s
    assert any("A800" in note for note in best.assumptions)
    for c in runs:
        assert c.config.recompute == "none" and c.config.micro_batch_size == 1
        assert c.config.optimizer_sharding == "distributed" and not c.job.overlap_grad_reduce
        assert c.job.precision == "bf16" and c.job.global_batch_size == 512 and c.job.seq_length == 8192
        assert c.config.tp * c.config.pp * c.config.dp == 8
        assert c.config.sp == (c.config.tp > 1)
    assert best.measured_tokens_per_s_per_gpu == 3698.7


def test_mlperf_gpt3_runs_priced_as_nvidias_nemo_submission():
    """MLPerf Training v3.1's GPT-3 175B results (NVIDIA's NeMo implementation on DGX H100s, 768
    to 10,752 GPUs; Azure's 10,752): tp 4, pp 8, 12 virtual stages, micro-batch 1, FP8 with
    delayed scaling, overlapped tensor-parallel collectives, the distributed optimizer, no
    recompute; the step time is the logged per-step median and the batch the logged one."""
    by = _by_id()
    runs = {c.run_id: c for c in by.values() if c.run_id.startswith("mlperf31_")}
    assert len(runs) == 7
    dgx = load_cluster("dgx-h100", 1).groups[0]
    for c in runs.values():
        cfg, job = c.config, c.job
        assert (cfg.tp, cfg.pp, cfg.vpp, cfg.micro_batch_size) == (4, 8, 12, 1)
        assert cfg.recompute == "none" and cfg.optimizer_sharding == "distributed"
        assert job.precision == "fp8" and job.fp8_recipe == "delayed" and job.tp_comm_overlap
        assert c.cluster.groups[0].gpu == dgx.gpu
        assert c.cluster.groups[0].inter_node_bandwidth_bytes_per_s == dgx.inter_node_bandwidth_bytes_per_s
    big = runs["mlperf31_eos_h100_fp8_gpt3_175b_10752gpu"]
    assert big.cluster.num_gpus == 10752 and big.config.dp == 336 and big.job.global_batch_size == 2688
    assert big.config.num_microbatches(big.job) == 8
    # the logged per-step median, 0.9296 s, for 2,688 sequences of 2,048 tokens
    assert big.measured_tokens_per_s_per_gpu == pytest.approx(2688 * 2048 / (0.9296 * 10752), rel=1e-3)
    # v5.0's Llama 3.1 405B on 8,192 H100s: cp 2, 8 virtual stages over 126 layers with the embedding
    # and the loss counted as pipeline units (ASYM_PP_EMBED / ASYM_PP_LOSS), as Megatron splits them.
    llama = by["mlperf50_eos_h100_fp8_llama31_405b_8192gpu"]
    cfg = llama.config
    assert (cfg.tp, cfg.pp, cfg.vpp, cfg.cp, cfg.dp) == (8, 8, 8, 2, 64)
    layers = cfg.stage_layers(llama.model)
    assert len(layers) == 64 and sum(layers) == 126 and layers[0] == layers[-1] == 1
    assert llama.model.vocab_size == 32768 and llama.job.seq_length == 8192


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
    # torchtitan's Dec-2024 tables: 'AsyncTP' in the caption of Tables 4 (second row), 5 and 6
    asynctp = {rid for rid in by if rid.startswith("torchtitan_h100_202412_llama3.1_") and "_8b_" not in rid}
    asynctp -= {"torchtitan_h100_202412_llama3.1_70b_t4_2d"}
    assert len(asynctp) == 7 and all(by[rid].job.tp_comm_overlap for rid in asynctp)
    assert not by["torchtitan_h100_202412_llama3.1_70b_t4_2d"].job.tp_comm_overlap


def test_every_run_whose_source_names_async_tp_overlaps_its_tensor_parallel_collectives():
    """A record whose locator or parallel notes say AsyncTP / async TP (and not that it is the
    vanilla-TP column) is priced with overlapped tensor-parallel collectives."""
    import re

    import yaml

    from planner.calibration.cases import DEFAULT_RUNS

    runs = yaml.safe_load(DEFAULT_RUNS.read_text())["runs"]
    by = _by_id()
    named = [
        r["id"]
        for r in runs
        if re.search(r"async[ -]?tp", f"{r['source'].get('locator')} {r['parallel'].get('notes')}", re.I)
        and "vanilla" not in r["id"]
        and r["id"] in by
    ]
    assert len(named) >= 9
    assert [rid for rid in named if not by[rid].job.tp_comm_overlap] == []


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
    bloom = [c for rid, c in by_id.items() if rid.startswith(("bigscience_prequel_", "bloom176b_"))]
    # the 36 chronicles runs, the 7 reshaping runs (4 on 24 nodes, 3 on 36) and BLOOM's training run
    # (tr11-176B-ml.slurm exports CUDA_LAUNCH_BLOCKING=1 as well)
    assert len(bloom) == 44
    assert {c.software for c in bloom} == {"megatron-deepspeed-bigscience-2022"}
    assert by_id["narayanan2021_t1_gpt1.7b"].software == ""


def test_zero_stage_is_read_from_numbers_and_from_text_that_starts_with_one():
    from planner.calibration.run_records import zero_stage_of

    assert zero_stage_of({"zero_stage": 1}) == 1
    assert zero_stage_of({"zero_stage": "1 (DeepSpeed BF16_Optimizer implements ZeRO-1-equivalent)"}) == 1
    assert zero_stage_of({"zero_stage": "FSDP2 (ZeRO-3-like)"}) is None
    assert zero_stage_of({"zero_stage": True}) is None
    assert zero_stage_of({}) is None
    # BLOOM's training run shards its optimizer like the reshaping runs of the same software
    by_id = _by_id()
    bloom = by_id["bloom176b_bigscience_tr11"]
    assert (
        bloom.config.optimizer_sharding
        == by_id["bloom176b_reshape_24nodes_tp4_pp12_mbs2"].config.optimizer_sharding
    )
    assert bloom.config.optimizer_sharding == "distributed"
    assert not any("optimizer sharding" in a for a in bloom.assumptions)


def test_deepspeed_embedding_slots_split_blooms_pipeline_as_its_readme_shows():
    """``--pp-partition-method 'type:transformer|embedding'``: [embed | 5 blocks], [6 blocks] x 10,
    [5 blocks | embed] for BLOOM's 70 layers on pp 12 (tr11-176B-ml README, "Replica setup"); the
    February chronicles runs predate the option and split the blocks alone."""
    by_id = _by_id()
    bloom = by_id["bloom176b_bigscience_tr11"]
    assert bloom.config.stage_layers(bloom.model) == (5,) + (6,) * 10 + (5,)
    deep = by_id["bloom176b_reshape_24nodes_tp2_pp24_mbs1"]
    assert deep.config.stage_layers(deep.model) == (2,) + (3,) * 22 + (2,)
    feb = by_id["bigscience_prequel_0225_h14336_l72_dp8_tp2_pp24_mbs1_gbs2048"]
    assert feb.config.stage_layers(feb.model) == (3,) * 24


def test_bigscience_micro_batch_sweep_peaks_inside():
    """The 02-21 sweep (tp 8, pp 12, dp 4) measured tokens/s rising from micro-batch 1 to 4 and
    falling at 8; with GEMM wave quantization and the class's per-layer launch cost the prediction
    rises from 1 to 2 and falls from 4 to 8 (before both it fell monotonically)."""
    from planner.calibration.descent import predict

    by_id = _by_id()
    pred = {
        mbs: predict(by_id[f"bigscience_prequel_0221_h14336_l72_dp4_tp8_pp12_mbs{mbs}_gbs2048"]).predicted
        for mbs in (1, 2, 4, 8)
    }
    assert pred[1] < pred[2] and pred[8] < pred[4], pred


def test_recipes_that_account_for_embedding_and_loss_split_the_pipeline_as_megatron_does():
    """Records whose recipe sets --account-for-embedding/loss-in-pipeline-split (Megatron-Bridge's
    Qwen3-235B and Llama 3.1 405B configs, the MoE Model Zoo's Qwen3-235B launch config, MLPerf
    v5.0's Llama 3.1 405B runs on H100, H200 and GB200, ASYM_PP_EMBED / ASYM_PP_LOSS; Qi et al.
    2024's zero-bubble runs, whose first and last stage are one layer short) get Megatron's split:
    the embedding and the loss each count as a layer of the first and last virtual stage, so those
    hold one decoder layer fewer (cost_models.parallel.account_for_split)."""
    import yaml

    from planner.calibration.cases import DEFAULT_RUNS

    runs = yaml.safe_load(DEFAULT_RUNS.read_text())["runs"]
    by = _by_id()
    flagged = [
        r["id"]
        for r in runs
        if r["parallel"].get("account_for_embedding_in_pipeline_split") and r["id"] in by
    ]
    assert len(flagged) == 38 + 52  # 38 with the four Llama 3.1 405B NVFP4 rows
    for rid in flagged:
        c = by[rid]
        layers = c.config.stage_layers(c.model)
        units = c.model.num_layers + 2
        per = units // len(layers)
        assert units % len(layers) == 0 and sum(layers) == c.model.num_layers, rid
        if len(layers) > 1:
            assert layers[0] == layers[-1] == per - 1 and set(layers[1:-1]) <= {per}, rid
    # Qwen3-235B, 94 layers on 8 stages x 2 virtual: 96 units, 6 each
    assert by["mbridge2511_b200_fp8mx_qwen3_235b_64gpu"].config.stage_layers(
        by["mbridge2511_b200_fp8mx_qwen3_235b_64gpu"].model
    ) == (5,) + (6,) * 14 + (5,)
    zoo = by["moezoo_h100_bf16_qwen3_235b_256gpu_tp4_pp8_ep8_deepep"]
    assert zoo.config.stage_layers(zoo.model) == (2,) + (3,) * 30 + (2,)
    # the zero-bubble runs' interleaved layout: one layer per chunk, none in the first and last
    zb = by["qi2024_zb_a100_gpt1.5b_8gpu_gbs144_1f1bi_mbs6"]
    assert zb.config.vpp == 3 and zb.config.stage_layers(zb.model) == (0,) + (1,) * 22 + (0,)


def test_recipes_with_a_pipeline_layout_split_the_layers_as_the_layout_says():
    """Megatron-Bridge's DeepSeek-V3 and Kimi-K2 configs give --pipeline-model-parallel-layout
    (E embedding, t decoder layer, m MTP, L loss): the calibration case holds those decoder layers
    per virtual stage, not a balanced split."""
    by = _by_id()
    dsv3 = by["mbridge260401_b200_mxfp8_dsv3_256gpu"]  # 'Et*4|(t*4|)*14tmL', pp 8 x vpp 2
    assert dsv3.config.stage_layers(dsv3.model) == (4,) * 15 + (1,)
    assert "pipeline layout from the recipe" in dsv3.assumptions
    b300 = by["mbridge2606_b300_mxfp8_dsv3_256gpu"]  # 'Et*8|(t*8|)*6t*5mL', pp 8
    assert b300.config.stage_layers(b300.model) == (8,) * 7 + (5,)
    kimi = by["mbridge2606_gb300_mxfp8_kimi_k2_256gpu"]  # 'Et*4|(t*4|)*14tL', pp 4 x vpp 4
    assert kimi.config.stage_layers(kimi.model) == (4,) * 15 + (1,)


def test_gradients_reduced_in_bf16_only_where_the_recipe_says_so():
    """Records whose recipe sets grad_reduce_in_fp32 = False (Megatron-Bridge's performance configs,
    the Megatron-LM examples' FP8 scripts, MLPerf's NeMo implementations: distributed fused Adam's
    grad_sync_dtype bf16 for GPT-3, MegatronMixedPrecision / DDP grad_reduce_in_fp32=False for
    Llama 3.1 405B) carry it with a citation and are priced with bf16 gradients; every other run
    keeps its precision's default."""
    from planner.inputs.jobs import default_grad_dtype

    runs = _records()
    by = _by_id()
    flagged = [r for r in runs if r["parallel"].get("grad_reduce_in_fp32") is False]
    assert len(flagged) >= 71
    assert all(r["source"]["recipe"].get("grad_reduce") for r in flagged)
    assert all(r["id"].startswith(("mbridge", "megatronlm_examples", "mlperf")) for r in flagged)
    assert sum(r["id"].startswith("mlperf") for r in flagged) == 26
    ids = {r["id"] for r in flagged}
    for rid, case in by.items():
        if case.job is None:
            continue
        expected = "bf16" if rid in ids else default_grad_dtype(case.job.precision)
        assert case.job.grad_dtype == expected, rid


def test_every_stated_batch_adds_up():
    """A record's batch is one product: global batch = gradient-accumulation steps x data-parallel
    degree x micro-batch, wherever the record states all four (a table's GA column that fits
    neither its own micro-batch nor the recipe's is how the 25.11 DGX-H100 gpt-oss row's copied
    columns were found). The calibration's micro-batch count is that product's quotient."""
    runs = _records()
    by = _by_id()
    stated = 0
    for r in runs:
        p = r["parallel"]
        ga, dp, mbs, gbs = (
            p.get(k) for k in ("grad_accum_steps", "dp", "micro_batch_size", "global_batch_size")
        )
        if not all(isinstance(x, int) for x in (ga, dp, mbs, gbs)):
            continue
        stated += 1
        assert ga * dp * mbs == gbs, r["id"]
        case = by.get(r["id"])
        if case is not None and case.config is not None and case.config.dp == dp:
            assert case.config.num_microbatches(case.job) == ga, r["id"]
    assert stated >= 500


@pytest.mark.parametrize(
    "run_id, mbs, ga",
    [
        # the table repeats the 25.09 table's micro-batch 2 / virtual 24 (docs/calibration.md)
        ("mbridge2511_h100_fp8cs_qwen3_30b_16gpu", 1, 64),
        # the table's GA 2 is the B200 row's: the batch columns were copied (docs/calibration.md)
        ("mbridge2511_h100_bf16_gptoss120b_64gpu", 1, 32),
    ],
)
def test_records_that_follow_their_recipe_say_so(run_id, mbs, ga):
    rec = next(r for r in _records() if r["id"] == run_id)
    assert (rec["parallel"]["micro_batch_size"], rec["parallel"]["grad_accum_steps"]) == (mbs, ga)
    assert {"parallel.micro_batch_size", "parallel.grad_accum_steps"} <= set(rec["inferred_fields"])
    assert "follows the recipe" in rec["source"]["recipe"]["notes"]
    case = _by_id()[run_id]
    assert case.config.micro_batch_size == mbs


@pytest.mark.parametrize(
    "section, key", [("model", "hidden_size"), ("model", "num_layers"), ("hardware", "total_gpus")]
)
def test_a_record_with_a_null_required_number_is_one_line_naming_the_key(tmp_path, section, key):
    """The validation scripts' reader checks each record as ``planner calibrate`` does
    (planner.calibration.record_checks): a null the case builder would compute with is named, not a
    TypeError."""
    import copy

    import yaml

    from planner.calibration.cases import DEFAULT_RUNS, cases
    from planner.inputs.errors import SpecError

    run = copy.deepcopy(yaml.safe_load(DEFAULT_RUNS.read_text())["runs"][0])
    run[section][key] = None
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "run_count": 1, "runs": [run]}))
    with pytest.raises(SpecError, match=rf"runs\[0\] \(id '{run['id']}'\): key '{section}.{key}': required"):
        cases(path)


def test_a_record_can_say_its_gradient_reduction_was_not_overlapped():
    """``parallel.overlap_grad_reduce: false`` (a recipe that keeps Megatron-Core's default, as AMD's
    MLPerf v5.1 Llama 3.1 8B implementation does) prices the reduction after the last backward; a
    record without the key keeps its software's rule."""
    from planner.calibration.run_records import overlapped_reduction

    run = {"id": "x", "source": {"title": "Megatron-Bridge"}, "parallel": {"framework": "nemo"}}
    assert overlapped_reduction(run) is True
    run["parallel"]["overlap_grad_reduce"] = False
    assert overlapped_reduction(run) is False
    run["parallel"]["overlap_grad_reduce"] = True
    assert overlapped_reduction(run) is True
