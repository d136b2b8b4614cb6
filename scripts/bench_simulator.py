#!/usr/bin/env python3
"""Simulator benchmark: time to simulate 64 stages x 512 micro-batches for each schedule.

Target (issue: schedule simulator): under 1 second on a 2-core machine.
Usage: python scripts/bench_simulator.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.schedules import generate, simulate, uniform_durations  # noqa: E402


def main() -> int:
    p, m = 64, 512
    for schedule, v, w in (("1f1b", 1, 0.0), ("gpipe", 1, 0.0), ("zb-h1", 1, 1.0), ("interleaved", 2, 0.0)):
        durations = uniform_durations(p, v, 1.0 / v, 2.0 / v, w)
        t0 = time.perf_counter()
        tl = simulate(generate(schedule, p, m, v), durations, 0.01, m)
        wall = time.perf_counter() - t0
        ops = sum(len(k) for k in tl.kind)
        print(
            f"{schedule:12s} p={p} m={m} v={v}: {ops:7d} operations in {wall:.3f} s "
            f"(bubble {100 * tl.bubble_fraction():.1f}%)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
