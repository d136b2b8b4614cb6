"""New releases predicted before they are calibrated (planner.calibration.releases)."""

from __future__ import annotations

import math

import pytest


def test_predecessor_is_the_newest_earlier_release_of_the_same_framework():
    from planner.calibration.releases import predecessor

    fitted = [
        "megatron-bridge-25.11",
        "megatron-bridge-26.04",
        "megatron-bridge-26.06",
        "torchtitan-2025",
        "megatron-lm-zero-bubble-2024",
    ]
    assert predecessor("megatron-bridge-26.06", fitted) == "megatron-bridge-26.04"
    assert predecessor("megatron-bridge-26.04", fitted) == "megatron-bridge-25.11"
    # never a later release, never another framework's (torchtitan 2025-06 is older than 26.06)
    assert predecessor("megatron-bridge-25.11", fitted) == ""
    assert predecessor("torchtitan-2025", fitted) == ""
    # only classes fitted on the family count: 26.04 missing falls back to 25.11
    assert predecessor("megatron-bridge-26.06", [fitted[0], fitted[2]]) == "megatron-bridge-25.11"


def _bridge_b200_set():
    """Three A100 and three H100 runs (the lineage) and three B200-family runs of each of the
    Megatron-Bridge 25.11, 26.04 and 26.06 classes."""
    from planner.calibration.cases import cases
    from planner.calibration.fitting import family, usable

    runs = usable(cases())
    a100 = [c for c in runs if family(c) == "a100" and c.source.startswith("Korthikanti")][:3]
    h100 = [c for c in runs if family(c) == "h100" and c.source.startswith("NVIDIA NeMo")][:3]
    b200 = []
    for cls in ("megatron-bridge-25.11", "megatron-bridge-26.04", "megatron-bridge-26.06"):
        b200 += [c for c in runs if family(c) == "b200" and c.software == cls][:3]
    assert len(b200) == 9
    return a100 + h100 + b200


def test_a_held_out_release_is_priced_with_the_release_before_it_refitted_without_it(monkeypatch):
    """26.06 held out: its runs are predicted with the 26.04 profile fitted (from the fold's base)
    on the remaining runs, exactly as fit_profile does; nothing of 26.06 reaches the fit. (The
    mechanism on a small set: three runs a class, so a profile here needs three.)"""
    import planner.calibration.fitting
    from planner.calibration.descent import predict
    from planner.calibration.fitting import family, fit_families, fit_profile
    from planner.calibration.folds import LOSO_STEPS
    from planner.calibration.releases import release_fold
    from planner.profiles.software import CLASSES

    monkeypatch.setattr(planner.calibration.fitting, "MIN_RUNS", 3)
    # every class counts as shipped here (the gate that decides which ship is tests/test_profile_gate.py's)
    monkeypatch.setattr(planner.calibration.fitting, "fitted_on", lambda fam: list(CLASSES))
    runs = _bridge_b200_set()
    notes, fold = release_fold("megatron-bridge-26.06", runs, passes=1)
    held = [c for c in runs if c.software == "megatron-bridge-26.06"]
    assert [r.case.run_id for r in fold.results] == [c.run_id for c in held]
    assert fold.predicted_with == {"b200": "megatron-bridge-26.04"}
    assert "b200/megatron-bridge-26.04 profile fitted on 3 runs" in notes
    rest = [c for c in runs if c.software != "megatron-bridge-26.06"]
    base = fit_families(rest, {"b200"}, 1, LOSO_STEPS)["b200"][0]
    prof = fit_profile([c for c in rest if c.software == "megatron-bridge-26.04"], base, 1, LOSO_STEPS)[0]
    for r in fold.results:
        assert family(r.case) == "b200"
        assert math.isclose(r.predicted, predict(r.case, prof).predicted)
    out = fold.to_json()
    assert out["count"] == 3 and out["released"] == "2026-06"
    signed = sorted(r.predicted / r.case.measured_tokens_per_s_per_gpu - 1 for r in fold.results)
    assert out["signed_median"] == pytest.approx(signed[1])
    assert out["median"] == pytest.approx(sorted(abs(s) for s in signed)[1])


def test_a_release_with_fewer_runs_than_a_profile_needs_is_priced_with_the_older_profile():
    """With the shipped threshold (planner.profiles.software.MIN_RUNS, five) the three-run 26.04 class of the
    small set gets no profile, so 26.06 is priced with 25.11's, the newest earlier release fitted
    on the family (the release-forward evidence that set the threshold: 26.04's four-run B200
    profile priced 26.06 at 13.6% median, 25.11's at 5.7%)."""
    from planner.calibration.fitting import profile_groups
    from planner.calibration.releases import release_fold
    from planner.profiles.software import MIN_RUNS

    assert MIN_RUNS == 5
    runs = _bridge_b200_set()
    b200 = [c for c in runs if c.software]
    assert set(profile_groups(b200)) == set()  # three runs a class: none reaches five
    more = b200 + _b200_runs("megatron-bridge-25.11")[3:5]
    assert set(profile_groups(more)) == {"megatron-bridge-25.11"}
    _, fold = release_fold("megatron-bridge-26.06", [c for c in runs if c not in b200] + more, passes=1)
    assert fold.predicted_with == {"b200": "megatron-bridge-25.11"}


