"""A model as a mapping: the ``model:`` section of model YAML files and plan files, read strictly
(:func:`model_from_mapping`, :func:`validate_model`) and written back (:func:`model_to_mapping`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.documents import SCHEMA_VERSION, Reader, check_header
from planner.inputs.errors import SpecError
from planner.inputs.layer_pattern import PatternError, parse_pattern, pattern_text
from planner.inputs.model_spec import (
    ACTIVATIONS,
    HYBRID_SYMBOLS,
    LINEAR_ATTENTION_TYPES,
    NORMALIZATIONS,
    POSITION_EMBEDDINGS,
    SOFTMAX_TYPES,
    WINDOW_TYPES,
    ModelSpec,
)


def model_from_mapping(data: dict, where: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a planner model mapping (the preset/YAML schema)."""
    r = Reader(data, where)
    check_header(r, "model")
    r.get("source", str, "")
    r.get("description", str, "")
    hidden = r.get("hidden_size", int, positive=True)
    heads = r.get("num_attention_heads", int, positive=True)
    kv_default = hidden // heads
    num_experts = r.get("num_experts", int, 0)
    ffn = r.get("ffn_hidden_size", int, 4 * hidden, positive=True)
    spec = ModelSpec(
        name=r.get("name", str),
        num_layers=r.get("num_layers", int, positive=True),
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=r.get("num_query_groups", int, heads, positive=True),
        kv_channels=r.get("kv_channels", int, kv_default, positive=True),
        vocab_size=r.get("vocab_size", int, positive=True),
        max_position_embeddings=r.get("max_position_embeddings", int, positive=True),
        activation=r.get("activation", str, "gelu", choices=ACTIVATIONS),
        normalization=r.get("normalization", str, "layernorm", choices=NORMALIZATIONS),
        position_embedding_type=r.get(
            "position_embedding_type", str, "learned_absolute", choices=POSITION_EMBEDDINGS
        ),
        rotary_base=r.get("rotary_base", int, 10000, positive=True),
        untie_embeddings_and_output_weights=r.get("untie_embeddings_and_output_weights", bool, False),
        add_bias_linear=r.get("add_bias_linear", bool, True),
        add_qkv_bias=r.get("add_qkv_bias", bool, False),
        qk_layernorm=r.get("qk_layernorm", bool, False),
        num_experts=num_experts,
        moe_router_topk=r.get("moe_router_topk", int, 2 if num_experts else 0),
        moe_ffn_hidden_size=r.get("moe_ffn_hidden_size", int, ffn if num_experts else 0),
        moe_shared_expert_intermediate_size=r.get("moe_shared_expert_intermediate_size", int, 0),
        moe_layer_freq=r.get("moe_layer_freq", int, 1, positive=True),
        moe_expert_capacity_factor=r.get("moe_expert_capacity_factor", float, 0.0),
        **_frontier_fields(r),
        **_hybrid_fields(r),
    )
    r.done()
    validate_model(spec, where)
    return spec


def _frontier_fields(r: Reader) -> dict[str, Any]:
    """MLA, layer patterns, local attention, sinks and MTP (all optional; docs/models.md)."""
    return dict(
        moe_layer_pattern=_layer_pattern(r, "moe_layer_pattern", "a list of 0 (dense) and 1 (MoE) entries"),
        multi_latent_attention=r.get("multi_latent_attention", bool, False),
        q_lora_rank=r.get("q_lora_rank", int, 0),
        kv_lora_rank=r.get("kv_lora_rank", int, 0),
        qk_head_dim=r.get("qk_head_dim", int, 0),
        qk_pos_emb_head_dim=r.get("qk_pos_emb_head_dim", int, 0),
        v_head_dim=r.get("v_head_dim", int, 0),
        window_size=r.get("window_size", int, 0),
        window_attn_skip_freq=r.get("window_attn_skip_freq", int, 0),
        window_type=r.get("window_type", str, "sliding", choices=WINDOW_TYPES),
        softmax_type=r.get("softmax_type", str, "vanilla", choices=SOFTMAX_TYPES),
        attention_dropout=r.get("attention_dropout", float, 0.1, maximum=1.0),
        mtp_num_layers=r.get("mtp_num_layers", int, 0),
        dsa_indexer_n_heads=r.get("dsa_indexer_n_heads", int, 0),
        dsa_indexer_head_dim=r.get("dsa_indexer_head_dim", int, 0),
        dsa_indexer_topk=r.get("dsa_indexer_topk", int, 0),
    )


