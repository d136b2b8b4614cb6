"""``planner estimate``, ``planner timeline`` and ``planner bubbles``: one configuration, from flags
or a plan file, loaded and estimated (:func:`_estimate`), then shown as tables, a pipeline chart or
its bubble-fill budget."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__, api
from planner.cli import render
from planner.cli.common import (
    eager_ops_option,
    emit_json,
    emit_note,
    int_list,
    print_rich,
    profile_path,
    recompute_modules_option,
    require_finite,
    runtime_options,
    software_note,
)
from planner.cli.options import (
    PANEL_OUTPUT,
    AttentionImplOpt,
    ClusterOptional,
    CpOpt,
    CudaGraphOpt,
    EagerOpsOpt,
    EpOpt,
    EstimateFrameworkOpt,
    FinetuneOpt,
    FirstStageOpt,
    Fp8RecipeOpt,
    FrozenWeightDtypeOpt,
    FsdpShardOpt,
    GbsOptional,
    GradDtypeOpt,
    JsonOpt,
    LastStageOpt,
    LayersPerStageOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    MbsOpt,
    ModelOptional,
    MoeDispatcherOpt,
    MoeOverlapOpt,
    NodesOpt,
    OffloadLayersOpt,
    OptimizerInstancesOpt,
    OptimizerStateDtypeOpt,
    PackedDocLenOpt,
    PlanArgOptional,
    PlanOpt,
    PpOpt,
    PrecisionOpt,
    ProfileOpt,
    QuietOpt,
    RankOrderOpt,
    RecomputeLayersOpt,
    RecomputeModulesOpt,
    RecomputeOpt,
    ScheduleOpt,
    SeqOptional,
    ShardOpt,
    SoftwareOpt,
    SpOpt,
    TpOpt,
    TpOverlapOpt,
    UnfusedAccumulationOpt,
    VppOpt,
)
from planner.cli.root import app
from planner.inputs.errors import UsageError
from planner.inputs.files import write_text_atomic
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.validation import check_flag
from planner.outputs import views


def _config(
    tp, pp, cp, ep, vpp, mbs, recompute, recompute_num_layers, sequence_parallel, optimizer_sharding, schedule
):
    from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES, ParallelConfig

    # A flag given 0 or -0 is an error, never "not given" (planner.inputs.validation.check_flag).
    for value, flag, key in (
        (tp, "--tp", "tp"),
        (pp, "--pp", "pp"),
        (cp, "--cp", "cp"),
        (ep, "--ep", "ep"),
        (vpp, "--vpp", "vpp"),
        (mbs, "--micro-batch-size", "micro_batch_size"),
    ):
        check_flag(value, flag, key, integer=True)
    check_flag(
        recompute_num_layers, "--recompute-num-layers", "recompute_num_layers", integer=True, positive=False
    )
    recompute = "none" if recompute is None else recompute
    optimizer_sharding = "distributed" if optimizer_sharding is None else optimizer_sharding
    if vpp is None:
        vpp = 2 if schedule == "zb-v" else 1  # ZB-V runs exactly two chunks per rank
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
        recompute_num_layers=recompute_num_layers or 0,  # None: not given (0 = every layer)
        sequence_parallel=True if sequence_parallel is None else sequence_parallel,
        optimizer_sharding=optimizer_sharding,
        schedule=schedule,
    )


def _estimate(opts: dict):
    """Load and estimate what an estimate/timeline/bubbles command was given (its ``locals()``):
    a plan file, or a model, cluster, job and configuration flags. Prints nothing: the command
    prints the software note (:func:`planner.cli.common.software_note`) once it has its result,
    so a failing command's stderr is its one error line."""
    model, cluster, nodes, plan = opts["model"], opts["cluster"], opts["nodes"], opts["plan"]
    if opts.get("plan_file") is not None:
        if plan is not None and plan != opts["plan_file"]:
            raise UsageError(f"two plan files: {opts['plan_file']} and --plan {plan}; give one")
        plan = opts["plan_file"]
    gbs, seq, precision = opts["global_batch_size"], opts["seq_len"], opts["precision"]
    tp, pp, cp, ep, vpp = opts["tp"], opts["pp"], opts["cp"], opts["ep"], opts["vpp"]
    mbs, recompute, recompute_num_layers = (
        opts["micro_batch_size"],
        opts["recompute"],
        opts["recompute_num_layers"],
    )
    sequence_parallel, optimizer_sharding = opts["sequence_parallel"], opts["optimizer_sharding"]
    schedule = opts["schedule"]
    split = (
        opts.get("layers_per_stage"),
        opts.get("decoder_first_pipeline_num_layers"),
        opts.get("decoder_last_pipeline_num_layers"),
        opts.get("fsdp_shard"),
        opts.get("offload_layers"),
        opts.get("recompute_modules"),
        opts.get("optimizer_instances"),
        opts.get("rank_order"),
    )
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
        if (
            any(x is not None for x in (model, cluster, nodes, gbs, seq))
            or any(x is not None for x in flags + split)
            or opts.get("tp_comm_overlap")
            or opts.get("eager_ops") is not None
            or opts.get("framework")
            or opts.get("moe_a2a_overlap")
            or opts.get("cuda_graph_scope") is not None
            or opts.get("moe_dispatcher", "alltoall") != "alltoall"
            or opts.get("grad_dtype") is not None
            or opts.get("optimizer_state_dtype") is not None
            or opts.get("no_gradient_accumulation_fusion")
            or opts.get("fp8_recipe") is not None
            or opts.get("attention_impl") is not None
            or any(opts.get(k) is not None for k in _FINETUNE_KEYS)
        ):
            raise UsageError(
                "a plan file (the argument, or --plan) gives the model, cluster, job and configuration; "
                "do not combine it with "
                "--model/--cluster/--nodes/--global-batch-size/--seq-len or configuration flags"
            )
        return api.estimate_plan_file(str(plan), profile_path(opts), opts.get("software"))
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
    problem = api.load_problem(
        model,
        cluster,
        nodes,
        gbs,
        seq,
        precision,
        profile_path(opts),
        bool(opts.get("tp_comm_overlap")),
        opts.get("software"),
        _framework_name(opts.get("framework")),
        eager_ops=eager_ops_option(opts.get("eager_ops")),
        **runtime_options(opts),
    )
    check_flag(split[1], "--decoder-first-pipeline-num-layers", "num_layers", integer=True, positive=False)
    check_flag(split[2], "--decoder-last-pipeline-num-layers", "num_layers", integer=True, positive=False)
    config = _with_split(_config(*flags), problem.model, *split[:3])
    if split[3] is not None:
        check_flag(split[3], "--fsdp-shard", "fsdp_shard", integer=True)
        config = config.with_(fsdp_shard=split[3])
    if split[4] is not None:
        check_flag(split[4], "--offload-layers", "offload_layers", integer=True, positive=False)
        if isinstance(problem.model, GraphModelSpec):
            raise UsageError("--offload-layers applies to chain models (Megatron's decoder layers)")
        config = config.with_(offload_layers=split[4])
    if split[5] is not None:
        config = config.with_(recompute_modules=_selective_modules(split[5], config))
    if split[6] is not None:
        check_flag(split[6], "--optimizer-instances", "optimizer_instances", integer=True)
        config = config.with_(optimizer_instances=split[6])
    if split[7] is not None:
        from cost_models.parallel import RANK_ORDERS

        if split[7] not in RANK_ORDERS:
            raise UsageError(f"--rank-order {split[7]!r}: allowed values: {', '.join(RANK_ORDERS)}")
        config = config.with_(rank_order=split[7])
    return problem, api.estimate_config(problem, config)


