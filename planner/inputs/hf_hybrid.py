"""Hugging Face ``config.json`` import of the hybrid families (issue 56): Nemotron-H / Nemotron 3
(Mamba-2, attention, MLP and MoE layers in a hybrid pattern), Qwen3-Next and Qwen3.5 (gated DeltaNet
and gated attention; Qwen3.5 dense or MoE, with MTP) and Jamba (Mamba-1 and attention layers, each with an MLP or MoE). Each
parser returns the :class:`~planner.inputs.model_spec.ModelSpec` keyword arguments its family adds
to the common ones :func:`planner.inputs.hf_config.load_frontier` reads; field meanings follow the
``transformers`` configuration classes of the same names."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import SpecError
from planner.inputs.hf_fields import Fields, mla_fields, skip_freq
from planner.inputs.validation import check_number

_NEMOTRON_H_TYPES = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}
"""Nemotron-H's per-layer type names (``NemotronHConfig._pattern_to_list``, and the older
``mamba``/``attention`` spellings) as Megatron's hybrid layer symbols."""


def nemotron_h(f: Fields) -> dict[str, Any]:
    """Nemotron-H and Nemotron 3 (``NemotronHConfig``; Nemotron-H, arXiv:2504.03624): one layer per
    character of ``hybrid_override_pattern`` (or entry of ``layers_block_type``), Mamba-2 mixers of
    ``mamba_num_heads`` x ``mamba_head_dim`` with ``ssm_state_size`` and ``n_groups``, attention
    layers without position embedding (Megatron-Bridge ``NemotronHModelProvider``:
    ``position_embedding_type`` none), squared-ReLU MLPs (``mlp_hidden_act`` relu2) and, for
    Nemotron 3, MoE layers with a shared expert. A latent MoE (``moe_latent_size``) and MTP layers
    are not priced."""
    data, where = f.data, f.where
    pattern = data.get("hybrid_override_pattern")
    types = data.get("layers_block_type", data.get("layer_types"))
    if pattern is None and isinstance(types, list):
        if not all(isinstance(t, str) and t in _NEMOTRON_H_TYPES for t in types):
            raise SpecError(
                f"{where}: key 'layers_block_type': entries must be one of {', '.join(sorted(_NEMOTRON_H_TYPES))}"
            )
        pattern = "".join(_NEMOTRON_H_TYPES[t] for t in types)
    if not isinstance(pattern, str) or not pattern:
        raise SpecError(f"{where}: key 'hybrid_override_pattern': expected a string of M, *, - and E symbols")
    if data.get("num_hidden_layers") is not None and f.need("num_hidden_layers") != len(pattern):
        raise SpecError(
            f"{where}: key 'num_hidden_layers': {data['num_hidden_layers']} but hybrid_override_pattern has "
            f"{len(pattern)} layers"
        )
    for key in ("moe_latent_size", "num_nextn_predict_layers"):
        if data.get(key):
            raise SpecError(
                f"{where}: key '{key}': {data[key]!r} is not priced by planner (set it to null or 0)"
            )
    act = data.get("mlp_hidden_act", "relu2")
    if act not in ("relu2", "squared_relu"):
        raise SpecError(f"{where}: key 'mlp_hidden_act': {act!r} is not allowed; allowed values: relu2")
    heads = f.need("num_attention_heads")
    moe = "E" in pattern
    moe_ffn = f.need("moe_intermediate_size") if moe else 0
    bias = f.flag("use_bias", False) or f.flag("attention_bias", False) or f.flag("mlp_bias", False)
    return dict(
        num_layers=len(pattern),
        activation="squared_relu",
        position_embedding_type="none",
        ffn_hidden_size=f.opt("intermediate_size", moe_ffn) or moe_ffn,
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=f.opt("head_dim", f.opt("attention_head_dim", f.need("hidden_size") // heads)),
        add_bias_linear=bias,
        hybrid_layer_pattern=pattern,
        mamba_state_dim=f.need("ssm_state_size"),
        mamba_head_dim=f.need("mamba_head_dim"),
        mamba_num_heads=f.need("mamba_num_heads"),
        mamba_num_groups=f.need("n_groups"),
        mamba_conv_kernel=f.opt("conv_kernel", 4),
        mamba_chunk_size=f.opt("chunk_size", 128),
        num_experts=f.need("n_routed_experts") if moe else 0,
        moe_router_topk=f.need("num_experts_per_tok") if moe else 0,
        moe_ffn_hidden_size=moe_ffn,
        moe_shared_expert_intermediate_size=f.opt("moe_shared_expert_intermediate_size") if moe else 0,
    )


def _period(f: Fields, period_key: str, offset_key: str, period: int, offset: int) -> tuple[int, int]:
    """A (period, offset) pair of Jamba's layer schedule: layer i is selected iff
    ``i % period == offset`` (``JambaConfig.layers_block_type`` / ``layers_num_experts``)."""
    p = f.opt(period_key, period)
    o = f.data.get(offset_key, offset)
    o = check_number(o, f.where, offset_key, integer=True, maximum=10_000)
    if o >= p:
        raise SpecError(
            f"{f.where}: key '{offset_key}': {o} selects no layer; it must be below {period_key} ({p})"
        )
    return p, int(o)


def jamba(f: Fields) -> dict[str, Any]:
    """Jamba (Lieber et al. 2024, arXiv:2403.19887; Jamba-1.5, arXiv:2408.12570; ``JambaConfig``,
    ``JambaDecoderLayer``): each of ``num_hidden_layers`` layers is a token mixer and an FFN, each
    behind its own RMSNorm; the mixer is attention iff ``i % attn_layer_period == attn_layer_offset``
    (GQA, no position embedding: ``JambaAttention`` applies no RoPE), else a Mamba-1 mixer
    (``JambaMambaMixer``: ``mamba_d_state``, ``mamba_d_conv``, ``mamba_expand``, ``mamba_dt_rank``,
    "auto" = ceil(h / 16)); the FFN is an MoE of ``num_experts`` top ``num_experts_per_tok`` SwiGLU
    experts of ``intermediate_size`` iff ``i % expert_layer_period == expert_layer_offset``, else one
    such MLP. As a hybrid layer pattern each Jamba layer is two symbols (``M`` or ``*``, then ``-``
    or ``E``), which are the same parameters, norms and residuals, so ``num_layers`` is twice
    ``num_hidden_layers``."""
    data, where = f.data, f.where
    layers, heads = f.need("num_hidden_layers"), f.need("num_attention_heads")
    hidden = f.need("hidden_size")
    attn_period, attn_offset = _period(f, "attn_layer_period", "attn_layer_offset", 8, 4)
    expert_period, expert_offset = _period(f, "expert_layer_period", "expert_layer_offset", 2, 1)
    experts = f.opt("num_experts", 16)
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise SpecError(f"{where}: key 'hidden_act': {act!r} is not read for Jamba; allowed values: silu")
    for key, expected in (("mamba_conv_bias", True), ("mamba_proj_bias", False)):
        if f.flag(key, expected) != expected:
            raise SpecError(
                f"{where}: key '{key}': only {str(expected).lower()} (Jamba's) is priced for Mamba-1 layers"
            )
    rank = data.get("mamba_dt_rank", "auto")
    rank = -(-hidden // 16) if rank == "auto" else f.need("mamba_dt_rank")
    pattern = "".join(
        ("*" if i % attn_period == attn_offset else "M")
        + ("E" if experts > 1 and i % expert_period == expert_offset else "-")
        for i in range(layers)
    )
    moe = "E" in pattern
    width = f.need("intermediate_size")
    return dict(
        num_layers=len(pattern),
        position_embedding_type="none",
        ffn_hidden_size=width,
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=hidden // heads,
        add_bias_linear=False,
        hybrid_layer_pattern=pattern,
        mamba_version=1,
        mamba_state_dim=f.opt("mamba_d_state", 16),
        mamba_conv_kernel=f.opt("mamba_d_conv", 4),
        mamba_expand=f.opt("mamba_expand", 2),
        mamba_dt_rank=rank,
        num_experts=experts if moe else 0,
        moe_router_topk=f.opt("num_experts_per_tok", 2) if moe else 0,
        moe_ffn_hidden_size=width if moe else 0,
    )


def qwen3_next(f: Fields) -> dict[str, Any]:
    """Qwen3-Next (``Qwen3NextConfig``; Qwen team, "Qwen3-Next", 2025): ``layer_types``
    (default: ``full_attention`` every ``full_attention_interval``-th layer, ``linear_attention``
    elsewhere) of gated DeltaNet layers (``linear_*``) and gated softmax attention with QK norms
    (``q_proj`` also yields the output gate), every layer an MoE of ``num_experts`` top
    ``num_experts_per_tok`` plus a shared expert (``decoder_sparse_step`` 1, no ``mlp_only_layers``).
    Megatron runs it as ``--experimental-attention-variant gated_delta_net --linear-attention-freq N``
    (Megatron-Bridge's Qwen3-Next bridge), which the layer types must follow."""
    if f.data.get("mlp_only_layers") or f.opt("decoder_sparse_step", 1) != 1:
        raise SpecError(
            f"{f.where}: keys 'mlp_only_layers'/'decoder_sparse_step': dense layers in Qwen3-Next are not read "
            "(allowed: [] and 1)"
        )
    return _gated_deltanet_hybrid(f, moe=True) | dict(attention_output_gate=True)


def qwen3_5(f: Fields) -> dict[str, Any]:
    """Qwen3.5 / Qwen3.6 (``qwen3_5_text`` dense and ``qwen3_5_moe_text`` MoE decoders, the text
    half of ``qwen3_5`` / ``qwen3_5_moe``; Qwen team, 2026): Qwen3-Next's layer scheme (gated
    DeltaNet layers, a gated softmax-attention layer every ``full_attention_interval``-th, QK norms)
    with the RoPE keys nested in ``rope_parameters``, the attention gate named ``attn_output_gate``
    (default true) and ``mtp_num_hidden_layers`` multi-token prediction layers. The MoE variants put
    ``num_experts`` top ``num_experts_per_tok`` plus a gated shared expert in every layer; the dense
    ones a SwiGLU MLP of ``intermediate_size``. Megatron-Bridge's Qwen3.5 bridges
    (``src/megatron/bridge/models/qwen/qwen35_bridge.py``: ``experimental_attention_variant =
    "gated_delta_net"``, ``linear_attention_freq`` from the layer types, ``mtp_num_hidden_layers`` ->
    ``mtp_num_layers`` by the common ``CONFIG_MAPPING``) and THUDM/slime's Qwen3.5 launch arguments
    (``scripts/models/qwen3.5-35B-A3B.sh``) run it the same way. The vision tower of the
    conditional-generation checkpoints is not read (planner prices the language model)."""
    moe = f.data.get("num_experts") is not None
    return _gated_deltanet_hybrid(f, moe=moe) | dict(
        attention_output_gate=f.flag("attn_output_gate", True),
        mtp_num_layers=f.opt("mtp_num_hidden_layers"),
    )


def _gated_deltanet_hybrid(f: Fields, *, moe: bool) -> dict[str, Any]:
    """The fields Qwen3-Next and Qwen3.5 share: the layer types (``layer_types``, or a full-attention
    layer every ``full_attention_interval``-th), the gated DeltaNet shape (``linear_*``), the
    attention shape with QK norms, and the MLP: an MoE of ``num_experts`` with a shared expert, or
    (``moe`` false) a dense MLP of ``intermediate_size``."""
    layers, heads = f.need("num_hidden_layers"), f.need("num_attention_heads")
    types = f.data.get("layer_types")
    if types is None:
        interval = f.opt("full_attention_interval", 4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)]
    if (
        not isinstance(types, list)
        or len(types) != layers
        or not set(types) <= {"linear_attention", "full_attention"}
    ):
        raise SpecError(
            f"{f.where}: key 'layer_types': expected {layers} entries of linear_attention/full_attention"
        )
    freq = skip_freq([t == "linear_attention" for t in types], f.where, "layer_types")
    out: dict[str, Any] = dict(
        ffn_hidden_size=f.need("intermediate_size", *(("moe_intermediate_size",) if moe else ())),
        num_query_groups=f.opt("num_key_value_heads", heads, zero_is_absent=False),
        kv_channels=f.opt("head_dim", f.need("hidden_size") // heads),
        add_bias_linear=f.flag("attention_bias", False),
        qk_layernorm=True,
        linear_attention_freq=freq,
        linear_num_key_heads=f.need("linear_num_key_heads"),
        linear_num_value_heads=f.need("linear_num_value_heads"),
        linear_key_head_dim=f.need("linear_key_head_dim"),
        linear_value_head_dim=f.need("linear_value_head_dim"),
        linear_conv_kernel_dim=f.opt("linear_conv_kernel_dim", 4),
    )
    if moe:
        out |= dict(
            num_experts=f.need("num_experts"),
            moe_router_topk=f.need("num_experts_per_tok"),
            moe_ffn_hidden_size=f.need("moe_intermediate_size"),
            moe_shared_expert_intermediate_size=f.opt("shared_expert_intermediate_size"),
            # the shared expert's sigmoid gate (Qwen3NextSparseMoeBlock.shared_expert_gate; Megatron-Bridge's
            # Qwen3-Next and Qwen3.5 bridges set moe_shared_expert_gate=True)
            moe_shared_expert_gate=bool(f.opt("shared_expert_intermediate_size")),
        )
    return out


KIMI_LINEAR_CONTEXT = 1_048_576
"""Kimi Linear's context where its ``config.json`` names none: 1M tokens (Kimi Linear technical
report, arXiv:2510.26692, "up to 1M context length"; the 48B-A3B model card)."""


def _kimi_layers(f: Fields, layers: int) -> tuple[int, ...]:
    """One 0/1 per layer, 1 = KDA, from ``linear_attn_config``'s ``kda_layers`` and
    ``full_attn_layers``, whose numbers are 1-based (vLLM ``KimiLinearConfig.is_kda_layer``:
    ``(layer_idx + 1) in kda_layers``) and together name every layer once."""
    where = f"{f.where}: key 'linear_attn_config"
    lists = [f.data.get(key) for key in ("kda_layers", "full_attn_layers")]
    if not all(isinstance(v, list) and all(type(i) is int for i in v) for v in lists):
        raise SpecError(
            f"{where}': expected kda_layers and full_attn_layers, lists of layer numbers 1..{layers}"
        )
    kda, full = lists
    if sorted(kda + full) != list(range(1, layers + 1)):
        raise SpecError(
            f"{where}': kda_layers and full_attn_layers must name each layer 1..{layers} once (1-based, "
            "as vLLM's KimiLinearConfig reads them)"
        )
    return tuple(int(i + 1 in set(kda)) for i in range(layers))


def kimi_linear(f: Fields) -> dict[str, Any]:
    """Kimi Linear (Kimi Team 2025, arXiv:2510.26692; ``KimiLinearConfig`` and ``KimiDecoderLayer``
    of vLLM's vllm/model_executor/models/kimi_linear.py, the reference implementation outside the
    checkpoint's remote code): every layer a token mixer and an MLP behind their own RMSNorms; the
    mixer is Kimi Delta Attention in the layers ``linear_attn_config.kda_layers`` names (``num_heads``
    heads of ``head_dim``, ``short_conv_kernel_size``; :meth:`ModelSpec.kda_params`) and MLA in
    ``full_attn_layers`` (no query compression, ``q_lora_rank`` null; ``kv_a_layernorm``; NoPE with
    ``mla_use_nope``: the ``qk_rope_head_dim`` channels stay in the score, unrotated); the MLP is an
    MoE of ``num_experts`` top ``num_experts_per_token`` SwiGLU experts of ``moe_intermediate_size``
    plus ``num_shared_experts`` of that width in layer i iff ``i >= first_k_dense_replace`` and
    ``i % moe_layer_freq == 0``, else a SwiGLU MLP of ``intermediate_size``. Not counted: the
    router's score-correction bias (``num_experts`` a layer)."""
    layers = f.need("num_hidden_layers")
    linear = f.data.get("linear_attn_config")
    if not isinstance(linear, dict):
        raise SpecError(f"{f.where}: key 'linear_attn_config': model_type 'kimi_linear' needs its mapping")
    lf = Fields(linear, f"{f.where} (linear_attn_config)", f.mt)
    for key in ("use_full_rank_gate", "mla_use_output_gate"):
        if lf.flag(key, False) or f.flag(key, False):
            raise SpecError(
                f"{f.where}: key '{key}': true is not priced (Kimi Linear 48B-A3B's low-rank gates, ungated MLA)"
            )
    if f.opt("num_nextn_predict_layers"):
        raise SpecError(
            f"{f.where}: key 'num_nextn_predict_layers': MTP is not priced for Kimi Linear (use 0)"
        )
    act = f.data.get("hidden_act", "silu")
    if act != "silu":
        raise SpecError(
            f"{f.where}: key 'hidden_act': {act!r} is not read for Kimi Linear; allowed values: silu"
        )
    routed = f.opt("num_experts")
    moe_ffn = f.need("moe_intermediate_size") if routed else 0
    first, freq = f.opt("first_k_dense_replace"), f.opt("moe_layer_freq", 1)
    moe = tuple(int(routed > 0 and i >= first and i % freq == 0) for i in range(layers))
    heads, width = lf.need("num_heads"), lf.need("head_dim")
    context = f.opt("max_position_embeddings", f.opt("model_max_length", KIMI_LINEAR_CONTEXT))
    return dict(
        max_position_embeddings=context,
        position_embedding_type="none" if f.flag("mla_use_nope", False) else "rope",
        ffn_hidden_size=f.need("intermediate_size"),
        num_query_groups=f.need("num_attention_heads"),
        add_bias_linear=False,
        **mla_fields(f),  # kv_a_layernorm only: no query compression, so no q_a_layernorm
        num_experts=routed,
        moe_router_topk=f.need("num_experts_per_token") if routed else 0,
        moe_ffn_hidden_size=moe_ffn,
        moe_shared_expert_intermediate_size=f.opt("num_shared_experts") * moe_ffn,
        moe_layer_pattern=moe if routed and not all(moe) else (),
        linear_attention_type="kda",
        linear_attention_pattern=_kimi_layers(lf, layers),
        linear_num_key_heads=heads,
        linear_num_value_heads=heads,
        linear_key_head_dim=width,
        linear_value_head_dim=width,
        linear_conv_kernel_dim=lf.opt("short_conv_kernel_size", 4),
    )


FALCON_H1_DEFAULTS: dict[str, Any] = {
    "mamba_d_ssm": 1024,
    "mamba_n_heads": 128,
    "mamba_d_head": "auto",
    "mamba_n_groups": 1,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 256,
}
"""``FalconH1Config``'s defaults for the Mamba keys planner reads (transformers
models/falcon_h1/configuration_falcon_h1.py): a config that leaves a key out gets these."""


def falcon_h1(f: Fields) -> dict[str, Any]:
    """Falcon-H1 (Zuo et al. 2025, arXiv:2507.22448; ``FalconH1Config``, ``FalconH1DecoderLayer``):
    every layer runs GQA attention (``head_dim``, RoPE) and a Mamba-2 mixer (``FalconH1Mixer``:
    ``mamba_n_heads`` heads of ``mamba_d_head``, ``mamba_d_ssm`` = their product wide, ``mamba_n_groups``
    groups of state ``mamba_d_state``, conv ``mamba_d_conv``) side by side on the input norm's output,
    adds them (with the muP multipliers, which cost nothing) and runs a SwiGLU MLP of
    ``intermediate_size`` behind ``pre_ff_layernorm``: :attr:`ModelSpec.parallel_mamba_attention`.
    ``mamba_d_head`` "auto" is ``mamba_d_ssm // mamba_n_heads``, a null ``mamba_d_ssm`` is
    ``mamba_expand`` x h (``FalconH1Config.__post_init__``). Priced biases: the convolution's only
    (``mamba_conv_bias`` true, ``mamba_proj_bias``, ``projectors_bias``, ``attention_bias``,
    ``mlp_bias`` false, the published configs'). Counted though absent when ``mamba_rms_norm`` is
    false: the gated norm's ``mamba_d_ssm`` weights a layer (under 0.01%)."""
    data = {**FALCON_H1_DEFAULTS, **f.data}
    g = Fields(data, f.where, f.mt)
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise SpecError(
            f"{f.where}: key 'hidden_act': {act!r} is not read for Falcon-H1; allowed values: silu"
        )
    for key, expected in (
        ("mamba_conv_bias", True),
        ("mamba_proj_bias", False),
        ("projectors_bias", False),
        ("attention_bias", False),
        ("mlp_bias", False),
    ):
        if g.flag(key, expected) != expected:
            raise SpecError(f"{f.where}: key '{key}': only {str(expected).lower()} (Falcon-H1's) is priced")
    g.flag("mamba_rms_norm", False)
    hidden, heads = g.need("hidden_size"), g.need("mamba_n_heads")
    inner = g.need("mamba_d_ssm") if data["mamba_d_ssm"] is not None else g.need("mamba_expand") * hidden
    width = inner // heads if data["mamba_d_head"] == "auto" else g.need("mamba_d_head")
    if width * heads != inner:
        raise SpecError(
            f"{f.where}: key 'mamba_d_ssm': {inner} is not mamba_n_heads x mamba_d_head ({heads} x {width}), "
            "as FalconH1Config requires"
        )
    attention_heads = g.need("num_attention_heads")
    return dict(
        ffn_hidden_size=g.need("intermediate_size"),
        num_query_groups=g.opt("num_key_value_heads", attention_heads, zero_is_absent=False),
        kv_channels=g.opt("head_dim", hidden // attention_heads),
        add_bias_linear=False,
        parallel_mamba_attention=True,
        mamba_state_dim=g.need("mamba_d_state"),
        mamba_head_dim=width,
        mamba_num_heads=heads,
        mamba_num_groups=g.need("mamba_n_groups"),
        mamba_conv_kernel=g.need("mamba_d_conv"),
        mamba_chunk_size=g.need("mamba_chunk_size"),
    )
