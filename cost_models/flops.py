"""Model FLOPs and hardware FLOPs: per token of one layer, per token of the model, per iteration
(the numerators of MFU and HFU, :class:`cost_models.estimate.Estimate`).

Model FLOPs follow Megatron-LM's convention (``megatron/training/training.py:
num_floating_point_operations``; Narayanan et al. 2021, arXiv:2104.04473, eq. 3): GEMMs and the
attention products counted non-causal, backward twice the forward, the logits included, no
recompute. Hardware FLOPs add the forward work that recomputation repeats.
"""

from __future__ import annotations

from cost_models import recompute as op_sac
from cost_models.adapters import adapter_flop_per_token
from cost_models.sparse_attention import indexer_flop_per_token
from cost_models.ssm import SELECTIVE_SCAN_FLOP_PER_STATE
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


def layer_flop_per_token(model: ModelSpec, index: int, seq_length: int) -> float:
    """Forward model FLOPs per token of decoder layer ``index`` (GEMMs and attention products,
    non-causal convention; Narayanan et al. 2021 eq. 3, Megatron ``num_floating_point_operations``).

    Attention: MHA/GQA ``2 h (q + 2 kv) + 2 q h``; MLA the projections of :meth:`ModelSpec.mla_params`
    plus ``r_q + r_kv`` for the latent norms (Megatron's MLA branch); core ``2 x span x heads x
    (qk width + v width)`` (= ``4 s q`` for full MHA). MLP: ``2 h f (n_in + 1)``; MoE layers the
    router ``2 h E``, top-k routed experts and the shared experts.

    DeepSeek sparse attention: the core products over the top-k keys in MLA's absorbed form
    (:meth:`ModelSpec.attention_span`, :attr:`ModelSpec.core_attention_width`) and a third of the
    indexer's forward + backward (:func:`cost_models.sparse_attention.indexer_flop_per_token`:
    its backward is not twice its forward), so that three times this is the layer's model FLOPs.
    Megatron's ``num_floating_point_operations`` has no DSA branch (it counts such a layer as dense
    MLA).
    """
    h, a = model.hidden_size, model.num_attention_heads
    n_in = 2 if model.gated else 1
    mixer, ffn = model.layer_parts(index)
    mixers = mixer.split("+")  # attention+mamba: both, side by side (Falcon-H1)
    if "attention" not in mixers:
        flop = _mixer_flop_per_token(model, mixer)
    elif model.multi_latent_attention:
        rq, rkv, dr = model.q_lora_rank, model.kv_lora_rank, model.qk_pos_emb_head_dim
        dqk, dv = model.qk_head_size, model.v_head_dim
        q_term = rq * (h + a * dqk + 1) if rq else h * a * dqk
        flop = 2 * (q_term + rkv * (h + a * (model.qk_head_dim + dv) + 1) + h * dr + a * dv * h)
        if model.is_dsa:
            flop += indexer_flop_per_token(model, seq_length) / 3
    else:
        q, kv = model.query_projection_size, model.kv_projection_size
        flop = 2 * h * (q + 2 * kv) + 2 * q * h + (2 * h * q if model.attention_output_gate else 0)
    if "attention" in mixers:
        flop += 2 * model.attention_span(index, seq_length) * model.core_attention_width
    if mixers == ["attention", "mamba"]:
        flop += _mixer_flop_per_token(model, "mamba")
    if not ffn:
        return flop
    if ffn == "moe":
        flop += 2 * h * model.num_experts
        flop += model.moe_router_topk * 2 * h * model.moe_ffn_hidden_size * (n_in + 1)
        flop += 2 * h * model.moe_shared_expert_intermediate_size * (n_in + 1)
    else:
        flop += 2 * h * model.ffn_hidden_size * (n_in + 1)
    return flop


def _mixer_flop_per_token(model: ModelSpec, mixer: str) -> float:
    """Forward model FLOPs per token of a Mamba-2 or gated DeltaNet mixer (0 for none), as Megatron's
    ``num_floating_point_operations`` counts them (megatron/training/training.py, megatron-core
    0.19.2: ``mamba_layer_flops``, ``gdn_layer_flops``): the projections, Mamba's scan as
    ``7 d_inner N``, gated DeltaNet's conv and ``4 n_v d_v^2`` for its delta rule (KDA, which
    Megatron has no layer for, alike: its projections of :meth:`ModelSpec.kda_params`, its three
    convolutions and ``4 H d^2``, :func:`cost_models.delta_rule.kda_block`). Megatron's
    formula takes ``d_inner = 2 h``; this one the model's ``H x P`` (equal for expand 2). Megatron has
    no Mamba-1: its four projections, conv and selective scan
    (:data:`cost_models.ssm.SELECTIVE_SCAN_FLOP_PER_STATE` per state element) are counted alike."""
    h = model.hidden_size
    if mixer == "mamba" and model.mamba_version == 1:
        di, n, r = model.mamba_inner_size, model.mamba_state_dim, model.mamba_dt_rank
        projections = 2 * (h * 2 * di + di * (r + 2 * n) + r * di + di * h)
        return projections + di * (2 * model.mamba_conv_kernel + SELECTIVE_SCAN_FLOP_PER_STATE * n)
    if mixer == "mamba":
        di, n, g = model.mamba_inner_size, model.mamba_state_dim, model.mamba_num_groups
        return 2 * h * (2 * di + 2 * g * n + model.mamba_num_heads) + 7 * di * n + 2 * di * h
    if mixer == "gdn":
        nv, dv = model.linear_num_value_heads, model.linear_value_head_dim
        k, v = model.linear_num_key_heads * model.linear_key_head_dim, nv * dv
        conv = model.linear_conv_kernel_dim * (2 * k + v)
        return 2 * (h * (2 * k + 2 * v + 2 * nv) + conv + 4 * nv * dv * dv + h * v)
    if mixer == "kda":
        heads, d = model.linear_num_key_heads, model.linear_key_head_dim
        p = heads * d
        proj = h * (3 * p + heads + 2 * d) + 2 * d * p + p * h
        return 2 * (proj + model.linear_conv_kernel_dim * 3 * p + 4 * heads * d * d)
    return 0.0


