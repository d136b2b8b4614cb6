"""What a failure costs a plan under four strategies (``planner whatif``).

Every number comes from :func:`cost_models.estimate.estimate` on a shape derived from the plan:

* ``drop-replica``: the hit data-parallel replicas leave; the others run the same shape. The global
  batch is either kept (more micro-batches per replica: ``ceil(M / dp')`` of the ``M`` micro-batches)
  or reduced (same micro-batches per replica, ``dp' / dp`` of the batch). Both are reported.
* ``replan``: the search (:func:`planner.search.chain.search`, restricted to the plan's framework)
  on the surviving whole nodes (a node with a failed GPU is drained), global batch kept.
* ``nonuniform-tp``: Nonuniform Tensor Parallelism (Arfeen et al. 2025, "Nonuniform-Tensor-
  Parallelism: Mitigating GPU failure impact for Scaled-up LLM Training", arXiv:2504.06095): a hit
  replica keeps running at a lower tensor-parallel degree ``tp'`` (the largest the model's shapes
  allow among its surviving GPUs). As in the paper, the replica's share of the batch can be
  rebalanced so it finishes with the others (``rebalanced-batch``), or kept (``same-batch``, the
  whole step waits for the slow replica). Its GPUs hold ``tp / tp'`` times the gradients of a
  healthy GPU, so in the data-parallel reduction each of them carries ``tp / tp'`` healthy ranks'
  share (:func:`cost_models.estimate.dp_sync` with the larger shard, i.e. the ring collectives of
  :mod:`cost_models.communication`); when ``tp'`` does not divide ``tp`` the shards do not line up
  and the gradients (and the updated 16-bit weights) are resharded by an all-to-all among the
  replica's ``tp'`` GPUs. Both extras are counted fully exposed. A replica left without a valid
  ``tp'`` or whose ``tp'`` shape does not fit in memory is dropped.
* ``hot-spares``: the job holds as many spare nodes as the failure takes out, i.e. it runs the best
  plan for ``N - spares`` nodes all the time, and a failure swaps a spare in (after the restart the
  throughput is unchanged). Its steady throughput equals ``replan``'s on the same node count; the
  two differ in when they pay (always vs. after the failure), which :mod:`.goodput` weighs.

The modelling choices that are ours: a hit replica runs ``tp'`` on all its stages (its pipeline is
paced by the reduced stage anyway; only fill and drain grow, so this is conservative), and micro-batch
counts under the interleaved schedule stay multiples of ``pp`` (Megatron's constraint).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cost_models import communication as comm
from cost_models.estimate import Estimate, dp_sync, estimate
from cost_models.parallel import group, resolve
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.errors import ConfigError
from planner.inputs.job_spec import DTYPE_BYTES
from planner.plans.plan_file import PlanInputs
from planner.resilience.failures import Damage, FailureSpec, lower_tp, place

STRATEGIES = ("drop-replica", "replan", "nonuniform-tp", "hot-spares")
DEFAULT_HEADROOM_BYTES = 2.0 * 2**30
"""Memory headroom of the re-planning search: ``planner search``'s default (--headroom-gib 2)."""


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """One strategy's throughput after the failure."""

    name: str
    variant: str
    feasible: bool
    tokens_per_s: float
    step_time_s: float | None
    relative: float
    """Tokens per second relative to the healthy plan."""
    gpus_used: int
    global_batch_size: int
    fits: bool
    replicas: tuple[tuple[int, int, int], ...] = ()
    """(tp, replicas, micro-batches per replica) groups of the data-parallel replicas."""
    config: tuple[tuple[str, int | str], ...] = ()
    """The re-planned shape (replan, hot-spares)."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The healthy plan, the damage, and every strategy."""

    healthy: Estimate
    damage: Damage
    failure: FailureSpec
    strategies: tuple[StrategyResult, ...]


def node_group(inputs: PlanInputs) -> NodeGroup:
    """The plan's node type; whatif models clusters of one node group."""
    if len(inputs.cluster.groups) != 1:
        raise ConfigError(
            f"cluster {inputs.cluster.name} has {len(inputs.cluster.groups)} node groups; "
            "whatif models clusters of one node type"
        )
    return inputs.cluster.groups[0]


def micro_step(inputs: PlanInputs) -> int:
    """Granularity of per-replica micro-batch counts (pp under interleaving, else 1)."""
    return inputs.config.pp if inputs.config.schedule == "interleaved" else 1


