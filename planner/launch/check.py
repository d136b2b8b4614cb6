"""CI checks of training configurations: constraints, memory, throughput, distance from the best plan.

A config is a plan file or a Megatron-LM args/launch file. Each check yields findings; a config
passes when no finding is an error. Findings carry the flag names and the line, for GitHub
annotations. The files are read by :mod:`planner.launch.check_read`; the verdict, its JSON and its
annotations are :mod:`planner.launch.verdict` (``Verdict`` and ``Finding``, the result of
:func:`planner.api.check`, are named here too).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cost_models.constraints import violations
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.validation import read_text_capped, rounded
from planner.launch.check_read import LaunchInputs, ReadConfig, judged_cluster, read_config
from planner.launch.verdict import Finding, Verdict

CHECKED_FILES = (
    "a plan (YAML or JSON), a launch script, a Megatron YAML, a torchtitan TOML or a Megatron-Bridge recipe"
)
"""What ``planner check`` reads (the end of a binary file's message, :func:`.validation.read_text_capped`)."""

FLAG_HINTS = {
    "recompute module": ("--recompute-modules", "--recompute-granularity"),
    "recompute_modules": ("--recompute-modules", "--recompute-granularity"),
    "moe_ffn_hidden_size": ("--moe-ffn-hidden-size", "--expert-tensor-parallel-size"),
    "exceeds max_position_embeddings": ("--max-position-embeddings", "--seq-length"),
    "global batch": ("--global-batch-size", "--micro-batch-size"),
    "num_attention_heads": ("--num-attention-heads", "--tensor-model-parallel-size"),
    "num_query_groups": ("--num-query-groups", "--tensor-model-parallel-size"),
    "ffn_hidden_size": ("--ffn-hidden-size", "--tensor-model-parallel-size"),
    "world size": (
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
    ),
    "num_layers": ("--num-layers", "--pipeline-model-parallel-size"),
    "seq_length": ("--seq-length", "--context-parallel-size"),
    "interleaved": ("--num-virtual-stages-per-pipeline-rank",),
    "virtual pipeline": ("--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-size"),
    "layers_per_stage": ("--pipeline-model-parallel-layout",),
    "ep = ": ("--expert-model-parallel-size", "--num-experts"),
    "max_position_embeddings": ("--max-position-embeddings", "--seq-length"),
    "num_experts": ("--num-experts", "--expert-model-parallel-size"),
    "expert tp": ("--expert-model-parallel-size", "--expert-tensor-parallel-size"),
    "does not fit": ("--micro-batch-size", "--recompute-granularity", "--use-distributed-optimizer"),
    "slower than": ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"),
}


def first_causes(problems: list[str]) -> list[str]:
    """The violations Megatron-LM would report: TransformerConfig checks the heads before the
    query groups, so a query-groups complaint beside a heads/tp one is not a cause of its own."""
    if any(p.startswith("num_attention_heads") for p in problems):
        return [p for p in problems if not p.startswith("num_query_groups")]
    return problems


def _flags_for(message: str) -> tuple[str, ...]:
    for key, flags in FLAG_HINTS.items():
        if key in message:
            return flags
    return ()


def _plan_kind(path: str, text: str) -> str:
    """``graph_plan`` or ``plan`` for the text of a YAML/JSON plan file, '' for any other config."""
    if Path(path).suffix not in (".yaml", ".yml", ".json"):
        return ""
    return next((k for k in ("graph_plan", "plan") if f"kind: {k}" in text or f'"kind": "{k}"' in text), "")


def plan_kind(path: str) -> str:
    """``graph_plan`` or ``plan`` for a graph-plan or plan file, which records its own cluster; ''
    for any other config and for a file that cannot be read (:func:`check_file` reports that)."""
    try:
        return _plan_kind(path, read_text_capped(Path(path)))
    except SpecError:
        return ""


def is_plan_file(path: str) -> bool:
    """Whether ``path`` is a plan or graph-plan file (:func:`plan_kind`)."""
    return bool(plan_kind(path))


def check_file(
    path: str,
    cluster: ClusterSpec | None,
    headroom_bytes: float = 0.0,
    max_slowdown: float | None = None,
    profile=None,
    software: str | None = None,
    vocab_size: int | None = None,
    variables: dict | None = None,
    recipe: str | None = None,
    sets: tuple[str, ...] = (),
) -> Verdict:
    """Every check on one config file against ``cluster`` (as loaded: no software or calibration
    profile applied; None: a plan file's own cluster, :func:`is_plan_file`, and an error finding
    for any other file). ``software`` (a software profile name; None: a plan file's recorded one,
    the newest of a launch file's framework) and then ``profile`` (a calibrated
    :class:`planner.profiles.calibrated.Profile`, replacing a plan's recorded one) are applied to the
    cluster the file is judged on (:func:`planner.profiles.software.configure`). ``variables`` are a
    launch script's ``--set`` values; a Megatron-Bridge recipe file's function is ``recipe`` (None:
    its only ``*_config``) and ``sets`` its ``--set`` items (:mod:`planner.launch.bridge.recipe`)."""
    verdict = Verdict(path)
    try:
        # size-capped, UTF-8 (planner.inputs.validation)
        text = read_text_capped(Path(path), expected=CHECKED_FILES)
    except SpecError as exc:
        verdict.add(Finding("error", "read", str(exc)))
        return verdict
    kind = _plan_kind(path, text)
    if kind == "graph_plan":
        return _check_graph_plan(path, cluster, headroom_bytes, max_slowdown, verdict, software, profile)
    launch = LaunchInputs(vocab_size, variables, recipe, tuple(sets))
    read = read_config(verdict, path, text, kind, cluster, software, profile, launch)
    if read is None:
        return verdict
    if not _precision_runs(verdict, read):
        return verdict
    config = _constrained(verdict, read)
    if config is None:
        return verdict
    try:
        est = estimate(read.model, read.cluster, read.job, config)
    except (PlannerError, ValueError) as exc:
        verdict.add(Finding("error", "estimate", str(exc)))
        return verdict
    _judge_estimate(verdict, est, headroom_bytes, read.lines)
    verdict.metrics["framework"] = read.framework
    verdict.metrics["software"] = read.software
    _judge_plausibility(verdict, read, est)
    if max_slowdown is not None:
        _judge_against_best(verdict, read, est.step_time_s, headroom_bytes, max_slowdown)
    return verdict


PRECISION_FLAGS = {
    "fp8": ("--fp8-format",),
    "nvfp4": ("--fp4-format",),
    "bf16": ("--bf16",),
    "fp16": ("--fp16",),
}
"""The Megatron-LM flag that sets each job precision (planner.launch.megatron.importer)."""


def _precision_runs(verdict: Verdict, read: ReadConfig) -> bool:
    """Whether every GPU the file is judged on runs its precision and FP8 recipe
    (:func:`planner.inputs.validation.require_precision`: FP8 on an A100, MXFP8 on a Hopper, BF16 on
    a V100 fail Transformer Engine or PyTorch at start-up); an error finding on the flag when not."""
    from planner.inputs.validation import require_precision

    try:
        require_precision(read.cluster, read.job, verdict.path)
    except SpecError as exc:
        flags = PRECISION_FLAGS.get(read.job.precision, ()) if read.lines else ()
        line = next((read.lines[f] for f in flags if f in read.lines), None)
        verdict.add(Finding("error", "precision", str(exc), flags, line))
        return False
    return True


def _judge_plausibility(verdict: Verdict, read, est) -> None:
    """The estimate's plausibility (:func:`planner.profiles.plausibility.estimate_plausibility`, as
    estimate and search judge theirs) and its 80% interval from the held-out errors of its class
    (:func:`planner.profiles.uncertainty.predict_interval`; the framework the file is for), one class
    coarser when the plan lies outside what the class's calibration runs cover; each such reason
    is a notice."""
    from planner.profiles.plausibility import estimate_plausibility
    from planner.profiles.uncertainty import predict_interval

    p = estimate_plausibility(read.model, read.job, read.cluster, est)
    verdict.metrics["plausibility"] = p.as_dict()
    iv = predict_interval(
        read.cluster,
        read.job.precision,
        read.model.is_moe,
        read.framework,
        est.tokens_per_s_per_gpu,
        est.step_time_s,
        bool(p.extrapolation),
    )
    verdict.metrics["prediction_interval"] = iv.as_dict()
    for reason in p.extrapolation:
        verdict.add(Finding("notice", "calibration", f"outside calibration: {reason}"))


def _constrained(verdict: Verdict, read: ReadConfig) -> ParallelConfig | None:
    """The configuration with dp filled in from the world size; None after an error finding for
    each shape constraint it breaks (:func:`cost_models.constraints.violations`, first causes)."""
    config, cluster = read.config, read.cluster
    mp = config.tp * config.pp * config.cp
    if cluster.num_gpus % mp:
        verdict.add(
            Finding(
                "error",
                "constraints",
                f"world size {cluster.num_gpus} is not divisible by tp*pp*cp = "
                f"{config.tp}*{config.pp}*{config.cp} = {mp}",
                _flags_for("world size"),
            )
        )
        return None
    config = config.with_(dp=cluster.num_gpus // mp)
    problems = first_causes(violations(read.model, cluster, read.job, config))
    for msg in problems:
        flags = _flags_for(msg)
        verdict.add(
            Finding(
                "error",
                "constraints",
                msg,
                flags,
                next((read.lines[f] for f in flags if f in read.lines), None),
            )
        )
    return None if problems else config


def _judge_against_best(
    verdict: Verdict, read: ReadConfig, step_s: float, headroom_bytes: float, max_slowdown: float
) -> None:
    """The slowdown check against the best plan the same framework can launch, as ``planner search``
    ranks it (ties most robust first): a launch is never
    judged against plans its framework cannot run. The memory rule is the stricter of this check's
    and the one the plan was searched under, so a plan is never judged against one its own search
    refused."""
    from planner.plans.problem import TIE_POOL
    from planner.profiles.uncertainty import resolution
    from planner.search.chain import search
    from planner.search.space import Restrictions
    from planner.search.ties import order_ties

    rules = Restrictions(
        framework=read.framework, memory_headroom_bytes=max(headroom_bytes, read.searched_headroom)
    )
    # The best plan as planner search ranks it: statistically tied plans most robust first
    # (planner.search.ties), so a plan the search recommends is never judged slower than itself.
    result = search(read.model, read.cluster, read.job, rules, top_k=TIE_POOL)
    if result.plans:
        best = order_ties(result.plans, resolution())[0][0]
        b = best.config
        _judge_slowdown(
            verdict,
            step_s,
            best.estimate.step_time_s,
            max_slowdown,
            f"tp {b.tp} pp {b.pp} dp {b.dp} cp {b.cp} vpp {b.vpp} mbs {b.micro_batch_size} {b.schedule} "
            f"recompute {b.recompute} {b.optimizer_sharding}: ",
        )


def _judge_estimate(verdict: Verdict, est, headroom_bytes: float, lines: dict, what: str = "") -> None:
    """Metrics, the memory check (with headroom) and the throughput notice of one estimate."""
    worst = est.worst_stage
    verdict.metrics = {
        "step_time_s": est.step_time_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "mfu": est.mfu,
        "peak_memory_bytes": est.peak_memory_bytes,
        "headroom_bytes": worst.memory.headroom_bytes,
    }
    if worst.memory.headroom_bytes < headroom_bytes:
        need = headroom_bytes - worst.memory.headroom_bytes
        msg = (
            f"does not fit: stage {worst.stage} peaks at {worst.memory.peak_bytes / 2**30:.1f} GiB of "
            f"{worst.memory.capacity_bytes / 2**30:.1f} GiB (with {headroom_bytes / 2**30:.1f} GiB headroom required, "
            f"{need / 2**30:.1f} GiB short)"
        )
        flags = _flags_for("does not fit") if not what else ()
        verdict.add(
            Finding("error", "memory", msg, flags, next((lines[f] for f in flags if f in lines), None))
        )
    if not est.host_fits:
        flags = ("--cpu-offloading-num-layers",) if not what else ()
        verdict.add(
            Finding(
                "error",
                "memory",
                f"does not fit in host memory: {est.host_shortfall}",
                flags,
                next((lines[f] for f in flags if f in lines), None),
            )
        )
    verdict.add(
        Finding(
            "notice",
            "throughput",
            # The predictions as search, estimate and plan files show them (api.rounded).
            f"predicted {rounded(est.step_time_s):.3f} s/step, "
            f"{rounded(est.tokens_per_s_per_gpu):,.0f} tokens/s/GPU, MFU {100 * rounded(est.mfu):.1f}%{what}",
        )
    )


def _judge_slowdown(
    verdict: Verdict, step_s: float, best_s: float, max_slowdown: float, best_text: str, graph: bool = False
) -> None:
    """Pass within ``max_slowdown`` of the best plan found, else an error naming it."""
    slower = step_s / best_s - 1
    verdict.metrics["best_step_time_s"] = best_s
    verdict.metrics["slowdown_vs_best"] = slower
    kind = "best graph plan" if graph else "best plan"
    if slower <= max_slowdown:
        verdict.add(
            Finding(
                "notice",
                "slowdown",
                f"within {100 * max(slower, 0.0):.1f}% of the {kind} found ({rounded(best_s):.3f} s/step); "
                f"allowed {100 * max_slowdown:.0f}%",
            )
        )
    else:
        verdict.add(
            Finding(
                "error",
                "slowdown",
                f"{100 * slower:.1f}% slower than the {kind} found ({best_text}{rounded(best_s):.3f} s/step); "
                f"allowed {100 * max_slowdown:.0f}%",
                () if graph else _flags_for("slower than"),
            )
        )


def _check_graph_plan(
    path: str,
    cluster: ClusterSpec | None,
    headroom_bytes: float,
    max_slowdown: float | None,
    verdict: Verdict,
    software: str | None = None,
    profile=None,
) -> Verdict:
    """A graph-pipeline plan: a valid stage graph, memory per stage, throughput, distance from the
    best; under the software profile it records (``software`` replaces it) and ``profile``."""
    from cost_models.graph_costs import estimate_graph
    from planner.plans.graph_plan import read_graph_plan

    try:
        inputs = read_graph_plan(path, software, profile)
    except PlannerError as exc:
        verdict.add(Finding("error", "parse", str(exc)))
        return verdict
    judged = judged_cluster(verdict, path, inputs, cluster, profile)
    if judged is None:
        return verdict
    inputs = replace(inputs, cluster=judged)
    est = estimate_graph(inputs.model, inputs.cluster, inputs.job, inputs.config, inputs.stage_graph)
    _judge_estimate(verdict, est, headroom_bytes, {}, f" (graph pipeline of {inputs.config.pp} stages)")
    verdict.metrics["software"] = inputs.software
    if any(inputs.modes):
        verdict.add(
            Finding(
                "notice",
                "launch",
                "a graph pipeline: Megatron-LM cannot launch it (planner export megatron offers the sequential plan)",
            )
        )
    if max_slowdown is not None:
        from planner.search.graph import search_graph
        from planner.search.space import Restrictions

        # The same memory rule as the search that wrote the plan (see check_file).
        headroom = max(headroom_bytes, inputs.memory_headroom_bytes)
        result = search_graph(
            inputs.model, inputs.cluster, inputs.job, Restrictions(memory_headroom_bytes=headroom), top_k=1
        )
        if result.plans:
            b = result.plans[0]
            _judge_slowdown(
                verdict,
                est.step_time_s,
                b.estimate.step_time_s,
                max_slowdown,
                f"tp {b.config.tp}, {b.config.dp} pipelines of {b.config.pp} stages: ",
                graph=True,
            )
    return verdict


__all__ = ["check_file", "Verdict", "Finding", "SpecError"]
