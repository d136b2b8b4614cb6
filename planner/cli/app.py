"""The ``planner`` command: parse, load, call :mod:`planner.api`, render. Nothing else.

Exit codes: 0 ok; 1 spec or user error (bad file, unknown name, invalid configuration, failed
check); 2 usage error (bad flags); 3 no feasible plan. Errors print one line on stderr; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner import __version__, api
from planner.cli import render
from planner.costing import DEFAULT_NODE_POWER_OVERHEAD
from planner.errors import PlannerError, UsageError
from planner.graph_model import GraphModelSpec
from planner.memory_validation import HEADROOM_GIB_DEFAULT
from planner.plan import write_text_atomic
from planner.specs import EAGER_OPS
from planner.validation import json_text


def _flags_take_no_value() -> None:
    """Help shows no type for on/off flags (typer >= 0.20 prints ``<bool>`` beside ``--json``)."""
    from typer import core

    option = getattr(core, "TyperOption", None)
    show = getattr(option, "display_type_rich", None)
    if show is None or getattr(show, "_planner", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else show(self, ctx)

    display_type_rich._planner = True
    option.display_type_rich = display_type_rich


_flags_take_no_value()

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find the fastest way to train a large transformer on a GPU cluster, and prove it fits.",
)
models_app = typer.Typer(no_args_is_help=True, help="Built-in model presets.")
hardware_app = typer.Typer(no_args_is_help=True, help="Built-in GPU types and node templates.")
app.add_typer(models_app, name="models")
app.add_typer(hardware_app, name="hardware")

_state = {"debug": False}

PANEL_INPUTS = "Model & cluster"
PANEL_LAYOUT = "Parallel layout"
PANEL_SPACE = "Parallel space"
PANEL_MEMORY = "Memory"
PANEL_COST = "Time, cost & energy"
PANEL_OUTPUT = "Output"
"""Help panels: options grouped by what they describe (``--help`` shows one box per panel)."""

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout.", rich_help_panel=PANEL_OUTPUT)
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Preset name (any case), planner YAML, HF config.json or a folder holding one (HF snapshot).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
ClusterOpt = Annotated[
    str,
    typer.Option("--cluster", "-c", help="Node template name or cluster YAML.", rich_help_panel=PANEL_INPUTS),
]
NodesOpt = Annotated[
    int | None,
    typer.Option("--nodes", "-n", help="Number of nodes (with a template).", rich_help_panel=PANEL_INPUTS),
]
GbsOpt = Annotated[
    int,
    typer.Option(
        "--global-batch-size", "-b", help="Sequences per optimizer step.", rich_help_panel=PANEL_INPUTS
    ),
]
SeqOpt = Annotated[
    int, typer.Option("--seq-len", "-s", help="Tokens per sequence.", rich_help_panel=PANEL_INPUTS)
]
PrecisionOpt = Annotated[
    str, typer.Option("--precision", help="bf16, fp16 or fp8.", rich_help_panel=PANEL_INPUTS)
]
ModelOptional = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Preset name (any case), planner YAML, HF config.json or a folder holding one (HF snapshot).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
ClusterOptional = Annotated[
    str | None,
    typer.Option("--cluster", "-c", help="Node template name or cluster YAML.", rich_help_panel=PANEL_INPUTS),
]
GbsOptional = Annotated[
    int | None,
    typer.Option(
        "--global-batch-size", "-b", help="Sequences per optimizer step.", rich_help_panel=PANEL_INPUTS
    ),
]
SeqOptional = Annotated[
    int | None, typer.Option("--seq-len", "-s", help="Tokens per sequence.", rich_help_panel=PANEL_INPUTS)
]


def _framework_help() -> str:
    from planner.frameworks import FRAMEWORKS

    names = "; ".join(f"{f.name} = {f.title}" for f in FRAMEWORKS.values())
    return f"Target framework: search only what it runs ({names})."


FrameworkOpt = Annotated[
    str, typer.Option("--framework", help=_framework_help(), rich_help_panel=PANEL_SPACE)
]
EstimateFrameworkOpt = Annotated[
    str | None,
    typer.Option(
        "--framework",
        help="Price as this framework runs it: its newest software profile fitted on the cluster's GPUs "
        "applies, as in search (default: none, the GPU files' base values; --software overrides).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
PlanOpt = Annotated[
    Path | None,
    typer.Option(
        "--plan",
        help="A plan file (from planner search --out) instead of the flags.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
TpOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--tp-comm-overlap",
        help="Overlap sequence-parallel collectives with GEMMs (Megatron --tp-comm-overlap).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
MoeDispatcherOpt = Annotated[
    str,
    typer.Option(
        "--moe-dispatcher",
        help="MoE token dispatcher: alltoall, allgather or flex (DeepEP/HybridEP) "
        "(Megatron --moe-token-dispatcher-type).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
GradDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--grad-dtype",
        help="Dtype gradients are reduced in across data-parallel ranks: fp32, bf16 or fp16 "
        "(default: fp16 for --precision fp16, else fp32, as Megatron's validate_args; "
        "Megatron --grad-reduce-in-bf16 / --accumulate-allreduce-grads-in-fp32).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
MoeOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--moe-a2a-overlap",
        help="Hide expert-parallel all-to-alls under another micro-batch's compute "
        "(Megatron --overlap-moe-expert-parallel-comm).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
CudaGraphOpt = Annotated[
    str | None,
    typer.Option(
        "--cuda-graph-scope",
        help="What CUDA graphs capture, comma-separated: full, attn, mlp, moe, moe_router, "
        "moe_preprocess, full_iteration, or none (Megatron --cuda-graph-impl / --cuda-graph-scope).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
EagerOpsOpt = Annotated[
    str | None,
    typer.Option(
        "--eager-ops",
        help="Elementwise op groups run as eager PyTorch, one kernel per op (comma-separated: norm, rope, "
        "activation; torchtitan without torch.compile runs rope,activation eager). Default: all fused "
        "(Megatron-Core/Transformer Engine kernels, torch.compile).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
ProfileOpt = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help="A calibrated profile (planner calibrate --out) applied to the cluster.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
SoftwareOpt = Annotated[
    str | None,
    typer.Option(
        "--software",
        help="Software profile whose efficiencies apply (planner hardware software lists them), or base "
        "(also: none) for the GPU files' own values. Default: the newest profile of --framework fitted on the "
        "cluster's GPUs (search, sweep), the one a plan file records (--plan, check), base otherwise. A --profile wins on its GPU.",
        rich_help_panel=PANEL_INPUTS,
    ),
]


QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="No progress bar and no notes on stderr.", rich_help_panel=PANEL_OUTPUT
    ),
]


def _progress(quiet: bool, as_json: bool, label: str = "searching", unit: str = "candidates"):
    """A stderr progress callback for long runs, or None: with --quiet, --json, or stderr not a terminal."""
    if quiet or as_json or not _stderr_is_terminal():
        return None
    return render.progress_callback(label, unit)


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _note(message: str, quiet: bool = False) -> None:
    """A note on stderr (``wrote FILE``), silenced by --quiet."""
    if not quiet:
        typer.echo(message, err=True)


def _emit_json(data: dict) -> None:
    """The one JSON edge: strict JSON (no NaN/inf), round-off negatives as 0.0 (planner.validation)."""
    sys.stdout.write(json_text(data, indent=2, sort_keys=True) + "\n")


def _finite(**options: float) -> None:
    """Number options must be finite (click parses ``nan`` and ``inf`` as floats)."""
    for name, value in options.items():
        if not math.isfinite(value):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number, got {value}")


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
    from planner.software import profile_rows

    gpus = [api.gpu_dict(load_gpu(n)) for n in gpu_names()]
    templates = [load_template(n) for n in cluster_template_names()]
    software = profile_rows()
    if as_json:
        _emit_json(
            {
                "gpus": gpus,
                "clusters": [{"name": t["name"], "node": t["node"]} for t in templates],
                "software": software,
            }
        )
    else:
        _print(*render.hardware_tables(gpus, templates), render.software_table(software))


@hardware_app.command("software")
def hardware_software(as_json: JsonOpt = False) -> None:
    """List the software profiles: per GPU efficiency family, the efficiencies a framework release
    class changes and how many published runs they were fitted on (see --software)."""
    from planner.software import profile_rows

    rows = profile_rows()
    if as_json:
        _emit_json({"schema_version": api.SCHEMA_VERSION, "software": rows})
    else:
        _print(render.software_table(rows))


@hardware_app.command("show")
def hardware_show(
    name: Annotated[str, typer.Argument(help="GPU type or node template name.")], as_json: JsonOpt = False
) -> None:
    """Show a GPU type, or a node template with its GPU's fields."""
    from planner.errors import SpecError
    from planner.loading import (
        cluster_template_names,
        did_you_mean,
        gpu_names,
        load_gpu,
        load_template,
        preset_name,
    )
    from planner.software import efficiency_family, profile_rows

    name = preset_name(name, [*cluster_template_names(), *gpu_names()]) or name
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
            f"unknown hardware '{name}'{did_you_mean(name, [*gpu_names(), *cluster_template_names()])}; "
            f"GPU types: {', '.join(gpu_names())}; "
            f"node templates: {', '.join(cluster_template_names())}"
        )
    family = efficiency_family(data["gpu"]["name"] if "node" in data else data["name"])
    data["efficiency_family"] = family
    data["software_profiles"] = profile_rows(family)
    if as_json:
        _emit_json(data)
    else:
        software = data.pop("software_profiles")
        flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
        tables = [render.kv_table(name, flat)]
        if "node" in data:
            tables.append(render.kv_table("node", data["node"]))
            tables.append(
                render.kv_table(f"gpu {data['gpu']['name']}", {k: v for k, v in data["gpu"].items()})
            )
        else:
            tables[0] = render.kv_table(name, data)
        if software:
            tables.append(render.software_table(software, f"software profiles for family {family}"))
        else:
            tables.append(f"no software profile has an entry for family {family}: base values only")
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
    split = (
        opts.get("layers_per_stage"),
        opts.get("decoder_first_pipeline_num_layers"),
        opts.get("decoder_last_pipeline_num_layers"),
        opts.get("fsdp_shard"),
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
        ):
            raise UsageError(
                "--plan gives the model, cluster, job and configuration; do not combine it with "
                "--model/--cluster/--nodes/--global-batch-size/--seq-len or configuration flags"
            )
        problem, est = api.estimate_plan_file(str(plan), _profile(opts), opts.get("software"))
        _software_note(problem)
        return problem, est
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
        _profile(opts),
        bool(opts.get("tp_comm_overlap")),
        opts.get("software"),
        _framework_name(opts.get("framework")),
        eager_ops=_eager_ops(opts.get("eager_ops")),
        **_runtime(opts),
    )
    _software_note(problem)
    config = _with_split(_config(*flags), problem.model, *split[:3])
    if split[3] is not None:
        if split[3] < 1:
            raise UsageError(f"--fsdp-shard must be >= 1, got {split[3]}")
        config = config.with_(fsdp_shard=split[3])
    return problem, api.estimate_config(problem, config)


