"""The ``planner`` command: parse, load, call :mod:`planner.api`, render. Nothing else.

Exit codes: 0 ok; 1 spec or user error (bad file, unknown name, invalid configuration, failed
check); 2 usage error (bad flags); 3 no feasible plan. Errors print one line on stderr; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner import __version__, api, render
from planner.errors import PlannerError, UsageError
from planner.graph_model import GraphModelSpec
from planner.plan import write_text_atomic

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find the fastest way to train a large transformer on a GPU cluster, and prove it fits.",
)
models_app = typer.Typer(no_args_is_help=True, help="Built-in model presets.")
hardware_app = typer.Typer(no_args_is_help=True, help="Built-in GPU types and node templates.")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")

_state = {"debug": False}

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name, planner YAML, or HF config.json.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Node template name or cluster YAML.")]
NodesOpt = Annotated[int | None, typer.Option("--nodes", "-n", help="Number of nodes (with a template).")]
GbsOpt = Annotated[int, typer.Option("--global-batch-size", "-b", help="Sequences per optimizer step.")]
SeqOpt = Annotated[int, typer.Option("--seq-len", "-s", help="Tokens per sequence.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16 or fp8.")]
ModelOptional = Annotated[
    str | None, typer.Option("--model", "-m", help="Preset name, planner YAML, or HF config.json.")
]
ClusterOptional = Annotated[
    str | None, typer.Option("--cluster", "-c", help="Node template name or cluster YAML.")
]
GbsOptional = Annotated[
    int | None, typer.Option("--global-batch-size", "-b", help="Sequences per optimizer step.")
]
SeqOptional = Annotated[int | None, typer.Option("--seq-len", "-s", help="Tokens per sequence.")]
PlanOpt = Annotated[
    Path | None,
    typer.Option("--plan", help="A plan file (from planner search --out) instead of the flags."),
]


def _emit_json(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _print(*renderables) -> None:
    con = render.console()
    for r in renderables:
        con.print(r)


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"planner {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """planner: parallelism planning for large-model training."""
    _state["debug"] = debug


# ------------------------------------------------------------------------------------------------
# models / hardware


@models_app.command("list")
def models_list(as_json: JsonOpt = False) -> None:
    """List the built-in model presets."""
    from planner.graph_model import graph_preset_names, load_graph_model
    from planner.loading import load_model, model_preset_names

    graphs = set(graph_preset_names())
    rows = [
        api.model_dict(load_graph_model(n) if n in graphs else load_model(n)) for n in model_preset_names()
    ]
    if as_json:
        _emit_json({"models": rows})
    else:
        _print(render.models_table(rows))


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="Preset name, YAML file or HF config.json.")],
    as_json: JsonOpt = False,
) -> None:
    """Show one model with its derived parameter counts."""
    from planner.graph_model import is_graph_model, load_graph_model
    from planner.loading import load_model

    if is_graph_model(name):
        data = api.model_dict(load_graph_model(name))
        if as_json:
            _emit_json(data)
        else:
            _print(*render.graph_model_tables(data))
        return
    data = api.model_dict(load_model(name))
    if as_json:
        _emit_json(data)
    else:
        _print(render.kv_table(f"model {data['name']}", data))


@hardware_app.command("list")
def hardware_list(as_json: JsonOpt = False) -> None:
    """List GPU types and node templates."""
    from planner.loading import cluster_template_names, gpu_names, load_gpu, load_template

    gpus = [api.gpu_dict(load_gpu(n)) for n in gpu_names()]
    templates = [load_template(n) for n in cluster_template_names()]
    if as_json:
        _emit_json({"gpus": gpus, "clusters": [{"name": t["name"], "node": t["node"]} for t in templates]})
    else:
        _print(*render.hardware_tables(gpus, templates))


@hardware_app.command("show")
def hardware_show(
    name: Annotated[str, typer.Argument(help="GPU type or node template name.")], as_json: JsonOpt = False
) -> None:
    """Show a GPU type, or a node template with its GPU's fields."""
    from planner.errors import SpecError
    from planner.loading import cluster_template_names, gpu_names, load_gpu, load_template

    if name in cluster_template_names():
        t = load_template(name)
        node = dict(t["node"])
        data = {
            "name": t["name"],
            "kind": "cluster_template",
            "source": t.get("source", ""),
            "gpus_per_node": node["gpus_per_node"],
            "node": node,
            "gpu": api.gpu_dict(load_gpu(node["gpu"])),
        }
    elif name in gpu_names():
        data = {"kind": "gpu", **api.gpu_dict(load_gpu(name))}
    else:
        raise SpecError(
            f"unknown hardware '{name}'; GPU types: {', '.join(gpu_names())}; "
            f"node templates: {', '.join(cluster_template_names())}"
        )
    if as_json:
        _emit_json(data)
    else:
        flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
        tables = [render.kv_table(name, flat)]
        if "node" in data:
            tables.append(render.kv_table("node", data["node"]))
            tables.append(
                render.kv_table(f"gpu {data['gpu']['name']}", {k: v for k, v in data["gpu"].items()})
            )
        else:
            tables[0] = render.kv_table(name, data)
        _print(*tables)


