"""Statistical ties (planner.search.ties): which plans are tied with the fastest, and the order of
robustness they are listed in."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

from cost_models.parallel import ParallelConfig
from planner.search.ties import COMFORTABLE_HEADROOM_FRACTION, order_ties, special_features

GIB = 2**30


def _plan(name, t, free_gib, **config):
    memory = NS(headroom_bytes=free_gib * GIB, capacity_bytes=80 * GIB)
    est = NS(step_time_s=t, worst_stage=NS(memory=memory), name=name)
    return NS(config=ParallelConfig(**config), estimate=est)


def test_special_features_name_what_departs_from_the_everyday_path():
    assert special_features(ParallelConfig(tp=4, pp=2, vpp=2, schedule="interleaved")) == ()
    c = ParallelConfig(
        pp=2, offload_layers=2, layers_per_stage=(15, 17), schedule="zb-h1", optimizer_instances=2
    )
    assert special_features(c) == (
        "activation offload",
        "uneven layer split",
        "zb-h1 schedule",
        "partial distributed optimizer",
    )
    assert "FSDP" in special_features(ParallelConfig(optimizer_sharding="full"))


def test_only_plans_within_the_gap_are_tied_and_the_robust_one_leads():
    a = _plan("a", 10.0, 2, tp=4, offload_layers=1)  # fastest, but offloads and is tight on memory
    b = _plan("b", 10.3, 12, tp=8)  # 3% slower, plain, comfortable
    c = _plan("c", 10.4, 3, tp=2)  # 4% slower, plain, tight
    d = _plan("d", 12.0, 30, tp=1)  # 20% slower: not tied
    ordered, ties = order_ties([a, b, c, d], math.log(1.05))
    assert ties.count == 3
    assert [p.estimate.name for p in ordered] == ["b", "c", "a", "d"]
    assert abs(ties.gap_fraction - 0.05) < 1e-12
    assert "within 5.0% of the fastest" in ties.as_dict()["why"]


def test_comfortable_headroom_counts_alike_and_the_search_order_breaks_the_rest():
    a = _plan("a", 10.0, 70, tp=4)
    b = _plan("b", 10.1, 9, tp=8)  # above 10% of 80 GiB as well: equal on memory, a stays first
    ordered, _ = order_ties([a, b], math.log(1.05))
    assert [p.estimate.name for p in ordered] == ["a", "b"]
    assert COMFORTABLE_HEADROOM_FRACTION * 80 < 9


def test_no_tie_leaves_the_ranking_alone():
    a, b = _plan("a", 10.0, 1, tp=4, offload_layers=1), _plan("b", 11.0, 40, tp=8)
    ordered, ties = order_ties([a, b], math.log(1.05))
    assert [p.estimate.name for p in ordered] == ["a", "b"] and ties.count == 1
    assert order_ties([], 0.05) == ([], None)
