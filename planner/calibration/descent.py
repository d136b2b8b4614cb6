"""The fit of one group of published runs: coordinate descent over the numbers of a GPU's
``efficiency`` block.

:func:`fit` moves six numbers (``gemm_efficiency_max``, ``gemm_half_efficiency_flop``,
``attention_efficiency``, ``fp8_gemm_speedup`` where FP8 runs exist, ``kernel_overhead_s``,
``comm_overlap_slowdown``; with MoE runs also :data:`MOE_PARAMS`) within :data:`BOUNDS`, minimising
the absolute log error of tokens/s per GPU over all of the group's runs at once, each source weighing
the same (:func:`source_loss`; no per-run parameter), plus a penalty pulling the values toward a
prior (:func:`objective`, :func:`prior_penalty`). Which group, from which start and toward which
prior is :mod:`planner.calibration.fitting`'s: the families in lineage order, their base runs and
their software profiles.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from cost_models.estimate import estimate
from planner.calibration.cases import Case, Result
from planner.inputs.cluster_spec import EfficiencySpec, GPUSpec

PARAMS = (
    "gemm_efficiency_max",
    "gemm_half_efficiency_flop",
    "attention_efficiency",
    "fp8_gemm_speedup",
    "kernel_overhead_s",
    "comm_overlap_slowdown",
    "grouped_gemm_efficiency",
    "host_launch_s",
)
MOE_PARAMS = ("grouped_gemm_efficiency", "host_launch_s")
"""Parameters only MoE layers read: fitted only where a group has MoE runs."""
BOUNDS = {
    "gemm_efficiency_max": (0.3, 0.95),
    "gemm_half_efficiency_flop": (1e8, 1e12),
    "attention_efficiency": (0.1, 0.9),
    "fp8_gemm_speedup": (1.0, 2.0),
    "kernel_overhead_s": (0.0, 5e-3),
    "comm_overlap_slowdown": (0.0, 0.6),
    "grouped_gemm_efficiency": (0.1, 1.0),
    "host_launch_s": (0.0, 100e-6),
}
"""Fitted values stay inside these. The per-layer overhead reaches about a millisecond only where every
kernel launch is synchronous (the BigScience class, planner.profiles.software.PROFILE_START: 0.80-1.2 ms per
layer and pass as its two documents give it); 5 ms bounds that with room."""
ZERO_START = {"kernel_overhead_s": 1e-5, "comm_overlap_slowdown": 0.05, "host_launch_s": 2e-6}
"""Where a parameter at zero starts when a step would raise it (multiplicative steps cannot leave 0)."""
STEPS = (0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.6)
GRID = {"host_launch_s": (0.0, 5e-6, 10e-6, 20e-6, 30e-6, 40e-6, 50e-6, 60e-6, 80e-6, 100e-6)}
"""Absolute values tried besides the multiplicative steps, for a threshold parameter: the host
launch time changes nothing until an MoE pass becomes host-bound (cost_models.layers), so small
steps from a value below every threshold see a flat objective and never move."""


def with_efficiency(case: Case, eff: EfficiencySpec) -> Case:
    """The case on the same cluster with the GPU's efficiency block replaced."""
    gpu: GPUSpec = replace(case.cluster.groups[0].gpu, efficiency=eff)
    groups = tuple(replace(g, gpu=gpu) for g in case.cluster.groups)
    return replace(case, cluster=replace(case.cluster, groups=groups))


def predict(case: Case, eff: EfficiencySpec | None = None) -> Result:
    """The case's prediction, with ``eff`` in place of its GPU's shipped efficiency when given."""
    c = with_efficiency(case, eff) if eff is not None else case
    return Result(case, estimate(c.model, c.cluster, c.job, c.config))


def abs_log_error(case: Case, eff: EfficiencySpec) -> float:
    """|log(predicted / measured)| of tokens/s per GPU for ``case`` with efficiency ``eff``."""
    return abs(math.log(predict(case, eff).predicted / case.measured_tokens_per_s_per_gpu))


def loss(group: list[Case], eff: EfficiencySpec) -> float:
    """Mean absolute log error of tokens/s per GPU over ``group`` with efficiency ``eff``."""
    return sum(abs_log_error(c, eff) for c in group) / len(group)


