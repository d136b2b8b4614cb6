"""Hugging Face ``config.json`` import (:func:`load_hf_config`, no network): the classic decoders
(Llama, Mistral, Mixtral, Qwen2/3 and their MoE variants, Gemma, Nemotron, GPT-2, GPT-NeoX) and the
2024-25 architectures (:func:`load_frontier`): DeepSeek-V2/V3, DeepSeek-V3.2 (sparse attention) and
Kimi-K2 (MLA, shared experts, leading dense layers, MTP), GLM-4.5 / 4.6 / 4.7 (GQA, leading dense
layers, a shared expert, MTP), gpt-oss (sinks, alternating sliding windows), Llama 4 (``text_config``;
interleaved MoE with a shared expert, chunked attention), Phi-3, Gemma 3 (``gemma3``'s
``text_config`` or ``gemma3_text``; 5 local : 1 global attention, GeGLU), and the hybrid models of 2025:
Nemotron-H / Nemotron 3 (Mamba-2, attention, MLP and MoE layers in a hybrid pattern), Qwen3-Next
(gated DeltaNet and gated attention, 512 experts), Qwen3.5 / Qwen3.6 of 2026 (the same layers, dense
or MoE, with MTP; ``text_config`` of the conditional-generation checkpoints) and Jamba (Mamba-1 and attention layers, each with
an MLP or MoE), Kimi Linear (Kimi Delta Attention and MLA layers, 256 experts) and Falcon-H1
(attention and Mamba-2 side by side in every layer).

Field meanings follow the ``transformers`` configuration classes (``LlamaConfig``, ``GPT2Config``,
``DeepseekV3Config``, ``GptOssConfig``, ``Llama4TextConfig``, ``Phi3Config``, ...); Kimi-K2's
``kimi_k2`` config uses DeepSeek-V3's field names (its ``architectures`` is ``DeepseekV3ForCausalLM``).
Errors are one-line :class:`~planner.inputs.errors.SpecError` naming the file and key. The hybrid
families' parsers are in :mod:`planner.inputs.hf_hybrid`, the typed field access in
:mod:`planner.inputs.hf_fields`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.inputs.documents import read_document
from planner.inputs.errors import SpecError
from planner.inputs.hf_fields import Fields, mla_fields, skip_freq
from planner.inputs.hf_hybrid import falcon_h1, jamba, kimi_linear, nemotron_h, qwen3_5, qwen3_next
from planner.inputs.model_spec import ModelSpec
from planner.inputs.model_yaml import rope_theta_of, validate_model
from planner.inputs.validation import check_number

MODEL_TYPES = (
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "falcon_h1",
    "gemma3",
    "gemma3_text",
    "glm4_moe",
    "gpt_oss",
    "jamba",
    "kimi_k2",
    "kimi_linear",
    "llama4",
    "llama4_text",
    "nemotron_h",
    "phi3",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_next",
)


def load_frontier(data: dict, where: str, name: str) -> ModelSpec:
    """A :class:`ModelSpec` from the config mapping of one of :data:`MODEL_TYPES`."""
    mt = data["model_type"]
    flat_qwen3_5 = (
        mt in ("qwen3_5", "qwen3_5_moe") and "text_config" not in data and "num_hidden_layers" in data
    )
    if mt in ("llama4", "gemma3", "qwen3_5", "qwen3_5_moe") and not flat_qwen3_5:
        # (a text-only Qwen3.5 checkpoint, Qwen3_5MoeForCausalLM, writes the decoder's keys at the top)
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise SpecError(f"{where}: key 'text_config': model_type '{mt}' needs the text decoder's mapping")
        if mt.startswith("qwen3_5") and "tie_word_embeddings" not in text and "tie_word_embeddings" in data:
            text = {
                **text,
                "tie_word_embeddings": data["tie_word_embeddings"],
            }  # the wrapper's (small Qwen3.5)
        data, where = text, f"{where} (text_config)"
    if mt in ("gemma3", "gemma3_text"):
        data = {**GEMMA3_TEXT_DEFAULTS, **data}
    f = Fields(data, where, mt)
    if mt in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"):
        kwargs = _deepseek(f)
    elif mt == "gpt_oss":
        kwargs = _gpt_oss(f)
    elif mt == "glm4_moe":
        kwargs = _glm4_moe(f)
    elif mt in ("llama4", "llama4_text"):
        kwargs = _llama4(f)
    elif mt == "nemotron_h":
        kwargs = nemotron_h(f)
    elif mt == "qwen3_next":
        kwargs = qwen3_next(f)
    elif mt.startswith("qwen3_5"):
        kwargs = qwen3_5(f)
    elif mt == "jamba":
        kwargs = jamba(f)
    elif mt == "kimi_linear":
        kwargs = kimi_linear(f)
    elif mt == "falcon_h1":
        kwargs = falcon_h1(f)
    elif mt in ("gemma3", "gemma3_text"):
        kwargs = _gemma3(f)
    else:
        kwargs = _phi3(f)
    hidden, heads = f.need("hidden_size"), f.need("num_attention_heads")
    shape = {
        "activation": "swiglu",
        "position_embedding_type": "rope",
        "num_layers": 0,
        "max_position_embeddings": 0,
    }
    shape.update({k: kwargs.pop(k) for k in tuple(shape) if k in kwargs})
    spec = ModelSpec(
        name=name,
        num_layers=shape["num_layers"] or f.need("num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=f.need("vocab_size"),
        max_position_embeddings=shape["max_position_embeddings"] or f.need("max_position_embeddings"),
        activation=shape["activation"],
        normalization="rmsnorm",
        position_embedding_type=shape["position_embedding_type"],
        rotary_base=rope_theta_of(data, where),
        untie_embeddings_and_output_weights=not f.flag("tie_word_embeddings", False),
        **kwargs,
    )
    validate_model(spec, where)
    return spec


def _deepseek(f: Fields) -> dict[str, Any]:
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
        add_bias_linear=f.flag("attention_bias", False),
        **mla_fields(f),
        num_experts=routed,
        moe_router_topk=f.need("num_experts_per_tok") if routed else 0,
        moe_ffn_hidden_size=moe_ffn,
        moe_shared_expert_intermediate_size=f.opt("n_shared_experts") * moe_ffn,
        moe_layer_pattern=pattern if routed and not all(pattern) else (),
        mtp_num_layers=f.opt("num_nextn_predict_layers"),
        **_dsa(f),
    )


def _glm4_moe(f: Fields) -> dict[str, Any]:
    """GLM-4.5 / GLM-4.6 / GLM-4.7 (``Glm4MoeConfig``; Zhipu AI, GLM-4.5, arXiv:2508.06471): GQA
    with heads of ``head_dim`` (96 x 128 = 12288 wide at h 5120), biases on Q, K and V only
    (``attention_bias``), optional per-head QK norms (``use_qk_norm``), the first
    ``first_k_dense_replace`` layers dense MLPs of ``intermediate_size``, the rest MoE of
    ``n_routed_experts`` top ``num_experts_per_tok`` plus ``n_shared_experts`` shared experts of the
    routed width, and ``num_nextn_predict_layers`` MTP layers. Megatron-Bridge's GLM-4.5 bridge
    (``src/megatron/bridge/models/glm/glm45_bridge.py``) builds the same: ``moe_layer_freq`` from
    ``first_k_dense_replace``, shared experts of ``moe_intermediate_size``, MTP from
    ``num_nextn_predict_layers``, no linear biases but the QKV ones (``add_qkv_bias`` from
    ``attention_bias``). ``partial_rotary_factor`` (0.5) changes no cost."""
    layers, heads = f.need("num_hidden_layers"), f.need("num_attention_heads")
    routed, first_dense = f.need("n_routed_experts"), f.opt("first_k_dense_replace")
    moe_ffn = f.need("moe_intermediate_size")
    pattern = tuple(int(i >= first_dense) for i in range(layers))
    return dict(
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=f.opt("head_dim", f.need("hidden_size") // heads),
        add_bias_linear=False,
        add_qkv_bias=f.flag("attention_bias", False),
        qk_layernorm=f.flag("use_qk_norm", False),
        num_experts=routed,
        moe_router_topk=f.need("num_experts_per_tok"),
        moe_ffn_hidden_size=moe_ffn,
        moe_shared_expert_intermediate_size=f.opt("n_shared_experts") * moe_ffn,
        moe_layer_pattern=pattern if not all(pattern) else (),
        mtp_num_layers=f.opt("num_nextn_predict_layers"),
    )


def _dsa(f: Fields) -> dict[str, Any]:
    """DeepSeek-V3.2's sparse attention (``deepseek_v32``: DeepSeek-V3.2-Exp and DeepSeek-V3.2, the
    DeepSeek-V3 shape plus the lightning indexer, report Sec. 2.1): ``index_n_heads``,
    ``index_head_dim``, ``index_topk``; none for the other DeepSeek types."""
    if f.mt != "deepseek_v32":
        return {}
    return dict(
        dsa_indexer_n_heads=f.need("index_n_heads"),
        dsa_indexer_head_dim=f.need("index_head_dim"),
        dsa_indexer_topk=f.need("index_topk"),
    )


def _sliding_layers(f: Fields, layers: int, default: Callable[[], list[bool]]) -> tuple[list[bool], int]:
    """Which layers attend locally (``layer_types``: ``sliding_attention`` / ``full_attention`` per
    layer, as Hugging Face's gpt-oss and Gemma 3 configs write it; ``default()`` where the config
    predates the key) and the window (``sliding_window``; 0 when no layer is local)."""
    types = f.data.get("layer_types")
    if types is None:
        return _with_window(f, default())
    if (
        not isinstance(types, list)
        or len(types) != layers
        or not set(types) <= {"sliding_attention", "full_attention"}
    ):
        raise SpecError(
            f"{f.where}: key 'layer_types': expected {layers} entries of sliding_attention/full_attention"
        )
    return _with_window(f, [t == "sliding_attention" for t in types])


def _with_window(f: Fields, local: list[bool]) -> tuple[list[bool], int]:
    return local, (f.need("sliding_window") if any(local) else 0)


def _gpt_oss(f: Fields) -> dict[str, Any]:
    """gpt-oss (OpenAI gpt-oss model card, arXiv:2508.10925): GQA with biases and learned sinks,
    ``layer_types`` alternating ``sliding_attention`` (``sliding_window`` tokens) and
    ``full_attention``, every layer MoE with biased experts."""
    layers = f.need("num_hidden_layers")
    local, window = _sliding_layers(f, layers, lambda: [i % 2 == 0 for i in range(layers)])
    width = f.need("intermediate_size")
    return dict(
        ffn_hidden_size=width,
        num_query_groups=f.need("num_key_value_heads"),
        kv_channels=f.need("head_dim"),
        add_bias_linear=f.flag("attention_bias", True),
        softmax_type="learnable",
        window_size=window,
        window_attn_skip_freq=skip_freq(local, f.where, "layer_types") if window else 0,
        window_type="sliding",
        num_experts=f.need("num_local_experts"),
        moe_router_topk=f.need("num_experts_per_tok", "experts_per_token"),
        moe_ffn_hidden_size=width,
    )


def _llama4(f: Fields) -> dict[str, Any]:
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
        window_attn_skip_freq=skip_freq(local, f.where, "no_rope_layers") if chunk and any(local) else 0,
        window_type="chunked",
    )


GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": True,
    "rope_theta": 1_000_000,
    "attention_bias": False,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
}
"""``Gemma3TextConfig``'s defaults for the keys planner reads (transformers
models/gemma3/configuration_gemma3.py): the published multimodal configs (google/gemma-3-4b-pt,
-12b-pt, -27b-pt) give only the keys that differ in their ``text_config``, so their vocabulary,
context and tying are these."""
GELU_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu", "gelu_new", "gelu_fast")
"""The GELU spellings of ``hidden_activation`` (transformers ``ACT2FN``), gated in Gemma's MLP."""


