"""``planner search``: the fastest plans that fit in memory (the chain search, or graph pipelines on
a graph model), ranked by time, cost or goodput, the best optionally written as a plan file.

Thin: the options are parsed into :func:`planner.api.restrictions` (the library's defaults are the
command's), the problem is loaded and searched by :mod:`planner.api`, then rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from planner import __version__, api
from planner.cli import render_search
from planner.cli.common import (
    eager_ops_option,
    emit_json,
    emit_note,
    int_list,
    print_rich,
    profile_path,
    progress_display,
    recompute_modules_option,
    runtime_options,
    say_phase,
    software_note,
    word_list,
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
    FinetuneOpt,
    Fp8RecipeOpt,
    FrameworkOpt,
    FrozenWeightDtypeOpt,
    GbsOpt,
    GradDtypeOpt,
    JsonOpt,
    ListOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    ModelOpt,
    MoeDispatcherOpt,
    MoeOverlapOpt,
    NodeOverheadOpt,
    NodesOpt,
    ObjectiveOpt,
    OptimizerStateDtypeOpt,
    PackedDocLenOpt,
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
from planner.inputs.validation import check_flag
from planner.outputs import graph_views as graph_api
from planner.outputs import views
from planner.outputs.costing import DEFAULT_NODE_POWER_OVERHEAD

TopOpt = Annotated[
    int, typer.Option("--top", "-k", help="How many distinct plans to return.", rich_help_panel=PANEL_OUTPUT)
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Write the best plan (.yaml or .json).", rich_help_panel=PANEL_OUTPUT),
]
TpsOpt = Annotated[
    ListOpt, typer.Option("--tp", help="Allowed tp degrees, e.g. 4,8.", rich_help_panel=PANEL_SPACE)
]
PpsOpt = Annotated[ListOpt, typer.Option("--pp", help="Allowed pp degrees.", rich_help_panel=PANEL_SPACE)]
CpsOpt = Annotated[ListOpt, typer.Option("--cp", help="Allowed cp degrees.", rich_help_panel=PANEL_SPACE)]
EpsOpt = Annotated[ListOpt, typer.Option("--ep", help="Allowed ep degrees.", rich_help_panel=PANEL_SPACE)]
VppsOpt = Annotated[
    ListOpt,
    typer.Option("--vpp", help="Allowed virtual stages per rank (1 = none).", rich_help_panel=PANEL_SPACE),
]
MbsListOpt = Annotated[
    ListOpt,
    typer.Option("--micro-batch-size", help="Allowed micro-batch sizes.", rich_help_panel=PANEL_SPACE),
]
RecomputeListOpt = Annotated[
    ListOpt,
    typer.Option("--recompute", help="Allowed: none, selective, op, full.", rich_help_panel=PANEL_SPACE),
]
NoRecomputeOpt = Annotated[
    bool, typer.Option("--no-recompute", help="Same as --recompute none.", rich_help_panel=PANEL_SPACE)
]
RecomputeModulesListOpt = Annotated[
    str | None,
    typer.Option(
        "--recompute-modules",
        help="Module list of the selective variant searched (Megatron --recompute-modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts). Default: moe_act,layernorm (MoE) and mla_up_proj (MLA) besides core attention on request.",
        rich_help_panel=PANEL_SPACE,
    ),
]
ShardingListOpt = Annotated[
    ListOpt,
    typer.Option(
        "--optimizer-sharding", help="Allowed: none, distributed, zero2, full.", rich_help_panel=PANEL_SPACE
    ),
]
InstancesListOpt = Annotated[
    ListOpt,
    typer.Option(
        "--optimizer-instances",
        help="Also search the partial distributed optimizer with these instance counts, e.g. 1,8 (Megatron --num-distributed-optimizer-instances: optimizer states sharded over dp*cp/N ranks, N replicas). Default 1.",
        rich_help_panel=PANEL_SPACE,
    ),
]
RankOrderListOpt = Annotated[
    ListOpt,
    typer.Option(
        "--rank-order",
        help="Rank layouts to search, e.g. tp-cp-ep-dp-pp,tp-cp-ep-pp-dp (Megatron's default, and --use-tp-pp-dp-mapping: a pipeline's stages adjacent, inside an NVL72 rack when they fit). Default: Megatron's default only.",
        rich_help_panel=PANEL_SPACE,
    ),
]
OffloadListOpt = Annotated[
    ListOpt,
    typer.Option(
        "--offload-layers",
        help="Also search offloading the activations of this many first layers to host memory, e.g. 0,8,16 (Megatron --cpu-offloading-num-layers; pp 1, no recompute; 0 = none too). Off by default; plans must fit each node's host memory (host_memory_gb).",
        rich_help_panel=PANEL_SPACE,
    ),
]
ScheduleListOpt = Annotated[
    ListOpt,
    typer.Option(
        "--schedule",
        help="Allowed: 1f1b, interleaved, gpipe, zb-h1, zb-h2, zb-v.",
        rich_help_panel=PANEL_SPACE,
    ),
]
SequenceParallelOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--sequence-parallel/--no-sequence-parallel",
        help="Only with (or only without) sequence parallelism (default: with, where tp > 1).",
        rich_help_panel=PANEL_SPACE,
    ),
]
MaxTpOpt = Annotated[
    int | None, typer.Option("--max-tp", help="Largest tp degree.", rich_help_panel=PANEL_SPACE)
]
MaxPpOpt = Annotated[
    int | None, typer.Option("--max-pp", help="Largest pp degree.", rich_help_panel=PANEL_SPACE)
]
MaxMbsOpt = Annotated[
    int,
    typer.Option(
        "--max-micro-batch-size",
        help="Largest micro-batch searched, in sequences (with no --micro-batch-size list).",
        min=1,
        rich_help_panel=PANEL_SPACE,
    ),
]
CrossNodeTpOpt = Annotated[
    bool,
    typer.Option(
        "--allow-cross-node-tp", help="Let tp groups leave the NVLink domain.", rich_help_panel=PANEL_SPACE
    ),
]
EvenPartitionsOpt = Annotated[
    bool,
    typer.Option(
        "--even-partitions", help="Only Megatron's default even layer split.", rich_help_panel=PANEL_SPACE
    ),
]
HeadroomOpt = Annotated[
    float,
    typer.Option(
        "--headroom-gib",
        help="Memory each GPU must keep free beyond the modelled reserve, in GiB.",
        rich_help_panel=PANEL_MEMORY,
    ),
]
ExplainOpt = Annotated[
    bool,
    typer.Option("--explain", help="Say why the leading alternatives lost.", rich_help_panel=PANEL_OUTPUT),
]
FailureAwareOpt = Annotated[
    bool,
    typer.Option(
        "--failure-aware",
        help="Rank by expected goodput over a run (failures, checkpoints, hot spares; see planner goodput).",
        rich_help_panel=PANEL_COST,
    ),
]
CsvOpt = Annotated[
    Path | None,
    typer.Option(
        "--csv",
        help="Write every enumerated configuration and what became of it (CSV).",
        rich_help_panel=PANEL_OUTPUT,
    ),
]


@app.command()
def search(
    model: ModelOpt,
    cluster: ClusterOpt,
    global_batch_size: GbsOpt,
    seq_len: SeqOpt,
    nodes: NodesOpt = None,
    precision: PrecisionOpt = "bf16",
    top: TopOpt = api.TOP_K_DEFAULT,
    out: OutOpt = None,
    tp: TpsOpt = None,
    pp: PpsOpt = None,
    cp: CpsOpt = None,
    ep: EpsOpt = None,
    vpp: VppsOpt = None,
    micro_batch_size: MbsListOpt = None,
    recompute: RecomputeListOpt = None,
    no_recompute: NoRecomputeOpt = False,
    recompute_modules: RecomputeModulesListOpt = None,
    optimizer_sharding: ShardingListOpt = None,
    optimizer_instances: InstancesListOpt = None,
    rank_order: RankOrderListOpt = None,
    offload_layers: OffloadListOpt = None,
    schedule: ScheduleListOpt = None,
    sequence_parallel: SequenceParallelOpt = None,
    max_tp: MaxTpOpt = None,
    max_pp: MaxPpOpt = None,
    max_micro_batch_size: MaxMbsOpt = 16,
    allow_cross_node_tp: CrossNodeTpOpt = False,
    even_partitions: EvenPartitionsOpt = False,
    headroom_gib: HeadroomOpt = api.HEADROOM_GIB_DEFAULT,
    explain_flag: ExplainOpt = False,
    framework: FrameworkOpt = "megatron",
    tokens: TokensOpt = None,
    gpu_hour_price: PriceOpt = None,
    gpu_power_fraction: PowerFractionOpt = 1.0,
    node_power_overhead: NodeOverheadOpt = DEFAULT_NODE_POWER_OVERHEAD,
    objective: ObjectiveOpt = "time",
    failure_aware: FailureAwareOpt = False,
    csv_out: CsvOpt = None,
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
    finetune: FinetuneOpt = None,
    lora_rank: LoraRankOpt = None,
    lora_targets: LoraTargetsOpt = None,
    frozen_weight_dtype: FrozenWeightDtypeOpt = None,
    packed_avg_doc_len: PackedDocLenOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the fastest plans that fit in memory (the main job).

    On a graph model (a DAG of blocks, e.g. the vlm-two-tower-13b, mmt-4tower-4b and t5-11b presets), searches graph pipelines (GraphPipe: branches on their own stages, running concurrently) and reports the best sequential pipeline beside them (speedup_vs_sequential in --json).
    """
    opts = dict(locals())
    restrictions = restrictions_from_options(opts)
    with progress_display(quiet, as_json) as progress:
        problem, target = problem_from_options(opts, restrictions, progress)
        if isinstance(problem.model, GraphModelSpec):
            _check_graph_options(opts, target)
            say_phase(progress, "enumerating and partitioning graph pipelines")
            result, goodputs = api.search(problem, restrictions, top, progress), None
        else:
            result, goodputs = _chain_search(problem, restrictions, opts, target, progress)
    software_note(problem, quiet)  # with the result: an infeasible search's stderr is its one error
    if isinstance(problem.model, GraphModelSpec):
        _graph_outputs(problem, restrictions, result, opts)
    else:
        _chain_outputs(problem, restrictions, result, goodputs, target, opts)


