"""One shape's layer partition (:mod:`planner.search.chain`, step 2): its exact memory feasibility,
the placement of node groups on mixed-GPU clusters, the partition itself (DP, or the DP that also
places node groups; cached per stage model), and a shape's memory variants: full recompute of
fewer layers, and activation offloading."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from cost_models.estimate import node_of_stage
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.search.partition import Partition, StageModel, dp_partition
from planner.search.placement_dp import placement_partition
from planner.search.space import Restrictions
from planner.search.stage_model import inflight_for, schedule_inflight, stage_model


def fits_memory(model, cluster, job, c: ParallelConfig, uneven: bool, headroom_bytes: float = 0.0) -> bool:
    """Whether some layer split of ``c`` (``uneven``: any split, else the even one) fits every
    stage's memory with ``headroom_bytes`` left, from the stage models (exact, before partitioning)."""
    L, p, v = model.num_layers, c.pp, c.vpp
    nodes = [node_of_stage(cluster, c, i) for i in range(p)]
    if cluster.is_heterogeneous and hetero_slots(cluster, c):
        nodes_options = [[g for g in cluster.groups] for _ in range(p)]
    else:
        nodes_options = [[n] for n in nodes]
    inflight = inflight_for(model, job, c, nodes[0])
    caps = []
    for i in range(p):
        cap = 0
        for node in nodes_options[i]:
            sm = stage_model(model, job, c, node, i, inflight[i], headroom_bytes)
            if v > 1 or not uneven or p == 1:
                n = L // p if L % p == 0 else 0
                cap = max(cap, n if n and sm.memory(n) <= sm.capacity_bytes else 0)
            else:
                cap = max(cap, sm.max_layers(L - (p - 1)))
        caps.append(cap)
    if v > 1 or not uneven or p == 1:
        return L % p == 0 and min(caps) >= 1
    return min(caps) >= 1 and sum(caps) >= L


