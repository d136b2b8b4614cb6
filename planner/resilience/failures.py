"""Where failed GPUs sit in a plan's rank grid, and what each data-parallel replica keeps.

Ranks follow Megatron's order ``tp-cp-dp-pp`` (:mod:`cost_models.placement`): rank =
``tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))``; node ``n`` holds ranks ``[n g, (n + 1) g)`` for
``g`` GPUs per node. Failures are placed deterministically and spread over data-parallel replicas
first: a few failures among many replicas rarely share one, and it is the worst case for the
strategies that give up whole replicas. Failing nodes are picked greedily, each one touching as
few replicas already hit as possible (lowest node index on ties).

``packed=True`` places the same failures as a scheduler restarting the job would arrange them for
nonuniform tensor parallelism (Arfeen et al. 2025, arXiv:2504.06095): it chooses which nodes form
which replica, so the hit tensor-parallel groups go to as few replicas as possible, one per
pipeline stage (and context-parallel rank) of a replica before the next replica; a failed node
joins the replicas already hit where it can.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from cost_models.parallel import PP_DP, ParallelConfig
from planner.inputs.errors import ConfigError
from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureSpec:
    """What fails: ``gpus`` single GPUs or ``nodes`` whole nodes (exactly one is positive)."""

    gpus: int = 0
    nodes: int = 0


@dataclass(frozen=True, slots=True)
class Damage:
    """The failed hardware and its effect on each hit data-parallel replica."""

    failed_ranks: tuple[int, ...]
    failed_nodes: tuple[int, ...]
    """Nodes holding a failed GPU (drained as a whole by the strategies that need whole nodes)."""
    survivors: tuple[tuple[int, int], ...]
    """(replica, fewest surviving GPUs in any of that replica's tensor-parallel groups)."""
    stages: tuple[tuple[int, int, int], ...] = ()
    """(replica, pipeline rank, fewest surviving GPUs of that rank's tensor-parallel groups) for
    every hit stage, ascending."""

    @property
    def replicas(self) -> tuple[int, ...]:
        """Hit data-parallel replicas, ascending."""
        return tuple(r for r, _ in self.survivors)


def coords(c: ParallelConfig, rank: int) -> tuple[int, int, int, int]:
    """(tp_i, cp_i, dp_i, pp_i) of ``rank`` in the configuration's rank order (Megatron's
    ``tp-cp-ep-dp-pp``, or ``tp-cp-ep-pp-dp``: :data:`cost_models.parallel.RANK_ORDERS`)."""
    tp_i, rest = rank % c.tp, rank // c.tp
    cp_i, rest = rest % c.cp, rest // c.cp
    if c.rank_order == PP_DP:
        pp_i, dp_i = rest % c.pp, rest // c.pp
    else:
        dp_i, pp_i = rest % c.dp, rest // c.dp
    return tp_i, cp_i, dp_i, pp_i


def rank_of(c: ParallelConfig, tp_i: int, cp_i: int, dp_i: int, pp_i: int) -> int:
    """Inverse of :func:`coords`."""
    if c.rank_order == PP_DP:
        return tp_i + c.tp * (cp_i + c.cp * (pp_i + c.pp * dp_i))
    return tp_i + c.tp * (cp_i + c.cp * (dp_i + c.dp * pp_i))


def place(c: ParallelConfig, gpus_per_node: int, failure: FailureSpec, packed: bool = False) -> Damage:
    """Failed ranks and nodes for ``failure`` on the resolved configuration ``c``: spread over
    replicas, or ``packed`` into as few as possible (see the module docstring)."""
    world = c.world_size
    if (failure.gpus > 0) == (failure.nodes > 0):
        raise ConfigError("give exactly one of --fail-gpus K or --fail-nodes K, with K >= 1")
    if failure.gpus:
        if failure.gpus >= world:
            raise ConfigError(f"--fail-gpus {failure.gpus}: the plan has only {world} GPUs")
        ranks = []
        for k in range(failure.gpus):
            if packed:
                pp_i, rest = k % c.pp, k // c.pp
                cp_i, rest = rest % c.cp, rest // c.cp
                dp_i, tp_i = rest % c.dp, rest // c.dp
            else:
                dp_i, rest = k % c.dp, k // c.dp
                tp_i, rest = rest % c.tp, rest // c.tp
                cp_i, pp_i = rest % c.cp, rest // c.cp
            ranks.append(rank_of(c, tp_i, cp_i, dp_i, pp_i))
    else:
        num_nodes = world // gpus_per_node
        if failure.nodes >= num_nodes:
            raise ConfigError(f"--fail-nodes {failure.nodes}: the plan has only {num_nodes} nodes")
        replicas_of = [
            frozenset(coords(c, r)[2] for r in range(n * gpus_per_node, (n + 1) * gpus_per_node))
            for n in range(num_nodes)
        ]
        hits: Counter = Counter()
        chosen: set[int] = set()

        def spread_key(n: int) -> tuple:
            return (sum(hits[d] for d in replicas_of[n]), n)

        def packed_key(n: int) -> tuple:
            # replicas it would newly hit first; then the lowest replica, node index on ties
            return (sum(1 for d in replicas_of[n] if not hits[d]), min(replicas_of[n]), n)

        for _ in range(failure.nodes):
            best = min(
                (n for n in range(num_nodes) if n not in chosen), key=packed_key if packed else spread_key
            )
            chosen.add(best)
            hits.update(replicas_of[best])
        ranks = [r for n in sorted(chosen) for r in range(n * gpus_per_node, (n + 1) * gpus_per_node)]
    ranks = sorted(set(ranks))
    per_group: Counter = Counter()
    for r in ranks:
        _, cp_i, dp_i, pp_i = coords(c, r)
        per_group[(dp_i, pp_i, cp_i)] += 1
    worst: dict[int, int] = {}
    per_stage: dict[tuple[int, int], int] = {}
    for (dp_i, pp_i, _), n in per_group.items():
        worst[dp_i] = max(worst.get(dp_i, 0), n)
        per_stage[(dp_i, pp_i)] = max(per_stage.get((dp_i, pp_i), 0), n)
    return Damage(
        failed_ranks=tuple(ranks),
        failed_nodes=tuple(sorted({r // gpus_per_node for r in ranks})),
        survivors=tuple((d, c.tp - worst[d]) for d in sorted(worst)),
        stages=tuple((d, r, c.tp - n) for (d, r), n in sorted(per_stage.items())),
    )


def lower_tp(model: ModelSpec, c: ParallelConfig, survivors: int) -> int:
    """Largest tensor-parallel degree at most ``survivors`` that the model's shapes allow
    (heads, query groups and MLP width divisible as Megatron requires, see
    :func:`cost_models.constraints.violations`); 0 when none."""
    for t in range(min(survivors, c.tp), 0, -1):
        if model.num_attention_heads % t or model.ffn_hidden_size % t:
            continue
        g = model.num_query_groups
        if g % t and t % g:
            continue
        if model.is_moe and c.ep == 1 and model.moe_ffn_hidden_size % t:
            continue
        return t
    return 0


def replicas_per_node(c: ParallelConfig, gpus_per_node: int) -> int:
    """Data-parallel replicas one node failure hits: a node holds ``g / (tp cp)`` tensor x context
    groups of consecutive replicas when they are smaller than a node, else part of one replica."""
    return max(1, min(c.dp, gpus_per_node // (c.tp * c.cp)))
