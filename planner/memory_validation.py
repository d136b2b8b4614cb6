"""Measured vs predicted peak memory per GPU on the published runs (issue 12, item 5).

Rows pair a run of ``tests/data/published_runs.yaml`` with its measured peak in
``tests/data/published_memory.yaml`` (``measured_memory``) and the planner's predicted peak
(:attr:`cost_models.memory.MemoryBreakdown.peak_bytes`, reserve included). Each row keeps the
source's ``memory_metric``: torchtitan logs the caching allocator's *reserved* peak
(``torch.cuda.max_memory_reserved``; torchtitan ``components/metrics.py`` DeviceMemoryMonitor,
printed as "memory: X GiB (Y%)"), which includes cached free blocks and fragmentation, so it is an
upper bound on what the model predicts (allocated tensors plus the documented reserve).

``HEADROOM_GIB_DEFAULT`` is the default of ``planner search --headroom-gib``; see its docstring for
the derivation and why it is not yet the p90 of the measured excess.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30

HEADROOM_GIB_DEFAULT = 2.0
"""Default of ``planner search --headroom-gib`` (GiB kept free per GPU beyond the modelled reserve).

Derivation: the intended rule is the 90th percentile of (measured - predicted) peak memory over
measured *allocated* peaks (``max_memory_allocated``) at 80 GB scale. The published peaks gathered
so far (18 torchtitan H100 rows, 2024-12) are *reserved* peaks: the caching allocator grows into
free HBM, so their excess over the prediction (p90 ``reserved_excess_p90_gib`` in
:func:`summarize`, 33.8 GiB, see docs/calibration.md "Memory") measures allocator caching,
not model error, and cannot set the default. Until allocated peaks exist
(``scripts/measure_memory.py`` on a lent GPU), the default stays at 2 GiB: PyTorch's
``expandable_segments`` note puts steady fragmentation at "a few percent" of the pool, and 2 GiB is
2.5% of an 80 GiB H100 on top of the 5% activation fragmentation already in
:data:`cost_models.memory.FRAGMENTATION_FRACTION`."""


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


def rows(results, entries: list[dict]) -> list[MemoryRow]:
    """One row per measured peak whose run was predicted, in ``entries`` order.

    ``results``: :class:`planner.calibration.Result` values; ``entries``: the ``measured_memory``
    list of published_memory.yaml."""
    by_id = {r.case.run_id: r for r in results}
    out = []
    for e in entries:
        r = by_id.get(e.get("run_id"))
        if r is None or not e.get("peak_memory_gib"):
            continue
        out.append(
            MemoryRow(
                run_id=e["run_id"],
                metric=str(e.get("memory_metric", "")),
                measured_bytes=float(e["peak_memory_gib"]) * GIB,
                predicted_bytes=float(r.estimate.peak_memory_bytes),
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
    return {
        "n": len(memory_rows),
        "n_reserved": len(reserved),
        "median_abs_error": _percentile(abs_err, 0.5),
        "max_abs_error": max(abs_err),
        "median_signed_error": _percentile(signed, 0.5),
        "excess_p90_gib": _percentile(excess, 0.9),
        "reserved_excess_p90_gib": _percentile(reserved, 0.9) if reserved else None,
    }
