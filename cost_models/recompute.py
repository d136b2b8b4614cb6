"""What per-op selective activation checkpointing re-runs and keeps (recompute mode ``op``).

torchtitan's ``activation_checkpoint.mode = "selective"`` with ``selective_ac_option = "op"`` (the
default of its Llama 3 configs since 2024: ``train_configs/llama3_8b.toml`` at 0413364 and 9dec370;
``models/llama3/infra/parallelize.py`` ``_op_sac_save_list`` and
``distributed/activation_checkpoint.py`` ``_apply_op_sac`` in 0.2.2) checkpoints every transformer
block with a policy over the ATen ops it runs:

* the outputs of the ops in the save list are kept: ``aten.mm``, the scaled-dot-product attention
  kernels, ``_c10d_functional.reduce_scatter_tensor`` (and, in the MoE models, ``all_to_all_single``),
  ``aten.max``;
* *except every second* ``aten.mm`` of the block, counted in forward order (``meta[mm_count_key] % 2
  == 0`` is recomputed): the 1st, 3rd, 5th, ... matmul is kept, the 2nd, 4th, ... is recomputed;
* everything else is recomputed in the backward: norms, RoPE, the activation function, residual
  adds, all-gathers and grouped expert GEMMs (``_grouped_mm`` is not in the list).

torchao's float8 linears count like bf16 ones: their ``torch.mm`` on ``Float8TrainingTensor``
arguments reaches the checkpointing dispatch mode as ``aten.mm`` (dispatch modes run before a
tensor subclass's ``__torch_dispatch__``, which then calls ``_scaled_mm``), so the same matmuls are
kept and their bf16 outputs cost the same bytes. The 2024-12 H100 benchmark agrees: its float8 and
bf16 compiled rows log the same peak memory (76.8 / 77.0 GiB, 61.8 / 62.0 GiB).

This module lists a decoder layer's linear ops in the order torchtitan's models run them and derives
the fraction of forward GEMM FLOPs the backward repeats and the bytes the block keeps; the layer
table (:mod:`cost_models.layers`) turns them into ``LayerCost.op_recompute_s`` and
``LayerCost.op_kept_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Linear:
    """One linear op of a decoder layer's forward, per token, before tensor parallelism."""

    name: str
    flop: float
    """Forward FLOPs per token (2 x in x out; routed experts x top-k)."""
    out: float
    """Output elements per token of the whole op (tensor parallelism divides column-parallel ones)."""
    row_parallel: bool = False
    """Output is a partial sum of full width under tensor parallelism (then reduce-scattered)."""
    mm: bool = True
    """An ``aten.mm`` (counted by the policy); False for grouped expert GEMMs."""


@lru_cache(maxsize=256)
def layer_linears(model: ModelSpec, moe: bool) -> tuple[Linear, ...]:
    """The linear ops of one decoder layer in forward order, as torchtitan's models run them.

    Attention (``models/llama3/model/model.py`` ``Attention.forward``): ``wq``, ``wk``, ``wv``, then
    ``wo`` after the attention kernel; MLA (``models/deepseek_v3/model/model.py``): ``wq`` (or
    ``wq_a``, ``wq_b``), ``wkv_a``, ``wkv_b``, ``wo``. Dense MLP (``FeedForward.forward``:
    ``w2(silu(w1(x)) * w3(x))``): ``w1``, ``w3``, ``w2`` (``w1``, ``w2`` ungated). MoE
    (``models/moe/moe.py`` ``MoE.forward``): the router gate, the routed experts' grouped GEMMs,
    then the shared experts' ``w1``, ``w3``, ``w2``.
    """
    h, a = model.hidden_size, model.num_attention_heads
    ops: list[Linear] = []
    if model.multi_latent_attention:
        rq, rkv, dr = model.q_lora_rank, model.kv_lora_rank, model.qk_pos_emb_head_dim
        dqk, dv = model.qk_head_size, model.v_head_dim
        if rq:
            ops += [Linear("wq_a", 2 * h * rq, rq), Linear("wq_b", 2 * rq * a * dqk, a * dqk)]
        else:
            ops.append(Linear("wq", 2 * h * a * dqk, a * dqk))
        width = a * (model.qk_head_dim + dv)
        ops += [Linear("wkv_a", 2 * h * (rkv + dr), rkv + dr), Linear("wkv_b", 2 * rkv * width, width)]
        ops.append(Linear("wo", 2 * a * dv * h, h, row_parallel=True))
    else:
        q, kv = model.query_projection_size, model.kv_projection_size
        ops += [Linear("wq", 2 * h * q, q), Linear("wk", 2 * h * kv, kv), Linear("wv", 2 * h * kv, kv)]
        ops.append(Linear("wo", 2 * q * h, h, row_parallel=True))

    def mlp(prefix: str, f: float, k: float = 1.0, mm: bool = True) -> list[Linear]:
        up = [Linear(f"{prefix}w1", 2 * h * f * k, f * k, mm=mm)]
        if model.gated:
            up.append(Linear(f"{prefix}w3", 2 * h * f * k, f * k, mm=mm))
        return [*up, Linear(f"{prefix}w2", 2 * f * h * k, h * k, row_parallel=mm, mm=mm)]

    if not moe:
        ops += mlp("", model.ffn_hidden_size)
    else:
        ops.append(Linear("router", 2 * h * model.num_experts, model.num_experts))
        ops += mlp("experts.", model.moe_ffn_hidden_size, model.moe_router_topk, mm=False)
        if model.moe_shared_expert_intermediate_size:
            ops += mlp("shared.", model.moe_shared_expert_intermediate_size)
    return tuple(ops)


