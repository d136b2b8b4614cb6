"""Candidates as data: what the search did with every configuration it enumerated, and the
distinct choices among the plans it ranked.

* :class:`Candidate` records one (shape, recompute variant): simulated (with its prediction), or
  left out with the reason (memory, lower bound, constraint). :func:`candidates_csv` writes them
  as CSV in a fixed order (``planner search --csv FILE``). The search collects them only when
  asked, so the normal path pays nothing.
* :func:`fold_equivalent` turns a ranking into distinct choices: plans that differ in a way a user
  acts on (:func:`layout_key`: the parallel degrees tp, pp, dp, cp, ep, expert tp, the optimizer
  sharding and its instances, the recompute and offload choices, sequence parallelism) are distinct;
  a plan that only varies a better-ranked plan's virtual stages, micro-batch size, schedule, layer
  split or rank order is listed under that plan as a variant, whatever its time. (Two different
  layouts that merely run in the same predicted time are two choices: the model cannot tell which
  is faster, and the user may prefer either.)
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace

from cost_models.estimate import Estimate
from cost_models.parallel import ParallelConfig

STATUSES = ("simulated", "memory", "bound", "constraint")
"""``simulated``: partitioned and simulated; ``memory``: no layer partition fits; ``bound``: its
lower bound was already slower than the plans found, so it was not simulated; ``constraint``:
the configuration breaks a constraint of the model, cluster or framework."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One enumerated configuration and what the search did with it."""

    config: ParallelConfig
    status: str
    reason: str = ""
    lower_bound_s: float | None = None
    estimate: Estimate | None = None
    """The prediction of a simulated candidate (its config carries the chosen layer partition)."""


def layout_key(c: ParallelConfig) -> tuple:
    """The choices of a plan a user acts on (module docstring); plans with one key are variants."""
    return (
        c.tp,
        c.pp,
        c.dp,
        c.cp,
        c.ep,
        c.etp,
        c.optimizer_sharding,
        c.fsdp_shard,
        c.optimizer_instances,
        c.recompute,
        c.recompute_num_layers,
        c.recompute_modules,
        c.offload_layers,
        c.sequence_parallel,
    )


def equivalent(a, b) -> bool:
    """Whether ranked plan ``b`` is a variant of the better-ranked plan ``a``: the same
    :func:`layout_key` (it varies only virtual stages, micro-batch size, schedule, layer split or
    rank order)."""
    return layout_key(a.config) == layout_key(b.config)


def fold_equivalent(plans: list, top_k: int | None = None) -> list:
    """Ranked plans (best first) -> distinct plans, each carrying its variants (:func:`equivalent`)
    in ``alternatives`` (in rank order). Deterministic: follows the ranking. With ``top_k``, at most
    that many distinct plans (later plans still fold into them)."""
    reps: list = []
    alternatives: list[list] = []
    for p in plans:
        for i, r in enumerate(reps):
            if equivalent(r, p):
                alternatives[i].append(p)
                break
        else:
            if top_k is None or len(reps) < top_k:
                reps.append(p)
                alternatives.append([])
    return [replace(r, alternatives=tuple(a)) for r, a in zip(reps, alternatives)]


CSV_COLUMNS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "recompute",
    "recompute_num_layers",
    "recompute_modules",
    "offload_layers",
    "sequence_parallel",
    "optimizer_sharding",
    "optimizer_instances",
    "rank_order",
    "schedule",
    "layers_per_stage",
    "status",
    "reason",
    "lower_bound_s",
    "step_time_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "bubble_fraction",
    "peak_memory_gib",
)


def _number(x: float | None) -> str:
    return "" if x is None else f"{x:.4g}"


def candidate_row(c: Candidate) -> list[str]:
    """One CSV row (columns :data:`CSV_COLUMNS`)."""
    cfg = c.config
    e = c.estimate
    return [
        str(cfg.tp),
        str(cfg.pp),
        str(cfg.dp),
        str(cfg.cp),
        str(cfg.ep),
        str(cfg.vpp),
        str(cfg.micro_batch_size),
        cfg.recompute,
        str(cfg.recompute_num_layers),
        " ".join(cfg.recompute_modules),
        str(cfg.offload_layers),
        str(cfg.sp).lower(),
        cfg.optimizer_sharding,
        str(cfg.optimizer_instances),
        cfg.rank_order,
        cfg.schedule,
        " ".join(map(str, cfg.layers_per_stage)),
        c.status,
        c.reason,
        _number(c.lower_bound_s),
        _number(e.step_time_s if e else None),
        _number(e.tokens_per_s_per_gpu if e else None),
        _number(e.mfu if e else None),
        _number(e.bubble_fraction if e else None),
        _number(e.peak_memory_bytes / 2**30 if e else None),
    ]


def candidates_csv(candidates: list[Candidate]) -> str:
    """Every candidate as CSV text with a header row (candidates already in a fixed order)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for c in candidates:
        w.writerow(candidate_row(c))
    return buf.getvalue()
