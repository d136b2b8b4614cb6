"""Megatron-LM's unfused core attention: the score matrix written to HBM, its bytes and batched
GEMMs per pass, and what it keeps for backward (``JobSpec.attention_impl`` ``unfused``; priced by
:func:`cost_models.attention.attention_block` and its multi-latent form)."""

from __future__ import annotations

from cost_models.compute import batched_gemm_s, memory_bound_s
from planner.inputs.cluster_spec import GPUSpec
from planner.inputs.model_spec import ModelSpec

UNFUSED_SCORE_BYTES = {"forward": (2.0, 4.0, 5.0, 2.0), "backward": (2.0, 2.0, 5.0, 6.0, 2.0, 2.0)}
"""HBM bytes per element of the score matrix (``[b, np, sq, sk]``, 16-bit) that each step of
Megatron-LM's unfused core attention moves (``ParallelAttention.forward``, megatron/model/transformer.py
at de7dc40f88, 2021; ``CoreAttention`` in later releases and Megatron-DeepSpeed):

* forward: ``baddbmm`` Q K^T writes the scores (2); ``FusedScaleMaskSoftmax`` reads and writes them
  (2 + 2; ``scaled_upper_triang_masked_softmax`` covers the whole square, masked half included);
  attention dropout reads the probabilities and writes its output and a one-byte mask (2 + 2 + 1);
  ``bmm`` probabilities x V reads them (2);
* backward: the gradient of the probabilities (dContext V^T) is written (2); dV = P^T dContext
  reads P (2); dropout backward reads the gradient and the mask and writes (2 + 1 + 2); softmax
  backward reads the output and the gradient and writes (2 + 2 + 2); dQ = dS K and dK = dS^T Q read
  dS (2 + 2).

Dropout at Megatron-LM's default ``--attention-dropout 0.1`` (megatron/arguments.py), which the
GPT runs of Narayanan et al. 2021 (examples/sc21/CONFIG.sh sets no dropout flag) and Korthikanti
et al. 2022 (whose activation formula, 34 + 5as/h bytes per token and hidden unit, counts the
mask) keep."""
UNFUSED_KEPT_BYTES = 5.0
"""Bytes per score element kept for backward: softmax output (2), dropout mask (1), dropout
output (2): Korthikanti et al. 2022 Sec. 4.1, the 5as/h term of 34 + 5as/h."""
UNFUSED_KEPT_BYTES_NO_DROPOUT = 2.0
"""The same without attention dropout (``attention_dropout`` 0: PyTorch's dropout returns its
input, so neither mask nor second copy exists): the softmax output alone, which its backward and
the P V product's read (Megatron-Core ``DotProductAttention``, megatron/core/transformer/
dot_product_attention.py: ``scale_mask_softmax``, ``attention_dropout``, ``torch.bmm``)."""


UNFUSED_WORKING_BYTES = 2.0
"""Bytes per score element unfused core attention holds on top of what it keeps while a pass runs:
forward, ``baddbmm``'s 16-bit scores, alive while ``FusedScaleMaskSoftmax`` writes the
probabilities beside them (megatron/core/transformer/dot_product_attention.py); backward, the
probabilities' gradient (``dContext V^T``), into which the fused softmax backward writes its
result in place (Megatron's ``scaled_upper_triang_masked_softmax`` kernels)."""


def unfused_kept_bytes(model: ModelSpec) -> float:
    """Bytes per score element unfused core attention keeps for backward (:data:`UNFUSED_KEPT_BYTES`,
    or :data:`UNFUSED_KEPT_BYTES_NO_DROPOUT` without attention dropout)."""
    return UNFUSED_KEPT_BYTES if model.attention_dropout > 0 else UNFUSED_KEPT_BYTES_NO_DROPOUT


def unfused_core_attention(
    tokens: float,
    seq_length: float,
    heads: float,
    head_dim: float,
    gpu: GPUSpec,
    precision: str,
    *,
    value_dim: float = 0.0,
    dropout: bool = True,
) -> tuple[float, float, float]:
    """(forward s, backward s, score elements) of Megatron-LM's unfused core attention for
    ``tokens`` queries per GPU, each over ``seq_length`` keys (the full square: the causal mask is
    applied by the softmax, not skipped), ``heads`` heads on this GPU of ``head_dim`` query/key
    channels and ``value_dim`` value channels (0: ``head_dim``; multi-latent attention's differ).
    The four batched GEMMs (Q K^T, P V forward; dP, dV, dQ, dK backward) are priced by
    :func:`cost_models.compute.batched_gemm_s` against the score bytes they read or write; softmax
    and dropout are memory-bound (:data:`UNFUSED_SCORE_BYTES`; no dropout passes without
    ``dropout``)."""
    s = seq_length
    dv = value_dim or head_dim
    batch = tokens / s * heads  # b x np products per call
    scores = tokens * s * heads
    qk_fw, softmax_fw, dropout_fw, pv_fw = UNFUSED_SCORE_BYTES["forward"]
    dp_bw, dv_bw, dropout_bw, softmax_bw, dq_bw, dk_bw = UNFUSED_SCORE_BYTES["backward"]
    if not dropout:
        dropout_fw = dropout_bw = 0.0

    def bmm(m, n, k, per_score):
        return batched_gemm_s(m, n, k, batch, gpu, precision, per_score * scores)

    forward = (
        bmm(s, s, head_dim, qk_fw)
        + memory_bound_s((softmax_fw + dropout_fw) * scores, gpu)
        + bmm(s, dv, s, pv_fw)
    )
    backward = (
        bmm(s, s, dv, dp_bw)
        + bmm(s, dv, s, dv_bw)
        + memory_bound_s((dropout_bw + softmax_bw) * scores, gpu)
        + bmm(s, head_dim, s, dq_bw)
        + bmm(s, head_dim, s, dk_bw)
    )
    return forward, backward, scores
