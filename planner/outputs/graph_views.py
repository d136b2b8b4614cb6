"""The library surface of graph models (GraphPipe): graph models, stage graphs and a graph search's
alternatives as plain JSON-ready data, in the conventions of :mod:`planner.api` (stable key order),
which assembles them into the outputs of ``planner search`` and ``planner estimate``."""

from __future__ import annotations

from cost_models.estimate import Estimate
from cost_models.graph_costs import StageGraph
from cost_models.parallel import ParallelConfig
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec


def graph_model_dict(g: GraphModelSpec) -> dict:
    """A graph model as JSON-ready data: blocks, edges, parameter counts."""
    blocks = []
    for b in g.blocks:
        row = {
            "name": b.name,
            "type": b.type,
            "units": b.num_units,
            "params": b.param_count(g.cross_source(b)),
        }
        if b.transformer is not None:
            m = b.transformer
            row.update(
                num_layers=m.num_layers,
                hidden_size=m.hidden_size,
                num_attention_heads=m.num_attention_heads,
                seq_length=b.seq_length,
                causal=b.causal,
                embedding=b.embedding,
                output_head=b.output_head,
                cross_attention_from=b.cross_attention_from,
            )
        else:
            row.update(forward_flop_per_sample=b.forward_flop_per_sample, seq_length=b.seq_length)
        blocks.append(row)
    return {
        "kind": "graph_model",
        "name": g.name,
        "description": g.description,
        "blocks": blocks,
        "edges": [{"from": e.src, "to": e.dst, "bytes_per_sample": e.bytes_per_sample} for e in g.edges],
        "num_units": g.num_units,
        "params_total": g.params_total,
    }


def graph_config_dict(c: ParallelConfig, job: JobSpec) -> dict:
    """A graph plan's shape: ``pipelines`` identical pipelines (data parallel), each fed
    micro-batches of ``micro_batch_size`` sequences; a stage with r replicas splits each micro-batch
    over r groups of ``tp`` GPUs."""
    return {
        "tp": c.tp,
        "pipelines": c.dp,
        "num_stages": c.pp,
        "micro_batch_size": c.micro_batch_size,
        "num_microbatches": c.num_microbatches(job),
        "recompute": c.recompute,
        "sequence_parallel": c.sp,
        "optimizer_sharding": c.optimizer_sharding,
        "schedule": "graph-1f1b",
    }


def stage_graph_dict(g: GraphModelSpec, sg: StageGraph, est: Estimate) -> dict:
    """Stages (label, blocks, depth, time per micro-batch, peak memory) and edges."""
    from cost_models.graph_units import unit_layout
    from planner.plans.graph_plan import stage_blocks, stage_label

    layout = unit_layout(g)
    depths = sg.depths
    return {
        "stages": [
            {
                "stage": i,
                "label": stage_label(g, layout, units),
                "blocks": stage_blocks(g, layout, units),
                "depth": depths[i],
                "tp": sg.tp_of(i, est.config.tp),
                "replicas": sg.replicas_of(i),
                "gpus": s.devices * est.config.dp,
                "micro_batch_per_replica": est.config.micro_batch_size // sg.replicas_of(i),
                "time_per_microbatch_s": s.forward_s + s.backward_s,
                "peak_memory_bytes": s.memory.peak_bytes,
            }
            for i, (units, s) in enumerate(zip(sg.stages, est.stages))
        ],
        "edges": [[a, b] for a, b in sg.edges],
    }


def graph_explain(result) -> list[dict]:
    """The fastest plan of each branched/serialised choice, and how much slower than the best."""
    best = result.plans[0].estimate.step_time_s
    return [
        {
            "branched": list(modes),
            "step_time_s": p.estimate.step_time_s,
            "slower_than_best": p.estimate.step_time_s / best - 1.0,
            "shape": {
                "tp": p.config.tp,
                "pipelines": p.config.dp,
                "num_stages": p.config.pp,
                "micro_batch_size": p.config.micro_batch_size,
                "recompute": p.config.recompute,
            },
        }
        for modes, p in sorted(
            result.best_by_modes.items(), key=lambda kv: (kv[1].estimate.step_time_s, kv[0])
        )
    ]
