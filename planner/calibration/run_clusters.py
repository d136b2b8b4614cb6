"""The cluster a published run ran on, as planner inputs (:func:`planner.calibration.cases.cases`
through :func:`planner.calibration.run_records`): the node template of the GPU it names (A100 and
H100 by memory size), the per-node inter-node links its record states, and the older systems no
template describes (V100 DGX-1 nodes, Jean Zay's Omni-Path). Every rule records what it assumed in
the case's notes."""

from __future__ import annotations

import re
from dataclasses import replace

from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import PlannerError
from planner.profiles.hardware import load_cluster, load_gpu, load_template

TEMPLATES = (
    # (substring of the run's GPU name, node template, GPU type when the template's differs)
    ("gb300", "gb300-nvl72", None),
    ("gb200", "gb200-nvl72", None),
    ("b300", "dgx-b300", None),
    ("b200", "dgx-b200", None),
    ("h200", "dgx-h200", None),
    ("mi355x", "mi355x-node", None),
    ("mi300x", "mi300x-node", None),
)
"""Node template of each GPU a published run names (A100 and H100 are handled by memory size)."""


def gpu_family(gpu: str) -> str:
    g = gpu.lower()
    for fam in ("a100", "h100", "h200", "gb300", "gb200", "b300", "b200", "mi355x", "mi300x"):
        if fam in g:
            return fam
    return g


OPA_LINK_BYTES_PER_S = 100e9 / 8
"""One Intel Omni-Path (OPA 100) port: 100 Gb/s (Intel Omni-Path Host Fabric Interface 100 series
product brief, 2016)."""

JEAN_ZAY_NCCL_PORT_BYTES_PER_S = 40.5e9 / 8
"""What NCCL moved through one of Jean Zay's Omni-Path ports: BigScience's all-reduce benchmark on
4 nodes of the A100 partition (``experiments/bandwidth/all_reduce_bench-a100-n4.txt``, 2022-01-28,
the tr11 environment; 4 GB fp32 all-reduce over 32 GPUs, every trial 1.519-1.520 s, busbw
40.5-40.8 Gb/s). Its NCCL 2.10.3 log shows the ring's two channels leaving each node through the
same port (``via NET/IB/3``, without ``GDRDMA``: no GPUDirect RDMA over the hfi1 verbs, so every
byte is staged through host memory), so the benchmark measured one port at 40.5% of its line rate."""


NODE_LINKS = (
    (
        r"(\d+) OPA links per node",
        OPA_LINK_BYTES_PER_S,
        JEAN_ZAY_NCCL_PORT_BYTES_PER_S / OPA_LINK_BYTES_PER_S,
        " (BigScience's Jean Zay all-reduce benchmark)",
    ),
    (r"(\d+) Gb/s per node", 1e9 / 8, None, ""),
)
"""Inter-node links a record names per node instead of a DGX's 200 Gb/s HDR port per GPU: (pattern
in ``hardware.inter_node_interconnect`` whose number counts units per node, bytes/s per unit, the
link efficiency NCCL reaches on them or None for the template's, why that efficiency):

* Jean Zay's A100 nodes (BLOOM's cluster) reach each other over "4 OmniPath links" per node
  (bigscience/bloom model card, "Compute infrastructure"), and NCCL achieves
  :data:`JEAN_ZAY_NCCL_PORT_BYTES_PER_S` of each port's 100 Gb/s (the link efficiency, in place of
  the DGX template's InfiniBand figure);
* vTrain's validation configurations give one figure per node ("800 Gb/s per node":
  ``inter_node_bandwidth`` 800, "Total bandwidth of inter-node communication in Gbps",
  src/config.py); the NICs are not named, so the template's link efficiency stays."""


def _node_links(cluster: ClusterSpec, hw: dict, notes: list[str]) -> ClusterSpec:
    """The template's inter-node bandwidth per GPU replaced by the per-node links of
    :data:`NODE_LINKS` the record names, spread over the node's GPUs."""
    text = str(hw.get("inter_node_interconnect") or "")
    for pattern, unit_bytes_per_s, efficiency, why in NODE_LINKS:
        found = re.search(pattern, text)
        if not found:
            continue
        group = cluster.groups[0]
        per_gpu = int(found.group(1)) * unit_bytes_per_s / group.gpus_per_node
        note = f"inter-node {per_gpu / 1e9:.2f} GB/s per GPU ({found.group(0)})"
        group = replace(group, inter_node_bandwidth_bytes_per_s=per_gpu)
        if efficiency is not None:
            note += f", NCCL at {efficiency:.1%} of it{why}"
            group = replace(group, inter_node_efficiency=efficiency)
        notes.append(note)
        cluster = replace(cluster, groups=(group,))
    return cluster


