"""Unfused core attention (JobSpec.attention_impl, cost_models.unfused_attention.unfused_core_attention):
the score matrix's bytes and GEMMs priced as Megatron-LM 2021 runs them, what backward keeps, the
setting's validation and round trip, and which calibration runs use it."""

from __future__ import annotations

import math

import pytest

from cost_models.compute import batched_gemm_s, memory_bound_s
from cost_models.constraints import resolve
from cost_models.layers import layer_table
from cost_models.parallel import ParallelConfig
from cost_models.unfused_attention import UNFUSED_KEPT_BYTES, UNFUSED_SCORE_BYTES, unfused_core_attention
from planner.inputs.errors import SpecError
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

SEQ = 2048


def _table(impl, tp=1, mbs=4, recompute="none"):
    # GPT 1.7B (Narayanan et al. 2021 Table 1): h 2304, 24 heads of 96, seq 2048, on A100.
    m, cluster = load_model("gpt-1.7b"), load_cluster("dgx-a100", 1)
    job = make_job(global_batch_size=64, seq_length=SEQ, precision="fp16", attention_impl=impl)
    c = resolve(
        m,
        cluster,
        job,
        ParallelConfig(tp=tp, micro_batch_size=mbs, recompute=recompute, optimizer_sharding="none"),
    )
    return m, layer_table(m, job, c, cluster.groups[0]), cluster.groups[0].gpu


def test_byte_table_is_the_derived_one():
    # forward: QK^T write, softmax read + write, dropout read + write + mask, PV read
    assert sum(UNFUSED_SCORE_BYTES["forward"]) == 2 + 4 + 5 + 2
    # backward: dP write, dV read, dropout 2 + 1 + 2, softmax 2 + 2 + 2, dQ and dK reads
    assert sum(UNFUSED_SCORE_BYTES["backward"]) == 2 + 2 + 5 + 6 + 2 + 2
    assert UNFUSED_KEPT_BYTES == 5  # Korthikanti et al. 2022: the 5as/h term


def test_core_attention_is_the_sum_of_its_kernels():
    """Hand-assembled: four batched GEMMs (each at least its score bytes' HBM time) plus the
    memory-bound softmax and dropout over the b x np x s x s scores."""
    _, _, gpu = _table("unfused")
    tokens, heads, d = 4 * SEQ, 24.0, 96.0
    fwd, bwd, scores = unfused_core_attention(tokens, SEQ, heads, d, gpu, "fp16")
    assert scores == tokens * SEQ * heads
    batch = tokens / SEQ * heads
    qk = batched_gemm_s(SEQ, SEQ, d, batch, gpu, "fp16", 2 * scores)
    pv = batched_gemm_s(SEQ, d, SEQ, batch, gpu, "fp16", 2 * scores)
    assert math.isclose(fwd, qk + memory_bound_s(9 * scores, gpu) + pv, rel_tol=1e-12)
    assert math.isclose(bwd, qk + 3 * pv + memory_bound_s(11 * scores, gpu), rel_tol=1e-12)
    # never faster than their score bytes through HBM (the roofline)
    assert qk >= memory_bound_s(2 * scores, gpu) and pv >= memory_bound_s(2 * scores, gpu)


def test_unfused_layer_is_slower_and_keeps_the_scores():
    m, fused, _ = _table("fused")
    _, unfused, gpu = _table("unfused")
    T = 4 * SEQ
    scores = T * SEQ * m.num_attention_heads
    assert unfused.dense.forward_s > fused.dense.forward_s
    assert unfused.dense.backward_input_s > fused.dense.backward_input_s
    # activations: the 5 bytes per score element instead of flash attention's fp32 log-sum-exp
    kept = unfused.dense.activation_bytes - fused.dense.activation_bytes
    assert math.isclose(kept, 5 * scores - 4 * T * m.num_attention_heads, rel_tol=1e-12)
    # selective recompute re-runs exactly the unfused core attention forward
    fwd, _, _ = unfused_core_attention(T, SEQ, m.num_attention_heads, m.kv_channels, gpu, "fp16")
    assert math.isclose(unfused.dense.selective_recompute_s, fwd, rel_tol=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_selective_recompute_keeps_korthikanti_table2(t):
    """Korthikanti et al. 2022 Table 2 with sequence parallelism: without recompute a layer keeps
    sbh(34/t + 5as/(ht)) bytes, with selective recompute 34 sbh/t: the 5 bytes per score element
    of unfused core attention are recomputed, not kept (planner once kept them, and priced the
    paper's own selective runs at 90-119 GiB on 80 GB A100s)."""
    m = load_model("gpt3-175b")
    s, b, h, a = SEQ, 1, 12288, 96
    cluster = load_cluster("dgx-a100", 1)
    job = make_job(global_batch_size=8, seq_length=s, precision="fp16", attention_impl="unfused")
    c = ParallelConfig(tp=t, sequence_parallel=True, recompute="selective")
    dense = layer_table(m, job, c, cluster.groups[0]).dense
    assert dense.activation_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t, rel=1e-9)
    assert dense.recomputed_bytes("selective") == pytest.approx(34 * s * b * h / t, rel=1e-9)
    assert dense.recomputed_bytes("none") == dense.activation_bytes


