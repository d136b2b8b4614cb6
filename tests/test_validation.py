"""The calibration target as a test that can fail (STYLE lesson 11)."""

import pytest

from planner.calibration.cases import cases, excluded_reason, predict_all, summary


def test_published_runs_within_targets():
    """In-sample targets over the 306 usable runs (docs/calibration.md quotes the held-out figures):
    all runs median <= 12% and p90 <= 27%; dense runs median <= 10% and p90 <= 23%; MoE runs (one
    source family, Megatron-Bridge) median <= 25%. DLPerf's V100 runs count since the v100 family
    has a fit (2026-11-24; before, they priced uncalibrated vendor-typical values and were left out)."""
    all_cases = cases()
    usable = [c for c in all_cases if not c.skip_reason]
    assert len(usable) >= 306, [c.skip_reason for c in all_cases if c.skip_reason]
    results = [r for r in predict_all(all_cases) if not excluded_reason(r.case.run_id)]
    assert sum(r.case.gpu.startswith("v100") for r in results) == 8
    stats = summary(results)
    assert stats["median"] <= 0.12, stats
    assert stats["p90"] <= 0.27, stats
    dense = summary([r for r in results if not r.case.model.is_moe])
    assert dense["median"] <= 0.10 and dense["p90"] <= 0.23, dense
    moe = summary([r for r in results if r.case.model.is_moe])
    assert moe["count"] >= 20 and moe["median"] <= 0.25, moe


def test_layout_groups_are_ranked():
    """The calibration set's layout groups (runs of one model, cluster size and global batch that differ
    only in layout) reach group_ranking: at least 13 groups of >= 4 runs (issue 12 asks for 10), each with
    a Spearman correlation in [-1, 1] and the measured throughput lost by following the prediction >= 0;
    a group's runs share model, GPU count and global batch."""
    from collections import defaultdict

    from planner.calibration.ranking import group_ranking

    all_cases = cases()
    members = defaultdict(list)
    for c in all_cases:
        if c.group and not c.skip_reason:
            members[c.group].append(c)
    for name, group in members.items():
        shapes = {
            (
                c.model.num_layers,
                c.model.hidden_size,
                c.cluster.num_gpus,
                c.job.global_batch_size,
                c.job.seq_length,
            )
            for c in group
        }
        assert len(shapes) == 1, (name, shapes)
    rows = group_ranking([r for r in predict_all(all_cases) if not excluded_reason(r.case.run_id)])
    assert len([r for r in rows if r["runs"] >= 4]) >= 13, [r["group"] for r in rows]
    counted = {g: [c for c in m if not excluded_reason(c.run_id)] for g, m in members.items()}
    assert {r["group"] for r in rows} == {g for g, m in counted.items() if len(m) >= 4}
    for r in rows:
        assert -1.0 <= r["spearman"] <= 1.0 and r["loss_following_prediction"] >= 0.0, r
    # Ranking floor (in-sample; docs/calibration.md, Ranking): 0.80 and 6 of 10 with GEMM tile/wave
    # quantization and the BigScience software profile, 0.36 and 3 of 10 before.
    import statistics

    assert statistics.median(r["spearman"] for r in rows) >= 0.6, rows
    assert sum(r["top1"] for r in rows) >= 5, rows


def test_every_skip_and_exclusion_has_a_reason():
    for c in cases():
        if c.skip_reason:
            assert len(c.skip_reason) > 10
        if excluded_reason(c.run_id):
            assert c.run_id.startswith(
                ("narayanan2021_t2_zero3_", "ultrascale_h100_", "hagemann2023_a100_", "megatronlm_ci_moe_")
            )