def cluster_of(hw: dict, total: int, notes: list[str]) -> ClusterSpec:
    return _node_links(_node_template_cluster(hw, total, notes), hw, notes)


A800_NVLINK_BYTES_PER_S = 200e9
"""NVLink per A800 GPU and direction: the A800, NVIDIA's A100 variant for the Chinese market
(2022), has the A100's chip, memory and peaks with NVLink cut to 400 GB/s bidirectional from the
A100's 600 (Reuters, 2022-11-07, "Nvidia offers new advanced chip for China that meets U.S. export
controls", as tweakers.net 203182 reports it)."""


def _node_template_cluster(hw: dict, total: int, notes: list[str]) -> ClusterSpec:
    gpu = hw["gpu"].lower().replace(" ", "").replace("-", "")
    mem_gb = hw.get("gpu_memory_gb") or 80
    for key, template, _ in TEMPLATES:
        if key in gpu:
            per_node = load_template(template)["node"]["gpus_per_node"]
            if total % per_node:
                raise PlannerError(f"{total} GPUs is not a whole number of {per_node}-GPU {template} nodes")
            return load_cluster(template, total // per_node)
    nodes = max(1, total // 8)
    if total % 8:
        raise PlannerError(f"{total} GPUs is not a whole number of 8-GPU nodes")
    if "a100" in gpu or "a800" in gpu:
        cluster = load_cluster("dgx-a100-40gb" if mem_gb == 40 else "dgx-a100", nodes)
        if "a800" in gpu:
            # An A100 node (the A100 family prices the GPU) with the A800's narrower NVLink.
            notes.append("A800: an A100 node with NVLink at 200 GB/s per direction (A100: 300)")
            group = replace(cluster.groups[0], intra_node_bandwidth_bytes_per_s=A800_NVLINK_BYTES_PER_S)
            cluster = replace(cluster, groups=(group,))
        return cluster
    if "h100" in gpu:
        cluster = load_cluster("dgx-h100", nodes)
        if mem_gb == 96:
            notes.append("H100 96GB HBM2e variant (h100-sxm5-96gb)")
            group = replace(cluster.groups[0], gpu=load_gpu("h100-sxm5-96gb"))
            cluster = replace(cluster, groups=(group,))
        return cluster
    if "v100" in gpu:
        return _v100_cluster(nodes, mem_gb, notes)
    raise PlannerError(f"no node template for GPU {hw['gpu']!r}")


EDR_PORT_BYTES_PER_S = 100e9 / 8
"""One 100 Gb/s 4X EDR InfiniBand port (Mellanox MT27700 / ConnectX-4), the one HCA per node of
Oneflow-Inc/DLPerf's V100 servers (its Megatron-LM/README.md: 'InfiniBand 100 Gb/sec (4X EDR)',
one mlx5_0 in `nvidia-smi topo -m`)."""


def _v100_cluster(nodes: int, mem_gb: float, notes: list[str]) -> ClusterSpec:
    """8x V100-SXM2 servers wired as DGX-1's hybrid cube-mesh (the ``dgx1-v100`` template: its
    NVLink mesh is the ``nvidia-smi topo -m`` of DLPerf's servers), with one EDR port per node
    instead of DGX-1's four, and the 16 GB GPU variant where the run says so."""
    cluster = load_cluster("dgx1-v100", nodes)
    group = replace(cluster.groups[0], inter_node_bandwidth_bytes_per_s=EDR_PORT_BYTES_PER_S / 8)
    if mem_gb == 16:
        gpu = replace(group.gpu, name="v100-sxm2-16gb", memory_bytes=16 * 2**30)
        group = replace(group, gpu=gpu)
        notes.append("V100-SXM2 16GB variant (v100-sxm2-32gb with 16 GiB)")
    notes.append("V100 node: DGX-1 hybrid cube-mesh NVLink (25 GB/s links), one 100 Gb/s EDR port per 8 GPUs")
    return replace(cluster, groups=(group,))
