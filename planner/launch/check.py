"""CI checks of training configurations: constraints, memory, throughput, distance from the best plan.

A config is a plan file or a Megatron-LM args/launch file. Each check yields findings; a config
passes when no finding is an error. Findings carry the flag names and the line, for GitHub
annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from cost_models.constraints import violations
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import read_text_capped, rounded
from planner.launch.megatron.export import CLUSTER_FILE, planned_nodes
from planner.launch.megatron.importer import keys_named, parse_megatron
from planner.launch.megatron.rules import megatron_findings
from planner.plans.plan_file import read_plan

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


@dataclass
class Finding:
    level: str  # "error" | "warning" | "notice"
    check: str
    message: str
    flags: tuple[str, ...] = ()
    line: int | None = None


@dataclass
class Verdict:
    path: str
    passed: bool = True
    findings: list[Finding] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        if finding.level == "error":
            self.passed = False


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


def is_plan_file(path: str) -> bool:
    """Whether ``path`` is a plan or graph-plan file, which records its own cluster (False for a
    file that cannot be read: :func:`check_file` reports that)."""
    try:
        return bool(_plan_kind(path, read_text_capped(Path(path))))
    except SpecError:
        return False


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
        text = read_text_capped(Path(path))  # size-capped, UTF-8 (planner.inputs.validation)
    except SpecError as exc:
        verdict.add(Finding("error", "read", str(exc)))
        return verdict
    kind = _plan_kind(path, text)
    if kind == "graph_plan":
        return _check_graph_plan(path, cluster, headroom_bytes, max_slowdown, verdict, software, profile)
    launch = _Launch(vocab_size, variables, recipe, tuple(sets))
    read = _read_config(verdict, path, text, kind, cluster, software, profile, launch)
    if read is None:
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
    verdict.metrics["prediction_interval"] = _interval(read, est)
    if max_slowdown is not None:
        _judge_against_best(verdict, read, est.step_time_s, headroom_bytes, max_slowdown)
    return verdict


def _interval(read, est) -> dict:
    """The estimate's 80% interval from the held-out errors of its class
    (:func:`planner.profiles.uncertainty.predict_interval`; the framework the file is for), one
    class coarser when the model has token mixers no calibration run has
    (:func:`planner.profiles.uncertainty.uncalibrated_mixers`), as estimate's is."""
    from planner.profiles.uncertainty import predict_interval, uncalibrated_mixers

    outside = bool(uncalibrated_mixers(read.model))
    iv = predict_interval(
        read.cluster,
        read.job.precision,
        read.model.is_moe,
        read.framework,
        est.tokens_per_s_per_gpu,
        est.step_time_s,
        outside,
    )
    return iv.as_dict()


@dataclass(frozen=True, slots=True)
class _Config:
    """A config file read for checking: what it trains, how, and on which cluster."""

    model: ModelSpec
    job: JobSpec
    config: ParallelConfig
    """As the file gives it (dp is set from the cluster by :func:`_constrained`)."""
    framework: str
    cluster: ClusterSpec
    """The cluster it is judged on, with the software (and calibrated) profile applied."""
    software: str | None
    lines: dict = field(default_factory=dict)
    """Line of each Megatron flag in the file (a torchtitan TOML: of the matching key)."""
    searched_headroom: float = 0.0
    """The memory headroom a plan file was searched under (0 for a launch file)."""


@dataclass(frozen=True, slots=True)
class _Launch:
    """What the command line gives a launch file's reader beside the file: the vocabulary size, a
    launch script's variables, a Bridge recipe's function and ``--set`` items."""

    vocab_size: int | None = None
    variables: dict | None = None
    recipe: str | None = None
    sets: tuple[str, ...] = ()


