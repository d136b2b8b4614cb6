#!/usr/bin/env python3
"""Compare torchtitan's measured activation-checkpointing costs with planner's layer table.

Reads ``scripts/measure_recompute.py`` output (default: the H100 file in
``hardware_profiles/measurements``) and, per model width, takes the per-layer figures as the
difference between the two measured depths divided by the layer difference; then prices one
decoder layer of the same width with planner (``cost_models.estimate.table_for``: one GPU of the
file's type, tp 1, the measured micro-batch, torchtitan's eager RoPE and SwiGLU without
``compile``) and prints, per width:

* forward + backward time of a layer without recompute, measured and predicted;
* the extra backward time of per-op selective recompute (``LayerCost.op_recompute_s``) and of full
  recompute (``LayerCost.recompute_forward_s``), measured and predicted, also as a share of the
  layer's time;
* the activation bytes a layer keeps at the end of the forward without recompute
  (``activation_bytes``), with per-op recompute (``op_kept_bytes``) and with full recompute
  (``checkpoint_bytes``).

No GPU needed. ``--json`` prints the rows as JSON.

Usage: python scripts/compare_recompute.py [FILE] [--gpu NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cost_models.estimate import table_for  # noqa: E402
from cost_models.parallel import ParallelConfig  # noqa: E402
from planner.calibration.memory_validation import single_node  # noqa: E402
from planner.frameworks.torchtitan import EAGER_TORCHTITAN  # noqa: E402
from planner.inputs.documents import SCHEMA_VERSION  # noqa: E402
from planner.inputs.jobs import make_job  # noqa: E402
from planner.inputs.model_yaml import model_from_mapping  # noqa: E402

DEFAULT = ROOT / "hardware_profiles" / "measurements" / "h100-sxm5-80gb-torchtitan-recompute.json"


def per_layer(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(width, mode) -> per-layer step seconds and saved bytes, from the two depths measured."""
    out: dict[tuple[str, str], dict] = {}
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["width"], r["mode"]), []).append(r)
    for key, rs in sorted(by.items()):
        lo, hi = min(rs, key=lambda r: r["layers"]), max(rs, key=lambda r: r["layers"])
        n = hi["layers"] - lo["layers"]
        out[key] = {
            "step_s": (hi["step_s"] - lo["step_s"]) / n,
            "bytes": (hi["forward_saved_bytes"] - lo["forward_saved_bytes"]) / n,
            "row": hi,
        }
    return out


def compare(doc: dict, gpu_name: str) -> list[dict]:
    layers = per_layer(doc["rows"])
    results = []
    for width in sorted({w for w, _ in layers}):
        r = layers[(width, "none")]["row"]
        model = model_from_mapping(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": "model",
                "name": width,
                "num_layers": r["layers"],
                "hidden_size": r["dim"],
                "ffn_hidden_size": r["ffn"],
                "num_attention_heads": r["heads"],
                "num_query_groups": r["kv_heads"],
                "vocab_size": r["vocab"],
                "max_position_embeddings": r["seq"],
                "activation": "swiglu",
                "normalization": "rmsnorm",
                "position_embedding_type": "rope",
                "untie_embeddings_and_output_weights": True,
                "add_bias_linear": False,
            },
            f"measured width {width}",
        )
        job = make_job(
            global_batch_size=r["batch"],
            seq_length=r["seq"],
            eager_ops=EAGER_TORCHTITAN,
            where=f"measured width {width}",
        )
        c = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=r["batch"], sequence_parallel=False)
        layer = table_for(model, job, c, single_node(gpu_name, 1)).dense
        base = layer.forward_s + layer.backward_input_s + layer.backward_weight_s
        none, op, full = (layers[(width, m)] for m in ("none", "op", "full"))
        results.append(
            {
                "width": width,
                "tokens": r["seq"] * r["batch"],
                "layer_s": {"measured": none["step_s"], "predicted": base},
                "op_extra_s": {"measured": op["step_s"] - none["step_s"], "predicted": layer.op_recompute_s},
                "full_extra_s": {
                    "measured": full["step_s"] - none["step_s"],
                    "predicted": layer.recompute_forward_s,
                },
                "kept_bytes_none": {"measured": none["bytes"], "predicted": layer.activation_bytes},
                "kept_bytes_op": {"measured": op["bytes"], "predicted": layer.op_kept_bytes},
                "kept_bytes_full": {"measured": full["bytes"], "predicted": layer.checkpoint_bytes},
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--gpu", default="h100-sxm5-80gb", help="planner GPU the file was measured on")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    doc = json.loads(args.file.read_text())
    rows = compare(doc, args.gpu)
    if args.json:
        print(json.dumps({"device": doc.get("device"), "rows": rows}, indent=1, sort_keys=True))
        return 0
    print(
        f"{doc.get('device')} (torch {doc.get('torch')}, torchtitan {doc.get('torchtitan')}); per decoder layer"
    )
    head = f"{'width':<12} {'quantity':<28} {'measured':>10} {'predicted':>10} {'pred/meas':>9}"
    print(head)
    for r in rows:
        for key, unit, scale in (
            ("layer_s", "ms", 1e3),
            ("op_extra_s", "ms", 1e3),
            ("full_extra_s", "ms", 1e3),
            ("kept_bytes_none", "MB", 1e-6),
            ("kept_bytes_op", "MB", 1e-6),
            ("kept_bytes_full", "MB", 1e-6),
        ):
            m, p = r[key]["measured"], r[key]["predicted"]
            print(
                f"{r['width']:<12} {key + ' (' + unit + ')':<28} {m * scale:>10.2f} {p * scale:>10.2f} {p / m:>9.2f}"
            )
        share_m = r["op_extra_s"]["measured"] / r["layer_s"]["measured"]
        share_p = r["op_extra_s"]["predicted"] / r["layer_s"]["predicted"]
        full_m = r["full_extra_s"]["measured"] / r["layer_s"]["measured"]
        full_p = r["full_extra_s"]["predicted"] / r["layer_s"]["predicted"]
        print(
            f"{r['width']:<12} recompute share of layer time: op measured {share_m:.1%} predicted {share_p:.1%}; "
            f"full measured {full_m:.1%} predicted {full_p:.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
