"""Nonuniform tensor parallelism as its paper runs it (Arfeen et al. 2025, "Nonuniform-Tensor-
Parallelism: Mitigating GPU failure impact for Scaled-up LLM Training", arXiv:2504.06095).

"In NTP, a DP replica that experiences GPU failures operates at a reduced TP degree, contributing
throughput equal to the percentage of still-functional GPUs" (the paper's abstract). What that takes,
and how planner prices it:

* **Any degree the surviving GPUs allow.** A tensor-parallel group left with ``n`` of its ``t`` GPUs
  runs at a degree ``t' <= n`` that need not divide the heads, query groups or MLP width: the
  heads are split unevenly, and the busiest GPU holds ``ceil(a / t')`` of them. Megatron needs
  divisible shapes, so the same work is what Megatron would run with the shapes padded up to
  multiples of ``t'`` (:func:`padded_model`: zero heads, groups and MLP columns, their weights and
  activations counted). Of the degrees with the same busiest-GPU head count the largest wins (less
  MLP per GPU); the few such candidates are timed and the fastest is kept (:func:`candidate_degrees`).
* **Only the hit pipeline stage degrades.** The other stages of the replica keep ``t``: the
  replica's pipeline is simulated with the hit stage's pass durations taken from the degraded
  shape (:class:`ReplicaTimer`), so it is paced by that stage but fills and drains at full speed.
  Neither Megatron-LM nor torchtitan runs two tensor-parallel degrees in one job; NTP's runtime does.
* **Failures packed.** When the job restarts on the surviving GPUs the scheduler decides which
  nodes form which replica; the hit tensor-parallel groups go to as few replicas as possible, one
  per pipeline stage (:func:`planner.resilience.failures.place` with ``packed=True``).
* **Batch in proportion.** A slowed replica takes the most micro-batches it finishes in the healthy
  replicas' time (``proportional-batch``), or the global batch is kept by the others taking more
  (``rebalanced-batch``), or every replica keeps its batch and the step waits (``same-batch``).

Not modelled: the paper's power boosting of the degraded scale-up domain. It needs a rack built to
sustain it (the paper's proposal) and a clock-versus-power curve above the rated power of the GPU,
which no datasheet or measurement planner cites gives; without it NTP keeps at most the share of
surviving GPUs, which is what the abstract promises before boosting.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from cost_models import schedules
from cost_models.constraints import resolve
from cost_models.estimate import Estimate, estimate
from cost_models.parallel import ParallelConfig
from cost_models.placement import group, span
from cost_models.stage_terms import (
    chunk_terms,
    node_of_stage,
    pass_durations,
    rank_totals,
    sharded_passes,
)
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError
from planner.inputs.model_spec import ModelSpec
from planner.plans.plan_file import PlanInputs

MAX_CANDIDATES = 3
"""Degrees timed per surviving-GPU count: the largest degree for each of the first few busiest-GPU
head counts (more GPUs always shrink the MLP share, fewer heads per GPU the attention share)."""


def _pad(x: int, t: int) -> int:
    """Smallest multiple of ``t`` at least ``x``."""
    return -(-x // t) * t


def padded_model(model: ModelSpec, t: int) -> ModelSpec:
    """``model`` with heads, query groups and MLP widths padded up to what tensor parallelism of
    degree ``t`` needs (Megatron's divisibility: :func:`cost_models.constraints.violations`), so that
    each GPU holds the busiest GPU's share of an uneven split: ``ceil(a / t)`` heads,
    ``ceil(g / t)`` query groups (one, replicated, when there are fewer groups than GPUs) and
    ``ceil(ffn / t)`` MLP columns. Unchanged when ``t`` already divides them."""
    a = _pad(model.num_attention_heads, t)
    g = model.num_query_groups
    if not model.multi_latent_attention:
        g = _pad(g, t) if g >= t else (g if t % g == 0 else t)
    changes: dict = {
        "num_attention_heads": a,
        "num_query_groups": g,
        "ffn_hidden_size": _pad(model.ffn_hidden_size, t),
    }
    if model.is_moe and model.moe_ffn_hidden_size:
        changes["moe_ffn_hidden_size"] = _pad(model.moe_ffn_hidden_size, t)
    if model.moe_shared_expert_intermediate_size:
        changes["moe_shared_expert_intermediate_size"] = _pad(model.moe_shared_expert_intermediate_size, t)
    out = replace(model, **changes)
    return model if out == model else out


def candidate_degrees(model: ModelSpec, survivors: int, tp: int) -> tuple[int, ...]:
    """Degrees worth timing for a tensor-parallel group of ``tp`` left with ``survivors`` GPUs:
    for each busiest-GPU head count ``ceil(a / t')`` (ascending), the largest ``t' <= survivors``
    with it; at most :data:`MAX_CANDIDATES`, largest first. Empty when no GPU survives."""
    out: list[int] = []
    seen: set[int] = set()
    for t in range(min(survivors, tp), 0, -1):
        heads = -(-model.num_attention_heads // t)
        if heads in seen:
            continue
        seen.add(heads)
        out.append(t)
        if len(out) == MAX_CANDIDATES:
            break
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PassTable:
    """A configuration's per-micro-batch schedule inputs per virtual stage, as
    :func:`cost_models.estimate.estimate` builds them (F/B/W durations, transfer times, the share
    of activations only W needs, activation bytes)."""

    durations: np.ndarray
    p2p_s: np.ndarray
    weight_fraction: np.ndarray
    activation_bytes: np.ndarray


def pass_table(model: ModelSpec, cluster: ClusterSpec, job, c: ParallelConfig) -> PassTable:
    """The schedule inputs of the resolved configuration ``c``: the first steps of
    :func:`cost_models.estimate.estimate` (layer table per rank, chunk terms, sharded passes)."""
    p = c.pp
    m = c.num_microbatches(job)
    layers = c.stage_layers(model)
    nodes = [node_of_stage(cluster, c, r) for r in range(p)]
    chunks = chunk_terms(model, cluster, job, c, layers, nodes)
    totals = tuple(rank_totals(chunks, r) for r in range(p))
    passes = sharded_passes(job, c, m, layers, chunks, totals, nodes)
    return PassTable(
        durations=pass_durations(chunks, passes),
        p2p_s=np.array([t.p2p_s for t in chunks], dtype=float),
        weight_fraction=np.array([t.weight_grad_fraction for t in chunks], dtype=float),
        activation_bytes=np.array([t.activation_bytes for t in chunks], dtype=float),
    )


def rank_params(model: ModelSpec, c: ParallelConfig, r: int) -> float:
    """Dense parameters one GPU of pipeline rank ``r`` holds under ``c`` (its virtual stages'
    layers, the embedding on the first and the output layer on the last, over ``c.tp``)."""
    layers = c.stage_layers(model)
    first = [sum(layers[:vs]) for vs in range(len(layers))]
    total = 0.0
    for vs in range(len(layers)):
        if schedules.stage_rank(c.schedule, c.pp, vs) != r:
            continue
        total += sum(model.layer_params(i) for i in range(first[vs], first[vs] + layers[vs]))
        if vs == 0:
            total += model.embedding_params()
        if vs == len(layers) - 1:
            total += model.output_params()
    return total / c.tp


@dataclass(frozen=True, slots=True)
class Degraded:
    """One reduced degree's shape: its pass table and whether each pipeline rank fits at it."""

    tp: int
    table: PassTable
    fits: tuple[bool, ...]
    params_per_gpu: tuple[float, ...]
    """Parameters one GPU of each pipeline rank holds at this degree (padding included)."""


@dataclass
class ReplicaTimer:
    """Pipeline times of one data-parallel replica whose hit stages run at a lower degree.

    The replica runs the plan's schedule; the virtual stages of each hit pipeline rank take the
    degraded shape's pass durations, the others the plan's own (the point-to-point times stay the
    plan's: the stage boundaries cross the same links). With no hit stage this is exactly the
    plan's pipeline (tested against the plan's estimate).
    """

    inputs: PlanInputs
    _healthy: PassTable | None = None
    _degraded: dict = field(default_factory=dict)
    _times: dict = field(default_factory=dict)

    @property
    def healthy(self) -> PassTable:
        if self._healthy is None:
            i = self.inputs
            self._healthy = pass_table(i.model, i.cluster, i.job, i.config)
        return self._healthy

    def degraded(self, t: int) -> Degraded | None:
        """The plan's shape at degree ``t`` (heads padded as :func:`padded_model`), each
        tensor-parallel group inside one NVLink domain (the survivors of a group share one); None
        when the shape breaks a constraint."""
        if t not in self._degraded:
            self._degraded[t] = self._build(t)
        return self._degraded[t]

    def _build(self, t: int) -> Degraded | None:
        i, c = self.inputs, self.inputs.config
        node = i.cluster.groups[0]
        model = padded_model(i.model, t)
        # The plan's replica count, so that sharded optimizer states and gradients are split as in
        # the plan; a tensor-parallel group on an NVLink domain of its own when the plan's groups
        # stay inside one (the survivors of a group share its domain), else spread as the plan's.
        inside = not span(group(c, "tp"), node).crosses_network
        shaped = replace(
            node,
            num_nodes=c.pp * c.cp * c.dp,
            gpus_per_node=t,
            nvlink_domain_size=t if inside else node.nvlink_domain_size,
            nvlink_mesh=None if inside else node.nvlink_mesh,
        )
        cluster = ClusterSpec(name=i.cluster.name, groups=(shaped,))
        try:
            cfg = resolve(model, cluster, i.job, c.with_(tp=t, etp=t if c.etp == c.tp else c.etp))
        except ConfigError:
            return None
        est: Estimate = estimate(model, cluster, i.job, cfg)
        return Degraded(
            tp=t,
            table=pass_table(model, cluster, i.job, cfg),
            fits=tuple(s.memory.fits for s in est.stages),
            params_per_gpu=tuple(rank_params(model, cfg, r) for r in range(c.pp)),
        )

    def pipeline_s(self, hit: tuple[int, ...], t: int, microbatches: int) -> float:
        """Pipeline phase (first forward to last backward) of a replica running ``microbatches``
        micro-batches with pipeline ranks ``hit`` at degree ``t``; 0 for no micro-batch."""
        key = (hit, t, microbatches)
        if key in self._times:
            return self._times[key]
        c = self.inputs.config
        h = self.healthy
        durations = h.durations.copy()
        if hit:
            d = self.degraded(t)
            if d is None:
                raise ConfigError(f"tp {t} breaks a constraint of the plan's shape")
            for vs in range(durations.shape[0]):
                if schedules.stage_rank(c.schedule, c.pp, vs) in hit:
                    durations[vs] = d.table.durations[vs]
        if microbatches <= 0:
            out = 0.0
        else:
            key_s = (c.schedule, c.pp, microbatches, c.vpp)
            orders = schedules.generate(*key_s)
            tl = schedules.simulate(
                orders, durations, h.p2p_s, microbatches, h.weight_fraction, h.activation_bytes, key_s
            )
            if c.schedule in schedules.POST_VALIDATION:
                tl = tl.aligned()
            out = tl.makespan_s
        self._times[key] = out
        return out

    def best_degree(self, hit: tuple[int, ...], survivors: int) -> Degraded | None:
        """The fastest degree (at the plan's micro-batch count) whose hit stages fit, among
        :func:`candidate_degrees` of ``survivors``; None when none runs."""
        c = self.inputs.config
        m = c.num_microbatches(self.inputs.job)
        best: tuple[float, int] | None = None
        for t in candidate_degrees(self.inputs.model, survivors, c.tp):
            d = self.degraded(t)
            if d is None or not all(d.fits[r] for r in hit):
                continue
            s = self.pipeline_s(hit, t, m)
            if best is None or (s, -t) < best:
                best = (s, -t)
        return self.degraded(-best[1]) if best else None
