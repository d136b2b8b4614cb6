"""The ceiling measurement noise puts on ranking layouts (planner.calibration.ranking.noise_ceiling):
what exact throughputs score against re-measurements, per layout group."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from planner.calibration.ranking import MEASUREMENT_NOISE, group_ranking, noise_ceiling


def _r(group, predicted, measured):
    return SimpleNamespace(
        predicted=predicted, case=SimpleNamespace(group=group, measured_tokens_per_s_per_gpu=measured)
    )


def test_the_noise_is_the_repeated_bigscience_measurement():
    # 110.48 and 113.54 s per iteration for one configuration on one day; two draws differ by sqrt(2) sigma
    assert MEASUREMENT_NOISE == pytest.approx(math.log(113.54 / 110.48) / math.sqrt(2), abs=5e-4)


def test_layouts_far_apart_rank_perfectly():
    rho, first = noise_ceiling([100.0, 200.0, 400.0, 800.0])
    assert rho == pytest.approx(1.0) and first == 1.0


def test_layouts_within_the_noise_do_not():
    close = noise_ceiling([100.0, 101.0, 102.0, 103.0])
    apart = noise_ceiling([100.0, 110.0, 120.0, 130.0])
    assert close[0] < apart[0] < 1.0
    assert close[1] < apart[1] <= 1.0
    # a tie for best is a coin flip on re-measurement
    assert noise_ceiling([63.0, 63.0, 59.3, 57.1])[1] == pytest.approx(0.5, abs=0.03)


def test_more_noise_lowers_the_ceiling_and_the_draws_are_fixed():
    m = [98.9, 97.8, 97.6, 97.1, 95.7, 93.3]
    assert noise_ceiling(m, sigma=0.04)[0] < noise_ceiling(m, sigma=0.01)[0]
    assert noise_ceiling(m) == noise_ceiling(m)  # same seed, same figures on every run


def test_group_rows_carry_their_ceiling():
    runs = [_r("g", p, m) for p, m in ((4.0, 90.0), (3.0, 100.0), (2.0, 80.0), (1.0, 70.0))]
    (row,) = group_ranking(runs)
    assert (row["ceiling_spearman"], row["ceiling_top1"]) == noise_ceiling([90.0, 100.0, 80.0, 70.0])
    assert row["ceiling_spearman"] > 0.9 and row["ceiling_top1"] > 0.9
