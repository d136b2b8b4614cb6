"""Expected goodput of a plan over a run, the best number of hot spares, and failure-aware ranking.

Goodput with ``s`` spare nodes = (tokens/s of the plan's shape on the ``N - s`` active nodes, global
batch kept by accumulation) x (Daly's useful fraction for a job of that many GPUs, see
:mod:`.goodput`) x (average share of replicas running while nodes are in repair,
:func:`.goodput.availability`). The best ``s`` maximises it; ``planner search --failure-aware``
ranks plans by their best goodput instead of raw step time.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.errors import ConfigError
from planner.plans.plan_file import PlanInputs
from planner.resilience import goodput as gp
from planner.resilience.failures import replicas_per_node
from planner.resilience.strategies import ShapeEstimator, micro_step, node_group, round_up


@dataclass(frozen=True, slots=True)
class SparesOption:
    """The plan with ``spares`` nodes held back."""

    spares: int
    replicas: int
    tokens_per_s: float
    """Throughput with every active node healthy."""
    useful_fraction: float
    availability: float
    goodput_tokens_per_s: float


@dataclass(frozen=True, slots=True)
class PlanGoodput:
    """Checkpointing and goodput of one plan over a run."""

    healthy_tokens_per_s: float
    checkpointing: gp.Checkpointing
    """For the plan without spares."""
    failures_per_day: float
    options: tuple[SparesOption, ...]
    best: SparesOption

    @property
    def goodput_fraction(self) -> float:
        """Best goodput over healthy throughput."""
        return self.best.goodput_tokens_per_s / self.healthy_tokens_per_s


def plan_goodput(inputs: PlanInputs, fm: gp.FailureModel, spares: int | None = None) -> PlanGoodput:
    """Goodput for every useful spare count up to the expected nodes down (or exactly ``spares``)."""
    node = node_group(inputs)
    c, job = inputs.config, inputs.job
    g, nodes = node.gpus_per_node, node.num_nodes
    mp = c.tp * c.pp * c.cp
    est = ShapeEstimator(inputs)
    total = job.global_batch_size // c.micro_batch_size
    rpn = replicas_per_node(c, g)
    healthy = est(c.tp, c.dp, c.num_microbatches(job))
    if healthy is None:
        raise ConfigError("the plan's own shape breaks a constraint")
    candidates = [spares] if spares is not None else range(gp.spare_candidates(nodes, g, fm) + 1)
    options: list[SparesOption] = []
    seen: set[int] = set()
    for s in candidates:
        dp_s = (nodes - s) * g // mp
        if dp_s < 1:
            break
        if dp_s in seen and spares is None:
            continue  # more spares, same replicas: only the idle nodes grow
        seen.add(dp_s)
        e = est(c.tp, dp_s, round_up(-(-total // dp_s), micro_step(inputs)))
        if e is None:
            continue
        tokens = job.global_batch_size * job.seq_length / e.step_time_s
        active_nodes = -(-dp_s * mp // g)
        spare_nodes = nodes - active_nodes
        ck = gp.checkpointing(inputs.model, job, dp_s * mp, fm)
        avail = gp.availability(active_nodes, g, spare_nodes, dp_s, min(rpn, dp_s), fm)
        options.append(
            SparesOption(
                spare_nodes, dp_s, tokens, ck.useful_fraction, avail, tokens * ck.useful_fraction * avail
            )
        )
    if not options:
        raise ConfigError(f"no replica of the plan fits on {nodes} nodes minus {spares} spares")
    best = max(options, key=lambda o: (o.goodput_tokens_per_s, -o.spares))
    return PlanGoodput(
        healthy_tokens_per_s=healthy.tokens_per_s,
        checkpointing=gp.checkpointing(inputs.model, job, c.world_size, fm),
        failures_per_day=c.world_size * fm.gpu_failure_rate_per_h * 24.0,
        options=tuple(options),
        best=best,
    )


def rank_by_goodput(plans: list[PlanInputs], fm: gp.FailureModel) -> list[tuple[int, PlanGoodput]]:
    """(index into ``plans``, its goodput), best expected goodput first; ties keep the input order."""
    scored = [(i, plan_goodput(p, fm)) for i, p in enumerate(plans)]
    return sorted(scored, key=lambda t: (-t[1].best.goodput_tokens_per_s, t[0]))


FAILURE_AWARE_POOL = 10
"""Plans ``search --failure-aware`` asks the search for before re-ranking (at least ``--top``)."""


def failure_aware_rank(problem, ranked: list, restrictions, top: int, fm: gp.FailureModel | None = None):
    """Re-rank searched plans (:class:`planner.search.chain.RankedPlan`) by expected goodput with the
    default failure model; returns the best ``top`` and their goodputs
    (:func:`planner.resilience.views.goodput_summary` makes them JSON-ready)."""
    fm = fm or gp.FailureModel()
    inputs = [
        PlanInputs(
            problem.model,
            p.cluster,
            problem.job,
            p.estimate.config,
            p.stage_groups,
            restrictions.framework,
            restrictions.memory_headroom_bytes,
        )
        for p in ranked
    ]
    order = rank_by_goodput(inputs, fm)[:top]
    return [ranked[i] for i, _ in order], [g for _, g in order]
