"""A sweep study as a file (``planner sweep --grid study.yaml``): the models, clusters, node counts,
global batch sizes and sequence lengths of a capacity-planning study, with its token budgets and
GPU-hour prices, in one reviewable document, read as strictly as every input file
(:class:`planner.inputs.documents.Reader`: ``schema_version``, ``kind: sweep``, unknown keys
rejected with the file and the key path).

::

    schema_version: 1
    kind: sweep
    models:                       # presets or files; an entry may carry its own token budget
      - llama3-8b
      - {model: llama3-70b, tokens: 15T}
    clusters:                     # node templates (with node counts) or cluster files
      - dgx-h100
      - {cluster: dgx-a100, nodes: [8, 16], gpu_hour_price_usd: 1.8}
      - my-b200s.yaml             # a cluster file: its node counts are its own
    nodes: [8, 16, 32]            # node counts of the templates that give none of their own
    global_batch_sizes: [512, 1024]
    seq_lengths: [8192]
    tokens: 2T                    # optional: days and GPU-hours to train, and cost with a price
    gpu_hour_price_usd: 2.5       # optional: the price of the clusters that give none

The other keys are the flags of ``planner sweep`` under their own names (``precision``,
``fp8_recipe``, ``framework``, ``software``, ``objective``, ``headroom_gib``,
``gpu_power_fraction``, ``node_power_overhead``), with the same defaults. A file path in
``models`` or ``clusters`` is read relative to the study file's folder.

The points are every (model, global batch, sequence length, cluster, node count), in that order,
each order the file's: the output is in this order whatever finishes first. Token budgets and
prices change no search, so they are attributes of a model and a cluster, not axes of the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from planner.inputs.documents import Reader, check_header, read_document
from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.job_spec import FP8_RECIPES, PRECISIONS
from planner.inputs.validation import check_number, limit, path_exists
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD, OBJECTIVES, TrainingTarget, parse_tokens
from planner.outputs.sweep import SweepPoint, SweepTask
from planner.plans.problem import HEADROOM_GIB_DEFAULT

STUDY_KIND = "sweep"
"""The ``kind`` of a study file."""

MAX_POINTS = 100_000
"""Most points a study may hold: ten times the issue's roadmap study (5 GPU types x 20 node counts x
10 models x 3 batches x 3 sequence lengths = 9,000 points, 5-20 CPU-hours at 2-9 CPU-seconds a
point); a file of a few lines can otherwise ask for billions (every list a hundred long), and the
points are built before any search starts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyModel:
    """One entry of ``models``."""

    model: str
    """A preset name, or a model file's path (relative to the study file as given, resolved)."""
    tokens: float | None = None
    """This model's token budget; None: the study's ``tokens``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyCluster:
    """One entry of ``clusters``."""

    cluster: str
    """A node template, or a cluster file's path (resolved as :attr:`StudyModel.model`)."""
    nodes: tuple[int, ...] | None = None
    """This template's node counts; None: the study's ``nodes`` (a cluster file takes none)."""
    gpu_hour_price_usd: float | None = None
    """This cluster's price per GPU-hour; None: the study's, else the cluster file's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Study:
    """A whole study file, checked and resolved."""

    path: str
    """The study file, as given."""
    models: tuple[StudyModel, ...]
    clusters: tuple[StudyCluster, ...]
    nodes: tuple[int, ...] | None
    """Node counts of every template without its own."""
    global_batch_sizes: tuple[int, ...]
    seq_lengths: tuple[int, ...]
    tokens: float | None
    """Training tokens of every model without its own; None: no time or cost to train."""
    gpu_hour_price_usd: float | None
    precision: str = "bf16"
    fp8_recipe: str | None = None
    framework: str = DEFAULT_FRAMEWORK
    software: str | None = None
    """A software profile name; None: each point's default (as ``--software`` left out)."""
    objective: str = "time"
    headroom_gib: float = HEADROOM_GIB_DEFAULT
    gpu_power_fraction: float = 1.0
    node_power_overhead: float = DEFAULT_NODE_POWER_OVERHEAD

    def as_dict(self) -> dict:
        """The resolved study, echoed in ``planner sweep --json`` (``study``)."""
        return {
            "path": self.path,
            "models": [{"model": m.model, "tokens": m.tokens} for m in self.models],
            "clusters": [
                {
                    "cluster": c.cluster,
                    "nodes": list(c.nodes) if c.nodes is not None else None,
                    "gpu_hour_price_usd": c.gpu_hour_price_usd,
                }
                for c in self.clusters
            ],
            "nodes": list(self.nodes) if self.nodes is not None else None,
            "global_batch_sizes": list(self.global_batch_sizes),
            "seq_lengths": list(self.seq_lengths),
            "tokens": self.tokens,
            "gpu_hour_price_usd": self.gpu_hour_price_usd,
            "precision": self.precision,
            "fp8_recipe": self.fp8_recipe,
            "framework": self.framework,
            "software": self.software,
            "objective": self.objective,
            "headroom_gib": self.headroom_gib,
            "gpu_power_fraction": self.gpu_power_fraction,
            "node_power_overhead": self.node_power_overhead,
        }


