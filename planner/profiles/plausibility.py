"""Is a prediction plausible? The best MFU ever measured for its class of run.

``hardware_profiles/published_mfu.yaml`` (written by ``scripts/published_mfu.py`` from the
calibration set, every entry naming its run) holds, per class (GPU type, precision, dense or
MoE), the best measured MFU, overall and per framework. A prediction above it is not impossible, but nobody has published
such a run: reports flag it so that a plan's claim is read with that in mind.

The same table records each class's coverage: its largest run (GPUs), its largest fully sharded
(FSDP) data-parallel group, its shortest measured step and, for MoE classes, the token dispatchers,
all-to-all overlap and CUDA graphs its runs used. A prediction beyond these extrapolates the
calibration (issue 12: the search picked FSDP over 256+ ranks where the largest validated FSDP run
of the class sharded over 64; unseen MLPerf Training v6.0 runs of 0.07-0.2 s steps, shorter than
any calibration run's 0.42 s, were predicted 11-143% too fast: docs/calibration.md, "Unseen
production runs"): :attr:`Plausibility.extrapolation` says so, naming the run that bounds the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from planner.profiles.uncertainty import UNCALIBRATED_MIXERS, uncalibrated_mixers

TABLE = Path(__file__).resolve().parents[2] / "hardware_profiles" / "published_mfu.yaml"


SIZE_BANDS = ((20e9, "<20B"), (100e9, "20-100B"), (float("inf"), ">=100B"))
"""Model size bands (total parameters): an 8B model's best MFU says little about a 70B job's."""


def size_band(params: float) -> str:
    """The size band of a model of ``params`` total parameters."""
    return next(name for top, name in SIZE_BANDS if params < top)


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

    def as_dict(self) -> dict:
        """The ``plausibility`` object of estimate's, search's and check's ``--json``."""
        return {
            "class": self.run_class,
            "best_published_mfu": self.best_published_mfu,
            "best_published_run": self.best_run_id,
            "above_best_published": self.above_best_published,
            "outside_calibration": list(self.extrapolation),
        }


@cache
def published_classes() -> dict[str, dict]:
    return yaml.safe_load(TABLE.read_text())["classes"]


def _classes_for(gpu: str, precision: str, moe: bool, table: dict[str, dict]) -> tuple[str, list[dict]]:
    """The classes of ``table`` a prediction on ``gpu`` is compared with: its GPU type's, else those
    of the GPU types of its efficiency family (an H200 is held to H100 runs: the MFU is over each
    GPU's own peak), with the name of what was used."""
    from planner.profiles.software import efficiency_family

    key = class_key(gpu, precision, moe)
    if key in table:
        return key, [table[key]]
    family = efficiency_family(gpu)
    suffix = key[len(gpu) :]
    same = [k for k in sorted(table) if k.endswith(suffix) and efficiency_family(k[: -len(suffix)]) == family]
    return (f"{family} family{suffix}", [table[k] for k in same]) if same else (key, [])


def _no_class(key: str) -> str:
    return f"no published run of class {key} in the calibration set"


def coverage_extrapolation(
    table: dict[str, dict],
    gpu: str,
    precision: str,
    moe: bool,
    *,
    gpus: int = 0,
    fsdp_shard: int = 0,
    moe_runtime: tuple[str, bool, bool] | None = None,
    step_s: float = 0.0,
) -> tuple[str, ...]:
    """Why a prediction lies outside what ``table``'s classes cover (``{class: {"coverage": ...}}``,
    the shipped table's shape; its class chosen as :func:`plausibility` chooses it; empty: inside):
    see :func:`plausibility` for the arguments. The leave-one-source-out folds judge their held-out
    runs by the other sources' table (:func:`planner.calibration.coverage.fold_extrapolation`)."""
    key, classes = _classes_for(gpu, precision, moe, table)
    if not classes:
        return (_no_class(key),)
    coverage = classes[0].get("coverage", {}) if len(classes) == 1 else _merged_coverage(classes)
    return _extrapolation(coverage, gpus, fsdp_shard, moe_runtime, step_s)


