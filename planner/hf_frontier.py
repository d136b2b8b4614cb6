"""Hugging Face ``config.json`` import of the 2024-25 architectures: DeepSeek-V2/V3 and Kimi-K2
(MLA, shared experts, leading dense layers, MTP), gpt-oss (sinks, alternating sliding windows),
Llama 4 (``text_config``; interleaved MoE with a shared expert, chunked attention) and Phi-3.

Field meanings follow the ``transformers`` configuration classes (``DeepseekV3Config``,
``GptOssConfig``, ``Llama4TextConfig``, ``Phi3Config``); Kimi-K2's ``kimi_k2`` config uses
DeepSeek-V3's field names (its ``architectures`` is ``DeepseekV3ForCausalLM``). Called by
:func:`planner.loading.load_hf_config`; errors are one-line :class:`~planner.errors.SpecError`.
"""

from __future__ import annotations

from typing import Any

from planner.errors import SpecError
from planner.loading import _hf_limit, _rope_theta, validate_model
from planner.specs import ModelSpec
from planner.validation import check_number

MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "gpt_oss", "kimi_k2", "llama4", "llama4_text", "phi3")


class _Fields:
    """Typed access to one config mapping (required / optional positive integers)."""

    def __init__(self, data: dict, where: str, model_type: str) -> None:
        self.data, self.where, self.mt = data, where, model_type

    def need(self, key: str, *alts: str) -> int:
        for k in (key, *alts):
            if self.data.get(k) is not None:
                return check_number(
                    self.data[k], self.where, k, integer=True, positive=True, maximum=_hf_limit(k)
                )
        raise SpecError(f"{self.where}: missing required key '{key}' for model_type '{self.mt}'")

    def opt(self, key: str, default: int = 0) -> int:
        if not self.data.get(key):
            return default
        return check_number(
            self.data[key], self.where, key, integer=True, positive=True, maximum=_hf_limit(key)
        )

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(f"{self.where}: key '{key}': expected true/false, got {value!r}"[:300])
        return value