def source_loss(group: list[Case], eff: EfficiencySpec) -> float:
    """Mean over the sources of ``group`` of each source's mean absolute log error: every source
    weighs the same, however many runs it publishes (what :func:`fit` minimises)."""
    by: dict[str, list[float]] = defaultdict(list)
    for c in group:
        by[c.source].append(abs_log_error(c, eff))
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


PRIOR_LOG_SD = {
    "gemm_efficiency_max": 0.15,
    "gemm_half_efficiency_flop": 1.0,
    "attention_efficiency": 0.15,
    "fp8_gemm_speedup": 0.1,
    "kernel_overhead_s": 1.0,
    "comm_overlap_slowdown": 0.5,
    "grouped_gemm_efficiency": 0.7,
    "host_launch_s": 1.0,
}
"""Width of the prior, in natural log units, per parameter: how far a family's value may be
expected to sit from its parent's transferred value. Chosen, not fitted: GEMM ceilings of one
software generation differ by about 15% between GPU generations (measured H100 and H200 GEMM
kernels fit 0.71 and 0.70, docs/calibration.md); so do the fused attention kernels, once the runs
that ran FlashAttention-2 on Hopper are priced as such (``JobSpec.attention_impl`` ``flash2``,
cost_models.attention.FLASH2_SPEED) instead of widening the prior to cover FlashAttention 2 -> 3
(0.3 until 2026-11-25); the GEMM latency, the kernel overhead, the host launch time and
the overlap slowdown are known only to within a factor of e (1.6 for the slowdown); a grouped GEMM
may run at a fraction of one kernel's speed when issued per expert (factor 2 at one sigma)."""
PRIOR_FLOOR = {"kernel_overhead_s": 1e-6, "comm_overlap_slowdown": 0.02, "host_launch_s": 1e-6}
"""Added to both sides of the log ratio for parameters that may be 0 (1 us; 2% slowdown)."""
PRIOR_SCALE = 0.05
"""Penalty per source: the objective is the per-source mean |log error| (:func:`source_loss`) +
PRIOR_SCALE / sources x sum z^2 / 2.
It is a maximum-a-posteriori fit with a Laplace likelihood of scale 0.05 (half the calibrated
families' typical mean |log error|) per *source*, not per run: runs of one source share its
software, its measurement and its transcription, so they are not independent evidence. A family
seen by one source (Blackwell: Megatron-Bridge) moves off its prior only where the data pay for it;
one seen by seven (A100) is fitted almost freely."""


def prior_penalty(
    eff: EfficiencySpec, prior: EfficiencySpec, sources: int, only: Iterable[str] = PARAMS
) -> float:
    """PRIOR_SCALE / sources x sum over ``only`` of ((log of value / prior value) / PRIOR_LOG_SD)^2 / 2."""
    total = 0.0
    for name in only:
        floor = PRIOR_FLOOR.get(name, 0.0)
        z = math.log((getattr(eff, name) + floor) / (getattr(prior, name) + floor)) / PRIOR_LOG_SD[name]
        total += z * z / 2
    return PRIOR_SCALE / max(1, sources) * total


def objective(
    group: list[Case], eff: EfficiencySpec, prior: EfficiencySpec | None, only: Iterable[str] = PARAMS
) -> float:
    """What :func:`fit` minimises: :func:`loss`, plus :func:`prior_penalty` (over ``only``) counted
    with the number of distinct sources in ``group`` when a ``prior`` is given."""
    value = source_loss(group, eff)
    if prior is not None:
        value += prior_penalty(eff, prior, len({c.source for c in group}), only)
    return value


RIDGE = ("gemm_efficiency_max", "fp8_gemm_speedup")
"""The two parameters whose product prices an FP8 GEMM (cost_models.compute.linear_s)."""


def ridge_moves(eff: EfficiencySpec, params: list[str], steps: tuple[float, ...]) -> list[EfficiencySpec]:
    """Trials that scale the GEMM ceiling by x and the FP8 speed-up by 1/x (the FP8 GEMM rate kept),
    within both bounds; none unless both are being fitted."""
    if not all(p in params for p in RIDGE):
        return []
    (lo_g, hi_g), (lo_f, hi_f) = BOUNDS[RIDGE[0]], BOUNDS[RIDGE[1]]
    out = []
    for x in steps:
        g, f = eff.gemm_efficiency_max * x, eff.fp8_gemm_speedup / x
        if lo_g <= g <= hi_g and lo_f <= f <= hi_f:
            out.append(replace(eff, gemm_efficiency_max=g, fp8_gemm_speedup=f))
    return out