def _read_config(
    verdict: Verdict,
    path: str,
    text: str,
    kind: str,
    cluster: ClusterSpec | None,
    software: str | None,
    profile,
    launch: _Launch = _Launch(),
) -> _Config | None:
    """The plan, torchtitan TOML, Megatron-Bridge or Megatron-LM file read, its import notices and
    Megatron's own refusals added to ``verdict``; None once an error finding says why it cannot be
    judged."""
    from planner.launch.bridge.recipe import is_recipe_file
    from planner.profiles.software import cluster_families, configure, default_software

    try:
        if kind == "plan":
            return _read_plan_file(verdict, path, cluster, software, profile)
        if cluster is None:
            verdict.add(
                Finding(
                    "error",
                    "cluster",
                    "a Megatron-LM args or launch file or a torchtitan TOML is checked against a "
                    "cluster (--cluster, --nodes): only plan files record their own",
                )
            )
            return None
        if Path(path).suffix == ".toml":
            read = _read_torchtitan_file(verdict, path, cluster)
        elif _is_bridge_file(path, text):
            read = _read_bridge_file(verdict, path, text, cluster, launch.vocab_size)
        elif is_recipe_file(path):
            read = _read_bridge_recipe(verdict, path, text, cluster, launch)
        else:
            read = _read_megatron_file(verdict, path, text, cluster, launch.vocab_size, launch.variables)
    except PlannerError as exc:
        verdict.add(Finding("error", "parse", str(exc)))
        return None
    software = (
        software if software is not None else default_software(read.framework, cluster_families(cluster))
    )
    try:
        configured, _ = configure(cluster, software, profile)
    except PlannerError as exc:
        verdict.add(Finding("error", "profile", str(exc)))
        return None
    return replace(read, cluster=configured, software=software)


def _read_plan_file(
    verdict: Verdict, path: str, cluster: ClusterSpec | None, software: str | None, profile
) -> _Config | None:
    """A plan file under its recorded cluster and software (``software``, ``profile`` replace
    them); None when ``cluster`` is given and its size differs."""
    inputs = read_plan(path, software, profile)
    if _world_mismatch(verdict, inputs.cluster, cluster):
        return None
    return _Config(
        model=inputs.model,
        job=inputs.job,
        config=inputs.config,
        framework=inputs.framework,
        cluster=inputs.cluster,
        software=inputs.software,
        searched_headroom=inputs.memory_headroom_bytes,
    )


def _read_torchtitan_file(verdict: Verdict, path: str, cluster: ClusterSpec) -> _Config:
    """A torchtitan job config; findings point at the TOML line of the matching key."""
    from planner.launch.torchtitan.importer import KEY_HINTS, read_torchtitan

    titan = read_torchtitan(path, cluster.num_gpus)
    lines = {f: titan.key_lines[k] for f, k in KEY_HINTS.items() if k in titan.key_lines}
    for note in titan.notes:
        verdict.add(Finding("notice", "import", note))
    return _Config(titan.model, titan.job, titan.config, "torchtitan", cluster, None, lines)


def _read_megatron_file(
    verdict: Verdict,
    path: str,
    text: str,
    cluster: ClusterSpec,
    vocab_size: int | None = None,
    variables: dict | None = None,
) -> _Config:
    """A Megatron-LM args or launch file, with a warning for each flag planner does not interpret
    and what Megatron-LM's own validation rejects (planner/launch/megatron/rules.py)."""
    imported = parse_megatron(text, path, cluster.num_gpus, vocab_size, variables, path=path)
    lines = imported.flag_lines
    for note in imported.notes:
        verdict.add(Finding("notice", "import", note))
    cfg = imported.yaml_cfg
    if cfg is not None:
        _yaml_cfg_findings(verdict, imported)
    for flag in imported.unknown if cfg is None else ():
        verdict.add(
            Finding(
                "warning",
                "import",
                f"flag {flag} is accepted by Megatron-LM but not interpreted by planner",
                (flag,),
                lines.get(flag),
            )
        )
    for level, msg, flags in megatron_findings(imported, cluster):
        if cfg is not None:
            msg = keys_named(msg, cfg)
        verdict.add(
            Finding(level, "megatron", msg, flags, next((lines[f] for f in flags if f in lines), None))
        )
    _stage_order(verdict, text, cluster)
    return _Config(imported.model, imported.job, imported.config, "megatron", cluster, None, lines)


