#!/usr/bin/env python3
"""Measure peak allocated memory of real Megatron-Core training steps on one CUDA GPU (issue 12, item 5).

Each configuration is a planner model mapping (Megatron field names, ``kind: model``) built as a
Megatron-Core ``GPTModel`` (megatron-core from PyPI, local layer spec: no Transformer Engine or
apex needed) with flash attention through ``torch.nn.functional.scaled_dot_product_attention`` as
the core attention (planner prices flash attention: no s^2 buffers), bf16 parameters, Megatron's
``DistributedDataParallel`` with an fp32 gradient buffer (``grad_reduce_in_fp32``, Megatron's
default for bf16 training) and Megatron's optimizer (fp32 main weights and Adam moments; torch's
fused AdamW, since Megatron falls back to torch optimizers without TE/apex). Recompute follows
Megatron's flags: ``selective`` = ``--recompute-granularity selective`` (core attention),
``full`` = ``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``.

Per configuration it runs warm-up steps (the optimizer states exist after the first), then one
measured step and records, from ``torch.cuda`` memory statistics:

- ``static_gib``: allocated before the forward pass (weights, gradient buffer, optimizer states);
- ``peak_memory_gib``: ``max_memory_allocated`` over forward and backward (the activation peak;
  the quantity planner's memory model predicts, less its fixed CUDA-context/NCCL reserve, which
  the caching allocator does not see);
- ``peak_step_gib``: the peak over the whole step including the optimizer update;
- ``peak_reserved_gib``: ``max_memory_reserved`` over the step.

Rows are written as ``measured_allocated`` entries (the format of
hardware_profiles/measurements/h100-sxm5-80gb-megatron-memory.yaml), each with the planner GPU type,
model mapping, job and configuration, so ``scripts/validate_memory.py --measured FILE`` can predict it.
Megatron-Core needs no Transformer Engine here; on a machine without network access carry its wheel
(``pip download megatron-core``; it needs only torch, numpy and packaging).
torch and megatron-core are optional: imported inside main; without them or without a CUDA device
the script prints why and exits 0 without writing anything.

Usage: python scripts/measure_memory.py [--out FILE] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

LLAMA_SMALL = {
    "kind": "model",
    "name": "llama-style-1b",
    "num_layers": 16,
    "hidden_size": 2048,
    "ffn_hidden_size": 5632,
    "num_attention_heads": 16,
    "num_query_groups": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "activation": "swiglu",
    "normalization": "rmsnorm",
    "position_embedding_type": "rope",
    "untie_embeddings_and_output_weights": True,
    "add_bias_linear": False,
}
"""A Llama-style decoder (GQA, SwiGLU, RMSNorm, RoPE, untied, no biases), TinyLlama-like width."""

LLAMA3_WIDE = {
    **LLAMA_SMALL,
    "name": "llama3-8b-width-4-layers",
    "num_layers": 4,
    "hidden_size": 4096,
    "ffn_hidden_size": 14336,
    "num_attention_heads": 32,
    "num_query_groups": 8,
    "vocab_size": 128256,
}
"""Llama 3 8B's layer shape and vocabulary (Dubey et al. 2024, Table 3) with 4 of its 32 layers."""

GPT_SMALL = {
    "kind": "model",
    "name": "gpt-style-1.3b-width",
    "num_layers": 12,
    "hidden_size": 2048,
    "ffn_hidden_size": 8192,
    "num_attention_heads": 16,
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
    "activation": "gelu",
    "normalization": "layernorm",
    "position_embedding_type": "learned_absolute",
    "untie_embeddings_and_output_weights": False,
    "add_bias_linear": True,
}
"""A GPT-3-XL-width decoder (Brown et al. 2020, Table 2.1: h 2048, 16 heads) with 12 layers, tied."""

MOE_SMALL = {
    **LLAMA_SMALL,
    "name": "moe-style-8x1.4b-top2",
    "num_layers": 8,
    "num_experts": 8,
    "moe_router_topk": 2,
    "moe_ffn_hidden_size": 5632,
}
"""A Mixtral-style MoE decoder (Jiang et al. 2024: 8 experts, top-2, SwiGLU experts) at the width of
LLAMA_SMALL with 8 layers; Megatron's alltoall dispatcher, experts as a SequentialMLP (local spec)."""

