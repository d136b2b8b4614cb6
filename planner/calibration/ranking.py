"""Ranking of layouts on the calibration set's layout groups: what a search lives on.

* :func:`group_ranking`: for each layout group (runs of one model, cluster and batch that differ
  only in layout), the Spearman correlation of predicted vs measured throughput, whether the
  measured-best layout is predicted best, the measured throughput lost by following the
  prediction, and the same two figures for a perfect prediction read against measurements as
  noisy as published ones are (:func:`noise_ceiling`).
* :func:`noise_ceiling`: a group whose layouts differ by less than the measurements' own
  run-to-run spread cannot be ranked reliably by any model. The ceiling says, per group, what the
  exact throughputs would score against measurements carrying :data:`MEASUREMENT_NOISE`.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from planner.calibration.cases import Result

MEASUREMENT_NOISE = 0.019
"""Relative run-to-run spread (one standard deviation, log scale) of a published throughput. The one
configuration of the calibration sources measured twice on one day: BigScience's 176B prequel,
``dp 8, tp 4, pp 12, mbs 2, gbs 2048``, 110.48 and 113.54 s per iteration on 2022-02-25
(bigscience-workshop/bigscience ``train/tr11-176B-ml/chronicles-prequel.md``, "GBS Variations", the
table after "Tweaking TP for the first time"); two draws of the same noise differ by sqrt(2)
sigma, so sigma = ln(113.54 / 110.48) / sqrt(2) = 1.9%. If anything this is low: the document's
author takes "the snapshot of a single iteration (always 2nd) [so] the data isn't exact and can
fluctuate a bit" ("Choosing the fastest 3D Topology"), and notes a hardware change that moved
every figure by 1-5% in one day ("GBS Variations"). The same document lists one more identical row
pair, not in the calibration set: "Max possible TFLOPs check" (02-21), 1 node, 6 layers of NHIDDEN
14336, tp 8, mbs 2, at 130.43 and 119.19 s per iteration (9%; nothing said changed in between). Read
as noise too, the pooled spread of the two pairs is 4.7%, under which exact throughputs would rank
the 10 groups at a median Spearman of 0.79 with the measured best first in 6.7 (docs/calibration.md,
"How far ranking can go"). vTrain's measurements (VIA-Research/vTrain ``data/ground_truth_multi.csv``)
list one layout twice, GPT 175B tp 4 pp 32 dp 4 micro-batch 2 at 53,909.6 and 53,937.9 ms (0.05%);
whether that is a repeat or one measurement written twice is not stated, so it does not enter
the constant either."""
CEILING_DRAWS = 4000
"""Noisy measurement draws per group in :func:`noise_ceiling` (standard error of the mean Spearman
under 0.005)."""
CEILING_SEED = 0
"""Seed of the draws: the ceiling is the same on every run."""


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties); nan for fewer than 2 points."""
    if len(xs) < 2:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else float("nan")


def ranks(v: list[float]) -> list[float]:
    """0-based ranks of ``v``, tied values sharing their average rank."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def noise_ceiling(
    measured: list[float],
    sigma: float = MEASUREMENT_NOISE,
    draws: int = CEILING_DRAWS,
    seed: int = CEILING_SEED,
) -> tuple[float, float]:
    """(expected Spearman, probability the measured best is ranked first) of a prediction equal to
    ``measured``, scored as :func:`group_ranking` scores one, against re-measurements
    ``measured x exp(sigma Z)`` (Z standard normal, independent per run). Reading the published
    values as the true ones slightly overstates the spread, so the ceiling is if anything high."""
    truth = np.asarray(measured, dtype=float)
    n = len(truth)
    if n < 2:
        return float("nan"), float("nan")
    noisy = truth * np.exp(sigma * np.random.default_rng(seed).standard_normal((draws, n)))
    rank_truth = np.asarray(ranks(list(truth)))
    rank_noisy = np.argsort(np.argsort(noisy, axis=1), axis=1).astype(float)  # no ties (continuous)
    dt = rank_truth - rank_truth.mean()
    dn = rank_noisy - rank_noisy.mean(axis=1, keepdims=True)
    rho = (dn @ dt) / (np.sqrt((dn**2).sum(axis=1)) * np.sqrt((dt**2).sum()))
    picked = max(range(n), key=lambda i: (truth[i], -i))  # group_ranking's tie-break
    first = noisy[:, picked] >= noisy.max(axis=1)
    return float(rho.mean()), float(first.mean())


def group_ranking(results: list[Result], min_size: int = 4) -> list[dict]:
    """Per layout group with at least ``min_size`` runs: size, Spearman, measured-best ranked first,
    measured loss of following the prediction, predicted and measured spread (best / worst), and
    the :func:`noise_ceiling` of the group's measurements (``ceiling_spearman``, ``ceiling_top1``)."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.case.group:
            groups[r.case.group].append(r)
    rows = []
    for name in sorted(groups):
        rs = groups[name]
        if len(rs) < min_size:
            continue
        pred = [r.predicted for r in rs]
        meas = [r.case.measured_tokens_per_s_per_gpu for r in rs]
        picked = max(range(len(rs)), key=lambda i: (pred[i], -i))
        best = max(range(len(rs)), key=lambda i: (meas[i], -i))
        ceiling_rho, ceiling_top1 = noise_ceiling(meas)
        rows.append(
            {
                "group": name,
                "runs": len(rs),
                "spearman": spearman(pred, meas),
                "top1": meas[picked] >= meas[best],
                "loss_following_prediction": 1 - meas[picked] / meas[best],
                "predicted_spread": max(pred) / min(pred),
                "measured_spread": max(meas) / min(meas),
                "ceiling_spearman": ceiling_rho,
                "ceiling_top1": ceiling_top1,
            }
        )
    return rows
