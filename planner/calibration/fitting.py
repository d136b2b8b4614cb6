"""Fitting GPU efficiency data to published runs, family by family, and validating it honestly.

* :func:`fit_families` — every family in :data:`LINEAGE` order, each fitted by
  :func:`planner.calibration.descent.fit` (coordinate descent over six numbers of the GPU's
  ``efficiency`` block, minimising the per-source absolute log error of tokens/s per GPU plus a
  penalty pulling the values toward a prior): a family's prior (start and
  penalty centre) is its lineage parent's fit carried over by :func:`transfer` (the root's is
  :data:`UNCALIBRATED`), with the GEMM curve and attention efficiency of its measured kernels where
  it has them (:func:`kernel_prior`); a family with no runs keeps that prior, and a family keeps
  its prior's value of each parameter a measurement ties to its parent (:attr:`Lineage.tied`). The base values
  describe the runs outside any software release class (:func:`base_runs`): a class's runs are
  fitted into its profile (:func:`fit_profile`), and inform the base only in what the class-free
  runs cannot (the MoE numbers, the FP8 speed-up), or when the class-free runs come from too few
  sources. ``scripts/calibrate.py`` writes its result into ``hardware_profiles/gpus``.

The objective and the descent are :mod:`planner.calibration.descent`'s, the held-out figures
(leave-one-source-out folds) :mod:`planner.calibration.folds`'s, the kernel curves
:mod:`planner.calibration.kernel_curves`'s, the layout groups' ranking figures
:mod:`planner.calibration.ranking`'s.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from cost_models.compute import ATTENTION_HALF_KEYS
from planner.calibration.cases import Case, excluded_reason
from planner.calibration.descent import BOUNDS, PARAMS, STEPS, fit
from planner.calibration.kernel_curves import (
    MEASUREMENTS_DIR,
    attention_points,
    fit_gemm_curve,
    gemm_gpu_times,
)
from planner.inputs.cluster_spec import EfficiencySpec
from planner.profiles.hardware import load_gpu
from planner.profiles.software import (
    MIN_RUNS,
    OVERRIDE_PARAMS,
    efficiency_family,
    fitted_on,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Lineage:
    """Where an efficiency family takes its prior from."""

    parent: str | None
    """The nearest calibrated family (None: the root, whose prior is :data:`UNCALIBRATED`)."""
    reference_gpu: str
    """The catalogue GPU whose dense peaks stand for the family in :func:`transfer`."""
    why: str
    """The justification: why the parent's efficiency fractions are the best guess for this family."""
    tied: tuple[str, ...] = ()
    """Parameters (of :data:`PARAMS`) the family is not fitted on: it keeps its parent's fitted value
    transferred (:func:`transfer`), because a measurement relates the two GPUs directly."""
    tied_why: str = ""
    """The measurement behind :attr:`tied`."""


LINEAGE = {
    "a100": Lineage(
        parent=None,
        reference_gpu="a100-sxm4-80gb",
        why=(
            "Ampere GA100: the family with the most sources (7); prior: the vendor-typical "
            "UNCALIBRATED values"
        ),
    ),
    "v100": Lineage(
        parent="a100",
        reference_gpu="v100-sxm2-32gb",
        why=(
            "Volta GV100 -> Ampere GA100, the nearest calibrated architecture: both SXM parts on HBM2 "
            "with 80 / 108 SMs of tensor cores fed by the same cuBLAS, and every V100 run (DLPerf, "
            "January 2021) used the Megatron-LM generation of Narayanan et al. 2021's A100 runs"
        ),
    ),
    "h100": Lineage(
        parent="a100",
        reference_gpu="h100-sxm5-80gb",
        why=(
            "Hopper GH100 succeeds Ampere GA100 (NVIDIA H100 whitepaper, 2022); Megatron-Core and "
            "cuDNN on both"
        ),
    ),
    "h100-96gb": Lineage(
        parent="h100",
        reference_gpu="h100-sxm5-96gb",
        why=(
            "the same GH100 chip (132 SMs, same dense peaks) with 96 GB of HBM3: only the software "
            "and power differ"
        ),
    ),
    "b200": Lineage(
        parent="h100",
        reference_gpu="b200",
        why=(
            "Blackwell (B200, GB200, B300) succeeds Hopper: FP8 at 2x the BF16 peak on both "
            "(datasheets), and the Blackwell runs come from the Megatron-Bridge releases (Megatron-Core, "
            "Transformer Engine, cuDNN attention) that produced the H100 runs of the same tables"
        ),
    ),
    "gb300": Lineage(
        parent="b200",
        reference_gpu="gb300",
        why=(
            "Blackwell Ultra in the NVL72 rack: the Blackwell tensor cores and software of the b200 "
            "family with the same dense BF16 / FP8 peaks as a GB200 (datasheets), at 1,400 W instead "
            "of 1,200 W; measured faster than those peaks and the attention kernels explain: the one "
            "layout both Megatron-Bridge 25.11 tables ran on both racks with the same recipe, Llama 3 "
            "8B FP8 on 8 GPUs, gives 37,556 vs 31,508 tokens/s per GPU (1.19x) where the b200 "
            "family's values and the measured attention speed-up predict 1.04x"
        ),
        tied=("attention_efficiency",),
        tied_why=(
            "NVIDIA's cuDNN SDPA benchmark timed the same attention kernels on a GB200 and a GB300 "
            "(hardware_profiles/measurements/gb200-gb300-cudnn-attention.json): the GB300 file's "
            "attention_kernel_speed is that measured ratio, so the GB300's attention is the b200 "
            "family's times it, not a fit of its own"
        ),
    ),
}
"""Architecture lineage of the efficiency families (the ``# family:`` lines of
hardware_profiles/gpus). A family's prior is its parent's fit carried over by :func:`transfer`;
it is what the family keeps when it has no runs (a leave-one-source-out fold that holds out its
only source) and where the regularised fit (:func:`planner.calibration.descent.objective`) pulls it
when it has few sources. Families not listed (l40s, mi300x: no runs) keep their files' values."""

