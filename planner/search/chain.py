"""Search: enumerate shapes -> bound -> partition -> simulate -> rank (STYLE lesson 5).

1. :func:`planner.search.space.enumerate_shapes` yields every valid shape (degrees, micro-batch,
   recompute, sharding, schedule); each full-recompute shape also comes in variants recomputing
   fewer layers per stage.
2. Every (shape, variant) enters a heap keyed by a cheap lower bound of its step time (the
   average per-stage work, :func:`planner.search.bounds.cheap_bound`). When an item reaches the
   top, its bound is refined once (:func:`planner.search.bounds.refined_bound`: the pipeline path
   bound with point-to-point lags, pigeonhole on ceil(L/p) layers, the exposed data-parallel
   tail, and on mixed GPU types an integer water-filling with memory caps and, for two node
   groups, the best placement), then its memory feasibility is checked exactly from the stage
   models (:mod:`planner.search.shape_partition`), and only then it is partitioned
   (:mod:`planner.search.partition`: DP, or the DP that also places node groups) and simulated
   through :func:`cost_models.estimate.estimate`.
3. The search stops when the key at the top of the heap is not below the k-th best simulated step
   time. Every key is a proven lower bound of what the simulator reports (the pipeline bounds are
   also checked against the simulator on random pipelines in the tests), so pruning never loses
   the best plan; the tests compare the result with an exhaustive brute force.
Ties break on a fixed key of the configuration, so the same inputs give the same ranking.
4. The ranking is folded into distinct choices (:func:`planner.search.candidates.fold_equivalent`:
   a plan that only varies a better one's virtual stages, micro-batch size, schedule, layer split
   or rank order is listed under it as a variant); the search runs until it has ``top_k`` distinct
   plans.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cost_models.constraints import resolve, violations
from cost_models.estimate import Estimate, estimate
from cost_models.parallel import RANK_ORDERS, RECOMPUTE, ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.search.bounds import cheap_bound, partition_bound, refined_bound
from planner.search.candidates import Candidate, fold_equivalent
from planner.search.shape_partition import fits_memory, memory_variants, partition_shape, restrict_for
from planner.search.space import Rejections, Restrictions, enumerate_shapes
from planner.search.ties import Ties

ProgressFn = Callable[[int, int, "float | None"], None]
"""``progress(done, total, best_step_time_s)``: candidates settled of ``total`` (non-decreasing,
last ``done == total``) and the best predicted step time so far (None before the first plan)."""


@dataclass(frozen=True, slots=True)
class RankedPlan:
    """One plan: the resolved configuration, the cluster in rank order, and its prediction."""

    config: ParallelConfig
    cluster: ClusterSpec
    estimate: Estimate
    stage_groups: tuple[int, ...] = ()
    """For heterogeneous clusters: the input node group hosting each stage."""
    alternatives: tuple[RankedPlan, ...] = ()
    """Variants folded into this plan: the same layout with other virtual stages, micro-batch size,
    schedule, layer split or rank order (:func:`planner.search.candidates.equivalent`)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one shape (for ``--explain``)."""

    config: ParallelConfig
    bound_s: float
    step_time_s: float | None = None
    reason: str = ""
    breakdown: tuple[tuple[str, float], ...] = ()
    """Per-iteration time components of evaluated shapes (for ``--explain``)."""


@dataclass
class SearchResult:
    plans: list[RankedPlan]
    shapes_enumerated: int = 0
    shapes_evaluated: int = 0
    pruned_by_memory: int = 0
    pruned_by_bound: int = 0
    rejections: Rejections = field(default_factory=Rejections)
    outcomes: list[Outcome] = field(default_factory=list)
    infeasible_reason: str = ""
    candidates: list[Candidate] | None = None
    """Every enumerated configuration and what became of it (only with ``collect=True``)."""
    ties: Ties | None = None
    """How many leading plans are statistically tied with the fastest (set by
    :func:`planner.plans.problem.run_search`, which orders them by robustness; None: not ranked so)."""


def sort_key(c: ParallelConfig) -> tuple:
    """Deterministic tie-break: prefer fewer model-parallel GPUs, simpler schedules, less recompute."""
    return (
        c.tp * c.pp * c.cp,
        c.tp,
        c.pp,
        c.cp,
        c.ep,
        c.vpp,
        -c.micro_batch_size,
        RECOMPUTE.index(c.recompute),
        len(c.recompute_modules),
        c.recompute_modules,
        c.recompute_num_layers or 10**9,
        c.offload_layers,
        ("distributed", "none", "zero2", "full").index(c.optimizer_sharding),
        c.optimizer_instances,
        RANK_ORDERS.index(c.rank_order),
        ("1f1b", "interleaved", "zb-h1", "gpipe", "zb-h2", "zb-v").index(c.schedule),
        c.layers_per_stage,
    )


@lru_cache(maxsize=4096)
def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    restrictions: Restrictions | None = None,
    top_k: int = 5,
    progress: ProgressFn | None = None,
    exhaustive: bool = False,
    collect: bool = False,
) -> SearchResult:
    """The ``top_k`` fastest distinct plans that fit, each with its equivalent variants.
    ``exhaustive`` disables the bound (for tests); ``collect`` records every candidate
    (``SearchResult.candidates``, for ``planner search --csv``); ``progress`` is called after each
    candidate is settled (see :data:`ProgressFn`), last with ``done == total``."""
    r = restrictions or Restrictions()
    if r.uneven_partitions and not r.target.capabilities.uneven_layers:
        r = replace(r, uneven_partitions=False)
    rejected = Rejections(configs=[] if collect else None)
    shapes = list(enumerate_shapes(model, cluster, job, r, rejected))
    found: list[tuple[tuple, int, Candidate]] | None = None
    if collect:
        found = [(sort_key(c), 3, Candidate(c, "constraint", why)) for c, why in rejected.configs]
    result = SearchResult(plans=[], shapes_enumerated=len(shapes), rejections=rejected)
    # Best-first branch and bound over (shape, recompute variant). Each heap key is a lower bound of
    # the item's step time; a cheap bound is refined only when the item reaches the top, and the
    # exact memory check and the simulation run only after that.
    heap: list[tuple[float, tuple, int, int, ParallelConfig]] = []
    for index, c in enumerate(shapes):
        for variant in memory_variants(model, cluster, job, c, r):
            heap.append((cheap_bound(model, cluster, job, variant), sort_key(variant), index, 0, variant))
    heapq.heapify(heap)
    plans: list[RankedPlan] = []
    threshold = math.inf  # step time of the top_k-th distinct plan found so far
    no_fit: set[int] = set()
    total = len(heap)
    settled = 0  # candidates rejected or simulated (each once: a refined item is settled later)
    while heap:
        key, tie, index, level, shape = heapq.heappop(heap)
        if progress and level == 1:
            settled += 1
            progress(settled, total, plans[0].estimate.step_time_s if plans else None)
        if not exhaustive and key >= threshold:
            heapq.heappush(heap, (key, tie, index, level, shape))
            result.pruned_by_bound = len(heap)
            left = sorted(heap)
            for k, _, _, _, c in left[: 64 * top_k]:
                result.outcomes.append(
                    Outcome(c, k, reason="lower bound already slower than the plans found")
                )
            if found is not None:
                why = f"lower bound already slower than the {top_k} distinct plans found"
                found.extend((t, 2, Candidate(c, "bound", why, k)) for k, t, _, _, c in left)
            break
        if level == 0:
            heapq.heappush(heap, (max(key, refined_bound(model, cluster, job, shape)), tie, index, 1, shape))
            continue
        rs = restrict_for(shape, r)
        if level == 1:
            if not fits_memory(model, cluster, job, shape, rs.uneven_partitions, r.memory_headroom_bytes):
                if index not in no_fit:
                    no_fit.add(index)
                result.outcomes.append(
                    Outcome(shape, key, reason="does not fit in memory with any layer partition")
                )
                if found is not None:
                    why = "does not fit in memory with any layer partition"
                    found.append((tie, 1, Candidate(shape, "memory", why, key)))
                continue
            # mixed GPU types: bound the partition this shape will be simulated with
            refined = partition_bound(model, cluster, job, shape, rs)
            if refined > key:
                heapq.heappush(heap, (refined, tie, index, 2, shape))
                continue
        outcome = _evaluate(model, cluster, job, shape, rs)
        result.shapes_evaluated += 1
        if isinstance(outcome, str):
            result.outcomes.append(Outcome(shape, key, reason=outcome))
            if found is not None:
                memory = "fits in memory" in outcome or outcome.startswith("does not fit")
                found.append(
                    (
                        tie,
                        1 if memory else 3,
                        Candidate(shape, "memory" if memory else "constraint", outcome, key),
                    )
                )
            continue
        if found is not None:
            found.append((tie, 0, Candidate(outcome.config, "simulated", "", key, outcome.estimate)))
        plans.append(outcome)
        result.outcomes.append(
            Outcome(
                outcome.config,
                key,
                step_time_s=outcome.estimate.step_time_s,
                breakdown=time_components(outcome.estimate),
            )
        )
        plans.sort(key=lambda p: (p.estimate.step_time_s, sort_key(p.config)))
        del plans[max(top_k, 1) * 64 :]
        distinct = fold_equivalent(_dedupe(plans), top_k)
        if len(distinct) >= top_k:
            threshold = distinct[top_k - 1].estimate.step_time_s
    result.pruned_by_memory = len(no_fit)
    if progress:
        progress(total, total, plans[0].estimate.step_time_s if plans else None)
    result.plans = fold_equivalent(_dedupe(plans), top_k)
    if found is not None:
        result.candidates = [c for _, _, c in sorted(found, key=lambda x: (x[0], x[1]))]
    if not result.plans:
        result.infeasible_reason = infeasible_reason(model, cluster, job, result)
        if shapes and not total and r.offload_layers is not None and 0 not in r.offload_layers:
            result.infeasible_reason = (
                f"--offload-layers {','.join(map(str, r.offload_layers))} without 0 keeps only plans "
                f"that offload, and {r.target.title} offloads only with pp 1 and no recompute, fewer "
                f"layers than the model's {model.num_layers} and a host link in every GPU file: none "
                f"of the {len(shapes)} shapes is one; add 0 to the list or allow pp 1"
            )
    return result


def time_components(est: Estimate) -> tuple[tuple[str, float], ...]:
    """Where one iteration's time goes (sums to the step time; see :meth:`Estimate.time_breakdown`)."""
    return est.time_breakdown()