def test_selective_recompute_frees_the_scores_in_every_stage():
    """The estimate keeps no layer's score matrix under selective recompute, only one layer's
    recomputed one at a time (a transient), for chains and for the search's stage model alike."""
    from cost_models.estimate import estimate
    from planner.search.stage_model import layer_of, stage_model

    m, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100", 8)
    job = make_job(global_batch_size=64, seq_length=SEQ, precision="fp16", attention_impl="unfused")
    base = dict(tp=8, pp=8, micro_batch_size=1, sequence_parallel=True, optimizer_sharding="none")
    none = estimate(m, cluster, job, resolve(m, cluster, job, ParallelConfig(**base))).stages[0].memory
    c = resolve(m, cluster, job, ParallelConfig(**base, recompute="selective"))
    sel = estimate(m, cluster, job, c).stages[0].memory
    dense = layer_of(m, job, c, cluster.groups[0])[1]
    dropped = dense.selective_dropped_bytes
    layers, inflight = m.num_layers / c.pp, sel.peak_inflight_microbatches
    assert dropped > 0 and inflight >= 1
    assert none.activations_bytes - sel.activations_bytes == pytest.approx(
        inflight * layers * dropped, rel=1e-6
    )
    assert sel.transient_bytes >= dropped
    sm = stage_model(m, job, c, cluster.groups[0], 0, inflight)
    assert sm.act_per_layer_bytes == pytest.approx(dense.activation_bytes - dropped, rel=1e-12)


def test_tensor_parallelism_splits_the_heads():
    """A quarter of the heads per GPU at tp 4: a quarter of the bytes, slightly more than a quarter
    of the time (fewer products share the waves of each batched GEMM)."""
    _, one, _ = _table("unfused", tp=1)
    _, four, _ = _table("unfused", tp=4)
    ratio = four.dense.selective_recompute_s * 4 / one.dense.selective_recompute_s
    assert 1.0 <= ratio < 1.15


def test_attention_impl_is_validated_and_round_trips():
    with pytest.raises(
        SpecError, match="attention_impl 'flash' is not allowed; allowed values: fused, unfused, flash2"
    ):
        make_job(global_batch_size=8, seq_length=SEQ, attention_impl="flash")
    job = job_from_mapping(
        {"global_batch_size": 8, "seq_length": SEQ, "attention_impl": "unfused"}, "plan.yaml"
    )
    assert job.attention_impl == "unfused"
    with pytest.raises(SpecError, match="attention_impl"):
        job_from_mapping({"global_batch_size": 8, "seq_length": SEQ, "attention_impl": "x"}, "plan.yaml")


def test_calibration_runs_before_flash_attention_are_unfused():
    from planner.calibration.cases import cases

    by = {c.run_id: c for c in cases() if c.job is not None}
    for rid in (
        "narayanan2021_t1_gpt1.7b",
        "korthikanti2022_t5_175B_sp_selective",
        "bigscience_prequel_0220_h14400_l80_dp4_tp8_pp10_mbs8_gbs2048",
        "dlperf_megatron_gpt1536x16_8v100_dp8_tp1_mbs2",
    ):
        assert by[rid].job.attention_impl == "unfused", rid
    for c in by.values():
        if c.run_id.startswith(("mbridge", "nemo", "megatronlm_readme", "moezoo")):
            assert c.job.attention_impl == "fused", c.run_id


MEGATRON = (
    "--num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 "
    "--max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 64 --vocab-size 51200 --fp16"
)


@pytest.mark.parametrize(
    "extra, impl",
    [
        ("", "fused"),
        ("--attention-backend unfused", "unfused"),
        ("--attention-backend local", "unfused"),
        ("--attention-backend flash", "fused"),
        ("--transformer-impl local", "unfused"),
        ("--transformer-impl local --attention-backend fused", "fused"),
    ],
)
def test_megatron_import_reads_the_attention_backend(extra, impl):
    from planner.launch.megatron.importer import parse_megatron

    text = f"#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py {MEGATRON} {extra}\n"
    assert parse_megatron(text, "x.sh", 8).job.attention_impl == impl


