"""The parameters ``planner calibrate`` fits, with their priors, bounds and how they apply.

Each parameter is an absolute value of a field the cost model already reads (so applying a profile
twice changes nothing):

* ``gemm_efficiency_max``: the scale of the GEMM efficiency curve
  (``EfficiencySpec.gemm_efficiency_max``, :func:`cost_models.compute.gemm_efficiency`);
* ``attention_efficiency``: the ceiling of fused attention's fraction of peak, reached with many keys
  per query (:func:`cost_models.compute.attention_efficiency`);
* ``hbm_efficiency``: memory-bound kernels' fraction of HBM bandwidth (:func:`cost_models.compute.memory_bound_s`);
* ``comm_overlap_slowdown``: the overlap factor, compute time added per second of hidden
  communication (:func:`cost_models.communication.overlapped_s`);
* ``nvlink_bus_bandwidth_gb_per_s`` / ``nvlink_latency_us``: achieved NVLink bus bandwidth per GPU
  (``intra_node_bandwidth x intra_node_efficiency``) and per-step latency;
* ``network_bus_bandwidth_gb_per_s`` / ``network_latency_us``: the same across the network
  (:func:`cost_models.communication.link_for`).

Bus bandwidth is nccl-tests' ``busbw`` (NVIDIA/nccl-tests doc/PERFORMANCE.md): the per-rank
bandwidth the alpha-beta formulas of :mod:`cost_models.communication` divide by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.errors import SpecError

GB = 1e9


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted parameter."""

    name: str
    """Key in the profile file (the unit is in the name)."""
    unit: str
    """Unit for display ('' for a fraction)."""
    log: bool
    """Fitted in log space (positive values, relative uncertainty); else linear."""
    prior_width: float
    """Prior standard deviation: in log space (relative) when ``log``, else absolute."""
    help: str
    """What the parameter is, one line."""


PARAMS: tuple[Param, ...] = (
    Param("gemm_efficiency_max", "", True, 0.3, "scale of the GEMM efficiency curve (fraction of peak)"),
    Param("attention_efficiency", "", True, 0.5, "fused attention, ceiling of its fraction of peak"),
    Param("hbm_efficiency", "", True, 0.3, "memory-bound kernels, fraction of HBM bandwidth"),
    Param("comm_overlap_slowdown", "", False, 0.15, "compute slowdown per second of hidden communication"),
    Param("nvlink_bus_bandwidth_gb_per_s", "GB/s", True, 0.5, "NVLink bus bandwidth per GPU"),
    Param("nvlink_latency_us", "us", True, 1.0, "NVLink per-step collective latency"),
    Param("network_bus_bandwidth_gb_per_s", "GB/s", True, 0.5, "network bus bandwidth per GPU"),
    Param("network_latency_us", "us", True, 1.0, "network per-step collective latency"),
)
"""The fitted parameters. Prior widths: efficiencies and bandwidths are known to within tens of
percent from the vendor figures (factor ~1.35-1.65 at one sigma); latencies only to a factor ~e."""

NAMES = tuple(p.name for p in PARAMS)
BY_NAME = {p.name: p for p in PARAMS}


def _group(cluster: ClusterSpec, gpu: str) -> NodeGroup:
    for g in cluster.groups:
        if g.gpu.name == gpu:
            return g
    names = ", ".join(sorted({g.gpu.name for g in cluster.groups}))
    raise SpecError(f"the profile is for GPU {gpu}; cluster {cluster.name} has {names}")


def values_of(cluster: ClusterSpec, gpu: str) -> dict[str, float]:
    """The current value of every parameter on the nodes of ``gpu`` in ``cluster`` (the priors)."""
    g = _group(cluster, gpu)
    e = g.gpu.efficiency
    return {
        "gemm_efficiency_max": e.gemm_efficiency_max,
        "attention_efficiency": e.attention_efficiency,
        "hbm_efficiency": e.hbm_efficiency,
        "comm_overlap_slowdown": e.comm_overlap_slowdown,
        "nvlink_bus_bandwidth_gb_per_s": g.intra_node_bandwidth_bytes_per_s * g.intra_node_efficiency / GB,
        "nvlink_latency_us": g.intra_node_latency_s * 1e6,
        "network_bus_bandwidth_gb_per_s": g.inter_node_bandwidth_bytes_per_s * g.inter_node_efficiency / GB,
        "network_latency_us": g.inter_node_latency_s * 1e6,
    }


def bounds_of(cluster: ClusterSpec, gpu: str) -> dict[str, tuple[float, float]]:
    """Bounds of each parameter: efficiencies in (0, 1] of the peak, bus bandwidths at most the
    link's nominal bandwidth (an efficiency above 1 is rejected by the cluster loader), latencies
    between 0.1 us and 1 ms, the overlap factor in [0, 1]."""
    g = _group(cluster, gpu)
    return {
        "gemm_efficiency_max": (0.05, 1.0),
        "attention_efficiency": (0.02, 1.0),
        "hbm_efficiency": (0.05, 1.0),
        "comm_overlap_slowdown": (0.0, 1.0),
        "nvlink_bus_bandwidth_gb_per_s": (
            0.01 * g.intra_node_bandwidth_bytes_per_s / GB,
            g.intra_node_bandwidth_bytes_per_s / GB,
        ),
        "nvlink_latency_us": (0.1, 1000.0),
        "network_bus_bandwidth_gb_per_s": (
            0.01 * g.inter_node_bandwidth_bytes_per_s / GB,
            g.inter_node_bandwidth_bytes_per_s / GB,
        ),
        "network_latency_us": (0.1, 1000.0),
    }


def apply_values(cluster: ClusterSpec, gpu: str, values: dict[str, float]) -> ClusterSpec:
    """``cluster`` with ``values`` (any subset of :data:`NAMES`) set on every node group of ``gpu``.
    Bandwidths become link efficiencies over the nominal link bandwidth, so the cluster's recorded
    link figures stay the vendor's."""
    _group(cluster, gpu)
    out = []
    for g in cluster.groups:
        if g.gpu.name != gpu:
            out.append(g)
            continue
        eff_fields = {
            k: values[k]
            for k in (
                "gemm_efficiency_max",
                "attention_efficiency",
                "hbm_efficiency",
                "comm_overlap_slowdown",
            )
            if k in values
        }
        new_gpu = replace(g.gpu, efficiency=replace(g.gpu.efficiency, **eff_fields)) if eff_fields else g.gpu
        links = {}
        if "nvlink_bus_bandwidth_gb_per_s" in values:
            links["intra_node_efficiency"] = (
                values["nvlink_bus_bandwidth_gb_per_s"] * GB / g.intra_node_bandwidth_bytes_per_s
            )
        if "nvlink_latency_us" in values:
            links["intra_node_latency_s"] = values["nvlink_latency_us"] * 1e-6
        if "network_bus_bandwidth_gb_per_s" in values:
            links["inter_node_efficiency"] = (
                values["network_bus_bandwidth_gb_per_s"] * GB / g.inter_node_bandwidth_bytes_per_s
            )
        if "network_latency_us" in values:
            links["inter_node_latency_s"] = values["network_latency_us"] * 1e-6
        out.append(replace(g, gpu=new_gpu, **links))
    return replace(cluster, groups=tuple(out))


def to_internal(name: str, value: float) -> float:
    """The fitting coordinate of a value (log for positive parameters)."""
    return math.log(value) if BY_NAME[name].log else value


def from_internal(name: str, x: float) -> float:
    """The value of a fitting coordinate."""
    return math.exp(x) if BY_NAME[name].log else x