CONFIGS = [
    # (name, model mapping, seq, micro-batch, recompute, dropout)
    ("llama1b_s4096_b1_selective", LLAMA_SMALL, 4096, 1, "selective", 0.0),
    ("llama1b_s4096_b2_selective", LLAMA_SMALL, 4096, 2, "selective", 0.0),
    ("llama1b_s4096_b2_none", LLAMA_SMALL, 4096, 2, "none", 0.0),
    ("llama1b_s4096_b4_full", LLAMA_SMALL, 4096, 4, "full", 0.0),
    ("llama1b_s8192_b1_none", LLAMA_SMALL, 8192, 1, "none", 0.0),
    ("llama3w_s8192_b1_selective", LLAMA3_WIDE, 8192, 1, "selective", 0.0),
    ("llama3w_s8192_b1_full", LLAMA3_WIDE, 8192, 1, "full", 0.0),
    ("gpt1b_s2048_b4_selective_dropout", GPT_SMALL, 2048, 4, "selective", 0.1),
    ("gpt1b_s2048_b4_none_dropout", GPT_SMALL, 2048, 4, "none", 0.1),
    ("gpt1b_s2048_b8_full_dropout", GPT_SMALL, 2048, 8, "full", 0.1),
    ("moe8x_s4096_b1_selective", MOE_SMALL, 4096, 1, "selective", 0.0),
    ("moe8x_s4096_b2_selective", MOE_SMALL, 4096, 2, "selective", 0.0),
    ("moe8x_s4096_b2_full", MOE_SMALL, 4096, 2, "full", 0.0),
]
"""Single-GPU configurations (tp = pp = dp = 1), each well inside 80 GiB, chosen to separate the
static terms (weights, gradients, optimizer), the per-layer activations with each recompute mode,
the output layer's logits (vocabulary 32K vs 128K) and dropout masks (0 vs 0.1)."""

GIB = 2**30


def _sdpa_core_attention(torch):
    """A Megatron core-attention module running flash attention through torch SDPA."""
    from megatron.core.transformer.module import MegatronModule

    class SDPACoreAttention(MegatronModule):
        def __init__(self, config, layer_number, attn_mask_type, attention_type, **kwargs):
            super().__init__(config=config)
            self.dropout_p = config.attention_dropout

        def forward(self, query, key, value, attention_mask=None, attn_mask_type=None, **kwargs):
            # Megatron passes [s, b, heads, d]; SDPA wants [b, heads, s, d].
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    is_causal=True,
                    dropout_p=self.dropout_p if self.training else 0.0,
                    enable_gqa=q.shape[1] != k.shape[1],
                )
            s, b = out.shape[2], out.shape[0]
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    return SDPACoreAttention


