"""``planner check RECIPE.py``: a Megatron-Bridge recipe (:mod:`.recipe`) judged as the override
import's launches are (:func:`planner.launch.check.check_file` on a ``ConfigContainer`` override):
the Megatron import's rules, findings naming the recipe's line and field, the estimate and the
slowdown check."""

from __future__ import annotations

from pathlib import Path

from cost_models.estimate import estimate
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import PlannerError
from planner.inputs.validation import read_text_capped
from planner.launch import check as ck
from planner.launch.bridge.importer import renamed
from planner.launch.bridge.recipe import read_recipe
from planner.launch.megatron.rules import megatron_findings


def check_recipe(
    path: str,
    cluster: ClusterSpec,
    headroom_bytes: float = 0.0,
    max_slowdown: float | None = None,
    profile=None,
    software: str | None = None,
    vocab_size: int | None = None,
    recipe: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
) -> ck.Verdict:
    """Every check of :func:`planner.launch.check.check_file` on a recipe file; ``recipe`` the
    function (None: the file's only ``*_config``), ``sets`` the ``--set`` items."""
    from planner.profiles.software import cluster_families, configure, default_software

    verdict = ck.Verdict(path)
    try:
        text = read_text_capped(Path(path))
        read = read_recipe(text, path, recipe, sets, cluster.num_gpus, vocab_size)
    except PlannerError as exc:
        verdict.add(ck.Finding("error", "parse", str(exc)))
        return verdict
    imported = read.imported
    lines = {f: read.key_lines.get(k) for f, k in read.flag_keys.items() if read.key_lines.get(k)}
    for note in (*read.notes, *imported.notes):
        verdict.add(ck.Finding("notice", "import", note))
    for key in read.unknown:
        message = f"key {key} is a Megatron-Bridge field not interpreted by planner"
        verdict.add(ck.Finding("warning", "import", message, (key,), read.key_lines.get(key)))
    for level, msg, flags in megatron_findings(imported, cluster):
        keys = tuple(read.flag_keys.get(f, f) for f in flags)
        line = next((lines[f] for f in flags if f in lines), None)
        verdict.add(ck.Finding(level, "megatron", renamed(msg, read.flag_keys), keys, line))
    software = software if software is not None else default_software("megatron", cluster_families(cluster))
    try:
        configured, _ = configure(cluster, software, profile)
    except PlannerError as exc:
        verdict.add(ck.Finding("error", "profile", str(exc)))
        return verdict
    config_read = ck._Config(
        imported.model, imported.job, imported.config, "megatron", configured, software, lines
    )
    config = ck._constrained(verdict, config_read)
    if config is None:
        return verdict
    try:
        est = estimate(imported.model, configured, imported.job, config)
    except (PlannerError, ValueError) as exc:
        verdict.add(ck.Finding("error", "estimate", str(exc)))
        return verdict
    ck._judge_estimate(verdict, est, headroom_bytes, lines)
    verdict.metrics["framework"] = "megatron"
    verdict.metrics["software"] = software
    verdict.metrics["prediction_interval"] = ck._interval(config_read, est)
    if max_slowdown is not None:
        ck._judge_against_best(verdict, config_read, est.step_time_s, headroom_bytes, max_slowdown)
    return verdict
