"""Which release profiles ship (planner.calibration.profile_gate): cross-validated against what
prices their class without them."""

from __future__ import annotations

import statistics

import pytest

from planner.calibration.cases import cases
from planner.calibration.descent import abs_log_error
from planner.calibration.fitting import family, fit_families, profile_groups, usable
from planner.calibration.folds import LOSO_STEPS
from planner.calibration.profile_gate import CROSS_FOLDS, cross_folds, cross_validated, decide, release_order
from planner.profiles.software import MIN_RUNS, fitted_on, load_profiles


def _family_runs(fam: str):
    return [c for c in usable(cases()) if family(c) == fam]


def test_folds_deal_the_runs_by_id_and_never_exceed_the_runs():
    runs = _family_runs("b200")
    folds = cross_folds(runs)
    assert CROSS_FOLDS == 5 and len(folds) == 5
    ids = sorted(c.run_id for c in runs)
    assert [c.run_id for c in folds[0]] == ids[0::5] and [c.run_id for c in folds[4]] == ids[4::5]
    assert sorted(c.run_id for f in folds for c in f) == ids
    assert [len(f) for f in cross_folds(runs[:3])] == [1, 1, 1]  # fewer runs: leave one out
    assert cross_folds(list(reversed(runs))) == folds  # the order given does not matter


def test_release_order_is_by_release_month():
    assert release_order(["megatron-bridge-26.06", "megatron-bridge-25.11", "megatron-bridge-26.04"]) == [
        "megatron-bridge-25.11",
        "megatron-bridge-26.04",
        "megatron-bridge-26.06",
    ]


def test_folds_fit_only_the_profiles_that_ship():
    """Leave-one-source-out, time-forward and release-forward folds refit a class's profile only
    where one ships for the family, so they measure what planner ships; calibrate.py's candidates
    are every class with MIN_RUNS runs."""
    b200 = _family_runs("b200")
    candidates = profile_groups(b200, candidates=True)
    shipped = set(fitted_on("b200"))
    assert all(len(runs) >= MIN_RUNS for runs in candidates.values())
    assert set(profile_groups(b200)) == set(candidates) & shipped
    for name, doc in load_profiles().items():
        for fam in doc.get("families") or {}:
            assert name in profile_groups(_family_runs(fam), candidates=True), (name, fam)


def test_a_profile_ships_only_when_it_predicts_held_out_runs_better_than_its_fallback(monkeypatch):
    """On a small set (three runs a class, so a candidate needs three): each decision's held-out
    error is the cross-validated one, its fallback the predecessor among the classes kept before
    it (else the base), and it ships exactly when it beats that fallback."""
    import planner.calibration.fitting as fitting

    monkeypatch.setattr(fitting, "MIN_RUNS", 3)
    runs = _family_runs("b200")
    group = []
    for cls in ("megatron-bridge-25.11", "megatron-bridge-26.04", "megatron-bridge-26.06"):
        group += sorted((c for c in runs if c.software == cls), key=lambda c: c.run_id)[:3]
    base = fit_families(group, {"b200"}, 1, LOSO_STEPS)["b200"][0]
    asked = []

    def base_for(runs):  # the base that never saw these runs (here: the same base, recorded)
        asked.append(runs)
        return base

    decisions = decide(group, base, 1, LOSO_STEPS, base_for=base_for)
    # the base is asked for exactly when a class has no kept predecessor, with that class's runs
    assert asked == [d.runs for d in decisions if not d.fallback]
    assert [d.cls for d in decisions] == [
        "megatron-bridge-25.11",
        "megatron-bridge-26.04",
        "megatron-bridge-26.06",
    ]
    kept = {}
    for d in decisions:
        assert len(d.runs) == 3
        assert d.held_out == pytest.approx(cross_validated(list(d.runs), _start(base, d.cls), 1, LOSO_STEPS))
        assert d.fallback == max(kept, default="")  # the newest kept release before it
        fallback_values = kept[d.fallback] if d.fallback else base
        assert d.fallback_error == pytest.approx(
            statistics.median(abs_log_error(c, fallback_values) for c in d.runs)
        )
        assert d.ships == (d.held_out < d.fallback_error)
        assert ("ships" if d.ships else "not shipped") in d.summary()
        if d.ships:
            kept[d.cls] = d.values


def _start(base, cls):
    from planner.profiles.software import profile_start

    return profile_start(base, cls)