def _layer_pattern(r: Reader, key: str, expected: str) -> tuple[int, ...]:
    """A per-layer 0/1 pattern: Megatron's list grammar (:mod:`planner.inputs.layer_pattern`) or a
    YAML list of 0/1 entries (``expected`` says what they mean)."""
    raw = r.get(key, (str, list), "")
    try:
        if isinstance(raw, list):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in raw):
                raise PatternError(expected)
            return tuple(raw)
        return parse_pattern(raw) if raw else ()
    except PatternError as exc:
        raise SpecError(f"{r.where}: key '{key}': {exc}") from None


def _hybrid_fields(r: Reader) -> dict[str, Any]:
    """Hybrid layer patterns, Mamba-2 and gated DeltaNet layers (all optional; docs/models.md).
    ``hybrid_override_pattern`` (Megatron's deprecated flag, Hugging Face's key) is read as
    ``hybrid_layer_pattern``."""
    pattern = r.get("hybrid_layer_pattern", str, "")
    old = r.get("hybrid_override_pattern", str, "")
    if pattern and old:
        raise SpecError(
            f"{r.where}: keys 'hybrid_layer_pattern' and 'hybrid_override_pattern' are both set; "
            "give one (hybrid_override_pattern is the deprecated name)"
        )
    out: dict[str, Any] = {"hybrid_layer_pattern": pattern or old}
    for key in ("mamba_state_dim", "mamba_head_dim", "mamba_num_heads", "mamba_num_groups"):
        out[key] = r.get(key, int, 0)
    out["mamba_conv_kernel"] = r.get("mamba_conv_kernel", int, 4, positive=True)
    out["mamba_chunk_size"] = r.get("mamba_chunk_size", int, 128, positive=True)
    out["mamba_version"] = r.get("mamba_version", int, 2, choices=(1, 2))
    out["parallel_mamba_attention"] = r.get("parallel_mamba_attention", bool, False)
    out["mamba_expand"] = r.get("mamba_expand", int, 0)
    out["mamba_dt_rank"] = r.get("mamba_dt_rank", int, 0)
    out["linear_attention_freq"] = r.get("linear_attention_freq", int, 0)
    for key in (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
    ):
        out[key] = r.get(key, int, 0)
    out["linear_conv_kernel_dim"] = r.get("linear_conv_kernel_dim", int, 4, positive=True)
    out["linear_attention_pattern"] = _layer_pattern(
        r, "linear_attention_pattern", "a list of 0 (softmax attention) and 1 (linear attention) entries"
    )
    out["linear_attention_type"] = r.get(
        "linear_attention_type", str, "gated_delta_net", choices=LINEAR_ATTENTION_TYPES
    )
    out["attention_output_gate"] = r.get("attention_output_gate", bool, False)
    out["moe_shared_expert_gate"] = r.get("moe_shared_expert_gate", bool, False)
    return out


