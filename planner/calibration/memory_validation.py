"""Measured vs predicted peak memory per GPU on the published runs (issue 12, item 5).

Rows pair a run of ``tests/data/published_runs.yaml`` with its measured peak in
``tests/data/published_memory.yaml`` (``measured_memory``) and the planner's predicted peak
(:attr:`cost_models.memory.MemoryBreakdown.peak_bytes`, reserve included). Each row keeps the
source's ``memory_metric``: torchtitan logs the caching allocator's *reserved* peak
(``torch.cuda.max_memory_reserved``; torchtitan ``components/metrics.py`` DeviceMemoryMonitor,
printed as "memory: X GiB (Y%)"), which includes cached free blocks and fragmentation, so it is an
upper bound on what the model predicts (allocated tensors plus the documented reserve).

``HEADROOM_GIB_DEFAULT`` is the default of ``planner search`` and ``planner check``'s
``--headroom-gib``; see its docstring for the derivation and why it is not yet the p90 of the
measured excess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec, NodeGroup
from planner.inputs.documents import SCHEMA_VERSION
from planner.inputs.jobs import make_job
from planner.inputs.model_yaml import model_from_mapping
from planner.plans.problem import HEADROOM_GIB_DEFAULT as SEARCH_HEADROOM_GIB
from planner.profiles.hardware import load_gpu

GIB = 2**30

HEADROOM_GIB_DEFAULT = SEARCH_HEADROOM_GIB
"""Default of ``--headroom-gib`` in ``planner search`` and ``planner check`` (GiB kept free per GPU
beyond the modelled reserve; defined as :data:`planner.plans.problem.HEADROOM_GIB_DEFAULT`, the
library's default): a launch that check passes fits as a searched plan must.

Derived from the measured Megatron-Core peaks (:data:`MEASURED_ALLOCATED`, see docs/calibration.md
"Memory") by :func:`derived_headroom_gib`: the 90th percentile of the excess of the caching
allocator's *reserved* peak over planner's predicted allocated peak, rounded up to a whole GiB.
Allocated peaks are predicted within 2%, so what the headroom must absorb is the allocator's pool
beyond the live tensors: p90 1.50 GiB over the 13 measured configurations (the worst, 3.0 GiB, is
an MoE step with micro-batch 2, whose permuted-token buffers vary in size), hence 2 GiB. A test keeps
this constant equal to the derivation. The published torchtitan rows (reserved peaks of jobs whose pool grows toward capacity)
do not enter it: their excess measures caching, not need."""

MEASURED_ALLOCATED = (
    Path(__file__).resolve().parents[2]
    / "hardware_profiles"
    / "measurements"
    / "h100-sxm5-80gb-megatron-memory.yaml"
)
"""Peak allocated memory of real Megatron-Core steps on one H100 (scripts/measure_memory.py)."""


@dataclass(frozen=True, slots=True)
class MemoryRow:
    run_id: str
    metric: str
    measured_bytes: float
    predicted_bytes: float

    @property
    def excess_bytes(self) -> float:
        """Measured minus predicted (positive: the model under-predicts)."""
        return self.measured_bytes - self.predicted_bytes

    @property
    def signed_error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def is_reserved(metric: str) -> bool:
    """True when a source's ``memory_metric`` is a reserved (caching allocator) peak."""
    return "reserved" in metric.lower()


MEGATRON_MAX_ALLOCATED = "max allocated, last rank (Megatron --log-memory-to-tensorboard)"
"""The metric of an entry's ``mem_max_allocated_gib``: Megatron-LM's ``mem-max-allocated-bytes``
scalar (``torch.cuda.memory_stats()['allocated_bytes.all.peak']``, megatron/training/training.py
``training_log``), written by the one rank that holds the TensorBoard writer, the last
(``_set_tensorboard_writer``: ``args.rank == args.world_size - 1``, megatron/training/global_vars.py),
which is on the last pipeline stage (tp, cp, dp vary fastest in Megatron's default rank order)."""


def rows(results, entries: list[dict]) -> list[MemoryRow]:
    """One row per measured peak whose run was predicted, in ``entries`` order.

    ``results``: :class:`planner.calibration.cases.Result` values; ``entries``: the ``measured_memory``
    list of published_memory.yaml. A ``peak_memory_gib`` (torchtitan's reserved peak, the most of any
    GPU) is held to planner's largest peak, reserve included; a ``mem_max_allocated_gib`` (Megatron's
    logged allocated peak, :data:`MEGATRON_MAX_ALLOCATED`) to the last stage's peak less the fixed
    CUDA-context / NCCL reserve, which the caching allocator never sees (as the measured steps of
    :func:`measured_rows`)."""
    by_id = {r.case.run_id: r for r in results}
    out = []
    for e in entries:
        r = by_id.get(e.get("run_id"))
        if r is None:
            continue
        if e.get("peak_memory_gib"):
            out.append(
                MemoryRow(
                    run_id=e["run_id"],
                    metric=str(e.get("memory_metric", "")),
                    measured_bytes=float(e["peak_memory_gib"]) * GIB,
                    predicted_bytes=float(r.estimate.peak_memory_bytes),
                )
            )
        elif e.get("mem_max_allocated_gib"):
            last = r.estimate.stages[-1].memory
            out.append(
                MemoryRow(
                    run_id=e["run_id"],
                    metric=MEGATRON_MAX_ALLOCATED,
                    measured_bytes=float(e["mem_max_allocated_gib"]) * GIB,
                    predicted_bytes=float(last.peak_bytes - last.gpu_reserve_bytes),
                )
            )
    return out


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def summarize(memory_rows: list[MemoryRow]) -> dict:
    """n, median / max absolute relative error, signed bias (median of (pred - meas) / meas) and the
    p90 of the measured excess in GiB, over all rows and over the reserved-metric rows."""
    if not memory_rows:
        return {"n": 0}
    abs_err = [abs(r.signed_error) for r in memory_rows]
    signed = [r.signed_error for r in memory_rows]
    excess = [r.excess_bytes / GIB for r in memory_rows]
    reserved = [r.excess_bytes / GIB for r in memory_rows if is_reserved(r.metric)]
    allocated = [r.signed_error for r in memory_rows if not is_reserved(r.metric)]
    return {
        "n": len(memory_rows),
        "n_reserved": len(reserved),
        "n_allocated": len(allocated),
        "allocated_median_signed_error": _percentile(allocated, 0.5) if allocated else None,
        "allocated_max_abs_error": max(abs(e) for e in allocated) if allocated else None,
        "median_abs_error": _percentile(abs_err, 0.5),
        "max_abs_error": max(abs_err),
        "median_signed_error": _percentile(signed, 0.5),
        "excess_p90_gib": _percentile(excess, 0.9),
        "reserved_excess_p90_gib": _percentile(reserved, 0.9) if reserved else None,
    }


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    """A measured single-GPU Megatron-Core step beside planner's prediction of the same step."""

    run_id: str
    label: str
    """Model, sequence, micro-batch and recompute, for tables."""
    measured_static_bytes: float
    measured_peak_bytes: float
    """``max_memory_allocated`` over forward and backward."""
    measured_reserved_bytes: float
    predicted_static_bytes: float
    predicted_peak_bytes: float
    """Planner's peak less its fixed CUDA-context/NCCL reserve (memory the caching allocator never
    sees): static + activations + transients + fragmentation."""

    @property
    def signed_error(self) -> float:
        """(predicted - measured) / measured allocated peak."""
        return (self.predicted_peak_bytes - self.measured_peak_bytes) / self.measured_peak_bytes

    @property
    def static_error(self) -> float:
        """(predicted - measured) / measured static memory."""
        return (self.predicted_static_bytes - self.measured_static_bytes) / self.measured_static_bytes

    @property
    def allocated_excess_bytes(self) -> float:
        """Measured minus predicted allocated peak (positive: the model under-predicts)."""
        return self.measured_peak_bytes - self.predicted_peak_bytes

    @property
    def reserved_excess_bytes(self) -> float:
        """Reserved peak minus the predicted allocated peak (what the allocator's pool adds)."""
        return self.measured_reserved_bytes - self.predicted_peak_bytes


def load_measured(path: Path = MEASURED_ALLOCATED) -> list[dict]:
    """The ``measured_allocated`` entries of a measurement file (scripts/measure_memory.py output)."""
    return list((yaml.safe_load(path.read_text()) or {}).get("measured_allocated", []))


def single_node(gpu_name: str, gpus: int) -> NodeGroup:
    """One node of ``gpus`` GPUs of a type, for single-node measurements (the links carry nothing
    when the measured step runs on one GPU)."""
    return NodeGroup(
        gpu=load_gpu(gpu_name),
        num_nodes=1,
        gpus_per_node=gpus,
        nvlink_domain_size=gpus,
        intra_node_bandwidth_bytes_per_s=1.0,
        intra_node_latency_s=0.0,
        inter_node_bandwidth_bytes_per_s=1.0,
        inter_node_latency_s=0.0,
        intra_node_efficiency=1.0,
        inter_node_efficiency=1.0,
    )


def predict_measured(entry: dict):
    """Planner's estimate of one measured step: one node of the entry's GPU type holding tp x pp x dp
    GPUs (the measurements so far are single-GPU), one micro-batch per data-parallel rank."""
    where = f"measurement {entry['run_id']}"
    tp, pp, dp = (int(entry.get(k, 1)) for k in ("tp", "pp", "dp"))
    model = model_from_mapping({"schema_version": SCHEMA_VERSION, **entry["model"]}, where)
    node = single_node(entry["gpu"], tp * pp * dp)
    mb = int(entry["micro_batch_size"])
    job = make_job(global_batch_size=mb * dp, seq_length=int(entry["seq_length"]), where=where)
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch_size=mb,
        recompute=str(entry["recompute"]),
        sequence_parallel=False,
        optimizer_sharding="distributed",
    )
    return estimate(model, ClusterSpec(name="one-gpu", groups=(node,)), job, config)


