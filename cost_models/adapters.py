"""The shapes of LoRA adapters (``JobSpec.finetune == "lora"``): per targeted linear layer of a
decoder layer, the two linears ``linear_in`` (A) and ``linear_out`` (B) of Megatron-Bridge's
``ParallelLinearAdapter`` (``src/megatron/bridge/peft/utils.py``), sharded as its
``get_adapter_attributes_from_linear`` and ``__init__`` shard them: beside a column-parallel base
layer (``linear_qkv``, ``linear_fc1``: ``TELayerNormColumnParallelLinear``) A is a
``ColumnParallelLinear(in, dim, gather_output=True)`` and B a ``ColumnParallelLinear(dim, out)``;
beside a row-parallel one (``linear_proj``, ``linear_fc2``: ``TERowParallelLinear``) A is a
``RowParallelLinear(in, dim, input_is_parallel=True)`` and B a ``ColumnParallelLinear(dim, out,
gather_output=True)``. Their costs are in :mod:`cost_models.finetune`; their FLOPs in
:mod:`cost_models.flops`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, slots=True)
class AdapterShape:
    """One adapter on one GPU: ``linear_in`` (A, ``a_in -> a_out``) and ``linear_out`` (B,
    ``b_in -> b_out``), widths in elements."""

    target: str
    column: bool
    """Beside a column-parallel base layer (else a row-parallel one)."""
    a_in: float
    """A's input width: h beside a column-parallel layer (the gathered norm output), in/tp beside a
    row-parallel one (its parallel input)."""
    a_out: float
    """A's output width: r/tp beside a column-parallel layer (then gathered), r beside a row-parallel one."""
    b_in: float
    """B's input width: the whole rank r."""
    b_out: float
    """B's output width: the base layer's output shard (column), h/tp (row, then gathered)."""

    @property
    def params(self) -> float:
        """A's and B's parameters on this GPU."""
        return self.a_in * self.a_out + self.b_in * self.b_out

    @property
    def forward_flop_per_token(self) -> float:
        """Forward FLOPs per token of A and B on this GPU."""
        return 2 * self.params


def adapter_shapes(model: ModelSpec, job: JobSpec, tp: int) -> tuple[AdapterShape, ...]:
    """The adapters of one decoder layer on one of ``tp`` tensor-parallel ranks, in
    :data:`planner.inputs.job_spec.LORA_TARGETS` order. Base widths as Megatron-Core shards them
    (K/V heads replicated when tp exceeds the query groups, as
    :func:`cost_models.attention.attention_block` does)."""
    h, r = model.hidden_size, job.lora_rank
    q, kv, f = model.query_projection_size, model.kv_projection_size, model.ffn_hidden_size
    n_in = 2 if model.gated else 1
    kv_local = max(kv / tp, model.kv_channels)
    base = {
        "linear_qkv": (True, h, q / tp + 2 * kv_local),
        "linear_fc1": (True, h, n_in * f / tp),
        "linear_proj": (False, q / tp, h),
        "linear_fc2": (False, f / tp, h),
    }
    shapes = []
    for target in job.lora_targets:
        column, k_in, n_out = base[target]
        if column:
            shapes.append(AdapterShape(target, True, a_in=h, a_out=r / tp, b_in=r, b_out=n_out))
        else:
            shapes.append(AdapterShape(target, False, a_in=k_in, a_out=r, b_in=r, b_out=n_out / tp))
    return tuple(shapes)


def adapter_flop_per_token(model: ModelSpec, job: JobSpec) -> float:
    """Forward FLOPs per token of one decoder layer's adapters, over all tensor-parallel ranks."""
    return sum(a.forward_flop_per_token for a in adapter_shapes(model, job, 1))


def adapter_params(model: ModelSpec, job: JobSpec) -> float:
    """Parameters of every LoRA adapter of the model (all decoder layers, over all tensor-parallel
    ranks): what a LoRA job trains, and all that its checkpoints save with optimizer state."""
    return model.num_layers * sum(a.params for a in adapter_shapes(model, job, 1))
