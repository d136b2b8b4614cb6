"""``planner search``: the fastest plans that fit in memory (the chain search, or graph pipelines on
a graph model), ranked by time, cost or goodput, the best optionally written as a plan file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from planner import __version__, api
from planner.calibration.memory_validation import HEADROOM_GIB_DEFAULT
from planner.cli import render
from planner.cli.common import (
    _eager_ops,
    _emit_json,
    _finite,
    _ints,
    _note,
    _print,
    _profile,
    _progress,
    _recompute_modules,
    _runtime,
    _software_note,
    _words,
)
from planner.cli.options import (
    PANEL_COST,
    PANEL_MEMORY,
    PANEL_OUTPUT,
    PANEL_SPACE,
    AttentionImplOpt,
    ClusterOpt,
    CudaGraphOpt,
    EagerOpsOpt,
    Fp8RecipeOpt,
    FrameworkOpt,
    GbsOpt,
    GradDtypeOpt,
    JsonOpt,
    ListOpt,
    ModelOpt,
    MoeDispatcherOpt,
    MoeOverlapOpt,
    NodeOverheadOpt,
    NodesOpt,
    ObjectiveOpt,
    OptimizerStateDtypeOpt,
    PowerFractionOpt,
    PrecisionOpt,
    PriceOpt,
    ProfileOpt,
    QuietOpt,
    SeqOpt,
    SoftwareOpt,
    TokensOpt,
    TpOverlapOpt,
    UnfusedAccumulationOpt,
)
from planner.cli.root import app
from planner.inputs.errors import UsageError
from planner.inputs.files import write_text_atomic
from planner.inputs.graph_model import GraphModelSpec
from planner.outputs import graph_views as graph_api
from planner.outputs import views
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD


@app.command()
def search(
    model: ModelOpt,
    cluster: ClusterOpt,
    global_batch_size: GbsOpt,
    seq_len: SeqOpt,
    nodes: NodesOpt = None,
    precision: PrecisionOpt = "bf16",
    top: Annotated[
        int,
        typer.Option("--top", "-k", help="How many distinct plans to return.", rich_help_panel=PANEL_OUTPUT),
    ] = 5,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write the best plan (.yaml or .json).", rich_help_panel=PANEL_OUTPUT
        ),
    ] = None,
    tp: Annotated[
        ListOpt, typer.Option("--tp", help="Allowed tp degrees, e.g. 4,8.", rich_help_panel=PANEL_SPACE)
    ] = None,
    pp: Annotated[
        ListOpt, typer.Option("--pp", help="Allowed pp degrees.", rich_help_panel=PANEL_SPACE)
    ] = None,
    cp: Annotated[
        ListOpt, typer.Option("--cp", help="Allowed cp degrees.", rich_help_panel=PANEL_SPACE)
    ] = None,
    ep: Annotated[
        ListOpt, typer.Option("--ep", help="Allowed ep degrees.", rich_help_panel=PANEL_SPACE)
    ] = None,
    vpp: Annotated[
        ListOpt,
        typer.Option(
            "--vpp", help="Allowed virtual stages per rank (1 = none).", rich_help_panel=PANEL_SPACE
        ),
    ] = None,
    micro_batch_size: Annotated[
        ListOpt,
        typer.Option("--micro-batch-size", help="Allowed micro-batch sizes.", rich_help_panel=PANEL_SPACE),
    ] = None,
    recompute: Annotated[
        ListOpt,
        typer.Option("--recompute", help="Allowed: none, selective, op, full.", rich_help_panel=PANEL_SPACE),
    ] = None,
    no_recompute: Annotated[
        bool, typer.Option("--no-recompute", help="Same as --recompute none.", rich_help_panel=PANEL_SPACE)
    ] = False,
    recompute_modules: Annotated[
        str | None,
        typer.Option(
            "--recompute-modules",
            help="Module list of the selective variant searched (Megatron --recompute-modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts). Default: moe_act,layernorm (MoE) and mla_up_proj (MLA) besides core attention on request.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    optimizer_sharding: Annotated[
        ListOpt,
        typer.Option(
            "--optimizer-sharding",
            help="Allowed: none, distributed, zero2, full.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    optimizer_instances: Annotated[
        ListOpt,
        typer.Option(
            "--optimizer-instances",
            help="Also search the partial distributed optimizer with these instance counts, e.g. 1,8 (Megatron --num-distributed-optimizer-instances: optimizer states sharded over dp*cp/N ranks, N replicas). Default 1.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    rank_order: Annotated[
        ListOpt,
        typer.Option(
            "--rank-order",
            help="Rank layouts to search, e.g. tp-cp-ep-dp-pp,tp-cp-ep-pp-dp (Megatron's default, and --use-tp-pp-dp-mapping: a pipeline's stages adjacent, inside an NVL72 rack when they fit). Default: Megatron's default only.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    offload_layers: Annotated[
        ListOpt,
        typer.Option(
            "--offload-layers",
            help="Also search offloading the activations of this many first layers to host memory, e.g. 0,8,16 (Megatron --cpu-offloading-num-layers; pp 1, no recompute; 0 = none too). Off by default; plans must fit each node's host memory (host_memory_gb).",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    schedule: Annotated[
        ListOpt,
        typer.Option(
            "--schedule",
            help="Allowed: 1f1b, interleaved, gpipe, zb-h1, zb-h2, zb-v.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    sequence_parallel: Annotated[
        Optional[bool],
        typer.Option(
            "--sequence-parallel/--no-sequence-parallel",
            help="Only with (or only without) sequence parallelism (default: with, where tp > 1).",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    max_tp: Annotated[
        int | None, typer.Option("--max-tp", help="Largest tp degree.", rich_help_panel=PANEL_SPACE)
    ] = None,
    max_pp: Annotated[
        int | None, typer.Option("--max-pp", help="Largest pp degree.", rich_help_panel=PANEL_SPACE)
    ] = None,
    max_micro_batch_size: Annotated[
        int,
        typer.Option(
            "--max-micro-batch-size",
            help="Largest micro-batch searched, in sequences (with no --micro-batch-size list).",
            min=1,
            rich_help_panel=PANEL_SPACE,
        ),
    ] = 16,
    allow_cross_node_tp: Annotated[
        bool,
        typer.Option(
            "--allow-cross-node-tp",
            help="Let tp groups leave the NVLink domain.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = False,
    even_partitions: Annotated[
        bool,
        typer.Option(
            "--even-partitions", help="Only Megatron's default even layer split.", rich_help_panel=PANEL_SPACE
        ),
    ] = False,
    headroom_gib: Annotated[
        float,
        typer.Option(
            "--headroom-gib",
            help="Memory each GPU must keep free beyond the modelled reserve, in GiB.",
            rich_help_panel=PANEL_MEMORY,
        ),
    ] = HEADROOM_GIB_DEFAULT,
    explain_flag: Annotated[
        bool,
        typer.Option(
            "--explain", help="Say why the leading alternatives lost.", rich_help_panel=PANEL_OUTPUT
        ),
    ] = False,
    framework: FrameworkOpt = "megatron",
    tokens: TokensOpt = None,
    gpu_hour_price: PriceOpt = None,
    gpu_power_fraction: PowerFractionOpt = 1.0,
    node_power_overhead: NodeOverheadOpt = DEFAULT_NODE_POWER_OVERHEAD,
    objective: ObjectiveOpt = "time",
    failure_aware: Annotated[
        bool,
        typer.Option(
            "--failure-aware",
            help="Rank by expected goodput over a run (failures, checkpoints, hot spares; see planner goodput).",
            rich_help_panel=PANEL_COST,
        ),
    ] = False,
    csv_out: Annotated[
        Path | None,
        typer.Option(
            "--csv",
            help="Write every enumerated configuration and what became of it (CSV).",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    moe_dispatcher: MoeDispatcherOpt = "alltoall",
    grad_dtype: GradDtypeOpt = None,
    optimizer_state_dtype: OptimizerStateDtypeOpt = None,
    no_gradient_accumulation_fusion: UnfusedAccumulationOpt = False,
    fp8_recipe: Fp8RecipeOpt = None,
    attention_impl: AttentionImplOpt = None,
    moe_a2a_overlap: MoeOverlapOpt = False,
    cuda_graph_scope: CudaGraphOpt = None,
    eager_ops: EagerOpsOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the fastest plans that fit in memory (the main job).

    On a graph model (a DAG of blocks, e.g. the vlm-two-tower-13b, mmt-4tower-4b and t5-11b presets), searches graph pipelines (GraphPipe: branches on their own stages, running concurrently) and reports the best sequential pipeline beside them (speedup_vs_sequential in --json).
    """
    from cost_models.parallel import OPTIMIZER_SHARDING, RANK_ORDERS, RECOMPUTE, SCHEDULES
    from planner.frameworks import get_framework
    from planner.outputs import bubbles as bub
    from planner.outputs.costing import check_objective, make_target, rank_by_cost
    from planner.plans.plan_file import framework_to_mapping, plan_document, write_plan
    from planner.resilience.spares import FAILURE_AWARE_POOL, failure_aware_rank
    from planner.resilience.views import goodput_summary
    from planner.search.candidates import candidates_csv
    from planner.search.chain import explain
    from planner.search.space import Restrictions

    if top < 1:
        raise UsageError("--top must be at least 1")
    _finite(headroom_gib=headroom_gib)
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
        recompute_modules=_recompute_modules(recompute_modules),
        optimizer_sharding=_words(optimizer_sharding, "--optimizer-sharding", OPTIMIZER_SHARDING),
        optimizer_instances=_ints(optimizer_instances, "--optimizer-instances"),
        rank_order=_words(rank_order, "--rank-order", RANK_ORDERS),
        offload_layers=_ints(offload_layers, "--offload-layers", minimum=0),
        schedule=_words(schedule, "--schedule", SCHEDULES),
        sequence_parallel=sequence_parallel,
        max_tp=max_tp,
        max_pp=max_pp,
        max_micro_batch_size=max_micro_batch_size,
        allow_cross_node_tp=allow_cross_node_tp,
        uneven_partitions=not even_partitions,
        memory_headroom_bytes=headroom_gib * 2**30,
        framework=get_framework(framework).name,
    )
    problem = api.load_problem(
        model,
        cluster,
        nodes,
        global_batch_size,
        seq_len,
        precision,
        _profile({"profile": profile}),
        tp_comm_overlap,
        software,
        restrictions.framework,
        eager_ops=_eager_ops(eager_ops),
        **_runtime(locals()),
    )
    _software_note(problem, quiet)
    progress = _progress(quiet, as_json)
    target = make_target(tokens, gpu_hour_price, problem.cluster, gpu_power_fraction, node_power_overhead)
    check_objective(objective, target)
    if isinstance(problem.model, GraphModelSpec):
        if failure_aware:
            raise UsageError("--failure-aware applies to sequential models, not graph models")
        if csv_out is not None or target is not None:
            raise UsageError(
                "--csv, --tokens and --gpu-hour-price apply to sequential models, not graph models"
            )
        _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json, quiet)
        return
    pool = max(top, FAILURE_AWARE_POOL) if failure_aware else top
    result = api.run_search(problem, restrictions, pool, progress, collect=csv_out is not None)
    if objective == "cost":
        result.plans = rank_by_cost(result.plans, target)
    goodputs = None
    if failure_aware:
        result.plans, goodputs = failure_aware_rank(problem, result.plans, restrictions, top)
        goodputs = [goodput_summary(g) for g in goodputs]
    plans = [views.plan_summary(problem, p, target) for p in result.plans]
    for row, g in zip(plans, goodputs or []):
        row["goodput"] = g
    data = {
        "schema_version": views.SCHEMA_VERSION,
        "planner_version": __version__,
        "model": views.model_dict(problem.model),
        "cluster": views.cluster_dict(problem.cluster),
        "job": views.job_dict(problem.job),
        "framework": framework_to_mapping(restrictions.framework),
        **views.software_dict(problem),
        "plans": plans,
        "search": {
            "shapes_enumerated": result.shapes_enumerated,
            "shapes_simulated": result.shapes_evaluated,
            "pruned_by_memory": result.pruned_by_memory,
            "pruned_by_bound": result.pruned_by_bound,
            "rejected": dict(sorted(result.rejections.counts.items())),
        },
    }
    if objective != "time":
        data["objective"] = objective
    if explain_flag:
        data["explain"] = explain(result)
    if csv_out is not None:
        write_text_atomic(csv_out, candidates_csv(result.candidates or []))
        _note(f"wrote {csv_out} ({len(result.candidates or [])} configurations)", quiet)
    if out is not None:
        best = result.plans[0]
        budget = views.rounded(bub.budget_summary_dict(bub.budget(best.estimate)))
        predictions = views.predictions_dict(best.estimate, views.training_dict(best, target))
        inputs = api.plan_inputs(problem, best, restrictions.framework, restrictions.memory_headroom_bytes)
        write_plan(out, plan_document(inputs, predictions, budget))
        _note(f"wrote {out}", quiet)
    if as_json:
        _emit_json(data)
    else:
        _print(*render.search_tables(data))
        if failure_aware:
            from planner.cli.render_whatif import failure_aware_table

            _print(failure_aware_table(plans))


def _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json, quiet) -> None:
    """``planner search`` on a graph model: best graph plans beside the best sequential plan."""
    from planner.outputs import bubbles as bub
    from planner.plans.graph_plan import GraphPlanInputs, graph_plan_document
    from planner.plans.plan_file import write_plan
    from planner.search.graph import run_graph_search

    result = run_graph_search(problem.model, problem.cluster, problem.job, restrictions, top, progress)
    data = views.graph_search_dict(problem, result)
    if explain_flag:
        data["explain"] = graph_api.graph_explain(result)
    if out is not None:
        best = result.plans[0]
        seq = result.sequential
        gproblem = api.Problem(
            problem.model, problem.cluster, problem.job, best.stage_graph, problem.profile, problem.software
        )
        est_dict = views.estimate_dict(gproblem, best.estimate)
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
            restrictions.memory_headroom_bytes,
            problem.software.name,
        )
        budget = {**bub.budget_dict(bub.budget(best.estimate)), "schedule": "graph-1f1b"}
        write_plan(out, graph_plan_document(inputs, predictions, budget))
        _note(f"wrote {out}", quiet)
    if as_json:
        _emit_json(data)
    else:
        _print(*render.graph_search_tables(data))
