"""The graph-model specification: a model as a DAG of blocks (:class:`GraphModelSpec`,
:class:`Block`, :class:`Edge`) as frozen, keyword-only values (STYLE.md lesson 1); GraphPipe,
Jeon et al. 2024, arXiv:2406.17145. :mod:`planner.inputs.graph_model` loads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.model_spec import ModelSpec

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
    """Block whose output every layer cross-attends to (encoder-decoder, or a vision-language
    decoder's cross-attention layers attending to its projector's output); empty = none."""
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

    @property
    def output_width(self) -> int:
        """Elements per token of this block's output: a transformer's hidden size; a generic block's
        ``output_bytes_per_sample / (seq_length x 2)`` (0 when it has no ``seq_length``)."""
        if self.transformer:
            return self.transformer.hidden_size
        if not self.seq_length:
            return 0
        return round(self.output_bytes_per_sample / (self.seq_length * GRAPH_ACT_BYTES))

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
        if cross is not None and cross.output_width:
            total += m.num_layers * cross_attention_params(m, cross.output_width)
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