def load_study(path: Path) -> Study:
    """Read and check a study file (SpecError naming the file and key otherwise)."""
    from planner.profiles.software import check_software

    where = str(path)
    r = Reader(read_document(path), where)
    check_header(r, STUDY_KIND)
    folder = path.parent
    models = tuple(_model(raw, r, f"models[{i}]", folder) for i, raw in enumerate(_list(r, "models")))
    clusters = tuple(_cluster(raw, r, f"clusters[{i}]", folder) for i, raw in enumerate(_list(r, "clusters")))
    _unique([m.model for m in models], where, "models")
    _unique([c.cluster for c in clusters], where, "clusters")
    precision = r.get("precision", str, "bf16", choices=PRECISIONS)
    fp8_recipe = r.get("fp8_recipe", str, None, choices=FP8_RECIPES)
    if fp8_recipe is not None and precision != "fp8":
        raise SpecError(f"{where}: key 'fp8_recipe' needs precision: fp8 (got precision: {precision})")
    software = r.get("software", str, None)
    study = Study(
        path=where,
        models=models,
        clusters=clusters,
        nodes=_ints(r, "nodes", "num_nodes", required=False),
        global_batch_sizes=_ints(r, "global_batch_sizes", "global_batch_size"),
        seq_lengths=_ints(r, "seq_lengths", "seq_length"),
        tokens=_tokens(r.get("tokens", (str, int, float), None), where, "tokens"),
        gpu_hour_price_usd=r.get("gpu_hour_price_usd", float, None),
        precision=precision,
        fp8_recipe=fp8_recipe,
        framework=r.get("framework", str, DEFAULT_FRAMEWORK, choices=tuple(FRAMEWORKS)),
        software=check_software(software, f"{where}: key 'software'") if software is not None else None,
        objective=r.get("objective", str, "time", choices=OBJECTIVES),
        headroom_gib=r.get("headroom_gib", float, HEADROOM_GIB_DEFAULT),
        gpu_power_fraction=r.get("gpu_power_fraction", float, 1.0, positive=True, maximum=1.5),
        node_power_overhead=r.get("node_power_overhead", float, DEFAULT_NODE_POWER_OVERHEAD, maximum=5.0),
    )
    r.done()
    priced = study.gpu_hour_price_usd is not None or any(c.gpu_hour_price_usd is not None for c in clusters)
    if priced and study.tokens is None and all(m.tokens is None for m in models):
        raise SpecError(f"{where}: key 'gpu_hour_price_usd': a price needs a token budget: give 'tokens'")
    if study.node_power_overhead < 1.0:
        raise SpecError(
            f"{where}: key 'node_power_overhead': must be at least 1, got {study.node_power_overhead}"
        )
    return study


