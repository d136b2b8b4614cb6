"""How sure a prediction is: the interval its tokens/s (and step time) may lie in, and the gap
between two plans' predictions the model can resolve, read from the held-out errors of the
calibration set (``hardware_profiles/prediction_intervals.yaml``, built and validated by
:mod:`planner.calibration.intervals`, whose docstring gives the method).

A prediction belongs to a hierarchy of classes (:func:`class_keys`: GPU family x precision x
dense/MoE x framework x scale band, then without the band, then without the framework, then
precision x dense/MoE, then dense/MoE, then all runs) and takes the interval of the finest class
the table has (one with at least :data:`MIN_RUNS` held-out residuals); a prediction outside what its
class's calibration runs cover (more GPUs than its largest run, an MoE runtime none of them used:
:mod:`planner.profiles.plausibility`) takes the next coarser one, which pools runs of more kinds
and is wider. :func:`resolution` is the smallest gap between two layouts' predicted step times the
model orders rightly four times in five (the paired errors of the calibration set's layout groups),
below which two plans are statistically tied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError

TABLE = Path(__file__).resolve().parents[2] / "hardware_profiles" / "prediction_intervals.yaml"

LEVEL = 0.8
"""The nominal coverage of every interval planner reports."""

UNSEEN_OUTSIDE_COVERAGE = (28, 64)
"""Of the unseen production runs outside calibration (tests/data/production_runs.yaml, priced and
judged by scripts/validate_production.py as ``planner estimate`` judges a plan), how many were
measured inside the widened 80% interval, and of how many: the interval is not validated there
(inside calibration 30 of 35 were; docs/calibration.md, "Unseen production runs").
tests/test_production_runs.py holds it to the script's figures."""

MIN_RUNS = 9
"""The fewest held-out residuals a class of the table holds (with at least
:data:`planner.calibration.intervals.MIN_SOURCES` sources): fewer, and its quantiles rest on a
handful of runs."""

FRAMEWORK_GROUPS = {
    "megatron": "megatron",
    "nemo": "megatron",
    "torchtitan": "torchtitan",
    "deepspeed": "deepspeed",
    "composer": "composer",
    "zero-bubble": "megatron",
}
"""A run's ``parallel.framework`` (or a plan's ``--framework``) -> the framework part of its class:
NeMo and Megatron-Bridge run Megatron-Core, and the zero-bubble fork is Megatron-LM. Frameworks not
listed (``other``, ``any``) leave the framework out of the class."""


UNCALIBRATED_MIXERS = {
    "mamba": (
        "Mamba-2 layers: no calibration run has them; unseen production rows of a hybrid Mamba-2 MoE "
        "(Nemotron 3 Nano, docs/calibration.md) are predicted 22-45% too fast on Blackwell, 9-12% too slow on H100"
    ),
    "mamba1": "Mamba-1 layers: no calibration run has them (their kernels are priced, never validated)",
    "gdn": "gated DeltaNet layers: no calibration run has them (their kernels are priced, never validated)",
    "kda": "Kimi Delta Attention layers: no calibration run has them (their kernels are priced, never validated)",
    "attention+mamba": (
        "parallel attention + Mamba-2 layers: no calibration run has them (their kernels are priced, never "
        "validated)"
    ),
    "dsa": "DeepSeek sparse attention: no calibration run has it (the indexer is priced, never validated)",
}
"""What a prediction extrapolates when its model has token mixers none of the calibration runs has
(:func:`uncalibrated_mixers`): the calibration set is transformers with softmax attention."""


def uncalibrated_mixers(model) -> tuple[str, ...]:
    """The keys of :data:`UNCALIBRATED_MIXERS` a chain model has, in that table's order."""
    kinds = set()
    if getattr(model, "has_layer_parts", False):
        for i in range(model.num_layers):
            mixer = model.layer_parts(i)[0]
            kinds.add("mamba1" if mixer == "mamba" and model.mamba_version == 1 else mixer)
    if getattr(model, "is_dsa", False):
        kinds.add("dsa")
    return tuple(k for k in UNCALIBRATED_MIXERS if k in kinds)


@dataclass(frozen=True, slots=True)
class IntervalClass:
    """The held-out errors of one class, as the bounds of its interval."""

    key: str
    runs: int
    log_low: float
    """``ln(measured / predicted)`` at the interval's low end (tokens/s per GPU)."""
    log_high: float


@dataclass(frozen=True, slots=True)
class Interval:
    """A prediction's interval: tokens/s per GPU and step time, with the class it comes from."""

    level: float
    tokens_per_s_per_gpu: tuple[float, float]
    step_time_s: tuple[float, float]
    cls: str
    runs: int
    extrapolated: bool
    kind_held_out: tuple[str, int, int] | None = None
    """(kind, runs covered, runs) when the class is not of the prediction's kind (a MoE plan in a
    pooled class): how often held-out intervals covered the calibration runs of its kind."""

    def as_dict(self) -> dict:
        kind = self.kind_held_out
        return {
            "level": self.level,
            "step_time_s": list(self.step_time_s),
            "tokens_per_s_per_gpu": list(self.tokens_per_s_per_gpu),
            "class": self.cls,
            "runs": self.runs,
            "outside_calibration": self.extrapolated,
            "kind_held_out": None if kind is None else {"kind": kind[0], "covered": kind[1], "runs": kind[2]},
        }