def round_up(x: int, q: int) -> int:
    """Smallest multiple of ``q`` at least ``x``."""
    return -(-x // q) * q


@dataclass
class ShapeEstimator:
    """Estimates of the plan's shape at another tp, replica count and micro-batch count (cached).

    The estimate runs on a cluster of exactly the GPUs the shape uses, with the plan's node type:
    the cost model places groups by NVLink domain size only, so this is the shape's own cost.
    """

    inputs: PlanInputs
    _cache: dict = field(default_factory=dict)

    def __call__(self, tp: int, dp: int, microbatches: int) -> Estimate | None:
        """The estimate, or None when the shape breaks a constraint."""
        key = (tp, dp, microbatches)
        if key not in self._cache:
            self._cache[key] = self._estimate(tp, dp, microbatches)
        return self._cache[key]

    def _estimate(self, tp: int, dp: int, microbatches: int) -> Estimate | None:
        i, c = self.inputs, self.inputs.config
        node = node_group(i)
        world = tp * c.pp * c.cp * dp
        g = node.gpus_per_node
        shaped = (
            replace(node, num_nodes=world // g)
            if world % g == 0
            else replace(node, num_nodes=1, gpus_per_node=world)
        )
        cluster = ClusterSpec(name=i.cluster.name, groups=(shaped,))
        job = replace(i.job, global_batch_size=microbatches * c.micro_batch_size * dp)
        try:
            resolved = resolve(i.model, cluster, job, c.with_(tp=tp, dp=dp))
        except ConfigError:
            return None
        return estimate(i.model, cluster, job, resolved)


def _infeasible(name: str, variant: str, note: str) -> StrategyResult:
    return StrategyResult(name, variant, False, 0.0, None, 0.0, 0, 0, False, note=note)


def _result(
    name: str,
    variant: str,
    healthy: Estimate,
    inputs: PlanInputs,
    step_s: float,
    batch: int,
    gpus: int,
    fits: bool,
    replicas: tuple[tuple[int, int, int], ...],
    note: str = "",
    config: tuple = (),
) -> StrategyResult:
    tokens = batch * inputs.job.seq_length / step_s
    return StrategyResult(
        name,
        variant,
        True,
        tokens,
        step_s,
        tokens / healthy.tokens_per_s,
        gpus,
        batch,
        fits,
        replicas,
        config,
        note,
    )


def drop_replica(
    inputs: PlanInputs, healthy: Estimate, damage: Damage, est: ShapeEstimator
) -> list[StrategyResult]:
    """The hit replicas leave; global batch kept by more accumulation, or reduced."""
    c = inputs.config
    dp2 = c.dp - len(damage.replicas)
    if dp2 < 1:
        note = "every data-parallel replica is hit"
        return [_infeasible("drop-replica", v, note) for v in ("keep-global-batch", "reduce-global-batch")]
    m = c.num_microbatches(inputs.job)
    total = inputs.job.global_batch_size // c.micro_batch_size
    m_keep = round_up(-(-total // dp2), micro_step(inputs))
    mp = c.tp * c.pp * c.cp
    out = []
    for variant, mb, batch in (
        ("keep-global-batch", m_keep, inputs.job.global_batch_size),
        ("reduce-global-batch", m, m * c.micro_batch_size * dp2),
    ):
        e = est(c.tp, dp2, mb)
        if e is None:
            out.append(_infeasible("drop-replica", variant, "the smaller shape breaks a constraint"))
            continue
        out.append(
            _result(
                "drop-replica",
                variant,
                healthy,
                inputs,
                e.step_time_s,
                batch,
                dp2 * mp,
                e.fits,
                ((c.tp, dp2, mb),),
            )
        )
    return out


def _rank_params(inputs: PlanInputs, r: int) -> float:
    """Dense parameters one GPU of pipeline rank ``r`` holds at the plan's tp."""
    m, c = inputs.model, inputs.config
    layers = c.stage_layers(m)
    first = [sum(layers[:vs]) for vs in range(len(layers))]
    total = 0.0
    for vs in range(r, len(layers), c.pp):
        total += sum(m.layer_params(i) for i in range(first[vs], first[vs] + layers[vs]))
        if vs == 0:
            total += m.embedding_params()
        if vs == len(layers) - 1:
            total += m.output_params()
    return total / c.tp


def ntp_sync_extra_s(inputs: PlanInputs, tp_low: int, microbatches: int) -> float:
    """Extra data-parallel time per step when one replica runs at ``tp_low``: the slowest rank's
    reduction and gather with a ``tp / tp_low`` times larger shard, minus the healthy one, plus the
    resharding all-to-alls among the ``tp_low`` GPUs when ``tp_low`` does not divide ``tp``."""
    c, job = inputs.config, inputs.job
    node = node_group(inputs)
    factor = c.tp / tp_low
    low = c.with_(tp=tp_low)
    link_tp = comm.link_for(group(low, "tp"), node)
    grad_b = float(DTYPE_BYTES[job.grad_dtype])
    worst = 0.0
    for r in range(c.pp):
        params = _rank_params(inputs, r)
        base = dp_sync(job, c, node, params, 0.0, microbatches, 0.0, 0.0)
        big = dp_sync(job, c, node, params * factor, 0.0, microbatches, 0.0, 0.0)
        extra = (big.reduce_s + big.gather_s) - (base.reduce_s + base.gather_s)
        if c.tp % tp_low:
            shard = params * factor
            extra += comm.all_to_all_s(shard * grad_b, tp_low, link_tp) + comm.all_to_all_s(
                shard * 2.0, tp_low, link_tp
            )
        worst = max(worst, extra)
    return worst


def _largest_within(est: ShapeEstimator, tp: int, dp: int, limit_s: float, m_max: int, q: int) -> int:
    """Largest multiple of ``q`` in [0, m_max] whose pipeline time at ``tp`` is within ``limit_s``."""
    lo, hi = 0, m_max // q
    while lo < hi:
        mid = (lo + hi + 1) // 2
        e = est(tp, dp, mid * q)
        if e is not None and e.pipeline_time_s <= limit_s:
            lo = mid
        else:
            hi = mid - 1
    return lo * q


def nonuniform_tp(
    inputs: PlanInputs, healthy: Estimate, damage: Damage, est: ShapeEstimator
) -> list[StrategyResult]:
    """Hit replicas run at a lower tp, with their batch share rebalanced or kept."""
    c, model = inputs.config, inputs.model
    m = c.num_microbatches(inputs.job)
    q = micro_step(inputs)
    classes: dict[int, int] = {}
    dropped = 0
    for _, survivors in damage.survivors:
        t = lower_tp(model, c, survivors)
        e = est(t, c.dp, m) if t else None
        if e is None or not e.fits:
            dropped += 1
        else:
            classes[t] = classes.get(t, 0) + 1
    healthy_count = c.dp - len(damage.replicas)
    groups = ([(c.tp, healthy_count)] if healthy_count else []) + sorted(classes.items(), reverse=True)
    if not groups:
        note = "no replica can run: every hit tensor-parallel group lost all its GPUs or does not fit"
        return [_infeasible("nonuniform-tp", v, note) for v in ("rebalanced-batch", "same-batch")]
    lead_tp, lead_n = groups[0]
    total = inputs.job.global_batch_size // c.micro_batch_size
    note = f"{dropped} hit replica(s) dropped (no valid lower tp or no fit)" if dropped else ""
    extra = {t: ntp_sync_extra_s(inputs, t, m) for t in classes}

    def assemble(variant: str, counts: list[int]) -> StrategyResult:
        running = sum(n for (_, n), k in zip(groups, counts) if k)
        ests = [est(t, running, k) if k else None for (t, _), k in zip(groups, counts)]
        pipe = max((e.pipeline_time_s for e in ests if e is not None), default=0.0)
        lead = ests[0]
        tail = lead.step_time_s - lead.pipeline_time_s
        sync = max((extra[t] for (t, _), k in zip(groups, counts) if k and t in extra), default=0.0)
        layout = tuple((t, n, k) for (t, n), k in zip(groups, counts))
        fits = all(e.fits for e in ests if e is not None)
        gpus = sum(t * n for (t, n), k in zip(groups, counts) if k) * c.pp * c.cp
        return _result(
            "nonuniform-tp", variant, healthy, inputs, pipe + tail + sync,
            inputs.job.global_batch_size, gpus, fits, layout, note,
        )  # fmt: skip

    # Rebalanced: the smallest leader count whose pipeline time lets every group together cover
    # the batch (each group can take the most micro-batches it finishes within that time); then the
    # reduced groups take only what the leaders leave over (none: they idle, as when dropped).
    running = sum(n for _, n in groups)
    lo, hi = round_up(-(-total // running), q) // q, round_up(-(-total // lead_n), q) // q
    best: list[int] = []
    while lo <= hi:
        mid = (lo + hi) // 2
        e = est(lead_tp, running, mid * q)
        if e is None:
            lo = mid + 1
            continue
        caps = [_largest_within(est, t, running, e.pipeline_time_s, mid * q, q) for t, _ in groups[1:]]
        if lead_n * mid * q + sum(n * k for (_, n), k in zip(groups[1:], caps)) >= total:
            need = total - lead_n * mid * q
            counts = [mid * q]
            for (_, n), cap in zip(groups[1:], caps):
                k = min(cap, round_up(-(-max(need, 0) // n), q))
                counts.append(k)
                need -= n * k
            best, hi = counts, mid - 1
        else:
            lo = mid + 1
    out = []
    if best:
        out.append(assemble("rebalanced-batch", best))
    else:
        out.append(_infeasible("nonuniform-tp", "rebalanced-batch", "no micro-batch split covers the batch"))
    if dropped:
        out.append(
            _infeasible("nonuniform-tp", "same-batch", "a hit replica cannot run, so the batch must move")
        )
    else:
        out.append(assemble("same-batch", [m] * len(groups)))
    return out


def surviving_cluster(inputs: PlanInputs, lost_nodes: int) -> ClusterSpec:
    """The plan's cluster without ``lost_nodes`` nodes."""
    node = node_group(inputs)
    return ClusterSpec(
        name=inputs.cluster.name, groups=(replace(node, num_nodes=node.num_nodes - lost_nodes),)
    )


REPLAN_NODE_COUNTS = 3
"""Feasible node counts the re-planning compares (the surviving count and below: a world size with
awkward factors admits no shape, so the best plan may leave a few nodes idle)."""


def replan(
    inputs: PlanInputs, healthy: Estimate, lost_nodes: int, headroom_bytes: float = DEFAULT_HEADROOM_BYTES
) -> StrategyResult | str:
    """The best plan of the plan's framework on at most ``N - lost_nodes`` nodes, or why there is
    none: the search on the surviving node count and downwards, over the first
    :data:`REPLAN_NODE_COUNTS` counts that admit a plan (down to half the nodes)."""
    from planner.outputs.views import config_dict
    from planner.search.chain import search
    from planner.search.space import Restrictions

    r = Restrictions(framework=inputs.framework, memory_headroom_bytes=headroom_bytes)
    top = node_group(inputs).num_nodes - lost_nodes
    found = []
    reason = ""
    for n in range(top, top // 2, -1):
        result = search(
            inputs.model, surviving_cluster(inputs, inputs.cluster.groups[0].num_nodes - n), inputs.job, r, 1
        )
        if result.plans:
            found.append((result.plans[0].estimate.step_time_s, n, result.plans[0]))
            if len(found) >= REPLAN_NODE_COUNTS:
                break
        elif not reason:
            reason = result.infeasible_reason or "no plan fits"
    if not found:
        return f"no plan on {top // 2 + 1} to {top} nodes: {reason}"
    _, n, best = min(found, key=lambda t: (t[0], t[1]))
    bc = best.estimate.config
    cfg = tuple(
        (k, v) for k, v in config_dict(bc, inputs.model, inputs.job).items() if not isinstance(v, list)
    )
    note = f"search on {n} of the {top} surviving nodes"
    return _result(
        "replan", "", healthy, inputs, best.estimate.step_time_s, inputs.job.global_batch_size,
        best.estimate.config.world_size, best.estimate.fits, ((bc.tp, bc.dp, bc.num_microbatches(inputs.job)),),
        note, cfg,
    )  # fmt: skip


def whatif(
    inputs: PlanInputs,
    failure: FailureSpec,
    healthy: Estimate,
    headroom_bytes: float = DEFAULT_HEADROOM_BYTES,
) -> WhatIf:
    """All four strategies for ``failure`` on the plan (``healthy`` is the plan's own estimate)."""
    node = node_group(inputs)
    damage = place(inputs.config, node.gpus_per_node, failure)
    est = ShapeEstimator(inputs)
    out = drop_replica(inputs, healthy, damage, est)
    lost = len(damage.failed_nodes)
    planned = replan(inputs, healthy, lost, headroom_bytes)
    if isinstance(planned, str):
        out.append(_infeasible("replan", "", planned))
        out += nonuniform_tp(inputs, healthy, damage, est)
        out.append(_infeasible("hot-spares", "", planned))
    else:
        out.append(planned)
        out += nonuniform_tp(inputs, healthy, damage, est)
        out.append(
            replace(
                planned,
                name="hot-spares",
                note=f"{planned.note}, holding {lost} spare node(s) from the start; a failure swaps "
                "a spare in",
            )
        )
    return WhatIf(healthy, damage, failure, tuple(out))


def check_never_faster(w: WhatIf) -> list[str]:
    """Strategies reported faster than the healthy plan (empty for a plan that is the best of its
    cluster; used by tests and as a warning)."""
    return [f"{s.name} {s.variant}".strip() for s in w.strategies if s.feasible and s.relative > 1.0 + 1e-9]