def _gemma3(f: Fields) -> dict[str, Any]:
    """Gemma 3 text decoder (Gemma Team 2025, arXiv:2503.19786; ``Gemma3TextConfig`` /
    ``Gemma3MLP``): GQA of ``head_dim`` heads with QK norms, a GeGLU MLP (``gate_proj``,
    ``up_proj``, ``down_proj``, ``hidden_activation`` tanh-GELU), tied embeddings, no biases, and 5
    local : 1 global attention: ``layer_types`` where given (newer configs), else layer i is global
    iff ``(i + 1) % sliding_window_pattern == 0`` (transformers' own derivation of ``layer_types``),
    the local ones over ``sliding_window`` tokens (a query sees itself and ``sliding_window - 1``
    earlier tokens: ``sliding_window_mask_function``), as Megatron's ``--window-attn-skip-freq``
    reads it. Not priced: ``query_pre_attn_scalar`` (the softmax scale), the embedding scale by
    sqrt(h), the local layers' second RoPE base, logit soft-capping (null in Gemma 3), and the
    post-attention and post-MLP norms (2h parameters per layer beside the two planner counts, under
    0.01% of every Gemma 3 size)."""
    layers = f.need("num_hidden_layers")
    act = f.data.get("hidden_activation") or f.data.get("hidden_act")
    if act not in GELU_ACTIVATIONS:
        raise SpecError(
            f"{f.where}: key 'hidden_activation': {act!r} is not read for Gemma 3; allowed values: "
            + ", ".join(GELU_ACTIVATIONS)
        )
    local, window = _sliding_layers(
        f, layers, lambda: [(i + 1) % f.need("sliding_window_pattern") != 0 for i in range(layers)]
    )
    return dict(
        activation="geglu",
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=f.need("num_key_value_heads"),
        kv_channels=f.need("head_dim"),
        add_bias_linear=f.flag("attention_bias", False),
        qk_layernorm=True,
        window_size=window,
        window_attn_skip_freq=skip_freq(local, f.where, "layer_types") if window else 0,
        window_type="sliding",
    )