def _yaml_cfg_findings(verdict: Verdict, imported) -> None:
    """What a ``--yaml-cfg`` launch reads (:mod:`planner.launch.megatron.yaml_cfg`): an error for the
    first of Megatron's rules the file breaks (:mod:`planner.launch.megatron.yaml_rules`), a notice for
    each value ``validate_yaml`` changed, a warning that Megatron-LM ignores the command line's
    other flags (load_yaml prints one), a warning for each key planner does not interpret (naming
    the file and the key's line; annotated on the ``--yaml-cfg`` line)."""
    cfg = imported.yaml_cfg
    if cfg.stop:
        verdict.add(Finding("error", "megatron", cfg.stop, ("--yaml-cfg",), cfg.line))
    for note in cfg.notes:
        verdict.add(Finding("notice", "import", note, ("--yaml-cfg",), cfg.line))
    if cfg.overridden:
        shown = ", ".join(cfg.overridden[:4]) + (
            f" and {len(cfg.overridden) - 4} more" if len(cfg.overridden) > 4 else ""
        )
        verdict.add(
            Finding(
                "warning",
                "import",
                f"--yaml-cfg {cfg.file}: Megatron-LM loads the file in place of the command line "
                f"(load_yaml: 'argparse arguments will be ignored'); not read: {shown}",
                ("--yaml-cfg",),
                cfg.line,
            )
        )
    keys = list(cfg.unknown) + [cfg.flag_keys.get(f, f) for f in imported.unknown]
    for key in dict.fromkeys(keys):
        verdict.add(
            Finding(
                "warning",
                "import",
                f"{cfg.at(key)}: key {key} is not interpreted by planner",
                (key,),
                cfg.line,
            )
        )


def _is_bridge_file(path: str, text: str) -> bool:
    """A YAML file whose top level is a Megatron-Bridge ConfigContainer override
    (:func:`planner.launch.bridge.importer.is_bridge_overrides`)."""
    import yaml

    from planner.launch.bridge.importer import is_bridge_overrides

    if Path(path).suffix not in (".yaml", ".yml"):
        return False
    try:
        return is_bridge_overrides(yaml.safe_load(text))
    except yaml.YAMLError:
        return False


def _read_bridge_file(
    verdict: Verdict, path: str, text: str, cluster: ClusterSpec, vocab_size: int | None = None
) -> _Config:
    """A Megatron-Bridge ConfigContainer override, judged as the Megatron-LM launch its fields stand
    for (:mod:`planner.launch.bridge.importer`): a warning for each key planner does not interpret,
    Megatron-core's own refusals, findings on the line of the key."""
    from planner.launch.bridge.importer import read_bridge

    return _bridge_config(verdict, read_bridge(text, path, cluster.num_gpus, vocab_size), cluster)


def _read_bridge_recipe(
    verdict: Verdict, path: str, text: str, cluster: ClusterSpec, launch: _Launch
) -> _Config:
    """A Megatron-Bridge Python recipe read without running it (:mod:`planner.launch.bridge.recipe`),
    judged as the override import's files are (:func:`_bridge_config`)."""
    from planner.launch.bridge.recipe import read_recipe

    read = read_recipe(text, path, launch.recipe, launch.sets, cluster.num_gpus, launch.vocab_size)
    return _bridge_config(verdict, read, cluster)