def framework_group(framework: str | None) -> str:
    """The framework part of a class ('' when the framework says nothing: other, any)."""
    return FRAMEWORK_GROUPS.get(str(framework or ""), "")


SCALE_BANDS = ((64, "1-64 gpus"), (1024, "65-1024 gpus"), (math.inf, ">1024 gpus"))
"""GPU-count bands of the finest classes: one node to a few (8-64), a pod (up to 1,024), beyond."""


def scale_band(gpus: int) -> str:
    return next(name for top, name in SCALE_BANDS if gpus <= top)


def class_keys(
    family: str | None, precision: str, moe: bool, framework: str | None, gpus: int
) -> tuple[str, ...]:
    """The classes a prediction belongs to, finest first: GPU family x precision x dense/MoE x
    framework x scale band, then coarser (``family`` None: a cluster of several GPU families, whose
    classes start without one; a framework that says nothing leaves the framework levels out)."""
    kind = "moe" if moe else "dense"
    fw = framework_group(framework)
    keys = []
    if family:
        if fw:
            keys.append(f"{family} {precision} {kind} {fw} {scale_band(gpus)}")
            keys.append(f"{family} {precision} {kind} {fw}")
        keys.append(f"{family} {precision} {kind}")
    keys += [f"{precision} {kind}", kind, "all"]
    return tuple(keys)


def lookup(
    table: dict[str, IntervalClass], keys: tuple[str, ...], extrapolated: bool = False
) -> IntervalClass:
    """The finest class of ``keys`` in ``table``; one level coarser when ``extrapolated`` (and a
    coarser class exists)."""
    found = [k for k in keys if k in table]
    if not found:
        raise SpecError(
            f"prediction intervals: no class of {list(keys)} in the table (it needs an 'all' class)"
        )
    return table[found[1] if extrapolated and len(found) > 1 else found[0]]


def interval(
    cls: IntervalClass,
    tokens_per_s_per_gpu: float,
    step_time_s: float,
    level: float,
    extrapolated: bool,
    kind_held_out: tuple[str, int, int] | None = None,
) -> Interval:
    """The interval of one prediction from its class's bounds."""
    lo, hi = math.exp(cls.log_low), math.exp(cls.log_high)
    return Interval(
        level,
        (tokens_per_s_per_gpu * lo, tokens_per_s_per_gpu * hi),
        (step_time_s / hi, step_time_s / lo),
        cls.key,
        cls.runs,
        extrapolated,
        kind_held_out,
    )


@cache
def _document(path: Path):
    """The table file's parsed YAML, read once for :func:`shipped_table`, :func:`kind_coverage` and
    :func:`resolution` (a read or parse error is raised, and each reports it its own way)."""
    return yaml.safe_load(path.read_text())


@cache
def shipped_table(path: Path = TABLE) -> tuple[float, dict[str, IntervalClass]]:
    """The shipped table: (level, classes)."""
    try:
        data = _document(path)
        level = float(data["level"])
        classes = {
            str(k): IntervalClass(str(k), int(v["runs"]), float(v["log_low"]), float(v["log_high"]))
            for k, v in data["classes"].items()
        }
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(
            f"{path.name}: not a prediction-interval table ({type(exc).__name__}: {exc})"
        ) from None
    return level, classes


def predict_interval(
    cluster,
    precision: str,
    moe: bool,
    framework: str | None,
    tokens_per_s_per_gpu: float,
    step_time_s: float,
    extrapolated: bool = False,
) -> Interval:
    """The shipped interval of one prediction on ``cluster`` (a ``ClusterSpec``: its GPU family,
    none for several families, and its GPU count; see the module docstring)."""
    from planner.profiles.software import cluster_families

    families = cluster_families(cluster)
    family = families[0] if len(families) == 1 else None
    level, table = shipped_table()
    cls = lookup(table, class_keys(family, precision, moe, framework, cluster.num_gpus), extrapolated)
    kind = "moe" if moe else "dense"
    held = kind_coverage().get(kind)
    of_kind = kind in cls.key.split()
    return interval(
        cls,
        tokens_per_s_per_gpu,
        step_time_s,
        level,
        extrapolated,
        None if of_kind or held is None else (kind, held[0], held[1]),
    )


@cache
def kind_coverage(path: Path = TABLE) -> dict[str, tuple[int, int]]:
    """``{kind: (runs covered, runs)}``: how many dense and MoE calibration runs their held-out
    intervals covered (the shipped table's ``kind_coverage``; empty when it has none)."""
    try:
        data = _document(path).get("kind_coverage") or {}
        return {str(k): (int(v["runs_covered"]), int(v["runs"])) for k, v in data.items()}
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{path.name}: unreadable kind_coverage ({type(exc).__name__}: {exc})") from None


@cache
def resolution(path: Path = TABLE) -> float:
    """The log gap between two plans' predicted step times below which they are statistically tied
    (module docstring; the ``resolution`` section of the shipped table)."""
    try:
        return float(_document(path)["resolution"]["log_gap"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{path.name}: no resolution in the prediction-interval table ({exc})") from None
