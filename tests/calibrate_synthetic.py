"""A synthetic cluster for the calibration tests: Megatron-LM logs and nccl-tests outputs generated,
in the formats the tools print, from known perturbed parameters plus noise.

Formats: Megatron-LM ``megatron/training/training.py`` (``training_log``) and
``megatron/training/utils.py`` (``report_memory``); nccl-tests ``src/common.cu``.
"""

from __future__ import annotations

import random
from pathlib import Path

from cost_models.constraints import resolve
from planner.calibration.user.fit import predict_nccl, predict_run
from planner.calibration.user.sources import NcclPoint, Run
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster
from planner.profiles.params import values_of

CLUSTER = "dgx-h100"
GPU = "h100-sxm5-80gb"

TRUE_SCALE = {
    "gemm_efficiency_max": 0.88,
    "attention_efficiency": 1.3,
    "hbm_efficiency": 0.8,
    "nvlink_bus_bandwidth_gb_per_s": 0.8,
    "nvlink_latency_us": 1.6,
    "network_bus_bandwidth_gb_per_s": 0.7,
    "network_latency_us": 1.5,
}
"""The synthetic cluster: each parameter's true value is its shipped value times this factor
(the overlap factor keeps its value: a model whose runs rarely overlap communication cannot be
told apart from it, and the tests check that the report says so)."""

LLAMA_8B = """--num-layers 32
--hidden-size 4096
--ffn-hidden-size 14336
--num-attention-heads 32
--group-query-attention
--num-query-groups 8
--swiglu
--normalization RMSNorm
--disable-bias-linear
--untie-embeddings-and-output-weights
--position-embedding-type rope
--rotary-base 500000
--vocab-size 128256
"""

GPT_1B = """--num-layers 24
--hidden-size 2048
--ffn-hidden-size 8192
--num-attention-heads 16
--vocab-size 50304
--position-embedding-type rope
"""

GPT_350M = """--num-layers 12
--hidden-size 1024
--ffn-hidden-size 4096
--num-attention-heads 16
--vocab-size 50304
--position-embedding-type rope
"""

# (name, model flags, nodes, tp, pp, seq, micro batch, global batch, extra flags)
LAYOUTS = (
    (
        "l8b_tp1_s2k",
        LLAMA_8B,
        1,
        1,
        1,
        2048,
        1,
        64,
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    ),
    ("l8b_tp2_s4k", LLAMA_8B, 1, 2, 1, 4096, 1, 32, ""),
    ("l8b_tp4_s8k", LLAMA_8B, 1, 4, 1, 8192, 1, 16, ""),
    ("l8b_tp8_s32k", LLAMA_8B, 1, 8, 1, 32768, 1, 8, ""),
    ("l8b_tp8_s8k", LLAMA_8B, 1, 8, 1, 8192, 2, 16, ""),
    ("l8b_tp8_pp2_2n", LLAMA_8B, 2, 8, 2, 8192, 1, 64, ""),
    ("l8b_tp2_4n", LLAMA_8B, 4, 2, 1, 4096, 1, 128, ""),
    ("l8b_tp4_pp2_4n", LLAMA_8B, 4, 4, 2, 4096, 1, 128, ""),
    ("gpt1b_tp1_s1k", GPT_1B, 1, 1, 1, 1024, 4, 256, ""),
    ("gpt1b_tp1_s8k", GPT_1B, 1, 1, 1, 8192, 1, 32, ""),
    ("gpt1b_tp8_s16k", GPT_1B, 1, 8, 1, 16384, 1, 8, ""),
    ("gpt1b_tp1_2n", GPT_1B, 2, 1, 1, 2048, 2, 128, "--no-overlap-grad-reduce"),
    ("gpt1b_tp2_4n", GPT_1B, 4, 2, 1, 2048, 1, 64, "--no-overlap-grad-reduce"),
    ("gpt350m_tp1_mbs8", GPT_350M, 1, 1, 1, 1024, 8, 256, ""),
    ("gpt350m_tp1_mbs16", GPT_350M, 1, 1, 1, 512, 16, 512, ""),
    # Large micro-batches of a small model: the element-wise (memory-bound) share is the largest of
    # any layout here, which is what lets the fit tell hbm_efficiency apart.
    ("gpt350m_tp1_mbs32", GPT_350M, 1, 1, 1, 2048, 32, 256, ""),
    ("gpt350m_tp1_mbs64", GPT_350M, 1, 1, 1, 1024, 64, 512, ""),
)


def true_values() -> dict[str, float]:
    prior = values_of(load_cluster(CLUSTER, 1), GPU)
    return {k: v * TRUE_SCALE.get(k, 1.0) for k, v in prior.items()}


def args_text(model: str, tp: int, pp: int, seq: int, mbs: int, gbs: int, extra: str) -> str:
    flags = model + (
        f"--max-position-embeddings {max(seq, 4096)}\n--seq-length {seq}\n"
        f"--tensor-model-parallel-size {tp}\n--pipeline-model-parallel-size {pp}\n"
        + ("--sequence-parallel\n" if tp > 1 else "")
        + f"--micro-batch-size {mbs}\n--global-batch-size {gbs}\n--use-distributed-optimizer\n"
        + ("--overlap-grad-reduce\n" if "--no-overlap-grad-reduce" not in extra else "")
        + "--bf16\n"
    )
    rest = extra.replace("--no-overlap-grad-reduce", "").strip()
    return flags + (rest + "\n" if rest else "")


