"""Graph-pipeline plan files (``kind: graph_plan``): the graph model, cluster, job, per-stage shape,
the stage graph (each stage's blocks and layers, and the edges between stages), the best sequential
plan for comparison, the predictions and the bubble-fill budget.

Like chain plans (:mod:`planner.plans.plan_file`), predictions and budgets are outputs: they are recomputed,
never trusted, when the file is read. The stage graph is checked on read: every layer of every
block in exactly one stage, the edges acyclic, and every tensor flowing inside a stage or forward
along the edges (:func:`cost_models.graph_costs.check_stage_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cost_models.graph_costs import StageGraph, check_stage_graph, estimate_graph
from cost_models.graph_units import GRAPH_RECOMPUTE, UnitLayout, unit_layout
from cost_models.parallel import ParallelConfig
from planner import __version__
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.documents import SCHEMA_VERSION, Reader, read_document
from planner.inputs.errors import SpecError
from planner.inputs.graph_model import GraphModelSpec, graph_model_from_mapping, graph_model_to_mapping
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import job_from_mapping
from planner.inputs.validation import require_precision
from planner.plans.plan_file import (
    PlanInputs,
    job_to_mapping,
    open_plan,
    search_from_mapping,
    search_to_mapping,
    software_from_mapping,
    software_to_mapping,
)
from planner.profiles.hardware import cluster_from_mapping, cluster_to_mapping
from planner.profiles.software import configure


@dataclass(frozen=True, slots=True)
class GraphPlanInputs:
    """What a graph plan file fixes."""

    model: GraphModelSpec
    cluster: ClusterSpec
    job: JobSpec
    config: ParallelConfig
    stage_graph: StageGraph
    modes: tuple[bool, ...]
    sequential: tuple[ParallelConfig, StageGraph] | None = None
    """The best sequential plan found by the same search (absent in hand-written files)."""
    memory_headroom_bytes: float = 0.0
    """Memory per GPU the search kept free (the plan's ``search`` section; see PlanInputs)."""
    software: str = "base"
    """The software profile the plan was made with (the plan's ``software`` section; see
    PlanInputs)."""


def stage_blocks(g: GraphModelSpec, layout: UnitLayout, units: tuple[int, ...]) -> list[dict]:
    """A stage's units as runs ``{block, first_layer, num_layers}`` in unit order."""
    runs: list[dict] = []
    for u in units:
        name, k = g.blocks[layout.block[u]].name, layout.layer[u]
        if runs and runs[-1]["block"] == name and runs[-1]["first_layer"] + runs[-1]["num_layers"] == k:
            runs[-1]["num_layers"] += 1
        else:
            runs.append({"block": name, "first_layer": k, "num_layers": 1})
    return runs


def stage_label(g: GraphModelSpec, layout: UnitLayout, units: tuple[int, ...]) -> str:
    """``vision[0:16] + vision_proj`` style label of a stage."""
    parts = []
    for r in stage_blocks(g, layout, units):
        block = g.block(r["block"])
        if block.num_units == 1:
            parts.append(r["block"])
        else:
            parts.append(f"{r['block']}[{r['first_layer']}:{r['first_layer'] + r['num_layers']}]")
    return " + ".join(parts)


def stage_graph_to_mapping(g: GraphModelSpec, sg: StageGraph, tp: int) -> dict:
    layout = unit_layout(g)
    return {
        "stages": [
            {"blocks": stage_blocks(g, layout, units), "replicas": sg.replicas_of(i), "tp": sg.tp_of(i, tp)}
            for i, units in enumerate(sg.stages)
        ],
        "edges": [[a, b] for a, b in sg.edges],
    }


def stage_graph_from_mapping(g: GraphModelSpec, data: dict, where: str, path: str, tp: int) -> StageGraph:
    layout = unit_layout(g)
    r = Reader(data, where, path)
    raw_stages = r.get("stages", list)
    raw_edges = r.get("edges", list, [])
    r.done()
    first = {}
    for u, (b, k) in enumerate(zip(layout.block, layout.layer)):
        if k == 0:
            first[g.blocks[b].name] = u
    names = [b.name for b in g.blocks]
    stages = []
    replicas = []
    tps = []
    for i, raw in enumerate(raw_stages):
        sr = Reader(raw, where, f"{path}.stages[{i}]")
        runs = sr.get("blocks", list)
        replicas.append(sr.get("replicas", int, 1, positive=True))
        tps.append(sr.get("tp", int, tp, positive=True))
        sr.done()
        units: list[int] = []
        for j, run in enumerate(runs):
            rr = Reader(run, where, f"{path}.stages[{i}].blocks[{j}]")
            name = rr.get("block", str, choices=names)
            block = g.block(name)
            k0 = rr.get("first_layer", int, 0)
            n = rr.get("num_layers", int, block.num_units, positive=True)
            rr.done()
            if k0 + n > block.num_units:
                raise SpecError(
                    f"{where}: key '{path}.stages[{i}].blocks[{j}]': layers {k0}..{k0 + n - 1} of block "
                    f"'{name}' do not exist (it has {block.num_units})"
                )
            units += range(first[name] + k0, first[name] + k0 + n)
        stages.append(tuple(units))
    edges = []
    for k, e in enumerate(raw_edges):
        if (
            not isinstance(e, list)
            or len(e) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < len(stages) for x in e)
        ):
            raise SpecError(
                f"{where}: key '{path}.edges[{k}]': expected [from_stage, to_stage] with stages 0..{len(stages) - 1}"
            )
        edges.append((e[0], e[1]))
    sg = StageGraph(
        tuple(stages),
        tuple(sorted(set(edges))),
        tuple(replicas) if any(r > 1 for r in replicas) else (),
        tuple(tps) if any(t != tp for t in tps) else (),
    )
    problem = check_stage_graph(layout, sg)
    if problem:
        raise SpecError(f"{where}: key '{path}': not a valid stage graph: {problem}")
    return sg


