"""The search space: every shape (degrees, micro-batch, recompute, sharding, schedule) that
satisfies Megatron-LM's constraints and the user's restrictions.

A shape is a :class:`~cost_models.parallel.ParallelConfig` without a layer partition. Shapes that
break a constraint are not errors: :func:`enumerate_shapes` yields only valid ones and counts the
rejected ones by reason, so the search can explain itself (STYLE lesson 5).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES, ParallelConfig
from planner.specs import ClusterSpec, JobSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class Restrictions:
    """What the user fixed or limited; ``None`` means free."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    optimizer_sharding: tuple[str, ...] | None = None
    schedule: tuple[str, ...] | None = None
    sequence_parallel: bool | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_micro_batch_size: int = 16
    allow_cross_node_tp: bool = False
    uneven_partitions: bool = True
    memory_headroom_bytes: float = 0.0
    """Memory every GPU must keep free beyond planner's reserve."""


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _pick(values: list, allowed: tuple | None) -> list:
    return [v for v in values if allowed is None or v in allowed]


@dataclass
class Rejections:
    """Shapes left out, counted by reason."""

    counts: Counter = field(default_factory=Counter)

    def add(self, reason: str) -> None:
        self.counts[reason] += 1


def enumerate_shapes(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Restrictions, rejected: Rejections | None = None
) -> Iterator[ParallelConfig]:
    """Every valid shape, in a fixed order (so ties break deterministically)."""
    rejected = rejected if rejected is not None else Rejections()
    world = cluster.num_gpus
    domain = min(g.nvlink_domain_size for g in cluster.groups)
    L = model.num_layers
    tps = _pick([t for t in _divisors(world) if t <= model.num_attention_heads], r.tp)
    for tp in tps:
        if r.max_tp and tp > r.max_tp:
            rejected.add(f"tp > --max-tp {r.max_tp}")
            continue
        if tp > domain and not r.allow_cross_node_tp:
            rejected.add(f"tp={tp} would leave the NVLink domain ({domain} GPUs)")
            continue
        if (
            model.num_attention_heads % tp
            or model.ffn_hidden_size % tp
            or (model.num_query_groups % tp and tp % model.num_query_groups)
        ):
            rejected.add(f"tp={tp} does not divide heads/groups/ffn")
            continue
        cps = [
            c
            for c in _divisors(world // tp)
            if c == 1 or (c & (c - 1) == 0 and job.seq_length % (2 * c) == 0 and job.seq_length // c >= 1024)
        ]
        for cp in _pick(cps, r.cp):
            for pp in _pick([p for p in _divisors(world // (tp * cp)) if p <= L], r.pp):
                if r.max_pp and pp > r.max_pp:
                    continue
                dp = world // (tp * cp * pp)
                if job.global_batch_size % dp:
                    rejected.add("global batch not divisible by dp")
                    continue
                yield from _inner(model, job, r, rejected, tp, cp, pp, dp)


def _inner(model, job, r: Restrictions, rejected: Rejections, tp, cp, pp, dp) -> Iterator[ParallelConfig]:
    L = model.num_layers
    per_replica = job.global_batch_size // dp
    mbss = _pick([b for b in _divisors(per_replica) if b <= r.max_micro_batch_size], r.micro_batch_size)
    eps = [1]
    if model.is_moe:
        eps = [e for e in _divisors(model.num_experts) if (tp * cp * dp) % e == 0]
    eps = _pick(eps, r.ep)
    sps = [tp > 1] if r.sequence_parallel is None else [r.sequence_parallel and tp > 1]
    # Dominated choices are searched only when asked for: selective recompute (flash attention keeps no
    # s^2 buffers, so it saves no memory and costs time), an unsharded optimizer (the same traffic as
    # the distributed optimizer, more memory) and GPipe (1F1B's bubble with more memory).
    recomputes = list(r.recompute) if r.recompute is not None else ["none", "full"]
    recomputes = [x for x in RECOMPUTE if x in recomputes]
    default_shardings = ["distributed", "zero2", "full"] if dp * cp > 1 else ["none"]
    shardings = [
        s
        for s in (list(r.optimizer_sharding) if r.optimizer_sharding is not None else default_shardings)
        if s in OPTIMIZER_SHARDING and (s != "full" or pp == 1)
    ]
    for mbs in mbss:
        m = per_replica // mbs
        schedules = []
        if pp == 1:
            schedules = [("1f1b", 1)]
        else:
            for s in ("1f1b", "zb-h1") if r.schedule is None else ("1f1b", "zb-h1", "gpipe"):
                schedules.append((s, 1))
            if m % pp == 0:
                for v in range(2, L // pp + 1):
                    if (L // pp) % v == 0 and L % pp == 0 and (r.vpp is None or v in r.vpp):
                        schedules.append(("interleaved", v))
        schedules = [
            (s, v)
            for s, v in schedules
            if (r.schedule is None or s in r.schedule)
            and (r.vpp is None or v in r.vpp or v == 1)
            and s in SCHEDULES
        ]
        for ep in eps:
            for sp in sps:
                for recompute in recomputes:
                    for sharding in shardings:
                        for schedule, v in schedules:
                            c = ParallelConfig(
                                tp=tp,
                                pp=pp,
                                dp=dp,
                                cp=cp,
                                ep=ep,
                                vpp=v,
                                micro_batch_size=mbs,
                                recompute=recompute,
                                sequence_parallel=sp,
                                optimizer_sharding=sharding,
                                schedule=schedule,
                            )
                            yield c
