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
