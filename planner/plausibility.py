"""Is a prediction plausible? The best MFU ever measured for its class of run.

``hardware_profiles/published_mfu.yaml`` (written by ``scripts/published_mfu.py`` from the
calibration set, every entry naming its run) holds, per class (GPU type, precision, dense or
MoE), the best measured MFU, overall and per framework. A prediction above it is not impossible, but nobody has published
such a run: reports flag it so that a plan's claim is read with that in mind.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

TABLE = Path(__file__).resolve().parent.parent / "hardware_profiles" / "published_mfu.yaml"


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


@cache
def _classes() -> dict[str, dict]:
    return yaml.safe_load(TABLE.read_text())["classes"]


def plausibility(gpu: str, precision: str, moe: bool, mfu: float, framework: str = "any") -> Plausibility:
    """Compare a predicted MFU with the best published one of its class: of the same framework
    when runs of it are in the set, else of any framework."""
    key = class_key(gpu, precision, moe)
    cls = _classes().get(key)
    if cls is None:
        return Plausibility(key, None, "", False)
    entry = cls.get("by_framework", {}).get(framework)
    if entry is None:
        entry = cls
    else:
        key = f"{key} {framework}"
    return Plausibility(key, float(entry["mfu"]), str(entry["run_id"]), mfu > float(entry["mfu"]))
