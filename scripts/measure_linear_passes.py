#!/usr/bin/env python3
"""Time the three GEMMs of transformer linear layers, and unfused attention's batched GEMMs, on
the GPU this runs on.

Needs PyTorch with CUDA (not a planner dependency; run it on a GPU machine, never in CI). Writes
one JSON file; ``python scripts/compare_linear_passes.py FILE`` compares it with planner's GEMM
model (:func:`cost_models.compute.linear_s`, :func:`cost_models.compute.batched_gemm_s`).

* ``linear``: for hidden sizes of the calibration set's models (GPT 3.6B / 18.4B / 39.1B / 175B
  widths, Llama-style SwiGLU widths), tensor-parallel slices 1-16 and 2,048-32,768 tokens, each of
  a layer's four linears (QKV, attention output, MLP up, MLP down) in its three passes, with the
  operand layouts Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication`` uses:
  forward ``X @ W.t()`` (W stored n_out x k_in), input gradient ``dY @ W``, weight gradient
  ``dY.t() @ X`` (output n_out x k_in, reducing over tokens). The weight gradient is the GEMM
  whose output can be far smaller than one wave of tiles while its reduction is long: what the
  measurement is for (does the library split the reduction, or pay the partial wave?).
* ``bmm``: unfused attention's four batched GEMMs (scores ``Q K^T``, context ``P V`` and their
  gradients' shapes) for head dimensions 64-192, including the misaligned 150 of BigScience's
  NHIDDEN=14400 / 96-head model.
* ``fp8`` (``--only fp8``): FP8 GEMMs (``torch._scaled_mm``) beside BF16 ones of the same
  shapes, the measured FP8 speed-up by size.
* ``kernels``: for a few shapes, the CUDA kernel names the library launched (PyTorch profiler),
  which say whether a split-K or stream-K kernel ran.

Inputs are views of one pool of random values (normal, std 1), never zeros. Each time is the
median over ``--reps`` repetitions of ``--calls`` back-to-back calls between two CUDA events,
after warm-up (as ``scripts/measure_kernels.py``).

Usage (GPU machine): python scripts/measure_linear_passes.py --out h200-linear-passes.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_kernels import device_header, time_calls  # noqa: E402  (the same timing and header)

WIDTHS = (
    # (label, hidden, ffn, gated): GPT widths of vTrain's validation models (ffn 4h) and two
    # Llama-style SwiGLU widths (ffn as Llama 3 8B / 70B).
    ("gpt-h3072", 3072, 12288, False),
    ("gpt-h6144", 6144, 24576, False),
    ("gpt-h8192", 8192, 32768, False),
    ("gpt-h12288", 12288, 49152, False),
    ("llama-h4096", 4096, 14336, True),
    ("llama-h8192", 8192, 28672, True),
)
TPS = (1, 2, 4, 8, 16)
TOKENS = (2048, 4096, 8192, 16384, 32768)
HEAD_DIMS = (64, 96, 128, 144, 150, 152, 160, 192)


def time_graph(fn, torch, warmup: int, reps: int, calls: int) -> float:
    """As :func:`time_calls`, but the ``calls`` calls are captured once in a CUDA graph and each
    repetition replays it: kernels of a few microseconds would otherwise time the host's dispatch
    of each call rather than the GPU (the graph replays them without the host)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return time_calls(graph.replay, torch, warmup, reps, 1) / calls


class Pool:
    """Views of one buffer of random values: a fresh ``randn`` per shape would cost more than the
    timing. Each request starts at a different offset, so operands do not alias."""

    def __init__(self, torch, elements: int, dtype, device: str):
        self.buf = torch.randn(elements, device=device, dtype=dtype)
        self.offset = 0

    def take(self, *shape: int):
        n = 1
        for s in shape:
            n *= s
        if n > self.buf.numel():
            raise ValueError(f"pool too small for {shape}")
        if self.offset + n > self.buf.numel():
            self.offset = 0
        view = self.buf[self.offset : self.offset + n].view(*shape)
        self.offset = (self.offset + n + 4096) % self.buf.numel()
        return view