def load_frontier(data: dict, where: str, name: str) -> ModelSpec:
    """A :class:`ModelSpec` from the config mapping of one of :data:`MODEL_TYPES`."""
    mt = data["model_type"]
    if mt == "llama4":
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise SpecError(
                f"{where}: key 'text_config': model_type 'llama4' needs the text decoder's mapping"
            )
        data, where = text, f"{where} (text_config)"
    f = _Fields(data, where, mt)
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        kwargs = _deepseek(f)
    elif mt == "gpt_oss":
        kwargs = _gpt_oss(f)
    elif mt in ("llama4", "llama4_text"):
        kwargs = _llama4(f)
    else:
        kwargs = _phi3(f)
    hidden, heads = f.need("hidden_size"), f.need("num_attention_heads")
    spec = ModelSpec(
        name=name,
        num_layers=f.need("num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=f.need("vocab_size"),
        max_position_embeddings=f.need("max_position_embeddings"),
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding_type="rope",
        rotary_base=_rope_theta(data, where),
        untie_embeddings_and_output_weights=not f.flag("tie_word_embeddings", False),
        **kwargs,
    )
    validate_model(spec, where)
    return spec


def _deepseek(f: _Fields) -> dict[str, Any]:
    """DeepSeek-V2/V3 (arXiv:2405.04434, arXiv:2412.19437) and Kimi-K2: layer i is MoE when
    ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (``DeepseekV3DecoderLayer``);
    ``q_lora_rank`` null = no query compression; ``n_shared_experts`` experts of the routed width."""
    layers, heads = f.need("num_hidden_layers"), f.need("num_attention_heads")
    first_dense, freq = f.opt("first_k_dense_replace"), f.opt("moe_layer_freq", 1)
    routed = f.opt("n_routed_experts")
    moe_ffn = f.need("moe_intermediate_size") if routed else 0
    pattern = tuple(int(routed > 0 and i >= first_dense and i % freq == 0) for i in range(layers))
    return dict(
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=heads,
        kv_channels=f.need("v_head_dim"),
        add_bias_linear=f.flag("attention_bias", False),
        qk_layernorm=True,  # q_a_layernorm / kv_a_layernorm (Megatron: --qk-layernorm)
        multi_latent_attention=True,
        q_lora_rank=f.opt("q_lora_rank"),
        kv_lora_rank=f.need("kv_lora_rank"),
        qk_head_dim=f.need("qk_nope_head_dim"),
        qk_pos_emb_head_dim=f.need("qk_rope_head_dim"),
        v_head_dim=f.need("v_head_dim"),
        num_experts=routed,
        moe_router_topk=f.need("num_experts_per_tok") if routed else 0,
        moe_ffn_hidden_size=moe_ffn,
        moe_shared_expert_intermediate_size=f.opt("n_shared_experts") * moe_ffn,
        moe_layer_pattern=pattern if routed and not all(pattern) else (),
        mtp_num_layers=f.opt("num_nextn_predict_layers"),
    )


def _skip_freq(local: list[bool], where: str, key: str) -> int:
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


def _gpt_oss(f: _Fields) -> dict[str, Any]:
    """gpt-oss (OpenAI gpt-oss model card, arXiv:2508.10925): GQA with biases and learned sinks,
    ``layer_types`` alternating ``sliding_attention`` (``sliding_window`` tokens) and
    ``full_attention``, every layer MoE with biased experts."""
    layers = f.need("num_hidden_layers")
    types = f.data.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if (
        not isinstance(types, list)
        or len(types) != layers
        or not set(types) <= {"sliding_attention", "full_attention"}
    ):
        raise SpecError(
            f"{f.where}: key 'layer_types': expected {layers} entries of sliding_attention/full_attention"
        )
    local = [t == "sliding_attention" for t in types]
    window = f.need("sliding_window") if any(local) else 0
    width = f.need("intermediate_size")
    return dict(
        ffn_hidden_size=width,
        num_query_groups=f.need("num_key_value_heads"),
        kv_channels=f.need("head_dim"),
        add_bias_linear=f.flag("attention_bias", True),
        softmax_type="learnable",
        window_size=window,
        window_attn_skip_freq=_skip_freq(local, f.where, "layer_types") if window else 0,
        window_type="sliding",
        num_experts=f.need("num_local_experts"),
        moe_router_topk=f.need("num_experts_per_tok", "experts_per_token"),
        moe_ffn_hidden_size=width,
    )


def _llama4(f: _Fields) -> dict[str, Any]:
    """Llama 4 text decoder (``Llama4TextConfig``): MoE layers ``moe_layers`` or every
    ``interleave_moe_layer_step``-th from ``step - 1``; each MoE layer has a shared expert of the
    routed width (``intermediate_size``), dense layers ``intermediate_size_mlp``; RoPE layers
    (``no_rope_layers[i] == 1``, default all but every 4th) use chunked attention of
    ``attention_chunk_size`` tokens, the others attend globally (iRoPE)."""
    layers = f.need("num_hidden_layers")
    step = f.opt("interleave_moe_layer_step", 1)
    moe_layers = f.data.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    if not isinstance(moe_layers, list) or not all(
        isinstance(i, int) and 0 <= i < layers for i in moe_layers
    ):
        raise SpecError(f"{f.where}: key 'moe_layers': expected layer indices 0..{layers - 1}")
    pattern = tuple(int(i in set(moe_layers)) for i in range(layers))
    rope = f.data.get("no_rope_layers")
    if not rope:
        interval = f.opt("no_rope_layer_interval", 4)
        rope = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(rope, list) or len(rope) != layers or not set(rope) <= {0, 1}:
        raise SpecError(f"{f.where}: key 'no_rope_layers': expected {layers} entries of 0/1")
    chunk = f.opt("attention_chunk_size")
    local = [bool(r) for r in rope]
    expert = f.need("intermediate_size")
    return dict(
        ffn_hidden_size=f.need("intermediate_size_mlp", "intermediate_size"),
        num_query_groups=f.need("num_key_value_heads"),
        kv_channels=f.need("head_dim"),
        add_bias_linear=f.flag("attention_bias", False),
        num_experts=f.need("num_local_experts"),
        moe_router_topk=f.need("num_experts_per_tok"),
        moe_ffn_hidden_size=expert,
        moe_shared_expert_intermediate_size=expert,
        moe_layer_pattern=() if all(pattern) else pattern,
        window_size=chunk if any(local) else 0,
        window_attn_skip_freq=_skip_freq(local, f.where, "no_rope_layers") if chunk and any(local) else 0,
        window_type="chunked",
    )


def _phi3(f: _Fields) -> dict[str, Any]:
    """Phi-3 (arXiv:2404.14219): Llama-shaped (fused but equal-cost gate/up projection, no biases);
    ``sliding_window`` (when below the context) applies to every layer."""
    heads = f.need("num_attention_heads")
    window = f.opt("sliding_window")
    if window >= f.need("max_position_embeddings"):
        window = 0
    return dict(
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=f.opt("num_key_value_heads", heads),
        kv_channels=f.opt("head_dim", f.need("hidden_size") // heads),
        add_bias_linear=False,
        window_size=window,
        window_type="sliding",
    )
