"""Costs of graph models (DAGs of blocks) per partitionable unit.

A *unit* is one transformer layer of a transformer block (the first carries the block's token
embedding, the last its output layer and loss) or one whole generic block. Units are numbered in a
topological order of the blocks, consecutively within a block. Each unit's cost comes from the same
per-layer table as chain models (:mod:`cost_models.layers`), computed with the block's own width
and tokens per sample, so a one-block graph model costs exactly what the equivalent
:class:`~planner.inputs.model_spec.ModelSpec` costs. Additions for graph models:

* bidirectional (encoder) attention executes the full ``4 T s q / t`` attention FLOPs, twice a
  causal layer's (Megatron ``num_floating_point_operations`` counts the full product for both);
* cross-attention (T5, Raffel et al. 2020, arXiv:1910.10683, Sec. 3.1): per decoder layer, Q and
  output projections at the decoder width, K and V projections of the encoder output, attention of
  ``T`` queries over the encoder's ``s_enc`` keys, one more tensor-parallel all-reduce per pass
  (the source may be a generic block: a vision-language projector's output, its width
  :attr:`~planner.inputs.graph_spec.Block.output_width`); a block's hybrid layer pattern prices
  each layer as :meth:`~cost_models.layers.LayerTable.decoder` does (``-``: MLP only, so a ``-``
  layer with cross-attention has no self-attention, as Llama 3.2 Vision's cross-attention layers);
* generic blocks: ``F`` forward FLOPs as tensor-parallel GEMMs (time ``F/t`` at the GEMM efficiency
  of that size), backward twice the forward (input and weight gradients, Narayanan et al. 2021),
  parameters and activations split over ``t``, one all-reduce of the output per pass.

The stage graphs built of units are estimated by :mod:`cost_models.graph_costs`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cost_models import communication as comm
from cost_models import memory as mem
from cost_models.attention import core_attention_s
from cost_models.compute import (
    COMPUTE_DTYPE,
    attention_s,
    fp4_speedup,
    fp8_cast_s,
    gemm_efficiency,
    gemm_s,
    memory_bound_s,
    quantize_bytes,
)
from cost_models.data_parallel import unfused_accumulation_applies, unfused_accumulation_bytes
from cost_models.estimate import table_for
from cost_models.graph_schedule import topological_order
from cost_models.layer_cost import ZERO, LayerCost
from cost_models.layers import loss_transient_bytes
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import ACT_BYTES, p2p_activation_bytes, tp_collectives_s
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.errors import ConfigError
from planner.inputs.graph_spec import Block, GraphModelSpec, cross_attention_params
from planner.inputs.job_spec import FP4_PRECISIONS, QUANTIZED_PRECISIONS, JobSpec


def block_order(g: GraphModelSpec) -> list[int]:
    """Block indices in topological order (file order among ready blocks)."""
    index = {b.name: i for i, b in enumerate(g.blocks)}
    return topological_order(len(g.blocks), [(index[e.src], index[e.dst]) for e in g.edges])


@dataclass(frozen=True, slots=True)
class UnitLayout:
    """Where every unit comes from and how units connect (independent of the parallel shape)."""

    block: tuple[int, ...]
    """Block index of each unit."""
    layer: tuple[int, ...]
    """Layer index within its block."""
    edges: tuple[tuple[int, int, int], ...]
    """(source unit, destination unit, graph edge index or -1 inside a block)."""

    @property
    def num_units(self) -> int:
        return len(self.block)


def unit_layout(g: GraphModelSpec) -> UnitLayout:
    """Units in topological block order and the unit-level edges."""
    order = block_order(g)
    first: dict[int, int] = {}
    block, layer = [], []
    for bi in order:
        first[bi] = len(block)
        for k in range(g.blocks[bi].num_units):
            block.append(bi)
            layer.append(k)
    index = {b.name: i for i, b in enumerate(g.blocks)}
    edges = []
    for bi in order:
        n = g.blocks[bi].num_units
        edges += [(first[bi] + k, first[bi] + k + 1, -1) for k in range(n - 1)]
    for ei, e in enumerate(g.edges):
        s, d = index[e.src], index[e.dst]
        edges.append((first[s] + g.blocks[s].num_units - 1, first[d], ei))
    return UnitLayout(tuple(block), tuple(layer), tuple(sorted(edges)))


@dataclass(frozen=True, slots=True)
class UnitCosts:
    """Per-unit costs of one shape on one GPU type, arrays over units (per micro-batch)."""

    cost: tuple[LayerCost, ...]
    """Full layer cost of each unit (embedding/output folded in)."""
    cost_matrix: np.ndarray
    """The same costs as rows of :meth:`LayerCost.astuple` (for fast stage sums)."""
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    """Backward (B + W) including recompute."""
    recompute_s: np.ndarray
    recompute_flop: np.ndarray
    """FLOPs the recompute repeats per micro-batch (hardware FLOPs minus model FLOPs)."""
    tau_s: np.ndarray
    """fwd + bwd: the unit's share of a stage's time per micro-batch."""
    static_bytes: np.ndarray
    """Weights, gradients and optimizer state."""
    act_bytes: np.ndarray
    """Activations kept per in-flight micro-batch (after recompute)."""
    transient_bytes: np.ndarray
    """Working set while recomputing this unit (full recompute), else 0."""
    edge_bytes: dict[tuple[int, int], float]
    """Bytes one GPU sends per micro-batch on each unit edge."""


def _non_causal_extra(
    block: Block, job: JobSpec, c: ParallelConfig, node: NodeGroup, local: bool = False
) -> LayerCost:
    """What bidirectional attention adds to a causal layer: the other half of the score matrix
    (``local``: of a layer attending within windows of ``window_size`` keys, as Qwen2.5-VL's
    windowed vision layers, so the other half of each window's)."""
    m = block.transformer
    T = c.micro_batch_size * block.tokens(job.seq_length)
    s = block.tokens(job.seq_length)
    if local:
        s = min(s, m.window_size)
    fused = attention_s(2 * T * s * m.query_projection_size / c.tp, node.gpu, job.precision, s)
    fwd, bwd = core_attention_s(fused, job, node.gpu)
    return LayerCost(forward_s=fwd, backward_input_s=bwd, selective_recompute_s=fwd)


def cross_attention(
    block: Block, source: Block, job: JobSpec, c: ParallelConfig, node: NodeGroup
) -> LayerCost:
    m = block.transformer
    gpu, prec, t = node.gpu, job.precision, c.tp
    T = c.micro_batch_size * block.tokens(job.seq_length)
    s_enc = source.tokens(job.seq_length)
    T_enc = c.micro_batch_size * s_enc
    h, q, kv, h_enc = m.hidden_size, m.query_projection_size, m.kv_projection_size, source.output_width
    kv_local = max(kv / t, m.kv_channels)
    sp_div = t if c.sp else 1
    gemms = gemm_s(T, q / t, h, gpu, prec) + gemm_s(T_enc, 2 * kv_local, h_enc, gpu, prec)
    gemms += gemm_s(T, h, q / t, gpu, prec)
    # FP8: the three projections' inputs forward and output gradients backward are quantized, as
    # cost_models.compute.linear_s charges a chain layer's linears
    cast_fwd = cast_bwd = 0.0
    if prec in QUANTIZED_PRECISIONS:
        per_element = quantize_bytes(prec, job.fp8_recipe)
        cast_fwd = fp8_cast_s(T * h + T_enc * h_enc + T * q / t, gpu, per_element)
        cast_bwd = fp8_cast_s(T * q / t + T_enc * 2 * kv_local + T * h, gpu, per_element)
    attn, attn_bwd = core_attention_s(attention_s(4 * T * s_enc * q / t, gpu, prec, s_enc), job, gpu)
    tp = tp_collectives_s(T * h * ACT_BYTES, c, node, 1)
    act = (T * h / sp_div + T * q / t + T_enc * 2 * kv_local + T * q / t) * ACT_BYTES
    act += 4 * T * m.num_attention_heads / t
    params = cross_attention_params(m, h_enc)
    return LayerCost(
        params_sharded=(params - m.norm_params()) / t,
        params_replicated=m.norm_params(),
        model_flop=3 * (2 * T * h * q + 2 * T_enc * h_enc * 2 * kv + 2 * T * q * h + 4 * T * s_enc * q) / t,
        forward_s=gemms + attn + cast_fwd,
        backward_input_s=gemms + attn_bwd + cast_bwd,
        backward_weight_s=gemms,
        forward_comm_s=tp,
        backward_comm_s=tp,
        selective_recompute_s=attn,
        activation_bytes=act,
        checkpoint_bytes=0.0,
        weight_grad_bytes=(T * h + T_enc * h_enc + T * q / t) * ACT_BYTES,
        tp_comm_bytes=4 * 2 * (t - 1) / t * T * h * ACT_BYTES if t > 1 else 0.0,
    )


def _generic(block: Block, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> LayerCost:
    gpu, t, b = node.gpu, c.tp, c.micro_batch_size
    flop = block.forward_flop_per_sample * b / t
    peak = gpu.peak(COMPUTE_DTYPE[job.precision])
    fwd = flop / (peak * gemm_efficiency(flop, gpu)) if flop > 0 else 0.0
    if job.precision in QUANTIZED_PRECISIONS:
        fwd /= gpu.efficiency.fp8_gemm_speedup
    if job.precision in FP4_PRECISIONS:
        fwd /= fp4_speedup(gpu)
    out = block.output_bytes_per_sample * b
    tp = comm.all_reduce_s(out, t, comm.link_for(group(c, "tp"), node)) if t > 1 else 0.0
    act = block.activation_bytes_per_sample * b / t
    return LayerCost(
        params_sharded=block.params / t,
        model_flop=3 * flop,
        forward_s=fwd + gpu.efficiency.kernel_overhead_s,
        backward_input_s=fwd + gpu.efficiency.kernel_overhead_s,
        backward_weight_s=fwd,
        forward_comm_s=tp,
        backward_comm_s=tp,
        activation_bytes=act,
        checkpoint_bytes=act,  # generic blocks are not recomputed
        weight_grad_bytes=act / 2,
    )


_COSTS: dict[tuple, UnitCosts] = {}


GRAPH_RECOMPUTE = ("none", "selective", "full")
"""Recompute forms priced for graph-shaped models (per-op selective recompute is priced for chain
decoder layers only)."""


def _check_graph_shape(job: JobSpec, c: ParallelConfig) -> None:
    """Refuse (ConfigError) the knobs priced for layer-chain models only."""
    if c.recompute not in GRAPH_RECOMPUTE:
        raise ConfigError(
            f"recompute {c.recompute!r} is not priced for graph models (allowed: {', '.join(GRAPH_RECOMPUTE)})"
        )
    if c.recompute_modules:
        raise ConfigError(
            "recompute modules (Megatron --recompute-modules) are priced for layer-chain models only; "
            "a graph model's selective recompute is core attention"
        )
    if c.optimizer_instances > 1:
        raise ConfigError(
            "optimizer_instances (a partial distributed optimizer) is priced for layer-chain models "
            "only; a graph model's distributed optimizer shards over all data-parallel ranks"
        )
    if job.pipeline_scatter_gather:
        raise ConfigError(
            "pipeline_scatter_gather (pipeline sends scattered over tensor-parallel ranks, older "
            "Megatron-LM and DeepSpeed) is priced for layer-chain models only"
        )


@dataclass(frozen=True, slots=True)
class _Unit:
    """One unit's cost under the shape's recompute form, per micro-batch."""

    cost: LayerCost
    """Its layer with the block's embedding / output layer folded in."""
    recompute_s: float
    act_bytes: float
    """Activations kept per in-flight micro-batch (after recompute)."""
    transient_bytes: float
    """Working set while recomputing it (or running the loss)."""
    recompute_flop: float
    """FLOPs the recompute repeats."""


def _generic_unit(block: Block, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> _Unit:
    """A generic block: one unit, never recomputed."""
    cost = _generic(block, job, c, node)
    return _Unit(cost, 0.0, cost.activation_bytes, 0.0, 0.0)


def _transformer_unit(
    g: GraphModelSpec, block: Block, k: int, job: JobSpec, c: ParallelConfig, node: NodeGroup
) -> _Unit:
    """Layer ``k`` of a transformer block: the chain table's dense layer at the block's width and
    tokens, with bidirectional and cross-attention extras, the block's embedding on its first layer
    and output layer on its last, under the shape's recompute form."""
    m = block.transformer
    bjob = replace(job, seq_length=block.tokens(job.seq_length))
    table = table_for(m, bjob, c, node)
    layer = table.decoder(m, k)  # the dense layer, or a hybrid pattern's ("-": an MLP-only layer)
    attends = m.layer_parts(k)[0] == "attention"
    if not block.causal and attends:
        layer = layer + _non_causal_extra(block, job, c, node, m.is_local_attention_layer(k))
    source = g.cross_source(block)
    if source is not None:
        layer = layer + cross_attention(block, source, job, c, node)
    extra = ZERO
    if k == 0 and block.embedding:
        extra = extra + table.embedding
    if k == m.num_layers - 1 and block.output_head:
        output = table.output
        if not block.embedding and output.params_sharded == 0.0:
            # no tied embedding to share: the output layer owns its weights
            output = replace(output, params_sharded=m.vocab_size * m.hidden_size / c.tp)
        extra = extra + output
    cost = layer + extra
    # a layer's pass holds its working set (unfused attention's scores) on top of what it keeps; a
    # recomputed layer's own activations stand for it (as cost_models.stage_terms takes them)
    recompute, a, transient, redo = 0.0, cost.activation_bytes, layer.working_bytes, 0.0
    if c.recompute == "full":
        # Narayanan et al. 2021 eq. (3): full recompute repeats each layer's forward
        recompute, redo = layer.recompute_forward_s, layer.model_flop / 3
        a = layer.checkpoint_bytes + extra.activation_bytes
        transient = max(layer.activation_bytes, layer.working_bytes)
    elif c.recompute == "selective":
        # Korthikanti et al. 2022 eq. (8): the attention products again, 4 s q FLOPs per token;
        # what core attention keeps for its backward is not kept (Table 2), one layer's at a time
        recompute = layer.selective_recompute_s
        a = cost.recomputed_bytes("selective")
        transient = max(cost.selective_dropped_bytes, layer.working_bytes)
        T = c.micro_batch_size * block.tokens(job.seq_length)
        redo = 4 * T * block.tokens(job.seq_length) * m.query_projection_size / c.tp if attends else 0.0
        if source is not None:
            redo += 4 * T * source.tokens(job.seq_length) * m.query_projection_size / c.tp
    if k == m.num_layers - 1 and block.output_head:
        transient = max(transient, loss_transient_bytes(m, bjob, c))
    return _Unit(cost, recompute, a, transient, redo)


def _inner_bytes(g: GraphModelSpec, block: Block, job: JobSpec, c: ParallelConfig) -> float:
    """Bytes one GPU sends per micro-batch between consecutive layers of a transformer block: its
    hidden states, and the encoder output that travels with a cross-attending decoder's."""
    bjob = replace(job, seq_length=block.tokens(job.seq_length))
    out = p2p_activation_bytes(block.transformer, bjob, c)
    source = g.cross_source(block)
    if source is not None:
        out += c.micro_batch_size * source.output_bytes(job.seq_length) / (c.tp if c.sp else 1)
    return out


def _edge_bytes(
    g: GraphModelSpec, layout: UnitLayout, job: JobSpec, c: ParallelConfig
) -> dict[tuple[int, int], float]:
    """Bytes one GPU sends per micro-batch on each unit edge (inside a block: :func:`_inner_bytes`;
    a graph edge: its tensor per sample)."""
    inner = {
        bi: _inner_bytes(g, g.blocks[bi], job, c)
        for bi in sorted(set(layout.block))
        if g.blocks[bi].transformer is not None
    }
    edge_bytes = {}
    for u, v, ei in layout.edges:
        if ei < 0:
            edge_bytes[(u, v)] = inner.get(layout.block[u], 0.0)
        else:
            per_sample = g.edge_bytes(g.edges[ei], job.seq_length)
            edge_bytes[(u, v)] = per_sample * c.micro_batch_size / (c.tp if c.sp else 1)
    return edge_bytes


def unit_costs(g: GraphModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup) -> UnitCosts:
    """Per-unit costs of shape ``c`` (tp, dp, micro-batch, recompute, sharding; cp = ep = 1)."""
    _check_graph_shape(job, c)
    key = (g, job, node, c.tp, c.dp, c.micro_batch_size, c.sp, c.pp > 1, c.recompute, c.optimizer_sharding)
    hit = _COSTS.get(key)
    if hit is not None:
        return hit
    if len(_COSTS) > 2048:
        _COSTS.clear()
    layout = unit_layout(g)
    wd, gd, od = mem.bytes_per_param(job, c.optimizer_sharding, c.dp)
    per_param = wd + gd + od
    # unfused gradient accumulation: one add of the unit's weight gradients per micro-batch, as
    # cost_models.estimate charges it
    accumulate = unfused_accumulation_bytes(job) if unfused_accumulation_applies(job, c) else 0.0
    units: list[_Unit] = []
    per_block: dict[tuple, _Unit] = {}
    for bi, k in zip(layout.block, layout.layer):
        block = g.blocks[bi]
        plain = block.transformer is not None and not (
            (k == 0 and block.embedding) or (k == block.num_units - 1 and block.output_head)
        )
        # a layer without embedding/output costs as the block's others of its kind (hybrid part,
        # local or full attention)
        kind = (
            (bi, block.transformer.layer_parts(k), block.transformer.is_local_attention_layer(k))
            if plain
            else ()
        )
        if plain and kind in per_block:
            unit = per_block[kind]
        elif block.transformer is None:
            unit = _generic_unit(block, job, c, node)
        else:
            unit = _transformer_unit(g, block, k, job, c, node)
            if plain:
                per_block[kind] = unit
        units.append(unit)
    costs = [u.cost for u in units]
    f = np.asarray([x.forward_s + x.forward_comm_s for x in costs])
    b = np.asarray(
        [
            x.backward_input_s
            + x.backward_comm_s
            + x.backward_weight_s
            + u.recompute_s
            + (memory_bound_s(x.params * accumulate, node.gpu) if accumulate else 0.0)
            for x, u in zip(costs, units)
        ]
    )
    out = UnitCosts(
        cost=tuple(costs),
        cost_matrix=np.array([x.astuple() for x in costs]),
        fwd_s=f,
        bwd_s=b,
        recompute_s=np.asarray([u.recompute_s for u in units]),
        recompute_flop=np.asarray([u.recompute_flop for u in units]),
        tau_s=f + b,
        static_bytes=np.asarray(
            [(x.params_sharded + x.params_replicated + x.params_expert) * per_param for x in costs]
        ),
        act_bytes=np.asarray([u.act_bytes for u in units]),
        transient_bytes=np.asarray([u.transient_bytes for u in units]),
        edge_bytes=_edge_bytes(g, layout, job, c),
    )
    _COSTS[key] = out
    return out
