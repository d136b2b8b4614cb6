"""What the calibration runs cover, class by class, and which held-out runs lie beyond it.

A class (:func:`planner.profiles.plausibility.class_key`: GPU type, precision, dense or MoE) covers
its largest run (GPUs), its largest fully sharded data-parallel group, its shortest measured step
and, for MoE classes, the token dispatchers, all-to-all overlap and CUDA graphs its runs used
(:func:`add_run`). ``scripts/published_mfu.py`` writes the calibration set's coverage into
``hardware_profiles/published_mfu.yaml``, against which ``planner estimate``, ``search`` and
``check`` judge a plan (:mod:`planner.profiles.plausibility`); a plan beyond it takes the wider
interval of the next coarser class (:mod:`planner.profiles.uncertainty`).

:func:`fold_extrapolation` asks the same question of the leave-one-source-out folds: is a held-out
run, priced by the fit of the other sources, outside what the *other* sources' runs cover? Those
runs are what a user's plan outside calibration is like (a new source, beyond the runs it is
judged by), so the prediction intervals' held-out coverage (:mod:`planner.calibration.intervals`)
checks the widening rule on them, not only the intervals of plans inside calibration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planner.calibration.cases import Case, excluded_reason
from planner.profiles.plausibility import class_key, coverage_extrapolation, plan_coverage


def add_run(coverage: dict, case: Case) -> None:
    """Widen ``coverage`` (one class's) by one run: its largest run (GPUs), its largest fully
    sharded data-parallel group (FSDP shard degree) and its shortest measured step (seconds: the
    step's tokens over the run's measured tokens/s), each with its run; for MoE runs the token
    dispatcher, all-to-all overlap and CUDA graphs (the first run in file order for each): beyond
    them a prediction extrapolates."""
    gpus = case.cluster.num_gpus
    largest = coverage.get("largest_run")
    if largest is None or gpus > largest["gpus"]:
        coverage["largest_run"] = {"gpus": gpus, "run_id": case.run_id}
    step = case.job.tokens_per_step / (case.measured_tokens_per_s_per_gpu * gpus)
    shortest = coverage.get("shortest_step")
    if shortest is None or step < shortest["seconds"]:
        coverage["shortest_step"] = {"seconds": round(step, 4), "run_id": case.run_id}
    if case.config.optimizer_sharding == "full":
        ranks = case.config.shard_degree
        fsdp = coverage.get("largest_fsdp_shard")
        if fsdp is None or ranks > fsdp["ranks"]:
            coverage["largest_fsdp_shard"] = {"ranks": ranks, "run_id": case.run_id}
    if case.model.is_moe:
        job = case.job
        coverage.setdefault("moe_dispatchers", {}).setdefault(job.moe_dispatcher, case.run_id)
        if job.moe_a2a_overlap:
            coverage.setdefault("moe_a2a_overlap", case.run_id)
        if job.cuda_graph_scope:
            coverage.setdefault("cuda_graphs", case.run_id)


def run_class(case: Case) -> str:
    """The plausibility class of a case (its first GPU group's type)."""
    return class_key(case.cluster.groups[0].gpu.name, case.job.precision, case.model.is_moe)


def coverage_table(runs: Iterable[Case]) -> dict[str, dict]:
    """``{class: {"coverage": ...}}`` over the usable runs the statistics count (a run the model is
    not meant to match validates nothing), in the shape of the shipped table's classes."""
    table: dict[str, dict] = {}
    for c in runs:
        if c.skip_reason or excluded_reason(c.run_id):
            continue
        add_run(table.setdefault(run_class(c), {}).setdefault("coverage", {}), c)
    return table


def fold_extrapolation(runs: list[Case], predicted: Mapping[str, float]) -> dict[str, tuple[str, ...]]:
    """For each run of ``predicted`` (run id -> its held-out tokens/s per GPU), why it lies outside
    what the runs of the *other* sources cover (empty: inside), judged as ``planner estimate``
    judges a plan (:func:`planner.profiles.plausibility.coverage_extrapolation`): its GPU count,
    fully sharded group and MoE runtime, and its step as the held-out fit predicts it."""
    by_id = {c.run_id: c for c in runs}
    out: dict[str, tuple[str, ...]] = {}
    for source in sorted({by_id[r].source for r in predicted}):
        table = coverage_table(c for c in runs if c.source != source)
        for rid in sorted(r for r in predicted if by_id[r].source == source):
            c = by_id[rid]
            step_s = c.job.tokens_per_step / (predicted[rid] * c.cluster.num_gpus)
            out[rid] = coverage_extrapolation(
                table,
                c.cluster.groups[0].gpu.name,
                c.job.precision,
                c.model.is_moe,
                **plan_coverage(c.model.is_moe, c.job, c.cluster, c.config, step_s),
            )
    return out
