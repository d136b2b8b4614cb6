#!/usr/bin/env python3
"""Compare measured kernel times (scripts/measure_kernels.py) with planner's cost model.

For one GPU type's efficiency data (fitted end to end on published training runs by
scripts/calibrate.py), prints, per kernel family, the model's time against the measured one:

* GEMMs: ``cost_models.compute.gemm_s`` vs measured, the median and worst errors, and the GEMM
  efficiency curve ``e_max * F / (F + F_half)`` fitted to the kernels alone (least squares on
  log time) beside the calibrated one;
* attention: scripts/measure_kernels.py times SDPA's FLASH_ATTENTION backend (FlashAttention-2), so
  the model's time is the fused kernel's at the calibrated ``attention_efficiency`` slowed by
  FlashAttention-2's speed on this GPU (cost_models.attention.flash2_speed); the efficiency the
  kernel reaches (executed FLOPs over peak x time) beside the efficiency the model charges it, and
  the measured backward / forward ratio beside the model's (2.5 forwards, FlashAttention-2's 5
  backward matmuls to 2 forward, at the backward's own speed);
* memory-bound kernels: achieved bandwidth over the datasheet's, beside ``hbm_efficiency``.

No GPU needed. Usage: python scripts/compare_kernels.py
hardware_profiles/measurements/h100-sxm5-80gb-kernels.json [--gpu h100-sxm5-80gb] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.attention import FUSED_BACKWARD_FORWARDS, flash2_speed  # noqa: E402
from cost_models.compute import attention_s, gemm_s  # noqa: E402
from planner.calibration.kernel_curves import fit_gemm_curve, gemm_gpu_times  # noqa: E402
from planner.profiles.hardware import load_gpu  # noqa: E402


def compare(data: dict, gpu_name: str) -> dict:
    gpu = load_gpu(gpu_name)
    peak = gpu.peak("bf16")
    e = gpu.efficiency
    # GPU times: older files' single-call timings hold the host's dispatch (planner.calibration.kernel_curves.gemm_gpu_times)
    rows = gemm_gpu_times(data)
    g = [x for x, _ in rows]
    flop = np.array([x["flop"] for x in g])
    measured = np.array([t for _, t in rows])
    model = np.array([gemm_s(x["m"], x["n"], x["k"], gpu, "bf16") for x in g])
    err = model / measured - 1
    e_fit, f_fit = fit_gemm_curve(flop, measured, peak)
    refit = (flop + f_fit) / (peak * e_fit)
    att = data["attention"]
    att_rows = []
    fwd_speed, bwd_speed = flash2_speed(gpu)
    for a in att:
        fwd_model = attention_s(a["forward_flop_executed"], gpu, "bf16", a["seq"]) / fwd_speed
        att_rows.append(
            {
                "seq": a["seq"],
                "heads": a["heads"],
                "causal": a["causal"],
                "kernel_efficiency": a["forward_flop_executed"] / (peak * a["forward_s"]),
                "model_forward_error": fwd_model / a["forward_s"] - 1,
                "backward_over_forward": (a["forward_backward_s"] - a["forward_s"]) / a["forward_s"],
            }
        )
    mem = [
        {
            "kernel": m["kernel"],
            "elements": m["elements"],
            "bandwidth_fraction": m["bytes"] / m["time_s"] / gpu.hbm_bandwidth_bytes_per_s,
        }
        for m in data["memory"]
    ]
    return {
        "device": data["device"],
        "gpu_type": gpu_name,
        "gemm": {
            "count": len(g),
            "median_abs_error": float(np.median(np.abs(err))),
            "worst_error": float(err[np.argmax(np.abs(err))]),
            "calibrated": {"e_max": e.gemm_efficiency_max, "f_half_flop": e.gemm_half_efficiency_flop},
            "kernel_fit": {
                "e_max": e_fit,
                "f_half_flop": f_fit,
                "median_abs_error": float(np.median(np.abs(refit / measured - 1))),
            },
            "rows": [
                {
                    **{k: x[k] for k in ("name", "hidden", "tp", "m", "n", "k")},
                    "measured_tflops": f / t / 1e12,
                    "model_error": float(r),
                }
                for x, f, t, r in zip(g, flop, measured, err)
            ],
        },
        "attention": {
            "calibrated_efficiency": e.attention_efficiency,
            "flash2_efficiency": e.attention_efficiency * fwd_speed,
            "model_backward_over_forward": FUSED_BACKWARD_FORWARDS * fwd_speed / bwd_speed,
            "rows": att_rows,
        },
        "memory": {"calibrated_hbm_efficiency": e.hbm_efficiency, "rows": mem},
        "launch_s": data["launch"]["time_s"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--gpu", default="h100-sxm5-80gb")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = compare(json.loads(Path(args.file).read_text()), args.gpu)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    g = r["gemm"]
    print(f"{r['device']} vs planner's {r['gpu_type']} efficiency data")
    print(
        f"GEMMs ({g['count']}): model median |error| {100 * g['median_abs_error']:.1f}%, worst {100 * g['worst_error']:+.1f}%"
    )
    c, k = g["calibrated"], g["kernel_fit"]
    print(
        f"  curve e_max x F/(F+F_half): calibrated e_max {c['e_max']:.3f}, F_half {c['f_half_flop'] / 1e9:.1f} GFLOP; "
        f"kernels alone e_max {k['e_max']:.3f}, F_half {k['f_half_flop'] / 1e9:.1f} GFLOP "
        f"(median |error| {100 * k['median_abs_error']:.1f}%)"
    )
    for name in ("qkv", "attn_out", "fc1", "fc2"):
        rows = [x for x in g["rows"] if x["name"] == name]
        tf = [x["measured_tflops"] for x in rows]
        print(
            f"  {name:8s} measured {min(tf):5.0f}-{max(tf):5.0f} TFLOP/s; model error median {100 * float(np.median([x['model_error'] for x in rows])):+.1f}%"
        )
    a = r["attention"]
    for causal in (True, False):
        rows = [x for x in a["rows"] if x["causal"] is causal]
        eff = [x["kernel_efficiency"] for x in rows]
        bwd = [x["backward_over_forward"] for x in rows]
        print(
            f"attention {'causal' if causal else 'bidirectional'}: kernel efficiency {min(eff):.2f}-{max(eff):.2f} "
            f"(model: fused {a['calibrated_efficiency']:.2f}, FlashAttention-2 {a['flash2_efficiency']:.2f} at most); "
            f"backward/forward {min(bwd):.2f}-{max(bwd):.2f} (model {a['model_backward_over_forward']:.2f})"
        )
    for m in r["memory"]["rows"]:
        note = " (unfused eager: several kernels; Megatron fuses norms)" if "eager" in m["kernel"] else ""
        print(
            f"memory {m['kernel']:14s} {m['elements']:>10d} elements: {100 * m['bandwidth_fraction']:.0f}% of datasheet HBM "
            f"(calibrated {100 * r['memory']['calibrated_hbm_efficiency']:.0f}%){note}"
        )
    print(f"tiny kernel through PyTorch eager (launch + Python + event timing): {1e6 * r['launch_s']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
