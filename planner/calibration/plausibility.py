"""Is a prediction plausible? The best MFU ever measured for its class of run.

``hardware_profiles/published_mfu.yaml`` (written by ``scripts/published_mfu.py`` from the
calibration set, every entry naming its run) holds, per class (GPU type, precision, dense or
MoE), the best measured MFU, overall and per framework. A prediction above it is not impossible, but nobody has published
such a run: reports flag it so that a plan's claim is read with that in mind.

The same table records each class's coverage: its largest run (GPUs), its largest fully sharded
(FSDP) data-parallel group and, for MoE classes, the token dispatchers, all-to-all overlap and CUDA
graphs its runs used. A prediction beyond these extrapolates the calibration (issue 12: the
search picked FSDP over 256+ ranks where the largest validated FSDP run of the class sharded over
64): :attr:`Plausibility.extrapolation` says so, naming the run that bounds the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

TABLE = Path(__file__).resolve().parents[2] / "hardware_profiles" / "published_mfu.yaml"


def class_key(gpu: str, precision: str, moe: bool) -> str:
    """The class of a run: GPU type, precision, dense or MoE."""
    return f"{gpu} {precision} {'moe' if moe else 'dense'}"


@dataclass(frozen=True, slots=True)
class Plausibility:
    """The best published MFU of a prediction's class, and whether the prediction exceeds it."""

    run_class: str
    best_published_mfu: float | None
    """None when no published run of the class is in the calibration set."""
    best_run_id: str
    above_best_published: bool
    extrapolation: tuple[str, ...] = ()
    """Why the prediction lies outside what the class's calibration runs cover ('' entries none)."""


@cache
def _classes() -> dict[str, dict]:
    return yaml.safe_load(TABLE.read_text())["classes"]


def plausibility(
    gpu: str,
    precision: str,
    moe: bool,
    mfu: float,
    framework: str = "any",
    *,
    gpus: int = 0,
    fsdp_shard: int = 0,
    moe_runtime: tuple[str, bool, bool] | None = None,
) -> Plausibility:
    """Compare a predicted MFU with the best published one of its class: of the same framework
    when runs of it are in the set, else of any framework; and say whether ``gpus`` (the plan's GPU
    count) or ``fsdp_shard`` (its fully sharded group size; 0: not fully sharded) go beyond the
    class's calibration runs; ``moe_runtime`` (dispatcher, all-to-all overlap, CUDA graphs on) says
    whether an MoE plan runs a way none of the class's runs did."""
    key = class_key(gpu, precision, moe)
    cls = _classes().get(key)
    if cls is None:
        return Plausibility(
            key, None, "", False, (f"no published run of class {key} in the calibration set",)
        )
    extrapolation = _extrapolation(cls.get("coverage", {}), gpus, fsdp_shard, moe_runtime)
    entry = cls.get("by_framework", {}).get(framework)
    if entry is None:
        entry = cls
    else:
        key = f"{key} {framework}"
    return Plausibility(
        key, float(entry["mfu"]), str(entry["run_id"]), mfu > float(entry["mfu"]), extrapolation
    )


def _extrapolation(
    coverage: dict, gpus: int, fsdp_shard: int, moe_runtime: tuple[str, bool, bool] | None = None
) -> tuple[str, ...]:
    out = []
    largest = coverage.get("largest_run")
    if largest and gpus > largest["gpus"]:
        out.append(
            f"{gpus} GPUs: the class's largest calibration run has {largest['gpus']} ({largest['run_id']})"
        )
    if fsdp_shard > 1:
        fsdp = coverage.get("largest_fsdp_shard")
        if fsdp is None:
            out.append(
                f"FSDP over {fsdp_shard} ranks: no fully sharded run of the class is in the calibration set"
            )
        elif fsdp_shard > fsdp["ranks"]:
            out.append(
                f"FSDP over {fsdp_shard} ranks: the class's largest fully sharded calibration run shards over "
                f"{fsdp['ranks']} ({fsdp['run_id']})"
            )
    if moe_runtime is not None:
        dispatcher, overlap, graphs = moe_runtime
        seen = coverage.get("moe_dispatchers", {})
        if dispatcher not in seen:
            used = ", ".join(sorted(seen)) or "none"
            out.append(
                f"MoE dispatcher {dispatcher}: no calibration run of the class used it (they used {used})"
            )
        if overlap and "moe_a2a_overlap" not in coverage:
            out.append("MoE all-to-all overlap: no calibration run of the class overlapped its all-to-alls")
        if graphs and "cuda_graphs" not in coverage:
            out.append("CUDA graphs: no calibration run of the class captured CUDA graphs")
    return tuple(out)