def _measure(torch, model_map: dict, seq: int, mb: int, recompute: str, dropout: float) -> dict:
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    m = model_map
    heads = m["num_attention_heads"]
    rec = {}
    if recompute == "selective":
        rec = {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}
    elif recompute == "full":
        rec = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if m.get("num_experts"):
        rec.update(
            num_moe_experts=m["num_experts"],
            moe_router_topk=m["moe_router_topk"],
            moe_ffn_hidden_size=m["moe_ffn_hidden_size"],
            moe_token_dispatcher_type="alltoall",
        )
    cfg = TransformerConfig(
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        ffn_hidden_size=m["ffn_hidden_size"],
        num_attention_heads=heads,
        num_query_groups=m.get("num_query_groups", heads),
        gated_linear_unit=m["activation"] == "swiglu",
        activation_func=F.silu if m["activation"] == "swiglu" else F.gelu,
        normalization="RMSNorm" if m["normalization"] == "rmsnorm" else "LayerNorm",
        add_bias_linear=m["add_bias_linear"],
        hidden_dropout=dropout,
        attention_dropout=dropout,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        gradient_accumulation_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        bias_activation_fusion=m["activation"] == "swiglu" or m["add_bias_linear"],
        **rec,
    )
    spec = get_gpt_layer_local_spec(num_experts=m.get("num_experts") or None, normalization=cfg.normalization)
    spec.submodules.self_attention.submodules.core_attention = _sdpa_core_attention(torch)
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=spec,
        vocab_size=m["vocab_size"],
        max_sequence_length=max(seq, m["max_position_embeddings"]),
        position_embedding_type="rope" if m["position_embedding_type"] == "rope" else "learned_absolute",
        share_embeddings_and_output_weights=not m["untie_embeddings_and_output_weights"],
    )
    # Megatron's training loop wraps the model in Float16Module (every parameter in bf16, including
    # norms and position embeddings; logits returned to fp32 only after the loss).
    model = Float16Module(cfg, model).cuda()
    torch.cuda.synchronize()
    after_model = torch.cuda.memory_allocated()
    ddp = DistributedDataParallel(
        config=cfg,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True),
        module=model,
    )
    torch.cuda.synchronize()
    after_ddp = torch.cuda.memory_allocated()
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-5, bf16=True, use_distributed_optimizer=True), [ddp]
    )
    torch.cuda.synchronize()
    after_opt = torch.cuda.memory_allocated()
    for inner in getattr(opt, "chained_optimizers", [opt]):
        for group in inner.optimizer.param_groups:
            group["foreach"], group["fused"] = False, True  # one fused kernel, as TE/apex FusedAdam
    params = sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, m["vocab_size"], (mb, seq), device="cuda")
    positions = torch.arange(seq, device="cuda").unsqueeze(0).expand(mb, seq)
    out = {"after_model": after_model, "after_ddp": after_ddp, "after_optimizer": after_opt}
    for step in range(3):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        torch.cuda.synchronize()
        if step == 2:
            out["static"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        loss = ddp(tokens, positions, attention_mask=None, labels=tokens)
        loss.float().mean().backward()
        ddp.finish_grad_sync()
        torch.cuda.synchronize()
        if step == 2:
            out["fwd_bwd_peak"] = torch.cuda.max_memory_allocated()
        opt.step()
        torch.cuda.synchronize()
    out["step_peak"] = torch.cuda.max_memory_allocated()
    out["reserved_peak"] = torch.cuda.max_memory_reserved()
    out["params"] = params
    del ddp, opt, model, loss
    torch.cuda.empty_cache()
    return out


def _planner_gpu(device_name: str) -> str:
    """planner's GPU type for a CUDA device name (the predictions use its capacity and reserve)."""
    name = device_name.upper()
    for key, gpu in (("H200", "h200-sxm-141gb"), ("H100", "h100-sxm5-80gb"), ("A100", "a100-sxm4-80gb")):
        if key in name:
            return gpu
    return device_name


def _measure_in_process(torch, wanted: list[str]) -> list[dict]:
    """Run the named configurations in this process (the parent runs each in its own)."""
    import megatron.core as mcore
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)
    name = torch.cuda.get_device_name(0)
    rows = []
    for run_name, model_map, seq, mb, recompute, dropout in CONFIGS:
        if run_name not in wanted:
            continue
        got = _measure(torch, model_map, seq, mb, recompute, dropout)
        rows.append(
            {
                "run_id": f"mcore_h100_{run_name}",
                "source": (
                    f"scripts/measure_memory.py on one {name}, megatron-core {mcore.__version__}, "
                    f"torch {torch.__version__}"
                ),
                "gpu": _planner_gpu(name),
                "model": dict(model_map),
                "dropout": dropout,
                "seq_length": seq,
                "micro_batch_size": mb,
                "recompute": recompute,
                "tp": 1,
                "pp": 1,
                "dp": 1,
                "params": got["params"],
                "model_built_gib": round(got["after_model"] / GIB, 4),
                "ddp_wrapped_gib": round(got["after_ddp"] / GIB, 4),
                "optimizer_built_gib": round(got["after_optimizer"] / GIB, 4),
                "static_gib": round(got["static"] / GIB, 4),
                "peak_memory_gib": round(got["fwd_bwd_peak"] / GIB, 4),
                "peak_step_gib": round(got["step_peak"] / GIB, 4),
                "peak_reserved_gib": round(got["reserved_peak"] / GIB, 4),
                "memory_metric": "torch.cuda.max_memory_allocated",
            }
        )
    dist.destroy_process_group()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the YAML rows here (default: stdout)")
    ap.add_argument("--only", default="", help="comma-separated configuration names to run")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_memory: torch is not installed; nothing measured (pip install torch on a GPU machine)")
        return 0
    if not torch.cuda.is_available():
        print("measure_memory: no CUDA device present; nothing measured")
        return 0
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        print("measure_memory: megatron-core is not installed; nothing measured (pip install megatron-core)")
        return 0
    import yaml

    wanted = [s for s in args.only.split(",") if s]
    if not wanted:
        # One fresh process per configuration: Megatron's global state and the caching allocator
        # would otherwise carry one configuration's memory into the next.
        rows = []
        for run_name, *_ in CONFIGS:
            proc = subprocess.run(
                [sys.executable, __file__, "--only", run_name, "--out", "-"],
                capture_output=True,
                text=True,
            )
            doc = proc.stdout[proc.stdout.find("measured_allocated:") :] if proc.returncode == 0 else ""
            if not doc:
                print(
                    f"{run_name}: failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}", flush=True
                )
                continue
            got = yaml.safe_load(doc)["measured_allocated"]
            for row in got:
                print(
                    f"{run_name}: params {row['params'] / 1e9:.3f} B, model {row['model_built_gib']:.2f}, "
                    f"ddp {row['ddp_wrapped_gib']:.2f}, optimizer {row['optimizer_built_gib']:.2f} GiB, static {row['static_gib']:.2f} GiB, "
                    f"fwd+bwd peak {row['peak_memory_gib']:.2f} GiB, step peak {row['peak_step_gib']:.2f} GiB, "
                    f"reserved {row['peak_reserved_gib']:.2f} GiB",
                    flush=True,
                )
            rows.extend(got)
    else:
        rows = _measure_in_process(torch, wanted)
    text = yaml.safe_dump({"measured_allocated": rows}, sort_keys=False)
    if args.out and str(args.out) != "-":
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