def test_hagemann_sweep_is_ranked_apart_and_priced_as_its_kernels_ran():
    """Hagemann et al. 2023's released sweep (207 runs, 10 layout groups on 32-256 A100s): every run is
    predicted, none enters the fit, and its groups are ranked on the informational line. Its rows are
    priced with FlashAttention-2, the data-parallel all-reduce after the last micro-batch, and an eager
    RMSNorm exactly where the sheet's kernel is 'flash_attention2' without the RMS kernel."""
    from planner.calibration.cases import ranked
    from planner.calibration.fitting import usable
    from planner.calibration.ranking import group_ranking

    all_cases = cases()
    runs = [c for c in all_cases if c.run_id.startswith("hagemann2023_a100_")]
    assert len(runs) == 207 and not [c.run_id for c in runs if c.skip_reason]
    assert all(excluded_reason(c.run_id) and ranked(c.run_id) for c in runs)
    assert not [c for c in usable(all_cases) if c.run_id.startswith("hagemann2023_a100_")]
    for c in runs:
        assert c.job.attention_impl == "flash2" and not c.job.overlap_grad_reduce, c.run_id
        assert c.job.eager_ops == (() if "_sp" in c.run_id else ("norm",)), c.run_id
        assert (
            c.config.optimizer_sharding == "distributed"
            and c.job.global_batch_size * c.job.seq_length == 2**22
        )
    rows = group_ranking(predict_all(runs))
    assert len(rows) == 10 and all(r["runs"] >= 4 for r in rows)
    # two trials of one layout (30B, 64 GPUs, tp 4 pp 2 mbs 4 with sequence parallelism) agree to 0.8%
    pair = sorted(
        c.measured_tokens_per_s_per_gpu
        for c in runs
        if "llama30b_s2048_64gpu_tp4_pp2_mbs4_nockpt_sp1_" in c.run_id
    )
    assert len(pair) == 2 and pair[1] / pair[0] < 1.01


def test_kernel_measurements_compare_with_the_cost_model():
    """scripts/compare_kernels.py reads the stored H100 kernel measurements and reports every family."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("compare_kernels", root / "scripts" / "compare_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = json.loads(
        (root / "hardware_profiles" / "measurements" / "h100-sxm5-80gb-kernels.json").read_text()
    )
    r = mod.compare(data, "h100-sxm5-80gb")
    # 96 timed; the 6 that the single-call timing's dispatch latency dominates are left out
    # (planner.calibration.kernel_curves.gemm_gpu_times)
    assert len(data["gemm"]) == 96 and r["gemm"]["count"] == 90
    assert len(r["attention"]["rows"]) == len(data["attention"])
    # the file times SDPA's FLASH_ATTENTION backend (FlashAttention-2): the model prices it as such
    # on Hopper, at FLASH2_SPEED of the fused kernel, backward 2.5 forwards at the backward's speed
    a = r["attention"]
    assert a["flash2_efficiency"] == pytest.approx(a["calibrated_efficiency"] * 329.483 / 631.338)
    assert a["model_backward_over_forward"] == pytest.approx(2.5 * (329.483 / 631.338) / (318 / 518))
    assert 0.3 < r["gemm"]["kernel_fit"]["e_max"] < 0.95 and r["gemm"]["kernel_fit"]["f_half_flop"] > 0
    assert all(0 < m["bandwidth_fraction"] < 1.2 for m in r["memory"]["rows"])


def test_grouped_gemm_measurements_compare_with_the_cost_model():
    """scripts/compare_grouped_gemm.py prices every stored grouped-GEMM row and pass: one call over all
    experts' rows with the weight-traffic floor tracks torch._grouped_mm and Transformer Engine's
    per-expert path on an H100 and an H200; FLOPs alone miss the few-token rows; per-expert pricing
    does not track at all."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "compare_grouped_gemm", root / "scripts" / "compare_grouped_gemm.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for gpu in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        data = json.loads(
            (root / "hardware_profiles" / "measurements" / f"{gpu}-grouped-gemm.json").read_text()
        )
        assert data["timed"] == "cuda_graph"
        rows = mod.compare(data, gpu)
        assert len(rows) == 3 * len(data["rows"]) == 3 * 90
        s = mod.summarize(rows)["overall"]
        # the dense GEMM curve is the end-to-end fit's, which moves with the published runs: the
        # median ratio was 0.985 / 0.957 (H100 / H200) and is 0.968 / 0.947 after the 2026-11-27
        # refit, 0.967 / 0.937 after the 2026-12-02 one (the size curve on the issued tile work)
        # (docs/calibration.md, "MoE grouped GEMMs in three passes")
        assert abs(s["roofline"]["median_ratio"] - 1.0) < 0.07
        assert s["roofline"]["p90_abs_error"] < 0.25 < s["one_call"]["p90_abs_error"]
        # per-expert pricing charges every expert's call the fitted curve's fixed cost: 1.5-2x off
        # (1.47x on the H100 since the fixed cost is paid once per call, not over the quantization)
        assert s["per_expert"]["median_ratio"] > 1.4
        bands = {(b["pass"], b["tokens_per_expert"][0]): b for b in mod.summarize(rows)["bands"]}
        assert bands[("forward", 0)]["one_call_median_ratio"] < 0.8  # 16-64 tokens: streaming weights
        assert 0.95 < bands[("forward", 0)]["roofline_median_ratio"] < 1.2
    # Transformer Engine's default path (one cuBLAS GEMM per expert on 4 streams), H100
    te = mod.summarize(mod.compare(json.loads(mod.DEFAULT.read_text()), "h100-sxm5-80gb"))["overall"]
    # p90 0.186 with the fit before 2026-11-27, 0.264 after it, 0.273 after the first 2026-12-02
    # refit, 0.287 after the second (the same curve as above: the H100 half-efficiency size 9.34 ->
    # 8.41 -> 8.47 GFLOP)
    assert abs(te["roofline_te"]["median_ratio"] - 1.0) < 0.05 and te["roofline_te"]["p90_abs_error"] < 0.29
    # its FP8 speed-up grows with the tokens per expert, up to about the fitted one
    fp8 = mod.fp8_speedups(json.loads(mod.DEFAULT.read_text()), "h100-sxm5-80gb")
    medians = [b["median"] for b in fp8["bands"]]
    assert len(fp8["rows"]) == 30 and medians == sorted(medians)
    assert medians[0] < 1.5 and abs(medians[-1] - fp8["charged"]) < 0.15
    # FP32-accumulating weight gradients at few tokens per expert: their traffic at the same rate
    acc = {
        b["tokens_per_expert"][0]: b
        for b in mod.accumulate_ratios(json.loads(mod.DEFAULT.read_text()), "h100-sxm5-80gb")
    }
    assert 0.95 < acc[0]["median"] < 1.05 and 0.95 < acc[65]["median"] < 1.05
    assert acc[1025]["median"] > 1.3  # thousands of tokens: FLOP-bound