def megatron_log(
    step_s: float,
    gbs: int,
    world: int,
    tflops: float,
    rng: random.Random,
    iters: int = 10,
    mem_mb: float = 0.0,
    tp: int = 1,
    pp: int = 1,
) -> str:
    """A Megatron-LM log excerpt: start-up lines, then ``iters`` iteration lines (the first slow)."""
    lines = [
        f"using world size: {world}, data-parallel size: {world // (tp * pp)}, context-parallel size: 1, "
        f"hierarchical context-parallel sizes: None, tensor-model-parallel size: {tp}, pipeline-model-parallel size: {pp}",
        "> building GPT2BPETokenizer tokenizer ...",
        "[after dataloaders are built] datetime: 2025-08-01 07:18:40",
        "training ...",
    ]
    for it in range(1, iters + 1):
        t = step_s * (2.5 if it == 1 else 1 + rng.gauss(0, 0.004))
        lines.append(
            f" [2025-08-01 07:{19 + it // 60:02d}:{it % 60:02d}] iteration {it:8d}/{1000:8d} | consumed samples: {it * gbs:12d} |"
            f" elapsed time per iteration (ms): {t * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops / (t / step_s):.1f} |"
            f" learning rate: {3e-4 * it / 100:.6E} | global batch size: {gbs:5d} | lm loss: {10.5 - 0.1 * it:.6E} |"
            f" loss scale: 1.0 | grad norm: {2.5 - 0.05 * it:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        if it == 1 and mem_mb:
            lines.append(
                f"[Rank 0] (after 1 iterations) memory (MB) | allocated: {mem_mb * 0.7:.4f} | max allocated: {mem_mb:.4f} | "
                f"reserved: {mem_mb * 1.05:.1f} | max reserved: {mem_mb * 1.05:.1f}"
            )
    return "\n".join(lines) + "\n"


def nccl_output(
    collective: str,
    hosts: int,
    per_host: int,
    times_us: list[tuple[int, float]],
    gpu_name: str = "NVIDIA H100 80GB HBM3",
) -> str:
    """nccl-tests output in src/common.cu's format (out-of-place and in-place columns)."""
    n = hosts * per_host
    lines = [
        "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
        f"# Collective test starting: {collective}_perf",
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4294967296 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(n):
        lines.append(
            f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {f'node{r // per_host + 1:02d}':>10s} device {r % per_host:2d} [0000:{0x18 + r % per_host:02x}:00] {gpu_name}"
        )
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "alltoall": (n - 1) / n,
    }[collective]
    redop = "sum" if collective in ("all_reduce", "reduce_scatter") else "none"
    total = 0.0
    for size, t in times_us:
        alg = size / t / 1e3
        bus = alg * factor
        total += bus
        lines.append(
            f"{size:12d}  {size // 2:12d}  {'bfloat16':>8s}  {redop:>6s}  {-1:6d}  {t:7.2f}  {alg:6.2f}  {bus:6.2f}  {0:5d}"
            f"  {t * 0.99:7.2f}  {alg / 0.99:6.2f}  {bus / 0.99:6.2f}  {0:5d}"
        )
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {total / len(times_us):g} ",
        "#",
        "",
    ]
    return "\n".join(lines)


NCCL_SETS = (
    ("all_reduce", 1, 8),
    ("all_reduce", 2, 8),
    ("all_reduce", 4, 1),
    ("all_gather", 4, 8),
    ("reduce_scatter", 1, 8),
)
SIZES = [1024 * 4**i for i in range(12)]


def write_synthetic(tmp: Path, noise: float = 0.01, seed: int = 7, layouts=LAYOUTS) -> list[str]:
    """Write the synthetic cluster's logs, args files and nccl-tests outputs into ``tmp``; return the
    calibrate arguments (``log,args`` pairs and nccl files)."""
    rng = random.Random(seed)
    truth = true_values()
    out = []
    for name, model, nodes, tp, pp, seq, mbs, gbs, extra in layouts:
        text = args_text(model, tp, pp, seq, mbs, gbs, extra)
        cluster = load_cluster(CLUSTER, nodes)
        imp = parse_megatron(text, name, cluster.num_gpus)
        config = resolve(imp.model, cluster, imp.job, imp.config)
        run = Run(name, name, imp.model, cluster, imp.job, config, 1.0, "")
        est = predict_run(run, GPU, truth)
        tps = est.tokens_per_s_per_gpu * (1 + rng.gauss(0, noise))
        step = imp.job.tokens_per_step / (tps * cluster.num_gpus)
        (tmp / f"{name}.args.txt").write_text(text)
        (tmp / f"{name}.log").write_text(
            megatron_log(
                step, gbs, cluster.num_gpus, 400.0, rng, mem_mb=est.peak_memory_bytes / 2**20, tp=tp, pp=pp
            )
        )
        out.append(f"{tmp / (name + '.log')},{tmp / (name + '.args.txt')}")
    base = load_cluster(CLUSTER, 1)
    for collective, hosts, per in NCCL_SETS:
        times = []
        for size in SIZES:
            p = NcclPoint("", collective, size, hosts * per, per, 1.0)
            times.append((size, predict_nccl(p, base, GPU, truth) * 1e6 * (1 + rng.gauss(0, noise))))
        path = tmp / f"{collective}_{hosts}x{per}.txt"
        path.write_text(nccl_output(collective, hosts, per, times))
        out.append(str(path))
    return out