def _b200_runs(cls: str):
    from planner.calibration.cases import cases
    from planner.calibration.fitting import family, usable

    return [c for c in usable(cases()) if family(c) == "b200" and c.software == cls]


def test_the_first_release_is_priced_with_the_base_fit():
    from planner.calibration.descent import predict
    from planner.calibration.fitting import fit_families
    from planner.calibration.folds import LOSO_STEPS
    from planner.calibration.releases import release_fold

    runs = _bridge_b200_set()
    _, fold = release_fold("megatron-bridge-25.11", runs, passes=1)
    assert fold.predicted_with == {"b200": ""}
    rest = [c for c in runs if c.software != "megatron-bridge-25.11"]
    base = fit_families(rest, {"b200"}, 1, LOSO_STEPS)["b200"][0]
    for r in fold.results:
        assert r.case.software == "megatron-bridge-25.11"
        assert math.isclose(r.predicted, predict(r.case, base).predicted)


def test_release_forward_runs_the_planned_frameworks_releases_oldest_first(monkeypatch):
    """The order follows the release dates; classes of frameworks no plan targets (the zero-bubble
    fork, BigScience) are not releases a plan could be priced with, and are skipped."""
    import planner.calibration.releases as rel

    seen = []
    monkeypatch.setattr(rel, "release_fold", lambda r, cases_, passes: (seen.append(r) or [], r))
    from planner.calibration.cases import cases

    got = rel.release_forward(cases())
    assert got == seen
    assert seen == [
        "torchtitan-2025",
        "megatron-bridge-25.11",
        "megatron-bridge-26.04",
        "megatron-bridge-26.06",
        "megatron-bridge-26.08",
    ]


@pytest.mark.parametrize(
    "script", ["validate_releases.py", "validate_published.py", "calibrate.py", "calibrate_holdout.py"]
)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "file not found"),
        ("runs: 3\n", "key 'runs': expected a list of runs"),
        ("runs:\n- id: r1\n  hardware: {gpu: H100}\n", r"runs\[0\] \(id 'r1'\): missing key 'parallel'"),
        ("runs: [\n", r"malformed YAML \(line 2, column 1\)"),
    ],
)
def test_validation_scripts_name_a_bad_runs_file_without_a_traceback(tmp_path, script, text, message):
    import re
    import subprocess
    import sys
    from pathlib import Path

    runs = tmp_path / "runs.yaml"
    if text is not None:
        runs.write_text(text)
    root = Path(__file__).resolve().parent.parent
    args = [sys.executable, str(root / "scripts" / script), "--runs", str(runs)]
    if script == "validate_published.py":
        args.append("--no-loso")
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stdout == ""
    # calibrate_holdout.py reads through planner calibrate's reader (planner.calibration.user.sources),
    # which checks the file with planner.calibration.cases.cases as the others do: one wording for all
    assert r.stderr.startswith(f"{script[:-3]}: {runs}: ") and re.search(message, r.stderr)
    assert "Traceback" not in r.stderr


def test_a_held_out_source_s_class_without_a_fold_profile_takes_its_predecessor_s():
    """Leave-one-source-out prices a held-out run whose release class the fold cannot fit as the
    shipped profiles do (planner.profiles.software.entry_source): with the newest earlier release of its
    framework fitted in the fold. The three 26.04 H100 runs moved to a source of their own: their
    fold fits 25.11 (six H100 runs) and predicts them with it, not with the base values."""
    from dataclasses import replace

    from planner.calibration.cases import cases
    from planner.calibration.descent import predict
    from planner.calibration.fitting import family, fit_families, fit_profile, usable
    from planner.calibration.folds import LOSO_STEPS, source_fold

    runs = usable(cases())
    small = [c for c in runs if family(c) == "a100" and c.source.startswith("Korthikanti")][:3]
    small += [c for c in runs if family(c) == "h100" and c.source.startswith("NVIDIA NeMo")][:3]
    older = [c for c in runs if family(c) == "h100" and c.software == "megatron-bridge-25.11"]
    held = [
        replace(c, source="elsewhere")
        for c in runs
        if family(c) == "h100" and c.software == "megatron-bridge-26.04"
    ]
    notes, results = source_fold(("elsewhere", small + older + held, 1))
    assert "h100/megatron-bridge-25.11 profile fitted on 6 runs" in notes
    base = fit_families(small + older, {"h100"}, 1, LOSO_STEPS)["h100"][0]
    prof = fit_profile(older, base, 1, LOSO_STEPS)[0]
    assert prof != base  # so the base values (what the fold used before) would price them otherwise
    assert [r.case.run_id for r in results] == [c.run_id for c in held]
    for r in results:
        assert math.isclose(r.predicted, predict(r.case, prof).predicted)
        assert not math.isclose(r.predicted, predict(r.case, base).predicted)