DENSE_STAGE_SOURCES = 2
"""Sources of dense runs a group needs before its shared parameters are fitted on them alone
(:func:`fit`)."""


def fit(
    group: list[Case],
    start: EfficiencySpec,
    passes: int = 8,
    steps: tuple[float, ...] = STEPS,
    only: tuple[str, ...] = PARAMS,
    prior: EfficiencySpec | None = None,
) -> tuple[EfficiencySpec, float]:
    """Coordinate descent from ``start`` over the ``only`` parameters; each tries multiplicative
    ``steps`` within its bounds, minimising :func:`objective` (regularised toward ``prior`` when
    given). ``fp8_gemm_speedup`` is fitted only when the runs include FP8 ones. Returns the values and
    their mean |log error| over ``group`` (without the penalty).

    A group whose dense runs come from :data:`DENSE_STAGE_SOURCES` sources or more, and which has
    MoE runs, is fitted in two stages: the parameters every layer reads on its dense runs, then
    :data:`MOE_PARAMS` on its MoE runs with those fixed. MoE runs carry unknowns of their own
    (grouped-GEMM speed, host launches, the dispatcher's communication, routing), and as one source
    among a few (the objective weighs sources, not runs) they moved the dense GEMM numbers: pricing
    the all-to-all across nodes per NIC (2026-11-27) moved the H100 family's GEMM latency through
    the MoE Model Zoo's four runs. A group with fewer dense sources (a release profile: one source,
    3-6 runs) is fitted jointly, since there its MoE runs carry what pins the dense numbers (the
    Megatron-Bridge 26.04 H100 profile's one dense run is FP8; fitted alone it moved the GEMM
    ceiling 0.73 -> 0.84).

    FP8 runs price their GEMMs at the product of the GEMM ceiling and the FP8 speed-up, so where
    the group's BF16 runs say little the objective has a ridge along that product, which steps of
    one parameter at a time climb only from one side (where they stop depended on the path: a
    small change to the runs moved the H100 split from 0.697 x 1.756 to 0.663 x 1.848). Each pass
    therefore also tries :func:`ridge_moves`, which move the split at a fixed product, so the fit
    settles where the BF16 runs and the prior put it."""
    dense = [c for c in group if not c.model.is_moe]
    moe_runs = [c for c in group if c.model.is_moe]
    moe_params = tuple(p for p in only if p in MOE_PARAMS)
    shared = tuple(p for p in only if p not in MOE_PARAMS)
    if len({c.source for c in dense}) >= DENSE_STAGE_SOURCES and moe_runs and moe_params and shared:
        eff = _descend(dense, start, passes, steps, shared, prior)
        eff = _descend(moe_runs, eff, passes, steps, moe_params, prior)
    else:
        eff = _descend(group, start, passes, steps, only, prior)
    return eff, loss(group, eff)


def _descend(
    group: list[Case],
    start: EfficiencySpec,
    passes: int,
    steps: tuple[float, ...],
    only: tuple[str, ...],
    prior: EfficiencySpec | None,
) -> EfficiencySpec:
    """The coordinate descent of :func:`fit` over ``only`` on ``group``."""
    params = [p for p in only if p != "fp8_gemm_speedup" or any(c.job.precision == "fp8" for c in group)]
    if not any(c.model.is_moe for c in group):
        params = [p for p in params if p not in MOE_PARAMS]
    best, best_loss = start, objective(group, start, prior, params)
    for _ in range(passes):
        improved = False
        for trial in ridge_moves(best, params, steps):
            trial_loss = objective(group, trial, prior, params)
            if trial_loss < best_loss - 1e-6:
                best, best_loss, improved = trial, trial_loss, True
        for name in params:
            value = getattr(best, name)
            lo, hi = BOUNDS[name]
            moves = [("step", x) for x in steps] + [("grid", x) for x in GRID.get(name, ())]
            for kind, x in moves:
                if kind == "grid":
                    raised = x
                else:
                    raised = value * x if value else (ZERO_START.get(name, 0.0) * x if x > 1 else 0.0)
                trial_value = min(hi, max(lo, raised))
                trial = replace(best, **{name: trial_value})
                trial_loss = objective(group, trial, prior, params)
                if trial_loss < best_loss - 1e-6:
                    best, best_loss, improved = trial, trial_loss, True
                    value = trial_value
        if not improved:
            break
    return best
