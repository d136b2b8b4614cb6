"""Strict loading of GPUs, node templates and clusters from YAML / JSON files and the built-in
presets (hardware_profiles/gpus, hardware_profiles/clusters), with :mod:`planner.inputs.models`'s reader
and error conventions; hardware units (GiB, GB/s, TFLOP/s, microseconds) become SI here, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cost_models.communication import mesh_problems
from planner.inputs.cluster_spec import (
    LINEAR_MIXER_KERNELS,
    ClusterSpec,
    EfficiencySpec,
    GPUSpec,
    NodeGroup,
    NVLinkMesh,
)
from planner.inputs.documents import (
    GB,
    GIB,
    MISSING,
    SCHEMA_VERSION,
    Reader,
    check_header,
    did_you_mean,
    preset_files,
    preset_name,
    preset_or_path,
    read_document,
)
from planner.inputs.errors import SpecError
from planner.inputs.validation import check_number, limit, path_exists


def gpu_names() -> list[str]:
    """Names of the built-in GPU types, sorted."""
    return sorted(preset_files("hardware_profiles", "gpus"))


def cluster_template_names() -> list[str]:
    """Names of the built-in node templates, sorted."""
    return sorted(preset_files("hardware_profiles", "clusters"))


def _gpu_from_mapping(data: dict, where: str) -> GPUSpec:
    r = Reader(data, where)
    check_header(r, "gpu")
    peaks_r = r.sub("peak_tflops")
    peaks = tuple((k, peaks_r.get(k, float, 0.0) * 1e12) for k in ("bf16", "fp16", "fp8", "fp4", "tf32"))
    peaks_r.done()
    e = r.sub("efficiency")
    eff = EfficiencySpec(
        gemm_efficiency_max=e.get("gemm_efficiency_max", float, positive=True),
        gemm_half_efficiency_flop=e.get("gemm_half_efficiency_gflop", float, positive=True) * 1e9,
        attention_efficiency=e.get("attention_efficiency", float, positive=True),
        hbm_efficiency=e.get("hbm_efficiency", float, positive=True),
        fp8_gemm_speedup=e.get("fp8_gemm_speedup", float, 1.0, positive=True),
        kernel_overhead_s=e.get("kernel_overhead_us", float, 0.0) * 1e-6,
        comm_overlap_slowdown=e.get("comm_overlap_slowdown", float, 0.0),
        grouped_gemm_efficiency=e.get("grouped_gemm_efficiency", float, 1.0, positive=True),
        host_launch_s=e.get("host_launch_us", float, 0.0) * 1e-6,
    )
    e.get("fitted_on", str, "")
    e.done()
    speeds = _attention_kernel_speeds(r)
    spec = GPUSpec(
        name=r.get("name", str),
        memory_bytes=int(r.get("memory_gib", float, positive=True) * GIB),
        peak_flop_per_s=peaks,
        hbm_bandwidth_bytes_per_s=r.get("hbm_bandwidth_gb_per_s", float, positive=True) * GB,
        memory_reserve_bytes=int(r.get("memory_reserve_gib", float) * GIB),
        efficiency=eff,
        source=r.get("source", str),
        tdp_w=r.get("tdp_w", float, 0.0),
        sm_count=r.get("sm_count", int, 0),
        gemm_tile=_gemm_tile(r, where),
        gemm_stream_bytes_per_s=r.get("gemm_stream_gb_per_s", float, 0.0, positive=True) * GB,
        host_link_bytes_per_s=r.get("host_link_gb_per_s", float, 0.0, positive=True) * GB,
        attention_kernel_speed=speeds[0],
        local_attention_kernel_speed=speeds[1],
        linear_mixer_efficiency=_linear_mixer_kernels(r),
    )
    r.done()
    return spec


def _attention_kernel_speeds(r: Reader) -> tuple[tuple[float, float], tuple[float, float]]:
    """The optional ``attention_kernel_speed`` of a GPU file: ``forward`` and ``backward`` for full
    attention, ``local_forward`` and ``local_backward`` for sliding-window layers (each default 1)."""
    s = r.optional_sub("attention_kernel_speed")
    if s is None:
        return (1.0, 1.0), (1.0, 1.0)
    full = (s.get("forward", float, 1.0, positive=True), s.get("backward", float, 1.0, positive=True))
    local = (
        s.get("local_forward", float, 1.0, positive=True),
        s.get("local_backward", float, 1.0, positive=True),
    )
    s.done()
    return full, local


def _linear_mixer_kernels(r: Reader) -> tuple[tuple[str, float], ...]:
    """The optional ``linear_mixer_kernels`` of a GPU file: per kernel of
    :data:`planner.inputs.cluster_spec.LINEAR_MIXER_KERNELS`, the measured fraction of the dense
    16-bit peak it reaches, in (0, 1]; kernels left out (or the whole block) keep the roofline."""
    s = r.optional_sub("linear_mixer_kernels")
    if s is None:
        return ()
    values = [
        (k, s.get(k, float, 0.0, positive=True, maximum=1.0)) for k in LINEAR_MIXER_KERNELS if k in s.data
    ]
    s.done()
    return tuple(values)


def _gemm_tile(r: Reader, where: str) -> tuple[int, int] | None:
    """The ``gemm_tile: [rows, columns]`` of a GPU file (default 256 x 128; ``null``: no tile or
    wave quantization, :attr:`planner.inputs.cluster_spec.GPUSpec.gemm_tile`)."""
    if "gemm_tile" in r.data and r.data["gemm_tile"] is None:
        r.used.add("gemm_tile")
        return None
    value = r.get("gemm_tile", list, [256, 128])
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise SpecError(
            f"{where}: gemm_tile must be two positive integers [rows, columns], got {value!r}"[:300]
        )
    for i, v in enumerate(value):
        check_number(v, where, f"gemm_tile[{i}]", integer=True, positive=True, maximum=GEMM_TILE_MAX)
    return (value[0], value[1])


GEMM_TILE_MAX = 4096
"""Largest side of a GEMM output tile: one thread block's tile is 64-256 elements a side (NVIDIA
'Matrix Multiplication Background User's Guide': 256x128 on A100; CUTLASS tiles up to 256x256)."""


