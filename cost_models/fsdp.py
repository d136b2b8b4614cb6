"""Per-unit FSDP / ZeRO-2 communication exposure inside one pass (one micro-batch of one stage).

FSDP wraps each transformer layer as one unit (torchtitan applies ``fully_shard`` per block; Composer
/ llm-foundry wraps each MPT block). Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling Fully
Sharded Data Parallel" (arXiv:2304.11277), Sec. 3.3-3.4 and Fig. 5: in forward, the all-gather of unit
``i+1`` is issued while unit ``i`` computes (forward prefetch); in backward, the all-gather of the
previous unit and the reduce-scatter of the unit just finished share the communication stream while
the current unit's backward computes (``BACKWARD_PRE``, prefetch depth 1; ``limit_all_gathers`` caps
in-flight gathers at two, so no deeper prefetch). FSDP2 (torchtitan docs/fsdp.md, "FSDP2" section)
keeps the same depth-1 implicit prefetch in both directions. Hence, with ``U`` units, per-unit
gather ``g``, per-unit reduce-scatter ``s`` and per-unit compute ``f`` (forward) / ``b`` (backward):

    forward exposure  = g                      (first unit's gather, nothing to hide it)
                      + (U - 1) * max(0, g - f)
    backward exposure = (U - 1) * max(0, g + s - b)
                      + s                      (last unit's reduce-scatter, nothing after it)

The backward gather of the first unit processed (the last layer) is not exposed: torchtitan does not
reshard the last block after forward (``reshard_after_forward=False`` for it, "since FSDP would
prefetch it immediately"). ZeRO-2 (gradient sharding only) has no gathers: its buckets reduce-scatter
with ``g = 0``. Every hidden second slows the compute under it by
``EfficiencySpec.comm_overlap_slowdown`` (see :func:`cost_models.communication.overlapped_s`).

``g`` and ``s`` are ring collectives (:mod:`cost_models.communication`) of ``unit bytes / shard`` per
rank: their latency term grows as ``(n - 1) alpha`` with the shard group's size ``n``, so at large
dp the per-unit messages become latency bound ("the latency of ring increases linearly with the
communicator size, and larger messages are less affected by the latency", NCCL maintainer,
github.com/NVIDIA/nccl/issues/1712). HSDP (``ParallelConfig.fsdp_shard``) keeps ``n`` at one node.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PassExposure:
    """Exposed communication of one micro-batch's forward and backward on one stage."""

    forward_s: float
    backward_s: float
    comm_s: float
    """Total collective time issued: ``U`` forward gathers, ``U - 1`` backward gathers, ``U``
    reduce-scatters."""


def _chain(units: int, first_s: float, per_unit_comm_s: float, per_unit_compute_s: float, last_s: float):
    """Exposed and hidden seconds of a depth-1 prefetch chain of ``units`` units."""
    steps = max(0, units - 1)
    per_step_exposed = max(0.0, per_unit_comm_s - per_unit_compute_s)
    exposed = first_s + last_s + steps * per_step_exposed
    hidden = steps * (per_unit_comm_s - per_step_exposed)
    return exposed, hidden


def pass_exposure(
    units: int,
    gather_unit_s: float,
    scatter_unit_s: float,
    forward_s: float,
    backward_s: float,
    slowdown: float,
) -> PassExposure:
    """Exposed FSDP communication of one pass of ``units`` units (see the module docstring).

    ``gather_unit_s`` / ``scatter_unit_s``: one unit's all-gather / reduce-scatter (0 gather for
    ZeRO-2); ``forward_s`` / ``backward_s``: the stage's compute for one micro-batch, split evenly
    over the units."""
    u = max(1, units)
    f_exp, f_hid = _chain(u, gather_unit_s, gather_unit_s, forward_s / u, 0.0)
    b_exp, b_hid = _chain(u, 0.0, gather_unit_s + scatter_unit_s, backward_s / u, scatter_unit_s)
    return PassExposure(
        forward_s=f_exp + slowdown * f_hid,
        backward_s=b_exp + slowdown * b_hid,
        comm_s=(2 * u - 1) * gather_unit_s + u * scatter_unit_s,
    )