# ------------------------------------------------------------------------------------------------
# estimate / timeline / bubbles


def _config(
    tp, pp, cp, ep, vpp, mbs, recompute, recompute_num_layers, sequence_parallel, optimizer_sharding, schedule
):
    from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES, ParallelConfig

    recompute = recompute or "none"
    optimizer_sharding = optimizer_sharding or "distributed"
    vpp = vpp or 1
    for value, allowed, flag in (
        (recompute, RECOMPUTE, "--recompute"),
        (optimizer_sharding, OPTIMIZER_SHARDING, "--optimizer-sharding"),
    ):
        if value not in allowed:
            raise UsageError(f"{flag} {value!r} is not allowed; allowed values: {', '.join(allowed)}")
    if schedule is None:
        schedule = "interleaved" if vpp > 1 else "1f1b"
    if schedule not in SCHEDULES:
        raise UsageError(f"--schedule {schedule!r} is not allowed; allowed values: {', '.join(SCHEDULES)}")
    return ParallelConfig(
        tp=tp or 1,
        pp=pp or 1,
        cp=cp or 1,
        ep=ep or 1,
        vpp=vpp,
        micro_batch_size=mbs or 1,
        recompute=recompute,
        recompute_num_layers=recompute_num_layers or 0,
        sequence_parallel=True if sequence_parallel is None else sequence_parallel,
        optimizer_sharding=optimizer_sharding,
        schedule=schedule,
    )


def _estimate(opts: dict):
    """Load and estimate what an estimate/timeline/bubbles command was given (its ``locals()``):
    a plan file, or a model, cluster, job and configuration flags."""
    model, cluster, nodes, plan = opts["model"], opts["cluster"], opts["nodes"], opts["plan"]
    gbs, seq, precision = opts["global_batch_size"], opts["seq_len"], opts["precision"]
    tp, pp, cp, ep, vpp = opts["tp"], opts["pp"], opts["cp"], opts["ep"], opts["vpp"]
    mbs, recompute, recompute_num_layers = (
        opts["micro_batch_size"],
        opts["recompute"],
        opts["recompute_num_layers"],
    )
    sequence_parallel, optimizer_sharding = opts["sequence_parallel"], opts["optimizer_sharding"]
    schedule = opts["schedule"]
    flags = (
        tp,
        pp,
        cp,
        ep,
        vpp,
        mbs,
        recompute,
        recompute_num_layers,
        sequence_parallel,
        optimizer_sharding,
        schedule,
    )
    if plan is not None:
        if any(x is not None for x in (model, cluster, nodes, gbs, seq)) or any(x is not None for x in flags):
            raise UsageError(
                "--plan gives the model, cluster, job and configuration; do not combine it with "
                "--model/--cluster/--nodes/--global-batch-size/--seq-len or configuration flags"
            )
        return api.estimate_plan_file(str(plan))
    missing = [
        flag
        for flag, v in (
            ("--model", model),
            ("--cluster", cluster),
            ("--global-batch-size", gbs),
            ("--seq-len", seq),
        )
        if v is None
    ]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or give --plan FILE)")
    problem = api.load_problem(model, cluster, nodes, gbs, seq, precision)
    config = _config(*flags)
    return problem, api.estimate_config(problem, config)