def _runtime(opts: dict) -> dict:
    """The gradient dtype, MoE dispatcher and CUDA graph options as :func:`planner.api.load_problem`
    keywords."""
    scope = opts.get("cuda_graph_scope")
    return {
        "moe_dispatcher": opts.get("moe_dispatcher") or "alltoall",
        "grad_dtype": opts.get("grad_dtype"),
        "moe_a2a_overlap": bool(opts.get("moe_a2a_overlap")),
        "cuda_graph_scope": tuple(w.strip() for w in scope.split(",")) if scope else (),
    }


def _framework_name(name: str | None) -> str:
    """A checked ``--framework`` of estimate/timeline/bubbles; ``any`` (base values) when not given."""
    from planner.frameworks import get_framework

    return get_framework(name).name if name else "any"


def _software_note(problem, quiet: bool = False) -> None:
    """Say on stderr which GPU types a software profile left at base values (none: no note)."""
    note = problem.software.note() if problem.software is not None else ""
    if note:
        _note(f"note: {note}", quiet)


def _profile(opts: dict) -> str | None:
    """The ``--profile`` file of a command, as a path string (None when not given)."""
    profile = opts.get("profile")
    return str(profile) if profile is not None else None


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
        return config.with_(layers_per_stage=_ints(layers, "--layers-per-stage", minimum=0))
    if config.vpp > 1:
        raise UsageError(
            "--decoder-first/last-pipeline-num-layers with --vpp > 1: give every virtual stage with --layers-per-stage"
        )
    return config.with_(layers_per_stage=first_last_split(model.num_layers, config.pp, first, last))


