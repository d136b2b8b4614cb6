"""Rank placement: which ranks form each communication group, as a pure function of the degrees and
the rank order (:data:`cost_models.parallel.RANK_ORDERS`), and how a group sits in NVLink domains.

Megatron's default order is ``tp-cp-ep-dp-pp`` (tensor parallel fastest-varying, pipeline slowest;
Megatron-LM ``megatron/core/parallel_state.py`` and ``HyperCommGrid``). Expert parallelism folds
inside the ``tp x cp x dp`` ranks of a pipeline stage (expert grid ``etp x ep x edp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.parallel import PP_DP, ParallelConfig
from planner.inputs.cluster_spec import NodeGroup


@dataclass(frozen=True, slots=True)
class Group:
    """The ranks of one communication group: ``first + k * stride`` for ``k < size``; or, with
    ``inner`` > 0, blocks of ``inner`` ranks ``stride`` apart whose starts are ``outer_stride``
    apart (``first + (k % inner) * stride + (k // inner) * outer_stride``): the data-parallel
    group spanning cp and dp when pipeline stages sit between them (``tp-cp-ep-pp-dp``)."""

    stride: int
    size: int
    inner: int = 0
    outer_stride: int = 0

    def offsets(self) -> list[int]:
        """Member offsets from the group's first rank."""
        if not self.inner:
            return [k * self.stride for k in range(self.size)]
        return [
            (k % self.inner) * self.stride + (k // self.inner) * self.outer_stride for k in range(self.size)
        ]


def _dpcp_stride(c: ParallelConfig) -> int:
    """Rank distance between consecutive data-parallel replicas."""
    return c.tp * c.cp * (c.pp if c.rank_order == PP_DP else 1)


def dpcp_subgroup(c: ParallelConfig, what: str) -> Group | None:
    """A group of the dp-cp ranks in Megatron's enumeration (cp fastest, then dp; the instances of a
    partial distributed optimizer and HSDP's shard groups are consecutive runs of it): ``shard`` the
    first ``shard_degree`` of them, ``replicate`` every ``shard_degree``-th; None when the run does
    not map onto (at most) two strides."""
    if c.shard_degree < 1:  # instances above dp*cp (refused by cost_models.constraints.violations)
        return None
    step, count = (
        (1, c.shard_degree) if what == "shard" else (c.shard_degree, max(1, c.cp * c.dp // c.shard_degree))
    )
    outer = _dpcp_stride(c)
    if outer == c.tp * c.cp or count == 1:  # cp and dp contiguous: one stride
        return Group(c.tp * step, count)
    if step * count <= c.cp and c.cp % (step * count) == 0:  # inside one cp block
        return Group(c.tp * step, count)
    if step % c.cp == 0:  # whole cp blocks: dp strides only
        return Group(outer * (step // c.cp), count)
    if c.cp % step == 0 and count % (c.cp // step) == 0:  # part of each cp block, every dp replica
        return Group(c.tp * step, count, c.cp // step, outer)
    return None


def group(config: ParallelConfig, dim: str) -> Group:
    """Stride and size of the group along ``dim`` in the configuration's rank order (:data:`RANK_ORDERS`).

    ``dim`` is one of tp, cp, dp, pp, ``dpcp`` (the data-parallel gradient group, which spans cp
    and dp), ``ep`` (expert group, stride etp inside tp*cp*dp), ``edp`` (expert data-parallel),
    ``shard`` / ``replicate`` (the consecutive dp*cp ranks a sharded state is split over, and the
    groups across those: HSDP's shard and replica groups, or the distributed optimizer's instance
    and inter-instance groups) and ``eshard`` / ``ereplicate`` (the same over the expert
    data-parallel ranks).
    """
    c = config
    match dim:  # only the group asked for is built (the cost model asks ~300 times per estimate)
        case "tp":
            return Group(1, c.tp)
        case "cp":
            return Group(c.tp, c.cp)
        case "dp":
            return Group(_dpcp_stride(c), c.dp)
        case "dpcp":
            if c.cp == 1:
                return Group(_dpcp_stride(c), c.dp)
            if c.dp == 1 or _dpcp_stride(c) == c.tp * c.cp:  # cp and dp contiguous
                return Group(c.tp, c.cp * c.dp)
            return Group(c.tp, c.cp * c.dp, c.cp, _dpcp_stride(c))
        case "pp":
            return Group(c.tp * c.cp if c.rank_order == PP_DP else c.tp * c.cp * c.dp, c.pp)
        case "ep":
            return Group(c.expert_tp, c.ep)
        case "edp":
            return Group(_edp_stride(c), c.expert_dp)
        case "shard" | "replicate":
            sub = dpcp_subgroup(c, dim)
            if sub is None:  # refused by constraints.violations; a single stride as the fallback
                return Group(c.tp, c.shard_degree) if dim == "shard" else Group(c.tp * c.shard_degree, 1)
            return sub
        case "eshard":
            return Group(_edp_stride(c), c.expert_shard_degree)
        case "ereplicate":
            return Group(_edp_stride(c) * c.expert_shard_degree, max(1, c.optimizer_instances))
    raise KeyError(dim)


def _edp_stride(c: ParallelConfig) -> int:
    """Rank distance between consecutive expert data-parallel replicas (the expert grid puts pp
    between ep and dp in the tp-pp-dp mapping)."""
    return c.expert_tp * c.ep * (c.pp if c.rank_order == PP_DP else 1)


def group_ranks(config: ParallelConfig, dim: str, first: int = 0) -> list[int]:
    """Ranks of the ``dim`` group that contains rank ``first`` of the first pipeline stage's or
    replica's block (for tests and reports)."""
    g = group(config, dim)
    period = g.outer_stride * (g.size // g.inner) if g.inner else g.stride * g.size
    base = (first // period) * period + first % g.stride
    return [base + o for o in g.offsets()]


@dataclass(frozen=True, slots=True)
class Span:
    """Where a group's members sit: whether it leaves the NVLink domain, and members per domain."""

    crosses_network: bool
    members_per_domain: int


def span(g: Group, node: NodeGroup) -> Span:
    """How a group with ranks ``first + k*stride`` sits in NVLink domains of ``node``.

    Domains hold ``nvlink_domain_size`` consecutive ranks. A group fits in one domain when its
    extent ``stride*size`` divides into the domain; otherwise ``members_per_domain`` of its
    members share each domain (and so that many network links).
    """
    d = node.nvlink_domain_size
    if g.size == 1:
        return Span(False, 1)
    if g.inner:
        # Blocks of ``inner`` ranks: inside one domain when the whole pattern's period divides
        # into it; otherwise the members of one block (and of any further blocks that share the
        # domain) share its network links.
        period = g.outer_stride * (g.size // g.inner)
        if period <= d and d % period == 0:
            return Span(False, g.size)
        in_block = max(1, min(g.inner, d // g.stride)) if g.stride < d else 1
        blocks = max(1, min(g.size // g.inner, d // g.outer_stride)) if g.outer_stride < d else 1
        return Span(True, in_block * (blocks if in_block == g.inner else 1))
    extent = g.stride * g.size
    if extent <= d and d % extent == 0:
        return Span(False, g.size)
    per_domain = max(1, min(g.size, d // g.stride)) if g.stride < d else 1
    return Span(True, per_domain)