def load_gpu(name_or_path: str) -> GPUSpec:
    """A GPU type from the catalogue or a YAML file."""
    files = preset_files("hardware_profiles", "gpus")
    name_or_path = preset_or_path(name_or_path, files)
    path = Path(name_or_path)
    if name_or_path in files:
        return _gpu_from_mapping(yaml.safe_load(files[name_or_path].read_text()), f"gpu {name_or_path}")
    if not path_exists(path):
        hint = did_you_mean(name_or_path, files)
        raise SpecError(f"unknown GPU '{name_or_path}'{hint}; known GPUs: {', '.join(sorted(files))}")
    return _gpu_from_mapping(read_document(path), str(path))


NODE_KEYS = (
    "gpu",
    "gpus_per_node",
    "nvlink_domain_size",
    "intra_node_bandwidth_gb_per_s",
    "intra_node_latency_us",
    "inter_node_bandwidth_gb_per_s",
    "inter_node_latency_us",
    "intra_node_efficiency",
    "inter_node_efficiency",
    "nvlink_mesh",
    "host_memory_gb",
)


def _node_group(r: Reader, num_nodes: int, base: dict | None = None) -> NodeGroup:
    """Read node fields from ``r``; missing ones fall back to ``base`` (a template's node mapping)."""
    base = base or {}

    def field(key: str, kind: type, **kw: Any) -> Any:
        default = base.get(key, MISSING)
        return r.get(key, kind, default, **kw)

    gpu_name = field("gpu", str)
    try:
        gpu = load_gpu(gpu_name)
    except SpecError as exc:
        raise SpecError(f"{r.where}: key '{r._key('gpu')}': {exc}") from None
    gpus_per_node = field("gpus_per_node", int, positive=True)
    domain = r.get("nvlink_domain_size", int, base.get("nvlink_domain_size", gpus_per_node), positive=True)
    if gpus_per_node % domain and domain % gpus_per_node:
        # A domain is part of a node (Summit's NVLink triplets: 3 of 6) or whole nodes (an NVL72
        # rack: 18 trays of 4); ranks are placed in domains of consecutive ranks (cost_models.placement).
        raise SpecError(
            f"{r.where}: key '{r._key('nvlink_domain_size')}': {domain} GPUs neither divides the node's "
            f"{gpus_per_node} nor is a whole number of nodes (e.g. 8 for a DGX, 72 for an NVL72 rack of 4-GPU trays)"
        )
    return NodeGroup(
        gpu=gpu,
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        nvlink_domain_size=domain,
        intra_node_bandwidth_bytes_per_s=field("intra_node_bandwidth_gb_per_s", float, positive=True) * GB,
        intra_node_latency_s=field("intra_node_latency_us", float) * 1e-6,
        inter_node_bandwidth_bytes_per_s=field("inter_node_bandwidth_gb_per_s", float, positive=True) * GB,
        inter_node_latency_s=field("inter_node_latency_us", float) * 1e-6,
        intra_node_efficiency=field("intra_node_efficiency", float, positive=True),
        inter_node_efficiency=field("inter_node_efficiency", float, positive=True),
        nvlink_mesh=_nvlink_mesh(r, base, gpus_per_node),
        host_memory_bytes=r.get("host_memory_gb", float, base.get("host_memory_gb", 0.0), positive=True) * GB,
    )


