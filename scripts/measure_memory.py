#!/usr/bin/env python3
"""Measure peak allocated memory of small real training steps on a CUDA GPU (issue 12, item 5).

For each configuration (a stack of pre-LayerNorm GPT blocks: hidden h, heads a, layers L,
sequence s, micro-batch b, bf16 weights, gradients and AdamW states (torch keeps Adam states in the
parameter dtype), optional full recompute via
``torch.utils.checkpoint``) it runs warm-up and measured optimizer steps on one GPU
(tp = pp = dp = cp = 1) and records ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved`` as YAML rows in the ``measured_memory`` format of
tests/data/published_memory.yaml (``memory_metric: torch.cuda.max_memory_allocated``).
torch is optional: imported inside main; with no CUDA device the script prints why and exits 0
without writing anything.

Usage: python scripts/measure_memory.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CONFIGS = [
    # (hidden, heads, layers, seq, micro_batch, recompute)
    (1024, 16, 8, 2048, 4, "none"),
    (1024, 16, 8, 2048, 4, "full"),
    (2048, 16, 8, 2048, 2, "none"),
    (2048, 16, 8, 4096, 1, "full"),
]
"""Small single-GPU configurations (fit in 16 GiB), chosen to separate the activation and static terms."""


def _measure(
    torch, hidden: int, heads: int, layers: int, seq: int, mb: int, recompute: str
) -> tuple[float, float]:
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
            self.ln2 = nn.LayerNorm(hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

        def forward(self, x):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    blocks = nn.ModuleList([Block() for _ in range(layers)]).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
    x = torch.randn(mb, seq, hidden, device="cuda", dtype=torch.bfloat16)
    for step in range(3):
        if step == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        h = x
        for blk in blocks:
            if recompute == "full":
                h = torch.utils.checkpoint.checkpoint(blk, h, use_reentrant=False)
            else:
                h = blk(h)
        h.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    alloc, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    del blocks, opt, x
    torch.cuda.empty_cache()
    return alloc, reserved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the YAML rows here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_memory: torch is not installed; nothing measured (pip install torch on a GPU machine)")
        return 0
    if not torch.cuda.is_available():
        print("measure_memory: no CUDA device present; nothing measured")
        return 0
    import yaml

    name = torch.cuda.get_device_name(0)
    rows = []
    for hidden, heads, layers, seq, mb, recompute in CONFIGS:
        alloc, reserved = _measure(torch, hidden, heads, layers, seq, mb, recompute)
        rows.append(
            {
                "run_id": f"measured_{name.replace(' ', '_').lower()}_h{hidden}_l{layers}_s{seq}_b{mb}_{recompute}",
                "source": f"scripts/measure_memory.py, torch {torch.__version__}",
                "model": f"GPT blocks h={hidden} a={heads} L={layers} (no embedding)",
                "hidden": hidden,
                "heads": heads,
                "layers": layers,
                "seq_length": seq,
                "gpu": name,
                "total_gpus": 1,
                "tp": 1,
                "pp": 1,
                "dp": 1,
                "cp": 1,
                "micro_batch_size": mb,
                "recompute": recompute,
                "sharding": "none",
                "precision": "bf16 weights, grads and AdamW states (torch keeps states in the param dtype)",
                "peak_memory_gib": round(alloc / 2**30, 3),
                "peak_reserved_gib": round(reserved / 2**30, 3),
                "memory_metric": "torch.cuda.max_memory_allocated",
            }
        )
    text = yaml.safe_dump({"measured_memory": rows}, sort_keys=False)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