_FINETUNE_KEYS = ("finetune", "lora_rank", "lora_targets", "frozen_weight_dtype", "packed_avg_doc_len")
"""The fine-tuning options (a plan file records the job's own)."""


def _selective_modules(text: str, config) -> tuple[str, ...]:
    """``--recompute-modules a,b`` of estimate / timeline / bubbles (needs selective recompute)."""
    if config.recompute != "selective":
        raise UsageError("--recompute-modules needs --recompute selective")
    return recompute_modules_option(text)


def _framework_name(name: str | None) -> str:
    """A checked ``--framework`` of estimate/timeline/bubbles; when not given, search's default
    (``megatron``: its newest software profile fitted on the cluster's GPUs prices the
    configuration), so that ``planner estimate`` and ``planner search`` price one configuration
    alike; ``any`` for the GPU files' base values."""
    from planner.frameworks import DEFAULT_FRAMEWORK, get_framework

    return get_framework(name or DEFAULT_FRAMEWORK).name


def _with_split(config, model, layers: str | None, first: int | None, last: int | None):
    """The configuration with an explicit stage split: ``--layers-per-stage`` (every virtual stage)
    or Megatron's first/last stage counts (the middle stages split the rest evenly)."""
    from cost_models.parallel import first_last_split

    if layers is None and first is None and last is None:
        return config
    if isinstance(model, GraphModelSpec):
        raise UsageError(
            "--layers-per-stage and --decoder-first/last-pipeline-num-layers apply to chain models; "
            "a graph model's stages come from planner search"
        )

    if layers is not None and (first is not None or last is not None):
        raise UsageError(
            "--layers-per-stage gives every stage; do not combine it with "
            "--decoder-first/last-pipeline-num-layers"
        )
    if layers is not None:
        # 0 is allowed at the ends: an embedding-only first or loss-only last stage, as Megatron's
        # --account-for-embedding/loss-in-pipeline-split and layout's E / L stages give.
        return config.with_(layers_per_stage=int_list(layers, "--layers-per-stage", minimum=0))
    if config.vpp > 1:
        raise UsageError(
            "--decoder-first/last-pipeline-num-layers with --vpp > 1: give every virtual stage with --layers-per-stage"
        )
    return config.with_(layers_per_stage=first_last_split(model.num_layers, config.pp, first, last))