TpOpt = Annotated[
    int | None, typer.Option("--tp", help="Tensor-parallel degree.", rich_help_panel=PANEL_LAYOUT)
]
PpOpt = Annotated[
    int | None, typer.Option("--pp", help="Pipeline-parallel degree.", rich_help_panel=PANEL_LAYOUT)
]
CpOpt = Annotated[
    int | None, typer.Option("--cp", help="Context-parallel degree.", rich_help_panel=PANEL_LAYOUT)
]
EpOpt = Annotated[
    int | None, typer.Option("--ep", help="Expert-parallel degree.", rich_help_panel=PANEL_LAYOUT)
]
VppOpt = Annotated[
    int | None,
    typer.Option(
        "--vpp", help="Virtual pipeline stages per rank (interleaving).", rich_help_panel=PANEL_LAYOUT
    ),
]
MbsOpt = Annotated[
    int | None,
    typer.Option("--micro-batch-size", help="Sequences per micro-batch.", rich_help_panel=PANEL_LAYOUT),
]
RecomputeOpt = Annotated[
    str | None,
    typer.Option(
        "--recompute",
        help="none, selective (Megatron: core attention), op (torchtitan per-op selective checkpointing) or full.",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
RecomputeLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--recompute-num-layers",
        help="Layers per stage recomputed with full recompute (0 = all).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
SpOpt = Annotated[
    bool | None,
    typer.Option(
        "--sequence-parallel/--no-sequence-parallel",
        help="Sequence parallelism.",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--optimizer-sharding", help="none, distributed, zero2 or full.", rich_help_panel=PANEL_LAYOUT
    ),
]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="1f1b, interleaved, gpipe or zb-h1 (default: by --vpp).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
LayersPerStageOpt = Annotated[
    str | None,
    typer.Option(
        "--layers-per-stage",
        help="Decoder layers of every pipeline stage, virtual stages included, in Megatron's order, e.g. "
        "7,8,8,7; the first and last may be 0 (embedding-only / loss-only stage).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
FirstStageOpt = Annotated[
    int | None,
    typer.Option(
        "--decoder-first-pipeline-num-layers",
        help="Layers of the first stage (Megatron's flag); rest split evenly.",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
FsdpShardOpt = Annotated[
    int | None,
    typer.Option(
        "--fsdp-shard",
        help="HSDP with --optimizer-sharding full: shard over this many data-parallel ranks, replicate across the rest (torchtitan data_parallel_shard_degree).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
LastStageOpt = Annotated[
    int | None,
    typer.Option(
        "--decoder-last-pipeline-num-layers",
        help="Layers of the last stage (Megatron's flag); rest split evenly.",
        rich_help_panel=PANEL_LAYOUT,
    ),
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    fsdp_shard: FsdpShardOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    moe_dispatcher: MoeDispatcherOpt = "alltoall",
    grad_dtype: GradDtypeOpt = None,
    moe_a2a_overlap: MoeOverlapOpt = False,
    cuda_graph_scope: CudaGraphOpt = None,
    eager_ops: EagerOpsOpt = None,
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    moe_dispatcher: MoeDispatcherOpt = "alltoall",
    grad_dtype: GradDtypeOpt = None,
    moe_a2a_overlap: MoeOverlapOpt = False,
    cuda_graph_scope: CudaGraphOpt = None,
    eager_ops: EagerOpsOpt = None,
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
) -> None:
    """Draw the per-stage pipeline schedule (terminal Gantt chart, optional SVG and trace file)."""
    from planner.timeline_svg import timeline_svg
    from planner.trace import trace_json

    problem, est = _estimate(locals())
    tl = est.timeline
    schedule = "graph-1f1b" if problem.stage_graph is not None else est.config.schedule
    title = f"{problem.model.name} {schedule} p={est.config.pp} m={est.num_microbatches}"
    if svg is not None:
        write_text_atomic(svg, timeline_svg(est, title))
        typer.echo(f"wrote {svg}", err=True)
    if trace is not None:
        write_text_atomic(trace, trace_json(est, title, point_to_point=problem.stage_graph is None))
        typer.echo(f"wrote {trace}", err=True)
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
    layers_per_stage: LayersPerStageOpt = None,
    decoder_first_pipeline_num_layers: FirstStageOpt = None,
    decoder_last_pipeline_num_layers: LastStageOpt = None,
    precision: PrecisionOpt = "bf16",
    plan: PlanOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    framework: EstimateFrameworkOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    moe_dispatcher: MoeDispatcherOpt = "alltoall",
    grad_dtype: GradDtypeOpt = None,
    moe_a2a_overlap: MoeOverlapOpt = False,
    cuda_graph_scope: CudaGraphOpt = None,
    eager_ops: EagerOpsOpt = None,
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
) -> None:
    """Report every idle window of every pipeline stage (PipeFill bubble-fill budget)."""
    from planner import bubbles as bub

    _finite(
        switch_overhead_s=switch_overhead,
        safety_margin=safety_margin,
        min_slice_s=min_slice,
        max_slowdown=max_slowdown,
    )
    if not (0 <= safety_margin < 1) or switch_overhead < 0 or min_slice < 0 or max_slowdown < 0:
        raise UsageError(
            "--safety-margin must be in [0, 1); --switch-overhead-s, --min-slice-s and --max-slowdown must be >= 0"
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


def _ints(text: str | None, flag: str, minimum: int = 1) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} takes integers separated by commas, got {text!r}") from None
    if not values or min(values) < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise UsageError(f"{flag} takes {kind} integers, got {text!r}")
    return values


def _words(text: str | None, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    if text is None:
        return None
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} {text!r}: allowed values: {', '.join(allowed)}")
    return values


def _eager_ops(text: str | None) -> tuple[str, ...]:
    """``--eager-ops`` as :attr:`JobSpec.eager_ops` (canonical order; none given: all fused)."""
    values = _words(text, "--eager-ops", EAGER_OPS) or ()
    if len(set(values)) != len(values):
        raise UsageError(f"--eager-ops {text!r}: an op group is listed twice")
    return tuple(op for op in EAGER_OPS if op in values)


ListOpt = Optional[str]
TokensOpt = Annotated[
    str | None,
    typer.Option(
        "--tokens",
        help="Training tokens (K/M/B/T suffixes, e.g. 15T): days to train and GPU-hours.",
        rich_help_panel=PANEL_COST,
    ),
]
PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-hour-price",
        help="USD per GPU-hour, for cost_usd (default: gpu_hour_price_usd of a cluster file).",
        rich_help_panel=PANEL_COST,
    ),
]
PowerFractionOpt = Annotated[
    float,
    typer.Option(
        "--gpu-power-fraction",
        help="Average GPU draw as a fraction of TDP (docs/costing.md).",
        rich_help_panel=PANEL_COST,
    ),
]
NodeOverheadOpt = Annotated[
    float,
    typer.Option(
        "--node-power-overhead",
        help="Node power per watt of GPU power (default: DGX H100 datasheet).",
        rich_help_panel=PANEL_COST,
    ),
]
ObjectiveOpt = Annotated[
    str,
    typer.Option(
        "--objective",
        help="Rank by time or cost (cost needs --tokens and a price).",
        rich_help_panel=PANEL_COST,
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
    optimizer_sharding: Annotated[
        ListOpt,
        typer.Option(
            "--optimizer-sharding",
            help="Allowed: none, distributed, zero2, full.",
            rich_help_panel=PANEL_SPACE,
        ),
    ] = None,
    schedule: Annotated[
        ListOpt,
        typer.Option(
            "--schedule", help="Allowed: 1f1b, interleaved, gpipe, zb-h1.", rich_help_panel=PANEL_SPACE
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
    moe_a2a_overlap: MoeOverlapOpt = False,
    cuda_graph_scope: CudaGraphOpt = None,
    eager_ops: EagerOpsOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the fastest plans that fit in memory (the main job).

    On a graph model (a DAG of blocks, e.g. the vlm-two-tower-13b, mmt-4tower-4b and t5-11b presets), searches graph pipelines (GraphPipe: branches on their own stages, running concurrently) and reports the best sequential pipeline beside them (speedup_vs_sequential in --json).
    """
    from cost_models.parallel import OPTIMIZER_SHARDING, RECOMPUTE, SCHEDULES
    from planner import bubbles as bub
    from planner.costing import check_objective, make_target, rank_by_cost
    from planner.frameworks import get_framework
    from planner.plan import framework_to_mapping, plan_document, write_plan
    from planner.resilience.spares import FAILURE_AWARE_POOL, failure_aware_rank
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
        optimizer_sharding=_words(optimizer_sharding, "--optimizer-sharding", OPTIMIZER_SHARDING),
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
        _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json)
        return
    pool = max(top, FAILURE_AWARE_POOL) if failure_aware else top
    result = api.run_search(problem, restrictions, pool, progress, collect=csv_out is not None)
    if objective == "cost":
        result.plans = rank_by_cost(result.plans, target)
    goodputs = None
    if failure_aware:
        result.plans, goodputs = failure_aware_rank(problem, result.plans, restrictions, top)
    plans = [api.plan_summary(problem, p, target) for p in result.plans]
    for row, g in zip(plans, goodputs or []):
        row["goodput"] = g
    data = {
        "schema_version": api.SCHEMA_VERSION,
        "planner_version": __version__,
        "model": api.model_dict(problem.model),
        "cluster": api.cluster_dict(problem.cluster),
        "job": api.job_dict(problem.job),
        "framework": framework_to_mapping(restrictions.framework),
        **api.software_dict(problem),
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
        budget = api.rounded(bub.budget_summary_dict(bub.budget(best.estimate)))
        predictions = api.predictions_dict(best.estimate, api.training_dict(best, target))
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


def _search_graph(problem, restrictions, top, progress, out, explain_flag, as_json) -> None:
    """``planner search`` on a graph model: best graph plans beside the best sequential plan."""
    from planner import bubbles as bub
    from planner.graph_plan import GraphPlanInputs, graph_plan_document
    from planner.plan import write_plan
    from planner.search.graph import run_graph_search

    result = run_graph_search(problem.model, problem.cluster, problem.job, restrictions, top, progress)
    data = api.graph_search_dict(problem, result)
    if explain_flag:
        data["explain"] = api.graph_explain(result)
    if out is not None:
        best = result.plans[0]
        seq = result.sequential
        gproblem = api.Problem(
            problem.model, problem.cluster, problem.job, best.stage_graph, problem.profile, problem.software
        )
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
            restrictions.memory_headroom_bytes,
            problem.software.name,
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
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Directory for megatron_args.txt and the launch script.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = Path("megatron_launch"),
    launcher: Annotated[
        str, typer.Option("--launcher", help="torchrun or slurm.", rich_help_panel=PANEL_OUTPUT)
    ] = "torchrun",
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files in --out.", rich_help_panel=PANEL_OUTPUT)
    ] = False,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="For a graph plan: export its best sequential plan instead.",
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write Megatron-LM arguments and a launch script for a plan (megatron-core 0.19.2). Exit 1
    when Megatron-LM cannot run the plan, naming the reason."""
    from planner.frameworks.megatron import export as mx
    from planner.graph_plan import is_graph_plan
    from planner.plan import read_plan

    if launcher not in mx.LAUNCHERS:
        raise UsageError(f"--launcher {launcher!r} is not allowed; allowed values: {', '.join(mx.LAUNCHERS)}")
    if is_graph_plan(plan):
        from planner.graph_plan import sequential_for_megatron

        inputs, note = sequential_for_megatron(plan, sequential)
        typer.echo(f"note: {note}", err=True)
    else:
        if sequential:
            raise UsageError("--sequential applies to graph plans only; this plan is already sequential")
        inputs = read_plan(str(plan))
    texts = mx.export_files(inputs, launcher)
    files = _write_export(out, texts, force)
    (out / f"launch_{launcher}.sh").chmod(0o755)
    if as_json:
        _emit_json(
            {
                "files": sorted(str(f) for f in files),
                "args": [[f, v] for f, v in mx.megatron_args(inputs)],
                "world_size": inputs.cluster.num_gpus,
                "framework": {"name": "megatron", "version": mx.VERSION},
            }
        )
    else:
        for f in sorted(files):
            typer.echo(f"wrote {f}", err=True)


def _write_export(out: Path, texts: dict[str, str], force: bool) -> list[Path]:
    """Write an export's files into ``out`` atomically; never replaces an existing file unless
    ``force`` (and never touches files the export does not write)."""
    from planner.errors import SpecError

    files = {out / name: text for name, text in texts.items()}
    existing = [str(f) for f in files if f.exists()]
    if existing and not force:
        raise SpecError(f"{', '.join(existing)} already exist; pass --force to replace them")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{out}: cannot create: {exc.strerror}") from None
    for path, text in files.items():
        write_text_atomic(path, text)
    return list(files)


@app.command()
def check(
    configs: Annotated[list[Path], typer.Argument(help="Plan files or Megatron-LM args/launch files.")],
    cluster: ClusterOpt,
    nodes: NodesOpt = None,
    headroom_gib: Annotated[
        float,
        typer.Option(
            "--headroom-gib", help="Memory that must stay free per GPU.", rich_help_panel=PANEL_MEMORY
        ),
    ] = 0.0,
    max_slowdown: Annotated[
        float | None,
        typer.Option(
            "--max-slowdown",
            help="Fail when slower than the best plan found by more than this fraction.",
            rich_help_panel="Checks",
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="text or github (Actions annotations).", rich_help_panel=PANEL_OUTPUT),
    ] = "text",
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check configs for CI: constraints, memory, throughput, distance from the best plan. Exit 1 on failure."""
    from planner.check import check_file, github_lines, verdict_dict
    from planner.loading import load_cluster

    if fmt not in ("text", "github"):
        raise UsageError(f"--format {fmt!r} is not allowed; allowed values: text, github")
    _finite(headroom_gib=headroom_gib, max_slowdown=max_slowdown or 0.0)
    if headroom_gib < 0 or (max_slowdown is not None and max_slowdown < 0):
        raise UsageError("--headroom-gib and --max-slowdown must not be negative")
    from planner.calibrate.profile import read_profile
    from planner.software import BASE, check_software, configure

    name = check_software(software) if software is not None else None
    prof = read_profile(profile) if profile is not None else None
    spec = load_cluster(cluster, nodes)
    configure(spec, name or BASE, prof)  # a profile for another GPU type: an error here, exit 1
    verdicts = [check_file(str(p), spec, headroom_gib * 2**30, max_slowdown, prof, name) for p in configs]
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
            message = ""
            if callable(getattr(exc, "format_message", None)) and type(exc).__name__ != "NoArgsIsHelpError":
                message = " ".join(str(exc.format_message()).split())
            if _state["debug"] or not message:
                exc.show()  # help for a bare command
            else:
                # One line, like every other error (click's own shows usage and a hint as well).
                sys.stderr.write(f"error: {message} (see --help)\n")
            return int(code)
        raise


def entry() -> None:
    """``planner`` console script."""
    raise SystemExit(main())


from planner.cli import calibrate as _calibrate  # noqa: E402,F401  (registers commands)
from planner.cli import export_torchtitan as _export_torchtitan  # noqa: E402,F401  (registers commands)
from planner.cli import report as _report  # noqa: E402,F401  (registers commands)
from planner.cli import sweep as _sweep  # noqa: E402,F401  (registers commands)
from planner.cli import whatif as _whatif  # noqa: E402,F401  (registers commands)
