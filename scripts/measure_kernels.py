#!/usr/bin/env python3
"""Measure the kernel throughputs planner's cost model is built on, on the GPU this runs on.

Needs PyTorch with CUDA (not a planner dependency; run it on a GPU machine, never in CI). Writes
one JSON file with the device, the library versions and, per kernel, the shape, the FLOPs or bytes
and the median time of one call over timed repetitions of back-to-back calls (CUDA events, after
warm-up):

* ``gemm``: bf16 matrix products of the shapes a transformer layer runs (QKV, attention output,
  MLP up and down projections) for several widths, token counts and tensor-parallel slices;
* ``attention``: causal and bidirectional fused attention (``scaled_dot_product_attention`` with
  the flash backend), forward and forward+backward, FLOPs counted as executed (causal = half);
* ``memory``: bandwidth-bound element-wise kernels (add, RMSNorm-like) on large tensors;
* ``launch``: the time per call of a tiny kernel called back to back: the host's dispatch time per
  launch (the GPU runs it in a few microseconds); in files written before 2026-11-25 (one call
  between two events), the dispatch latency of one call.

``python scripts/compare_kernels.py FILE`` compares a measurement file with the cost model.

Usage (GPU machine): python scripts/measure_kernels.py --out h100.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics


def time_calls(fn, torch, warmup: int = 3, reps: int = 15, calls: int = 10) -> float:
    """Median over ``reps`` of the GPU time of one call, each repetition timing ``calls``
    back-to-back calls between two CUDA events. Back to back, the host queues the next call while
    the GPU runs the previous one, as in training; one call between two events would also time the
    host's dispatch of the call (about 20 us through PyTorch, the ``launch`` entry), which files
    written before 2026-11-25 include (planner.calibration.kernel_curves.gemm_gpu_times removes it from those)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def gemms(torch) -> list[dict]:
    out = []
    dev, dt = "cuda", torch.bfloat16
    for h in (2048, 4096, 8192):
        for t in (1, 2, 4, 8):
            for tokens in (2048, 8192):
                shapes = {
                    "qkv": (tokens, 3 * h // t, h),
                    "attn_out": (tokens, h, h // t),
                    "fc1": (tokens, 4 * h // t, h),
                    "fc2": (tokens, h, 4 * h // t),
                }
                for name, (m, n, k) in shapes.items():
                    a = torch.randn(m, k, device=dev, dtype=dt)
                    b = torch.randn(k, n, device=dev, dtype=dt)
                    s = time_calls(lambda a=a, b=b: a @ b, torch)
                    out.append(
                        {
                            "name": name,
                            "hidden": h,
                            "tp": t,
                            "m": m,
                            "n": n,
                            "k": k,
                            "flop": 2.0 * m * n * k,
                            "time_s": s,
                        }
                    )
                    del a, b
    return out


def attention(torch) -> list[dict]:
    import torch.nn.functional as fn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = []
    dev, dt, d = "cuda", torch.bfloat16, 128
    for seq in (1024, 2048, 4096, 8192):
        for heads in (8, 32):
            batch = max(1, 16384 // seq)
            for causal in (True, False):
                q, k, v = (
                    torch.randn(batch, heads, seq, d, device=dev, dtype=dt, requires_grad=True)
                    for _ in range(3)
                )
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    fwd = time_calls(
                        lambda q=q, k=k, v=v, c=causal: fn.scaled_dot_product_attention(q, k, v, is_causal=c),
                        torch,
                    )

                    def both(q=q, k=k, v=v, c=causal):
                        o = fn.scaled_dot_product_attention(q, k, v, is_causal=c)
                        o.sum().backward()

                    fb = time_calls(both, torch)
                full = 4.0 * batch * heads * seq * seq * d  # QK^T and PV, 2 FLOPs per multiply-add
                out.append(
                    {
                        "batch": batch,
                        "heads": heads,
                        "seq": seq,
                        "head_dim": d,
                        "causal": causal,
                        "forward_flop_executed": full / 2 if causal else full,
                        "forward_s": fwd,
                        "forward_backward_s": fb,
                    }
                )
                del q, k, v
    return out


def memory(torch) -> list[dict]:
    out = []
    dev, dt = "cuda", torch.bfloat16
    for n in (2**24, 2**26, 2**28):
        x, y = torch.randn(n, device=dev, dtype=dt), torch.randn(n, device=dev, dtype=dt)
        out.append(
            {
                "kernel": "add",
                "elements": n,
                "bytes": 3 * 2 * n,
                "time_s": time_calls(lambda x=x, y=y: x + y, torch),
            }
        )
        rows = n // 8192
        z = x.view(rows, 8192)
        w = torch.ones(8192, device=dev, dtype=dt)

        def rms(z=z, w=w):
            return z * torch.rsqrt(z.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(z.dtype) * w

        out.append(
            {"kernel": "rmsnorm_eager", "elements": n, "bytes": 2 * 2 * n, "time_s": time_calls(rms, torch)}
        )
        del x, y, z
    return out


def launch(torch) -> dict:
    x = torch.ones(1, device="cuda")
    return {"kernel": "tiny add", "time_s": time_calls(lambda: x.add_(1.0), torch, warmup=50, reps=200)}


def device_header(torch) -> dict:
    """The device and library versions a measurement file starts with."""
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0),
        "memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    result = device_header(torch) | {
        "method": (
            "median of 15 CUDA-event-timed repetitions of 10 back-to-back calls after 3 warm-ups; "
            "random bf16 inputs"
        ),
        "back_to_back": True,
        "gemm": gemms(torch),
        "attention": attention(torch),
        "memory": memory(torch),
        "launch": launch(torch),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(f"wrote {args.out}: {len(result['gemm'])} GEMMs, {len(result['attention'])} attention cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