def _bridge_config(verdict: Verdict, read, cluster: ClusterSpec) -> _Config:
    """What a Megatron-Bridge override or recipe read gives (``imported``, ``key_lines``,
    ``flag_keys``, ``notes``, ``unknown``): its notices, a warning for each key planner does not
    interpret, Megatron-Core's own refusals named by the Bridge keys, findings on the key's line."""
    from planner.launch.bridge.importer import renamed

    imported = read.imported
    lines = {f: read.key_lines.get(k) for f, k in read.flag_keys.items() if read.key_lines.get(k)}
    for note in (*read.notes, *imported.notes):
        verdict.add(Finding("notice", "import", note))
    for key in read.unknown:
        verdict.add(
            Finding(
                "warning",
                "import",
                f"key {key} is a Megatron-Bridge field not interpreted by planner",
                (key,),
                read.key_lines.get(key),
            )
        )
    for level, msg, flags in megatron_findings(imported, cluster):
        keys = tuple(read.flag_keys.get(f, f) for f in flags)
        line = next((lines[f] for f in flags if f in lines), None)
        verdict.add(Finding(level, "megatron", renamed(msg, read.flag_keys), keys, line))
    return _Config(imported.model, imported.job, imported.config, "megatron", cluster, None, lines)


def _stage_order(verdict: Verdict, text: str, cluster: ClusterSpec) -> None:
    """A warning when a mixed-GPU export's node map (the GPU type of each node rank the plan needs,
    :func:`planner.launch.megatron.export.planned_nodes`) disagrees with ``cluster``: ranks are
    numbered in the cluster's group order, so its pipeline stages would run on other GPUs than the
    plan placed them on (the search may reorder node groups; the export writes the cluster in stage
    order beside the launch)."""
    planned = planned_nodes(text)
    if planned is None:
        return
    given = [g.gpu.name for g in cluster.groups for _ in range(g.num_nodes)]
    if given == planned:
        return

    def blocks(nodes: list[str]) -> str:
        out: list[list] = []
        for gpu in nodes:
            if out and out[-1][1] == gpu:
                out[-1][0] += 1
            else:
                out.append([1, gpu])
        return ", ".join(f"{n} x {gpu}" for n, gpu in out)

    first = next((k for k, (a, b) in enumerate(zip(given, planned)) if a != b), min(len(given), len(planned)))
    verdict.add(
        Finding(
            "warning",
            "cluster",
            f"the launch's plan places its pipeline stages on nodes {blocks(planned)} in node-rank order; "
            f"the cluster given numbers them {blocks(given)}"
            + (f" (node rank {first} differs)" if first < min(len(given), len(planned)) else "")
            + f": this estimate runs stages on other GPUs than planned; check with the {CLUSTER_FILE} "
            "written beside the launch",
        )
    )


def _constrained(verdict: Verdict, read: _Config) -> ParallelConfig | None:
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
    verdict: Verdict, read: _Config, step_s: float, headroom_bytes: float, max_slowdown: float
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


def _world_mismatch(verdict: Verdict, planned: ClusterSpec, cluster: ClusterSpec | None) -> bool:
    if cluster is None or planned.num_gpus == cluster.num_gpus:
        return False
    verdict.add(
        Finding(
            "error",
            "world size",
            f"the plan is for {planned.num_gpus} GPUs, the cluster has {cluster.num_gpus}",
        )
    )
    return True


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
    if _world_mismatch(verdict, inputs.cluster, cluster):
        return verdict
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


def verdict_dict(v: Verdict) -> dict:
    return {
        "path": v.path,
        "passed": v.passed,
        "metrics": rounded(v.metrics),
        "findings": [
            {"level": f.level, "check": f.check, "message": f.message, "flags": list(f.flags), "line": f.line}
            for f in v.findings
        ],
    }


def github_lines(v: Verdict) -> list[str]:
    """GitHub Actions workflow commands (``::error file=...,line=...::message``)."""
    out = []
    for f in v.findings:
        level = {"error": "error", "warning": "warning", "notice": "notice"}[f.level]
        where = f"file={v.path}" + (f",line={f.line}" if f.line else "")
        message = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        out.append(f"::{level} {where}::{f.check}: {message}")
    return out


__all__ = ["check_file", "verdict_dict", "github_lines", "Verdict", "Finding", "SpecError"]