def restrictions_from_options(opts: dict):
    """The search space of the command's options (:func:`planner.api.restrictions`); usage errors
    name the flag."""
    from cost_models.parallel import OPTIMIZER_SHARDING, RANK_ORDERS, RECOMPUTE, SCHEDULES

    check_flag(opts["top"], "--top", "top", integer=True)  # 1 to 100 (planner.inputs.validation)
    rec = word_list(opts["recompute"], "--recompute", RECOMPUTE)
    if opts["no_recompute"]:
        if rec not in (None, ("none",)):
            raise UsageError("--no-recompute contradicts --recompute")
        rec = ("none",)
    return api.restrictions(
        opts["framework"],
        opts["headroom_gib"],
        tp=int_list(opts["tp"], "--tp"),
        pp=int_list(opts["pp"], "--pp"),
        cp=int_list(opts["cp"], "--cp"),
        ep=int_list(opts["ep"], "--ep"),
        vpp=int_list(opts["vpp"], "--vpp"),
        micro_batch_size=int_list(opts["micro_batch_size"], "--micro-batch-size"),
        recompute=rec,
        recompute_modules=recompute_modules_option(opts["recompute_modules"]),
        optimizer_sharding=word_list(opts["optimizer_sharding"], "--optimizer-sharding", OPTIMIZER_SHARDING),
        optimizer_instances=int_list(opts["optimizer_instances"], "--optimizer-instances"),
        rank_order=word_list(opts["rank_order"], "--rank-order", RANK_ORDERS),
        offload_layers=int_list(opts["offload_layers"], "--offload-layers", minimum=0),
        schedule=word_list(opts["schedule"], "--schedule", SCHEDULES),
        sequence_parallel=opts["sequence_parallel"],
        max_tp=opts["max_tp"],
        max_pp=opts["max_pp"],
        max_micro_batch_size=opts["max_micro_batch_size"],
        allow_cross_node_tp=opts["allow_cross_node_tp"],
        uneven_partitions=not opts["even_partitions"],
    )