EXPLAIN_DIMENSIONS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "recompute",
    "optimizer_sharding",
    "schedule",
)


EXPLAIN_TERMS = 3
"""Terms of the time breakdown named per alternative (the rest summed as ``other_terms_s``)."""


def _differing(a: ParallelConfig, b: ParallelConfig) -> int:
    """How many of the explained dimensions two configurations differ in."""
    return sum(getattr(a, d) != getattr(b, d) for d in EXPLAIN_DIMENSIONS)


def explain_terms(best: Estimate, breakdown: tuple[tuple[str, float], ...]) -> dict:
    """The net step-time difference of an alternative (its ``breakdown``, which sums to its step
    time) against ``best``, and the :data:`EXPLAIN_TERMS` terms of :meth:`Estimate.time_breakdown`
    that differ most; ``terms`` plus ``other_terms_s`` sum to ``difference_s``."""
    base = dict(time_components(best))
    mine = dict(breakdown)
    deltas = sorted(
        ((mine.get(k, 0.0) - base.get(k, 0.0), k) for k in sorted(set(base) | set(mine))),
        key=lambda t: (-abs(t[0]), t[1]),
    )
    difference = sum(d for d, _ in deltas)
    named = [{"term": k, "delta_s": d} for d, k in deltas[:EXPLAIN_TERMS] if d != 0.0]
    return {
        "difference_s": difference,
        "terms": named,
        "other_terms_s": difference - sum(t["delta_s"] for t in named),
    }


