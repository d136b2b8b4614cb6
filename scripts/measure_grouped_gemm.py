#!/usr/bin/env python3
"""Time MoE grouped GEMMs on one CUDA GPU (issue 12, item 2: grouped-GEMM efficiency as a function
of tokens per expert and expert size).

For each expert shape (hidden h, expert intermediate f, local experts E) and tokens per expert n it
times, in bf16, the two grouped GEMMs of a SwiGLU expert MLP (fc1: [n, h] x [h, 2f] per expert;
fc2: [n, f] x [f, h] per expert) in their three passes, through ``torch._grouped_mm`` (one kernel
over all local experts, each expert's rows given by cumulative offsets, as torchtitan's MoE and
Megatron-Core's ``--moe-grouped-gemm`` run them), with the operand layouts of a linear layer whose
weight is stored ``[E, out, in]``:

* forward ``X @ W.t()`` per expert (``fc1_s`` / ``fc2_s``),
* input gradient ``dY @ W`` (``fc1_dgrad_s`` / ``fc2_dgrad_s``),
* weight gradient ``dY.t() @ X`` reducing over each expert's tokens (``fc1_wgrad_s`` /
  ``fc2_wgrad_s``; offsets on the shared dimension, output ``[E, out, in]``),

and, for comparison, the forward's FLOPs as one dense GEMM (``dense_same_flop_s``) and, for even
routing, the same three passes as Transformer Engine's ``GroupedLinear`` runs them by default: one
cuBLAS GEMM per expert, round-robin over ``--streams`` CUDA streams (``streams_fc1_s`` ...;
TE's ``multi_stream_cublas_gemm`` over ``nvte_get_num_compute_streams()`` = 4 streams, TE docs
``docs/features/mixture_of_experts.rst``, "Per-expert GEMMs"; ``torch.matmul`` calls the same
cuBLAS). With ``--fp8``, for even routing and at least 256 tokens per expert, the same per-expert
4-stream path in FP8 (``torch._scaled_mm``, E4M3 operands with per-tensor scales, both operands
K-major as Hopper's FP8 tensor cores take them: Transformer Engine keeps transposed FP8 copies):
``streams_fp8_fc1_s`` ... with the fast accumulator in forward and the split accumulator in the
gradients, as TE's ``use_split_accumulator`` settings. With ``--accumulate``, the per-expert
weight gradients also accumulate into an FP32 gradient as Megatron-Core's gradient-accumulation
fusion does (``torch.addmm(main_grad, dY.t(), X, out_dtype=float32)``, cuBLAS with beta 1 and an
FP32 C: ``streams_fc1_wgrad_fp32acc_s`` ...). Tokens are
spread evenly (``distribution: even``) and, for each n, also unevenly (``linear``: expert i gets
about ``n (0.5 + i / (E - 1))`` tokens, same total; routing is never even).

Each call is captured ``--calls`` times in a CUDA graph and the graph replayed (median of
``--reps`` CUDA-event-timed replays after warm-up): kernels of tens of microseconds would otherwise
time the host's dispatch of each call, which ``torch._grouped_mm`` makes longer than the GPU's
work at small n (the file measured before 2026-11-27 timed single calls and included it).

Output: JSON rows for ``scripts/compare_grouped_gemm.py``, which compares them with planner's
grouped-GEMM pricing without a GPU. torch is optional: without it or without CUDA the script says
so and exits 0.

Usage: python scripts/measure_grouped_gemm.py [--out FILE] [--calls 10] [--reps 10] [--streams 4] [--fp8] [--accumulate]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure_kernels import device_header  # noqa: E402
from measure_linear_passes import time_graph  # noqa: E402  (CUDA-graph replay timing: the median)

SHAPES = [
    # (label, hidden, expert intermediate, local experts): published MoE expert shapes
    ("qwen3-30b-a3b ep8", 2048, 768, 16),  # Qwen3 tech report arXiv:2505.09388 Table 2 + config.json
    # Qwen3-235B-A22B config.json: hidden 4096, moe_intermediate 1536, 128 experts
    ("qwen3-235b-a22b ep8", 4096, 1536, 16),
    ("deepseek-v3 ep32", 7168, 2048, 8),  # DeepSeek-V3 arXiv:2412.19437 Sec. 4.2: 256 experts of width 2048
    # gpt-oss-120b config.json (openai/gpt-oss-120b): hidden 2880, intermediate 2880, 128 experts
    ("gpt-oss-120b ep8", 2880, 2880, 16),
    ("mixtral-8x7b ep8", 4096, 14336, 1),  # Mixtral arXiv:2401.04088 Table 1
]
TOKENS_PER_EXPERT = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
MAX_OPERAND_BYTES = 4 * 2**30


def expert_linears(h: int, f: int) -> tuple[tuple[str, int, int], tuple[str, int, int]]:
    """``(name, k_in, n_out)`` of a SwiGLU expert's two linears: fc1 (gate and up, h -> 2f) and fc2
    (f -> h)."""
    return ("fc1", h, 2 * f), ("fc2", f, h)


def per_expert(t, counts: list[int]) -> list:
    """Each expert's rows of ``t`` (experts' tokens contiguous, ``counts`` of them in order)."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [t[a : a + c] for a, c in zip(starts, counts, strict=True)]