def problem_from_options(opts: dict, restrictions, progress):
    """The problem (priced for the searched framework) and the training target of the options."""
    from planner.outputs.costing import check_objective, make_target

    say_phase(progress, f"loading {opts['model']} on {opts['cluster']}")
    problem = api.load_problem(
        opts["model"],
        opts["cluster"],
        opts["nodes"],
        opts["global_batch_size"],
        opts["seq_len"],
        opts["precision"],
        profile_path(opts),
        opts["tp_comm_overlap"],
        opts["software"],
        restrictions.framework,
        eager_ops=eager_ops_option(opts["eager_ops"]),
        **runtime_options(opts),
    )
    target = make_target(
        opts["tokens"],
        opts["gpu_hour_price"],
        problem.cluster,
        opts["gpu_power_fraction"],
        opts["node_power_overhead"],
    )
    check_objective(opts["objective"], target)
    return problem, target


def _check_graph_options(opts: dict, target) -> None:
    """Usage errors for the options that apply to sequential models only."""
    if opts["failure_aware"]:
        raise UsageError("--failure-aware applies to sequential models, not graph models")
    if opts["csv_out"] is not None or target is not None:
        raise UsageError("--csv, --tokens and --gpu-hour-price apply to sequential models, not graph models")


def _chain_search(problem, restrictions, opts: dict, target, progress):
    """The chain search, ranked by the objective (time or cost) or by expected goodput
    (``--failure-aware``): the result and the plans' goodput summaries (None without)."""
    from planner.outputs.costing import rank_by_cost
    from planner.resilience.spares import FAILURE_AWARE_POOL, failure_aware_rank
    from planner.resilience.views import goodput_summary

    top = opts["top"]
    pool = max(top, FAILURE_AWARE_POOL) if opts["failure_aware"] else top
    say_phase(progress, "enumerating and bounding candidates")
    result = api.search(problem, restrictions, pool, progress, collect=opts["csv_out"] is not None)
    if opts["objective"] == "cost" or opts["failure_aware"]:
        result.ties = None  # ranked by cost or goodput: ties of step time say nothing of that order
    if opts["objective"] == "cost":
        result.plans = rank_by_cost(result.plans, target)
    if not opts["failure_aware"]:
        return result, None
    say_phase(progress, "ranking by expected goodput")
    result.plans, goodputs = failure_aware_rank(problem, result.plans, restrictions, top)
    return result, [goodput_summary(g) for g in goodputs]


