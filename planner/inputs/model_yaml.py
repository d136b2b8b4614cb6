"""A model as a mapping: the ``model:`` section of model YAML files and plan files, read strictly
(:func:`model_from_mapping`, :func:`validate_model`) and written back (:func:`model_to_mapping`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.documents import SCHEMA_VERSION, Reader, check_header
from planner.inputs.errors import SpecError
from planner.inputs.layer_pattern import PatternError, parse_pattern, pattern_text
from planner.inputs.model_spec import (
    ACTIVATIONS,
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
    )
    r.done()
    validate_model(spec, where)
    return spec


def _frontier_fields(r: Reader) -> dict[str, Any]:
    """MLA, layer patterns, local attention, sinks and MTP (all optional; docs/models.md)."""
    raw = r.get("moe_layer_pattern", (str, list), "")
    try:
        if isinstance(raw, list):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in raw):
                raise PatternError("a list of 0 (dense) and 1 (MoE) entries")
            pattern = tuple(raw)
        else:
            pattern = parse_pattern(raw) if raw else ()
    except PatternError as exc:
        raise SpecError(f"{r.where}: key 'moe_layer_pattern': {exc}") from None
    return dict(
        moe_layer_pattern=pattern,
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
        mtp_num_layers=r.get("mtp_num_layers", int, 0),
    )


def validate_model(m: ModelSpec, where: str) -> None:
    """Cross-field checks; each message names both fields."""
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


def _rope_theta(data: dict, where: str) -> int:
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
    "mtp_num_layers",
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
    if "moe_layer_pattern" in out:
        out["moe_layer_pattern"] = pattern_text(m.moe_layer_pattern)
    return out


def model_to_mapping(m: ModelSpec) -> dict:
    out = {"schema_version": SCHEMA_VERSION, "kind": "model", "name": m.name}
    out.update({f: getattr(m, f) for f in MODEL_FIELDS})
    out.update(optional_model_fields(m))
    return out