def _validate_hybrid(m: ModelSpec, where: str) -> None:
    """Hybrid patterns, Mamba-2 and gated DeltaNet fields; each message names the fields."""
    pattern = m.hybrid_layer_pattern
    bad = sorted(set(pattern) - set(HYBRID_SYMBOLS))
    if bad:
        raise SpecError(
            f"{where}: key 'hybrid_layer_pattern': symbol {bad[0]!r} is not allowed; allowed values: "
            "M (Mamba-2), G (gated DeltaNet), * (attention), - (MLP), E (MoE)"
        )
    if pattern and len(pattern) != m.num_layers:
        raise SpecError(
            f"{where}: hybrid_layer_pattern has {len(pattern)} layers but num_layers is {m.num_layers} "
            "(each symbol is one layer)"
        )
    if pattern and m.has_linear_attention:
        raise SpecError(
            f"{where}: linear_attention_freq/linear_attention_pattern and hybrid_layer_pattern are both "
            "set; a hybrid pattern places gated DeltaNet layers with G"
        )
    if pattern and (m.moe_layer_pattern or m.moe_layer_freq != 1):
        raise SpecError(
            f"{where}: moe_layer_pattern/moe_layer_freq do not apply with hybrid_layer_pattern (E)"
        )
    if pattern and ("E" in pattern) != m.is_moe:
        raise SpecError(
            f"{where}: hybrid_layer_pattern {'has E (MoE) layers but num_experts is 0' if 'E' in pattern else 'has no E layer but num_experts is set'}"
        )
    if pattern and (m.window_size or m.mtp_num_layers):
        raise SpecError(f"{where}: window_size and mtp_num_layers are not priced with hybrid_layer_pattern")
    if m.parallel_mamba_attention and (pattern or m.has_linear_attention or m.mamba_version != 2):
        raise SpecError(
            f"{where}: parallel_mamba_attention (attention and Mamba-2 in every layer) does not apply with "
            "hybrid_layer_pattern, linear attention or mamba_version 1"
        )
    has_mamba = "M" in pattern or m.parallel_mamba_attention
    if m.mamba_version == 1:
        _validate_mamba1(m, where)
        _validate_linear(m, where)
        return
    if m.mamba_expand or m.mamba_dt_rank:
        raise SpecError(f"{where}: mamba_expand and mamba_dt_rank are Mamba-1 fields; set mamba_version: 1")
    mamba = (m.mamba_state_dim, m.mamba_head_dim, m.mamba_num_heads, m.mamba_num_groups)
    if has_mamba and not all(mamba):
        raise SpecError(
            f"{where}: Mamba-2 mixers (M in hybrid_layer_pattern, or parallel_mamba_attention): "
            "mamba_state_dim, mamba_head_dim, mamba_num_heads and mamba_num_groups must be positive"
        )
    if has_mamba and m.mamba_num_heads % m.mamba_num_groups:
        raise SpecError(
            f"{where}: mamba_num_heads ({m.mamba_num_heads}) must be divisible by mamba_num_groups "
            f"({m.mamba_num_groups})"
        )
    if not has_mamba and any(mamba):
        raise SpecError(
            f"{where}: mamba_* fields are set but no layer has a Mamba mixer (M in hybrid_layer_pattern, or "
            "parallel_mamba_attention)"
        )
    _validate_linear(m, where)


def _validate_mamba1(m: ModelSpec, where: str) -> None:
    """Mamba-1 layers (``mamba_version: 1``): state, expand and dt rank, no Mamba-2 heads or groups."""
    if "M" not in m.hybrid_layer_pattern:
        raise SpecError(f"{where}: mamba_version 1 is set but hybrid_layer_pattern has no M layer")
    if not (m.mamba_state_dim and m.mamba_expand and m.mamba_dt_rank):
        raise SpecError(
            f"{where}: mamba_version 1 (Mamba-1) layers need mamba_state_dim, mamba_expand and mamba_dt_rank"
        )
    if m.mamba_head_dim or m.mamba_num_heads or m.mamba_num_groups:
        raise SpecError(
            f"{where}: mamba_head_dim, mamba_num_heads and mamba_num_groups are Mamba-2 fields; Mamba-1 "
            "(mamba_version 1) has none"
        )


def _validate_linear(m: ModelSpec, where: str) -> None:
    """Gated DeltaNet fields."""
    pattern = m.hybrid_layer_pattern
    linear = (
        m.linear_num_key_heads,
        m.linear_num_value_heads,
        m.linear_key_head_dim,
        m.linear_value_head_dim,
    )
    has_gdn = "G" in pattern or m.linear_attention_freq > 1 or any(m.linear_attention_pattern)
    if m.linear_attention_freq == 1:
        raise SpecError(f"{where}: linear_attention_freq 1 makes every layer softmax attention; use 0")
    _validate_linear_pattern(m, where)
    if has_gdn and not all(linear):
        raise SpecError(
            f"{where}: gated DeltaNet layers need linear_num_key_heads, linear_num_value_heads, "
            "linear_key_head_dim and linear_value_head_dim"
        )
    if has_gdn and m.linear_num_value_heads % m.linear_num_key_heads:
        raise SpecError(
            f"{where}: linear_num_value_heads ({m.linear_num_value_heads}) must be a multiple of "
            f"linear_num_key_heads ({m.linear_num_key_heads})"
        )
    if not has_gdn and any(linear):
        raise SpecError(
            f"{where}: linear_* fields are set but no layer is gated DeltaNet (G in hybrid_layer_pattern "
            "or linear_attention_freq)"
        )


