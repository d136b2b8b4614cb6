"""Megatron-LM export and import: ``pretrain_gpt.py`` arguments and launch scripts.

Flags, their meaning and the constraints Megatron enforces are from
../shared/reference/megatron-args.md (Megatron-LM ``megatron/training/arguments.py`` @ d98e8a64,
identical in megatron-core 0.19.2). Emitters are pure functions built from one table of flags
(STYLE lesson 8) and golden-tested. Not exported: data paths and the tokenizer (placeholders in
the launch script), learning-rate schedule and run length (placeholders).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from cost_models.parallel import ParallelConfig
from planner.errors import SpecError
from planner.plan import PlanInputs
from planner.specs import JobSpec, ModelSpec

ACTIVATION_FLAGS = {"swiglu": "--swiglu", "squared_relu": "--squared-relu", "gelu": None}
NORMALIZATION = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}


def layout_for(layers: tuple[int, ...]) -> str:
    """``--pipeline-model-parallel-layout`` for an uneven partition: E embedding, t decoder layer,
    L loss, stages separated by | (Megatron-LM PipelineParallelLayerLayout), written out in full."""
    stages = ["t" * n for n in layers]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return "|".join(stages)


def partition_flags(c: ParallelConfig, model: ModelSpec) -> list[tuple[str, str | None]]:
    """How the layer partition maps to Megatron: even split (nothing), first/last counts when every
    middle stage is equal, otherwise an explicit layout."""
    layers = c.layers_per_stage
    if not layers or len(set(layers)) == 1 or c.vpp > 1:
        return []
    first, last, middle = layers[0], layers[-1], layers[1:-1]
    if not middle or len(set(middle)) == 1:
        out = []
        if not middle or first != middle[0]:
            out.append(("--decoder-first-pipeline-num-layers", str(first)))
        if not middle or last != middle[0]:
            out.append(("--decoder-last-pipeline-num-layers", str(last)))
        return out
    return [("--pipeline-model-parallel-layout", layout_for(layers))]


EXPORTABLE_SCHEDULES = ("1f1b", "interleaved")


def megatron_args(inputs: PlanInputs) -> list[tuple[str, str | None]]:
    """The full ``pretrain_gpt.py`` argument list of a plan, as (flag, value or None).

    Upstream Megatron-LM runs 1F1B and interleaved 1F1B only; ZB-H1 and GPipe plans are refused
    (re-run the search with ``--schedule 1f1b,interleaved``). ZeRO-2 has no Megatron spelling and
    is exported as the distributed optimizer (ZeRO-1), which needs more gradient memory: the
    exporter refuses unless the plan also fits that way (checked by the caller)."""
    m, c, job = inputs.model, inputs.config, inputs.job
    if c.schedule not in EXPORTABLE_SCHEDULES:
        raise SpecError(
            f"schedule {c.schedule!r} is not in upstream Megatron-LM (it runs 1f1b and interleaved); "
            "re-run planner search with --schedule 1f1b,interleaved"
        )
    if m.activation == "relu":
        raise SpecError("Megatron-LM has no plain ReLU MLP flag; this model cannot be exported")
    args: list[tuple[str, str | None]] = [
        ("--num-layers", str(m.num_layers)),
        ("--hidden-size", str(m.hidden_size)),
        ("--ffn-hidden-size", str(m.ffn_hidden_size)),
        ("--num-attention-heads", str(m.num_attention_heads)),
    ]
    if m.kv_channels != m.hidden_size // m.num_attention_heads:
        args.append(("--kv-channels", str(m.kv_channels)))
    if m.num_query_groups != m.num_attention_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", str(m.num_query_groups))]
    if ACTIVATION_FLAGS.get(m.activation):
        args.append((ACTIVATION_FLAGS[m.activation], None))
    args.append(("--normalization", NORMALIZATION[m.normalization]))
    if not m.add_bias_linear:
        args.append(("--disable-bias-linear", None))
        if m.add_qkv_bias:
            args.append(("--add-qkv-bias", None))
    if m.qk_layernorm:
        args.append(("--qk-layernorm", None))
    if m.untie_embeddings_and_output_weights:
        args.append(("--untie-embeddings-and-output-weights", None))
    args.append(("--position-embedding-type", m.position_embedding_type))
    args += [
        ("--max-position-embeddings", str(max(m.max_position_embeddings, job.seq_length))),
        ("--seq-length", str(job.seq_length)),
        ("--vocab-size", str(m.vocab_size)),
    ]
    if m.is_moe:
        args += [
            ("--num-experts", str(m.num_experts)),
            ("--moe-router-topk", str(m.moe_router_topk)),
            ("--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)),
        ]
        if m.moe_shared_expert_intermediate_size:
            args.append(("--moe-shared-expert-intermediate-size", str(m.moe_shared_expert_intermediate_size)))
        if m.moe_layer_freq != 1:
            args.append(("--moe-layer-freq", str(m.moe_layer_freq)))
        args += [
            ("--expert-model-parallel-size", str(c.ep)),
            ("--expert-tensor-parallel-size", str(c.expert_tp)),
            ("--moe-token-dispatcher-type", "alltoall"),
            ("--moe-grouped-gemm", None),
        ]
    args += [("--tensor-model-parallel-size", str(c.tp)), ("--pipeline-model-parallel-size", str(c.pp))]
    if c.cp > 1:
        args.append(("--context-parallel-size", str(c.cp)))
    if c.vpp > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", str(c.vpp)))
    args += partition_flags(c, m)
    if c.sp:
        args.append(("--sequence-parallel", None))
    args += [
        ("--micro-batch-size", str(c.micro_batch_size)),
        ("--global-batch-size", str(job.global_batch_size)),
    ]
    if c.recompute == "selective":
        args.append(("--recompute-granularity", "selective"))
    elif c.recompute == "full":
        per_stage = max(c.stage_layers(m)) if c.stage_layers(m) else m.num_layers
        k = c.recompute_num_layers or per_stage
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "block"),
            ("--recompute-num-layers", str(k)),
        ]
    if c.optimizer_sharding in ("distributed", "zero2"):
        args.append(("--use-distributed-optimizer", None))
    elif c.optimizer_sharding == "full":
        args += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads_params")]
    if job.overlap_grad_reduce and c.dp * c.cp > 1:
        args.append(("--overlap-grad-reduce", None))
        if job.overlap_param_gather and c.optimizer_sharding in ("distributed", "zero2"):
            args.append(("--overlap-param-gather", None))
    if c.sp and c.tp > 1:
        args.append(("--tp-comm-overlap", None))
    args.append(("--bf16" if job.precision in ("bf16", "fp8") else "--fp16", None))
    if job.precision == "fp8":
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", "delayed")]
    return args


def args_text(args: list[tuple[str, str | None]]) -> str:
    """``megatron_args.txt``: one flag (and its value) per line."""
    return "".join(f"{flag}\n" if value is None else f"{flag} {shlex.quote(value)}\n" for flag, value in args)


def needs_single_connection(inputs: PlanInputs) -> bool:
    """Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 or cp > 1 before Blackwell, and
    asserts it is *not* 1 with Megatron-FSDP (megatron-args.md §2.1, lines 1166 and 1452-1481)."""
    c = inputs.config
    return c.optimizer_sharding != "full" and (c.tp > 1 or c.cp > 1)


PLACEHOLDERS = """# --- PLACEHOLDERS: replace before launching --------------------------------------------
MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}   # a Megatron-LM checkout (pretrain_gpt.py)
DATA_ARGS=(--mock-data)                                 # e.g. (--data-path /data/my_text_document --split 99,1,0)
TOKENIZER_ARGS=(--tokenizer-type NullTokenizer)          # e.g. (--tokenizer-type HuggingFaceTokenizer --tokenizer-model /path)
TRAINING_ARGS=(--train-iters 1000 --lr 1.0e-4 --min-lr 1.0e-5 --lr-decay-style cosine --lr-warmup-iters 100)
# -----------------------------------------------------------------------------------------
"""


def _script_parts(inputs: PlanInputs) -> tuple[str, str]:
    """The environment line and the indented argument array body shared by both launchers."""
    env = (
        "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        if needs_single_connection(inputs)
        else "unset CUDA_DEVICE_MAX_CONNECTIONS\n"
    )
    args = "\n".join(
        f"    {flag}" + ("" if value is None else f" {shlex.quote(value)}")
        for flag, value in megatron_args(inputs)
    )
    return env, args


def torchrun_script(inputs: PlanInputs, gpus_per_node: int, nodes: int) -> str:
    """A bash script that runs one torchrun per node (run it on every node with NODE_RANK set)."""
    env, args = _script_parts(inputs)
    return f"""#!/bin/bash
