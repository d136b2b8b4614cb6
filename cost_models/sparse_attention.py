"""DeepSeek sparse attention (DSA): the lightning indexer of one layer for one micro-batch on one GPU,
which :func:`cost_models.attention._mla` adds to the MLA block it makes sparse.

Sources: the DeepSeek-V3.2-Exp technical report (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting
Long-Context Efficiency with DeepSeek Sparse Attention", github.com/deepseek-ai/DeepSeek-V3.2-Exp,
DeepSeek_V3_2.pdf; Sec. 2.1), its reference code (inference/model.py ``Indexer``) and Megatron-Core
0.19.2 (branch core_r0.19.0, megatron/core/transformer/experimental_attention_variant/dsa.py
``DSAIndexer``, ``DSAttention``), which Megatron-LM runs as ``--experimental-attention-variant dsa``:

* the indexer scores every preceding token, ``I_{t,s} = sum_j w_{t,j} ReLU(q_{t,j} . k_s)``
  (report eq. 1): ``H^I`` query heads of width ``d^I`` from the query latent (``wq_b``), one key
  of width ``d^I`` (``wk``, LayerNorm, RoPE on its first ``d_R`` channels) and the head weights
  (``weights_proj``); the scores are an O(s^2) product at the indexer's head dim, then a top-k per
  query (``index_topk``) selects the keys the main attention sees (eq. 2);
* Megatron builds the indexer's projections ``duplicated`` on every tensor-parallel rank and
  all-gathers its inputs under sequence parallelism (``forward_before_topk``:
  ``gather_from_sequence_parallel_region`` of ``x`` and ``qr``), so each rank scores all of its
  micro-batch's queries;
* its inputs are detached (``DSAttention.forward``: "prevent gradients of indexer from flowing
  back to the main model"; the report's sparse training stage, Sec. 2.1), so its backward has weight
  gradients and no input gradients. The indexer learns from a KL loss against the main attention's
  head-summed distribution over the selected keys (report eq. 4; Megatron
  ``--dsa-indexer-loss-coeff`` with ``--dsa-indexer-use-sparse-loss``), whose gradient reaches the
  index scores at the top-k keys only;
* the report runs the indexer in FP8 (DeepGEMM's logits kernel); Megatron-Core 0.19.2 runs it in
  BF16 (``_compute_index_scores``: "BF16 implementation of the fp8_index logic"; the TileLang
  backend's ``tilelang_indexer_fwd`` is ``T.bfloat16``), which is what is priced.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import communication as comm
from cost_models.compute import LinearTimes, attention_s, batched_gemm_s, linear_s, memory_bound_s
from cost_models.parallel import ParallelConfig
from cost_models.placement import group
from cost_models.tensors import ACT_BYTES, gemm_input_bytes, tokens_per_gpu
from planner.inputs.cluster_spec import NodeGroup
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec, sparse_attention_span

INDEX_BYTES = 4
"""Bytes of one selected key index (``ops/indexer.py``: "top-k scores and int32 indices")."""
LOGIT_BYTES = 4
"""Bytes of one index score: the indexer writes fp32 logits (``_compute_index_scores``: "FP32
[batch, seqlen_q, seqlen_k]"), which the top-k reads back."""


@dataclass(frozen=True, slots=True)
class IndexerBlock:
    """The lightning indexer of one layer for one micro-batch on one GPU. Times in seconds, sizes
    in bytes."""

    gemm: LinearTimes
    """``wq_b``, ``wk`` and ``weights_proj``: forward and weight gradients (no input gradients: the
    inputs are detached)."""
    score_fwd_s: float
    """The scores (an O(s^2) product at ``d^I``), their fp32 logits written and read by the top-k,
    and the KL loss's target (the main attention's scores at the selected keys)."""
    score_bwd_s: float
    """The sparse KL loss's backward: scores at the selected keys again, then ``dq`` and ``dk``."""
    model_flop: float
    """Model FLOPs on this GPU, forward + backward (the model's indexer work over tp, as MLA's
    duplicated down projections are counted)."""
    elem_bytes: float
    """Memory-bound forward bytes: the key's LayerNorm, RoPE and the Hadamard rotation of q and k."""
    act_bytes: float
    """Kept for backward: q, k and the head weights (``FusedDSAIndexerLoss`` saves them), the
    selected indices, and the all-gathered inputs the weight gradients read under sequence
    parallelism (without it they are the block's own norm output and query latent)."""
    wgrad_bytes: float
    """The part of ``act_bytes`` only the weight gradients need (those gathered inputs)."""
    params: float
    """The indexer's parameters, held in full by every tensor-parallel rank."""
    gather_fwd_s: float
    """The sequence-parallel all-gathers of the hidden states and the query latent."""
    gather_bytes: float
    """Bytes sent for them."""


def indexer_flop_per_token(model: ModelSpec, keys: float) -> float:
    """Model FLOPs per token of one indexer, forward + backward, attending over ``keys`` keys per
    query (non-causal convention, :meth:`ModelSpec.attention_span`): the projections forward and
    their weight gradients (``2 x 2 (r_q H^I d^I + h d^I + h H^I)``; no input gradients), the
    scores ``2 keys H^I d^I``, the loss's target ``2 k' a (r_kv + d_R)`` (every head's absorbed
    scores at the ``k'`` selected keys, :func:`~planner.inputs.model_spec.sparse_attention_span`),
    and the two gradient products ``2 x 2 k' H^I d^I`` (``dq``, ``dk``)."""
    h, n, d = model.hidden_size, model.dsa_indexer_n_heads, model.dsa_indexer_head_dim
    q_in = model.q_lora_rank or h
    sparse = sparse_attention_span(keys, model.dsa_indexer_topk)
    proj = 2 * (q_in * n * d + h * d + h * n)
    target = 2 * sparse * model.num_attention_heads * (model.kv_lora_rank + model.qk_pos_emb_head_dim)
    return 2 * proj + 2 * keys * n * d + target + 2 * 2 * sparse * n * d


def indexer_block(
    model: ModelSpec, job: JobSpec, c: ParallelConfig, node: NodeGroup, span: float
) -> IndexerBlock:
    """The indexer of a layer whose queries see ``span`` causal keys (non-causal convention; the
    sequence, or a packed document). Each GPU scores its ``T`` queries (the micro-batch over cp)
    against every key of the sequence. The score product runs as one GEMM over ``T H^I`` rows and
    the sequence's keys, half of it executed (causal tiles), at the GPU's BF16 GEMM curve; the
    backward and the loss's target are gathers over the selected keys, priced at fused attention's
    rate for ``k`` keys per query."""
    gpu, prec, t = node.gpu, job.precision, c.tp
    h, n, d, k = (
        model.hidden_size,
        model.dsa_indexer_n_heads,
        model.dsa_indexer_head_dim,
        model.dsa_indexer_topk,
    )
    a, rkv, dr = model.num_attention_heads, model.kv_lora_rank, model.qk_pos_emb_head_dim
    q_in = model.q_lora_rank or h
    T = tokens_per_gpu(job, c)
    keys = float(job.doc_length)
    selected = min(float(k), keys)
    sparse = sparse_attention_span(span, k)
    recipe = job.fp8_recipe
    proj = linear_s(T, n * d, q_in, gpu, prec, recipe=recipe)
    proj += linear_s(T, d, h, gpu, prec, recipe=recipe)
    proj += linear_s(T, n, h, gpu, prec, recipe=recipe)
    gemm = LinearTimes(proj.forward_s, 0.0, proj.weight_grad_s)
    # One GEMM of (T H^I x d^I) @ (d^I x keys) per micro-batch; causal: span / (2 keys) of it.
    scores = batched_gemm_s(T * n, keys, d, 1.0, gpu, "bf16", 0.0) * span / (2 * keys)
    logits = memory_bound_s(2 * LOGIT_BYTES * T * keys + INDEX_BYTES * T * selected, gpu)
    target = attention_s(T * sparse * (a / t) * (rkv + dr), gpu, "bf16", selected)
    backward = attention_s(3 * T * sparse * n * d, gpu, "bf16", selected)
    g_in = gemm_input_bytes(job)
    gathered = T * (h + q_in) * g_in if c.sp and t > 1 else 0.0
    gather_s = gather_bytes = 0.0
    if c.sp and t > 1:
        volume = T * (h + q_in) * ACT_BYTES
        gather_s = comm.all_gather_s(volume, t, comm.link_for(group(c, "tp"), node))
        gather_bytes = (t - 1) / t * volume
    return IndexerBlock(
        gemm=gemm,
        score_fwd_s=scores + logits + target,
        score_bwd_s=backward,
        model_flop=T * indexer_flop_per_token(model, span) / t,
        elem_bytes=2 * ACT_BYTES * T * (d + (n + 1) * dr + (n + 1) * d),
        act_bytes=T * (n * d + d + n) * ACT_BYTES + INDEX_BYTES * T * selected + gathered,
        wgrad_bytes=gathered,
        params=float(model.indexer_params()),
        gather_fwd_s=gather_s,
        gather_bytes=gather_bytes,
    )
