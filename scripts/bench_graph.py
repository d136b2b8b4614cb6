#!/usr/bin/env python3
"""Graph-pipeline benchmark: search wall time, and the best graph plan beside the best sequential
plan, for every graph preset on 64 H100 GPUs (8 DGX H100 nodes).

Each case runs in a fresh Python process (its own caches and peak memory). Two searches per preset:
the free search (every tp, stage count and micro-batch), and one restricted to pipelines (``--pp``)
as when the model must be pipelined. Target (issue: GraphPipe): the largest preset
(vlm-two-tower-13b, 14.0B parameters, 98 partitionable units) within 5 s on 64 GPUs.

Usage: python scripts/bench_graph.py [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("vlm-two-tower-13b", 256, 2048, None),
    ("vlm-two-tower-13b", 256, 2048, (4, 8, 16)),
    ("mmt-4tower-4b", 256, 2048, None),
    ("mmt-4tower-4b", 256, 2048, (8, 16)),
    ("t5-11b", 256, 512, None),
    ("t5-11b", 256, 512, (4, 8)),
]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from planner.inputs.graph_model import load_graph_model
from planner.search.graph import search_graph
from planner.profiles.hardware import load_cluster
from planner.inputs.jobs import make_job
from planner.search.space import Restrictions
g = load_graph_model({model!r}); cluster = load_cluster("dgx-h100", 8)
job = make_job(global_batch_size={gbs}, seq_length={seq})
r = Restrictions(pp={pp!r}, memory_headroom_bytes=2 * 2**30)
t0 = time.perf_counter(); res = search_graph(g, cluster, job, r, top_k=5); wall = time.perf_counter() - t0
def view(p):
    c = p.config
    return dict(tp=c.tp, dp=c.dp, stages=c.pp, mbs=c.micro_batch_size, recompute=c.recompute,
                branched=list(p.modes), step_time_s=p.estimate.step_time_s, mfu=p.estimate.mfu,
                bubble=p.estimate.bubble_fraction, peak_memory_gib=p.estimate.peak_memory_bytes / 2**30,
                max_depth=max(p.stage_graph.depths))
print(json.dumps(dict(wall_s=wall, candidates=res.candidates, partitioned=res.evaluated,
                      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      params_b=g.params_total / 1e9, units=g.num_units,
                      best=view(res.plans[0]), sequential=view(res.sequential),
                      speedup=res.speedup_vs_sequential)))
"""


def run(case) -> dict:
    model, gbs, seq, pp = case
    code = CHILD.format(root=str(ROOT), model=model, gbs=gbs, seq=seq, pp=pp)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    label = f"{model} on 64 dgx-h100, gbs {gbs}, seq {seq}" + (
        f", pp in {list(pp)}" if pp else ", free search"
    )
    return {"case": label, **json.loads(proc.stdout)}


def _plan(p: dict) -> str:
    kind = "graph (branched)" if any(p["branched"]) else "sequential"
    return (
        f"{kind}: tp {p['tp']} pipelines {p['dp']} stages {p['stages']} (max depth {p['max_depth']}) mbs {p['mbs']} "
        f"recompute {p['recompute']}: {p['step_time_s']:.3f} s/step, MFU {100 * p['mfu']:.1f}%, "
        f"bubble {100 * p['bubble']:.1f}%, {p['peak_memory_gib']:.1f} GiB"
    )


def main() -> int:
    results = [run(c) for c in CASES]
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(r["case"])
        print(
            f"  wall {r['wall_s']:.2f} s   {r['candidates']} candidates, {r['partitioned']} partitioned"
            f"   peak memory {r['peak_rss_mib']:.0f} MiB   ({r['params_b']:.1f}B parameters, {r['units']} units)"
        )
        print(f"  best      {_plan(r['best'])}")
        print(f"  best seq  {_plan(r['sequential'])}")
        print(f"  speedup_vs_sequential {r['speedup']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
