"""The per-layer cost record and the table of layer kinds (:class:`LayerCost`, :class:`LayerTable`)
that :func:`cost_models.layers.layer_table` fills for one configuration and the stage terms, graph
units and fine-tuning terms sum: parameters, FLOPs, activation bytes, communication and times of
one layer kind for one GPU and one micro-batch (the quantities and their sources:
:mod:`cost_models.layers`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Cost of one layer for one micro-batch on one GPU. Times in seconds, sizes in bytes."""

    params_sharded: float = 0.0
    """Parameters on this GPU that tensor parallelism shards (already divided by tp)."""
    params_replicated: float = 0.0
    """Parameters every tensor-parallel rank holds in full (norms, router, position table)."""
    params_expert: float = 0.0
    """Routed-expert parameters on this GPU (divided by expert tp x ep)."""
    model_flop: float = 0.0
    """Model FLOPs of forward + backward on this GPU (Megatron convention; no recompute)."""
    forward_s: float = 0.0
    """Forward compute time."""
    backward_input_s: float = 0.0
    """Backward time for input gradients (B); includes all attention backward."""
    backward_weight_s: float = 0.0
    """Backward time for weight gradients (W)."""
    forward_comm_s: float = 0.0
    """Exposed tensor/context/expert-parallel communication in forward."""
    backward_comm_s: float = 0.0
    """Exposed tensor/context/expert-parallel communication in backward."""
    selective_recompute_s: float = 0.0
    """Extra backward time with selective recompute (core attention forward again)."""
    op_recompute_s: float = 0.0
    """Extra backward time with per-op selective recompute (:mod:`cost_models.recompute`)."""
    op_kept_bytes: float = 0.0
    """Activations kept with per-op selective recompute."""
    selective_dropped_bytes: float = 0.0
    """Part of ``activation_bytes`` that selective recompute does not keep: what core attention keeps
    for its backward (:attr:`cost_models.attention.AttentionBlock.core_kept_bytes`), recomputed."""
    activation_bytes: float = 0.0
    """Activations kept for backward without recompute."""
    checkpoint_bytes: float = 0.0
    """Activations kept with full recompute (the layer input)."""
    weight_grad_bytes: float = 0.0
    """Part of ``activation_bytes`` needed only by the weight-gradient pass (freed by W)."""
    tp_comm_bytes: float = 0.0
    """Bytes each GPU sends for tensor parallelism per micro-batch (forward + backward)."""
    cp_comm_bytes: float = 0.0
    """Bytes each GPU sends for context parallelism per micro-batch (forward + backward)."""
    ep_comm_bytes: float = 0.0
    """Bytes each GPU sends in expert all-to-alls per micro-batch (forward + backward)."""
    working_bytes: float = 0.0
    """Memory one pass of the layer allocates and frees on top of what it keeps (unfused core
    attention's pre-softmax scores, :attr:`cost_models.attention.AttentionBlock.working_bytes`): a
    transient while the layer runs. A sum of layers' values means nothing: a stage takes its
    largest layer's (:mod:`cost_models.stage_terms`)."""
    frozen_weight_bytes: float = 0.0
    """Bytes of frozen weights on this GPU (a LoRA job's base, :mod:`cost_models.finetune`): held, but
    with no gradient and no optimizer state, and not counted in ``params_*`` (the trained ones)."""

    def __add__(self, other: LayerCost) -> LayerCost:
        return LayerCost(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def scaled(self, k: float) -> LayerCost:
        """This cost times ``k`` (k identical layers)."""
        return LayerCost(*(a * k for a in self.astuple()))

    def astuple(self) -> tuple[float, ...]:
        """Field values in declaration order."""
        return tuple(getattr(self, name) for name in FIELD_NAMES)

    @property
    def params(self) -> float:
        """All parameters on this GPU."""
        return self.params_sharded + self.params_replicated + self.params_expert

    @property
    def recompute_forward_s(self) -> float:
        """Time of re-running this layer's forward (full recompute)."""
        return self.forward_s + self.forward_comm_s

    def recompute_s(self, mode: str) -> float:
        """Extra backward time when this layer is recomputed under a per-layer mode
        (:data:`cost_models.parallel.LAYER_RECOMPUTE`): its whole forward (full) or the ops per-op
        selective recompute does not keep (op); 0 otherwise."""
        return {"full": self.recompute_forward_s, "op": self.op_recompute_s}.get(mode, 0.0)

    def recomputed_bytes(self, mode: str) -> float:
        """Activations this layer keeps when recomputed under ``mode`` (full: its input; op: what the
        policy saves; selective: all but core attention's own); without recompute all of them."""
        if mode == "selective":
            return self.activation_bytes - self.selective_dropped_bytes
        return {"full": self.checkpoint_bytes, "op": self.op_kept_bytes}.get(mode, self.activation_bytes)


FIELD_NAMES = tuple(f.name for f in fields(LayerCost))
"""The fields of :class:`LayerCost` in order (its :meth:`LayerCost.astuple`)."""
ZERO = LayerCost()
"""No cost: the sum's start."""


@dataclass(frozen=True, slots=True)
class LayerTable:
    """The cost of every layer kind under one configuration, for one micro-batch."""

    embedding: LayerCost
    dense: LayerCost
    """A dense decoder layer (full attention)."""
    moe: LayerCost
    """An MoE decoder layer (full attention)."""
    output: LayerCost
    """Final norm, output layer and loss, plus the multi-token prediction modules (``mtp``)."""
    edges: LayerCost
    """Embedding + output layer (what the first and last stages add), precomputed."""
    dense_local: LayerCost = ZERO
    """A dense decoder layer with local (sliding-window or chunked) attention."""
    moe_local: LayerCost = ZERO
    """An MoE decoder layer with local attention."""
    mtp: LayerCost = ZERO
    """The multi-token prediction modules alone (already included in ``output``)."""
    parts: tuple[tuple[tuple[str, str], LayerCost], ...] = ()
    """Layer costs by (token mixer, MLP) (:meth:`ModelSpec.layer_parts`) for models whose layers
    are not all softmax attention + MLP (hybrid patterns, gated DeltaNet layers); empty otherwise."""

    def decoder(self, model: ModelSpec, index: int) -> LayerCost:
        """Cost of decoder layer ``index``."""
        if self.parts:
            return dict(self.parts)[model.layer_parts(index)]
        if model.is_local_attention_layer(index):
            return self.moe_local if model.is_moe_layer(index) else self.dense_local
        return self.moe if model.is_moe_layer(index) else self.dense

    def layers(self, model: ModelSpec, first: int, count: int) -> LayerCost:
        """Cost of decoder layers ``first .. first + count - 1``."""
        total = ZERO
        for kind, n in _kind_counts(self, model, first, count):
            total = total + kind.scaled(n)
        return total

    def mean_layer(self, model: ModelSpec) -> LayerCost:
        """The average decoder layer of the model (for searches that treat layers as equal)."""
        return self.layers(model, 0, model.num_layers).scaled(1 / model.num_layers)


def _kind_counts(t: LayerTable, model: ModelSpec, first: int, count: int) -> list[tuple[LayerCost, int]]:
    """(layer kind, how many) over a range of layers, in a fixed order (stable float sums)."""
    if t.parts:
        by_parts = {key: 0 for key, _ in t.parts}
        for i in range(first, first + count):
            by_parts[model.layer_parts(i)] += 1
        return [(cost, by_parts[key]) for key, cost in t.parts if by_parts[key]]
    counts = {"dense": 0, "moe": 0, "dense_local": 0, "moe_local": 0}
    for i in range(first, first + count):
        local = "_local" if model.is_local_attention_layer(i) else ""
        counts[("moe" if model.is_moe_layer(i) else "dense") + local] += 1
    return [(getattr(t, k), n) for k, n in counts.items() if n]
