#!/usr/bin/env python3
"""Time MoE grouped GEMMs on one CUDA GPU (issue 12, item 2: grouped-GEMM efficiency as a function
of tokens per expert and expert size).

For each expert shape (hidden h, expert intermediate f, local experts E) and tokens per expert n it
times, in bf16, the two grouped GEMMs of a SwiGLU expert MLP forward as Megatron-Core runs them with
``--moe-grouped-gemm`` (fc1: [n, h] x [h, 2f] per expert; fc2: [n, f] x [f, h] per expert) through
``torch._grouped_mm`` (one kernel over all local experts, rows given by cumulative offsets), and,
for comparison, the same FLOPs as one dense GEMM ([E n, h] x [h, 2f]). Median of CUDA-event-timed
repetitions after warm-up, random inputs. Output: JSON rows (shape, n, measured seconds, TFLOP/s)
for ``scripts/compare_grouped_gemm.py``, which compares them with planner's grouped-GEMM pricing
without a GPU. torch is optional: without it or without CUDA the script says so and exits 0.

Usage: python scripts/measure_grouped_gemm.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure_kernels import _time  # noqa: E402  (CUDA-event timing of back-to-back calls: the median)

SHAPES = [
    # (label, hidden, expert intermediate, local experts): published MoE expert shapes
    ("qwen3-30b-a3b ep8", 2048, 768, 16),  # Qwen3 tech report arXiv:2505.09388 Table 2 + config.json
    (
        "qwen3-235b-a22b ep8",
        4096,
        1536,
        16,
    ),  # Qwen3-235B-A22B config.json: hidden 4096, moe_intermediate 1536
    ("deepseek-v3 ep32", 7168, 2048, 8),  # DeepSeek-V3 arXiv:2412.19437 Sec. 4.2: 256 experts of width 2048
    ("mixtral-8x7b ep8", 4096, 14336, 1),  # Mixtral arXiv:2401.04088 Table 1
]
TOKENS_PER_EXPERT = [16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write JSON here (default: stdout)")
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
    dev = "cuda"
    rows = []
    for label, h, f, E in SHAPES:
        w1 = torch.randn(E, h, 2 * f, device=dev, dtype=torch.bfloat16) / h**0.5
        w2 = torch.randn(E, f, h, device=dev, dtype=torch.bfloat16) / f**0.5
        for n in TOKENS_PER_EXPERT:
            if E * n * max(h, 2 * f) * 2 > 8 * 2**30:
                continue
            x = torch.randn(E * n, h, device=dev, dtype=torch.bfloat16)
            y = torch.randn(E * n, f, device=dev, dtype=torch.bfloat16)
            offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * n
            # the tensors bound as defaults: each lambda times this iteration's inputs
            fc1 = _time(lambda x=x, w1=w1, offs=offs: torch._grouped_mm(x, w1, offs=offs), torch, reps=20)
            fc2 = _time(lambda y=y, w2=w2, offs=offs: torch._grouped_mm(y, w2, offs=offs), torch, reps=20)
            dense = _time(lambda x=x, w1=w1: x @ w1[0], torch, reps=20)
            flop1, flop2 = 2.0 * E * n * h * 2 * f, 2.0 * E * n * f * h
            rows.append(
                {
                    "shape": label,
                    "hidden": h,
                    "expert_ffn": f,
                    "local_experts": E,
                    "tokens_per_expert": n,
                    "fc1_s": fc1,
                    "fc2_s": fc2,
                    "dense_same_flop_s": dense,
                    "fc1_tflops": flop1 / fc1 / 1e12,
                    "fc2_tflops": flop2 / fc2 / 1e12,
                    "dense_tflops": flop1 / dense / 1e12,
                }
            )
            print(
                f"{label:22s} n {n:5d}: fc1 {rows[-1]['fc1_tflops']:6.1f} fc2 {rows[-1]['fc2_tflops']:6.1f} "
                f"dense {rows[-1]['dense_tflops']:6.1f} TFLOP/s",
                flush=True,
            )
            del x, y
        del w1, w2
        torch.cuda.empty_cache()
    doc = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "method": (
            "torch._grouped_mm bf16, median of 20 CUDA-event-timed repetitions of 10 back-to-back calls "
            "after 3 warm-ups, random inputs"
        ),
        "back_to_back": True,
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