def _validate_linear_pattern(m: ModelSpec, where: str) -> None:
    """``linear_attention_pattern`` (one entry a layer, not with ``linear_attention_freq``) and KDA's
    shape (as many value heads as key heads, of the key width: vLLM ``KimiDeltaAttention``)."""
    lp = m.linear_attention_pattern
    if lp and len(lp) != m.num_layers:
        raise SpecError(
            f"{where}: linear_attention_pattern has {len(lp)} entries but num_layers is {m.num_layers}"
        )
    if lp and m.linear_attention_freq:
        raise SpecError(f"{where}: linear_attention_pattern and linear_attention_freq are both set; give one")
    if m.linear_attention_type != "kda":
        return
    if not any(lp) and m.linear_attention_freq < 2:
        raise SpecError(
            f"{where}: linear_attention_type is kda but no layer is linear attention (linear_attention_freq "
            "or linear_attention_pattern)"
        )
    if (m.linear_num_value_heads, m.linear_value_head_dim) != (m.linear_num_key_heads, m.linear_key_head_dim):
        raise SpecError(
            f"{where}: linear_attention_type kda needs linear_num_value_heads = linear_num_key_heads and "
            "linear_value_head_dim = linear_key_head_dim (KDA's q, k and v share one head shape)"
        )


def validate_model(m: ModelSpec, where: str) -> None:
    """Cross-field checks; each message names both fields."""
    _validate_hybrid(m, where)
    if not 0.0 <= m.attention_dropout < 1.0:
        raise SpecError(
            f"{where}: key 'attention_dropout': {m.attention_dropout!r} is not a probability in [0, 1)"
        )
    if m.moe_shared_expert_gate and not (m.num_experts and m.moe_shared_expert_intermediate_size):
        raise SpecError(
            f"{where}: key 'moe_shared_expert_gate': true needs shared experts "
            "(num_experts and moe_shared_expert_intermediate_size > 0)"
        )
    if m.num_attention_heads % m.num_query_groups:
        raise SpecError(
            f"{where}: num_attention_heads ({m.num_attention_heads}) must be divisible by "
            f"num_query_groups ({m.num_query_groups})"
        )
    if m.num_experts and not (1 <= m.moe_router_topk <= m.num_experts):
        raise SpecError(
            f"{where}: moe_router_topk ({m.moe_router_topk}) must be in 1..num_experts ({m.num_experts})"
        )
    if not m.num_experts and m.moe_router_topk:
        raise SpecError(f"{where}: moe_router_topk is set but num_experts is 0")
    if m.moe_layer_pattern and len(m.moe_layer_pattern) != m.num_layers:
        raise SpecError(
            f"{where}: moe_layer_pattern has {len(m.moe_layer_pattern)} entries but num_layers is {m.num_layers}"
        )
    if m.moe_layer_pattern and not m.num_experts:
        raise SpecError(f"{where}: moe_layer_pattern is set but num_experts is 0")
    mla = (m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim)
    if m.multi_latent_attention and not all(mla[1:]):
        raise SpecError(
            f"{where}: multi_latent_attention needs kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim "
            "and v_head_dim (q_lora_rank 0 = no query compression)"
        )
    if not m.multi_latent_attention and any(mla):
        raise SpecError(
            f"{where}: q_lora_rank/kv_lora_rank/qk_head_dim/qk_pos_emb_head_dim/v_head_dim "
            "are set but multi_latent_attention is false"
        )
    if m.window_attn_skip_freq and not m.window_size:
        raise SpecError(f"{where}: window_attn_skip_freq is set but window_size is 0")
    if m.mtp_num_layers and m.mtp_num_layers > m.num_layers:
        raise SpecError(f"{where}: mtp_num_layers ({m.mtp_num_layers}) exceeds num_layers ({m.num_layers})")
    dsa = (m.dsa_indexer_n_heads, m.dsa_indexer_head_dim, m.dsa_indexer_topk)
    if any(dsa) and not all(dsa):
        raise SpecError(
            f"{where}: DeepSeek sparse attention needs dsa_indexer_n_heads, dsa_indexer_head_dim and "
            "dsa_indexer_topk together"
        )
    if any(dsa) and not m.multi_latent_attention:
        raise SpecError(
            f"{where}: dsa_indexer_* fields are set but multi_latent_attention is false (DeepSeek "
            "sparse attention is priced for MLA only)"
        )
    if any(dsa) and m.dsa_indexer_head_dim < m.qk_pos_emb_head_dim:
        raise SpecError(
            f"{where}: dsa_indexer_head_dim ({m.dsa_indexer_head_dim}) is below qk_pos_emb_head_dim "
            f"({m.qk_pos_emb_head_dim}); the indexer rotates its first qk_pos_emb_head_dim channels"
        )