def test_compare_grouped_gemm_refuses_bad_input(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "compare_grouped_gemm.py"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    for args in ([str(bad)], ["--gpu", "no-such-gpu"], [str(tmp_path / "missing.json")]):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        assert (
            r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("compare_grouped_gemm:")
        )


def test_median_over_sources_weighs_each_source_once():
    """The pooled median follows a source of many runs; the median over the sources' medians does
    not (vTrain's 108 runs are a third of the calibration set)."""
    import math
    from types import SimpleNamespace

    from planner.calibration.cases import median_over_sources

    def run(source, error):
        return SimpleNamespace(case=SimpleNamespace(source=source), error=error)

    results = [run("big", 0.01)] * 9 + [run("a", 0.10), run("a", 0.20), run("b", 0.30)]
    assert summary(results)["median"] == 0.01
    assert median_over_sources(results) == pytest.approx(0.15)
    assert math.isnan(median_over_sources([]))


def test_korthikanti_selective_runs_fit_as_they_ran():
    """Korthikanti et al. 2022's selective-recompute runs ran on 80 GB A100s; planner once kept the
    unfused score matrix under selective recompute and put them at 90-119 GiB (does not fit).
    Every one of the paper's runs is now predicted to fit."""
    from cost_models.estimate import estimate

    runs = [c for c in cases() if c.run_id.startswith("korthikanti2022") and not c.skip_reason]
    selective = [c for c in runs if c.config.recompute == "selective"]
    assert len(selective) >= 6 and all(c.job.attention_impl == "unfused" for c in selective)
    for c in runs:
        est = estimate(c.model, c.cluster, c.job, c.config)
        assert est.fits, (c.run_id, est.peak_memory_bytes / 2**30)