def _phi3(f: Fields) -> dict[str, Any]:
    """Phi-3 (arXiv:2404.14219): Llama-shaped (fused but equal-cost gate/up projection, no biases);
    ``sliding_window`` (when below the context) applies to every layer."""
    heads = f.need("num_attention_heads")
    window = f.opt("sliding_window")
    if window >= f.need("max_position_embeddings"):
        window = 0
    return dict(
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=f.opt("head_dim", f.need("hidden_size") // heads),
        add_bias_linear=False,
        window_size=window,
        window_type="sliding",
    )


_LLAMA_LIKE = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "nemotron",
)
"""``model_type`` values of Llama-shaped decoders (gated MLP, RoPE, GQA), read by :func:`_llama_like`."""


def load_hf_config(path: Path) -> ModelSpec:
    """Import a local Hugging Face ``config.json`` (no network).

    Supported ``model_type``: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2,
    gpt_neox, gemma, gemma2, nemotron, and (:func:`load_frontier`) deepseek_v2, deepseek_v3, deepseek_v32, falcon_h1,
    gemma3 (its ``text_config``), gemma3_text, glm4_moe, jamba, kimi_k2, kimi_linear, gpt_oss, llama4 (its ``text_config``),
    llama4_text, nemotron_h, phi3, qwen3_5 and qwen3_5_moe (their ``text_config``), qwen3_5_text,
    qwen3_5_moe_text, qwen3_next. Field meanings follow the
    ``transformers`` configuration classes of the same names.
    """
    data = read_document(path)
    where = str(path)
    mt = data.get("model_type")
    if not isinstance(mt, str):
        raise SpecError(f"{where}: key 'model_type': expected a string, got {type(mt).__name__} {mt!r}"[:300])
    name = _model_name(path)
    if mt in MODEL_TYPES:
        return load_frontier(data, where, name)
    f = Fields(data, where, mt)
    if mt in _LLAMA_LIKE:
        kwargs = _llama_like(f, name)
    elif mt == "gpt2":
        kwargs = _gpt2(f, name)
    elif mt == "gpt_neox":
        kwargs = _gpt_neox(f, name)
    else:
        supported = (
            "deepseek_v2, deepseek_v3, deepseek_v32, falcon_h1, gemma, gemma2, gemma3, gemma3_text, glm4_moe, gpt2, gpt_neox, "
            "gpt_oss, jamba, kimi_k2, "
            "kimi_linear, llama, llama4, llama4_text, mistral, mixtral, nemotron, nemotron_h, phi3, qwen2, qwen2_moe, "
            "qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_moe, qwen3_next"
        )
        raise SpecError(f"{where}: key 'model_type': {mt!r} is not supported; allowed values: {supported}")
    _check_fields(kwargs, data, where)
    spec = ModelSpec(**kwargs)
    validate_model(spec, where)
    return spec