def hetero_slots(cluster: ClusterSpec, c: ParallelConfig) -> list[int] | None:
    """Stages each node group holds when every group is made of whole stages (``tp x cp x dp``
    GPUs, whole nodes), in group order; None when one is not (the stages then follow rank order)."""
    per_stage = c.tp * c.cp * c.dp
    slots = []
    for g in cluster.groups:
        if g.num_gpus % per_stage or per_stage % g.gpus_per_node:
            return None
        slots.append(g.num_gpus // per_stage)
    return slots


def reorder_cluster(cluster: ClusterSpec, c: ParallelConfig, stage_groups: tuple[int, ...]) -> ClusterSpec:
    """The cluster with node blocks in stage order: stage i runs on nodes of group ``stage_groups[i]``."""
    per_stage_nodes = [(c.tp * c.cp * c.dp) // cluster.groups[g].gpus_per_node for g in stage_groups]
    blocks: list[NodeGroup] = []
    for g, n in zip(stage_groups, per_stage_nodes):
        base = cluster.groups[g]
        if blocks and blocks[-1].gpu is base.gpu and _same_links(blocks[-1], base):
            blocks[-1] = replace(blocks[-1], num_nodes=blocks[-1].num_nodes + n)
        else:
            blocks.append(replace(base, num_nodes=n))
    return replace(cluster, groups=tuple(blocks))


def _same_links(a: NodeGroup, b: NodeGroup) -> bool:
    return replace(a, num_nodes=0) == replace(b, num_nodes=0)


def partition_shape(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    c: ParallelConfig,
    uneven: bool = True,
    headroom_bytes: float = 0.0,
) -> tuple[ParallelConfig, ClusterSpec, tuple[int, ...]] | str:
    """Choose the layer partition (and node-group placement) of a shape; a reason string on failure."""
    L, p, v = model.num_layers, c.pp, c.vpp
    if p == 1:
        return c.with_(layers_per_stage=()), cluster, ()
    if v > 1 or not uneven:
        if L % (p * v):
            return f"num_layers ({L}) not divisible by pp*vpp ({p * v}) and uneven split disabled"
        return c.with_(layers_per_stage=()), cluster, ()
    _, part = solve_partition(model, cluster, job, c, headroom_bytes)
    if part is None:
        return "no layer partition fits in memory"
    if part.stage_groups:
        new_cluster = reorder_cluster(cluster, c, part.stage_groups)
        return c.with_(layers_per_stage=canonical_split(part.layers)), new_cluster, part.stage_groups
    return c.with_(layers_per_stage=canonical_split(part.layers)), cluster, ()


def solve_partition(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, headroom_bytes: float
) -> tuple[list[StageModel], Partition | None]:
    """The chosen partition of a pipelined shape split unevenly (one chunk per rank), with the model
    of every stage where it runs; on mixed GPU types that fill whole node groups, the placement DP
    also chooses each stage's group. Memoised on the solver's inputs."""
    L, p = model.num_layers, c.pp
    m = c.num_microbatches(job)
    inflight = schedule_inflight(c.schedule, p, m, 1)
    slots = hetero_slots(cluster, c) if cluster.is_heterogeneous else None
    if slots is not None and len(slots) > 1:
        options = [
            [stage_model(model, job, c, g, i, inflight[i], headroom_bytes) for g in cluster.groups]
            for i in range(p)
        ]
        part = _cached_placement(tuple(tuple(row) for row in options), tuple(slots), L, m)
        if part is None:
            return [], None
        return [options[i][g] for i, g in enumerate(part.stage_groups)], part
    stages = [
        stage_model(model, job, c, node_of_stage(cluster, c, i), i, inflight[i], headroom_bytes)
        for i in range(p)
    ]
    return stages, _cached_dp(tuple(stages), L, m)


@lru_cache(maxsize=4096)
def _cached_placement(options: tuple, slots: tuple, L: int, m: int) -> Partition | None:
    """Shapes that differ only in what the partition does not see (cp/dp split, sharding of a
    stage that fits either way) pose the same problem: solve it once. The placement DP solves the
    ILP's problem exactly (tests: both against brute force over every placement)."""
    return placement_partition([list(row) for row in options], list(slots), L, m)


@lru_cache(maxsize=4096)
def _cached_dp(stages: tuple, L: int, m: int) -> Partition | None:
    return dp_partition(list(stages), L, m)


def canonical_split(layers: tuple[int, ...]) -> tuple[int, ...]:
    """Even partitions are stored as () (Megatron's default split)."""
    return () if len(set(layers)) == 1 else tuple(layers)


def full_recompute_variants(
    model: ModelSpec, c: ParallelConfig, partial: bool = True, every_nth: bool = False
) -> list[ParallelConfig]:
    """Full recompute of all layers, and of fewer layers per stage where the framework has it:
    any count (``partial``, Megatron --recompute-num-layers: 1, 2, and a quarter, half and three
    quarters of a stage), or every n-th block (``every_nth``, torchtitan ``selective_ac_option``:
    the counts ``S / n`` of an evenly split S-layer stage nearest those, with n dividing S, so every
    stage recomputes exactly that many; such variants are partitioned evenly, :func:`restrict_for`)."""
    if c.recompute != "full" or not (partial or every_nth):
        return [c]
    L, stages = model.num_layers, c.pp * c.vpp
    per_stage = math.ceil(L / stages)
    targets = (1, 2, per_stage // 4, per_stage // 2, (3 * per_stage) // 4)
    if partial:
        ks = sorted({k for k in targets if 0 < k < per_stage})
    elif L % stages:
        ks = []
    else:
        exact = [per_stage // n for n in range(2, per_stage + 1) if per_stage % n == 0]
        ks = sorted({min(exact, key=lambda k: (abs(k - t), k)) for t in targets if t > 0}) if exact else []
    return [c.with_(recompute_num_layers=k) for k in ks] + [c]


def offload_variants(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, r: Restrictions
) -> list[ParallelConfig]:
    """``c`` with the activations of its first k layers offloaded to host memory, for each k of
    ``r.offload_layers`` (``planner search --offload-layers``; none unless asked), where the target
    framework offloads (Megatron ``--cpu-offloading-num-layers``), the shape allows it (pp 1, no
    recompute: Megatron-Core's TransformerConfig refuses the others; k fewer than all layers), every
    GPU has a host link in its file, and the framework does not refuse it otherwise (Megatron: CUDA
    graphs other than over the full iteration). Offloading trades the copies' exposed time
    (:func:`cost_models.estimate.offload_terms`) for GPU memory, like recompute; the search prices
    each count and keeps what fits fastest; a count whose activations overflow the node's host
    memory (``Estimate.host_fits``: a Llama 3.1 405B layer at sequence 8,192 and tp 1 parks 4.5 GB
    per GPU, 125 layers on eight GPUs 4.5 TB against a DGX H100's 2 TB) is refused when the shape
    is evaluated. Not searched by default: the copies of a node's GPUs share its host memory
    bandwidth and PCIe switches, which planner does not price (docs/search.md)."""
    if not r.offload_layers or not r.target.capabilities.activation_offload:
        return []
    if c.pp != 1 or c.recompute != "none" or c.offload_layers:
        return []
    if any(not g.gpu.host_link_bytes_per_s for g in cluster.groups):
        return []
    L = model.num_layers
    variants = [c.with_(offload_layers=k) for k in sorted({k for k in r.offload_layers if 0 < k < L})]
    return [v for v in variants if not r.target.violations(model, cluster, job, v)]


def memory_variants(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: ParallelConfig, r: Restrictions
) -> list[ParallelConfig]:
    """What the search prices of one shape: its full-recompute variants
    (:func:`full_recompute_variants`) and its offloading variants (:func:`offload_variants`); with
    ``--offload-layers`` lacking 0, only the offloading ones."""
    offloading = offload_variants(model, cluster, job, c, r)
    if r.offload_layers is not None and 0 not in r.offload_layers:
        return offloading
    cap = r.target.capabilities
    return full_recompute_variants(model, c, cap.partial_recompute, cap.every_nth_recompute) + offloading


def restrict_for(c: ParallelConfig, r: Restrictions) -> Restrictions:
    """``r`` for one candidate: every-n-th-block recompute (a framework without arbitrary partial
    recompute) is searched on even splits only, where ``S // n`` is exact on every stage."""
    if c.recompute_num_layers and not r.target.capabilities.partial_recompute and r.uneven_partitions:
        return replace(r, uneven_partitions=False)
    return r