def token_counts(n: int, experts: int, distribution: str) -> list[int]:
    """Tokens of each expert: ``n`` each (``even``), or ``n (0.5 + i / (E - 1))`` rounded, the last
    taking the remainder so the total stays ``E n`` (``linear``)."""
    if distribution == "even" or experts == 1:
        return [n] * experts
    counts = [round(n * (0.5 + i / (experts - 1))) for i in range(experts - 1)]
    return counts + [n * experts - sum(counts)]


def time_shape(torch, h: int, f: int, counts: list[int], calls: int, reps: int) -> dict:
    """Seconds per call of the six grouped GEMMs (fc1 and fc2 in three passes) and the dense
    comparison for one expert shape and one token distribution."""
    dev, dt = "cuda", torch.bfloat16
    E, M = len(counts), sum(counts)
    offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    out = {}
    for name, k_in, n_out in expert_linears(h, f):
        w = torch.randn(E, n_out, k_in, device=dev, dtype=dt) / k_in**0.5  # [E, out, in]
        x = torch.randn(M, k_in, device=dev, dtype=dt)
        dy = torch.randn(M, n_out, device=dev, dtype=dt)
        passes = {
            "": lambda x=x, w=w: torch._grouped_mm(x, w.transpose(1, 2), offs=offs),
            "_dgrad": lambda dy=dy, w=w: torch._grouped_mm(dy, w, offs=offs),
            "_wgrad": lambda dy=dy, x=x: torch._grouped_mm(dy.t(), x, offs=offs),
        }
        for suffix, fn in passes.items():
            out[f"{name}{suffix}_s"] = time_graph(fn, torch, 2, reps, calls)
        if name == "fc1":
            out["dense_same_flop_s"] = time_graph(lambda x=x, w=w: x @ w[0].t(), torch, 2, reps, calls)
        del w, x, dy
    return out


def fan_out(torch, streams: list, fns: list) -> None:
    """Call ``fns`` round-robin on ``streams``, forked from and joined to the current stream (so a
    CUDA graph captures the concurrency): Transformer Engine's ``multi_stream_cublas_gemm``."""
    cur = torch.cuda.current_stream()
    for st in streams:
        st.wait_stream(cur)
    for i, fn in enumerate(fns):
        with torch.cuda.stream(streams[i % len(streams)]):
            fn()
    for st in streams:
        cur.wait_stream(st)


