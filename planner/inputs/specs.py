"""Model, hardware, cluster and job specifications: frozen, keyword-only values.

Specs are values (STYLE.md lesson 1): they are built once by the loaders in
:mod:`planner.inputs.models` and never mutated. Units are in the field names and SI inside
(bytes, seconds, FLOP, FLOP/s, bytes/s). Field names of :class:`ModelSpec` follow
Megatron-LM's argument names (``megatron/training/arguments.py``) so that import and
export are one-to-one.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATIONS = ("gelu", "relu", "swiglu", "squared_relu")
NORMALIZATIONS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "none")
WINDOW_TYPES = ("sliding", "chunked")
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
PRECISIONS = ("bf16", "fp16", "fp8")
DTYPES = ("fp32", "bf16", "fp16")
ATTENTION_IMPLS = ("fused", "unfused", "flash2")
SHARDED_GRAD_REDUCES = ("reduce_scatter", "all_reduce")
"""How gradients reach a distributed (ZeRO-1) optimizer (:attr:`JobSpec.sharded_grad_reduce`)."""
FP8_RECIPES = ("tensorwise", "delayed", "blockwise", "mxfp8")
"""FP8 scaling recipes (``JobSpec.fp8_recipe``), Megatron-Core's ``--fp8-recipe`` names
(``TransformerConfig.fp8_recipe``; Transformer Engine's ``Float8CurrentScaling``, ``DelayedScaling``,
``Float8BlockScaling`` and ``MXFP8BlockScaling``)."""
MXFP8_MIN_COMPUTE_CAPABILITY = 10
"""MXFP8 runs on Blackwell (SM 10.0) and later only (Transformer Engine user guide, "MXFP8": "native
hardware acceleration on Blackwell GPUs (SM 10.0+)"; Megatron-Core ``fp8_recipe``: "'mxfp8' for
Blackwell architecture only")."""
"""How core attention runs (:attr:`JobSpec.attention_impl`)."""

EAGER_OPS = ("norm", "rope", "activation")
"""Elementwise op groups a job may run as separate eager PyTorch kernels instead of fused ones
(:attr:`JobSpec.eager_ops`; byte counts in :mod:`cost_models.elementwise`)."""

GATED_ACTIVATIONS = frozenset({"swiglu"})


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
    """MLP activation: one of ``ACTIVATIONS``; ``swiglu`` uses three weight matrices."""
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
    mtp_num_layers: int = 0
    """Multi-token prediction modules (``--mtp-num-layers``; DeepSeek-V3, arXiv:2412.19437
    Sec. 2.2): each a projection of [norm(h); norm(embedding)] (2h x h), one transformer layer of
    the last layer's kind, a final norm, and the shared embedding and output head. Megatron places
    them on the last pipeline stage; they are not counted in ``params_total``."""

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
        ``2 x keys x core_attention_width`` FLOPs per query (QK^T and PV); ``2 q`` for MHA/GQA."""
        return self.num_attention_heads * (self.qk_head_size + self.v_head_size)

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` (0-based) is an MoE layer: ``moe_layer_pattern[index]``
        when a pattern is given, else Megatron's ``moe_layer_freq`` (``index % freq == 0``)."""
        if not self.is_moe:
            return False
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
        the tiles on the window's edge (a lower bound for small windows).
        """
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
            return self.mla_params() + sinks
        h, q, kv = self.hidden_size, self.query_projection_size, self.kv_projection_size
        weights = h * (q + 2 * kv) + q * h
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
        """All parameters of decoder layer ``index``; ``active`` counts only top-k experts."""
        total = self.attention_params() + 2 * self.norm_params()
        if self.is_moe_layer(index):
            n_routed = self.moe_router_topk if active else self.num_experts
            total += n_routed * self.mlp_params(self.moe_ffn_hidden_size)
            total += self.hidden_size * self.num_experts  # router
            if self.moe_shared_expert_intermediate_size:
                total += self.mlp_params(self.moe_shared_expert_intermediate_size)
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


@dataclass(frozen=True, kw_only=True, slots=True)
class EfficiencySpec:
    """Achieved-throughput data of one GPU type (calibrated; see docs/calibration.md).

    GEMM efficiency follows a saturating curve in the GEMM's size:
    ``eff(F) = gemm_efficiency_max * F / (F + gemm_half_efficiency_flop)`` where F is the FLOP
    count of one GEMM call, so small (e.g. tensor-parallel-sliced) GEMMs run below peak. This
    is the smooth form of Calculon's piecewise efficiency-by-size tables (Isaev et al., SC'23).
    """

    gemm_efficiency_max: float
    """Fraction of dense peak reached by large GEMMs."""
    gemm_half_efficiency_flop: float
    """GEMM size (FLOP per call) at which efficiency is half the maximum."""
    attention_efficiency: float
    """Fraction of dense peak reached by fused (flash) attention kernels, forward."""
    hbm_efficiency: float
    """Fraction of HBM bandwidth reached by memory-bound elementwise kernels."""
    fp8_gemm_speedup: float
    """Achieved speed-up of an FP8 GEMM over the same BF16 GEMM (1.0 where FP8 is unsupported)."""
    kernel_overhead_s: float
    """Fixed launch and synchronisation overhead per transformer layer per pass, seconds."""
    comm_overlap_slowdown: float = 0.0
    """Compute time added per second of communication hidden under it: NCCL kernels take SMs (an
    all-gather launches 24 CTAs on a 132-SM H100, ~18%) and HBM bandwidth from the GEMMs they overlap
    (Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed
    Deep Learning", arXiv:2507.03114). Charged on FSDP/ZeRO-2 prefetch and the overlapped
    data-parallel reduction and gather; fitted per GPU family (scripts/calibrate.py)."""
    grouped_gemm_efficiency: float = 1.0
    """An MoE layer's grouped expert GEMMs' speed relative to one dense GEMM of the same total FLOPs
    and tile-padded rows (cost_models.moe.grouped_linear_s). 1.0 is the kernel: a fused grouped
    kernel (``torch._grouped_mm``) and Transformer Engine's ``GroupedLinear`` (one cuBLAS GEMM per
    local expert over four streams, ``multi_stream_cublas_gemm``) both run at that price from about
    a thousand tokens per expert, measured on an H100 and an H200 (docs/calibration.md, "MoE
    grouped GEMMs in three passes"). Fitted per GPU family and software release on its MoE runs
    (0.39-0.72), it therefore stands for the MoE layer's costs not yet priced on their own (host
    synchronisation on token counts, permutation, router and dispatcher kernels), applied where the
    expert GEMMs are."""
    host_launch_s: float = 0.0
    """Host (CPU) time to issue one kernel from an eager PyTorch module (Python, the dispatcher and
    the CUDA launch; 5-50 us per kernel, NVIDIA's CUDA Graphs documentation and Megatron-Core's
    ``--cuda-graph-impl`` help; 13.5-100 us per linear forward, TransformerEngine issue #2053). It
    bounds an MoE layer's pass from below, since the token dispatcher synchronises the host on the
    token counts every layer, so the host issues each whole layer after the GPU has drained
    (cost_models.moe.host_launches; Megatron-Core's MoE README, "CPU Overhead Bottleneck": reduce
    kernel launches by a smaller TP or a larger micro-batch); 0 = never binding. Fitted per GPU
    family on its MoE runs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One GPU type: capacity, peaks, and achieved-efficiency data."""

    name: str
    """Catalogue name, e.g. ``h100-sxm5-80gb``."""
    memory_bytes: int
    """HBM capacity in bytes."""
    peak_flop_per_s: tuple[tuple[str, float], ...]
    """Dense (no sparsity) tensor-core peak per dtype, as (dtype, FLOP/s) pairs: bf16, fp16, fp8, tf32."""
    hbm_bandwidth_bytes_per_s: float
    """Peak HBM bandwidth."""
    memory_reserve_bytes: int
    """Memory not available to tensors: CUDA context, NCCL buffers, workspaces."""
    efficiency: EfficiencySpec
    """Achieved-throughput data."""
    source: str = ""
    """Citation for the numbers."""
    tdp_w: float = 0.0
    """Thermal design power (maximum board power) in watts, from the vendor datasheet; 0 when
    unknown (no energy estimate then)."""
    sm_count: int = 0
    """Streaming multiprocessors, from the vendor's architecture whitepaper: the wave size of GEMM
    tiles (:func:`cost_models.compute.gemm_quantization`); 0 when unknown (no quantization)."""
    gemm_tile: tuple[int, int] | None = (256, 128)
    """Output tile (rows, columns) of one GEMM thread block, one per SM: NVIDIA's "Matrix
    Multiplication Background User's Guide" example for A100 (256 x 128 tiles, one thread block per
    SM, a wave of 108 tiles). None (``gemm_tile: null`` in a GPU file): no tile or wave
    quantization, as Hopper's GEMM kernels measure (docs/calibration.md, "Linear-layer GEMMs in their
    three passes"; the shipped Hopper files keep 128 x 128 tiles, and the docs say why)."""
    gemm_stream_bytes_per_s: float = 0.0
    """Rate at which a GEMM with few rows per weight (an MoE grouped GEMM at tens of tokens per
    expert) streams its weights, measured (``gemm_stream_gb_per_s`` in a GPU file; docs/calibration.md,
    "MoE grouped GEMMs in three passes"); 0 when unmeasured: the HBM bandwidth times ``hbm_efficiency``
    (:meth:`gemm_stream_bandwidth`). Hopper's kernels stream at about 2.4-2.7 TB/s on an H100 and on
    an H200 alike, whose HBM is 1.4x faster: the limit is the SMs' loads, not HBM."""
    attention_kernel_speed: tuple[float, float] = (1.0, 1.0)
    """Speed of this GPU's fused full-attention kernels (forward, backward) relative to the same
    kernels on the other GPUs of its efficiency family at the same tensor-core peak: Blackwell
    Ultra's doubled exponential (SFU) throughput makes cuDNN's causal attention 1.18x (forward) and
    1.10x (backward) faster on a GB300 than on a GB200 of equal BF16 peak
    (hardware_profiles/gpus/gb300.yaml cites the measurement). 1 elsewhere."""
    host_link_bytes_per_s: float = 0.0
    """Bytes per second one GPU moves to host memory, or back, in each direction at once: the PCIe
    link to the host CPU, or NVLink-C2C on a Grace superchip (``host_link_gb_per_s`` in a GPU
    file; each shipped file cites its datasheet). Prices activation offloading
    (``ParallelConfig.offload_layers``); 0 when unknown (no offloading planned on this GPU)."""
    local_attention_kernel_speed: tuple[float, float] = (1.0, 1.0)
    """The same for sliding-window (local) attention kernels, which are bound by memory and latency
    more than by the exponentials (GB300 over GB200: 1.04 / 1.06 at a 128-token window)."""

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises ``KeyError`` when unsupported."""
        value = dict(self.peak_flop_per_s).get(dtype)
        if not value:
            raise KeyError(f"{self.name} has no {dtype} tensor-core peak")
        return value

    def supports(self, dtype: str) -> bool:
        """Whether the GPU has a tensor-core peak for ``dtype``."""
        return bool(dict(self.peak_flop_per_s).get(dtype))

    def gemm_stream_bandwidth(self) -> float:
        """Bytes per second a weight-streaming GEMM reaches (:attr:`gemm_stream_bytes_per_s`, or the
        HBM bandwidth times ``hbm_efficiency`` when unmeasured)."""
        return self.gemm_stream_bytes_per_s or self.hbm_bandwidth_bytes_per_s * self.efficiency.hbm_efficiency


@dataclass(frozen=True, kw_only=True, slots=True)
class NVLinkMesh:
    """Point-to-point NVLink wiring of a node without NVSwitch (DGX-1's hybrid cube-mesh): GPUs
    reach only some peers, over one or more bonded links, so a collective's bandwidth depends on
    which GPUs form the group (:func:`cost_models.communication.mesh_ring_channels`)."""

    links: tuple[tuple[int, ...], ...]
    """``links[i][j]``: NVLink links between local GPUs i and j (``nvidia-smi topo -m``'s ``NV#``);
    symmetric, zero on the diagonal, one row per GPU of the node."""
    link_bandwidth_bytes_per_s: float
    """Unidirectional bandwidth of one link (V100 NVLink2: 25 GB/s each way)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeGroup:
    """A set of identical nodes: one GPU type and one set of links."""

    gpu: GPUSpec
    """GPU type of every node in the group."""
    num_nodes: int
    """Number of nodes."""
    gpus_per_node: int
    """GPUs per node."""
    intra_node_bandwidth_bytes_per_s: float
    """Unidirectional NVLink (or fabric) bandwidth per GPU inside an NVLink domain."""
    intra_node_latency_s: float
    """Per-step latency of a collective inside the NVLink domain."""
    inter_node_bandwidth_bytes_per_s: float
    """Unidirectional network bandwidth per GPU across NVLink domains."""
    inter_node_latency_s: float
    """Per-step latency of a collective across the network."""
    nvlink_domain_size: int
    """GPUs reachable over NVLink (8 for DGX, 72 for GB200 NVL72)."""
    intra_node_efficiency: float = 0.8
    """Achieved fraction of NVLink bandwidth by NCCL collectives."""
    inter_node_efficiency: float = 0.9
    """Achieved fraction of network bandwidth by NCCL collectives."""
    nvlink_mesh: NVLinkMesh | None = None
    """Point-to-point NVLink wiring when the node has no NVSwitch; ``None``: every GPU pair gets
    ``intra_node_bandwidth_bytes_per_s`` (NVSwitch nodes)."""
    host_memory_bytes: float = 0.0
    """System (CPU) memory of one node (``host_memory_gb`` in a cluster file; each shipped
    template cites its datasheet). Holds the activations a plan offloads
    (``ParallelConfig.offload_layers``): :attr:`cost_models.estimate.Estimate.host_fits` checks
    them against :data:`cost_models.memory.HOST_MEMORY_USABLE_FRACTION` of it. 0 when unknown
    (nothing checked)."""

    @property
    def num_gpus(self) -> int:
        """GPUs in this group."""
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """A cluster: one or more node groups, ranks numbered group by group."""

    name: str
    """Template or file name, for display."""
    groups: tuple[NodeGroup, ...]
    """Node groups in rank order; several groups form a heterogeneous cluster."""
    gpu_hour_price_usd: float | None = None
    """Price of one GPU-hour in US dollars (cluster file key ``gpu_hour_price_usd``), if given."""

    @property
    def num_gpus(self) -> int:
        """Total GPUs."""
        return sum(g.num_gpus for g in self.groups)

    @property
    def is_heterogeneous(self) -> bool:
        """Whether the groups differ in GPU type or links."""
        return (
            len(
                {
                    (g.gpu.name, g.gpus_per_node, g.inter_node_bandwidth_bytes_per_s, g.nvlink_mesh)
                    for g in self.groups
                }
            )
            > 1
        )

    def group_of_rank(self, rank: int) -> NodeGroup:
        """Node group holding global ``rank``."""
        start = 0
        for g in self.groups:
            if rank < start + g.num_gpus:
                return g
            start += g.num_gpus
        raise IndexError(f"rank {rank} outside a cluster of {self.num_gpus} GPUs")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """What is being trained per iteration and with which numerics."""

    global_batch_size: int
    """Sequences per optimizer step."""
    seq_length: int
    """Tokens per sequence."""
    precision: str = "bf16"
    """Compute precision of GEMMs: bf16, fp16, or fp8 (FP8 GEMMs, BF16 elsewhere)."""
    fp8_recipe: str = "tensorwise"
    """How FP8 tensors are scaled (:data:`FP8_RECIPES`; only read when ``precision`` is fp8):
    ``tensorwise`` (per-tensor current scaling, the default: the recipe both Megatron-Core and
    torchtitan's float8 run, and the one of NVIDIA's Hopper performance recipes), ``delayed``
    (per-tensor scale from an amax history; Megatron-Core's own default), ``blockwise`` (1 x 128 /
    128 x 128 blocks, FP32 scales) or ``mxfp8`` (32-element blocks, E8M0 scales; Blackwell only,
    :data:`MXFP8_MIN_COMPUTE_CAPABILITY`). The recipes quantize with different HBM traffic
    (:func:`cost_models.compute.fp8_cast_bytes`)."""
    optimizer: str = "adam"
    """Optimizer; only Adam (two moments per parameter, :attr:`optimizer_state_dtype`) is modelled."""
    grad_dtype: str = "fp32"
    """Dtype of the main gradients (Megatron accumulates bf16 grads in fp32 by default)."""
    master_dtype: str = "fp32"
    """Dtype of the master copy of the weights held by the optimizer."""
    optimizer_state_dtype: str = "fp32"
    """Dtype of Adam's two moments (``exp_avg``, ``exp_avg_sq``). Megatron-Core keeps them in fp32
    unless ``--use-precision-aware-optimizer`` with ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype``
    (Transformer Engine's ``FusedAdam``; megatron/core/optimizer/optimizer_config.py: other dtypes
    "can only be fp32 when not using precision-aware optimizer"), as Megatron-Bridge's DeepSeek-V3
    recipe sets bf16 (src/megatron/bridge/recipes/deepseek/deepseek_v3.py,
    ``opt_config.exp_avg_dtype = torch.bfloat16``)."""
    overlap_grad_reduce: bool = True
    """Overlap the data-parallel gradient reduction with backward (``--overlap-grad-reduce``)."""
    overlap_param_gather: bool = True
    """Overlap the distributed optimizer's parameter all-gather with forward."""
    gradient_accumulation_fusion: bool = True
    """Weight-gradient GEMMs accumulate straight into the main gradient buffer (Megatron-LM's
    default ``gradient_accumulation_fusion``: TE / APEX wgrad kernels with beta = 1). False
    (``--no-gradient-accumulation-fusion``): each micro-batch's weight gradient is written in
    16 bits and added to the main gradient by a separate kernel
    (:func:`cost_models.estimate.unfused_accumulation_bytes`). Megatron-FSDP always runs unfused and its
    sharded gradient path is priced as such, so the field changes nothing there."""
    tp_comm_overlap: bool = False
    """Overlap the sequence-parallel all-gathers / reduce-scatters with the GEMMs next to them
    (Megatron-LM ``--tp-comm-overlap``: Transformer Engine userbuffers; needs sequence parallelism).
    Off by default: it needs Transformer Engine's userbuffers bootstrap, and a plan only claims it
    when its launch sets it."""
    moe_dispatcher: str = "alltoall"
    """MoE token dispatcher (Megatron-Core ``--moe-token-dispatcher-type``): ``alltoall``
    (permute, all-to-all over the expert-parallel group, sort by expert; the default), ``allgather``
    (all-gather the tokens, keep the local experts' ones) or ``flex`` (DeepEP / HybridEP kernels
    that permute while they communicate, ``--moe-flex-dispatcher-backend``)."""
    moe_a2a_overlap: bool = False
    """Hide the expert-parallel all-to-alls of one micro-batch under another micro-batch's compute
    (Megatron-Core ``--overlap-moe-expert-parallel-comm``, the 1F1B "A2A overlap")."""
    cuda_graph_scope: tuple[str, ...] = ()
    """What CUDA graphs capture (Megatron-Core ``--cuda-graph-impl`` with ``--cuda-graph-scope``;
    :data:`CUDA_GRAPH_SCOPES`); () = none. A captured part of an MoE layer costs the host one graph
    launch instead of one launch per kernel (cost_models.moe.host_launches)."""
    eager_ops: tuple[str, ...] = ()
    """Elementwise op groups (of :data:`EAGER_OPS`: ``norm``, ``rope``, ``activation``) that run as
    eager PyTorch, one kernel and one HBM round trip per PyTorch op, instead of one fused kernel
    each. Empty (the default): all fused, as Megatron-Core with Transformer Engine and
    ``torch.compile`` run them. torchtitan without ``torch.compile`` runs ``rope`` and
    ``activation`` eager (``norm`` too before PyTorch's fused RMSNorm kernel); the bytes each group
    moves either way are derived in :mod:`cost_models.elementwise`. Kept in :data:`EAGER_OPS`
    order."""
    attention_impl: str = "fused"
    """Core attention (:data:`ATTENTION_IMPLS`): ``fused``, one flash-attention kernel per
    direction written for the GPU's generation (cuDNN / Transformer Engine fused attention,
    FlashAttention-3 on Hopper, FlashAttention-2 on Ampere, PyTorch SDPA where it picks cuDNN);
    ``flash2``, FlashAttention-2 kernels on any GPU (the flash-attn 2 package, and PyTorch SDPA's
    default backend on Hopper and Blackwell before PyTorch 2.11), which run at
    :data:`cost_models.attention.FLASH2_SPEED` of the fused kernel from Hopper on
    (:func:`cost_models.attention.kernel_speed`); or ``unfused``, Megatron-LM's ``CoreAttention``
    before flash attention (2019-2022 releases, Megatron-DeepSpeed): two batched GEMMs around a
    fused scale-mask-softmax kernel and attention dropout, with the score matrix written to HBM
    (:func:`cost_models.attention.unfused_core_attention`)."""
    pipeline_scatter_gather: bool = False
    """Without sequence parallelism, each tensor-parallel rank sends 1/tp of the hidden states (and
    of their gradient) to the next pipeline stage, whose ranks all-gather them over tp: the
    "scatter/gather optimization" of Narayanan et al. 2021 (arXiv:2104.04473, Sec. 4.1), on by
    default in Megatron-LM from 2021-02 (commit 72e4230bb5) until the pipeline code moved into
    Megatron-Core (2023-01, commit 39b83c7953, which sends whole tensors unless sequence
    parallelism splits them), and DeepSpeed's ``PipelineEngine`` with model parallelism
    (``is_pipe_partitioned`` / ``is_grad_partitioned``, ``deepspeed/runtime/pipe/engine.py``).
    Priced by :func:`cost_models.tensors.pipeline_transfer_s`; neither pinned framework runs it
    (their capabilities refuse it), so it describes published runs of older software."""
    sharded_grad_reduce: str = "reduce_scatter"
    """How a distributed (ZeRO-1) optimizer's gradients are reduced over the data-parallel ranks
    (:data:`SHARDED_GRAD_REDUCES`; read only with ``optimizer_sharding: distributed``):
    ``reduce_scatter``, each rank receives the reduced shard it updates (Megatron-Core's distributed
    optimizer, megatron/core/distributed/param_and_grad_buffer.py ``start_grad_sync``; DeepSpeed
    ZeRO stage 1-2, whose ``average_tensor`` reduces each slice to its owner), or ``all_reduce``,
    the whole gradient is all-reduced on every rank before each updates its shard and the updated
    parameters are all-gathered: DeepSpeed's pipeline engine with its ``BF16_Optimizer``
    (``deepspeed/runtime/pipe/engine.py`` ``_bf16_reduce_grads``: ``buffered_allreduce_fallback``
    over the optimizer's fp32 gradients, then ``all_gather_dp_groups`` in
    ``bf16_optimizer.py`` ``step``; BLOOM's BF16 runs) and Aleph Alpha's codebase with ZeRO
    (Aleph-Alpha/scaling ``src/scaling/core/optimizer/optimizer.py``, ``Optimizer.step``:
    ``allreduce_gradients`` before the sharded step). The all-reduce moves twice the bytes of the
    reduce-scatter. Priced by :func:`cost_models.estimate.dp_sync`; neither pinned framework runs
    it (their capabilities refuse it), so it describes published runs of other software."""

    @property
    def tokens_per_step(self) -> int:
        """Tokens processed per optimizer step."""
        return self.global_batch_size * self.seq_length

    @property
    def optimizer_below_fp32(self) -> bool:
        """Whether the optimizer keeps its master weights or Adam's moments below fp32: Megatron-Core's
        precision-aware optimizer (``--use-precision-aware-optimizer``), the only one that does."""
        return (self.master_dtype, self.optimizer_state_dtype) != ("fp32", "fp32")


def compute_capability_major(gpu_name: str) -> int:
    """CUDA compute-capability major of a GPU preset (NVIDIA's CUDA GPUs table,
    developer.nvidia.com/cuda-gpus), for what depends on the architecture: Megatron-LM's
    ``get_device_arch_version() < 10`` in validate_args, and kernels written for one generation.
    Volta (V100) 7, Ampere and Ada (A100, A10, A30, A40, L4, L40S) 8, Hopper (H100, H200, H800,
    GH200) 9, Blackwell (B100, B200, GB200, B300, GB300) 10; 0 for a GPU without a CUDA compute
    capability (AMD Instinct) or one not named here, which counts as before Blackwell."""
    name = gpu_name.lower()
    table = (
        (10, ("b100", "b200", "gb200", "b300", "gb300")),
        (9, ("h100", "h200", "h800", "gh200")),
        (8, ("a100", "a10", "a30", "a40", "l40", "l4")),
        (7, ("v100",)),
    )
    for major, keys in table:
        if any(k in name for k in keys):
            return major
    return 0


MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
"""Values of :attr:`JobSpec.moe_dispatcher` (Megatron-Core ``--moe-token-dispatcher-type``)."""
CUDA_GRAPH_SCOPES = ("full", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")
"""Values of :attr:`JobSpec.cuda_graph_scope`: Megatron-Core's ``--cuda-graph-scope`` choices
(``megatron/training/arguments.py``; ``mamba`` left out: no Mamba layers here) and ``full``, every
whole transformer layer (``--cuda-graph-impl`` with no scope)."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of each dtype."""


# ------------------------------------------------------------------------------------------------
# Graph models (planner.inputs.graph_model loads them; GraphPipe, Jeon et al. 2024, arXiv:2406.17145)

GRAPH_ACT_BYTES = 2
"""Bytes per activation element handed between graph-model blocks (16-bit activations)."""

BLOCK_TYPES = ("transformer", "generic")


@dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """One block of a graph model."""

    name: str
    type: str
    """``transformer`` or ``generic``."""
    transformer: ModelSpec | None = None
    """Layer description of a transformer block (Megatron field names)."""
    seq_length: int = 0
    """Tokens per sample this block processes; 0 = the job's sequence length."""
    causal: bool = True
    """Causal (decoder) attention; false for bidirectional encoders (twice the executed attention)."""
    embedding: bool = False
    """Whether the first layer carries a token embedding of ``vocab_size``."""
    output_head: bool = False
    """Whether the last layer carries the output projection and the loss."""
    cross_attention_from: str = ""
    """Block whose output every layer cross-attends to (encoder-decoder); empty = none."""
    forward_flop_per_sample: float = 0.0
    """Generic block: forward FLOPs per sample (backward is twice this)."""
    params: int = 0
    """Generic block: parameters."""
    activation_bytes_per_sample: float = 0.0
    """Generic block: activations kept for backward per sample."""
    output_bytes_per_sample: float = 0.0
    """Generic block: bytes of its output per sample."""

    @property
    def num_units(self) -> int:
        """Partitionable units: transformer layers, or one for a generic block."""
        return self.transformer.num_layers if self.transformer else 1

    def tokens(self, job_seq_length: int) -> int:
        """Tokens per sample."""
        return self.seq_length or job_seq_length

    def output_bytes(self, job_seq_length: int) -> float:
        """Bytes of this block's output per sample."""
        if self.transformer:
            return float(self.tokens(job_seq_length) * self.transformer.hidden_size * GRAPH_ACT_BYTES)
        return self.output_bytes_per_sample

    def param_count(self, cross: Block | None = None) -> int:
        """Parameters of the block (with cross-attention projections when it has them)."""
        m = self.transformer
        if m is None:
            return self.params
        total = sum(m.layer_params(i) for i in range(m.num_layers))
        if self.embedding:
            total += m.vocab_size * m.hidden_size
            if m.position_embedding_type == "learned_absolute":
                total += m.max_position_embeddings * m.hidden_size
        if self.output_head:
            total += m.norm_params()
            if m.untie_embeddings_and_output_weights or not self.embedding:
                total += m.vocab_size * m.hidden_size
        if cross is not None and cross.transformer is not None:
            total += m.num_layers * cross_attention_params(m, cross.transformer.hidden_size)
        return total


def cross_attention_params(m: ModelSpec, source_hidden: int) -> int:
    """Q and output projections from the decoder width, K and V from the source's width, one norm."""
    q, kv = m.query_projection_size, m.kv_projection_size
    return m.hidden_size * q + source_hidden * 2 * kv + q * m.hidden_size + m.norm_params()


@dataclass(frozen=True, kw_only=True, slots=True)
class Edge:
    """A tensor one block hands to another, per sample."""

    src: str
    dst: str
    bytes_per_sample: float = 0.0
    """0 = the source block's output size."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphModelSpec:
    """A model as a DAG of blocks."""

    name: str
    blocks: tuple[Block, ...]
    edges: tuple[Edge, ...]
    description: str = ""
    source: str = ""

    def block(self, name: str) -> Block:
        """The block called ``name``."""
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(name)

    def cross_source(self, b: Block) -> Block | None:
        """The block ``b`` cross-attends to."""
        return self.block(b.cross_attention_from) if b.cross_attention_from else None

    @property
    def params_total(self) -> int:
        """All parameters."""
        return sum(b.param_count(self.cross_source(b)) for b in self.blocks)

    def edge_bytes(self, e: Edge, job_seq_length: int) -> float:
        """Bytes per sample on edge ``e``."""
        return e.bytes_per_sample or self.block(e.src).output_bytes(job_seq_length)

    @property
    def num_units(self) -> int:
        """Partitionable units over all blocks."""
        return sum(b.num_units for b in self.blocks)


COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
"""Peak used as the base for each job precision (FP8 is BF16 peak times the calibrated FP8 speed-up)."""
