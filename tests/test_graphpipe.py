"""GraphPipe as its paper runs it (issue 57): identical branches take identical resources, and the
Summit node template of the paper's evaluation."""

from __future__ import annotations

import pytest

from cost_models.graph_units import unit_layout
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


def test_tail_sweep_equals_the_cut_chain():
    """A branch's chain followed by a whole head, swept up to each end (the head's first p units in
    the branch's last stage), gives the rows of the extended chain built on its own, at every
    bottleneck, depth and memory limit (the shared-stage DP reads them from one chain's data)."""
    import numpy as np

    from cost_models.graph_units import unit_costs
    from cost_models.parallel import ParallelConfig
    from planner.search.graph_chain import ChainData, StageLimits
    from planner.search.graph_structure import Chain
    from tests.test_graph import towers_model

    g = towers_model(2, tower_layers=5, fusion_layers=4, tower_hidden=(1024, 2048))
    c = ParallelConfig(tp=1, pp=4, dp=1, micro_batch_size=4, recompute="none", optimizer_sharding="none")
    uc = unit_costs(
        g, make_job(global_batch_size=64, seq_length=1024), c, load_cluster("dgx-h100", 1).groups[0]
    )
    tower, head = tuple(range(5, 10)), tuple(range(10, len(uc.tau_s)))
    for capacity_gib in (80.0, 3.0, 2.2):
        lim = StageLimits(capacity_bytes=capacity_gib * 2**30, fragmentation=0.05, m=6)
        whole = ChainData(Chain(tower + head), uc, lim, tail_max=len(tower) - 1)
        checked = 0
        for p in range(1, len(head) + 1):
            own = ChainData(Chain(tower + head[:p]), uc, lim, tail_max=len(tower) - 1)
            for T in np.unique(own.segment_times())[::3]:
                for depth in (0, 1, 3, 7):
                    for most in (1, 2, 4):
                        want = own.sweep(float(T), depth, most)
                        got = whole.sweep_tail(float(T), depth, most, len(tower) + p)
                        rows = [r for r in want[1:] if r.any()]
                        assert [r[: len(tower) + p + 1].tolist() for r in got[1:]] == [
                            r.tolist() for r in rows
                        ]
                        checked += bool(rows)
        assert checked


def test_identical_branches_copy_one_solution():
    """The DP solves one branch of each class of identical branches and moves its stages onto the
    others' units: the four towers of mmt-4tower-4b get the same cuts, each on its own units."""
    g = load_graph_model("mmt-4tower-4b")
    layout = unit_layout(g)
    res = search_graph(
        g, load_cluster("dgx-h100", 4), make_job(global_batch_size=128, seq_length=2048),
        Restrictions(pp=(8,), memory_headroom_bytes=2 * 2**30), top_k=1,
    )  # fmt: skip
    sg = res.plans[0].stage_graph
    starts = {b: layout.block.index(b) for b in range(4)}
    cuts = {}
    for units in sg.stages:
        b = layout.block[units[0]]
        assert {layout.block[u] for u in units} <= {
            b,
            4,
        }  # a tower's stage holds its own units (and the head's)
        if b < 4:
            cuts.setdefault(b, []).append((units[0] - starts[b], sum(layout.block[u] == b for u in units)))
    assert len(cuts) == 4 and len({tuple(v) for v in cuts.values()}) == 1, cuts


def test_candle_uno_preset():
    """CANDLE-Uno as FlexFlow defines it (candle_uno.cc @ 7e45215b): five encoders of 8 dense layers
    of 4192 over 942, 5270, 2048, 5270 and 2048 features; 4 dense layers of 4192 over the concat of
    their outputs and two doses (5 x 4192 + 2); a 1-wide output; no biases."""
    g = load_graph_model("candle-uno")
    first = 942 + 2 * 5270 + 2 * 2048
    params = 4192 * first + 5 * 7 * 4192**2 + 4192 * (5 * 4192 + 2) + 3 * 4192**2 + 4192
    assert g.params_total == params == 820_948_704
    assert g.num_units == 45
    assert g.blocks[0].forward_flop_per_sample == 2 * 942 * 4192
    # on 8 Summit V100 (2 nodes x 4), batch 16: the two drugs' encoders take the same stages
    from scripts._paper_searches import summit

    layout = unit_layout(g)
    res = search_graph(
        g, summit(2), make_job(global_batch_size=16, seq_length=2048, precision="fp16"),
        Restrictions(memory_headroom_bytes=2 * 2**30), top_k=1,
    )  # fmt: skip
    best = res.plans[0]
    assert any(best.modes) and res.speedup_vs_sequential > 1.05
    names = [b.name for b in g.blocks]
    gpus: dict[str, int] = {}
    for i, units in enumerate(best.stage_graph.stages):
        for b in {layout.block[u] for u in units}:
            enc = names[b].rsplit("_", 1)[0]
            gpus[enc] = gpus.get(enc, 0) + best.stage_graph.tp_of(
                i, best.config.tp
            ) * best.stage_graph.replicas_of(i)
    assert gpus["drug1_descriptors"] == gpus["drug2_descriptors"]
    assert gpus["drug1_fingerprints"] == gpus["drug2_fingerprints"]
