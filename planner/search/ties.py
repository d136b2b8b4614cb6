"""Statistical ties: plans the cost model cannot tell apart, ordered by how safely they run.

Two plans whose predicted step times differ by less than the model can resolve (the paired error of
two layouts of one layout group of the calibration set, :func:`planner.profiles.uncertainty.resolution`)
are statistically tied: the measured order of such a pair flips more than one time in five. The
search still ranks by the point estimate (:mod:`planner.search.chain`); :func:`order_ties` then
takes the plans tied with the fastest and puts the most robust first:

1. fewer special features (:func:`special_features`: what a launch can get wrong or a framework
   release can change: activation offload, an uneven layer split, a schedule other than 1F1B or
   interleaved 1F1B, a partial distributed optimizer, a non-default rank order, FSDP, partial
   recompute);
2. memory headroom: a plan with at least :data:`COMFORTABLE_HEADROOM_FRACTION` of its GPUs' memory
   free ranks before one with less, and among the latter more free memory first;
3. the predicted step time (the search's own order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.parallel import RANK_ORDERS, ParallelConfig

COMFORTABLE_HEADROOM_FRACTION = 0.10
"""Memory free on the fullest GPU beyond which more headroom buys no more safety: several times
the memory model's error on measured peaks (within 2% of real Megatron-Core steps,
docs/calibration.md "Memory"), and room for allocator fragmentation."""

STANDARD_SCHEDULES = ("1f1b", "interleaved")
"""The schedules every framework release runs (Megatron-LM's default pipeline schedules)."""


def special_features(c: ParallelConfig) -> tuple[str, ...]:
    """What in ``c`` departs from the framework's everyday path (module docstring, item 1)."""
    out = []
    if c.offload_layers:
        out.append("activation offload")
    if c.layers_per_stage and len(set(c.layers_per_stage)) > 1:
        out.append("uneven layer split")
    if c.schedule not in STANDARD_SCHEDULES:
        out.append(f"{c.schedule} schedule")
    if c.optimizer_instances > 1:
        out.append("partial distributed optimizer")
    if c.rank_order != RANK_ORDERS[0]:
        out.append(f"rank order {c.rank_order}")
    if c.optimizer_sharding == "full":
        out.append("FSDP")
    if c.recompute != "none" and c.recompute_num_layers:
        out.append("partial recompute")
    return tuple(out)


def headroom_fraction(plan) -> float:
    """Memory free on the plan's fullest GPU, as a fraction of its capacity."""
    m = plan.estimate.worst_stage.memory
    return m.headroom_bytes / m.capacity_bytes if m.capacity_bytes else 0.0


def robustness_key(plan, rank: int) -> tuple:
    """The order of tied plans (module docstring): fewer special features, comfortable memory,
    then the search's rank."""
    free = min(headroom_fraction(plan), COMFORTABLE_HEADROOM_FRACTION)
    return (len(special_features(plan.config)), -round(free, 2), rank)


@dataclass(frozen=True, slots=True)
class Ties:
    """How many of the leading plans are tied with the fastest, and the gap that ties them."""

    count: int
    """Plans tied with the fastest, itself included (1: no tie)."""
    gap_fraction: float
    """Plans whose predicted step time is within this fraction of the fastest are tied."""
    fastest_step_time_s: float

    def as_dict(self) -> dict:
        return {
            "tied_plans": self.count,
            "gap_fraction": self.gap_fraction,
            "fastest_step_time_s": self.fastest_step_time_s,
            "why": (
                f"predicted within {self.gap_fraction:.1%} of the fastest: the model orders two layouts that "
                "close rightly less than four times in five (paired errors of the calibration set's layout "
                "groups); tied plans are ordered by fewer special features, then memory headroom"
            ),
        }


def order_ties(plans: list, log_gap: float) -> tuple[list, Ties | None]:
    """``plans`` (ranked fastest first) with those tied with the fastest reordered by robustness;
    None for no plans."""
    if not plans:
        return plans, None
    fastest = min(p.estimate.step_time_s for p in plans)
    n = 0
    while n < len(plans) and math.log(plans[n].estimate.step_time_s / fastest) <= log_gap:
        n += 1
    tied = sorted(range(n), key=lambda i: robustness_key(plans[i], i))
    return [plans[i] for i in tied] + plans[n:], Ties(n, math.exp(log_gap) - 1.0, fastest)