def test_frameworks_export_or_refuse_unfused_attention():
    from planner.frameworks import get_framework
    from planner.launch.megatron.export_args import model_args
    from planner.plans.plan_file import PlanInputs

    m, cluster = load_model("gpt-1.7b"), load_cluster("dgx-a100", 1)
    job = make_job(global_batch_size=64, seq_length=SEQ, precision="bf16", attention_impl="unfused")
    c = resolve(m, cluster, job, ParallelConfig(tp=1, micro_batch_size=4, optimizer_sharding="none"))
    args = model_args(PlanInputs(model=m, cluster=cluster, job=job, config=c))
    assert ("--attention-backend", "unfused") in args
    assert not get_framework("megatron").violations(m, cluster, job, c)
    reasons = get_framework("torchtitan").violations(m, cluster, job, c)
    assert any("runs fused core attention, not unfused" in r for r in reasons), reasons


def test_cli_flag_plan_file_and_errors(run_cli, tmp_path):
    """--attention-impl on estimate and search: JSON reports it, unfused is slower, a plan file keeps
    it and re-estimates the same, torchtitan refuses it, a bad value exits 2 naming the choices."""
    import json

    import yaml

    args = ("estimate", "-m", "gpt-1.7b", "-c", "dgx-a100", "-n", "1", "-b", "64", "-s", "2048")
    args += ("--precision", "fp16", "--tp", "1", "--micro-batch-size", "4", "--json")
    fused = json.loads(run_cli(*args).stdout)
    unfused = json.loads(run_cli(*args, "--attention-impl", "unfused").stdout)
    assert fused["job"]["attention_impl"] == "fused" and unfused["job"]["attention_impl"] == "unfused"
    assert unfused["step_time_s"] > fused["step_time_s"]
    res = run_cli(*args, "--attention-impl", "flash")
    assert res.exit_code == 2 and "allowed values: fused, unfused, flash2" in res.stderr
    assert "Traceback" not in res.stderr

    search = ("search", "-m", "gpt-1.7b", "-c", "dgx-a100", "-n", "1", "-b", "64", "-s", "2048")
    search += ("--precision", "fp16", "--attention-impl", "unfused", "--quiet")
    plan = tmp_path / "plan.yaml"
    res = run_cli(*search, "--framework", "megatron", "--out", str(plan))
    assert res.exit_code == 0, res.stderr
    assert yaml.safe_load(plan.read_text())["job"]["attention_impl"] == "unfused"
    est = json.loads(run_cli("estimate", "--plan", str(plan), "--json").stdout)
    assert est["job"]["attention_impl"] == "unfused"
    res = run_cli(*search[:-5], "--attention-impl", "unfused", "--quiet", "--framework", "torchtitan")
    assert res.exit_code == 3 and "runs fused core attention, not unfused" in res.stderr


def test_fused_attention_below_ampere_is_priced_unfused():
    """Transformer Engine has no fused attention below compute capability 8.0: on a V100 or T4 a
    ``fused`` job keeps the score matrix as an ``unfused`` one does (so at 4,096 tokens a layout
    that would fit with flash attention does not); FlashAttention-2 there is refused, and AMD GPUs
    (no CUDA compute capability) keep their fused kernels."""
    from cost_models.attention import attention_impl_on
    from cost_models.estimate import estimate
    from planner.inputs.validation import require_precision

    gpu = lambda name: load_cluster(name, 1).groups[0].gpu  # noqa: E731
    fused = make_job(global_batch_size=64, seq_length=4096, precision="fp16")
    assert attention_impl_on(fused, gpu("dgx1-v100")) == "unfused"
    assert attention_impl_on(fused, gpu("dgx-a100")) == "fused"
    assert attention_impl_on(fused, gpu("mi300x-node")) == "fused"
    m, cluster = load_model("llama3-8b"), load_cluster("dgx1-v100", 4)
    c = ParallelConfig(tp=4, pp=2, dp=4)
    unfused = make_job(global_batch_size=64, seq_length=4096, precision="fp16", attention_impl="unfused")
    a, b = (estimate(m, cluster, j, resolve(m, cluster, j, c)) for j in (fused, unfused))
    assert a.peak_memory_bytes == b.peak_memory_bytes and a.step_time_s == b.step_time_s
    assert a.peak_memory_bytes > 32 * 2**30  # the score matrices of 16 layers, two micro-batches in flight
    flash2 = make_job(global_batch_size=64, seq_length=4096, precision="fp16", attention_impl="flash2")
    with pytest.raises(SpecError, match="v100-sxm2-32gb cannot run FlashAttention-2"):
        require_precision(cluster, flash2, "job.yaml")
    require_precision(
        load_cluster("dgx-a100", 1),
        make_job(global_batch_size=8, seq_length=2048, attention_impl="flash2"),
        "x",
    )


