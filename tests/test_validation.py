"""The calibration target as a test that can fail (STYLE lesson 11)."""

from planner.calibration import cases, excluded_reason, predict_all, summary


def test_published_runs_within_targets():
    all_cases = cases()
    usable = [c for c in all_cases if not c.skip_reason]
    assert len(usable) >= 75, [c.skip_reason for c in all_cases if c.skip_reason]
    results = [r for r in predict_all(all_cases) if not excluded_reason(r.case.run_id)]
    stats = summary(results)
    assert stats["median"] <= 0.12, stats
    assert stats["p90"] <= 0.30, stats


def test_every_skip_and_exclusion_has_a_reason():
    for c in cases():
        if c.skip_reason:
            assert len(c.skip_reason) > 10
        if excluded_reason(c.run_id):
            assert c.run_id.startswith("narayanan2021_t2_zero3_")


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
    assert r["gemm"]["count"] == len(data["gemm"]) == 96
    assert len(r["attention"]["rows"]) == len(data["attention"])
    assert 0.3 < r["gemm"]["kernel_fit"]["e_max"] < 0.95 and r["gemm"]["kernel_fit"]["f_half_flop"] > 0
    assert all(0 < m["bandwidth_fraction"] < 1.2 for m in r["memory"]["rows"])
