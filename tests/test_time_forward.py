"""Time-forward validation (planner.calibration.time_forward): every run is dated, a fold fits only on
what was published before its cut and predicts exactly what came after, a family with no earlier
runs is priced from its parent's fit, and a release class with the newest profile fitted before
the cut."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.calibration.cases import cases
from planner.calibration.fitting import family, usable
from planner.calibration.time_forward import CUTS, SOURCE_DATES, published, time_fold
from planner.inputs.errors import UsageError
from planner.profiles.software import CLASSES


@pytest.fixture(scope="module")
def usable_cases():
    return usable(cases())


def test_every_usable_run_has_a_publication_date(usable_cases):
    """A source added without a date would make the time-forward script refuse the whole set."""
    dates = {published(c) for c in usable_cases}
    assert all(len(d) == 7 and d[4] == "-" for d in dates)
    for cut in CUTS:  # each reported cut has runs on both sides
        assert any(d < cut for d in dates) and any(d >= cut for d in dates)


def test_a_run_is_dated_by_the_later_of_its_release_and_its_source(usable_cases):
    bridge = next(c for c in usable_cases if c.software == "megatron-bridge-26.04")
    assert published(bridge) == max(CLASSES[bridge.software][1], SOURCE_DATES[bridge.source][0])
    plain = next(c for c in usable_cases if not c.software and c.source == "Korthikanti et al. 2022")
    assert published(plain) == "2022-05"
    with pytest.raises(UsageError, match="no publication date"):
        published(replace(plain, source="a page nobody dated"))


def test_a_fold_fits_before_its_cut_and_predicts_the_rest(usable_cases):
    """A small set (two H100 sources before the cut, a Megatron-Bridge release and the B200 runs
    after it) keeps the fold quick: what it fits on and what it predicts follow the dates, B200
    has no earlier run so its fit is the H100 one carried over, and the release is priced with the
    base values (no profile of it was fitted before the cut)."""
    picked = [
        c
        for c in usable_cases
        if (c.source.startswith("MLPerf Training v3.1") and family(c) == "h100")
        or (c.source.startswith("NVIDIA NeMo docs") and family(c) == "h100")
        or c.run_id.startswith(("mbridge2511_h100_fp8cs_llama3", "mbridge2511_b200_fp8cs_llama3"))
    ]
    cut = "2025-01"
    notes, fold = time_fold(cut, picked, passes=1, steps=(0.85, 1.15))
    before = [c for c in picked if published(c) < cut]
    after = {c.run_id for c in picked if published(c) >= cut}
    assert fold.cut == cut and fold.fitted_on == len(before) > 0
    assert {r.case.run_id for r in fold.results} == after and after
    assert "b200 fitted on 0 runs, prior from h100" in " ".join(notes)
    assert fold.predicted_with[("h100", "megatron-bridge-25.11")] == ""
    assert all(r.predicted > 0 for r in fold.results)
    again = time_fold(cut, picked, passes=1, steps=(0.85, 1.15))[1]
    assert [r.predicted for r in again.results] == [r.predicted for r in fold.results]  # deterministic


def test_a_cut_with_nothing_on_one_side_is_refused(usable_cases):
    with pytest.raises(UsageError, match="both need runs"):
        time_fold("2000-01", usable_cases[:5])
