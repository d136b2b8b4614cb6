"""The model specification: :class:`ModelSpec`, a decoder-only transformer as one frozen,
keyword-only value (STYLE.md lesson 1), and the vocabularies of its string fields.

Built once by the loaders (:mod:`planner.inputs.model_yaml` for planner's YAML,
:mod:`planner.inputs.hf_config` for Hugging Face ``config.json``) and never mutated. Field names
follow Megatron-LM's argument names (``megatron/training/arguments.py``) so that import and export
are one-to-one; parameter counts are methods of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu", "squared_relu")
NORMALIZATIONS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "none")
WINDOW_TYPES = ("sliding", "chunked")
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
LINEAR_ATTENTION_TYPES = ("gated_delta_net", "kda")
"""The linear-attention mixers of a transformer's non-softmax layers: gated DeltaNet (Yang et al.
2024, arXiv:2412.06464; Qwen3-Next) and Kimi Delta Attention (Kimi Team 2025, "Kimi Linear: An
Expressive, Efficient Attention Architecture", arXiv:2510.26692; Kimi Linear 48B-A3B)."""
GATED_ACTIVATIONS = frozenset({"swiglu", "geglu"})
"""Gated MLPs, three weight matrices (gate, up, down; Shazeer 2020, "GLU Variants Improve
Transformer", arXiv:2002.05202): ``swiglu`` gates with SiLU, ``geglu`` with GELU (Gemma's
``gelu_pytorch_tanh``, the tanh approximation). Both cost the same FLOPs and bytes."""
HYBRID_SYMBOLS = {
    "M": ("mamba", ""),
    "G": ("gdn", ""),
    "*": ("attention", ""),
    "-": ("", "dense"),
    "E": ("", "moe"),
}
"""Layer symbols of Megatron-Core's hybrid layer pattern (``megatron/core/models/hybrid/
hybrid_layer_allocation.py: Symbols``, megatron-core 0.19.2) that planner prices, as (token mixer,
MLP) of the one layer each symbol is: ``M`` a Mamba-2 mixer layer (``MambaLayer``; Mamba-1 with
``ModelSpec.mamba_version`` 1), ``G`` a gated
DeltaNet layer, ``*`` a self-attention layer, ``-`` an MLP layer (``MLPLayer``), ``E`` an MoE layer.
Megatron's ``D`` (DeepSeek sparse attention), ``+`` (MLA), ``|`` (pipeline stage boundaries, which
planner's plans choose) and ``/`` (MTP) are not read."""


def local_attention_span(seq_length: int, window: int, window_type: str = "sliding") -> float:
    """Keys per query of a local-attention layer in the non-causal convention
    (:meth:`ModelSpec.attention_span`): ``s x P_local / P_causal`` for a sliding window of ``window``
    keys or, for ``window_type`` ``chunked``, chunks of ``window`` tokens."""
    s, w = seq_length, window
    if window_type == "chunked":
        n, r = divmod(s, w)
        pairs = n * w * (w + 1) / 2 + r * (r + 1) / 2
    elif s >= w:
        pairs = s * w - w * (w - 1) / 2
    else:
        pairs = s * (s + 1) / 2
    return s * pairs / (s * (s + 1) / 2)


def sparse_attention_span(seq_length: float, topk: int) -> float:
    """Keys per query of DeepSeek sparse attention in the non-causal convention: query i (0-based)
    sees the top-k of its ``i + 1`` causal keys, ``min(i + 1, k)`` pairs, which is the pair count of
    a sliding window of ``k`` (:func:`local_attention_span`); a sequence no longer than ``k`` is
    dense causal attention (``s``)."""
    return local_attention_span(seq_length, topk) if seq_length > topk else float(seq_length)


ATTENTION_DROPOUT_DEFAULT = 0.1
"""Megatron-LM's ``--attention-dropout`` default (megatron/training/arguments.py): what a launch
without the flag runs, hence :attr:`ModelSpec.attention_dropout`'s default and the value the
Megatron export leaves implicit."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, described with Megatron-LM's argument names."""

    name: str
    """Preset or file name, for display only."""
    num_layers: int
    """Number of transformer (decoder) layers (``--num-layers``)."""
    hidden_size: int
    """Model width h (``--hidden-size``)."""
    ffn_hidden_size: int
    """Width of the dense MLP's intermediate projection (``--ffn-hidden-size``)."""
    num_attention_heads: int
    """Number of query heads a (``--num-attention-heads``)."""
    num_query_groups: int
    """Number of key/value heads (GQA); equal to ``num_attention_heads`` for MHA."""
    kv_channels: int
    """Head dimension d (``--kv-channels``); ``hidden_size // num_attention_heads`` by default."""
    vocab_size: int
    """Vocabulary size (padded size used for compute and memory)."""
    max_position_embeddings: int
    """Longest sequence the position embedding supports (``--max-position-embeddings``)."""
    activation: str = "gelu"
    """MLP activation: one of ``ACTIVATIONS``; the gated ones (``swiglu``, ``geglu``:
    :data:`GATED_ACTIVATIONS`) use three weight matrices."""
    normalization: str = "layernorm"
    """``layernorm`` (weight and bias) or ``rmsnorm`` (weight only)."""
    position_embedding_type: str = "learned_absolute"
    """``learned_absolute`` adds a ``max_position_embeddings x h`` table; ``rope`` adds none."""
    rotary_base: int = 10000
    """RoPE base theta (Megatron ``--rotary-base``, default 10000; Hugging Face ``rope_theta``).
    It changes no cost; the export needs it for a faithful launch (Llama 3: 500000)."""
    untie_embeddings_and_output_weights: bool = False
    """When true the output layer has its own ``h x V`` weights."""
    add_bias_linear: bool = True
    """Biases on all linear layers (Megatron default; Llama-style models disable them)."""
    add_qkv_bias: bool = False
    """Bias only on the QKV projection (Qwen2 style)."""
    qk_layernorm: bool = False
    """Per-head normalisation of queries and keys (Qwen3 style)."""
    num_experts: int = 0
    """Routed experts per MoE layer; 0 means a dense model."""
    moe_router_topk: int = 0
    """Experts each token is routed to."""
    moe_ffn_hidden_size: int = 0
    """Intermediate width of each routed expert."""
    moe_shared_expert_intermediate_size: int = 0
    """Total intermediate width of the shared experts (0: none)."""
    moe_shared_expert_gate: bool = False
    """A learned sigmoid gate on the shared experts' output: an ``h x 1`` linear per MoE layer
    (Megatron ``--moe-shared-expert-gate``, megatron-core ``SharedExpertMLP``'s ``gate_weight``;
    Qwen2-MoE's, Qwen3-Next's and Qwen3.5's ``shared_expert_gate``). Its ``h`` parameters per layer
    are counted; its FLOPs (2h per token) and elementwise gate are below what the model resolves
    and, as in Megatron's ``num_floating_point_operations``, not priced."""
    moe_layer_freq: int = 1
    """Every ``moe_layer_freq``-th layer is MoE (layer i is MoE iff ``i % freq == 0``), as Megatron."""
    moe_expert_capacity_factor: float = 0.0
    """Expert capacity factor (0: dropless, no padding)."""
    moe_layer_pattern: tuple[int, ...] = ()
    """One 0/1 per layer, 1 = MoE (Megatron's list form of ``--moe-layer-freq``, e.g.
    ``([0]*3+[1]*58)`` for DeepSeek-V3's three leading dense layers); empty: ``moe_layer_freq``."""
    multi_latent_attention: bool = False
    """Multi-head latent attention (``--multi-latent-attention``; DeepSeek-V2, arXiv:2405.04434
    Sec. 2.1): low-rank joint K/V compression plus a decoupled RoPE key shared by all heads.
    ``num_query_groups`` and ``kv_channels`` do not apply."""
    q_lora_rank: int = 0
    """Rank of the query compression (``--q-lora-rank``); 0: queries projected directly from h."""
    kv_lora_rank: int = 0
    """Rank of the joint key/value compression (``--kv-lora-rank``, d_c in DeepSeek-V2)."""
    qk_head_dim: int = 0
    """Per-head query/key width without position part (``--qk-head-dim``, d_h^nope)."""
    qk_pos_emb_head_dim: int = 0
    """Per-head width of the decoupled RoPE query/key (``--qk-pos-emb-head-dim``, d_h^R)."""
    v_head_dim: int = 0
    """Per-head value width (``--v-head-dim``)."""
    window_size: int = 0
    """Local attention span in tokens; 0: every layer attends to the whole (causal) sequence.
    ``sliding``: each query sees itself and the ``window_size - 1`` previous tokens (Megatron
    ``--window-size``; gpt-oss: 128); ``chunked``: the sequence is cut into chunks of this many
    tokens and attention stays inside a chunk (Llama 4's chunked attention, 8192)."""
    window_attn_skip_freq: int = 0
    """Every N-th layer (1-based layer number divisible by N) attends globally, the others locally
    (Megatron ``--window-attn-skip-freq``; gpt-oss 2, Llama 4 4); 0: every layer is local."""
    window_type: str = "sliding"
    """``sliding`` or ``chunked`` (see ``window_size``)."""
    softmax_type: str = "vanilla"
    """``learnable`` adds a learned per-head logit to the softmax denominator ("attention sinks",
    gpt-oss; Megatron ``--softmax-type learnable``): one parameter per head per layer."""
    attention_dropout: float = ATTENTION_DROPOUT_DEFAULT
    """Dropout probability on the attention probabilities (Megatron-LM ``--attention-dropout``,
    default 0.1: megatron/training/arguments.py). It costs only where the score matrix is
    materialised (unfused core attention: a one-byte mask and the dropped copy of the
    probabilities kept for backward, and their passes, :mod:`cost_models.attention`); at 0 PyTorch's
    dropout returns its input unchanged (ATen ``dropout``: ``p == 0`` is the identity), so nothing
    more is kept. Fused and flash attention regenerate their dropout mask from the RNG state."""
    mtp_num_layers: int = 0
    """Multi-token prediction modules (``--mtp-num-layers``; DeepSeek-V3, arXiv:2412.19437
    Sec. 2.2): each a projection of [norm(h); norm(embedding)] (2h x h), one transformer layer of
    the last layer's kind, a final norm, and the shared embedding and output head. Megatron places
    them on the last pipeline stage; they are not counted in ``params_total``."""
    hybrid_layer_pattern: str = ""
    """Megatron-Core's hybrid layer pattern (``--hybrid-layer-pattern``, formerly
    ``--hybrid-override-pattern``; Hugging Face ``hybrid_override_pattern``): one symbol of
    :data:`HYBRID_SYMBOLS` per layer, and each symbol is a whole layer (a Mamba mixer, an attention or
    an MLP layer on its own, with its own norm and residual), so ``num_layers`` is its length. Empty:
    every layer is a transformer layer (token mixer + MLP)."""
    mamba_state_dim: int = 0
    """Mamba-2 state size N per head (``--mamba-state-dim``; HF ``ssm_state_size``)."""
    mamba_head_dim: int = 0
    """Mamba-2 head dimension P (``--mamba-head-dim``)."""
    mamba_num_heads: int = 0
    """Mamba-2 heads H (``--mamba-num-heads``); the inner width is ``d_inner = H x P``."""
    mamba_num_groups: int = 0
    """Groups G sharing B and C (``--mamba-num-groups``; HF ``n_groups``)."""
    mamba_conv_kernel: int = 4
    """Width of the causal depthwise convolution (HF ``conv_kernel``; ``MambaMixer``'s ``d_conv``,
    4, which no Megatron flag changes)."""
    mamba_chunk_size: int = 128
    """Chunk length Q of the SSD scan (HF ``chunk_size``; ``MambaMixer``'s ``chunk_size``, 128)."""
    mamba_version: int = 2
    """2: the ``M`` layers are Mamba-2 (SSD) mixers; 1: Mamba-1 selective-SSM mixers (Gu & Dao 2023,
    "Mamba", arXiv:2312.00752, Algorithm 2; Jamba's ``JambaMambaMixer``), which take
    ``mamba_state_dim`` (N per channel), ``mamba_expand`` and ``mamba_dt_rank`` instead of heads
    and groups."""
    mamba_expand: int = 0
    """Mamba-1 inner width over the hidden size, ``d_inner = expand x h`` (HF ``mamba_expand``)."""
    mamba_dt_rank: int = 0
    """Mamba-1 rank R of the time-step projection: ``x_proj`` d_inner -> R + 2N, ``dt_proj`` R ->
    d_inner (HF ``mamba_dt_rank``)."""
    parallel_mamba_attention: bool = False
    """Every layer's token mixer is softmax attention and a Mamba-2 mixer side by side on the same
    normalised input, their outputs added, then the MLP behind its own norm (Falcon-H1, Zuo et al.
    2025, arXiv:2507.22448 Sec. 2; transformers' ``FalconH1DecoderLayer``): a layer's parts are
    ``attention+mamba`` and its MLP; the ``mamba_*`` fields shape the Mamba-2 mixer."""
    linear_attention_freq: int = 0
    """Gated DeltaNet layers in a transformer (Megatron ``--experimental-attention-variant
    gated_delta_net --linear-attention-freq N``; Qwen3-Next's ``full_attention_interval``): layer i
    (0-based) attends with softmax attention iff ``(i + 1) % N == 0``, the others are gated
    DeltaNet; 0: none."""
    linear_num_key_heads: int = 0
    """Gated DeltaNet query/key heads (``--linear-num-key-heads``)."""
    linear_num_value_heads: int = 0
    """Gated DeltaNet value heads (``--linear-num-value-heads``), a multiple of the key heads."""
    linear_key_head_dim: int = 0
    """Gated DeltaNet query/key head width d_k (``--linear-key-head-dim``)."""
    linear_value_head_dim: int = 0
    """Gated DeltaNet value head width d_v (``--linear-value-head-dim``); the state is d_k x d_v
    per value head."""
    linear_conv_kernel_dim: int = 4
    """Gated DeltaNet causal convolution width (``--linear-conv-kernel-dim``, default 4)."""
    linear_attention_pattern: tuple[int, ...] = ()
    """One 0/1 per layer, 1 = linear attention (the list form of Megatron's
    ``--linear-attention-freq``, ``TransformerConfig.linear_attention_freq``: "A list that defines a
    custom pattern, e.g.: [1,1,1,0,...]"): Kimi Linear's ``linear_attn_config.kda_layers``, whose
    last layer breaks the 3:1 period; empty: ``linear_attention_freq``."""
    linear_attention_type: str = "gated_delta_net"
    """The linear-attention layers' mixer (:data:`LINEAR_ATTENTION_TYPES`): ``gated_delta_net``, or
    ``kda`` (Kimi Delta Attention: ``linear_num_key_heads`` = ``linear_num_value_heads`` heads of
    ``linear_key_head_dim`` = ``linear_value_head_dim``, a per-key-channel decay; :meth:`kda_params`)."""
    attention_output_gate: bool = False
    """A sigmoid output gate on softmax attention (``--attention-output-gate``; Qwen3-Next's gated
    attention): the QKV projection also produces a gate of the query width."""
    dsa_indexer_n_heads: int = 0
    """Heads H^I of DeepSeek sparse attention's lightning indexer (``--dsa-indexer-n-heads``; HF
    ``index_n_heads``, DeepSeek-V3.2: 64). DeepSeek-V3.2-Exp technical report (DeepSeek-AI 2025,
    github.com/deepseek-ai/DeepSeek-V3.2-Exp, DeepSeek_V3_2.pdf) Sec. 2.1, eq. (1):
    ``I_{t,s} = sum_j w_{t,j} ReLU(q_{t,j} . k_s)``."""
    dsa_indexer_head_dim: int = 0
    """Width d^I of the indexer's queries and its single key (``--dsa-indexer-head-dim``; HF
    ``index_head_dim``, 128)."""
    dsa_indexer_topk: int = 0
    """Keys each query attends to under DeepSeek sparse attention (``--dsa-indexer-topk``; HF
    ``index_topk``, 2048): the indexer's top-k, over which the main MLA attention runs (eq. 2);
    0: no sparse attention. Megatron-Core runs it as ``--experimental-attention-variant dsa``
    (``DSAttention`` over ``AbsorbedMLASelfAttention``), MLA only."""

    @property
    def is_hybrid(self) -> bool:
        """Whether layers follow a hybrid layer pattern (:attr:`hybrid_layer_pattern`)."""
        return bool(self.hybrid_layer_pattern)

    @property
    def has_linear_attention(self) -> bool:
        """Whether some layers are linear attention (gated DeltaNet or KDA) inside a transformer."""
        return bool(self.linear_attention_freq or self.linear_attention_pattern)

    @property
    def has_layer_parts(self) -> bool:
        """Whether layers differ by token mixer (a hybrid pattern, linear attention, or attention and
        Mamba in parallel), so that costs are kept by :meth:`layer_parts`."""
        return self.is_hybrid or self.has_linear_attention or self.parallel_mamba_attention

    @property
    def mamba_inner_size(self) -> int:
        """Mamba inner width: ``d_inner = H x P`` (Mamba-2), ``expand x h`` (Mamba-1)."""
        if self.mamba_version == 1:
            return self.mamba_expand * self.hidden_size
        return self.mamba_num_heads * self.mamba_head_dim

    def layer_parts(self, index: int) -> tuple[str, str]:
        """(token mixer, MLP) of layer ``index``: mixer ``attention``, ``mamba``, ``gdn``, ``kda``,
        ``attention+mamba`` (:attr:`parallel_mamba_attention`) or ``""``, MLP ``dense``, ``moe`` or ``""`` (a hybrid layer has one of the two, a transformer
        layer both)."""
        if self.hybrid_layer_pattern:
            return HYBRID_SYMBOLS[self.hybrid_layer_pattern[index]]
        if self.parallel_mamba_attention:
            return "attention+mamba", ("moe" if self.is_moe_layer(index) else "dense")
        freq, pattern = self.linear_attention_freq, self.linear_attention_pattern
        linear = bool(pattern[index]) if pattern else bool(freq and (index + 1) % freq)
        mixer = ("kda" if self.linear_attention_type == "kda" else "gdn") if linear else "attention"
        return mixer, ("moe" if self.is_moe_layer(index) else "dense")

    @property
    def is_dsa(self) -> bool:
        """Whether attention is DeepSeek sparse attention (an indexer and top-k MLA)."""
        return bool(self.dsa_indexer_topk)

    @property
    def is_moe(self) -> bool:
        """Whether any layer has routed experts."""
        return self.num_experts > 0

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (two input projections)."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def query_projection_size(self) -> int:
        """Width of the query (and attention output) projection: heads x head dim."""
        return self.num_attention_heads * self.kv_channels

    @property
    def kv_projection_size(self) -> int:
        """Width of each of the key and value projections: groups x head dim."""
        return self.num_query_groups * self.kv_channels

    @property
    def qk_head_size(self) -> int:
        """Per-head width of queries and keys (MLA: ``qk_head_dim + qk_pos_emb_head_dim``)."""
        if self.multi_latent_attention:
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.kv_channels

    @property
    def v_head_size(self) -> int:
        """Per-head width of values and of the attention output (MLA: ``v_head_dim``)."""
        return self.v_head_dim if self.multi_latent_attention else self.kv_channels

    @property
    def core_attention_width(self) -> int:
        """``heads x (qk width + v width)``: the two attention products cost
        ``2 x keys x core_attention_width`` FLOPs per query (QK^T and PV); ``2 q`` for MHA/GQA.

        DeepSeek sparse attention runs MLA in its MQA ("absorbed") form: W^UK is folded into each
        query and W^UV applied after attention, so every head attends over the shared latent
        ``c_kv`` and RoPE key: qk width ``r_kv + d_R``, v width ``r_kv`` (DeepSeek-V3.2-Exp report
        Sec. 2.1, "we implement DSA based on the MQA mode of MLA"; Megatron-Core
        ``AbsorbedMLASelfAttention``, "core attention operates in MQA form with KV being
        single-head")."""
        if self.is_dsa:
            return self.num_attention_heads * (2 * self.kv_lora_rank + self.qk_pos_emb_head_dim)
        return self.num_attention_heads * (self.qk_head_size + self.v_head_size)

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` (0-based) is an MoE layer: ``moe_layer_pattern[index]``
        when a pattern is given, else Megatron's ``moe_layer_freq`` (``index % freq == 0``)."""
        if not self.is_moe:
            return False
        if self.hybrid_layer_pattern:
            return self.hybrid_layer_pattern[index] == "E"
        if self.moe_layer_pattern:
            return bool(self.moe_layer_pattern[index])
        return index % self.moe_layer_freq == 0

    def is_local_attention_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) attends locally (Megatron
        ``megatron/core/transformer/utils.py: is_layer_window_attention``, 1-based layer numbers)."""
        if not self.window_size:
            return False
        return not self.window_attn_skip_freq or (index + 1) % self.window_attn_skip_freq != 0

    def attention_span(self, index: int, seq_length: int) -> float:
        """Keys per query charged to layer ``index`` in the non-causal convention of model FLOPs.

        Full attention is charged ``s`` keys per query (Narayanan et al. 2021: ``4 s q`` FLOPs
        per token), twice the ``(s + 1) / 2`` a causal query sees on average. A local layer is
        charged ``s x P_local / P_causal``, where P counts the (query, key) pairs the mask keeps:
        ``P_causal = s (s + 1) / 2``; sliding window w: ``sum_i min(i + 1, w)``
        ``= s w - w (w - 1) / 2`` for ``s >= w``; chunks of c: ``n c (c + 1) / 2 + r (r + 1) / 2``
        for ``s = n c + r``. So a window far shorter than the sequence costs ``2 w`` (``c`` for
        chunks) instead of ``s``. Exact pair counts: tiled kernels also compute the masked part of
        the tiles on the window's edge (a lower bound for small windows). DeepSeek sparse
        attention: :func:`sparse_attention_span`.
        """
        if self.is_dsa:
            return sparse_attention_span(seq_length, self.dsa_indexer_topk)
        if not self.is_local_attention_layer(index):
            return float(seq_length)
        return local_attention_span(seq_length, self.window_size, self.window_type)

    @property
    def num_moe_layers(self) -> int:
        """Number of MoE layers."""
        return sum(1 for i in range(self.num_layers) if self.is_moe_layer(i))

    # Parameter counts. Formulas follow Megatron-LM
    # megatron/training/theoretical_memory_usage.py (compute_weight_and_optimizer_memory),
    # extended with biases so that GPT-2/GPT-3/BLOOM counts match their papers.
    def attention_params(self) -> int:
        """Q, K, V and output projections (+ biases, + QK norm, + sinks) of one layer."""
        sinks = self.num_attention_heads if self.softmax_type == "learnable" else 0
        if self.multi_latent_attention:
            return self.mla_params() + self.indexer_params() + sinks
        h, q, kv = self.hidden_size, self.query_projection_size, self.kv_projection_size
        weights = h * (q + 2 * kv) + q * h + (h * q if self.attention_output_gate else 0)
        bias = (q + 2 * kv + h) if self.add_bias_linear else ((q + 2 * kv) if self.add_qkv_bias else 0)
        qk_norm = 2 * self.kv_channels if self.qk_layernorm else 0
        return weights + bias + qk_norm + sinks

    def mla_params(self) -> int:
        """Multi-head latent attention of one layer (DeepSeek-V2, arXiv:2405.04434 Sec. 2.1,
        eqs. 9-10 and 12-15; Megatron-Core ``MLASelfAttention``):

        * queries: ``h x r_q`` down (W^DQ) and ``r_q x a (d + d_R)`` up (W^UQ, W^QR), or ``h x
          a (d + d_R)`` without compression (``q_lora_rank`` 0);
        * keys/values: ``h x (r_kv + d_R)`` down (W^DKV and the shared RoPE key W^KR) and
          ``r_kv x a (d + d_v)`` up (W^UK, W^UV);
        * output ``a d_v x h`` (+ bias with ``add_bias_linear``);
        * RMSNorms of the two latents (``r_q + r_kv``) when ``qk_layernorm`` (Megatron builds
          ``q_layernorm``/``kv_layernorm`` only then; DeepSeek-V3 has them).
        """
        h, a, rq, rkv = self.hidden_size, self.num_attention_heads, self.q_lora_rank, self.kv_lora_rank
        dqk, dr, dv = self.qk_head_size, self.qk_pos_emb_head_dim, self.v_head_dim
        q = (h * rq + rq * a * dqk) if rq else h * a * dqk
        kv = h * (rkv + dr) + rkv * a * (self.qk_head_dim + dv)
        out = a * dv * h + (h if self.add_bias_linear else 0)
        norms = (rq + rkv) if self.qk_layernorm else 0
        return q + kv + out + norms

    def indexer_params(self) -> int:
        """The lightning indexer of one DeepSeek sparse attention layer (0 without one;
        DeepSeek-V3.2-Exp inference/model.py ``Indexer``, Megatron-Core ``DSAIndexer``): ``wq_b``
        r_q -> H^I d^I (from the query latent; h without query compression), ``wk`` h -> d^I, the
        key's LayerNorm (weight and bias, 2 d^I) and ``weights_proj`` h -> H^I, no biases."""
        if not self.is_dsa:
            return 0
        h, n, d = self.hidden_size, self.dsa_indexer_n_heads, self.dsa_indexer_head_dim
        return (self.q_lora_rank or h) * n * d + h * d + 2 * d + h * n

    def mamba_params(self) -> int:
        """One Mamba-2 mixer (Dao & Gu 2024, arXiv:2405.21060 Sec. 7; Megatron-Core ``MambaMixer``,
        megatron/core/ssm/mamba_mixer.py, whose layout Hugging Face's ``NemotronHMamba2Mixer``
        shares): ``in_proj`` h -> ``2 d_inner + 2 G N + H`` (z, x, B, C, dt; no bias), the depthwise
        ``conv1d`` over x, B, C (``d_conv`` weights and a bias per channel), ``dt_bias``, ``A_log``
        and ``D`` per head, the gated RMSNorm over ``d_inner``, ``out_proj`` d_inner -> h."""
        if self.mamba_version == 1:
            return self.mamba1_params()
        h, di, heads = self.hidden_size, self.mamba_inner_size, self.mamba_num_heads
        bc = 2 * self.mamba_num_groups * self.mamba_state_dim
        conv = (di + bc) * (self.mamba_conv_kernel + 1)
        return h * (2 * di + bc + heads) + conv + 3 * heads + di + di * h

    def mamba1_params(self) -> int:
        """One Mamba-1 mixer (Gu & Dao 2023, arXiv:2312.00752 Sec. 3.4; Hugging Face
        ``JambaMambaMixer``, models/jamba/modeling_jamba.py, with Jamba's ``mamba_conv_bias`` true and
        ``mamba_proj_bias`` false): ``in_proj`` h -> 2 d_inner (x, z), the depthwise ``conv1d`` over x
        (``d_conv`` weights and a bias per channel), ``x_proj`` d_inner -> R + 2N (dt, B, C; no bias),
        ``dt_proj`` R -> d_inner with a bias, ``A_log`` d_inner x N, ``D`` per channel, ``out_proj``
        d_inner -> h. Not counted: Jamba's RMSNorms over dt, B and C (R + 2N weights a layer, 288 in
        Jamba-1.5-Mini, under 0.0001% of it)."""
        h, di, n, r = self.hidden_size, self.mamba_inner_size, self.mamba_state_dim, self.mamba_dt_rank
        conv = di * (self.mamba_conv_kernel + 1)
        return h * 2 * di + conv + di * (r + 2 * n) + (r * di + di) + di * n + di + di * h

    def gdn_params(self) -> int:
        """One gated DeltaNet mixer (Yang et al. 2024, arXiv:2412.06464; Megatron-Core
        ``GatedDeltaNet``, megatron/core/ssm/gated_delta_net/gdn.py; Hugging Face
        ``Qwen3NextGatedDeltaNet``): ``in_proj`` h -> ``2 k + 2 v + 2 n_v`` (q, k, v, the output
        gate z, beta and alpha; k = n_k d_k, v = n_v d_v), the depthwise ``conv1d`` over q, k, v
        (no bias), ``dt_bias`` and ``A_log`` per value head, the gated RMSNorm over d_v,
        ``out_proj`` v -> h."""
        h, nv = self.hidden_size, self.linear_num_value_heads
        k = self.linear_num_key_heads * self.linear_key_head_dim
        v = nv * self.linear_value_head_dim
        conv = (2 * k + v) * self.linear_conv_kernel_dim
        return h * (2 * k + 2 * v + 2 * nv) + conv + 2 * nv + self.linear_value_head_dim + v * h

    def kda_params(self) -> int:
        """One Kimi Delta Attention mixer (arXiv:2510.26692 Sec. 3, eqs. 1-3 and the output gate of
        Sec. 4; vLLM ``KimiDeltaAttention``, vllm/model_executor/layers/kda.py, and the layers its
        ``kimi_linear.py`` builds for Kimi Linear), H heads of width d (P = H d), no biases:
        ``q_proj``, ``k_proj``, ``v_proj`` h -> P; the decay gate's low-rank ``f_a_proj`` h -> d and
        ``f_b_proj`` d -> P with ``dt_bias`` (P) and ``A_log`` (H); ``b_proj`` h -> H (beta); the
        output gate's low-rank ``g_a_proj`` h -> d and ``g_b_proj`` d -> P; the depthwise short
        convolutions of q, k and v (``short_conv_kernel_size`` weights a channel, no bias); the gated
        RMSNorm ``o_norm`` over d; ``o_proj`` P -> h. The gates' rank is the head width d, as vLLM
        builds them."""
        h, heads, d = self.hidden_size, self.linear_num_key_heads, self.linear_key_head_dim
        p = heads * d
        projections = 3 * h * p + 2 * (h * d + d * p) + h * heads + p * h
        return projections + 3 * p * self.linear_conv_kernel_dim + p + heads + d

    def mlp_params(self, ffn: int) -> int:
        """One MLP (dense or one expert) of intermediate width ``ffn``."""
        h = self.hidden_size
        n_in = 2 if self.gated else 1
        weights = n_in * h * ffn + ffn * h
        bias = (n_in * ffn + h) if self.add_bias_linear else 0
        return weights + bias

    def norm_params(self) -> int:
        """One normalisation layer (weight, and bias for LayerNorm)."""
        return self.hidden_size * (2 if self.normalization == "layernorm" else 1)

    def layer_params(self, index: int, *, active: bool = False) -> int:
        """All parameters of decoder layer ``index``; ``active`` counts only top-k experts. Each of
        its parts (:meth:`layer_parts`) has its own input norm."""
        mixer, ffn = self.layer_parts(index)
        total = 0
        if mixer:
            total += self.norm_params()
            counts = {
                "attention": self.attention_params,
                "mamba": self.mamba_params,
                "gdn": self.gdn_params,
                "kda": self.kda_params,
            }
            total += sum(counts[part]() for part in mixer.split("+"))
        if not ffn:
            return total
        total += self.norm_params()
        if ffn == "moe":
            n_routed = self.moe_router_topk if active else self.num_experts
            total += n_routed * self.mlp_params(self.moe_ffn_hidden_size)
            total += self.hidden_size * self.num_experts  # router
            if self.moe_shared_expert_intermediate_size:
                total += self.mlp_params(self.moe_shared_expert_intermediate_size)
                total += self.hidden_size if self.moe_shared_expert_gate else 0
        else:
            total += self.mlp_params(self.ffn_hidden_size)
        return total

    def embedding_params(self) -> int:
        """Word embedding table plus learned position embeddings."""
        pos = self.max_position_embeddings * self.hidden_size
        return self.vocab_size * self.hidden_size + (
            pos if self.position_embedding_type == "learned_absolute" else 0
        )

    def output_params(self) -> int:
        """Final norm plus the output projection when untied (tied: shared with the embedding)."""
        out = self.vocab_size * self.hidden_size if self.untie_embeddings_and_output_weights else 0
        return self.norm_params() + out

    @property
    def params_total(self) -> int:
        """Total parameter count."""
        return (
            self.embedding_params()
            + sum(self.layer_params(i) for i in range(self.num_layers))
            + self.output_params()
        )

    def mtp_params(self) -> int:
        """Parameters of the multi-token prediction modules (DeepSeek-V3 Sec. 2.2; Megatron
        ``MultiTokenPredictionLayer``): per module two input RMSNorms, the ``2h x h`` projection,
        one transformer layer of the last decoder layer's kind and a final norm; the embedding and
        output head are shared with the main model."""
        if not self.mtp_num_layers:
            return 0
        per = 3 * self.norm_params() + 2 * self.hidden_size * self.hidden_size
        return self.mtp_num_layers * (per + self.layer_params(self.num_layers - 1))

    @property
    def params_active(self) -> int:
        """Parameters touched per token (top-k experts only); equals the total for dense models."""
        return (
            self.embedding_params()
            + sum(self.layer_params(i, active=True) for i in range(self.num_layers))
            + self.output_params()
        )
