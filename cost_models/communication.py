"""Alpha-beta models of collectives over the cluster topology.

Time of a collective = latency term (alpha per algorithm step) + bytes moved per rank divided by
the achieved link bandwidth (beta). Formulas: Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH" (ring all-reduce 2(n-1)/n * S / B with 2(n-1) steps;
reduce-scatter and all-gather (n-1)/n * S / B with n-1 steps); NCCL's double binary tree all-reduce
(NVIDIA NCCL 2.4 release blog, 2019): ~2 * S / B with 2*log2(n) latency steps. NCCL picks the faster
one, so all-reduce takes the minimum.

Topology (STYLE lesson 6): a group's link is NVLink when all members share an NVLink domain;
otherwise the network, where the ``k`` members in one domain use ``k`` NICs in parallel (NCCL
spreads its rings/channels across the node's NICs), capped by NVLink bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.parallel import Group, span
from planner.specs import NodeGroup


@dataclass(frozen=True, slots=True)
class Link:
    """Achieved bandwidth and per-step latency of the slowest link a group uses."""

    bandwidth_bytes_per_s: float
    latency_s: float
    crosses_network: bool


def link_for(g: Group, node: NodeGroup) -> Link:
    """The link used by a collective over group ``g`` on nodes of type ``node``."""
    intra = node.intra_node_bandwidth_bytes_per_s * node.intra_node_efficiency
    sp = span(g, node)
    if not sp.crosses_network:
        return Link(intra, node.intra_node_latency_s, False)
    inter = node.inter_node_bandwidth_bytes_per_s * node.inter_node_efficiency * sp.members_per_domain
    return Link(min(intra, inter), node.inter_node_latency_s, True)


def all_reduce_s(size_bytes: float, n: int, link: Link) -> float:
    """All-reduce of ``size_bytes`` per rank over ``n`` ranks: min(ring, tree)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    ring = 2 * (n - 1) / n * size_bytes / link.bandwidth_bytes_per_s + 2 * (n - 1) * link.latency_s
    tree = 2 * size_bytes / link.bandwidth_bytes_per_s + 2 * math.log2(n) * link.latency_s
    return min(ring, tree)


def reduce_scatter_s(size_bytes: float, n: int, link: Link) -> float:
    """Reduce-scatter of a ``size_bytes`` buffer (the full, unsharded size) over ``n`` ranks (ring)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return (n - 1) / n * size_bytes / link.bandwidth_bytes_per_s + (n - 1) * link.latency_s


def all_gather_s(size_bytes: float, n: int, link: Link) -> float:
    """All-gather producing a ``size_bytes`` buffer (the full size) on each of ``n`` ranks (ring)."""
    return reduce_scatter_s(size_bytes, n, link)


def all_to_all_s(size_bytes: float, n: int, link: Link) -> float:
    """All-to-all where each rank holds ``size_bytes`` and keeps 1/n of it (pairwise exchange)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return (n - 1) / n * size_bytes / link.bandwidth_bytes_per_s + (n - 1) * link.latency_s


def p2p_s(size_bytes: float, link: Link) -> float:
    """One point-to-point send of ``size_bytes``."""
    if size_bytes <= 0:
        return 0.0
    return link.latency_s + size_bytes / link.bandwidth_bytes_per_s


def overlapped_s(comm_s: float, window_s: float, slowdown: float, floor_s: float = 0.0) -> float:
    """Time a collective of ``comm_s`` adds when it is launched to overlap ``window_s`` of compute:
    the part the window does not hide (never less than ``floor_s``, e.g. a last bucket), plus the
    compute slowdown while the hidden part runs (``slowdown`` per second hidden: the SMs and HBM
    bandwidth NCCL takes, ``EfficiencySpec.comm_overlap_slowdown``)."""
    exposed = max(floor_s, comm_s - window_s)
    return exposed + slowdown * (comm_s - exposed)