def _list(r: Reader, key: str) -> list:
    """The non-empty list at ``key`` (required)."""
    value = r.get(key, list)
    if not value:
        raise SpecError(f"{r.where}: key '{key}': give at least one entry")
    return value


def _unique(values: list, where: str, key: str) -> None:
    seen = set()
    for i, v in enumerate(values):
        if v in seen:
            raise SpecError(f"{where}: key '{key}[{i}]': {v!r} is listed twice")
        seen.add(v)


def _ints(r: Reader, key: str, bound_key: str, *, required: bool = True) -> tuple[int, ...] | None:
    """A list of distinct positive integers at ``key``, each under the bound of ``bound_key``
    (:data:`planner.inputs.validation.LIMITS`)."""
    raw = r.get(key, list) if required else r.get(key, list, None)
    if raw is None:
        return None
    if not raw:
        raise SpecError(f"{r.where}: key '{r._key(key)}': give at least one value")
    out = tuple(
        check_number(v, r.where, f"{r._key(key)}[{i}]", integer=True, positive=True, maximum=limit(bound_key))
        for i, v in enumerate(raw)
    )
    _unique(list(out), r.where, r._key(key))
    return out


def _tokens(value, where: str, key: str) -> float | None:
    """A token count (``15T``, ``300B``, ``2e12`` or a number) as a float; None stays None."""
    if value is None:
        return None
    try:
        return parse_tokens(str(value), f"{where}: key '{key}'")
    except PlannerError as exc:
        raise SpecError(str(exc)) from None


def _resolved(name: str, folder: Path, presets) -> str:
    """``name`` as a point loads it: a preset name as it is, a path relative to the study file's
    folder when that file exists, else as given (the loader then names what is wrong)."""
    if name in presets or Path(name).is_absolute():
        return name
    candidate = folder / name
    return str(candidate) if path_exists(candidate) else name


def _model(raw, r: Reader, key: str, folder: Path) -> StudyModel:
    from planner.inputs.models import model_preset_names

    if isinstance(raw, str):
        return StudyModel(model=_resolved(raw, folder, model_preset_names()))
    m = Reader(raw, r.where, key)
    model = StudyModel(
        model=_resolved(m.get("model", str), folder, model_preset_names()),
        tokens=_tokens(m.get("tokens", (str, int, float), None), r.where, f"{key}.tokens"),
    )
    m.done()
    return model


def _cluster(raw, r: Reader, key: str, folder: Path) -> StudyCluster:
    from planner.profiles.hardware import cluster_template_names

    if isinstance(raw, str):
        return StudyCluster(cluster=_resolved(raw, folder, cluster_template_names()))
    c = Reader(raw, r.where, key)
    cluster = StudyCluster(
        cluster=_resolved(c.get("cluster", str), folder, cluster_template_names()),
        nodes=_ints(c, "nodes", "num_nodes", required=False),
        gpu_hour_price_usd=c.get("gpu_hour_price_usd", float, None),
    )
    c.done()
    return cluster


