"""The search space: every shape (degrees, micro-batch, recompute, sharding, schedule) that
satisfies Megatron-LM's constraints, the user's restrictions, and what the target framework runs
(:mod:`planner.frameworks`: ``megatron`` by default, ``any`` for the cost model's whole space).

A shape is a :class:`~cost_models.parallel.ParallelConfig` without a layer partition. Shapes that
break a constraint are not errors: :func:`enumerate_shapes` yields only valid ones and counts the
rejected ones by reason, so the search can explain itself (STYLE lesson 5).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cost_models.constraints import violations
from cost_models.parallel import (
    OPTIMIZER_SHARDING,
    RANK_ORDERS,
    RECOMPUTE,
    SCHEDULES,
    ParallelConfig,
    memory_modules,
)
from planner.frameworks import DEFAULT_FRAMEWORK, Framework, get_framework
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import SpecError, UsageError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


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
    recompute_modules: tuple[str, ...] | None = None
    """Module list of the selective variant (``ParallelConfig.recompute_modules``); None: the
    model's cheap modules (:func:`cost_models.parallel.memory_modules`)."""
    optimizer_sharding: tuple[str, ...] | None = None
    rank_order: tuple[str, ...] | None = None
    """Rank layouts to search (:data:`cost_models.parallel.RANK_ORDERS`); None: Megatron's default."""
    optimizer_instances: tuple[int, ...] | None = None
    """Distributed-optimizer instance counts to search (``ParallelConfig.optimizer_instances``);
    None: 1 (the optimizer sharded over all data-parallel ranks)."""
    offload_layers: tuple[int, ...] | None = None
    """Layer counts whose activations may be offloaded to host memory, 0 for none
    (:func:`planner.search.shape_partition.offload_variants`); None: no offloading."""
    schedule: tuple[str, ...] | None = None
    sequence_parallel: bool | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_micro_batch_size: int = 16
    allow_cross_node_tp: bool = False
    uneven_partitions: bool = True
    memory_headroom_bytes: float = 0.0
    """Memory every GPU must keep free beyond planner's reserve."""
    framework: str = DEFAULT_FRAMEWORK
    """Target framework (:data:`planner.frameworks.FRAMEWORKS`): only what it runs is searched."""

    @property
    def target(self) -> Framework:
        """The target framework."""
        return get_framework(self.framework)

    def check_framework(self, cluster: ClusterSpec, job: JobSpec) -> None:
        """Usage errors for restrictions outside the framework's space, and a spec error when the
        problem itself (precision, mixed GPU types) is one the framework cannot run."""
        fw, cap = self.target, self.target.capabilities
        fw.check_choices("--schedule", self.schedule, cap.schedules)
        fw.check_choices("--optimizer-sharding", self.optimizer_sharding, cap.optimizer_sharding)
        fw.check_choices("--recompute", self.recompute, cap.recompute)
        if self.recompute_modules is not None:
            if not cap.recompute_modules:
                raise UsageError(
                    f"--recompute-modules: {fw.title} has no recompute module list; drop the flag "
                    "or pick --framework megatron"
                )
            if self.recompute is not None and "selective" not in self.recompute:
                raise UsageError("--recompute-modules needs selective among --recompute")
        fw.check_choices("--rank-order", self.rank_order, cap.rank_orders)
        if any(n > 1 for n in self.optimizer_instances or ()) and not cap.partial_distributed_optimizer:
            raise UsageError(
                f"--optimizer-instances: {fw.title} shards the distributed optimizer over all "
                "data-parallel ranks; give --optimizer-instances 1, drop the flag or pick --framework megatron"
            )
        if (
            self.optimizer_instances is not None
            and self.optimizer_sharding is not None
            and not ("distributed" in self.optimizer_sharding or self.optimizer_instances == (1,))
        ):
            raise UsageError("--optimizer-instances needs distributed among --optimizer-sharding")
        if any(self.offload_layers or ()) and not cap.activation_offload:
            raise UsageError(
                f"--offload-layers: {fw.title} has no activation offloading to host memory; "
                "give --offload-layers 0, drop the flag or pick --framework megatron"
            )
        if self.sequence_parallel is False and not cap.sequence_parallel_optional:
            fw.check_choices("--no-sequence-parallel", ("off",), ("on",))
        for flag, values, allowed in (
            ("--cp", self.cp, cap.context_parallel),
            ("--ep", self.ep, cap.expert_parallel),
        ):
            if values and not allowed and any(v > 1 for v in values):
                fw.check_choices(flag, tuple(str(v) for v in values if v > 1), ("1",))
        if job.tp_comm_overlap and not cap.tp_comm_overlap:
            raise UsageError(
                f"--tp-comm-overlap: {fw.title} launches no overlap of tensor-parallel communication "
                "with GEMMs; drop the flag or pick --framework megatron"
            )
        if cap.eager_ops is not None and job.eager_ops not in cap.eager_ops:
            raise UsageError(
                f"--eager-ops {','.join(job.eager_ops) or '(none)'}: {fw.title} runs {cap.eager_text()}; "
                "change the flag or pick another --framework"
            )
        if job.precision not in cap.precisions:
            raise SpecError(
                f"{fw.title} has no {job.precision} training (it runs {', '.join(cap.precisions)})"
            )
        if len({g.gpu.name for g in cluster.groups}) > 1 and not cap.heterogeneous_gpus:
            raise SpecError(
                f"{fw.title} cannot place pipeline stages on different GPU types; "
                "plan each GPU type as its own job, or use --framework megatron"
            )


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _pick(values: list, allowed: tuple | None) -> list:
    return [v for v in values if allowed is None or v in allowed]


