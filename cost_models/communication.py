"""Alpha-beta models of collectives over the cluster topology.

Time of a collective = latency term (alpha per algorithm step) + bytes moved per rank divided by
the achieved link bandwidth (beta). Formulas: Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH" (ring all-reduce 2(n-1)/n * S / B with 2(n-1) steps;
reduce-scatter and all-gather (n-1)/n * S / B with n-1 steps); NCCL's double binary tree all-reduce
(NVIDIA NCCL 2.4 release blog, 2019): ~2 * S / B with 2*log2(n) latency steps. NCCL picks the faster
one, so all-reduce takes the minimum.

Topology (STYLE lesson 6): a group's link is NVLink when all members share an NVLink domain;
otherwise the network, where the ``k`` members in one domain use ``k`` NICs in parallel (NCCL
spreads its rings/channels across the node's NICs), capped by NVLink bandwidth. That aggregate is
right for the ring and tree collectives, whose data crosses each domain boundary once per channel;
an all-to-all is a pairwise exchange in which every rank sends the share bound for other domains
through its own NIC, so :func:`all_to_all_s` prices the two parts of the exchange separately.

Inside a node without NVSwitch (DGX-1's hybrid cube-mesh, ``NodeGroup.nvlink_mesh``) a GPU reaches
only some peers, so the bandwidth depends on which GPUs form the group: NCCL runs one ring per
channel over direct NVLinks, each channel one link wide, and its bus bandwidth is channels x link
bandwidth (NCCL 2.8 ``src/graph/search.cc``: ``ncclTopoCompute`` keeps the graph with the most
``nChannels * speedIntra``; ``src/graph/topo.h`` prices one Volta link at ``SM70_NVLINK_WIDTH``
21 GB/s). :func:`mesh_ring_channels` counts the rings that fit over a rank set's links.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from cost_models.placement import Group, span
from planner.inputs.cluster_spec import NodeGroup, NVLinkMesh


@dataclass(frozen=True, slots=True)
class Link:
    """Achieved bandwidth and per-step latency of the slowest link a group uses."""

    bandwidth_bytes_per_s: float
    latency_s: float
    crosses_network: bool
    members_per_domain: int = 1
    """Group members that share each NVLink domain (a group that crosses the network)."""
    nic_bandwidth_bytes_per_s: float = 0.0
    """Achieved bandwidth of one rank's own NIC (a group that crosses the network)."""
    domain_bandwidth_bytes_per_s: float = 0.0
    """Achieved per-GPU NVLink bandwidth inside a domain (a group that crosses the network)."""


def link_for(g: Group, node: NodeGroup) -> Link:
    """The link used by a collective over group ``g`` on nodes of type ``node``.

    On an NVLink mesh a group inside the node gets its ring channels' links (the slowest of the
    node's groups of that shape, since they run in lockstep); elsewhere, and for groups that leave
    the node, the per-GPU NVLink bandwidth as before.
    """
    intra = node.intra_node_bandwidth_bytes_per_s * node.intra_node_efficiency
    sp = span(g, node)
    if not sp.crosses_network:
        if node.nvlink_mesh is not None and g.size > 1:
            channels = mesh_group_channels(node.nvlink_mesh, g.stride, g.size)
            intra = channels * node.nvlink_mesh.link_bandwidth_bytes_per_s * node.intra_node_efficiency
        return Link(intra, node.intra_node_latency_s, False)
    nic = node.inter_node_bandwidth_bytes_per_s * node.inter_node_efficiency
    inter = nic * sp.members_per_domain
    return Link(min(intra, inter), node.inter_node_latency_s, True, sp.members_per_domain, nic, intra)


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


def _split_by_domain(link: Link) -> bool:
    """Whether a pairwise exchange over ``link`` splits into NIC and NVLink parts (a group that
    leaves its domain with several members in each)."""
    return link.crosses_network and link.members_per_domain > 1 and link.nic_bandwidth_bytes_per_s > 0


def all_to_all_s(size_bytes: float, n: int, link: Link) -> float:
    """All-to-all where each rank holds ``size_bytes`` and keeps 1/n of it (pairwise exchange).

    Inside one domain: ``(n-1)/n * S`` over the link. Across the network, with ``m`` members per
    domain, each rank sends ``(n-m)/n * S`` through its own NIC and ``(m-1)/n * S`` over NVLink at
    the same time, so the slower of the two sets the time. Unlike a ring, the members of a domain
    cannot pool their NICs: each NIC carries its own rank's off-domain share (NCCL's all-to-all is
    one send/recv per peer, ``ncclGroupStart``/``ncclSend``/``ncclRecv`` in nccl-tests
    ``src/alltoall.cu``; DeepSeek-V3 report, Sec. 3.2.2, prices the same split between its IB and
    NVLink halves of expert-parallel traffic)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    steps = (n - 1) * link.latency_s
    if not _split_by_domain(link):
        return (n - 1) / n * size_bytes / link.bandwidth_bytes_per_s + steps
    m = min(link.members_per_domain, n)
    off_domain = (n - m) / n * size_bytes / link.nic_bandwidth_bytes_per_s
    in_domain = (m - 1) / n * size_bytes / link.domain_bandwidth_bytes_per_s
    return max(off_domain, in_domain) + steps


def forwarded_all_to_all_s(size_bytes: float, n: int, link: Link, network_share: float) -> float:
    """All-to-all whose copies cross the network once per destination domain and fan out over
    NVLink there, as DeepEP's and HybridEP's normal (training) kernels do: a token bound for
    several experts in one remote domain is sent once over RDMA to the GPU on the same rail, which
    forwards it to the experts' GPUs over NVLink (DeepEP README, "Normal kernels with NVLink and
    RDMA forwarding"; DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.2). ``size_bytes`` is every
    routed copy of this rank's tokens; ``network_share`` the fraction of it that crosses the network
    after that de-duplication. Inside a domain the forwarded copies land on the ``m - 1`` GPUs
    other than the rail receiver. Within one domain it is the plain all-to-all."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    if not _split_by_domain(link):
        return all_to_all_s(size_bytes, n, link)
    m = min(link.members_per_domain, n)
    off_domain = network_share * size_bytes / link.nic_bandwidth_bytes_per_s
    in_domain = (m - 1) / m * size_bytes / link.domain_bandwidth_bytes_per_s
    return max(off_domain, in_domain) + (n - 1) * link.latency_s


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