def test_without_attention_dropout_only_the_softmax_output_is_kept():
    """``attention_dropout`` 0: PyTorch's dropout returns its input, so neither the one-byte mask
    nor the dropped copy exists and neither pass runs: 2 bytes per score element kept instead of 5."""
    from dataclasses import replace

    from cost_models.unfused_attention import UNFUSED_KEPT_BYTES_NO_DROPOUT, unfused_kept_bytes

    m, with_dropout, gpu = _table("unfused")
    cluster = load_cluster("dgx-a100", 1)
    m0 = replace(m, attention_dropout=0.0)
    job = make_job(global_batch_size=64, seq_length=SEQ, precision="fp16", attention_impl="unfused")
    c = resolve(m0, cluster, job, ParallelConfig(micro_batch_size=4, optimizer_sharding="none"))
    without = layer_table(m0, job, c, cluster.groups[0])
    T = 4 * SEQ
    scores = T * SEQ * m.num_attention_heads
    assert (
        unfused_kept_bytes(m) == UNFUSED_KEPT_BYTES
        and unfused_kept_bytes(m0) == UNFUSED_KEPT_BYTES_NO_DROPOUT == 2
    )
    assert math.isclose(
        with_dropout.dense.activation_bytes - without.dense.activation_bytes, 3 * scores, rel_tol=1e-12
    )
    fwd, bwd, _ = unfused_core_attention(
        T, SEQ, m.num_attention_heads, m.kv_channels, gpu, "fp16", dropout=False
    )
    fwd_d, bwd_d, _ = unfused_core_attention(T, SEQ, m.num_attention_heads, m.kv_channels, gpu, "fp16")
    assert math.isclose(fwd_d - fwd, memory_bound_s(5 * scores, gpu), rel_tol=1e-9)
    assert math.isclose(bwd_d - bwd, memory_bound_s(5 * scores, gpu), rel_tol=1e-9)


def _mla_table(impl: str, dropout: float):
    from dataclasses import replace

    m = replace(load_model("deepseek-v3"), attention_dropout=dropout)
    cluster = load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=8, seq_length=4096, precision="bf16", attention_impl=impl)
    c = ParallelConfig(tp=8, sequence_parallel=True, micro_batch_size=1)
    return m, layer_table(m, job, c, cluster.groups[0])


def test_multi_latent_attention_honours_unfused_attention():
    """``--attention-backend unfused`` with MLA (as Megatron-LM's MoE CI test runs it) materialises
    the a/t heads' score matrices: kept for backward in place of the fused kernel's log-sum-exp, and
    priced at the unfused kernels' speed (planner once priced MLA as fused whatever the job said)."""
    # a dense layer of DeepSeek-V3 (its MoE layers are host-bound at tp 8 and micro-batch 1)
    m, fused = _mla_table("fused", 0.0)
    _, unfused = _mla_table("unfused", 0.0)
    heads, s = m.num_attention_heads / 8, 4096
    scores = s * s * heads
    lse = 4 * s * heads
    assert math.isclose(
        unfused.dense.activation_bytes - fused.dense.activation_bytes, 2 * scores - lse, rel_tol=1e-12
    )
    assert unfused.dense.forward_s > fused.dense.forward_s
    # selective recompute of core attention drops the scores with it
    assert math.isclose(
        unfused.dense.selective_dropped_bytes - fused.dense.selective_dropped_bytes,
        2 * scores - lse,
        rel_tol=1e-12,
    )
    _, with_dropout = _mla_table("unfused", 0.1)
    assert math.isclose(
        with_dropout.dense.activation_bytes - unfused.dense.activation_bytes, 3 * scores, rel_tol=1e-12
    )


def test_the_pre_softmax_scores_are_a_transient_of_the_running_layer():
    """While a layer's unfused attention runs, its 16-bit pre-softmax scores live beside the kept
    probabilities: 2 bytes per score element on top of what is kept, freed after the pass; without
    recompute a stage's transient is at least that, and the fused kernel has none."""
    from cost_models.estimate import estimate
    from cost_models.unfused_attention import UNFUSED_WORKING_BYTES

    m, unfused, _ = _table("unfused")
    _, fused, _ = _table("fused")
    scores = 4 * SEQ * SEQ * m.num_attention_heads
    assert UNFUSED_WORKING_BYTES == 2
    assert unfused.dense.working_bytes == 2 * scores and fused.dense.working_bytes == 0.0
    cluster = load_cluster("dgx-a100", 1)
    for impl in ("fused", "unfused"):
        job = make_job(global_batch_size=64, seq_length=SEQ, precision="fp16", attention_impl=impl)
        c = resolve(m, cluster, job, ParallelConfig(pp=2, micro_batch_size=4, optimizer_sharding="none"))
        first = estimate(m, cluster, job, c).stages[0].memory  # no loss transient on the first stage
        assert first.transient_bytes == (2 * scores if impl == "unfused" else 0.0)