def _config_mapping(c: ParallelConfig) -> dict:
    return {
        "tp": c.tp,
        "pipelines": c.dp,
        "num_stages": c.pp,
        "micro_batch_size": c.micro_batch_size,
        "recompute": c.recompute,
        "sequence_parallel": c.sp,
        "optimizer_sharding": c.optimizer_sharding,
        "schedule": c.schedule,
    }


def _config_from(data: dict, where: str, path: str) -> ParallelConfig:
    r = Reader(data, where, path)
    c = ParallelConfig(
        tp=r.get("tp", int, positive=True),
        dp=r.get("pipelines", int, positive=True),
        pp=r.get("num_stages", int, positive=True),
        micro_batch_size=r.get("micro_batch_size", int, positive=True),
        recompute=r.get("recompute", str, "none", choices=GRAPH_RECOMPUTE),
        sequence_parallel=r.get("sequence_parallel", bool, True),
        optimizer_sharding=r.get("optimizer_sharding", str, "distributed", choices=("none", "distributed")),
        schedule=r.get("schedule", str, "1f1b", choices=("1f1b",)),
    )
    r.done()
    return c


def graph_plan_document(inputs: GraphPlanInputs, predictions: dict, budget: dict | None) -> dict:
    """The full graph plan as plain data."""
    g = inputs.model
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "graph_plan",
        "planner_version": __version__,
        "software": software_to_mapping(inputs.software),
        "model": graph_model_to_mapping(g),
        "cluster": cluster_to_mapping(inputs.cluster),
        "job": job_to_mapping(inputs.job),
        "config": _config_mapping(inputs.config),
        "stage_graph": stage_graph_to_mapping(g, inputs.stage_graph, inputs.config.tp),
        "branched": list(inputs.modes),
        "search": search_to_mapping(inputs.memory_headroom_bytes),
        "predictions": predictions,
    }
    if inputs.sequential is not None:
        c, sg = inputs.sequential
        doc["sequential_plan"] = {
            "config": _config_mapping(c),
            "stage_graph": stage_graph_to_mapping(g, sg, c.tp),
        }
    if budget is not None:
        doc["bubble_fill_budget"] = budget
    return doc


def is_graph_plan(path: str | Path) -> bool:
    """Whether a readable plan file is a graph plan (False when it cannot be read)."""
    try:
        return read_document(Path(path)).get("kind") == "graph_plan"
    except SpecError:
        return False


def read_graph_plan(path: str | Path, software: str | None = None, profile=None) -> GraphPlanInputs:
    """Read a graph plan strictly back into its inputs, its cluster under the software profile it
    records (``software`` replaces it) and a calibration ``profile`` when given
    (:func:`planner.profiles.software.configure`)."""
    r, where = open_plan(path, "graph_plan")
    g = graph_model_from_mapping(r.get("model", dict), f"{where} (model)")
    cluster = cluster_from_mapping(r.get("cluster", dict), f"{where} (cluster)")
    job = job_from_mapping(r.get("job", dict), where)
    config = _config_from(r.get("config", dict), where, "config")
    sg = stage_graph_from_mapping(g, r.get("stage_graph", dict), where, "stage_graph", config.tp)
    if sg.num_stages != config.pp:
        raise SpecError(
            f"{where}: key 'config.num_stages': {config.pp}, but the stage graph has {sg.num_stages} stages"
        )
    modes = r.get("branched", list, [])
    if not all(isinstance(x, bool) for x in modes):
        raise SpecError(f"{where}: key 'branched': expected a list of true/false")
    seq = None
    raw_seq = r.get("sequential_plan", dict, None)
    if raw_seq is not None:
        sr = Reader(raw_seq, where, "sequential_plan")
        sc = _config_from(sr.get("config", dict), where, "sequential_plan.config")
        ssg = stage_graph_from_mapping(
            g, sr.get("stage_graph", dict), where, "sequential_plan.stage_graph", sc.tp
        )
        sr.done()
        seq = (sc, ssg)
    headroom = search_from_mapping(r.get("search", dict, {}), where)
    recorded = software_from_mapping(r.get("software", dict, None), where)
    software = recorded if software is None else software
    r.get("predictions", dict, {})
    r.get("bubble_fill_budget", dict, {})
    r.done()
    cluster, _ = configure(cluster, software, profile)
    require_precision(cluster, job, where)
    for c, graph, key in (
        (config, sg, "config"),
        *(((seq[0], seq[1], "sequential_plan.config"),) if seq else ()),
    ):
        _check_shape(c, graph, cluster, job, where, key)
    return GraphPlanInputs(g, cluster, job, config, sg, tuple(modes), seq, headroom, software)