def op_sac_saved(linears: tuple[Linear, ...]) -> tuple[bool, ...]:
    """Whether the policy keeps each linear's output: odd-numbered ``aten.mm`` calls of the block
    are kept, even-numbered ones and non-mm GEMMs recomputed."""
    saved, count = [], 0
    for op in linears:
        if op.mm:
            count += 1
        saved.append(op.mm and count % 2 == 1)
    return tuple(saved)


def op_sac_recomputed_flop_fraction(model: ModelSpec, moe: bool) -> float:
    """Fraction of a layer's forward GEMM FLOPs that per-op selective recompute repeats."""
    ops = layer_linears(model, moe)
    total = sum(op.flop for op in ops)
    redone = sum(op.flop for op, kept in zip(ops, op_sac_saved(ops)) if not kept)
    return redone / total if total else 0.0


def op_sac_recomputed_flop_per_token(model: ModelSpec) -> float:
    """Forward GEMM FLOPs per token that per-op selective recompute repeats, over all decoder layers
    (hardware FLOPs minus model FLOPs)."""
    out = 0.0
    for i in range(model.num_layers):
        moe = model.is_moe_layer(i)
        ops = layer_linears(model, moe)
        out += sum(op.flop for op, kept in zip(ops, op_sac_saved(ops)) if not kept)
    return out


def op_sac_kept_bytes(
    model: ModelSpec,
    moe: bool,
    *,
    tokens: float,
    tp: int,
    sequence_parallel: bool,
    ep: int,
    act_bytes: float,
) -> float:
    """Bytes one layer keeps per micro-batch under per-op selective recompute, for ``tokens``
    tokens of a micro-batch on one GPU (before sequence-parallel sharding).

    The block's input (sharded over tp with sequence parallelism); the outputs of the linears the
    policy keeps (:func:`op_sac_saved`; a column-parallel output is ``1/tp`` of its width, a
    row-parallel one the full-width partial sum); every ``reduce_scatter_tensor`` output (one after
    each row-parallel linear with sequence parallelism); the attention kernel's output and its fp32
    log-sum-exp per head; with expert parallelism the two ``all_to_all_single`` outputs (dispatched
    and combined token copies).
    """
    T, t, h = tokens, tp, model.hidden_size
    local = T / t if sequence_parallel else T
    kept = local * h * act_bytes
    ops = layer_linears(model, moe)
    for op, saved in zip(ops, op_sac_saved(ops)):
        if saved:
            kept += T * (op.out if op.row_parallel else op.out / t) * act_bytes
        if op.row_parallel and t > 1 and sequence_parallel:
            kept += local * h * act_bytes
    heads = model.num_attention_heads
    kept += T * heads * model.v_head_size / t * act_bytes + T * heads / t * 4
    if moe and ep > 1:
        kept += 2 * local * model.moe_router_topk * h * act_bytes
    return kept
