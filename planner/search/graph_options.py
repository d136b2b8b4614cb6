"""Stage options and bounds of a graph-pipeline shape (:mod:`planner.search.graph`, steps 3 and 6):
the (tensor-parallel width x replicas) a chain's stages may take, the configuration a stage with an
option sees, and the lower bounds of the bottleneck the search visits shapes by."""

from __future__ import annotations

import numpy as np

from cost_models.graph_costs import replicated_config
from cost_models.graph_units import unit_costs
from cost_models.parallel import ParallelConfig
from planner.inputs.graph_model import GraphModelSpec
from planner.inputs.job_spec import JobSpec
from planner.search.space import divisors

StageOption = tuple[int, int]
"""(tp, replicas) of a chain's stages: each stage runs on ``tp x replicas`` GPUs of a pipeline."""


def least_times(ucs: dict, opts, groups, idx) -> tuple[float, float]:
    """Over units ``idx``, each on its best option: the summed least group-time and the largest
    least time."""
    work = np.min([ucs[o].tau_s[idx] * groups(o) for o in opts], axis=0)
    least = np.min([ucs[o].tau_s[idx] for o in opts], axis=0)
    return float(work.sum()), float(least.max())


def options_bound(g: GraphModelSpec, job: JobSpec, node, c: ParallelConfig, modes: tuple[bool, ...]) -> float:
    """:func:`~planner.search.graph_partition.options_floor` over every option of the shape, each unit free to take its best
    (restricting options per chain only raises the optimum, so this stays a lower bound)."""
    options = stage_options(c, modes)
    ucs = {o: unit_costs(g, job, unit_config(c, o), node) for o in options}
    idx = list(range(len(ucs[options[0]].tau_s)))
    work, largest = least_times(ucs, options, lambda o: o[0] * o[1] // c.tp, idx)
    return max(work / c.pp, largest)


def shape_floor(g: GraphModelSpec, job: JobSpec, node, c: ParallelConfig, modes: tuple[bool, ...]) -> float:
    """A lower bound of the bottleneck stage time of any plan of shape ``c`` and ``modes``.

    Sequential: the work spread over the ``c.pp`` stages, or the largest unit. Branched: GPU-time
    cannot shrink below one GPU's time at tp 1 with the whole micro-batch (GEMM efficiency grows
    with size; latencies, overheads and tensor-parallel traffic do not shrink), so the bound is that
    work over all ``c.tp x c.pp`` GPUs, or the largest unit over the most GPUs a stage may take.
    """
    if not any(modes):
        uc = unit_costs(g, job, unit_config(c, (c.tp, 1)), node)
        return max(float(uc.tau_s.sum()) / c.pp, float(uc.tau_s.max()))
    uc = unit_costs(g, job, unit_config(c, (1, 1)), node)
    widest = max(t * d for t, d in stage_options(c, modes))
    return max(float(uc.tau_s.sum()) / (c.tp * c.pp), float(uc.tau_s.max()) / widest)


def stage_options(c: ParallelConfig, modes: tuple[bool, ...]) -> tuple[StageOption, ...]:
    """(tp, replicas) a chain's stages may take in a pipeline of ``c.pp`` groups of ``c.tp`` GPUs.

    A sequential structure uses (c.tp, 1) only (replicating every stage alike is more pipelines, a
    smaller tp everywhere is another shape). A branched one also uses any tp dividing ``c.tp`` and
    any replica count dividing the micro-batch, filling whole groups (``tp x replicas`` a multiple
    of ``c.tp``, at most all ``c.pp`` groups).
    """
    if not any(modes):
        return ((c.tp, 1),)
    return tuple(
        (t, d)
        for t in divisors(c.tp)
        for d in divisors(c.micro_batch_size)
        if (t * d) % c.tp == 0 and t * d // c.tp <= c.pp
    )


def unit_config(c: ParallelConfig, option: StageOption) -> ParallelConfig:
    """What a stage with ``option`` = (tp, replicas) of a shape ``c`` (pp = its groups) sees."""
    return replicated_config(c, option[1], c.pp > 1, option[0])