TpOpt = Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree.")]
PpOpt = Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel degree.")]
CpOpt = Annotated[int | None, typer.Option("--cp", help="Context-parallel degree.")]
EpOpt = Annotated[int | None, typer.Option("--ep", help="Expert-parallel degree.")]
VppOpt = Annotated[int | None, typer.Option("--vpp", help="Virtual pipeline stages per rank (interleaving).")]
MbsOpt = Annotated[int | None, typer.Option("--micro-batch-size", help="Sequences per micro-batch.")]
RecomputeOpt = Annotated[str | None, typer.Option("--recompute", help="none, selective or full.")]
RecomputeLayersOpt = Annotated[
    int | None,
    typer.Option("--recompute-num-layers", help="Layers per stage recomputed with full recompute (0 = all)."),
]
SpOpt = Annotated[
    bool | None, typer.Option("--sequence-parallel/--no-sequence-parallel", help="Sequence parallelism.")
]
ShardOpt = Annotated[
    str | None, typer.Option("--optimizer-sharding", help="none, distributed, zero2 or full.")
]
ScheduleOpt = Annotated[
    str | None, typer.Option("--schedule", help="1f1b, interleaved, gpipe or zb-h1 (default: by --vpp).")
]


@app.command()
def estimate(
    model: ModelOptional = None,
    cluster: ClusterOptional = None,
    global_batch_size: GbsOptional = None,
    seq_len: SeqOptional = None,
    nodes: NodesOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    vpp: VppOpt = None,
    micro_batch_size: MbsOpt = None,
    recompute: RecomputeOpt = None,
    recompute_num_layers: RecomputeLayersOpt = None,
    sequence_parallel: SpOpt = None,
    optimizer_sharding: ShardOpt = None,
    schedule: ScheduleOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict step time, throughput, MFU and memory of one configuration."""
    problem, est = _estimate(locals())
    data = api.estimate_dict(problem, est)
    if as_json:
        _emit_json(data)
    else:
        _print(*render.estimate_tables(data))
        if not est.fits:
            typer.echo(
                f"warning: does not fit: stage {data['memory']['worst_stage']} needs "
                f"{data['memory']['shortfall_bytes'] / 2**30:.1f} GiB more",
                err=True,
            )


@app.command()
def timeline(
    model: ModelOptional = None,
    cluster: ClusterOptional = None,
    global_batch_size: GbsOptional = None,
    seq_len: SeqOptional = None,
    nodes: NodesOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    vpp: VppOpt = None,
    micro_batch_size: MbsOpt = None,
    recompute: RecomputeOpt = None,
    recompute_num_layers: RecomputeLayersOpt = None,
    sequence_parallel: SpOpt = None,
    optimizer_sharding: ShardOpt = None,
    schedule: ScheduleOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Write the timeline as an SVG file.")] = None,
    width: Annotated[int, typer.Option("--width", help="Characters per row of the terminal chart.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Draw the per-stage pipeline schedule (terminal Gantt chart, optional SVG)."""
    problem, est = _estimate(locals())
    tl = est.timeline
    schedule = "graph-1f1b" if problem.stage_graph is not None else est.config.schedule
    title = f"{problem.model.name} {schedule} p={est.config.pp} m={est.num_microbatches}"
    if svg is not None:
        write_text_atomic(svg, render.timeline_svg(tl, title))
        typer.echo(f"wrote {svg}", err=True)
    if as_json:
        _emit_json(
            {
                "schema_version": api.SCHEMA_VERSION,
                "makespan_s": tl.makespan_s,
                "step_time_s": est.step_time_s,
                "bubble_fraction": tl.bubble_fraction(),
                "stages": [
                    {
                        "stage": r,
                        "busy_s": tl.busy_s(r),
                        "idle_s": tl.idle_s(r),
                        "peak_inflight_microbatches": est.stages[r].memory.peak_inflight_microbatches,
                        "ops": [
                            {
                                "op": tl.op_name(r, i),
                                "start_s": float(tl.start_s[r][i]),
                                "end_s": float(tl.end_s[r][i]),
                            }
                            for i in range(len(tl.kind[r]))
                        ],
                    }
                    for r in range(tl.num_stages)
                ],
            }
        )
    else:
        sys.stdout.write(
            title + f"  (pipeline {tl.makespan_s:.3f} s, bubble {100 * tl.bubble_fraction():.1f}%)\n"
        )
        sys.stdout.write("\n".join(render.gantt_lines(tl, width=width)) + "\n")


@app.command()
def bubbles(
    model: ModelOptional = None,
    cluster: ClusterOptional = None,
    global_batch_size: GbsOptional = None,
    seq_len: SeqOptional = None,
    nodes: NodesOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    vpp: VppOpt = None,
    micro_batch_size: MbsOpt = None,
    recompute: RecomputeOpt = None,
    recompute_num_layers: RecomputeLayersOpt = None,
    sequence_parallel: SpOpt = None,
    optimizer_sharding: ShardOpt = None,
    schedule: ScheduleOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    fill_job: Annotated[
        Path | None, typer.Option("--fill-job", help="Fill-job YAML to pack into the bubbles.")
    ] = None,
    switch_overhead: Annotated[
        float, typer.Option("--switch-overhead-s", help="Context switch in+out, seconds.")
    ] = 0.002,
    safety_margin: Annotated[
        float, typer.Option("--safety-margin", help="Fraction of each window kept free.")
    ] = 0.05,
    min_slice: Annotated[
        float, typer.Option("--min-slice-s", help="Shortest usable window, seconds.")
    ] = 0.005,
    max_slowdown: Annotated[
        float, typer.Option("--max-slowdown", help="Bound on the main job's slowdown.")
    ] = 0.02,
    as_json: JsonOpt = False,
) -> None:
    """Report every idle window of every pipeline stage (PipeFill bubble-fill budget)."""
    from planner import bubbles as bub

    if not (0 <= safety_margin < 1) or switch_overhead < 0 or min_slice < 0:
        raise UsageError(
            "--safety-margin must be in [0, 1); --switch-overhead-s and --min-slice-s must be >= 0"
        )
    problem, est = _estimate(locals())
    b = bub.budget(
        est,
        bub.Assumptions(
            switch_overhead_s=switch_overhead, safety_margin=safety_margin, min_slice_s=min_slice
        ),
    )
    data = {"schema_version": api.SCHEMA_VERSION, "planner_version": __version__, **bub.budget_dict(b)}
    if problem.stage_graph is not None:
        data["schedule"] = "graph-1f1b"
    if fill_job is not None:
        data["fill"] = bub.fill_dict(bub.fit_fill_job(b, bub.load_fill_job(str(fill_job)), max_slowdown))
    if as_json:
        _emit_json(data)
    else:
        _print(*render.budget_tables(data))


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} takes integers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag} takes positive integers, got {text!r}")
    return values


