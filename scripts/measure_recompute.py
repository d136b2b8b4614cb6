#!/usr/bin/env python3
"""Measure what torchtitan's activation checkpointing costs and saves, on one CUDA GPU.

torchtitan's own Llama 3 model (``torchtitan.models.llama3.model.model.Transformer``, 0.2.2) is
built at a published width with few layers and wrapped by torchtitan's own ``apply_ac``
(``distributed/activation_checkpoint.py``) in each mode: none, ``selective`` with
``selective_ac_option = "op"`` and the Llama 3 ``_op_sac_save_list`` (planner's recompute ``op``,
``cost_models/recompute.py``), and ``full``. Eager, bf16 parameters, random tokens, the loss as
torchtitan computes it (cross entropy over fp32 logits). For each width, mode and depth it
records the forward + backward time (median of CUDA-event-timed steps after warm-up) and the
memory allocated at the end of the forward (what the backward will need). The per-layer figures
are the differences between two depths divided by the layer difference, which cancels the
embedding, the output layer, the loss and the one-layer recompute working set.

Output: JSON for ``scripts/compare_recompute.py``, which prices the same layers with planner
without a GPU. Without torch, CUDA or torchtitan the script says so and exits 0.

torchtitan's package ``__init__`` imports its Hugging Face dataset loader; where the ``datasets``
package is missing, an empty stand-in module is installed first (the loader is never called).

With ``--compile`` the steps run with every block compiled as torchtitan's ``compile.enable`` does (``apply_compile``: ``torch.compile(block, fullgraph=True)`` after AC).

Usage: python scripts/measure_recompute.py [--out FILE] [--quick] [--compile] [--widths a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

WIDTHS = [
    # (label, dim, heads, kv heads, ffn multiplier, multiple_of, vocab, seq, batch): torchtitan's
    # flavors (models/llama3/__init__.py llama3_args "8B" / "70B"; llama2 13B as its old
    # train_configs/llama2_13b.toml: dim 5120, 40 heads, MHA, ffn 13824)
    ("llama3-8b", 4096, 32, 8, 1.3, 1024, 128256, 8192, 1),
    ("llama2-13b", 5120, 40, None, None, 256, 32000, 4096, 2),
    ("llama3-70b", 8192, 64, 8, 1.3, 4096, 128256, 8192, 1),
]
DEPTHS = (2, 4)
MODES = ("none", "op", "full")


def _stub_datasets() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        stub = types.ModuleType("datasets")
        stub.Dataset = stub.IterableDataset = object
        stub.load_dataset = lambda *a, **k: None
        dist = types.ModuleType("datasets.distributed")
        dist.split_dataset_by_node = lambda *a, **k: None
        stub.distributed = dist
        sys.modules["datasets"] = stub
        sys.modules["datasets.distributed"] = dist


def _build(torch, width, depth: int, mode: str, device: str, compile_blocks: bool = False):
    from torchtitan.config.job_config import ActivationCheckpoint
    from torchtitan.distributed.activation_checkpoint import apply_ac
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    try:
        from torchtitan.models.llama3.infra.parallelize import _op_sac_save_list as save_list
    except (ImportError, AttributeError):  # an op the installed torch lacks: same list, present ops
        ops = torch.ops.aten
        save_list = {
            ops.mm.default,
            ops._scaled_dot_product_efficient_attention.default,
            ops._scaled_dot_product_flash_attention.default,
            ops._scaled_dot_product_cudnn_attention.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default,
            ops.max.default,
        }
    _, dim, heads, kv, mult, multiple_of, vocab, seq, _ = width
    args = TransformerModelArgs(
        dim=dim,
        n_layers=depth,
        n_heads=heads,
        n_kv_heads=kv,
        vocab_size=vocab,
        multiple_of=multiple_of,
        ffn_dim_multiplier=mult,
        rope_theta=500000,
        max_seq_len=seq,
    )
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device(device))
    model.to(torch.bfloat16)
    if mode != "none":
        ac = ActivationCheckpoint(
            mode="full" if mode == "full" else "selective",
            selective_ac_option="op" if mode == "op" else "2",
        )
        apply_ac(model, ac, op_sac_save_list=save_list)
    if compile_blocks:  # what compile.enable does: parallelize.py apply_compile, after AC
        from torchtitan.config.job_config import Compile
        from torchtitan.models.llama3.infra.parallelize import apply_compile

        apply_compile(model, Compile(enable=True))
    ffn = model.layers["0"].feed_forward.w1.weight.shape[0]
    return model, ffn


def _step(torch, model, tokens, labels):
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
    return loss


def measure(
    torch, width, depth: int, mode: str, device: str, reps: int, warmup: int, compile_blocks: bool = False
) -> dict:
    model, ffn = _build(torch, width, depth, mode, device, compile_blocks)
    _, _, _, _, _, _, vocab, seq, batch = width
    g = torch.Generator(device=device).manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
    labels = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        model.zero_grad(set_to_none=True)
        _step(torch, model, tokens, labels).backward()
    model.zero_grad(set_to_none=True)
    sync()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    loss = _step(torch, model, tokens, labels)
    sync()
    after_forward = (torch.cuda.memory_allocated() if device == "cuda" else 0) - base
    loss.backward()
    del loss
    times = []
    for _ in range(reps):
        model.zero_grad(set_to_none=True)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _step(torch, model, tokens, labels).backward()
            end.record()
            sync()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            _step(torch, model, tokens, labels).backward()
            times.append(0.0)
    times.sort()
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "width": width[0],
        "dim": width[1],
        "heads": width[2],
        "kv_heads": width[3] or width[2],
        "ffn": ffn,
        "vocab": vocab,
        "seq": seq,
        "batch": batch,
        "layers": depth,
        "mode": mode,
        "compile": compile_blocks,
        "step_s": times[len(times) // 2],
        "forward_saved_bytes": after_forward,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write JSON here (default: stdout)")
    ap.add_argument("--quick", action="store_true", help="tiny widths on the CPU (a smoke test)")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="compile every block (torchtitan compile.enable) instead of running eager",
    )
    ap.add_argument("--widths", default="", help="comma-separated width labels to measure (default: all)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_recompute: torch is not installed; nothing measured")
        return 0
    _stub_datasets()
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        print("measure_recompute: torchtitan is not installed; nothing measured")
        return 0
    widths, reps, warmup, device = WIDTHS, 10, 3, "cuda"
    if args.quick:
        widths, reps, warmup, device = [("tiny", 256, 4, 2, 1.3, 64, 1000, 128, 2)], 1, 1, "cpu"
    elif not torch.cuda.is_available():
        print("measure_recompute: no CUDA device present; nothing measured")
        return 0
    if args.widths:
        widths = [w for w in widths if w[0] in args.widths.split(",")]
    rows = []
    for width in widths:
        for mode in MODES:
            for depth in DEPTHS:
                row = measure(torch, width, depth, mode, device, reps, warmup, args.compile)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    out = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "torchtitan": getattr(sys.modules.get("torchtitan"), "__version__", "0.2.2"),
        "rows": rows,
    }
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
