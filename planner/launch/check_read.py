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
    """A plan file under its recorded software (``software``, ``profile`` replace it and its
    calibration) on the cluster :func:`judged_cluster` picks; None after an error finding."""
    inputs = read_plan(path, software, profile)
    judged = judged_cluster(verdict, path, inputs, cluster, profile)
    if judged is None:
        return None
    return ReadConfig(
        model=inputs.model,
        job=inputs.job,
        config=inputs.config,
        framework=inputs.framework,
        cluster=judged,
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


def hardware(cluster: ClusterSpec) -> tuple:
    """What a cluster is built of, per node group: the GPU model and its memory, the node count
    and GPUs per node, the links' nominal bandwidths and latencies, the NVLink domain and host
    memory. The efficiencies are left out: a plan records the calibrated values of its day, which
    a later refit of the same hardware changes."""
    return tuple(
        (
            g.gpu.name,
            g.gpu.memory_bytes,
            g.num_nodes,
            g.gpus_per_node,
            g.intra_node_bandwidth_bytes_per_s,
            g.intra_node_latency_s,
            g.inter_node_bandwidth_bytes_per_s,
            g.inter_node_latency_s,
            g.nvlink_domain_size,
            g.host_memory_bytes,
        )
        for g in cluster.groups
    )


def _gpus(cluster: ClusterSpec) -> str:
    """``8 x H100-SXM-80GB`` per node group, in group order."""
    return ", ".join(f"{g.num_nodes * g.gpus_per_node} x {g.gpu.name}" for g in cluster.groups)


def _differences(planned: ClusterSpec, given: ClusterSpec) -> str:
    """How a single-group ``given`` cluster differs from the single-group ``planned`` one, in
    words (GPU model, memory, node shape, links)."""
    a, b = planned.groups[0], given.groups[0]
    gib, gbit = 2**30, 1e9 / 8
    out = []
    if a.gpu.name != b.gpu.name or a.gpu.memory_bytes != b.gpu.memory_bytes:
        out.append(
            f"GPUs {a.gpu.name} ({a.gpu.memory_bytes / gib:.0f} GiB) -> {b.gpu.name} ({b.gpu.memory_bytes / gib:.0f} GiB)"
        )
    if (a.num_nodes, a.gpus_per_node) != (b.num_nodes, b.gpus_per_node):
        out.append(f"{a.num_nodes} x {a.gpus_per_node} GPUs -> {b.num_nodes} x {b.gpus_per_node}")
    for what, x, y, unit, scale in (
        (
            "intra-node link",
            a.intra_node_bandwidth_bytes_per_s,
            b.intra_node_bandwidth_bytes_per_s,
            "GB/s",
            1e9,
        ),
        (
            "inter-node link",
            a.inter_node_bandwidth_bytes_per_s,
            b.inter_node_bandwidth_bytes_per_s,
            "Gb/s",
            gbit,
        ),
        ("intra-node latency", a.intra_node_latency_s, b.intra_node_latency_s, "us", 1e-6),
        ("inter-node latency", a.inter_node_latency_s, b.inter_node_latency_s, "us", 1e-6),
        ("NVLink domain", a.nvlink_domain_size, b.nvlink_domain_size, "GPUs", 1),
        ("host memory", a.host_memory_bytes, b.host_memory_bytes, "GiB", gib),
    ):
        if x != y:
            out.append(f"{what} {x / scale:g} -> {y / scale:g} {unit}")
    return "; ".join(out)


def judged_cluster(
    verdict: Verdict, path: str, inputs, cluster: ClusterSpec | None, profile
) -> ClusterSpec | None:
    """The cluster a plan or graph-plan file (``inputs``, as :func:`read_plan` read it: its software
    profile, the recorded one unless the command line replaced it) is judged on, ``profile`` the
    calibration the command line gives (None: the plan's recorded one); None after an error finding.

    Without ``cluster``, or with one of the same :func:`hardware` (a refit changes only the
    efficiencies), the plan's recorded cluster. A cluster of another world size is an error. A
    single-group cluster of other hardware (another GPU type, other links: ``planner check plan.yaml
    -c dgx-b200 -n 8`` on an H100 plan) is the cluster judged, as the plan's layout stands, under
    the plan's software profile and its calibration where that is of the given GPU type (a recorded
    one of another is dropped with a notice, a given one is an error), with a warning naming what
    differs, and an error when its GPUs cannot run the plan's precision. A plan on several GPU types
    places its stages on node groups: a cluster with other GPU counts per type is an error (search
    again), one with the same is judged on the plan's recorded cluster."""
    from planner.inputs.validation import require_precision
    from planner.profiles.software import configure

    planned = inputs.cluster
    if world_mismatch(verdict, planned, cluster):
        return None
    if cluster is None or hardware(cluster) == hardware(planned):
        return planned
    if len(planned.groups) > 1 or len(cluster.groups) > 1:

        def counts(c: ClusterSpec) -> list:
            totals: dict[str, int] = {}
            for g in c.groups:
                totals[g.gpu.name] = totals.get(g.gpu.name, 0) + g.num_nodes * g.gpus_per_node
            return sorted(totals.items())

        if counts(planned) == counts(cluster):
            return planned
        verdict.add(
            Finding(
                "error",
                "cluster",
                f"the plan places its pipeline stages on {_gpus(planned)}; the cluster has {_gpus(cluster)}: "
                "a plan over several GPU types is checked on the GPUs it was searched for "
                "(planner search finds one for this cluster)",
            )
        )
        return None
    given = profile is not None
    profile = profile if given else getattr(inputs, "profile", None)
    gpu = cluster.groups[0].gpu.name
    if profile is not None and profile.gpu != gpu and not given:
        verdict.add(
            Finding(
                "notice",
                "profile",
                f"the plan's calibration profile is for {profile.gpu}: not applied on {gpu}",
            )
        )
        profile = None
    try:
        judged, _ = configure(cluster, inputs.software, profile)
        require_precision(judged, inputs.job, path)
    except PlannerError as exc:
        verdict.add(Finding("error", "cluster", str(exc)))
        return None
    verdict.add(
        Finding(
            "warning",
            "cluster",
            f"the plan was searched for {planned.name} and is judged on {cluster.name} as its layout stands "
            f"({_differences(planned, cluster)}); its recorded predictions are not this cluster's, and "
            "planner search finds the best plan for it",
        )
    )
    return judged
