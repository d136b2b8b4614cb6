"""The calibration target as a test that can fail (STYLE lesson 11)."""

import pytest

from planner.calibration import cases, excluded_reason, predict_all, summary


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

    from planner.calibrate.ranking import group_ranking

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
            assert c.run_id.startswith(("narayanan2021_t2_zero3_", "ultrascale_h100_"))


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
    # (planner.fitting.gemm_gpu_times)
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
    """scripts/compare_grouped_gemm.py prices every stored H100 grouped-GEMM row both ways; one call over
    all experts' rows tracks the kernel (median within 10%), per-expert pricing does not."""
    import importlib.util
    import json
    import statistics
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "compare_grouped_gemm", root / "scripts" / "compare_grouped_gemm.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = json.loads(
        (root / "hardware_profiles" / "measurements" / "h100-sxm5-80gb-grouped-gemm.json").read_text()
    )
    rows = mod.compare(data, "h100-sxm5-80gb")
    assert len(rows) == len(data["rows"]) == 36
    grouped = [r for r in rows if r["local_experts"] > 1]
    assert abs(statistics.median(r["one_call_ratio"] for r in grouped) - 1.0) < 0.1
    # per-expert pricing charges every expert's call the fitted curve's fixed cost: about 2x off
    # (1.9x with the 2026-11-25 H100 fit's F_half of 12 GFLOP)
    assert statistics.median(r["per_expert_ratio"] for r in grouped) > 1.5


def test_median_over_sources_weighs_each_source_once():
    """The pooled median follows a source of many runs; the median over the sources' medians does
    not (vTrain's 108 runs are a third of the calibration set)."""
    import math
    from types import SimpleNamespace

    from planner.calibration import median_over_sources

    def run(source, error):
        return SimpleNamespace(case=SimpleNamespace(source=source), error=error)

    results = [run("big", 0.01)] * 9 + [run("a", 0.10), run("a", 0.20), run("b", 0.30)]
    assert summary(results)["median"] == 0.01
    assert median_over_sources(results) == pytest.approx(0.15)
    assert math.isnan(median_over_sources([]))
