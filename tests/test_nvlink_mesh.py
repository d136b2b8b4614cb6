"""NVLink meshes without NVSwitch (DGX-1's hybrid cube-mesh): a group's bandwidth follows its GPUs."""

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models import communication as comm
from cost_models.estimate import estimate
from cost_models.layers import layer_table
from cost_models.parallel import ParallelConfig
from cost_models.placement import Group, group
from planner.inputs.cluster_spec import NVLinkMesh
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import cluster_from_mapping, cluster_to_mapping, load_cluster

# nvidia-smi topo -m of an 8x V100-SXM2 DGX-1-style server (Oneflow-Inc/DLPerf Megatron-LM/README.md).
DGX1 = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def dgx1_node():
    return load_cluster("dgx1-v100", 1).groups[0]


def test_template_holds_the_cube_mesh():
    node = dgx1_node()
    assert node.nvlink_mesh is not None
    assert node.nvlink_mesh.links == DGX1
    assert node.nvlink_mesh.link_bandwidth_bytes_per_s == 25e9
    # Six links per GPU, 25 GB/s each: the per-GPU total the template states.
    assert all(sum(row) * 25e9 == node.intra_node_bandwidth_bytes_per_s for row in DGX1)


def test_ring_channels_hand_counted():
    # A pair: one channel per link (GPU0-GPU1 NV1, GPU0-GPU3 NV2).
    assert comm.mesh_ring_channels(DGX1, (0, 1)) == 1
    assert comm.mesh_ring_channels(DGX1, (0, 3)) == 2
    assert comm.mesh_ring_channels(DGX1, (0, 6)) == 0
    # A quad of the cube: every GPU has 4 links inside it, two rings each way.
    assert comm.mesh_ring_channels(DGX1, (0, 1, 2, 3)) == 4
    # {0,2,4,6}: the only ring is 0-2-6-4-0 (0-6 and 2-4 are not wired), once each way.
    assert comm.mesh_ring_channels(DGX1, (0, 2, 4, 6)) == 2
    # All eight: the white paper's three rings of single links, each used both ways.
    assert comm.mesh_ring_channels(DGX1, tuple(range(8))) == 6


def brute_force_rings(links, ranks):
    """Most rings through ``ranks`` (both directions of each) with every pair used at most its link
    count: every multiset of rings tried, up to the degree bound."""
    if len(ranks) == 2:
        return links[ranks[0]][ranks[1]]
    first, rest = ranks[0], ranks[1:]
    cycles = []
    for order in itertools.permutations(rest):
        if order[0] < order[-1]:
            path = (first, *order, first)
            if all(links[a][b] for a, b in itertools.pairwise(path)):
                cycles.append([tuple(sorted(e)) for e in itertools.pairwise(path)])
    bound = min(sum(links[r][q] for q in ranks) for r in ranks) // 2
    for count in range(bound, 0, -1):
        for chosen in itertools.combinations_with_replacement(range(len(cycles)), count):
            use = {}
            for k in chosen:
                for e in cycles[k]:
                    use[e] = use.get(e, 0) + 1
            if all(n <= links[a][b] for (a, b), n in use.items()):
                return 2 * count
    return 0


@pytest.mark.parametrize(
    "ranks", [(0, 1, 2), (0, 1, 2, 3), (0, 2, 4, 6), (1, 3, 5, 7), (0, 1, 4, 5), (0, 3, 4, 7)]
)
def test_ring_channels_equal_brute_force(ranks):
    assert comm.mesh_ring_channels(DGX1, ranks) == brute_force_rings(DGX1, ranks)


def test_two_rank_tensor_parallel_group_gets_one_link():
    node = dgx1_node()
    link = comm.link_for(group(ParallelConfig(tp=2), "tp"), node)
    # Slowest pair of {0,1},{2,3},{4,5},{6,7} is one 25 GB/s link; NCCL's achieved fraction applies.
    assert link.bandwidth_bytes_per_s == pytest.approx(25e9 * node.intra_node_efficiency)
    assert not link.crosses_network


def test_eight_rank_group_gets_all_six_links():
    node = dgx1_node()
    eight = comm.link_for(group(ParallelConfig(tp=8), "tp"), node)
    four = comm.link_for(group(ParallelConfig(tp=4), "tp"), node)
    two = comm.link_for(group(ParallelConfig(tp=2), "tp"), node)
    assert eight.bandwidth_bytes_per_s == pytest.approx(150e9 * node.intra_node_efficiency)
    assert four.bandwidth_bytes_per_s == pytest.approx(100e9 * node.intra_node_efficiency)
    assert two.bandwidth_bytes_per_s < four.bandwidth_bytes_per_s < eight.bandwidth_bytes_per_s