def _check_shape(c: ParallelConfig, sg: StageGraph, cluster: ClusterSpec, job: JobSpec, where: str, key: str):
    gpus = sum(sg.tp_of(i, c.tp) * sg.replicas_of(i) for i in range(sg.num_stages))
    if gpus * c.dp != cluster.num_gpus:
        raise SpecError(
            f"{where}: key '{key}': the stages' GPUs (sum of tp x replicas = {gpus}) x {c.dp} pipelines "
            f"!= the cluster's {cluster.num_gpus} GPUs"
        )
    if job.global_batch_size % (c.dp * c.micro_batch_size):
        raise SpecError(
            f"{where}: key '{key}': the global batch {job.global_batch_size} is not divisible by "
            f"pipelines x micro_batch_size = {c.dp * c.micro_batch_size}"
        )
    bad = [i for i in range(sg.num_stages) if c.micro_batch_size % sg.replicas_of(i)]
    if bad:
        raise SpecError(
            f"{where}: key '{key}': stage {bad[0]} has {sg.replicas_of(bad[0])} replicas, which do not divide "
            f"the micro-batch of {c.micro_batch_size}"
        )


def sequential_for_megatron(plan: str | Path, sequential: bool) -> tuple[PlanInputs, str]:
    """A graph plan's sequential alternative as chain-plan inputs (for the Megatron exporter) and a
    note saying what is exported, or a SpecError saying why Megatron-LM cannot run it and what the
    best sequential plan is. ``sequential``: the user asked for the sequential plan."""
    g = read_graph_plan(plan)
    layout = unit_layout(g.model)
    if g.sequential is not None:
        sc, ssg = g.sequential
    elif not any(g.modes):
        sc, ssg = g.config, g.stage_graph
    else:
        sc, ssg = None, None
    seq_text = "the plan file records no sequential plan; re-run planner search --out"
    if sc is not None:
        est = estimate_graph(g.model, g.cluster, g.job, sc, ssg)
        best = estimate_graph(g.model, g.cluster, g.job, g.config, g.stage_graph)
        stages = "; ".join(stage_label(g.model, layout, u) for u in ssg.stages)
        seq_text = (
            f"the best sequential plan is tp {sc.tp}, pp {sc.pp}, dp {sc.dp}, micro-batch {sc.micro_batch_size}, "
            f"recompute {sc.recompute}: {est.step_time_s:.3f} s/step "
            f"({100 * (est.step_time_s / best.step_time_s - 1):.1f}% slower than the graph plan), stages: {stages}"
        )
    gpt_like = None
    if len(g.model.blocks) == 1:
        b = g.model.blocks[0]
        if b.transformer is not None and b.embedding and b.output_head and b.causal and not b.seq_length:
            gpt_like = b.transformer
    if any(g.modes) and not sequential:
        raise SpecError(
            f"{plan}: a graph pipeline plan (its stages form a DAG: branches run concurrently); Megatron-LM "
            f"runs only sequential pipelines. Instead, {seq_text}"
            + ("; export it with --sequential" if gpt_like is not None and sc is not None else "")
        )
    if gpt_like is None:
        raise SpecError(
            f"{plan}: Megatron-LM's pretrain_gpt.py cannot express {g.model.name}'s blocks "
            f"({', '.join(b.name for b in g.model.blocks)}); {seq_text}. Its parallel flags: "
            f"--tensor-model-parallel-size {sc.tp if sc else g.config.tp} "
            f"--pipeline-model-parallel-size {sc.pp if sc else g.config.pp} "
            f"--micro-batch-size {sc.micro_batch_size if sc else g.config.micro_batch_size} "
            f"--global-batch-size {g.job.global_batch_size}"
        )
    if sc is None:
        raise SpecError(f"{plan}: {seq_text}")
    layers = tuple(len(u) for u in ssg.stages)
    config = sc.with_(layers_per_stage=() if len(set(layers)) == 1 else layers)
    return PlanInputs(
        gpt_like, g.cluster, g.job, config
    ), f"exporting the sequential plan of {plan}: {seq_text}"