def study_tasks(study: Study) -> list[SweepTask]:
    """One :class:`planner.outputs.sweep.SweepTask` per point of ``study``, in the study's order
    (model, global batch, sequence length, cluster, node count). Every cluster is loaded and every
    (model, global batch, sequence length) checked on the first point's cluster here, so that a bad
    name or job fails, naming the file and key, before any search starts."""
    from planner.plans.problem import load_problem, search_restrictions
    from planner.profiles.hardware import cluster_template_names, load_cluster
    from planner.profiles.software import cluster_families, resolve_software

    where = study.path
    restrictions = search_restrictions(study.framework, study.headroom_gib)
    templates = set(cluster_template_names())
    counts = [_node_counts(study, i, templates) for i in range(len(study.clusters))]
    questions = len(study.models) * len(study.global_batch_sizes) * len(study.seq_lengths)
    total = questions * sum(len(c) for c in counts)
    if total > MAX_POINTS:
        raise SpecError(
            f"{where}: {total:,} points (models x global_batch_sizes x seq_lengths x cluster points); "
            f"a study holds at most {MAX_POINTS:,}: split it into several files"
        )
    clusters = []  # (entry index, SweepPoint, ClusterSpec, software, price)
    for i, (entry, node_counts) in enumerate(zip(study.clusters, counts, strict=True)):
        for n in node_counts:
            spec = _in_file(where, f"clusters[{i}]", load_cluster, entry.cluster, n)
            software = _in_file(
                where,
                "software",
                resolve_software,
                study.software,
                restrictions.framework,
                cluster_families(spec),
            )
            price = entry.gpu_hour_price_usd
            price = price if price is not None else study.gpu_hour_price_usd
            clusters.append((i, SweepPoint(entry.cluster, n), spec, software, price))
    tasks = []
    for mi, m in enumerate(study.models):
        tokens = m.tokens if m.tokens is not None else study.tokens
        for gbs in study.global_batch_sizes:
            for seq in study.seq_lengths:
                _, first, _, software, _ = clusters[0]
                _in_file(
                    where,
                    f"models[{mi}]",
                    load_problem,
                    m.model,
                    first.cluster,
                    first.nodes,
                    gbs,
                    seq,
                    study.precision,
                    software=software,
                    fp8_recipe=study.fp8_recipe,
                    what=f"{m.model} at global batch {gbs}, sequence length {seq}",
                )
                for ci, point, spec, software, price in clusters:
                    target = _target(study, tokens, price, spec, f"models[{mi}]", f"clusters[{ci}]")
                    tasks.append(
                        SweepTask(
                            point,
                            m.model,
                            gbs,
                            seq,
                            study.precision,
                            restrictions,
                            target,
                            software,
                            study.fp8_recipe,
                            interval=True,
                        )
                    )
    return tasks


def _node_counts(study: Study, i: int, templates: set[str]) -> tuple:
    """The node counts of ``clusters[i]``: a template's own or the study's (required), ``(None,)``
    for a cluster file (its node counts are its own)."""
    entry, key = study.clusters[i], f"clusters[{i}]"
    if entry.cluster in templates:
        nodes = entry.nodes or study.nodes
        if not nodes:
            raise SpecError(
                f"{study.path}: key '{key}': {entry.cluster} is a node template: give its nodes "
                "(the entry's 'nodes' or the study's)"
            )
        return nodes
    if entry.nodes is not None:
        raise SpecError(
            f"{study.path}: key '{key}.nodes': {entry.cluster} is a cluster file, whose node counts are "
            f"its own; 'nodes' is for the node templates ({', '.join(sorted(templates))})"
        )
    return (None,)


def _target(
    study: Study, tokens: float | None, price: float | None, cluster, model_key: str, cluster_key: str
) -> TrainingTarget | None:
    """A point's training target (None without a token budget): its model's tokens, its cluster's
    price (the entry's, the study's, else the cluster file's own ``gpu_hour_price_usd``)."""
    if tokens is None:
        if study.objective == "cost":
            raise SpecError(
                f"{study.path}: key 'objective': cost needs 'tokens' for every model ({model_key})"
            )
        return None
    price = price if price is not None else cluster.gpu_hour_price_usd
    if study.objective == "cost" and price is None:
        raise SpecError(
            f"{study.path}: key 'objective': cost needs a price for every cluster ({cluster_key}: give "
            "'gpu_hour_price_usd', the study's or the entry's)"
        )
    return TrainingTarget(
        tokens=tokens,
        gpu_hour_price_usd=price,
        gpu_power_fraction=study.gpu_power_fraction,
        node_power_overhead=study.node_power_overhead,
    )


def _in_file(where: str, key: str, fn, *args, what: str | None = None, **kwargs):
    """``fn(*args, **kwargs)``, its planner error re-raised as a SpecError (exit 1: the study file
    is at fault, not a flag) naming the file and key."""
    try:
        return fn(*args, **kwargs)
    except PlannerError as exc:
        raise SpecError(f"{where}: key '{key}'{f' ({what})' if what else ''}: {exc}") from None
