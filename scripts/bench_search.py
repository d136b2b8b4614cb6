#!/usr/bin/env python3
"""Search benchmark: wall time, shapes enumerated/simulated, and peak memory per case.

Each case runs in a fresh Python process, so peak memory (ru_maxrss) and caches are its own.
Targets (issue: search): the first four cases within 2 s and 1 GiB, the two-group heterogeneous
ones within 10 s and the three-group one within 30 s, on a 2-core machine (issue 14: the
16 DGX A100 + 8 DGX H100 case took 7 min 17 s while the placement was a CBC ILP per shape). Also prints the GPT-3 175B comparison with Narayanan et al.'s expert
configuration (tp 8, pp 8, interleaved).

Usage: python scripts/bench_search.py [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("llama3-70b on 128 dgx-h100, gbs 1024, seq 8192", "llama3-70b", "dgx-h100", 128, 1024, 8192),
    ("llama3.1-405b on 2048 dgx-h100, gbs 2048, seq 8192", "llama3.1-405b", "dgx-h100", 2048, 2048, 8192),
    ("gpt3-175b on 128 dgx-a100, gbs 1536, seq 2048", "gpt3-175b", "dgx-a100", 128, 1536, 2048),
    ("mixtral-8x22b on 64 dgx-h100, gbs 1024, seq 4096", "mixtral-8x22b", "dgx-h100", 64, 1024, 4096),
    (
        "llama2-70b on 64 A100 + 64 H100, gbs 512, seq 4096",
        "llama2-70b",
        "examples/cluster-a100-h100.yaml",
        None,
        512,
        4096,
    ),
    (
        "llama3-70b on 16 DGX A100 + 8 DGX H100, gbs 512, seq 4096",
        "llama3-70b",
        "examples/cluster-16a100-8h100.yaml",
        None,
        512,
        4096,
    ),
    (
        "llama3-70b on 8 DGX A100 + 8 DGX H100 + 8 DGX H200, gbs 512, seq 4096",
        "llama3-70b",
        "examples/cluster-a100-h100-h200.yaml",
        None,
        512,
        4096,
    ),
]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster
from planner.inputs.jobs import make_job
from planner.search.chain import search
model = load_model({model!r}); cluster = load_cluster({cluster!r}, {nodes!r})
job = make_job(global_batch_size={gbs}, seq_length={seq})
t0, c0 = time.perf_counter(), time.process_time()
result = search(model, cluster, job, top_k=5)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
best = result.plans[0]
c = best.config
out = dict(wall_s=wall, cpu_s=cpu, shapes_enumerated=result.shapes_enumerated, shapes_simulated=result.shapes_evaluated,
           peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           best=dict(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, ep=c.ep, vpp=c.vpp, mbs=c.micro_batch_size,
                     recompute=c.recompute, recompute_num_layers=c.recompute_num_layers,
                     recompute_modules=list(c.recompute_modules), sharding=c.optimizer_sharding,
                     schedule=c.schedule, step_time_s=best.estimate.step_time_s, mfu=best.estimate.mfu,
                     tokens_per_s_per_gpu=best.estimate.tokens_per_s_per_gpu,
                     peak_memory_gib=best.estimate.peak_memory_bytes / 2**30))
if {expert!r}:
    from cost_models.estimate import estimate
    from cost_models.constraints import resolve
    from cost_models.parallel import ParallelConfig
    e = estimate(model, cluster, job, resolve(model, cluster, job, ParallelConfig(
        tp=8, pp=8, vpp=2, schedule="interleaved", micro_batch_size=1, optimizer_sharding="distributed")))
    out["expert"] = dict(step_time_s=e.step_time_s, mfu=e.mfu, tokens_per_s_per_gpu=e.tokens_per_s_per_gpu,
                         peak_memory_gib=e.peak_memory_bytes / 2**30, fits=e.fits)
print(json.dumps(out))
"""


def run(case) -> dict:
    name, model, cluster, nodes, gbs, seq = case
    cluster_arg = cluster if nodes is not None else str(ROOT / cluster)
    code = CHILD.format(
        root=str(ROOT),
        model=model,
        cluster=cluster_arg,
        nodes=nodes,
        gbs=gbs,
        seq=seq,
        expert=model == "gpt3-175b",
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {"case": name, **json.loads(proc.stdout)}


def main() -> int:
    results = [run(c) for c in CASES]
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        b = r["best"]
        print(f"{r['case']}")
        print(
            f"  wall {r['wall_s']:.2f} s (CPU {r['cpu_s']:.2f} s)   shapes {r['shapes_enumerated']} enumerated, {r['shapes_simulated']} simulated"
            f"   peak memory {r['peak_rss_mib']:.0f} MiB"
        )
        print(
            f"  best: tp {b['tp']} pp {b['pp']} dp {b['dp']} cp {b['cp']} ep {b['ep']} vpp {b['vpp']} mbs {b['mbs']} "
            f"{b['schedule']} recompute {b['recompute']}({b['recompute_num_layers']})"
            f"{' ' + '+'.join(b['recompute_modules']) if b['recompute_modules'] else ''} {b['sharding']}: "
            f"{b['step_time_s']:.2f} s/step, MFU {100 * b['mfu']:.1f}%, {b['peak_memory_gib']:.1f} GiB"
        )
        if "expert" in r:
            e = r["expert"]
            print(
                f"  Narayanan et al. expert (tp 8, pp 8, interleaved v=2, mbs 1): {e['step_time_s']:.2f} s/step, "
                f"MFU {100 * e['mfu']:.1f}%, {e['peak_memory_gib']:.1f} GiB, fits={e['fits']}; planner's plan is "
                f"{100 * (e['step_time_s'] / b['step_time_s'] - 1):.1f}% faster"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