def _search_dict(problem, restrictions, result, plans: list[dict], opts: dict) -> dict:
    """The JSON of a chain search (``planner search --json``)."""
    from planner.plans.plan_file import framework_to_mapping
    from planner.search.chain import explain

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
    if opts["objective"] != "time":
        data["objective"] = opts["objective"]
    if opts["explain_flag"]:
        data["explain"] = explain(result)
    return data


def _chain_outputs(problem, restrictions, result, goodputs, target, opts: dict) -> None:
    """Write the chain search's files (``--csv``, ``--out``), then print its JSON or tables."""
    from planner.search.candidates import candidates_csv

    plans = [views.plan_summary(problem, p, target) for p in result.plans]
    for row, g in zip(plans, goodputs or []):
        row["goodput"] = g
    ties = getattr(result, "ties", None)
    for i, row in enumerate(plans):
        row["tied_with_best"] = ties is not None and ties.count > 1 and i < ties.count
    data = _search_dict(problem, restrictions, result, plans, opts)
    if ties is not None:
        data["ties"] = views.rounded(ties.as_dict())
    quiet, csv_out, out = opts["quiet"], opts["csv_out"], opts["out"]
    if csv_out is not None:
        write_text_atomic(csv_out, candidates_csv(result.candidates or []))
        emit_note(f"wrote {csv_out} ({len(result.candidates or [])} configurations)", quiet)
    if out is not None:
        api.write_plan(out, problem, result, restrictions, target=target)
        emit_note(f"wrote {out}", quiet)
    if opts["as_json"]:
        emit_json(data)
        return
    print_rich(*render_search.search_tables(data))
    if opts["failure_aware"]:
        from planner.cli.render_whatif import failure_aware_table

        print_rich(failure_aware_table(plans))


def _graph_outputs(problem, restrictions, result, opts: dict) -> None:
    """``planner search`` on a graph model: write the best graph plan (``--out``), then print the
    graph plans beside the best sequential plan (JSON or tables)."""
    data = views.graph_search_dict(problem, result)
    if opts["explain_flag"]:
        data["explain"] = graph_api.graph_explain(result)
    if opts["out"] is not None:
        api.write_plan(opts["out"], problem, result, restrictions)
        emit_note(f"wrote {opts['out']}", opts["quiet"])
    if opts["as_json"]:
        emit_json(data)
    else:
        print_rich(*render_search.graph_search_tables(data))