def _best(classes: list[dict], table: str | None, k: str | None) -> dict | None:
    entries = [c if table is None else c.get(table, {}).get(k) for c in classes]
    entries = [e for e in entries if e]
    return max(entries, key=lambda e: (float(e["mfu"]), str(e["run_id"]))) if entries else None


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
    params: float = 0.0,
    mixers: tuple[str, ...] = (),
    step_s: float = 0.0,
) -> Plausibility:
    """Compare a predicted MFU with the best published one of its class (its GPU type's, else its
    efficiency family's): of the same framework and model size band (``params``, total
    parameters; 0: any size) when such runs are in the set, else of the size band, else of the
    framework, else of the class; and say whether ``gpus`` (the plan's GPU count) or ``fsdp_shard``
    (its fully sharded group size; 0: not fully sharded) go beyond the class's calibration runs;
    ``moe_runtime`` (dispatcher, all-to-all overlap, CUDA graphs on) says whether an MoE plan runs a
    way none of the class's runs did; ``mixers`` (:func:`planner.profiles.uncertainty.uncalibrated_mixers`) are token mixers no
    calibration run has; ``step_s`` (the predicted step time; 0: not judged) says whether the step is
    shorter than any of the class's runs measured. The returned class names what was compared with."""
    key, classes = _classes_for(gpu, precision, moe, published_classes())
    if not classes:
        return Plausibility(key, None, "", False, (_no_class(key),))
    extrapolation = coverage_extrapolation(
        published_classes(),
        gpu,
        precision,
        moe,
        gpus=gpus,
        fsdp_shard=fsdp_shard,
        moe_runtime=moe_runtime,
        step_s=step_s,
    ) + tuple(UNCALIBRATED_MIXERS[m] for m in mixers)
    band = size_band(params) if params > 0 else None
    levels = [("by_framework", framework, f" {framework}"), (None, None, "")]
    if band is not None:
        levels = [
            ("by_framework_size", f"{framework} {band}", f" {framework} {band}"),
            ("by_size", band, f" {band}"),
        ] + levels
    for table, k, label in levels:
        entry = _best(classes, table, k)
        if entry is not None:
            return Plausibility(
                key + label,
                float(entry["mfu"]),
                str(entry["run_id"]),
                mfu > float(entry["mfu"]),
                extrapolation,
            )
    raise AssertionError("a class always has an overall best")


def estimate_plausibility(model, job, cluster, est, framework: str = "any") -> Plausibility:
    """:func:`plausibility` of one estimate (:class:`cost_models.estimate.Estimate`) of ``model`` on
    ``cluster`` under ``job``: its first stage's GPU type, the cluster's GPU count, the fully
    sharded group of its configuration, the job's MoE runtime, the model's uncalibrated token
    mixers and the predicted step time. Estimate, search and check all judge a prediction through
    this one function."""
    is_moe = bool(getattr(model, "is_moe", False))
    return plausibility(
        est.stages[0].gpu,
        job.precision,
        is_moe,
        est.mfu,
        framework,
        **plan_coverage(is_moe, job, cluster, est.config, est.step_time_s),
        params=float(getattr(model, "params_total", 0) or 0),
        mixers=uncalibrated_mixers(model),
    )


def plan_coverage(moe: bool, job, cluster, config, step_s: float) -> dict:
    """What of a plan its class's coverage judges (:func:`coverage_extrapolation`'s keywords): the
    cluster's GPU count, the configuration's fully sharded group, the job's MoE runtime, the step
    time. A plan (:func:`estimate_plausibility`) and a held-out calibration run
    (:func:`planner.calibration.coverage.fold_extrapolation`) are judged through this one mapping."""
    return {
        "gpus": cluster.num_gpus,
        "fsdp_shard": config.shard_degree if config.optimizer_sharding == "full" else 0,
        "moe_runtime": (job.moe_dispatcher, job.moe_a2a_overlap, bool(job.cuda_graph_scope)) if moe else None,
        "step_s": step_s,
    }


def _merged_coverage(classes: list[dict]) -> dict:
    """The coverage of several classes together: the largest run and FSDP group of any, the
    shortest step of any, every MoE runtime any of them used."""
    out: dict = {}
    for c in classes:
        cov = c.get("coverage", {})
        for k, size in (("largest_run", "gpus"), ("largest_fsdp_shard", "ranks")):
            if k in cov and (k not in out or cov[k][size] > out[k][size]):
                out[k] = cov[k]
        if "shortest_step" in cov and (
            "shortest_step" not in out or cov["shortest_step"]["seconds"] < out["shortest_step"]["seconds"]
        ):
            out["shortest_step"] = cov["shortest_step"]
        for d, run in cov.get("moe_dispatchers", {}).items():
            out.setdefault("moe_dispatchers", {}).setdefault(d, run)
        for k in ("moe_a2a_overlap", "cuda_graphs"):
            if k in cov:
                out.setdefault(k, cov[k])
    return out


def _extrapolation(
    coverage: dict,
    gpus: int,
    fsdp_shard: int,
    moe_runtime: tuple[str, bool, bool] | None = None,
    step_s: float = 0.0,
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
    shortest = coverage.get("shortest_step")
    if shortest and 0 < step_s < shortest["seconds"]:
        out.append(
            f"a {step_s:.3g} s step: the class's shortest calibration run steps {shortest['seconds']:.3g} s "
            f"({shortest['run_id']})"
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
