"""Typed access to a Hugging Face ``config.json`` mapping, shared by the importers
(:mod:`planner.inputs.hf_config`, :mod:`planner.inputs.hf_hybrid`): required and optional positive
integers bounded by the planner field each key maps to (:data:`HF_KEYS`), true/false flags, and the
local/global layer period Megatron's ``--window-attn-skip-freq`` expresses. Errors are one-line
:class:`~planner.inputs.errors.SpecError` naming the file and key."""

from __future__ import annotations

from planner.inputs.errors import SpecError
from planner.inputs.validation import check_number, limit


class Fields:
    """Typed access to one config mapping (required / optional positive integers)."""

    def __init__(self, data: dict, where: str, model_type: str) -> None:
        self.data, self.where, self.mt = data, where, model_type

    def need(self, key: str, *alts: str) -> int:
        """A required positive integer field (the first of ``key`` and ``alts`` present)."""
        for k in (key, *alts):
            if self.data.get(k) is not None:
                return check_number(
                    self.data[k], self.where, k, integer=True, positive=True, maximum=hf_limit(k)
                )
        raise SpecError(f"{self.where}: missing required key '{key}' for model_type '{self.mt}'")

    def opt(self, key: str, default: int = 0, zero_is_absent: bool = True) -> int:
        """An optional positive integer field (``default`` when absent, null or, unless
        ``zero_is_absent`` is False, 0: the keys whose 0 Hugging Face's own code reads as a value,
        such as ``num_key_value_heads``, whose 0 its attention divides by, are refused at 0)."""
        value = self.data.get(key)
        if value is None or (zero_is_absent and not value):
            return default
        return check_number(
            self.data[key], self.where, key, integer=True, positive=True, maximum=hf_limit(key)
        )

    def flag(self, key: str, default: bool) -> bool:
        """A true/false field (``default`` when absent)."""
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(f"{self.where}: key '{key}': expected true/false, got {value!r}"[:300])
        return value


def mla_fields(f: Fields) -> dict[str, int | bool]:
    """Multi-head latent attention as DeepSeek-V2/V3's config names it (``q_lora_rank`` null: no
    query compression; ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), with its latent
    RMSNorms (``q_a_layernorm`` / ``kv_a_layernorm``; Megatron ``--qk-layernorm``) and the value
    width as ``kv_channels``; Kimi Linear's MLA layers use the same keys."""
    return dict(
        kv_channels=f.need("v_head_dim"),
        qk_layernorm=True,
        multi_latent_attention=True,
        q_lora_rank=f.opt("q_lora_rank"),
        kv_lora_rank=f.need("kv_lora_rank"),
        qk_head_dim=f.need("qk_nope_head_dim"),
        qk_pos_emb_head_dim=f.need("qk_rope_head_dim"),
        v_head_dim=f.need("v_head_dim"),
    )


def skip_freq(local: list[bool], where: str, key: str) -> int:
    """Megatron's ``--window-attn-skip-freq`` N for a per-layer local/global list: layer i (0-based)
    is global iff ``(i + 1) % N == 0``; 0 when every layer is local."""
    if all(local):
        return 0
    n = local.index(False) + 1
    if [bool((i + 1) % n) for i in range(len(local))] != local:
        raise SpecError(
            f"{where}: key '{key}': the local/global layer pattern is not periodic with one global layer "
            "every N (what Megatron's --window-attn-skip-freq N expresses)"
        )
    return n


HF_KEYS = {
    "n_routed_experts": "num_experts",
    "n_shared_experts": "num_experts",
    "first_k_dense_replace": "num_layers",
    "qk_nope_head_dim": "qk_head_dim",
    "qk_rope_head_dim": "qk_pos_emb_head_dim",
    "num_nextn_predict_layers": "mtp_num_layers",
    "sliding_window": "window_size",
    "attention_chunk_size": "window_size",
    "intermediate_size_mlp": "ffn_hidden_size",
    "interleave_moe_layer_step": "moe_layer_freq",
    "no_rope_layer_interval": "num_layers",
    "experts_per_token": "moe_router_topk",
    "num_hidden_layers": "num_layers",
    "n_layer": "num_layers",
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_inner": "ffn_hidden_size",
    "intermediate_size": "ffn_hidden_size",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "num_key_value_heads": "num_query_groups",
    "head_dim": "kv_channels",
    "num_local_experts": "num_experts",
    "num_experts_per_tok": "moe_router_topk",
    "decoder_sparse_step": "moe_layer_freq",
    "n_positions": "max_position_embeddings",
    "ssm_state_size": "mamba_state_dim",
    "n_groups": "mamba_num_groups",
    "conv_kernel": "mamba_conv_kernel",
    "chunk_size": "mamba_chunk_size",
    "attention_head_dim": "kv_channels",
    "full_attention_interval": "linear_attention_freq",
    "sliding_window_pattern": "window_attn_skip_freq",
    "n_ctx": "max_position_embeddings",
    "model_max_length": "max_position_embeddings",
    "mamba_n_heads": "mamba_num_heads",
    "mamba_d_head": "mamba_head_dim",
    "mamba_n_groups": "mamba_num_groups",
    "mamba_d_ssm": "ffn_hidden_size",
    "mamba_expand": "mamba_expand",
    "num_experts_per_token": "moe_router_topk",
    "num_shared_experts": "num_experts",
    "short_conv_kernel_size": "linear_conv_kernel_dim",
    "mamba_d_state": "mamba_state_dim",
    "mamba_d_conv": "mamba_conv_kernel",
    "attn_layer_period": "num_layers",
    "index_n_heads": "dsa_indexer_n_heads",
    "index_head_dim": "dsa_indexer_head_dim",
    "index_topk": "dsa_indexer_topk",
    "expert_layer_period": "num_layers",
}


def hf_limit(hf_key: str) -> float | None:
    """The bound of the planner field an HF ``config.json`` key maps to."""
    return limit(HF_KEYS.get(hf_key, hf_key))