def _pick_noting(
    values: list, allowed: tuple | None, rejected: Rejections, why: Callable[[int], str]
) -> list:
    """:func:`_pick`, and each requested value that is not a candidate counted under ``why(value)``
    (so ``--tp 3`` says why no shape has tp 3 instead of leaving nothing to report)."""
    if allowed is not None:
        for v in sorted(set(allowed) - set(values)):
            rejected.add(why(v))
    return _pick(values, allowed)


@dataclass
class Rejections:
    """Shapes left out, counted by reason."""

    counts: Counter = field(default_factory=Counter)
    configs: list[tuple[ParallelConfig, str]] | None = None
    """When a list: every complete configuration left out, with its reason (``search --csv``)."""

    def add(self, reason: str, config: ParallelConfig | None = None) -> None:
        self.counts[reason] += 1
        if config is not None and self.configs is not None:
            self.configs.append((config, reason))


def enumerate_shapes(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Restrictions, rejected: Rejections | None = None
) -> Iterator[ParallelConfig]:
    """Every valid shape, in a fixed order (so ties break deterministically)."""
    rejected = rejected if rejected is not None else Rejections()
    r.check_framework(cluster, job)
    fw = r.target
    world = cluster.num_gpus
    domain = min(g.nvlink_domain_size for g in cluster.groups)
    L = model.num_layers

    def why_tp(tp: int) -> str:
        if world % tp:
            heads = f"heads {model.num_attention_heads} / " if model.num_attention_heads % tp else ""
            return f"tp={tp} does not divide {heads}the world size {world}"
        return f"tp={tp} exceeds the attention heads ({model.num_attention_heads})"

    tps = _pick_noting([t for t in divisors(world) if t <= model.num_attention_heads], r.tp, rejected, why_tp)
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
            what = [
                f"{name} {n}"
                for name, n, bad in (
                    ("heads", model.num_attention_heads, model.num_attention_heads % tp),
                    ("ffn", model.ffn_hidden_size, model.ffn_hidden_size % tp),
                    (
                        "query groups",
                        model.num_query_groups,
                        model.num_query_groups % tp and tp % model.num_query_groups,
                    ),
                )
                if bad
            ]
            rejected.add(f"tp={tp} does not divide {' / '.join(what)}")
            continue
        cps = [
            c
            for c in divisors(world // tp)
            if c == 1 or (c & (c - 1) == 0 and job.seq_length % (2 * c) == 0 and job.seq_length // c >= 1024)
        ]

        def why_cp(cp: int) -> str:
            if (world // tp) % cp:
                return f"cp={cp} does not divide the {world // tp} GPUs left by tp"
            if cp & (cp - 1):
                return f"cp={cp} is not a power of two"
            return f"cp={cp} needs seq_length divisible by {2 * cp} with at least 1024 tokens per rank"

        def why_pp(pp: int) -> str:
            if pp > L:
                return f"pp={pp} exceeds the layers ({L})"
            if world % pp:
                return f"pp={pp} does not divide the world size {world}"
            return f"pp={pp} does not divide the GPUs left by tp x cp"

        for cp in _pick_noting(cps, r.cp, rejected, why_cp):
            pps = _pick_noting([p for p in divisors(world // (tp * cp)) if p <= L], r.pp, rejected, why_pp)
            for pp in pps:
                if r.max_pp and pp > r.max_pp:
                    continue
                dp = world // (tp * cp * pp)
                if job.global_batch_size % dp:
                    rejected.add("global batch not divisible by dp")
                    continue
                shapes = _inner(model, job, r, rejected, tp, cp, pp, dp)
                for expand in (_instance_variants(r.optimizer_instances), _order_variants(r.rank_order)):
                    shapes = _expanded(shapes, expand, rejected, model, cluster, job)
                for c in _with_hsdp(shapes, domain, fw):
                    reasons = fw.violations(model, cluster, job, c)
                    if reasons:
                        rejected.add(reasons[0], c)
                    else:
                        yield c


def _expanded(
    configs: Iterator[ParallelConfig],
    expand: Callable[[ParallelConfig], list[ParallelConfig]],
    rejected: Rejections,
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
) -> Iterator[ParallelConfig]:
    """Each shape replaced by its variants (``expand``); a variant other than the shape itself that
    breaks a constraint is counted among the rejections with its reason."""
    for c in configs:
        for variant in expand(c):
            reasons = violations(model, cluster, job, variant) if variant != c else []
            if reasons:
                rejected.add(reasons[0], variant)
            else:
                yield variant


def _instance_variants(counts: tuple[int, ...] | None) -> Callable[[ParallelConfig], list[ParallelConfig]]:
    """Each distributed-optimizer shape once per asked instance count (``--optimizer-instances``;
    one that does not divide dp*cp or the expert data-parallel degree is rejected); other
    shardings as they come."""

    def expand(c: ParallelConfig) -> list[ParallelConfig]:
        if counts is None or c.optimizer_sharding != "distributed":
            return [c]
        return [c.with_(optimizer_instances=n) for n in sorted(set(counts))]

    return expand


def _order_variants(orders: tuple[str, ...] | None) -> Callable[[ParallelConfig], list[ParallelConfig]]:
    """Each shape once per asked rank layout (``--rank-order``; one the constraints refuse for the
    shape, such as mixed GPU types, an NVLink mesh or a sharded group that does not map, is
    rejected). Shapes whose pp or dp is 1 lay out the same in both orders: once, in the first asked."""

    def expand(c: ParallelConfig) -> list[ParallelConfig]:
        if orders is None:
            return [c]
        wanted = [o for o in RANK_ORDERS if o in orders]
        if c.pp == 1 or c.dp == 1:
            wanted = wanted[:1]
        return [c.with_(rank_order=o) for o in wanted]

    return expand


def _with_hsdp(configs: Iterator[ParallelConfig], domain: int, fw: Framework) -> Iterator[ParallelConfig]:
    """Each fully sharded shape, then (where the framework runs HSDP) the same shape sharded inside
    one NVLink domain and replicated across domains (``fsdp_shard`` = the domain's dp*cp ranks):
    per-layer gathers on NVLink, one all-reduce of the gradient shard over the network."""
    for c in configs:
        yield c
        shard = domain // c.tp if domain % c.tp == 0 else 0
        if (
            fw.capabilities.hsdp
            and c.optimizer_sharding == "full"
            and shard > c.cp
            and shard % c.cp == 0
            and c.dp * c.cp > shard
            and (c.dp * c.cp) % shard == 0
        ):
            yield c.with_(fsdp_shard=shard)


def _inner(model, job, r: Restrictions, rejected: Rejections, tp, cp, pp, dp) -> Iterator[ParallelConfig]:
    cap = r.target.capabilities
    L = model.num_layers
    per_replica = job.global_batch_size // dp

    def why_mbs(b: int) -> str:
        if per_replica % b:
            return f"micro-batch size {b} does not divide the batch per replica (gbs / dp)"
        return f"micro-batch size {b} exceeds --max-micro-batch-size {r.max_micro_batch_size}"

    mbss = _pick_noting(
        [b for b in divisors(per_replica) if b <= r.max_micro_batch_size],
        r.micro_batch_size,
        rejected,
        why_mbs,
    )
    eps = [1]
    if model.is_moe:
        eps = [e for e in divisors(model.num_experts) if (tp * cp * dp) % e == 0]
    eps = _pick(eps, r.ep)
    sps = [tp > 1] if r.sequence_parallel is None else [r.sequence_parallel and tp > 1]
    if not cap.sequence_parallel_optional:
        sps = [tp > 1]
    # Dominated choices are searched only when asked for: selective recompute (flash attention keeps no
    # s^2 buffers, so it saves no memory and costs time), an unsharded optimizer (the same traffic as
    # the distributed optimizer, more memory) and GPipe (1F1B's bubble with more memory).
    recomputes = list(r.recompute) if r.recompute is not None else ["none", "full"]
    recomputes = [x for x in RECOMPUTE if x in recomputes and x in cap.recompute]
    # Selective recompute of the cheap output-discarding modules (MoE activation, separate norms,
    # MLA up projections) is not dominated: it drops the widest activations of MoE and MLA layers
    # for memory-bound re-runs. Searched by default where the framework launches it.
    variants: list[tuple[str, tuple[str, ...]]] = [(x, ()) for x in recomputes]
    cheap = memory_modules(model, job) if cap.recompute_modules else ()
    if r.recompute_modules is not None:
        cheap = r.recompute_modules  # the user's list (checked against the framework above)
    selective = ("selective", cheap)
    if (
        (cheap or r.recompute_modules is not None)
        and (r.recompute is None or "selective" in r.recompute)
        and "selective" in cap.recompute
        and selective not in variants
    ):
        variants.append(selective)
    # ZeRO-1 where the framework has it, else plain data parallelism (DDP), plus ZeRO-2 and FSDP.
    first = "distributed" if "distributed" in cap.optimizer_sharding else "none"
    default_shardings = [first, "zero2", "full"] if dp * cp > 1 else ["none"]
    shardings = [
        s
        for s in (list(r.optimizer_sharding) if r.optimizer_sharding is not None else default_shardings)
        if s in OPTIMIZER_SHARDING
        and s in cap.optimizer_sharding
        and (s != "full" or pp == 1)
        and (pp == 1 or s in cap.sharding_with_pipeline)
    ]
    for mbs in mbss:
        m = per_replica // mbs
        schedules = []
        if pp == 1:
            schedules = [("1f1b", 1)]
        else:
            # GPipe and ZB-H2 (twice the activations; no pinned framework runs it) only when asked for
            for s in ("1f1b", "zb-h1") if r.schedule is None else ("1f1b", "zb-h1", "gpipe", "zb-h2"):
                schedules.append((s, 1))
            if m % pp == 0:
                for v in range(2, L // pp + 1):
                    if (L // pp) % v == 0 and L % pp == 0 and (r.vpp is None or v in r.vpp):
                        schedules.append(("interleaved", v))
            # ZB-V: two chunks per rank as a V (torchtitan's ZBVZeroBubble), any micro-batch count
            if L % (2 * pp) == 0 and (r.vpp is None or 2 in r.vpp):
                schedules.append(("zb-v", 2))
        schedules = [
            (s, v)
            for s, v in schedules
            if (r.schedule is None or s in r.schedule)
            and (r.vpp is None or v in r.vpp or v == 1)
            and s in SCHEDULES
            and (pp == 1 or s in cap.schedules)
        ]
        for ep in eps:
            for sp in sps:
                for recompute, modules in variants:
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
                                recompute_modules=modules,
                                sequence_parallel=sp,
                                optimizer_sharding=sharding,
                                schedule=schedule,
                            )
                            yield c
