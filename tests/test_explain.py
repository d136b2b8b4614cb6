"""``planner search --explain``: each alternative's net difference and the terms that make it."""

from __future__ import annotations

import pytest

from planner.plans.problem import load_problem, run_search
from planner.search.chain import EXPLAIN_TERMS, explain


@pytest.fixture(scope="module")
def result():
    problem = load_problem("llama3-8b", "dgx-h100", 2, 64, 4096)
    return run_search(problem, top_k=3)


def test_explain_rows_sum_to_the_difference_they_explain(result):
    rows = explain(result)
    best = result.plans[0].estimate.step_time_s
    simulated = [r for r in rows if r.get("difference_s") is not None]
    assert simulated, rows
    for r in simulated:
        assert r["difference_s"] == pytest.approx(r["step_time_s"] - best, rel=1e-9, abs=1e-12)
        parts = sum(t["delta_s"] for t in r["terms"]) + r["other_terms_s"]
        assert parts == pytest.approx(r["difference_s"], rel=1e-9, abs=1e-12)
        assert len(r["terms"]) <= EXPLAIN_TERMS
        # the named terms are the largest changes, largest first
        sizes = [abs(t["delta_s"]) for t in r["terms"]]
        assert sizes == sorted(sizes, reverse=True)
        assert r["dimension"] in r["changes"]
        if r["slower_fraction"] > 1e-9:
            assert r["reason"].startswith(f"{r['difference_s']:+.3f} s net: ")
        elif r["slower_fraction"] < -1e-9:  # plan 1 leads a faster, tied plan as more robust
            assert "statistically tied with plan 1" in r["reason"]


def test_explain_never_repeats_one_alternative_under_two_dimensions(result):
    rows = [r for r in explain(result) if r.get("difference_s") is not None]
    seen = [(r["step_time_s"], tuple(r["changes"]), r["value"]) for r in rows]
    keys = [(r["step_time_s"], tuple(r["changes"])) for r in rows]
    assert len(set(keys)) == len(keys), seen