def rope_theta_of(data: dict, where: str) -> int:
    """``rope_theta`` of a Hugging Face config (``transformers`` LlamaConfig & co., default 10000;
    newer configs nest it in ``rope_parameters``) as Megatron's integer ``--rotary-base``."""
    nested = data.get("rope_parameters")
    theta = data.get("rope_theta", nested.get("rope_theta") if isinstance(nested, dict) else None)
    if theta is None:
        return 10000
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 0 < theta < float("inf"):
        raise SpecError(f"{where}: key 'rope_theta': expected a positive number, got {theta!r}"[:300])
    if theta != int(theta) or theta > 10**12:
        raise SpecError(
            f"{where}: key 'rope_theta': {theta!r} is not an integer; Megatron's --rotary-base takes an integer"[
                :300
            ]
        )
    return int(theta)


MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "vocab_size",
    "max_position_embeddings",
    "activation",
    "normalization",
    "position_embedding_type",
    "rotary_base",
    "untie_embeddings_and_output_weights",
    "add_bias_linear",
    "add_qkv_bias",
    "qk_layernorm",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_expert_capacity_factor",
)


OPTIONAL_MODEL_FIELDS = (
    "moe_layer_pattern",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "window_size",
    "window_attn_skip_freq",
    "window_type",
    "softmax_type",
    "attention_dropout",
    "mtp_num_layers",
    "hybrid_layer_pattern",
    "mamba_state_dim",
    "mamba_head_dim",
    "mamba_num_heads",
    "mamba_num_groups",
    "mamba_conv_kernel",
    "mamba_chunk_size",
    "mamba_version",
    "mamba_expand",
    "mamba_dt_rank",
    "parallel_mamba_attention",
    "linear_attention_freq",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "linear_attention_pattern",
    "linear_attention_type",
    "attention_output_gate",
    "moe_shared_expert_gate",
    "dsa_indexer_n_heads",
    "dsa_indexer_head_dim",
    "dsa_indexer_topk",
)
"""Model fields written only when they differ from the default (MLA, layer patterns, local
attention, sinks, MTP), so plan files of models without them are unchanged."""


def optional_model_fields(m: ModelSpec) -> dict:
    """The :data:`OPTIONAL_MODEL_FIELDS` of ``m`` that are set, as file values (a layer pattern
    in Megatron's list grammar)."""
    defaults = ModelSpec(
        name="", num_layers=1, hidden_size=1, ffn_hidden_size=1, num_attention_heads=1,
        num_query_groups=1, kv_channels=1, vocab_size=1, max_position_embeddings=1,
    )  # fmt: skip
    out = {f: getattr(m, f) for f in OPTIONAL_MODEL_FIELDS if getattr(m, f) != getattr(defaults, f)}
    for key in ("moe_layer_pattern", "linear_attention_pattern"):
        if key in out:
            out[key] = pattern_text(getattr(m, key))
    return out


def model_to_mapping(m: ModelSpec) -> dict:
    out = {"schema_version": SCHEMA_VERSION, "kind": "model", "name": m.name}
    out.update({f: getattr(m, f) for f in MODEL_FIELDS})
    out.update(optional_model_fields(m))
    return out