def _nvlink_mesh(r: Reader, base: dict, gpus_per_node: int) -> NVLinkMesh | None:
    """The node's optional ``nvlink_mesh`` (``links``: a square matrix of NVLink link counts between
    its GPUs; ``link_bandwidth_gb_per_s``: one link, one direction), checked: one row per GPU,
    symmetric, zero diagonal, the NVLink domain is the node, no GPU has more links than its
    NVLink bandwidth carries, and every group Megatron can form in the node has a ring over
    direct links."""
    r.used.add("nvlink_mesh")
    raw = r.data.get("nvlink_mesh", base.get("nvlink_mesh"))
    if raw is None:
        return None
    m = Reader(raw, r.where, r._key("nvlink_mesh"))
    bandwidth = m.get("link_bandwidth_gb_per_s", float, positive=True) * GB
    rows = m.get("links", list)
    m.done()
    key = f"{r.where}: key '{m._key('links')}'"
    if gpus_per_node > MESH_MAX_GPUS:
        raise SpecError(
            f"{key}: a mesh of {gpus_per_node} GPUs is beyond the {MESH_MAX_GPUS} the ring search handles"
        )
    if len(rows) != gpus_per_node or not all(
        isinstance(row, list) and len(row) == gpus_per_node for row in rows
    ):
        raise SpecError(
            f"{key}: needs {gpus_per_node} rows of {gpus_per_node} link counts (one per GPU of the node)"
        )
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            check_number(
                value, r.where, f"{m._key('links')}[{i}][{j}]", integer=True, maximum=limit("nvlink_links")
            )
    links = tuple(tuple(row) for row in rows)
    for i in range(gpus_per_node):
        if links[i][i]:
            raise SpecError(f"{key}: GPU {i} has {links[i][i]} links to itself; the diagonal must be 0")
        for j in range(i):
            if links[i][j] != links[j][i]:
                raise SpecError(
                    f"{key}: not symmetric: GPU {i} -> {j} has {links[i][j]} links, GPU {j} -> {i} has {links[j][i]}"
                )
    domain = r.get("nvlink_domain_size", int, base.get("nvlink_domain_size", gpus_per_node))
    if domain != gpus_per_node:
        raise SpecError(
            f"{key}: an NVLink mesh spans one node: nvlink_domain_size ({domain}) must equal gpus_per_node ({gpus_per_node})"
        )
    per_gpu = r.get("intra_node_bandwidth_gb_per_s", float, base.get("intra_node_bandwidth_gb_per_s")) * GB
    busiest = max(range(gpus_per_node), key=lambda i: sum(links[i]))
    if sum(links[busiest]) * bandwidth > per_gpu * (1 + 1e-9):
        raise SpecError(
            f"{key}: GPU {busiest} has {sum(links[busiest])} links of {bandwidth / GB:g} GB/s, more than "
            f"intra_node_bandwidth_gb_per_s ({per_gpu / GB:g})"
        )
    mesh = NVLinkMesh(links=links, link_bandwidth_bytes_per_s=bandwidth)
    problems = mesh_problems(mesh)
    if problems:
        raise SpecError(
            f"{key}: no ring over direct NVLinks for {problems[0]}"
            + (f" and {len(problems) - 1} more rank sets" if len(problems) > 1 else "")
            + "; every group of consecutive or strided GPUs that divides the node needs one"
        )
    return mesh