def test_strided_data_parallel_groups_follow_their_gpus():
    node = dgx1_node()
    # dp 4 x tp 2: data-parallel groups {0,2,4,6}, {1,3,5,7}: one ring each way, 50 GB/s.
    dp4 = comm.link_for(group(ParallelConfig(tp=2, dp=4), "dp"), node)
    assert dp4.bandwidth_bytes_per_s == pytest.approx(50e9 * node.intra_node_efficiency)
    # dp 2 x tp 4: {0,4},{1,5} have two links, {2,6},{3,7} one: the slowest pair sets the pace.
    dp2 = comm.link_for(group(ParallelConfig(tp=4, dp=2), "dp"), node)
    assert dp2.bandwidth_bytes_per_s == pytest.approx(25e9 * node.intra_node_efficiency)


def test_every_megatron_group_shape_has_a_ring():
    assert comm.mesh_problems(NVLinkMesh(links=DGX1, link_bandwidth_bytes_per_s=25e9)) == []


def test_other_clusters_unchanged():
    for template in ("dgx-a100", "dgx-h100", "gb200-nvl72", "mi300x-node"):
        node = load_cluster(template, 2).groups[0]
        assert node.nvlink_mesh is None
        for tp in (2, 4, 8):
            link = comm.link_for(group(ParallelConfig(tp=tp), "tp"), node)
            assert (
                link.bandwidth_bytes_per_s
                == node.intra_node_bandwidth_bytes_per_s * node.intra_node_efficiency
            )


def test_groups_leaving_the_node_keep_the_network_model():
    node = load_cluster("dgx1-v100", 2).groups[0]
    mesh_free = replace(node, nvlink_mesh=None)
    g = Group(1, 16)
    assert comm.link_for(g, node) == comm.link_for(g, mesh_free)
    assert comm.link_for(g, node).crosses_network


def test_small_tensor_parallel_pays_more_on_the_mesh():
    """tp 2 all-reduces run over one link on the cube mesh, so they cost more there than on a
    node with the same per-GPU NVLink total behind a switch."""
    model = load_model("gpt-1.7b")
    job = make_job(global_batch_size=16, seq_length=2048, precision="fp16")
    node = dgx1_node()
    switched = replace(node, nvlink_mesh=None)
    c = ParallelConfig(tp=2, dp=4)
    on_mesh = layer_table(model, job, c, node).dense.forward_comm_s
    behind_switch = layer_table(model, job, c, switched).dense.forward_comm_s
    assert on_mesh > 4 * behind_switch
    c8 = ParallelConfig(tp=8)
    assert layer_table(model, job, c8, node).dense.forward_comm_s == pytest.approx(
        layer_table(model, job, c8, switched).dense.forward_comm_s
    )
    # The whole estimate runs on the mesh node.
    assert estimate(model, load_cluster("dgx1-v100", 1), job, c).step_time_s > 0


def test_cluster_file_round_trips_the_mesh():
    cluster = load_cluster("dgx1-v100", 2)
    assert cluster_from_mapping(cluster_to_mapping(cluster), "round trip") == cluster


def mesh_cluster(links, **node):
    group = {
        "gpu": "v100-sxm2-32gb",
        "num_nodes": 1,
        "gpus_per_node": len(links),
        "intra_node_bandwidth_gb_per_s": 150,
        "intra_node_latency_us": 3,
        "inter_node_bandwidth_gb_per_s": 12.5,
        "inter_node_latency_us": 8,
        "intra_node_efficiency": 0.8,
        "inter_node_efficiency": 0.9,
        "nvlink_mesh": {"link_bandwidth_gb_per_s": 25, "links": [list(r) for r in links]},
        **node,
    }
    return {"schema_version": 1, "kind": "cluster", "groups": [group]}


@pytest.mark.parametrize(
    ("links", "node", "message"),
    [
        ([[0, 1], [1, 0], [0, 0]], {}, "needs 3 rows of 3"),
        ([[0, 1], [2, 0]], {}, "not symmetric"),
        ([[1, 1], [1, 0]], {}, "diagonal must be 0"),
        ([[0, -1], [-1, 0]], {}, "must not be negative"),
        ([[0, 99], [99, 0]], {}, "above the largest allowed"),
        ([[0, 7], [7, 0]], {}, "more than intra_node_bandwidth_gb_per_s"),
        ([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]], {}, "no ring over direct NVLinks"),
        ([[0, 1], [1, 0]], {"nvlink_domain_size": 1}, "must equal gpus_per_node"),
    ],
)
def test_bad_mesh_is_a_clear_error(links, node, message):
    with pytest.raises(SpecError, match=message):
        cluster_from_mapping(mesh_cluster(links, **node), "mesh.yaml")


def test_mesh_template_values_stay_cited():
    body = (Path(__file__).parents[1] / "hardware_profiles" / "clusters" / "dgx1-v100.yaml").read_text()
    for citation in ("DGX-1 with Tesla V100 System Architecture", "DLPerf", "SM70_NVLINK_WIDTH"):
        assert citation in body