UNCALIBRATED = EfficiencySpec(
    gemm_efficiency_max=0.75,
    gemm_half_efficiency_flop=12e9,
    attention_efficiency=0.5,
    hbm_efficiency=0.8,
    fp8_gemm_speedup=1.6,
    kernel_overhead_s=20e-6,
    comm_overlap_slowdown=0.18,
    grouped_gemm_efficiency=1.0,
    host_launch_s=30e-6,
)
"""The vendor-typical starting values every uncalibrated GPU type carries
(hardware_profiles/gpus/b200.yaml), and an overlap slowdown of 24 of 132 SMs (the CTAs an NCCL
all-gather takes on an H100; EfficiencySpec.comm_overlap_slowdown), a grouped GEMM as fast as one
kernel (the H100 measurement, cost_models.moe.grouped_linear_s) and 30 us of host time per kernel
launch: TransformerEngine issue #2053 (2025-08) measures the CPU time of one BF16 linear forward
(one GEMM kernel) at 13.5 us for ``torch.nn.Linear`` on an H100 DGX's Xeon 8480C, 37 us for it on a
GB200's Grace and 100 us for Transformer Engine's ``Linear`` there; 30 us is near the geometric
middle of that range, which the prior's width (planner.calibration.descent.PRIOR_LOG_SD, a factor
e) spans. Leave-one-source-out fits start here, not from the shipped fit."""


def family(case: Case) -> str:
    """Calibration family of a case's GPU type."""
    return efficiency_family(case.gpu)


@cache
def reference_peaks(fam: str) -> tuple[float, float]:
    """(16-bit dense peak, FP8 dense peak or 0) in FLOP/s of the family's :data:`LINEAGE` reference GPU."""
    gpu = load_gpu(LINEAGE[fam].reference_gpu)
    half = gpu.peak("bf16") if gpu.supports("bf16") else gpu.peak("fp16")
    return half, gpu.peak("fp8") if gpu.supports("fp8") else 0.0


def transfer(parent_eff: EfficiencySpec, parent: str, child: str) -> EfficiencySpec:
    """The parent family's fitted values as the child's prior, keeping what does not depend on the chip.

    * ``gemm_efficiency_max``, ``attention_efficiency`` (fractions of the dense peak),
      ``kernel_overhead_s`` (launch and synchronisation time per kernel) and
      ``comm_overlap_slowdown`` (compute time added per second of hidden communication) carry over.
    * ``gemm_half_efficiency_flop``: the GEMM model t = (F + F_half) / (e_max x peak)
      (cost_models.compute.gemm_s) charges every call a fixed time F_half / (e_max x peak); that time
      carries over, so F_half scales with the 16-bit peak (a faster chip needs a larger GEMM to fill).
    * ``fp8_gemm_speedup`` carries over as a fraction of the FP8 / 16-bit peak ratio (2.0 on H100
      and B200 alike); 1.0 where the child has no FP8 peak, the vendor-typical
      :data:`UNCALIBRATED` value where only the parent has none.
    * ``hbm_efficiency`` is not fitted: :data:`UNCALIBRATED`'s."""
    p16, p8 = reference_peaks(parent)
    c16, c8 = reference_peaks(child)
    fp8 = UNCALIBRATED.fp8_gemm_speedup
    if p8 and c8:
        fp8 = min(BOUNDS["fp8_gemm_speedup"][1], parent_eff.fp8_gemm_speedup / (p8 / p16) * (c8 / c16))
    elif not c8:
        fp8 = 1.0
    return replace(
        parent_eff,
        gemm_half_efficiency_flop=parent_eff.gemm_half_efficiency_flop * c16 / p16,
        fp8_gemm_speedup=fp8,
        hbm_efficiency=UNCALIBRATED.hbm_efficiency,
    )