def _words(text: str | None, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    if text is None:
        return None
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} {text!r}: allowed values: {', '.join(allowed)}")
    return values


ListOpt = Optional[str]


@app.command()
def search(
    model: ModelOpt,
    cluster: ClusterOpt,
    global_batch_size: GbsOpt,
    seq_len: SeqOpt,
    nodes: NodesOpt = None,
    precision: PrecisionOpt = "bf16",
    top: Annotated[int, typer.Option("--top", "-k", help="How many plans to return.")] = 5,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the best plan (.yaml or .json).")
    ] = None,
    tp: Annotated[ListOpt, typer.Option("--tp", help="Allowed tp degrees, e.g. 4,8.")] = None,
    pp: Annotated[ListOpt, typer.Option("--pp", help="Allowed pp degrees.")] = None,
    cp: Annotated[ListOpt, typer.Option("--cp", help="Allowed cp degrees.")] = None,
    ep: Annotated[ListOpt, typer.Option("--ep", help="Allowed ep degrees.")] = None,
    vpp: Annotated[ListOpt, typer.Option("--vpp", help="Allowed virtual stages per rank (1 = none).")] = None,
    micro_batch_size: Annotated[
        ListOpt, typer.Option("--micro-batch-size", help="Allowed micro-batch sizes.")
    ] = None,
    recompute: Annotated[ListOpt, typer.Option("--recompute", help="Allowed: none, selective, full.")] = None,
    no_recompute: Annotated[bool, typer.Option("--no-recompute", help="Same as --recompute none.")] = False,
    optimizer_sharding: Annotated[
        ListOpt, typer.Option("--optimizer-sharding", help="Allowed: none, distributed, zero2, full.")
    ] = None,
    schedule: Annotated[
        ListOpt, typer.Option("--schedule", help="Allowed: 1f1b, interleaved, gpipe, zb-h1.")
    ] = None,
    sequence_parallel: SpOpt = None,
    max_tp: Annotated[int | None, typer.Option("--max-tp", help="Largest tp degree.")] = None,
    max_pp: Annotated[int | None, typer.Option("--max-pp", help="Largest pp degree.")] = None,
    max_micro_batch_size: Annotated[int, typer.Option("--max-micro-batch-size")] = 16,
    allow_cross_node_tp: Annotated[
        bool, typer.Option("--allow-cross-node-tp", help="Let tp groups leave the NVLink domain.")
    ] = False,
    even_partitions: Annotated[
        bool, typer.Option("--even-partitions", help="Only Megatron's default even layer split.")
    ] = False,
    headroom_gib: Annotated[
        float,
        typer.Option("--headroom-gib", help="Memory each GPU must keep free beyond the modelled reserve."),
    ] = 2.0,
    explain_flag: Annotated[
        bool, typer.Option("--explain", help="Say why the leading alternatives lost.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find the fastest plans that fit in memory (the main job).

    On a graph model (a DAG of blocks, e.g. the vlm-two-tower-13b, mmt-4tower-4b and t5-11b presets), searches graph pipelines (GraphPipe: branches on their own stages, running concurrently) and reports the best sequential pipeline beside them (speedup_vs_sequential in --json).
    """
    from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES
    from planner import bubbles as bub
    from planner.plan import plan_document, write_plan
    from planner.search import explain
    from planner.space import Restrictions

    if top < 1:
        raise UsageError("--top must be at least 1")
    if headroom_gib < 0:
        raise UsageError("--headroom-gib must not be negative")
    rec = _words(recompute, "--recompute", RECOMPUTE)
    if no_recompute:
        if rec not in (None, ("none",)):
            raise UsageError("--no-recompute contradicts --recompute")
        rec = ("none",)
    restrictions = Restrictions(
        tp=_ints(tp, "--tp"),
        pp=_ints(pp, "--pp"),
        cp=_ints(cp, "--cp"),
        ep=_ints(ep, "--ep"),
        vpp=_ints(vpp, "--vpp"),
        micro_batch_size=_ints(micro_batch_size, "--micro-batch-size"),
        recompute=rec,
        optimizer_sharding=_words(optimizer_sharding, "--optimizer-sharding", OPTIMIZER_SHARDING),
        schedule=_words(schedule, "--schedule", SCHEDULES),
        sequence_parallel=sequence_parallel,
        max_tp=max_tp,
        max_pp=max_pp,
        max_micro_batch_size=max_micro_batch_size,
        allow_cross_node_tp=allow_cross_node_tp,
        uneven_partitions=not even_partitions,
        memory_headroom_bytes=headroom_gib * 2**30,
    )
    problem = api.load_problem(model, cluster, nodes, global_batch_size, seq_len, precision)
    progress = None
    if sys.stderr.isatty() and not as_json:
        progress = render.progress_callback()
    if isinstance(problem.model, GraphModelSpec):
        _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json)
        return
    result = api.run_search(problem, restrictions, top, progress)
    plans = [api.plan_summary(problem, p) for p in result.plans]
    data = {
        "schema_version": api.SCHEMA_VERSION,
        "planner_version": __version__,
        "model": api.model_dict(problem.model),
        "cluster": api.cluster_dict(problem.cluster),
        "job": api.job_dict(problem.job),
        "plans": plans,
        "search": {
            "shapes_enumerated": result.shapes_enumerated,
            "shapes_simulated": result.shapes_evaluated,
            "pruned_by_memory": result.pruned_by_memory,
            "pruned_by_bound": result.pruned_by_bound,
        },
    }
    if explain_flag:
        data["explain"] = explain(result)
    if out is not None:
        best = result.plans[0]
        budget = bub.budget_dict(bub.budget(best.estimate))
        est_dict = api.estimate_dict(api.Problem(problem.model, best.cluster, problem.job), best.estimate)
        predictions = {
            k: v
            for k, v in est_dict.items()
            if k not in ("model", "cluster", "job", "config", "schema_version", "planner_version")
        }
        write_plan(out, plan_document(api.plan_inputs(problem, best), predictions, budget))
        typer.echo(f"wrote {out}", err=True)
    if as_json:
        _emit_json(data)
    else:
        _print(*render.search_tables(data))


def _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json) -> None:
    """``planner search`` on a graph model: best graph plans beside the best sequential plan."""
    from planner import bubbles as bub
    from planner.graph_plan import GraphPlanInputs, graph_plan_document
    from planner.graph_search import run_graph_search
    from planner.plan import write_plan

    result = run_graph_search(problem.model, problem.cluster, problem.job, restrictions, top, progress)
    data = api.graph_search_dict(problem, result)
    if explain_flag:
        data["explain"] = api.graph_explain(result)
    if out is not None:
        best = result.plans[0]
        seq = result.sequential
        gproblem = api.Problem(problem.model, problem.cluster, problem.job, best.stage_graph)
        est_dict = api.estimate_dict(gproblem, best.estimate)
        predictions = {
            k: v
            for k, v in est_dict.items()
            if k not in ("model", "cluster", "job", "config", "schema_version", "planner_version")
        }
        predictions["speedup_vs_sequential"] = result.speedup_vs_sequential
        inputs = GraphPlanInputs(
            problem.model,
            problem.cluster,
            problem.job,
            best.config,
            best.stage_graph,
            best.modes,
            (seq.config, seq.stage_graph) if seq is not None else None,
        )
        budget = {**bub.budget_dict(bub.budget(best.estimate)), "schedule": "graph-1f1b"}
        write_plan(out, graph_plan_document(inputs, predictions, budget))
        typer.echo(f"wrote {out}", err=True)
    if as_json:
        _emit_json(data)
    else:
        _print(*render.graph_search_tables(data))


export_app = typer.Typer(no_args_is_help=True, help="Export a plan to a training framework.")
app.add_typer(export_app, name="export")


@export_app.command("megatron")
def export_megatron(
    plan: Annotated[Path, typer.Argument(help="Plan file from planner search --out.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory for megatron_args.txt and the launch script.")
    ] = Path("megatron_launch"),
    launcher: Annotated[str, typer.Option("--launcher", help="torchrun or slurm.")] = "torchrun",
    force: Annotated[bool, typer.Option("--force", help="Replace existing files in --out.")] = False,
    sequential: Annotated[
        bool,
        typer.Option("--sequential", help="For a graph plan: export its best sequential plan instead."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write Megatron-LM arguments and a launch script for a plan."""
    from planner.errors import SpecError
    from planner.exporters import megatron as mx
    from planner.plan import read_plan

    if launcher not in ("torchrun", "slurm"):
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: torchrun, slurm")
    from planner.graph_plan import is_graph_plan

    if is_graph_plan(plan):
        from planner.graph_plan import sequential_for_megatron

        inputs, note = sequential_for_megatron(plan, sequential)
        typer.echo(f"note: {note}", err=True)
    else:
        if sequential:
            raise UsageError("--sequential applies to graph plans only; this plan is already sequential")
        inputs = read_plan(str(plan))
    if inputs.config.optimizer_sharding == "zero2":
        # Megatron-LM has no ZeRO-2: its distributed optimizer (ZeRO-1) keeps full fp32 gradients.
        from cost_models.estimate import estimate as run_estimate

        zero1 = run_estimate(
            inputs.model, inputs.cluster, inputs.job, inputs.config.with_(optimizer_sharding="distributed")
        )
        if not zero1.fits:
            w = zero1.worst_stage
            raise SpecError(
                f"{plan}: the plan uses ZeRO-2, which Megatron-LM does not have; as its distributed optimizer "
                f"(ZeRO-1) stage {w.stage} would need {-w.memory.headroom_bytes / 2**30:.1f} GiB more; re-run "
                "planner search with --optimizer-sharding distributed,full"
            )
        typer.echo(
            "note: Megatron-LM has no ZeRO-2; exporting the distributed optimizer (ZeRO-1), "
            f"which still fits (peak {zero1.peak_memory_bytes / 2**30:.1f} GiB)",
            err=True,
        )
    args = mx.megatron_args(inputs)
    groups = inputs.cluster.groups
    gpn = groups[0].gpus_per_node
    nodes = sum(g.num_nodes for g in groups)
    script = (mx.torchrun_script if launcher == "torchrun" else mx.slurm_script)(inputs, gpn, nodes)
    files = {out / "megatron_args.txt": mx.args_text(args), out / f"launch_{launcher}.sh": script}
    existing = [str(f) for f in files if f.exists()]
    if existing and not force:
        raise SpecError(f"{', '.join(existing)} already exist; pass --force to replace them")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{out}: cannot create: {exc.strerror}") from None
    for path, text in files.items():
        write_text_atomic(path, text)
    (out / f"launch_{launcher}.sh").chmod(0o755)
    if as_json:
        _emit_json(
            {
                "files": sorted(str(f) for f in files),
                "args": [[f, v] for f, v in args],
                "world_size": gpn * nodes,
            }
        )
    else:
        for f in sorted(files):
            typer.echo(f"wrote {f}", err=True)


@app.command()
def check(
    configs: Annotated[list[Path], typer.Argument(help="Plan files or Megatron-LM args/launch files.")],
    cluster: ClusterOpt,
    nodes: NodesOpt = None,
    headroom_gib: Annotated[
        float, typer.Option("--headroom-gib", help="Memory that must stay free per GPU.")
    ] = 0.0,
    max_slowdown: Annotated[
        float | None,
        typer.Option(
            "--max-slowdown", help="Fail when slower than the best plan found by more than this fraction."
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or github (Actions annotations).")] = "text",
    as_json: JsonOpt = False,
) -> None:
    """Check configs for CI: constraints, memory, throughput, distance from the best plan. Exit 1 on failure."""
    from planner.check import check_file, github_lines, verdict_dict
    from planner.loading import load_cluster

    if fmt not in ("text", "github"):
        raise UsageError(f"--format {fmt!r} is not allowed; allowed values: text, github")
    if headroom_gib < 0 or (max_slowdown is not None and max_slowdown < 0):
        raise UsageError("--headroom-gib and --max-slowdown must not be negative")
    spec = load_cluster(cluster, nodes)
    verdicts = [check_file(str(p), spec, headroom_gib * 2**30, max_slowdown) for p in configs]
    if as_json:
        _emit_json(
            {
                "schema_version": api.SCHEMA_VERSION,
                "passed": all(v.passed for v in verdicts),
                "configs": [verdict_dict(v) for v in verdicts],
            }
        )
    elif fmt == "github":
        for v in verdicts:
            sys.stdout.write("\n".join(github_lines(v)) + "\n")
    else:
        for v in verdicts:
            sys.stdout.write(f"{'PASS' if v.passed else 'FAIL'} {v.path}\n")
            for f in v.findings:
                where = f" (line {f.line})" if f.line else ""
                flags = f" [{', '.join(f.flags)}]" if f.flags else ""
                sys.stdout.write(f"  {f.level}: {f.check}: {f.message}{flags}{where}\n")
    if not all(v.passed for v in verdicts):
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; maps errors to exit codes.

    typer may use its own vendored click, so click's exceptions are recognised by their shape
    (``exit_code`` and ``show``) rather than by class.
    """
    try:
        result = app(args=argv, standalone_mode=False)
        return int(result or 0)
    except PlannerError as exc:
        if _state["debug"]:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except typer.Exit as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("aborted\n")
        return 130
    except Exception as exc:
        if type(exc).__name__ == "Exit":  # click's own Exit, when typer uses the click package
            return int(getattr(exc, "exit_code", 0) or 0)
        if type(exc).__name__ == "Abort":
            sys.stderr.write("aborted\n")
            return 130
        code = getattr(exc, "exit_code", None)
        if code is not None and callable(getattr(exc, "show", None)):
            exc.show()
            return int(code)
        raise


def entry() -> None:
    """``planner`` console script."""
    raise SystemExit(main())