@app.command()
def estimate(
    plan_file: PlanArgOptional = None,
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    fsdp_shard: FsdpShardOpt = None,
    offload_layers: OffloadLayersOpt = None,
    optimizer_instances: OptimizerInstancesOpt = None,
    rank_order: RankOrderOpt = None,
    recompute_modules: RecomputeModulesOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
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
    """Predict step time, throughput, MFU and memory of one configuration."""
    problem, est = _estimate(locals())
    data = views.estimate_dict(problem, est)
    software_note(problem, quiet)
    if as_json:
        emit_json(data)
    else:
        print_rich(*render.estimate_tables(data))
        if not est.gpu_fits:
            typer.echo(
                f"warning: does not fit: stage {data['memory']['worst_stage']} needs "
                f"{data['memory']['shortfall_bytes'] / 2**30:.1f} GiB more",
                err=True,
            )
        if not est.host_fits:
            typer.echo(f"warning: does not fit in host memory: {est.host_shortfall}", err=True)


@app.command()
def timeline(
    plan_file: PlanArgOptional = None,
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    fsdp_shard: FsdpShardOpt = None,
    offload_layers: OffloadLayersOpt = None,
    optimizer_instances: OptimizerInstancesOpt = None,
    rank_order: RankOrderOpt = None,
    recompute_modules: RecomputeModulesOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
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
    svg: Annotated[
        Path | None,
        typer.Option("--svg", help="Write the timeline as an SVG file.", rich_help_panel=PANEL_OUTPUT),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Write a Chrome trace-event JSON file (opens in Perfetto, chrome://tracing).",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    width: Annotated[
        int,
        typer.Option(
            "--width", help="Characters per row of the terminal chart.", rich_help_panel=PANEL_OUTPUT
        ),
    ] = 100,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Draw the per-stage pipeline schedule (terminal Gantt chart, optional SVG and trace file)."""
    from planner.outputs.timeline_svg import timeline_svg
    from planner.outputs.trace import trace_json

    check_flag(width, "--width", "width", integer=True)
    problem, est = _estimate(locals())
    tl = est.timeline
    schedule = "graph-1f1b" if problem.stage_graph is not None else est.config.schedule
    title = f"{problem.model.name} {schedule} p={est.config.pp} m={est.num_microbatches}"
    if svg is not None:
        write_text_atomic(svg, timeline_svg(est, title))
        emit_note(f"wrote {svg}", quiet)
    if trace is not None:
        write_text_atomic(trace, trace_json(est, title, point_to_point=problem.stage_graph is None))
        emit_note(f"wrote {trace}", quiet)
    software_note(problem, quiet)
    if as_json:
        emit_json(
            {
                "schema_version": views.SCHEMA_VERSION,
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
    plan_file: PlanArgOptional = None,
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    fsdp_shard: FsdpShardOpt = None,
    offload_layers: OffloadLayersOpt = None,
    optimizer_instances: OptimizerInstancesOpt = None,
    rank_order: RankOrderOpt = None,
    recompute_modules: RecomputeModulesOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
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
    fill_job: Annotated[
        Path | None,
        typer.Option(
            "--fill-job", help="Fill-job YAML to pack into the bubbles.", rich_help_panel="Bubble fill"
        ),
    ] = None,
    switch_overhead: Annotated[
        float,
        typer.Option(
            "--switch-overhead-s", help="Context switch in+out, seconds.", rich_help_panel="Bubble fill"
        ),
    ] = 0.002,
    safety_margin: Annotated[
        float,
        typer.Option(
            "--safety-margin", help="Fraction of each window kept free.", rich_help_panel="Bubble fill"
        ),
    ] = 0.05,
    min_slice: Annotated[
        float,
        typer.Option("--min-slice-s", help="Shortest usable window, seconds.", rich_help_panel="Bubble fill"),
    ] = 0.005,
    max_slowdown: Annotated[
        float,
        typer.Option(
            "--max-slowdown", help="Bound on the main job's slowdown.", rich_help_panel="Bubble fill"
        ),
    ] = 0.02,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Report every idle window of every pipeline stage (PipeFill bubble-fill budget)."""
    from planner.outputs import bubbles as bub

    require_finite(
        switch_overhead_s=switch_overhead,
        safety_margin=safety_margin,
        min_slice_s=min_slice,
        max_slowdown=max_slowdown,
    )
    if not (0 <= safety_margin < 1) or switch_overhead < 0 or min_slice < 0 or max_slowdown < 0:
        raise UsageError(
            "--safety-margin must be in [0, 1); --switch-overhead-s, --min-slice-s and --max-slowdown must be >= 0"
        )
    for value, flag, key in (
        (switch_overhead, "--switch-overhead-s", "switch_overhead_s"),
        (min_slice, "--min-slice-s", "min_slice_s"),
        (max_slowdown, "--max-slowdown", "max_slowdown"),
    ):
        check_flag(value, flag, key, positive=False)
    problem, est = _estimate(locals())
    b = bub.budget(
        est,
        bub.Assumptions(
            switch_overhead_s=switch_overhead, safety_margin=safety_margin, min_slice_s=min_slice
        ),
    )
    data = {"schema_version": views.SCHEMA_VERSION, "planner_version": __version__, **bub.budget_dict(b)}
    if problem.stage_graph is not None:
        data["schedule"] = "graph-1f1b"
    if fill_job is not None:
        data["fill"] = bub.fill_dict(bub.fit_fill_job(b, bub.load_fill_job(str(fill_job)), max_slowdown))
    software_note(problem, quiet)
    if as_json:
        emit_json(data)
    else:
        print_rich(*render.budget_tables(data))