def _reason(terms: dict) -> str:
    parts = ", ".join(f"{t['term']} {t['delta_s']:+.3f} s" for t in terms["terms"])
    return f"{terms['difference_s']:+.3f} s net: {parts}" if parts else "same predicted time"


def _faster_reason(terms: dict, slower: float) -> str:
    """An alternative no slower than plan 1: a tie broken by the fixed order, or a faster point
    estimate that plan 1 leads as statistically tied and more robust (planner.search.ties)."""
    if slower >= -1e-9:
        return "same predicted time; the tie is broken by the fixed plan order"
    return (
        f"{_reason(terms)}; faster by the point estimate, but statistically tied with plan 1, "
        "which is listed first as more robust"
    )


def explain(result: SearchResult) -> list[dict]:
    """For each dimension, the best alternative value and why it lost to the top plan: the
    alternative that changes as few other dimensions as it can (then the fastest), never one shown
    for an earlier dimension, with its net difference and the terms that make it
    (:func:`explain_terms`, documented in docs/search.md "--explain")."""
    if not result.plans:
        return []
    best = result.plans[0]
    shown: set[tuple] = set()
    out = []
    for dim in EXPLAIN_DIMENSIONS:
        mine = getattr(best.config, dim)
        others = [o for o in result.outcomes if getattr(o.config, dim) != mine]
        if not others:
            continue
        evaluated = sorted(
            (o for o in others if o.step_time_s and sort_key(o.config) not in shown),
            key=lambda o: (_differing(o.config, best.config), o.step_time_s, sort_key(o.config)),
        )
        if evaluated:
            o = evaluated[0]
            shown.add(sort_key(o.config))
            slower = o.step_time_s / best.estimate.step_time_s - 1
            terms = explain_terms(best.estimate, o.breakdown)
            out.append(
                {
                    "dimension": dim,
                    "value": getattr(o.config, dim),
                    "slower_fraction": slower,
                    "step_time_s": o.step_time_s,
                    **terms,
                    "changes": [
                        d for d in EXPLAIN_DIMENSIONS if getattr(o.config, d) != getattr(best.config, d)
                    ],
                    "reason": _reason(terms) if slower > 1e-9 else _faster_reason(terms, slower),
                }
            )
            continue
        bounded = sorted(
            (o for o in others if not math.isnan(o.bound_s) and "lower bound" in o.reason),
            key=lambda o: o.bound_s,
        )
        if bounded:
            o = bounded[0]
            out.append(
                {
                    "dimension": dim,
                    "value": getattr(o.config, dim),
                    "slower_fraction": o.bound_s / best.estimate.step_time_s - 1,
                    "step_time_s": None,
                    "reason": "not simulated: its lower bound is already slower than the plans found",
                }
            )
            continue
        o = others[0]
        out.append(
            {
                "dimension": dim,
                "value": getattr(o.config, dim),
                "slower_fraction": None,
                "step_time_s": None,
                "reason": o.reason,
            }
        )
    return out