def time_streams(torch, h: int, f: int, counts: list[int], streams: list, calls: int, reps: int) -> dict:
    """Seconds per call of the six GEMM passes run as one GEMM per expert, expert i on stream
    ``i % len(streams)`` (forked from and joined to the current stream, so a CUDA graph captures
    the concurrency)."""
    dev, dt = "cuda", torch.bfloat16
    out = {}
    for name, k_in, n_out in expert_linears(h, f):
        w = torch.randn(len(counts), n_out, k_in, device=dev, dtype=dt) / k_in**0.5
        x = torch.randn(sum(counts), k_in, device=dev, dtype=dt)
        dy = torch.randn(sum(counts), n_out, device=dev, dtype=dt)
        xs, dys = per_expert(x, counts), per_expert(dy, counts)
        passes = {
            "": [lambda xi=xi, wi=wi: xi @ wi.t() for xi, wi in zip(xs, w, strict=True)],
            "_dgrad": [lambda di=di, wi=wi: di @ wi for di, wi in zip(dys, w, strict=True)],
            "_wgrad": [lambda di=di, xi=xi: di.t() @ xi for di, xi in zip(dys, xs, strict=True)],
        }
        for suffix, fns in passes.items():
            out[f"streams_{name}{suffix}_s"] = time_graph(
                lambda fns=fns: fan_out(torch, streams, fns), torch, 2, reps, calls
            )
        del w, x, dy, xs, dys
    return out


def time_wgrad_accumulate(
    torch, h: int, f: int, counts: list[int], streams: list, calls: int, reps: int
) -> dict:
    """Seconds per call of the per-expert weight gradients over ``streams`` accumulating into FP32
    (``main_grad += dY.t() @ X`` in one cuBLAS call per expert)."""
    dev, dt = "cuda", torch.bfloat16
    out = {}
    for name, k_in, n_out in expert_linears(h, f):
        x = torch.randn(sum(counts), k_in, device=dev, dtype=dt)
        dy = torch.randn(sum(counts), n_out, device=dev, dtype=dt)
        grads = torch.zeros(len(counts), n_out, k_in, device=dev, dtype=torch.float32)
        fns = [
            lambda g=g, d=d, xi=xi: torch.addmm(g, d.t(), xi, out_dtype=torch.float32)
            for g, d, xi in zip(grads, per_expert(dy, counts), per_expert(x, counts), strict=True)
        ]
        out[f"streams_{name}_wgrad_fp32acc_s"] = time_graph(
            lambda fns=fns: fan_out(torch, streams, fns), torch, 2, reps, calls
        )
        del x, dy, grads, fns
    return out