def lineage_order(families: Iterable[str]) -> list[str]:
    """``families`` with every one's :data:`LINEAGE` ancestors, parents before children (then by name)."""
    out: list[str] = []

    def visit(fam: str) -> None:
        if fam in out:
            return
        parent = LINEAGE[fam].parent if fam in LINEAGE else None
        if parent:
            visit(parent)
        out.append(fam)

    for fam in sorted(families):
        visit(fam)
    return out


KERNEL_MEASUREMENTS = {"h100": MEASUREMENTS_DIR / "h100-sxm5-80gb-kernels.json"}
"""Kernel timings of a family's reference GPU (scripts/measure_kernels.py on a lent H100,
docs/calibration.md "Kernel-level check"): where a family has one, its GEMM curve and attention
efficiency priors are the measured kernels' (:func:`kernel_prior`), not the parent's."""


@cache
def kernel_prior(fam: str) -> dict[str, float]:
    """The measured kernels' values for a family of :data:`KERNEL_MEASUREMENTS` ({} otherwise):
    ``gemm_efficiency_max`` and ``gemm_half_efficiency_flop`` fitted to the BF16 GEMMs' GPU times
    (:func:`gemm_gpu_times`, :func:`fit_gemm_curve`), and ``attention_efficiency``, the ceiling of
    the attention size curve (cost_models.compute.ATTENTION_HALF_KEYS): the median over the causal
    flash-attention cases of their efficiency as planner charges attention
    (:func:`attention_points`) divided by the curve's keys / (keys + half). The attention timings
    (0.9 ms and longer) hold the same dispatch as the GEMMs' (:func:`gemm_gpu_times`), under 3%,
    and are used as they are."""
    path = KERNEL_MEASUREMENTS.get(fam)
    if path is None:
        return {}
    data = json.loads(path.read_text())
    peak = reference_peaks(fam)[0]
    rows = gemm_gpu_times(data)
    flop = np.array([g["flop"] for g, _ in rows])
    time_s = np.array([t for _, t in rows])
    e_max, f_half = fit_gemm_curve(flop, time_s, peak)
    keys, eff = attention_points(data, peak)
    return {
        "gemm_efficiency_max": e_max,
        "gemm_half_efficiency_flop": f_half,
        # the ceiling of the size curve (cost_models.compute.attention_efficiency)
        "attention_efficiency": float(np.median(eff * (keys + ATTENTION_HALF_KEYS) / keys)),
    }


def prior_of(fam: str, fitted: dict[str, EfficiencySpec]) -> EfficiencySpec:
    """A family's prior: its lineage parent's value in ``fitted`` transferred (:func:`transfer`);
    :data:`UNCALIBRATED` for the lineage root (FP8 speed-up 1.0 without an FP8 peak) and for a
    family outside the lineage; then, where the family's kernels were measured, the GEMM curve and
    attention efficiency of :func:`kernel_prior` in place of the inherited ones."""
    lin = LINEAGE.get(fam)
    if lin is None:
        return UNCALIBRATED
    if lin.parent is None:
        prior = UNCALIBRATED if reference_peaks(fam)[1] else replace(UNCALIBRATED, fp8_gemm_speedup=1.0)
    else:
        prior = transfer(fitted[lin.parent], lin.parent, fam)
    return replace(prior, **kernel_prior(fam))


MIN_BASE_SOURCES = 3
"""A family's base values are fitted on its class-free runs (:func:`base_runs`) when those come
from at least this many sources: fewer would make one benchmark page the family's default."""


def base_runs(group: list[Case]) -> list[Case]:
    """The runs a family's base values describe: those outside any software release class
    (``Case.software`` empty) when they come from at least :data:`MIN_BASE_SOURCES` sources, else
    all of ``group``.

    A release class's runs have a profile of their own (:func:`fit_profile`), fitted from the base.
    Fitting the base on them as well pulls it toward that software: the BigScience class ran every
    kernel launch-blocking and Megatron-Bridge 2025-26 runs are 15-18% faster, so a base fitted on
    every A100 run priced Narayanan et al. 2021's runs 5% too slow, and one fitted on every H100 run
    priced the Megatron-LM README's runs 9% too slow (docs/calibration.md, "Base and profiles")."""
    free = [c for c in group if not c.software]
    if len(free) < len(group) and len({c.source for c in free}) >= MIN_BASE_SOURCES:
        return free
    return group