def linears(hidden: int, ffn: int, gated: bool, tp: int) -> dict[str, tuple[int, int]]:
    """(n_out, k_in) per rank of a layer's four linears at tensor-parallel degree ``tp``
    (Megatron: QKV and MLP up column-parallel, attention output and MLP down row-parallel)."""
    return {
        "qkv": (3 * hidden // tp, hidden),
        "attn_out": (hidden, hidden // tp),
        "fc1": ((2 if gated else 1) * ffn // tp, hidden),
        "fc2": (hidden, ffn // tp),
    }


def _linear_row(label: str, tp: int, tokens: int, name: str, pass_name: str, n: int, k: int) -> dict:
    """The fields that name one pass of one linear (``n`` out, ``k`` in, over ``tokens`` rows)."""
    return {
        "width": label,
        "tp": tp,
        "tokens": tokens,
        "linear": name,
        "pass": pass_name,
        "n_out": n,
        "k_in": k,
    }


def linear_cases(torch, pool, timing, quick: bool, widths=WIDTHS) -> list[dict]:
    out = []
    for label, hidden, ffn, gated in (("quick-h512", 512, 2048, False),) if quick else widths:
        for tp in TPS[:2] if quick else TPS:
            for tokens in (256,) if quick else TOKENS:
                for name, (n, k) in linears(hidden, ffn, gated, tp).items():
                    x = pool.take(tokens, k)
                    w = pool.take(n, k)
                    dy = pool.take(tokens, n)
                    passes = {
                        "forward": lambda x=x, w=w: torch.matmul(x, w.t()),
                        "input_grad": lambda dy=dy, w=w: torch.matmul(dy, w),
                        "weight_grad": lambda dy=dy, x=x: torch.matmul(dy.t(), x),
                    }
                    for pass_name, fn in passes.items():
                        out.append(
                            _linear_row(label, tp, tokens, name, pass_name, n, k)
                            | {
                                "hidden": hidden,
                                "flop": 2.0 * tokens * n * k,
                                "time_s": time_calls(fn, torch, *timing),
                            }
                        )
    return out


def bmm_cases(torch, pool, timing, quick: bool) -> list[dict]:
    """Unfused attention's batched GEMMs at sequence 2,048 for ``batch_heads`` = micro-batch x
    heads per rank; scores reduce over the head dimension d, context over the keys."""
    out = []
    seq = 256 if quick else 2048
    for d in HEAD_DIMS[:2] if quick else HEAD_DIMS:
        for bh in (12, 48):
            q = pool.take(bh, seq, d)
            k = pool.take(bh, seq, d)
            p = pool.take(bh, seq, seq)
            ops = {
                # scores S = Q K^T (forward) and dP = dO V^T (backward): reduce over d
                "scores": lambda q=q, k=k: torch.bmm(q, k.transpose(1, 2)),
                # context O = P V (forward) and dQ = dS K (backward): reduce over keys, output s x d
                "context": lambda p=p, k=k: torch.bmm(p, k),
                # dV = P^T dO and dK = dS^T Q: transposed probabilities, output s x d
                "context_t": lambda p=p, k=k: torch.bmm(p.transpose(1, 2), k),
            }
            for name, fn in ops.items():
                out.append(
                    {
                        "op": name,
                        "head_dim": d,
                        "batch_heads": bh,
                        "seq": seq,
                        "flop": 2.0 * bh * seq * seq * d,
                        "time_s": time_calls(fn, torch, *timing),
                    }
                )
    return out


FP8_WIDTHS = ("gpt-h6144", "gpt-h12288", "llama-h8192")
FP8_TPS = (1, 2, 4, 8)
FP8_TOKENS = (4096, 16384)
FP8_SMALL = tuple(
    (rows, n, k)
    for rows in (256, 512, 1024, 2048, 4096)
    for n, k in ((768, 2048), (2048, 768), (1536, 2048), (1408, 2048), (2048, 4096), (2880, 2880))
)
"""Small FP8 GEMMs (0.2-70 GFLOP): rows x (n, k) of fine-grained MoE experts (Qwen3-30B-A3B's
768-wide experts over hidden 2,048 and their fused gate/up 1,536; DeepSeek-V2-Lite-like 1,408;
gpt-oss's 2,880) at 256-4,096 tokens per expert."""


def fp8_cases(torch, pool, timing, quick: bool) -> list[dict]:
    """FP8 (E4M3, per-tensor scales) GEMMs through ``torch._scaled_mm`` beside the BF16 GEMM of the
    same shape, for the forward and weight-gradient shapes of a few widths: Hopper's FP8 tensor
    cores take only the TN layout, so Transformer Engine transposes the operands (the casts are
    priced apart, cost_models.compute.fp8_cast_bytes) and every pass is an (m x k) @ (k x n) with
    both operands K-major. ``fast_accum`` as TE's forward (``use_split_accumulator`` off); the
    split-accumulator form as its gradients."""
    out = []
    f8 = torch.float8_e4m3fn
    one = torch.ones((), device=pool.buf.device, dtype=torch.float32)
    chosen = [("quick-h512", 512, 2048, False)] if quick else [w for w in WIDTHS if w[0] in FP8_WIDTHS]
    cases = [
        (label, tp, tokens, name, pass_name, shape)
        for label, hidden, ffn, gated in chosen
        for tp in ((2,) if quick else FP8_TPS)
        for tokens in ((256,) if quick else FP8_TOKENS)
        for name, (n, k) in linears(hidden, ffn, gated, tp).items()
        for pass_name, shape in (("forward", (tokens, n, k)), ("weight_grad", (k, n, tokens)))
    ]
    cases += [
        ("expert", 1, m, "expert", "forward", (m, n, k)) for m, n, k in FP8_SMALL[: 2 if quick else None]
    ]
    for label, tp, tokens, name, pass_name, (m, nn, kk) in cases:
        # the experts' small GEMMs replay from a CUDA graph of 20 calls (:func:`time_graph`)
        timer, calls = (time_calls, timing[2]) if label != "expert" or quick else (time_graph, 20)
        warmup, reps = timing[0], timing[1]
        if timer is time_graph:
            try:
                time_graph(lambda: torch.matmul(pool.take(m, kk), pool.take(nn, kk).t()), torch, 1, 1, 2)
            except Exception:  # graphs unavailable: back-to-back calls, as the other rows
                timer, calls = time_calls, timing[2]
        a16, b16 = pool.take(m, kk), pool.take(nn, kk)
        a8, b8 = a16.to(f8), b16.to(f8)
        row = {
            "width": label,
            "tp": tp,
            "tokens": tokens,
            "linear": name,
            "pass": pass_name,
            "m": m,
            "n": nn,
            "k": kk,
            "flop": 2.0 * m * nn * kk,
            "timed": "cuda_graph" if timer is time_graph else "back_to_back",
            "bf16_s": timer(lambda a=a16, b=b16: torch.matmul(a, b.t()), torch, warmup, reps, calls),
        }
        for key, fast in (("fp8_fast_accum_s", True), ("fp8_s", False)):
            try:
                row[key] = timer(
                    lambda a=a8, b=b8, f=fast: torch._scaled_mm(
                        a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=f
                    ),
                    torch,
                    warmup,
                    reps,
                    calls,
                )
            except Exception as exc:  # no FP8 GEMM here: recorded, not fatal
                row[key] = None
                row["error"] = str(exc)[:200]
        out.append(row)
        del a8, b8
    return out


def kernel_names(torch, pool, quick: bool) -> list[dict]:
    """Kernel names of one call of a few weight-gradient and forward shapes (best effort: an empty
    list where the profiler is unavailable)."""
    from torch.profiler import ProfilerActivity, profile

    picks = [("gpt-h3072", 3072, 12288, 8, 32768), ("gpt-h6144", 6144, 24576, 8, 16384)]
    picks += [("gpt-h8192", 8192, 32768, 2, 8192), ("gpt-h12288", 12288, 49152, 8, 4096)]
    out = []
    for label, hidden, ffn, tp, tokens in [("quick-h512", 512, 2048, 2, 256)] if quick else picks:
        for name, (n, k) in linears(hidden, ffn, False, tp).items():
            x, w, dy = pool.take(tokens, k), pool.take(n, k), pool.take(tokens, n)
            for pass_name, fn in (
                ("forward", lambda x=x, w=w: torch.matmul(x, w.t())),
                ("weight_grad", lambda dy=dy, x=x: torch.matmul(dy.t(), x)),
            ):
                fn()
                torch.cuda.synchronize()
                try:
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        fn()
                        torch.cuda.synchronize()
                    names = sorted(
                        {e.name for e in prof.events() if not e.name.startswith(("aten::", "cuda"))}
                    )
                except Exception as exc:  # the profiler is optional evidence, never fatal
                    names = [f"profiler failed: {exc}"]
                out.append(_linear_row(label, tp, tokens, name, pass_name, n, k) | {"kernels": names})
    return out


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="linear,bmm,kernels", help="comma-separated sections")
    ap.add_argument("--widths", default=",".join(w[0] for w in WIDTHS), help="comma-separated")
    ap.add_argument("--quick", action="store_true", help="a few small shapes (checks the script)")
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    sections = set(args.only.split(","))
    pool = Pool(torch, (2**22 if args.quick else 2**31), dtype, "cuda")
    timing = (args.warmup, args.reps, args.calls)
    result = device_header(torch) | {
        "dtype": args.dtype,
        "method": (
            f"median of {args.reps} CUDA-event-timed repetitions of {args.calls} back-to-back calls "
            f"after {args.warmup} warm-ups; operands are views of one pool of random normal values"
        ),
    }
    started = time.time()

    def save(what: str) -> None:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        print(f"{what}: {time.time() - started:.0f} s", flush=True)

    if "linear" in sections:
        result["linear"] = []
        chosen = [w for w in WIDTHS if w[0] in args.widths.split(",")]
        for width in chosen[:1] if args.quick else chosen:
            result["linear"] += linear_cases(torch, pool, timing, args.quick, (width,))
            save(f"linear {width[0]}")
    if "fp8" in sections:
        result["fp8"] = fp8_cases(torch, pool, timing, args.quick)
        save("fp8")
    if "bmm" in sections:
        result["bmm"] = bmm_cases(torch, pool, timing, args.quick)
        save("bmm")
    if "kernels" in sections:
        result["kernels"] = kernel_names(torch, pool, args.quick)
    save(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
