"""The config files ``planner check`` judges, read into what they train, how and on which cluster
(:class:`ReadConfig`): plan files, torchtitan TOMLs, Megatron-Bridge overrides and recipes, Megatron-LM
args and launch files; their import notices, the flags and keys planner does not interpret and
Megatron's own refusals added to the verdict as findings on the file's lines. The judgement is
:mod:`planner.launch.check`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import PlannerError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.launch.megatron.export import CLUSTER_FILE, planned_nodes
from planner.launch.megatron.importer import keys_named, parse_megatron
from planner.launch.megatron.rules import megatron_findings
from planner.launch.verdict import Finding, Verdict
from planner.plans.plan_file import read_plan


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """A config file read for checking: what it trains, how, and on which cluster."""

    model: ModelSpec
    job: JobSpec
    config: ParallelConfig
    """As the file gives it (dp is set from the cluster by :func:`planner.launch.check._constrained`)."""
    framework: str
    cluster: ClusterSpec
    """The cluster it is judged on, with the software (and calibrated) profile applied."""
    software: str | None
    lines: dict = field(default_factory=dict)
    """Line of each Megatron flag in the file (a torchtitan TOML: of the matching key)."""
    searched_headroom: float = 0.0
    """The memory headroom a plan file was searched under (0 for a launch file)."""


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """What the command line gives a launch file's reader beside the file: the vocabulary size, a
    launch script's variables, a Bridge recipe's function and ``--set`` items."""

    vocab_size: int | None = None
    variables: dict | None = None
    recipe: str | None = None
    sets: tuple[str, ...] = ()


def read_config(
    verdict: Verdict,
    path: str,
    text: str,
    kind: str,
    cluster: ClusterSpec | None,
    software: str | None,
    profile,
    launch: LaunchInputs = LaunchInputs(),
) -> ReadConfig | None:
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
) -> ReadConfig | None:
    """A plan file under its recorded cluster and software (``software``, ``profile`` replace
    them); None when ``cluster`` is given and its size differs."""
    inputs = read_plan(path, software, profile)
    if world_mismatch(verdict, inputs.cluster, cluster):
        return None
    return ReadConfig(
        model=inputs.model,
        job=inputs.job,
        config=inputs.config,
        framework=inputs.framework,
        cluster=inputs.cluster,
        software=inputs.software,
        searched_headroom=inputs.memory_headroom_bytes,
    )


def _read_torchtitan_file(verdict: Verdict, path: str, cluster: ClusterSpec) -> ReadConfig:
    """A torchtitan job config; findings point at the TOML line of the matching key."""
    from planner.launch.torchtitan.importer import KEY_HINTS, read_torchtitan

    titan = read_torchtitan(path, cluster.num_gpus)
    lines = {f: titan.key_lines[k] for f, k in KEY_HINTS.items() if k in titan.key_lines}
    for note in titan.notes:
        verdict.add(Finding("notice", "import", note))
    return ReadConfig(titan.model, titan.job, titan.config, "torchtitan", cluster, None, lines)


def _read_megatron_file(
    verdict: Verdict,
    path: str,
    text: str,
    cluster: ClusterSpec,
    vocab_size: int | None = None,
    variables: dict | None = None,
) -> ReadConfig:
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
    return ReadConfig(imported.model, imported.job, imported.config, "megatron", cluster, None, lines)


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
) -> ReadConfig:
    """A Megatron-Bridge ConfigContainer override, judged as the Megatron-LM launch its fields stand
    for (:mod:`planner.launch.bridge.importer`): a warning for each key planner does not interpret,
    Megatron-core's own refusals, findings on the line of the key."""
    from planner.launch.bridge.importer import read_bridge

    return _bridge_config(verdict, read_bridge(text, path, cluster.num_gpus, vocab_size), cluster)


def _read_bridge_recipe(
    verdict: Verdict, path: str, text: str, cluster: ClusterSpec, launch: LaunchInputs
) -> ReadConfig:
    """A Megatron-Bridge Python recipe read without running it (:mod:`planner.launch.bridge.recipe`),
    judged as the override import's files are (:func:`_bridge_config`)."""
    from planner.launch.bridge.recipe import read_recipe

    read = read_recipe(text, path, launch.recipe, launch.sets, cluster.num_gpus, launch.vocab_size)
    return _bridge_config(verdict, read, cluster)


def _bridge_config(verdict: Verdict, read, cluster: ClusterSpec) -> ReadConfig:
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
    return ReadConfig(imported.model, imported.job, imported.config, "megatron", cluster, None, lines)


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


def world_mismatch(verdict: Verdict, planned: ClusterSpec, cluster: ClusterSpec | None) -> bool:
    """Whether ``cluster`` (when given) has another world size than the plan's, an error finding
    added to ``verdict`` then."""
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