def time_streams_fp8(torch, h: int, f: int, counts: list[int], streams: list, calls: int, reps: int) -> dict:
    """Seconds per call of the six passes as per-expert FP8 GEMMs over ``streams`` (TN layout: every
    pass is ``a @ b.t()`` with ``a`` [m, k] and ``b`` [n, k] row-major FP8)."""
    dev, f8 = "cuda", torch.float8_e4m3fn
    one = torch.ones((), device=dev, dtype=torch.float32)

    def fp8(rows: int, cols: int):
        return torch.randn(rows, cols, device=dev, dtype=torch.bfloat16).to(f8)

    def gemm(a, b, fast):
        return lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=fast)

    out = {}
    for name, k_in, n_out in expert_linears(h, f):
        shapes = {  # (m, n, k) of each expert's GEMM, forward's fast accumulator
            "": ([(c, n_out, k_in) for c in counts], True),
            "_dgrad": ([(c, k_in, n_out) for c in counts], False),
            "_wgrad": ([(n_out, k_in, c) for c in counts], False),
        }
        for suffix, (dims, fast) in shapes.items():
            fns = [gemm(fp8(m, k), fp8(n, k), fast) for m, n, k in dims]
            out[f"streams_fp8_{name}{suffix}_s"] = time_graph(
                lambda fns=fns: fan_out(torch, streams, fns), torch, 2, reps, calls
            )
            del fns
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write JSON here (default: stdout)")
    ap.add_argument("--calls", type=int, default=10, help="calls captured in each CUDA graph")
    ap.add_argument("--reps", type=int, default=10, help="timed graph replays (the median is kept)")
    ap.add_argument("--quick", action="store_true", help="two token counts per shape (a smoke run)")
    ap.add_argument(
        "--streams", type=int, default=4, help="CUDA streams of the per-expert path (0: do not time it)"
    )
    ap.add_argument("--fp8", action="store_true", help="also time the per-expert path in FP8 (>= 256 tokens)")
    ap.add_argument(
        "--accumulate",
        action="store_true",
        help="also time per-expert weight gradients accumulating into FP32",
    )
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_grouped_gemm: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("measure_grouped_gemm: no CUDA device present; nothing measured")
        return 0
    if not hasattr(torch, "_grouped_mm"):
        print(f"measure_grouped_gemm: torch {torch.__version__} has no _grouped_mm; nothing measured")
        return 0
    rows = []
    tokens = TOKENS_PER_EXPERT[::5] if args.quick else TOKENS_PER_EXPERT
    streams = [torch.cuda.Stream() for _ in range(args.streams)]
    for label, h, f, E in SHAPES:
        for n in tokens:
            if E * n * max(h, 2 * f) * 2 > MAX_OPERAND_BYTES:
                continue
            for distribution in ("even", "linear") if E > 1 else ("even",):
                counts = token_counts(n, E, distribution)
                times = time_shape(torch, h, f, counts, args.calls, args.reps)
                if streams and distribution == "even":
                    times |= time_streams(torch, h, f, counts, streams, args.calls, args.reps)
                    if args.accumulate:
                        try:
                            times |= time_wgrad_accumulate(
                                torch, h, f, counts, streams, args.calls, args.reps
                            )
                        except Exception as exc:  # no addmm out_dtype in this torch: recorded, not fatal
                            times["accumulate_error"] = str(exc)[:200]
                    if args.fp8 and n >= 256:
                        try:
                            times |= time_streams_fp8(torch, h, f, counts, streams, args.calls, args.reps)
                        except Exception as exc:  # no FP8 GEMM on this GPU or build: recorded, not fatal
                            times["fp8_error"] = str(exc)[:200]
                flop1, flop2 = 2.0 * E * n * h * 2 * f, 2.0 * E * n * f * h
                rows.append(
                    {
                        "shape": label,
                        "hidden": h,
                        "expert_ffn": f,
                        "local_experts": E,
                        "tokens_per_expert": n,
                        "distribution": distribution,
                        "token_counts": counts,
                        **times,
                        "fc1_tflops": flop1 / times["fc1_s"] / 1e12,
                        "fc2_tflops": flop2 / times["fc2_s"] / 1e12,
                        "dense_tflops": flop1 / times["dense_same_flop_s"] / 1e12,
                    }
                )
                r = rows[-1]
                print(
                    f"{label:22s} n {n:5d} {distribution:6s}: fc1 {r['fc1_s'] * 1e6:8.1f} "
                    f"{r['fc1_dgrad_s'] * 1e6:8.1f} {r['fc1_wgrad_s'] * 1e6:8.1f} us, fc2 {r['fc2_s'] * 1e6:8.1f} "
                    f"{r['fc2_dgrad_s'] * 1e6:8.1f} {r['fc2_wgrad_s'] * 1e6:8.1f} us, dense {r['dense_same_flop_s'] * 1e6:8.1f}",
                    flush=True,
                )
        torch.cuda.empty_cache()
    doc = device_header(torch) | {
        "method": (
            f"torch._grouped_mm bf16; {args.calls} calls captured in a CUDA graph, median of {args.reps} "
            "CUDA-event-timed replays after 2 warm-ups; random inputs; weights stored [E, out, in]"
            + (f"; per-expert torch.matmul over {args.streams} streams (streams_*)" if streams else "")
            + ("; the same in FP8 via torch._scaled_mm (streams_fp8_*)" if streams and args.fp8 else "")
            + (
                "; weight gradients accumulated into FP32 (*_fp32acc_*)"
                if streams and args.accumulate
                else ""
            )
        ),
        "streams": args.streams,
        "timed": "cuda_graph",
        "rows": rows,
    }
    text = json.dumps(doc, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
