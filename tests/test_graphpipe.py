"""GraphPipe as its paper runs it (issue 57): identical branches take identical resources, and the
Summit node template of the paper's evaluation."""

from __future__ import annotations

import pytest

from cost_models.graph_costs import unit_layout
from planner.inputs.graph_model import load_graph_model
from planner.inputs.jobs import make_job
from planner.profiles.hardware import load_cluster
from planner.search.graph import search_graph
from planner.search.space import Restrictions


def _tower_gpus(plan, layout) -> dict[int, int]:
    """GPUs per micro-batch pipeline that each tower block (blocks 0-3) runs on, summed over its stages."""
    sg, out = plan.stage_graph, {}
    for i, units in enumerate(sg.stages):
        for b in {layout.block[u] for u in units}:
            if b < 4:
                out[b] = out.get(b, 0) + sg.tp_of(i, plan.config.tp) * sg.replicas_of(i)
    return out


def test_identical_towers_take_identical_resources():
    """mmt-4tower-4b on 8 DGX H100 with pp 4 or 8 and batch 128: before issue 57 two of the ten
    best branched plans gave two towers 1 GPU and two towers 2 (the knapsack over branches broke
    ties by group count); every branched plan now gives the four towers the same stages."""
    g = load_graph_model("mmt-4tower-4b")
    layout = unit_layout(g)
    res = search_graph(
        g, load_cluster("dgx-h100", 8), make_job(global_batch_size=128, seq_length=2048),
        Restrictions(pp=(4, 8), memory_headroom_bytes=2 * 2**30), top_k=10,
    )  # fmt: skip
    branched = [p for p in res.plans if any(p.modes)]
    assert branched
    for p in branched:
        gpus = _tower_gpus(p, layout)
        assert len(gpus) == 4 and len(set(gpus.values())) == 1, gpus
        shapes = {}
        for i, units in enumerate(p.stage_graph.stages):
            b = layout.block[units[0]]
            if b < 4:
                shapes.setdefault(b, []).append((len(units), p.stage_graph.tp_of(i, p.config.tp)))
        assert len({tuple(v) for v in shapes.values()}) == 1, shapes
    assert res.speedup_vs_sequential > 1.1


def test_summit_template():
    c = load_cluster("summit-v100", 8)
    node = c.groups[0]
    assert (node.gpu.name, node.gpus_per_node, node.nvlink_domain_size) == ("v100-sxm2-16gb", 6, 3)
    assert node.intra_node_bandwidth_bytes_per_s == 100e9  # 2 peers x 2 bricks x 25 GB/s
    assert node.inter_node_bandwidth_bytes_per_s == pytest.approx(25e9 / 6, rel=1e-4)  # 25 GB/s per node
    assert c.num_gpus == 48 and node.host_memory_bytes == 512e9