MESH_SEARCH_STEPS = 100_000
"""Ring packings tried per rank set before the best found so far is kept: the same bounded search
NCCL does (``NCCL_SEARCH_TIMEOUT`` in NCCL 2.8 ``src/graph/search.cc``). Every rank set of an
8-GPU mesh finishes far below it (the degree bound is met on DGX-1), so the count is exact there."""


def _ring_cycles(
    links: tuple[tuple[int, ...], ...], ranks: tuple[int, ...]
) -> list[tuple[tuple[int, int], ...]]:
    """Every ring through all of ``ranks`` over direct links, once per direction pair: the first
    rank fixed, the second smaller than the last. Each ring is its edges as sorted rank pairs."""
    first, rest = ranks[0], ranks[1:]
    rings = []
    for order in itertools.permutations(rest):
        if order[0] > order[-1]:
            continue
        path = (first, *order, first)
        if all(links[a][b] > 0 for a, b in itertools.pairwise(path)):
            rings.append(tuple(sorted(tuple(sorted(e)) for e in itertools.pairwise(path))))
    return rings


@lru_cache(maxsize=4096)
def mesh_ring_channels(links: tuple[tuple[int, ...], ...], ranks: tuple[int, ...]) -> int:
    """NCCL ring channels, one link wide each, that fit over the direct links among ``ranks``.

    Two GPUs: one channel per link between them (its two directions carry the two ring hops).
    Three or more: each ring through all of them over direct links is used in both directions
    (one link each way per hop, links being full duplex), so the count is twice the most rings
    that fit with no link pair used more often than it has links; a GPU with ``d`` links into the
    set bounds it by ``d // 2`` rings. On DGX-1 this gives 6 channels over all 8 GPUs (the
    whitepaper's "three interwoven rings of single NVLink connections"), 4 over a fully connected
    quad, 2 over ranks {0,2,4,6}, and 1 or 2 over a pair (its ``NV1``/``NV2`` links). 0: no ring.
    """
    if len(ranks) < 2:
        return 0
    if len(ranks) == 2:
        return links[ranks[0]][ranks[1]]
    cycles = _ring_cycles(links, ranks)
    capacity = {(a, b): links[a][b] for a, b in itertools.combinations(sorted(ranks), 2)}

    def rings_bound() -> int:
        return min(sum(c for e, c in capacity.items() if r in e) for r in ranks) // 2

    upper = rings_bound()
    best = 0
    steps = 0

    def pack(start: int, count: int) -> None:
        nonlocal best, steps
        best = max(best, count)
        if best == upper or steps >= MESH_SEARCH_STEPS or count + rings_bound() <= best:
            return
        for k in range(start, len(cycles)):
            ring = cycles[k]
            if all(capacity[e] > 0 for e in ring):
                steps += 1
                for e in ring:
                    capacity[e] -= 1
                pack(k, count + 1)
                for e in ring:
                    capacity[e] += 1
                if best == upper or steps >= MESH_SEARCH_STEPS:
                    return

    pack(0, 0)
    return 2 * best


def mesh_rank_sets(num_gpus: int, stride: int, size: int) -> list[tuple[int, ...]]:
    """The local rank sets ``first + k*stride`` (k < size) of a node of ``num_gpus`` GPUs, for a
    group shape whose extent ``stride*size`` divides the node (Megatron's placement)."""
    extent = stride * size
    return [
        tuple(block + offset + k * stride for k in range(size))
        for block in range(0, num_gpus, extent)
        for offset in range(stride)
    ]


@lru_cache(maxsize=1024)
def mesh_group_channels(mesh: NVLinkMesh, stride: int, size: int) -> int:
    """Ring channels of the slowest rank set of shape (``stride``, ``size``) in a mesh node: the
    groups of one kind run their collectives together, so the slowest sets the time."""
    sets = mesh_rank_sets(len(mesh.links), stride, size)
    return min(mesh_ring_channels(mesh.links, ranks) for ranks in sets)


def mesh_problems(mesh: NVLinkMesh) -> list[str]:
    """Rank sets of a mesh node that Megatron may form but that have no ring over direct NVLinks
    (their collectives would leave NVLink, which the mesh model does not price), as readable
    lines; empty when every group shape is covered."""
    n = len(mesh.links)
    problems = []
    for size in range(2, n + 1):
        for stride in range(1, n // size + 1):
            if n % (stride * size):
                continue
            for ranks in mesh_rank_sets(n, stride, size):
                if mesh_ring_channels(mesh.links, ranks) == 0:
                    problems.append(f"GPUs {list(ranks)} (a group of {size} with stride {stride})")
    return problems