def mtp_flop_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward model FLOPs per token of the multi-token prediction modules: per module Megatron's
    ``3h + 2h^2`` (norms, ``eh_proj``) times 2, one layer of the last layer's kind with full
    attention (a sparse-attention layer stays sparse), and the logits ``2 h V`` (Megatron
    ``num_floating_point_operations``)."""
    if not model.mtp_num_layers:
        return 0.0
    h = model.hidden_size
    last = model.num_layers - 1
    layer = layer_flop_per_token(model, last, seq_length)
    if model.is_local_attention_layer(last):
        layer += 2 * (seq_length - model.attention_span(last, seq_length)) * model.core_attention_width
    return model.mtp_num_layers * (2 * (3 * h + 2 * h * h) + layer + 2 * h * model.vocab_size)


def model_flop_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward model FLOPs per token: all decoder layers, the logits and the MTP modules."""
    per_token = sum(layer_flop_per_token(model, i, seq_length) for i in range(model.num_layers))
    return per_token + 2 * model.hidden_size * model.vocab_size + mtp_flop_per_token(model, seq_length)


def model_flop_per_iteration(model: ModelSpec, job: JobSpec) -> float:
    """Model FLOPs of one iteration (Megatron's ``num_floating_point_operations``; no recompute):
    three times (forward, input and weight gradients) :func:`model_flop_per_token` per token.

    For a GPT with ffn = 4h and MHA this is ``72 B s L h^2 (1 + s/(6h) + V/(12 L h))``
    (Narayanan et al. 2021; Korthikanti et al. 2022 eq. 7). Packed sequences count core attention
    over their documents (``JobSpec.doc_length``); a LoRA job :func:`lora_flop_per_token`.
    """
    if job.is_lora:
        return lora_flop_per_token(model, job) * job.tokens_per_step
    return 3 * model_flop_per_token(model, job.doc_length) * job.tokens_per_step


def lora_flop_per_token(model: ModelSpec, job: JobSpec) -> float:
    """Model FLOPs per token of a LoRA iteration: Megatron-Bridge's count
    (``src/megatron/bridge/training/utils/flop_utils.py``, ``transformer_flops``: the frozen GEMMs
    and logits at 2/3 of training, forward and input gradient; core attention in full), plus the
    adapters' forward, input- and weight-gradient GEMMs, which Bridge leaves out
    (:func:`cost_models.adapters.adapter_flop_per_token`, under 0.1% at rank 16)."""
    doc = job.doc_length
    total = 2 * 2 * model.hidden_size * model.vocab_size
    for i in range(model.num_layers):
        core = 2 * model.attention_span(i, doc) * model.core_attention_width
        total += 2 * (layer_flop_per_token(model, i, doc) - core) + 3 * core
    return total + 3 * model.num_layers * adapter_flop_per_token(model, job)


def hardware_flop_per_iteration(
    model: ModelSpec, job: JobSpec, recompute: str, recomputed_fraction: float = 1.0
) -> float:
    """Model FLOPs plus the forward passes that recomputation repeats (hardware FLOPs, HFU).

    Full recompute of every layer repeats each decoder layer's forward (a third of its model
    FLOPs), giving Narayanan et al. 2021 eq. (3): ``96 B s L h^2 (1 + s/(6h) + V/(16 L h))`` for GPT.
    Selective recompute repeats the attention score and value products, ``4 s q`` per token per
    layer (Korthikanti et al. 2022 eq. 8). Per-op selective recompute repeats the GEMMs its policy
    does not keep (:func:`cost_models.recompute.op_sac_recomputed_flop_per_token`).
    """
    model_flop = model_flop_per_iteration(model, job)
    if recompute == "op":
        redone = op_sac.op_sac_recomputed_flop_per_token(model)
        return model_flop + recomputed_fraction * redone * job.tokens_per_step
    if recompute == "full":
        heads = (1 + model.mtp_num_layers) * 3 * 2 * model.hidden_size * model.vocab_size
        if job.is_lora:  # the decoder layers' forward with their adapters, once more
            forward = model_flop_per_token(model, job.doc_length) - heads / 3
            forward += model.num_layers * adapter_flop_per_token(model, job)
            return model_flop + recomputed_fraction * forward * job.tokens_per_step
        logits = heads * job.tokens_per_step
        return model_flop + recomputed_fraction * (model_flop - logits) / 3
    if recompute == "selective":
        s = job.doc_length
        core = sum(
            2 * model.attention_span(i, s) * model.core_attention_width
            for i in range(model.num_layers)
            if "attention" in model.layer_parts(i)[0].split("+")
        )
        return model_flop + core * job.tokens_per_step
    return model_flop