def fit_families(
    runs: list[Case],
    families: Iterable[str],
    passes: int = 8,
    steps: tuple[float, ...] = STEPS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, tuple[EfficiencySpec, float, int]]:
    """Every family of ``families`` (with its lineage ancestors) fitted on its ``runs``, in
    :func:`lineage_order`: from, and regularised toward, its prior (:func:`prior_of`). A family
    with no runs keeps its prior.

    Where :func:`base_runs` keeps only the class-free runs, the family is first fitted on all its
    runs and then refitted on the class-free ones from there (regularised toward the same prior):
    what the class-free runs cannot inform (:func:`fit` leaves the MoE numbers out without MoE runs
    and the FP8 speed-up without FP8 runs) keeps the value all runs give it. Returns family ->
    (values, mean |log error| over the runs the values were fitted on or nan, those runs' count)."""
    out: dict[str, tuple[EfficiencySpec, float, int]] = {}
    fitted: dict[str, EfficiencySpec] = {}
    for fam in lineage_order(families):
        group = [c for c in runs if family(c) == fam]
        base = base_runs(group)
        prior = prior_of(fam, fitted)
        only = fitted_params(fam)
        if group:
            eff, err = fit_cached(tuple(group), prior, passes, steps, only=only)
            if len(base) < len(group):
                eff, err = fit_cached(tuple(base), prior, passes, steps, start=eff, only=only)
        else:
            eff, err = prior, float("nan")
        fitted[fam] = eff
        out[fam] = (eff, err, len(base))
        if progress:
            parent = LINEAGE[fam].parent if fam in LINEAGE else None
            what = (
                f"{len(base)} class-free runs of {len(group)}"
                if len(base) < len(group)
                else f"{len(group)} runs"
            )
            progress(f"{fam} fitted on {what}" + (f", prior from {parent}" if parent else ""))
    return out


_FITS: dict[tuple, tuple[EfficiencySpec, float]] = {}
"""Fits already made in this process, by (run ids, prior, start, passes, steps): leave-one-source-out
folds that keep all of a family's runs share its fit."""


def fit_cached(
    group: tuple[Case, ...],
    prior: EfficiencySpec,
    passes: int,
    steps: tuple[float, ...],
    start: EfficiencySpec | None = None,
    only: tuple[str, ...] = PARAMS,
) -> tuple[EfficiencySpec, float]:
    """:func:`fit` of ``group``'s ``only`` parameters from ``start`` (default: the prior),
    regularised toward ``prior``."""
    key = (tuple(c.run_id for c in group), prior, start, passes, steps, only)
    if key not in _FITS:
        _FITS[key] = fit(list(group), start or prior, passes, steps, only, prior=prior)
    return _FITS[key]


def fitted_params(fam: str) -> tuple[str, ...]:
    """The parameters a family is fitted on: :data:`PARAMS` less its :attr:`Lineage.tied` ones."""
    tied = LINEAGE[fam].tied if fam in LINEAGE else ()
    return tuple(p for p in PARAMS if p not in tied)


def profile_groups(group: list[Case], candidates: bool = False) -> dict[str, list[Case]]:
    """One family's runs by software release class (sorted by class name): the classes that ship a
    profile for the family (:func:`planner.profiles.software.fitted_on`; what leave-one-source-out,
    time-forward and release-forward folds refit, so that they measure what ships), or with
    ``candidates`` every class with at least :data:`planner.profiles.software.MIN_RUNS` runs (what
    ``scripts/calibrate.py`` fits and :mod:`planner.calibration.profile_gate` decides on). A shipped
    profile has at least MIN_RUNS runs."""
    by: dict[str, list[Case]] = defaultdict(list)
    for c in group:
        if c.software:
            by[c.software].append(c)
    shipped = None if candidates or not group else set(fitted_on(family(group[0])))
    return {k: by[k] for k in sorted(by) if len(by[k]) >= MIN_RUNS and (shipped is None or k in shipped)}


def fit_profile(
    runs: list[Case], base: EfficiencySpec, passes: int = 8, steps: tuple[float, ...] = STEPS
) -> tuple[EfficiencySpec, float]:
    """A software class's overrides: the family's ``base`` fit with only
    :data:`planner.profiles.software.OVERRIDE_PARAMS` refitted on the class's ``runs``, regularised toward
    ``base`` as a family is toward its parent (:func:`planner.calibration.descent.objective`; a class
    is usually one source)."""
    return fit(runs, base, passes, steps, OVERRIDE_PARAMS, prior=base)


def usable(all_cases: Iterable[Case]) -> list[Case]:
    """Cases that can be predicted and count in the statistics."""
    return [c for c in all_cases if not c.skip_reason and not excluded_reason(c.run_id)]