def measured_rows(entries: list[dict]) -> list[MeasuredRow]:
    """Measured vs predicted, one row per entry, in order."""
    out = []
    for e in entries:
        est = predict_measured(e)
        m = max(est.stages, key=lambda s: s.memory.peak_bytes).memory
        out.append(
            MeasuredRow(
                run_id=e["run_id"],
                label=(
                    f"{e['model']['name']}, s {e['seq_length']}, b {e['micro_batch_size']}, "
                    f"{e['recompute']}, dropout {e.get('dropout', 0.0)}"
                ),
                measured_static_bytes=float(e["static_gib"]) * GIB,
                measured_peak_bytes=float(e["peak_memory_gib"]) * GIB,
                measured_reserved_bytes=float(e["peak_reserved_gib"]) * GIB,
                predicted_static_bytes=m.static_bytes,
                predicted_peak_bytes=m.peak_bytes - m.gpu_reserve_bytes,
            )
        )
    return out


def summarize_measured(measured: list[MeasuredRow]) -> dict:
    """n, median / max absolute error of the allocated peak and of static memory, signed bias, the
    p90 of measured - predicted allocated (GiB), the largest reserved excess and the headroom it
    implies (:func:`derived_headroom_gib`)."""
    if not measured:
        return {"n": 0}
    abs_err = [abs(r.signed_error) for r in measured]
    return {
        "n": len(measured),
        "median_abs_error": _percentile(abs_err, 0.5),
        "max_abs_error": max(abs_err),
        "median_signed_error": _percentile([r.signed_error for r in measured], 0.5),
        "static_max_abs_error": max(abs(r.static_error) for r in measured),
        "excess_p90_gib": _percentile([r.allocated_excess_bytes / GIB for r in measured], 0.9),
        "reserved_excess_max_gib": max(r.reserved_excess_bytes for r in measured) / GIB,
        "derived_headroom_gib": derived_headroom_gib(measured),
    }


def derived_headroom_gib(measured: list[MeasuredRow]) -> float:
    """The ``--headroom-gib`` the measurements call for: the 90th percentile (nearest rank) over the
    rows of the excess of the reserved peak (or, were the model to under-predict, of the allocated
    peak) over the predicted allocated peak, rounded up to a whole GiB (at least 1)."""
    excess = [max(r.reserved_excess_bytes, r.allocated_excess_bytes) for r in measured]
    return float(max(1, math.ceil(_percentile(excess, 0.9) / GIB)))
