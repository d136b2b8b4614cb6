"""The options the ``planner`` commands share, as ``Annotated`` types, and the help panels that
group them: model and cluster inputs, the parallel layout of one configuration (estimate, timeline,
bubbles), the parallel space a search covers, memory, time/cost/energy, and output.

Declarations only: this module imports no command module, so every command module can import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
    str,
    typer.Option(
        "--precision",
        help="bf16, fp16, fp8, nvfp4 (NVFP4 GEMMs; Blackwell GPUs) or mxfp4 (OCP MX FP4 GEMMs; Blackwell and "
        "AMD MI355X; --framework any: no supported framework flag runs it).",
        rich_help_panel=PANEL_INPUTS,
    ),
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
        "applies (default: megatron, as search prices it; any: the GPU files' base values; --software overrides).",
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
PlanArgOptional = Annotated[
    Path | None,
    typer.Argument(
        help="A plan file (from planner search --out) instead of the flags; the same as --plan.",
        metavar="plan",
        show_default=False,
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
Fp8RecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--fp8-recipe",
        help="FP8 scaling recipe with --precision fp8: tensorwise (current per-tensor scaling; the "
        "default), delayed (amax history), blockwise (1x128 / 128x128 blocks) or mxfp8 (32-element "
        "blocks, Blackwell only) (Megatron --fp8-recipe).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
UnfusedAccumulationOpt = Annotated[
    bool,
    typer.Option(
        "--no-gradient-accumulation-fusion",
        help="Weight gradients are added to the main gradients by a separate kernel each "
        "micro-batch, as with Megatron --no-gradient-accumulation-fusion (default: fused).",
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
OptimizerStateDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--optimizer-state-dtype",
        help="Dtype of Adam's two moments: fp32 (default), bf16 or fp16 (Megatron "
        "--use-precision-aware-optimizer --exp-avg-dtype / --exp-avg-sq-dtype, with the distributed "
        "optimizer; torchtitan keeps fp32).",
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
AttentionImplOpt = Annotated[
    Optional[str],
    typer.Option(
        "--attention-impl",
        help="Core attention: fused (the GPU generation's flash attention: cuDNN, FlashAttention-3 on "
        "Hopper; the default), flash2 (FlashAttention-2 kernels, about half as fast from Hopper on: "
        "flash-attn 2, PyTorch SDPA before 2.11) or unfused (the score matrix in HBM: Megatron-LM "
        "before flash attention, Megatron --attention-backend unfused).",
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
RecomputeModulesOpt = Annotated[
    str | None,
    typer.Option(
        "--recompute-modules",
        help="With --recompute selective: the modules re-run, comma-separated (Megatron --recompute-modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; default core_attn).",
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
        help="1f1b, interleaved, gpipe, zb-h1, zb-h2 or zb-v (zb-v: --vpp 2; default: by --vpp).",
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
OffloadLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--offload-layers",
        help="Offload the activations of the first N layers to host memory (Megatron --cpu-offloading-num-layers; pp 1, no recompute).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
OptimizerInstancesOpt = Annotated[
    int | None,
    typer.Option(
        "--optimizer-instances",
        help="Partial distributed optimizer: shard the optimizer states over dp*cp/N ranks and keep N replicas (Megatron --num-distributed-optimizer-instances; needs --optimizer-sharding distributed).",
        rich_help_panel=PANEL_LAYOUT,
    ),
]
RankOrderOpt = Annotated[
    str | None,
    typer.Option(
        "--rank-order",
        help="Rank layout, fastest-varying first: tp-cp-ep-dp-pp (Megatron's default) or tp-cp-ep-pp-dp (Megatron --use-tp-pp-dp-mapping: a pipeline's stages adjacent, data-parallel replicas outermost).",
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
FinetuneOpt = Annotated[
    Optional[str],
    typer.Option(
        "--finetune",
        help="full (every weight trained: pre-training and SFT; the default) or lora (a frozen base with "
        "LoRA adapters, Megatron-Bridge PEFT; docs/finetune.md).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
LoraRankOpt = Annotated[
    Optional[int],
    typer.Option(
        "--lora-rank",
        help="LoRA adapter rank with --finetune lora (Megatron-Bridge LoRA dim; default 16, MLPerf's "
        "Llama 2 70B LoRA).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
LoraTargetsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--lora-targets",
        help="Linear layers that get adapters with --finetune lora, comma-separated: linear_qkv, "
        "linear_proj, linear_fc1, linear_fc2, or attention (qkv + proj; the default), mlp, all.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
FrozenWeightDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--frozen-weight-dtype",
        help="Storage of the frozen base weights with --finetune lora: bf16 (the default) or fp8 "
        "(Transformer Engine FP8 parameters; needs --precision fp8).",
        rich_help_panel=PANEL_INPUTS,
    ),
]
PackedDocLenOpt = Annotated[
    Optional[int],
    typer.Option(
        "--packed-avg-doc-len",
        help="Packed sequences (SFT, PEFT): the average document length in tokens; attention is priced "
        "within documents of this length (THD packing). Default: one document per sequence.",
        rich_help_panel=PANEL_INPUTS,
    ),
]
