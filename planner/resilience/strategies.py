"""What a failure costs a plan under four strategies (``planner whatif``).

Every number comes from :func:`cost_models.estimate.estimate` on a shape derived from the plan:

* ``drop-replica``: the hit data-parallel replicas leave; the others run the same shape. The global
  batch is either kept (more micro-batches per replica: ``ceil(M / dp')`` of the ``M`` micro-batches)
  or reduced (same micro-batches per replica, ``dp' / dp`` of the batch). Both are reported.
* ``replan``: the search (:func:`planner.search.chain.search`, restricted to the plan's framework)
  on the surviving whole nodes (a node with a failed GPU is drained), global batch kept.
* ``nonuniform-tp``: Nonuniform Tensor Parallelism (Arfeen et al. 2025, "Nonuniform-Tensor-
  Parallelism: Mitigating GPU failure impact for Scaled-up LLM Training", arXiv:2504.06095), as
  :mod:`.ntp` prices it: failures packed into as few replicas as possible, the hit pipeline stages
  (only those) at the fastest degree ``tp'`` their surviving GPUs allow (padded where it does not
  divide the heads), and the replica's share of the batch rebalanced so the global batch is kept
  (``rebalanced-batch``), cut in proportion to its speed (``proportional-batch``), or kept
  (``same-batch``, the whole step waits for the slow replica). The hit stages' GPUs hold larger
  gradient shards, so in the data-parallel reduction each carries more than a healthy rank
  (:func:`cost_models.estimate.dp_sync` with the larger shard, i.e. the ring collectives of
  :mod:`cost_models.communication`); when ``tp'`` does not divide ``tp`` the shards do not line up
  and the gradients (and the updated 16-bit weights) are resharded by an all-to-all among the
  ``tp'`` GPUs. Both extras are counted fully exposed. A replica left without a degree whose shape
  fits in memory is dropped.
* ``hot-spares``: the job holds as many spare nodes as the failure takes out, i.e. it runs the best
  plan for ``N - spares`` nodes all the time, and a failure swaps a spare in (after the restart the
  throughput is unchanged). Its steady throughput equals ``replan``'s on the same node count; the
  two differ in when they pay (always vs. after the failure), which :mod:`.goodput` weighs.

The modelling choice that is ours: micro-batch counts under the interleaved schedule stay
multiples of ``pp`` (Megatron's constraint), for the slowed replicas too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cost_models import communication as comm
from cost_models.constraints import resolve
from cost_models.estimate import Estimate, dp_sync, estimate
from cost_models.placement import group
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.errors import ConfigError
from planner.inputs.job_spec import DTYPE_BYTES
from planner.plans.plan_file import PlanInputs
from planner.resilience.failures import Damage, FailureSpec, place
from planner.resilience.ntp import ReplicaTimer, padded_model, rank_params

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
    packed: Damage | None = None
    """The failures as nonuniform-tp places them (packed into as few replicas as possible)."""


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


def ntp_sync_extra_s(
    inputs: PlanInputs, timer: ReplicaTimer, tp_low: int, hit: tuple[int, ...], m: int
) -> float:
    """Extra data-parallel time per step when pipeline ranks ``hit`` of a replica run at
    ``tp_low``: the slowest hit rank's reduction and gather with its larger shard (the padded
    shape's parameters over ``tp_low`` GPUs instead of the plan's over ``tp``), minus the healthy
    one, plus the resharding all-to-alls among the ``tp_low`` GPUs when ``tp_low`` does not divide
    ``tp`` (the shards do not line up with the healthy replicas'). Counted fully exposed."""
    c, job = inputs.config, inputs.job
    node = node_group(inputs)
    d = timer.degraded(tp_low)
    link_tp = comm.link_for(group(c.with_(tp=tp_low), "tp"), replace(node, nvlink_domain_size=tp_low))
    grad_b = float(DTYPE_BYTES[job.grad_dtype])
    worst = 0.0
    for r in hit:
        params = rank_params(inputs.model, c, r)
        shard = d.params_per_gpu[r] if d is not None else params * c.tp / tp_low
        base = dp_sync(job, c, node, params, 0.0, m, 0.0, 0.0)
        big = dp_sync(job, c, node, shard, 0.0, m, 0.0, 0.0)
        extra = (big.reduce_s + big.gather_s) - (base.reduce_s + base.gather_s)
        if c.tp % tp_low:
            extra += comm.all_to_all_s(shard * grad_b, tp_low, link_tp) + comm.all_to_all_s(
                shard * 2.0, tp_low, link_tp
            )
        worst = max(worst, extra)
    return worst


def _largest_within(
    timer: ReplicaTimer, hit: tuple[int, ...], t: int, limit_s: float, m_max: int, q: int
) -> int:
    """Largest multiple of ``q`` in [0, m_max] whose pipeline time with ``hit`` at ``t`` is within
    ``limit_s``."""
    lo, hi = 0, m_max // q
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if timer.pipeline_s(hit, t, mid * q) <= limit_s:
            lo = mid
        else:
            hi = mid - 1
    return lo * q


def _hit_replicas(damage: Damage) -> dict[int, tuple[tuple[int, ...], int]]:
    """Per hit replica: its hit pipeline ranks and the fewest surviving GPUs of their groups."""
    out: dict[int, tuple[tuple[int, ...], int]] = {}
    for d, r, n in damage.stages:
        hit, surv = out.get(d, ((), n))
        out[d] = (hit + (r,), min(surv, n))
    return out


def nonuniform_tp(
    inputs: PlanInputs, healthy: Estimate, damage: Damage, est: ShapeEstimator, timer: ReplicaTimer
) -> list[StrategyResult]:
    """Hit replicas run their hit stages at a lower tp (:mod:`.ntp`), with their batch share
    rebalanced (global batch kept), in proportion to their speed, or kept. ``damage`` is the
    packed placement (:func:`planner.resilience.failures.place`)."""
    c, job = inputs.config, inputs.job
    m = c.num_microbatches(job)
    q = micro_step(inputs)
    classes: dict[tuple[int, tuple[int, ...]], int] = {}
    dropped = lost = 0
    hits = _hit_replicas(damage)
    for hit, survivors in hits.values():
        d = timer.best_degree(hit, survivors) if survivors else None
        lost += not survivors
        if d is None:
            dropped += 1
        else:
            classes[(d.tp, hit)] = classes.get((d.tp, hit), 0) + 1
    healthy_count = c.dp - len(hits)
    groups = ([(c.tp, (), healthy_count)] if healthy_count else []) + sorted(
        ((t, hit, n) for (t, hit), n in classes.items()), key=lambda g: (-g[0], g[1])
    )
    variants = ("rebalanced-batch", "proportional-batch", "same-batch")
    if not groups:
        note = "no replica can run: every hit tensor-parallel group lost all its GPUs or does not fit"
        return [_infeasible("nonuniform-tp", v, note) for v in variants]
    lead_tp, lead_hit, lead_n = groups[0]
    total = job.global_batch_size // c.micro_batch_size
    parts = [f"failures packed into {len(hits)} replica(s)"]
    for t, hit, n in groups:
        if hit:
            ranks = ",".join(str(r) for r in hit)
            padded = " (padded)" if padded_model(inputs.model, t) != inputs.model else ""
            parts.append(f"{n} with pipeline rank(s) {ranks} at tp {t}{padded}")
    if lost:
        parts.append(f"{lost} dropped (a whole tensor-parallel group lost)")
    if dropped - lost:
        parts.append(f"{dropped - lost} dropped (no degree fits in memory)")
    note = "; ".join(parts)
    extra = {(t, hit): ntp_sync_extra_s(inputs, timer, t, hit, m) for t, hit, _ in groups if hit}

    def gpus_of(t: int, hit: tuple[int, ...]) -> int:
        return c.cp * (c.tp * (c.pp - len(hit)) + t * len(hit))

    def assemble(variant: str, counts: list[int], keep_batch: bool = False) -> StrategyResult:
        running = sum(n for (_, _, n), k in zip(groups, counts) if k)
        pipe = max((timer.pipeline_s(hit, t, k) for (t, hit, _), k in zip(groups, counts) if k), default=0.0)
        lead = est(c.tp, running, counts[0] if counts[0] else m)
        tail = lead.step_time_s - lead.pipeline_time_s
        sync = max((extra[(t, hit)] for (t, hit, _), k in zip(groups, counts) if k and hit), default=0.0)
        layout = tuple((t, n, k) for (t, _, n), k in zip(groups, counts))
        fits = lead.fits and all(
            timer.degraded(t).fits[r] for (t, hit, _), k in zip(groups, counts) if k for r in hit
        )
        gpus = sum(n * gpus_of(t, hit) for (t, hit, n), k in zip(groups, counts) if k)
        batch = (
            job.global_batch_size
            if keep_batch
            else sum(n * k for (_, _, n), k in zip(groups, counts)) * c.micro_batch_size
        )
        return _result(
            "nonuniform-tp", variant, healthy, inputs, pipe + tail + sync, batch, gpus, fits, layout, note,
        )  # fmt: skip

    out = []
    # Rebalanced: the smallest leader count whose pipeline time lets every group together cover
    # the batch (each group can take the most micro-batches it finishes within that time); then the
    # reduced groups take only what the leaders leave over (none: they idle, as when dropped).
    running = sum(n for _, _, n in groups)
    lo, hi = round_up(-(-total // running), q) // q, round_up(-(-total // lead_n), q) // q
    best: list[int] = []
    while lo <= hi:
        mid = (lo + hi) // 2
        limit = timer.pipeline_s(lead_hit, lead_tp, mid * q)
        caps = [_largest_within(timer, hit, t, limit, mid * q, q) for t, hit, _ in groups[1:]]
        if lead_n * mid * q + sum(n * k for (_, _, n), k in zip(groups[1:], caps)) >= total:
            need = total - lead_n * mid * q
            counts = [mid * q]
            for (_, _, n), cap in zip(groups[1:], caps):
                k = min(cap, round_up(-(-max(need, 0) // n), q))
                counts.append(k)
                need -= n * k
            best, hi = counts, mid - 1
        else:
            lo = mid + 1
    if best:
        out.append(assemble("rebalanced-batch", best, keep_batch=True))
    else:
        out.append(_infeasible("nonuniform-tp", "rebalanced-batch", "no micro-batch split covers the batch"))
    # Proportional: every replica gets the most micro-batches it finishes in a healthy replica's
    # time with the plan's count (the hit ones fewer; the global batch shrinks by what they drop).
    limit = timer.pipeline_s((), c.tp, m)
    out.append(
        assemble("proportional-batch", [_largest_within(timer, hit, t, limit, m, q) for t, hit, _ in groups])
    )
    if dropped:
        out.append(
            _infeasible("nonuniform-tp", "same-batch", "a hit replica cannot run, so the batch must move")
        )
    else:
        out.append(assemble("same-batch", [m] * len(groups), keep_batch=True))
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
    packed = place(inputs.config, node.gpus_per_node, failure, packed=True)
    est = ShapeEstimator(inputs)
    timer = ReplicaTimer(inputs)
    out = drop_replica(inputs, healthy, damage, est)
    lost = len(damage.failed_nodes)
    planned = replan(inputs, healthy, lost, headroom_bytes)
    if isinstance(planned, str):
        out.append(_infeasible("replan", "", planned))
        out += nonuniform_tp(inputs, healthy, packed, est, timer)
        out.append(_infeasible("hot-spares", "", planned))
    else:
        out.append(planned)
        out += nonuniform_tp(inputs, healthy, packed, est, timer)
        out.append(
            replace(
                planned,
                name="hot-spares",
                note=f"{planned.note}, holding {lost} spare node(s) from the start; a failure swaps "
                "a spare in",
            )
        )
    return WhatIf(healthy, damage, failure, tuple(out), packed)


def check_never_faster(w: WhatIf) -> list[str]:
    """Strategies reported faster than the healthy plan (empty for a plan that is the best of its
    cluster; used by tests and as a warning)."""
    return [f"{s.name} {s.variant}".strip() for s in w.strategies if s.feasible and s.relative > 1.0 + 1e-9]