def _dedupe(plans: list[RankedPlan]) -> list[RankedPlan]:
    seen, out = set(), []
    for p in plans:
        if p.config not in seen:
            seen.add(p.config)
            out.append(p)
    return out


def _evaluate(model, cluster, job, shape: ParallelConfig, r: Restrictions) -> RankedPlan | str:
    part = partition_shape(model, cluster, job, shape, r.uneven_partitions, r.memory_headroom_bytes)
    if isinstance(part, str):
        return part
    config, placed_cluster, groups = part
    problems = violations(model, placed_cluster, job, config)
    if problems:
        return problems[0]
    try:
        config = resolve(model, placed_cluster, job, config)
    except ConfigError as exc:
        return str(exc)
    est = estimate(model, placed_cluster, job, config)
    w = est.worst_stage
    if w.memory.headroom_bytes < r.memory_headroom_bytes:
        return (
            f"does not fit: stage {w.stage} short by "
            f"{(r.memory_headroom_bytes - w.memory.headroom_bytes) / 2**30:.1f} GiB (headroom included)"
        )
    if not est.host_fits:
        return f"does not fit: {est.host_shortfall}"
    return RankedPlan(config, placed_cluster, est, groups)


def infeasible_reason(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, result: SearchResult) -> str:
    """A sentence saying why nothing fits and how many GPUs would be needed at least."""
    gpu = min((g.gpu for g in cluster.groups), key=lambda g: g.memory_bytes)
    usable = gpu.memory_bytes - gpu.memory_reserve_bytes
    # Model state alone with every byte sharded (FSDP): 18 bytes per parameter over all GPUs.
    need = math.ceil(model.params_total * 18 / usable)
    if not result.shapes_enumerated:
        return f"no configuration satisfies the constraints: {top_reasons(result.rejections)}"
    why = (
        f"nothing fits: {model.name} on {cluster.num_gpus} x {gpu.name} has no configuration within memory, "
        f"even with full recompute ({result.pruned_by_memory} of {result.shapes_enumerated} shapes do not fit"
    )
    host = [o.reason for o in result.outcomes if "host memory" in o.reason]
    if host:
        # Offloading plans that fit the GPUs but not their nodes' system memory (host_memory_gb).
        plans = "plan fits" if len(host) == 1 else "plans fit"
        why += f"; {len(host)} offloading {plans} the GPUs but not the host memory, e.g. {host[0]}"
    if result.rejections.counts:
        why += f"; left out before: {top_reasons(result.rejections)}"
    return why + (
        f"); its model state alone (18 bytes x {model.params_total / 1e9:.1f}B parameters) "
        f"needs at least {need} GPUs of {gpu.memory_bytes / 2**30:.0f} GiB, before activations"
    )


def top_reasons(rejections: Rejections, n: int = 3) -> str:
    """The reasons that left out the most candidates, most first, with their counts."""
    top = sorted(rejections.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    if not top:
        return "no shape is possible"
    return "; ".join(f"{reason} ({count} left out)" for reason, count in top)