def _model_name(path: Path) -> str:
    """The model's name: the config's folder, or the repository name of a Hugging Face hub cache
    path (``models--org--name/snapshots/<rev>/config.json``)."""
    if path.parent.parent.name == "snapshots" and path.parent.parent.parent.name.startswith("models--"):
        return path.parent.parent.parent.name.split("--")[-1]
    return path.parent.name or path.stem


def _llama_like(f: Fields, name: str) -> dict[str, Any]:
    """Llama-shaped decoders (``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``,
    ``GemmaConfig``, ``NemotronConfig`` and their MoE variants, :func:`_moe_fields`)."""
    data, mt = f.data, f.mt
    hidden = f.need("hidden_size")
    heads = f.need("num_attention_heads")
    act = data.get("hidden_act", data.get("hidden_activation", "silu"))
    window: dict[str, Any] = {}
    if mt == "nemotron":
        activation = "squared_relu" if act in ("relu2", "squared_relu") else "gelu"
    elif mt in ("gemma", "gemma2"):
        activation = "geglu"
        window = _gemma_gelu_and_window(f)
    else:
        activation = "swiglu"  # Llama-family MLPs gate with SiLU
    return dict(
        name=name,
        num_layers=f.need("num_hidden_layers"),
        hidden_size=hidden,
        ffn_hidden_size=f.need("intermediate_size"),
        num_attention_heads=heads,
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=f.opt("head_dim", hidden // heads),
        vocab_size=f.need("vocab_size"),
        max_position_embeddings=f.need("max_position_embeddings"),
        activation=activation,
        normalization="layernorm" if mt == "nemotron" else "rmsnorm",
        position_embedding_type="rope",
        rotary_base=rope_theta_of(data, f.where),
        untie_embeddings_and_output_weights=not data.get("tie_word_embeddings", mt.startswith("gemma")),
        add_bias_linear=bool(data.get("mlp_bias", False)) and bool(data.get("attention_bias", False)),
        add_qkv_bias=mt in ("qwen2", "qwen2_moe") or bool(data.get("attention_bias", False)),
        qk_layernorm=mt in ("qwen3", "qwen3_moe"),
        **window,
        **_moe_fields(f),
    )


def _gemma_gelu_and_window(f: Fields) -> dict[str, Any]:
    """Gemma and Gemma 2's MLP gates a GELU (``GemmaMLP`` / ``Gemma2MLP``: ``act_fn(gate_proj(x)) *
    up_proj(x)`` with ``hidden_activation``, tanh-GELU where the config leaves it null, as
    transformers models/gemma/modeling_gemma.py does; Gemma Team 2024, arXiv:2403.08295 Sec. 2
    "GeGLU activations"): a GeGLU, whatever ``hidden_act`` says. Gemma 2 (arXiv:2408.00118 Sec. 2,
    "local sliding window and global attention ... in every other layer") alternates
    ``sliding_window``-token local attention, from layer 0, with global layers: ``layer_types``
    where the config gives it, else transformers' ``Gemma2Config`` derivation (layer i local iff
    ``(i + 1) % 2``). Not priced: the attention and final logit soft-capping, the embedding scale
    and Gemma 2's post-norms."""
    act = f.data.get("hidden_activation") or f.data.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in GELU_ACTIVATIONS:
        raise SpecError(
            f"{f.where}: key 'hidden_activation': {act!r} is not read for {f.mt}; allowed values: "
            + ", ".join(GELU_ACTIVATIONS)
        )
    if f.mt != "gemma2":
        return {}
    layers = f.need("num_hidden_layers")
    local, window = _sliding_layers(f, layers, lambda: [bool((i + 1) % 2) for i in range(layers)])
    if not window:
        return {}
    return dict(
        window_size=window,
        window_attn_skip_freq=skip_freq(local, f.where, "layer_types"),
        window_type="sliding",
    )


def _moe_fields(f: Fields) -> dict[str, Any]:
    """The expert fields of the Llama-shaped MoE decoders: Mixtral (``MixtralConfig``: every layer
    MoE, experts of the dense width) and Qwen2/Qwen3-MoE (``Qwen3MoeConfig``: every
    ``decoder_sparse_step``-th layer, optional shared expert); none for the dense ones."""
    if f.mt == "mixtral":
        return dict(
            num_experts=f.need("num_local_experts"),
            moe_router_topk=f.need("num_experts_per_tok"),
            moe_ffn_hidden_size=f.need("intermediate_size"),
        )
    if f.mt in ("qwen2_moe", "qwen3_moe"):
        return dict(
            num_experts=f.need("num_experts"),
            moe_router_topk=f.need("num_experts_per_tok"),
            moe_ffn_hidden_size=f.need("moe_intermediate_size"),
            moe_layer_freq=f.opt("decoder_sparse_step", 1),
            moe_shared_expert_intermediate_size=f.opt("shared_expert_intermediate_size"),
            # Qwen2MoeSparseMoeBlock's shared_expert_gate (transformers models/qwen2_moe)
            moe_shared_expert_gate=f.mt == "qwen2_moe" and bool(f.opt("shared_expert_intermediate_size")),
        )
    return {}


def _gpt2(f: Fields, name: str) -> dict[str, Any]:
    """GPT-2 (``GPT2Config``: ``n_*`` field names, learned absolute positions, tied embeddings,
    biases, a 4 x hidden MLP unless ``n_inner``)."""
    hidden = f.need("n_embd", "hidden_size")
    return dict(
        name=name,
        num_layers=f.need("n_layer", "num_hidden_layers"),
        hidden_size=hidden,
        ffn_hidden_size=f.opt("n_inner", 4 * hidden),
        num_attention_heads=f.need("n_head"),
        num_query_groups=f.need("n_head"),
        kv_channels=hidden // f.need("n_head"),
        vocab_size=f.need("vocab_size"),
        max_position_embeddings=f.need("n_positions", "n_ctx"),
        activation="gelu",
        normalization="layernorm",
        position_embedding_type="learned_absolute",
        untie_embeddings_and_output_weights=False,
        add_bias_linear=True,
    )


def _gpt_neox(f: Fields, name: str) -> dict[str, Any]:
    """GPT-NeoX / Pythia (``GPTNeoXConfig``: multi-head attention, GELU MLP with biases, RoPE)."""
    hidden = f.need("hidden_size")
    heads = f.need("num_attention_heads")
    return dict(
        name=name,
        num_layers=f.need("num_hidden_layers"),
        hidden_size=hidden,
        ffn_hidden_size=f.need("intermediate_size"),
        num_attention_heads=heads,
        num_query_groups=heads,
        kv_channels=hidden // heads,
        vocab_size=f.need("vocab_size"),
        max_position_embeddings=f.need("max_position_embeddings"),
        activation="gelu",
        normalization="layernorm",
        position_embedding_type="rope",
        rotary_base=rope_theta_of(f.data, f.where),
        untie_embeddings_and_output_weights=not f.data.get("tie_word_embeddings", False),
        add_bias_linear=True,
    )


def _check_fields(kwargs: dict[str, Any], data: dict, where: str) -> None:
    """Check the planner fields read from ``data`` (derived ones such as hidden // heads and
    4 x hidden get the planner key's bound too) and the config's true/false keys."""
    for key, value in kwargs.items():
        if isinstance(value, (bool, str)):
            continue
        optional = key.startswith("moe_") or key == "num_experts"
        check_number(value, f"{where} (as planner's {key})", key, integer=True, positive=not optional)
    for key in ("tie_word_embeddings", "mlp_bias", "attention_bias"):
        if key in data and not isinstance(data[key], bool):
            raise SpecError(f"{where}: key '{key}': expected true/false, got {data[key]!r}"[:300])