MESH_MAX_GPUS = 8
"""Largest node an ``nvlink_mesh`` may describe: the ring search enumerates every ring through a
group ((n-1)!/2 of them), 2520 for 8 GPUs. Meshes without NVSwitch are DGX-1 / HGX-1 class (8 GPUs);
larger nodes use NVSwitch."""


def _template_node(name: str) -> dict:
    files = preset_files("hardware_profiles", "clusters")
    name = preset_name(name, files) or name
    if name not in files:
        hint = did_you_mean(name, files)
        raise SpecError(
            f"unknown cluster template '{name}'{hint}; known templates: {', '.join(sorted(files))}"
        )
    data = yaml.safe_load(files[name].read_text())
    return data


def load_template(name: str) -> dict:
    """The raw mapping of a node template (for ``planner hardware show``)."""
    return _template_node(name)


def is_template(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a node template (which needs a node count), built in or a
    file of ``kind: cluster_template``, not a cluster file."""
    files = preset_files("hardware_profiles", "clusters")
    resolved = preset_or_path(name_or_path, files)
    return resolved in files or _template_file(resolved) is not None


def _template_file(path_text: str) -> dict | None:
    """The mapping of a node-template file (``kind: cluster_template``, the built-in templates'
    format) at ``path_text``; None for a cluster file or a file that cannot be read
    (:func:`load_cluster` reports those)."""
    path = Path(path_text)
    if not path_exists(path):
        return None
    try:
        data = read_document(path)
    except SpecError:
        return None
    return data if _is_template_document(data) else None


def _is_template_document(data: object) -> bool:
    """Whether a document read from a file is a node template (``kind: cluster_template``)."""
    return isinstance(data, dict) and data.get("kind") == "cluster_template"


def _template_cluster(data: dict, where: str, nodes: int | None, name: str | None = None) -> ClusterSpec:
    """``nodes`` nodes of the node template ``data`` (a built-in template's mapping, or a template
    file's), named ``name`` (default: the template's ``name``)."""
    if nodes is None:
        raise SpecError(f"{where}: a node template needs a node count (--nodes N)")
    check_number(nodes, "--nodes", "num_nodes", integer=True, positive=True)
    r = Reader(data, where)
    check_header(r, "cluster_template")
    r.get("source", str, "")
    own = r.get("name", str)
    node = r.sub("node")
    group = _node_group(node, nodes)
    node.done()
    r.done()
    return ClusterSpec(name=name or own, groups=(group,))


def load_cluster(name_or_path: str, nodes: int | None = None) -> ClusterSpec:
    """A cluster from a node template (a built-in name, or a file of ``kind: cluster_template``)
    plus ``nodes``, or from a cluster YAML file (``kind: cluster``).

    A cluster file holds ``groups``: each group names a ``template`` or gives the node fields,
    plus ``num_nodes``. Several groups make a heterogeneous cluster, ranks numbered in order.
    """
    files = preset_files("hardware_profiles", "clusters")
    name_or_path = preset_or_path(name_or_path, files)
    if name_or_path in files:
        if nodes is None:
            raise SpecError(f"cluster template '{name_or_path}' needs a node count (--nodes N)")
        return _template_cluster(_template_node(name_or_path), f"cluster {name_or_path}", nodes, name_or_path)
    path = Path(name_or_path)
    if not path_exists(path):
        hint = did_you_mean(name_or_path, files)
        raise SpecError(
            f"unknown cluster '{name_or_path}'{hint}: not a template and no such file; templates: {', '.join(sorted(files))}"
        )
    data = read_document(path)
    if _is_template_document(data):
        return _template_cluster(data, str(path), nodes)
    if nodes is not None:
        raise SpecError(
            f"{path}: a cluster file gives num_nodes per group; do not pass --nodes "
            "(a node template file, kind: cluster_template, takes --nodes)"
        )
    return cluster_from_mapping(data, str(path), path.stem)


def cluster_from_mapping(data: dict, where: str, default_name: str = "cluster") -> ClusterSpec:
    """A cluster from a ``kind: cluster`` mapping (a cluster file, or a plan file's cluster)."""
    r = Reader(data, where)
    check_header(r, "cluster")
    name = r.get("name", str, default_name)
    raw_groups = r.get("groups", list)
    if not raw_groups:
        raise SpecError(f"{where}: key 'groups': needs at least one node group")
    groups = []
    for i, raw in enumerate(raw_groups):
        gr = Reader(raw, where, f"groups[{i}]")
        template = gr.get("template", str, "")
        base = {}
        if template:
            tdata = _template_node(template)
            base = dict(tdata.get("node", {}))
        groups.append(_node_group(gr, gr.get("num_nodes", int, positive=True), base))
        gr.done()
    price = r.get("gpu_hour_price_usd", float, 0.0)  # optional: what one GPU-hour costs, for --tokens
    r.done()
    return ClusterSpec(name=name, groups=tuple(groups), gpu_hour_price_usd=price or None)


def cluster_to_mapping(c: ClusterSpec) -> dict:
    """The inverse of :func:`cluster_from_mapping` (every node field spelled out)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "cluster",
        "name": c.name,
        "groups": [
            {
                "gpu": g.gpu.name,
                "num_nodes": g.num_nodes,
                "gpus_per_node": g.gpus_per_node,
                "nvlink_domain_size": g.nvlink_domain_size,
                "intra_node_bandwidth_gb_per_s": g.intra_node_bandwidth_bytes_per_s / GB,
                "intra_node_latency_us": g.intra_node_latency_s * 1e6,
                "inter_node_bandwidth_gb_per_s": g.inter_node_bandwidth_bytes_per_s / GB,
                "inter_node_latency_us": g.inter_node_latency_s * 1e6,
                "intra_node_efficiency": g.intra_node_efficiency,
                "inter_node_efficiency": g.inter_node_efficiency,
                **(
                    {
                        "nvlink_mesh": {
                            "link_bandwidth_gb_per_s": g.nvlink_mesh.link_bandwidth_bytes_per_s / GB,
                            "links": [list(row) for row in g.nvlink_mesh.links],
                        }
                    }
                    if g.nvlink_mesh is not None
                    else {}
                ),
                **({"host_memory_gb": g.host_memory_bytes / GB} if g.host_memory_bytes else {}),
            }
            for g in c.groups
        ],
        **({"gpu_hour_price_usd": c.gpu_hour_price_usd} if c.gpu_hour_price_usd is not None else {}),
    }