# Generated by planner: torchrun launch of Megatron-LM pretrain_gpt.py.
# World size {gpus_per_node * nodes} = {nodes} nodes x {gpus_per_node} GPUs; run on every node with NODE_RANK=0..{nodes - 1}.
set -euo pipefail
{env}
{PLACEHOLDERS}
GPUS_PER_NODE={gpus_per_node}
NUM_NODES={nodes}
NODE_RANK=${{NODE_RANK:-0}}
MASTER_ADDR=${{MASTER_ADDR:-localhost}}
MASTER_PORT=${{MASTER_PORT:-29500}}
WORLD_SIZE=$((GPUS_PER_NODE * NUM_NODES))

DISTRIBUTED_ARGS=(--nproc-per-node "$GPUS_PER_NODE" --nnodes "$NUM_NODES" --node-rank "$NODE_RANK"
                  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT")
MODEL_AND_PARALLEL_ARGS=(
{args}
)

cd "$MEGATRON_PATH"
torchrun "${{DISTRIBUTED_ARGS[@]}}" pretrain_gpt.py "${{MODEL_AND_PARALLEL_ARGS[@]}}" \\
    "${{TOKENIZER_ARGS[@]}}" "${{DATA_ARGS[@]}}" "${{TRAINING_ARGS[@]}}"
"""


def slurm_script(inputs: PlanInputs, gpus_per_node: int, nodes: int) -> str:
    """A Slurm batch script: one torchrun per node (srun --ntasks-per-node=1), rendezvous on the first host."""
    env, args = _script_parts(inputs)
    return f"""#!/bin/bash
# Generated by planner: Slurm launch of Megatron-LM pretrain_gpt.py, one torchrun per node.
#SBATCH --job-name=planner-megatron
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --exclusive
set -euo pipefail
{env}
{PLACEHOLDERS}
GPUS_PER_NODE={gpus_per_node}
NUM_NODES=${{SLURM_NNODES:-{nodes}}}
if [ "$NUM_NODES" -ne {nodes} ]; then echo "this plan needs {nodes} nodes, got $NUM_NODES" >&2; exit 1; fi
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=$((SLURM_JOB_ID % 4536 + 61000))
export MASTER_ADDR MASTER_PORT

MODEL_AND_PARALLEL_ARGS=(
{args}
)

srun --ntasks-per-node=1 bash -c "cd \\"$MEGATRON_PATH\\" && torchrun --nproc-per-node $GPUS_PER_NODE \\
    --nnodes $NUM_NODES --node-rank \\$SLURM_NODEID --master-addr $MASTER_ADDR --master-port $MASTER_PORT \\
    pretrain_gpt.py ${{MODEL_AND_PARALLEL_ARGS[*]}} ${{TOKENIZER_ARGS[*]}} ${{DATA_ARGS[*]}} ${{TRAINING_ARGS[*]}}"
"""


# ------------------------------------------------------------------------------------------------
# Import


@dataclass(frozen=True, slots=True)
class Imported:
    """A Megatron launch read back: model, job, configuration, and what was not understood."""

    model: ModelSpec
    job: JobSpec
    config: ParallelConfig
    world_size: int | None
    ignored: tuple[str, ...]
    """Flags that do not matter for planning."""
    unknown: tuple[str, ...]
    """Flags planner could not interpret."""
    flag_lines: dict
    """Line number (1-based) of each flag in the source, for annotations."""


IGNORED = {
    "--train-iters",
    "--train-samples",
    "--lr",
    "--min-lr",
    "--lr-decay-style",
    "--lr-warmup-iters",
    "--lr-warmup-fraction",
    "--lr-decay-iters",
    "--lr-warmup-samples",
    "--lr-decay-samples",
    "--weight-decay",
    "--clip-grad",
    "--adam-beta1",
    "--adam-beta2",
    "--adam-eps",
    "--init-method-std",
    "--save",
    "--load",
    "--save-interval",
    "--eval-interval",
    "--eval-iters",
    "--log-interval",
    "--data-path",
    "--split",
    "--mock-data",
    "--tokenizer-type",
    "--tokenizer-model",
    "--vocab-file",
    "--merge-file",
    "--tensorboard-dir",
    "--wandb-project",
    "--seed",
    "--attention-dropout",
    "--hidden-dropout",
    "--ckpt-format",
    "--distributed-timeout-minutes",
    "--use-mcore-models",
    "--transformer-impl",
    "--attention-backend",
    "--rotary-base",
    "--rotary-percent",
    "--norm-epsilon",
    "--make-vocab-size-divisible-by",
    "--moe-token-dispatcher-type",
    "--moe-grouped-gemm",
    "--moe-aux-loss-coeff",
    "--moe-router-load-balancing-type",
    "--tp-comm-overlap",
    "--no-gradient-accumulation-fusion",
    "--use-flash-attn",
    "--cross-entropy-loss-fusion",
    "--manual-gc",
    "--log-throughput",
    "--fp8-recipe",
    "--fp8-amax-history-len",
    "--fp8-amax-compute-algo",
    "--data-parallel-sharding-strategy",
    "--use-rope-scaling",
    "--log-timers-to-tensorboard",
    "--no-masked-softmax-fusion",
    "--no-bias-swiglu-fusion",
    "--no-rope-fusion",
    "--eod-mask-loss",
    "--timing-log-level",
    "--exit-duration-in-mins",
    "--num-workers",
}
LAUNCHER_FLAGS = {
    "--nnodes",
    "--nproc-per-node",
    "--nproc_per_node",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--rdzv-backend",
    "--rdzv_backend",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-id",
    "--rdzv_id",
    "--max-restarts",
    "--ntasks-per-node",
}
"""torchrun / srun flags in launch scripts: not Megatron's, not needed for planning."""
IGNORED |= LAUNCHER_FLAGS
BOOLEAN_IGNORED = {
    "--mock-data",
    "--moe-grouped-gemm",
    "--tp-comm-overlap",
    "--use-mcore-models",
    "--use-flash-attn",
    "--cross-entropy-loss-fusion",
    "--manual-gc",
    "--log-throughput",
    "--no-gradient-accumulation-fusion",
    "--log-timers-to-tensorboard",
    "--no-masked-softmax-fusion",
    "--no-bias-swiglu-fusion",
    "--no-rope-fusion",
    "--eod-mask-loss",
    "--standalone",
    "--use-rope-scaling",
}
FLAGS_WITH_VALUE = {
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--kv-channels",
    "--num-query-groups",
    "--normalization",
    "--position-embedding-type",
    "--max-position-embeddings",
    "--seq-length",
    "--num-experts",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--fp8-format",
    "--vocab-size",
    "--padded-vocab-size",
}


def tokenize(text: str) -> list[tuple[str, int]]:
    """Shell words of a launch script or args file, with their line numbers; ${VAR} arrays are kept
    as words (their content is looked up where the script defines them)."""
    words: list[tuple[str, int]] = []
    logical, start = "", 1
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #")[0] if not raw.lstrip().startswith("#") else ""
        if not logical:
            start = number
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        try:
            parts = shlex.split(logical.replace("(", " ").replace(")", " "), posix=True)
        except ValueError:
            parts = logical.replace("(", " ").replace(")", " ").split()
        words += [(w, start) for w in parts]
        logical = ""
    return words


def parse_megatron(text: str, where: str, world_size: int | None = None) -> Imported:
    """Read Megatron flags from an args file or a launch script."""
    words = tokenize(text)
    flags: dict[str, str | None] = {}
    lines: dict[str, int] = {}
    ignored, unknown = [], []
    i = 0
    while i < len(words):
        w, line = words[i]
        if w.startswith("--") and "=" in w:
            w, value = w.split("=", 1)
            words.insert(i + 1, (value, line))
        if w.startswith("--"):
            has_value = i + 1 < len(words) and not words[i + 1][0].startswith("--")
            if w in FLAGS_WITH_VALUE:
                flags[w], lines[w] = (words[i + 1][0] if has_value else None), line
                i += 2 if has_value else 1
                continue
            if w in IGNORED:
                ignored.append(w)
                i += (
                    2
                    if has_value and w not in {"--mock-data", "--moe-grouped-gemm", "--tp-comm-overlap"}
                    else 1
                )
                continue
            flags[w], lines[w] = None, line
        elif w.startswith("--nnodes") or w.startswith("--nproc"):
            pass
        i += 1
    known_bool = {
        "--group-query-attention",
        "--swiglu",
        "--squared-relu",
        "--disable-bias-linear",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--untie-embeddings-and-output-weights",
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--bf16",
        "--fp16",
        "--recompute-activations",
        "--use-megatron-fsdp",
        "--use-torch-fsdp2",
    }
    for f in list(flags):
        if f not in FLAGS_WITH_VALUE and f not in known_bool:
            unknown.append(f)

    def num(flag: str, default: int | None = None) -> int | None:
        v = flags.get(flag)
        if v is None:
            return default
        try:
            return int(v)
        except ValueError:
            raise SpecError(
                f"{where}: line {lines.get(flag, '?')}: {flag} expects an integer, got {v!r}"
            ) from None

    for req in (
        "--num-layers",
        "--hidden-size",
        "--num-attention-heads",
        "--seq-length",
        "--micro-batch-size",
    ):
        if flags.get(req) is None:
            raise SpecError(f"{where}: missing {req} (needed to plan; Megatron requires it too)")
    h, heads = num("--hidden-size"), num("--num-attention-heads")
    gated = "--swiglu" in flags
    ffn_default = int((4 * h * 2 / 3) / 64) * 64 if gated else 4 * h
    groups = num("--num-query-groups", 1) if "--group-query-attention" in flags else heads
    experts = num("--num-experts", 0) or 0
    vocab = num("--padded-vocab-size") or num("--vocab-size") or 32000
    seq = num("--seq-length")
    model = ModelSpec(
        name=where,
        num_layers=num("--num-layers"),
        hidden_size=h,
        ffn_hidden_size=num("--ffn-hidden-size", ffn_default),
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=num("--kv-channels", h // heads),
        vocab_size=vocab,
        max_position_embeddings=num("--max-position-embeddings", seq),
        activation="swiglu" if gated else ("squared_relu" if "--squared-relu" in flags else "gelu"),
        normalization="rmsnorm" if flags.get("--normalization") == "RMSNorm" else "layernorm",
        position_embedding_type=flags.get("--position-embedding-type") or "learned_absolute",
        untie_embeddings_and_output_weights="--untie-embeddings-and-output-weights" in flags,
        add_bias_linear="--disable-bias-linear" not in flags,
        add_qkv_bias="--add-qkv-bias" in flags,
        qk_layernorm="--qk-layernorm" in flags,
        num_experts=experts,
        moe_router_topk=num("--moe-router-topk", 2) if experts else 0,
        moe_ffn_hidden_size=num("--moe-ffn-hidden-size", num("--ffn-hidden-size", ffn_default))
        if experts
        else 0,
        moe_shared_expert_intermediate_size=num("--moe-shared-expert-intermediate-size", 0) if experts else 0,
        moe_layer_freq=num("--moe-layer-freq", 1) if experts else 1,
    )
    if model.position_embedding_type not in ("learned_absolute", "rope", "none"):
        raise SpecError(
            f"{where}: --position-embedding-type {model.position_embedding_type!r}: planner models "
            "learned_absolute, rope and none"
        )
    tp, pp, cp = (
        num("--tensor-model-parallel-size", 1),
        num("--pipeline-model-parallel-size", 1),
        num("--context-parallel-size", 1),
    )
    vpp = num("--num-virtual-stages-per-pipeline-rank", 1) or 1
    if flags.get("--num-layers-per-virtual-pipeline-stage"):
        vpp = model.num_layers // pp // num("--num-layers-per-virtual-pipeline-stage")
    layers: tuple[int, ...] = ()
    if flags.get("--pipeline-model-parallel-layout"):
        stages = flags["--pipeline-model-parallel-layout"].split("|")
        layers = tuple(s.count("t") for s in stages)
    elif flags.get("--decoder-first-pipeline-num-layers") or flags.get("--decoder-last-pipeline-num-layers"):
        first = num("--decoder-first-pipeline-num-layers")
        last = num("--decoder-last-pipeline-num-layers")
        rest = model.num_layers - (first or 0) - (last or 0)
        n_mid = pp - (first is not None) - (last is not None)
        mid = rest // n_mid if n_mid else 0
        layers = tuple(
            ([first] if first is not None else []) + [mid] * n_mid + ([last] if last is not None else [])
        )
    granularity = flags.get("--recompute-granularity") or (
        "selective" if "--recompute-activations" in flags else None
    )
    recompute = granularity or "none"
    rnl = num("--recompute-num-layers", 0) if recompute == "full" else 0
    most = max(layers) if layers else -(-model.num_layers // (pp * vpp))
    if recompute == "full" and rnl >= most:
        rnl = 0  # every layer of every stage: planner's "all"
    if "--use-megatron-fsdp" in flags or "--use-torch-fsdp2" in flags:
        sharding = "full"
    elif "--use-distributed-optimizer" in flags:
        sharding = "distributed"
    else:
        sharding = "none"
    gbs = num("--global-batch-size")
    dp = world_size // (tp * pp * cp) if world_size else 1
    if gbs is None:
        gbs = num("--micro-batch-size") * dp
    precision = "fp8" if flags.get("--fp8-format") else ("fp16" if "--fp16" in flags else "bf16")
    job = JobSpec(
        global_batch_size=gbs,
        seq_length=seq,
        precision=precision,
        overlap_grad_reduce="--overlap-grad-reduce" in flags,
        overlap_param_gather="--overlap-param-gather" in flags,
    )
    ep = num("--expert-model-parallel-size", 1)
    etp = num("--expert-tensor-parallel-size", 0) or tp  # Megatron's default is tp (arguments.py 586-587)
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        micro_batch_size=num("--micro-batch-size"),
        recompute=recompute,
        recompute_num_layers=rnl,
        sequence_parallel="--sequence-parallel" in flags,
        optimizer_sharding=sharding,
        schedule="interleaved" if vpp > 1 else "1f1b",
        layers_per_stage=() if len(set(layers)) <= 1 else layers,
    )
    return Imported(model, job, config, world_size, tuple(ignored), tuple(sorted(set(unknown))), lines)
