"""Time-forward validation: fit only on what was published before a date, predict what came after.

Leave-one-source-out (planner.calibration.folds.leave_one_source_out) holds out one document at a
time; every other document, older or newer, stays in the fit. A user's next run is newer than every
run planner was fitted on: new software, new GPUs, new recipes. :func:`time_forward` measures that
case. For a cut date, every usable run published on or after it is held out; each efficiency family
is refitted on the earlier runs alone (planner.calibration.folds.refit_without) by the shipped
procedure itself, its passes and steps (planner.calibration.fitting.fit_families' defaults:
planner.calibration.descent.STEPS): three folds can afford them, where the 25 leave-one-source-out
refits take coarser steps (planner.calibration.folds.LOSO_STEPS), which cannot move an FP8 speed-up of
1.6 by the 11% the 2025-26 runs ask for; a family with no earlier runs is priced with its
parent's fit carried over (planner.calibration.fitting.prior_of), as a new GPU is on the day it
ships; a held-out run of a software release class is priced with the newest earlier release
fitted on its GPU family before the cut (planner.profiles.software.release_for), else the family's
base fit.

A run's date (:func:`published`) is the later of its software release class's date (each
Megatron-Bridge container's table is its own campaign) and its source's (:data:`SOURCE_DATES`).
Dates are months; where a source gives only the year, the last month of it is used, so a run is
never placed before a cut it may postdate.

Fitting also reads the kernel measurements under ``hardware_profiles/measurements`` (the H100 GEMM
and attention priors, planner.calibration.fitting.kernel_prior). They are hardware facts measured
on one machine, not training runs, and stay in every fold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.calibration.cases import Case, Result, summary
from planner.calibration.descent import STEPS, predict
from planner.calibration.fitting import family, usable
from planner.calibration.folds import refit_without
from planner.calibration.releases import signed_median
from planner.inputs.errors import UsageError
from planner.profiles.software import CLASSES, release_for

SOURCE_DATES: dict[str, tuple[str, str]] = {
    "Narayanan et al. 2021": ("2021-04", "arXiv:2104.04473 v1, April 2021"),
    "DLPerf Megatron-LM GPT benchmark": (
        "2021-05",
        "Oneflow-Inc/DLPerf reports/GPT/dlperf_gpt_test_report_210512.md (2021-05-12)",
    ),
    "DLPerf OneFlow-GPT benchmark": ("2021-05", "the same DLPerf report, 2021-05-12"),
    "Korthikanti et al. 2022": ("2022-05", "arXiv:2205.05198 v1, May 2022"),
    "BigScience BLOOM-176B checkpoint reshaping experiments": (
        "2022-12",
        "bigscience-workshop/bigscience train/tr11-176B-ml/reshaping-log.md: 2022, month not stated",
    ),
    "BigScience BLOOM-176B training README": (
        "2022-07",
        "BLOOM-176B's training ended in July 2022 (bigscience-workshop/bigscience train/tr11-176B-ml)",
    ),
    "BigScience tr11-176B-ml 'chronicles-prequel.md'": (
        "2022-02",
        "chronicles-prequel.md: the tables are dated 02-21 (2022, before the March 2022 launch)",
    ),
    "MLPerf Training v3.1": ("2023-11", "MLCommons Training v3.1 results, published 2023-11-08"),
    "vTrain": ("2023-12", "arXiv:2312.12391 v1, December 2023"),
    "mosaicml/llm-foundry scripts/train/benchmarking/README.md 'MPT Training Benchmarks'": (
        "2024-01",
        "mosaicml/llm-foundry: the H100 tables added in b2a43a147 (2023-10-19), revised in 5e85bd62d "
        "(2024-01-06)",
    ),
    "Qi et al. 2024": ("2024-01", "arXiv:2401.10241 v1, January 2024 (ICLR 2024)"),
    "FlagPerf": (
        "2024-05",
        "FlagOpen/FlagPerf llama3_8B-megatron README, rows added in e203e1a4 (2024-05-09)",
    ),
    "NVIDIA NeMo docs/source/performance/performance_summary.md": (
        "2024-07",
        "NVIDIA/NeMo performance_summary.md for the NeMo 24.07 container",
    ),
    "NVIDIA/Megatron-LM README 'Training Speed and Scalability' / 'Performance Benchmarking'": (
        "2024-07",
        "NVIDIA/Megatron-LM images/model_table.png, added in f2e5db402c (2024-07-15)",
    ),
    "pytorch/torchtitan docs/performance.md": (
        "2024-12",
        "pytorch/torchtitan docs/performance.md (A100 tables): 2024, month not stated",
    ),
    "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md": ("2024-12", "the file's name: 2024-12"),
    "MLPerf Training v4.1": ("2024-11", "MLCommons Training v4.1 results, published 2024-11-13"),
    "MLPerf Training v5.0": ("2025-06", "MLCommons Training v5.0 results, published 2025-06-04"),
    # the unseen production runs' rounds (tests/data/production_runs.yaml; scripts/validate_production.py)
    "MLPerf Training v5.1": ("2025-11", "MLCommons Training v5.1 results, published 2025-11-12"),
    "MLPerf Training v6.0": (
        "2026-06",
        "MLCommons Training v6.0 results, published 2026-06-16 (mlcommons.org/2026/06/mlperf-training-v6-0-results/)",
    ),
    "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md": (
        "2025-06",
        "the file's name: 2025-06",
    ),
    "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md": (
        "2025-06",
        "the file's name: 2025-06",
    ),
    "NVIDIA/Megatron-LM examples/llama/README.md 'FP8 Performance'": (
        "2025-06",
        "NVIDIA/Megatron-LM examples/llama/README.md, added in bf6e99859f (2025-06-14)",
    ),
    "NVIDIA Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md": (
        "2025-11",
        "yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md, first committed 2025-11-04",
    ),
    "NVIDIA/Megatron-LM functional test golden values": (
        "2026-05",
        "NVIDIA/Megatron-LM golden_values_dev_dgx_h100.json, last updated in 6e091e1b68 (2026-05-29)",
    ),
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md": (
        "2025-11",
        "the archive's oldest container, 25.11 (each row is dated by its container's release class)",
    ),
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md": ("2026-08", "the NeMo 26.08 container"),
}
"""Source (``Case.source``) -> (month first published, YYYY-MM; the evidence). Sources not in this
table are dated by their software release class or, without one, refused (:func:`published`)."""

PASSES = 8
"""Coordinate-descent passes of each fold's fits: the shipped fit's (planner.calibration.fitting.fit_families)."""

CUTS = ("2024-01", "2025-01", "2025-12")
"""The cut dates reported (docs/calibration.md, "Time forward"): before 2024 (the A100-era papers,
BigScience, MLPerf v3.1 and vTrain predict every H100, Blackwell and 2024-26 framework run), before
2025 (the 2024 framework tables added; MLPerf v5.0, torchtitan 2025 and every Megatron-Bridge
container predicted) and before December 2025 (Megatron-Bridge 25.11 added; the 2026 containers
predicted, the situation the day a new container's table appears)."""


def published(case: Case) -> str:
    """The month (YYYY-MM) ``case`` was first published: the later of its software class's release
    month and its source's (:data:`SOURCE_DATES`), either where only one is known (a run appears no
    earlier than the software it ran). :class:`UsageError` for a run neither dates."""
    dates = [CLASSES[case.software][1]] if case.software in CLASSES else []
    if case.source in SOURCE_DATES:
        dates.append(SOURCE_DATES[case.source][0])
    if dates:
        return max(dates)
    raise UsageError(
        f"run {case.run_id!r}: source {case.source!r} has no publication date "
        "(planner.calibration.time_forward.SOURCE_DATES)"
    )


@dataclass(frozen=True)
class TimeFold:
    """The runs published on or after ``cut``, predicted by a fit on the runs before it."""

    cut: str
    fitted_on: int
    """Usable runs before the cut (the fit's data)."""
    sources_before: tuple[str, ...]
    predicted_with: dict[tuple[str, str], str]
    """(GPU family, release class) of a held-out run -> the profile it was priced with ('' = base)."""
    results: list[Result]

    def to_json(self) -> dict:
        return {
            "cut": self.cut,
            "fitted_on_runs": self.fitted_on,
            "sources_before": list(self.sources_before),
            "predicted_with": {
                f"{fam}/{cls or 'base'}": used or "base"
                for (fam, cls), used in sorted(self.predicted_with.items())
            },
            **summary(self.results),
            "signed_median": signed_median(self.results) if self.results else float("nan"),
        }


def time_fold(
    cut: str, cases_: list[Case], passes: int = PASSES, steps: tuple[float, ...] = STEPS
) -> tuple[list[str], TimeFold]:
    """Hold out every run of ``cases_`` published on or after ``cut`` (YYYY-MM); refit on the rest
    with ``passes`` and ``steps`` (the shipped fit's unless given); predict them (see the module
    docstring). Returns the fit's notes and the fold."""
    held = [c for c in cases_ if published(c) >= cut]
    rest = [c for c in cases_ if published(c) < cut]
    if not held or not rest:
        raise UsageError(f"cut {cut}: {len(rest)} runs before it and {len(held)} after; both need runs")
    used: dict[tuple[str, str], str] = {}

    def newest_before(fam: str, classes: dict[str, list[Case]]) -> list[str]:
        for cls in sorted({c.software for c in held if family(c) == fam}):
            used[(fam, cls)] = release_for(cls, classes) if cls else ""
        return [u for (f, _), u in used.items() if f == fam and u]

    notes, fitted = refit_without(held, rest, passes, newest_before, steps=steps)
    results = [predict(c, fitted[(family(c), used.get((family(c), c.software), ""))]) for c in held]
    sources = tuple(sorted({c.source for c in rest}))
    return notes, TimeFold(cut, len(rest), sources, used, results)


def time_forward(
    all_cases: Iterable[Case],
    cuts: tuple[str, ...] = CUTS,
    passes: int = PASSES,
    progress: Callable[[str], None] | None = None,
) -> list[TimeFold]:
    """:func:`time_fold` for each cut of ``cuts`` over the usable cases, in the order given."""
    cases_ = usable(all_cases)
    out = []
    for cut in cuts:
        notes, fold = time_fold(cut, cases_, passes)
        if progress:
            for note in notes:
                progress(f"cut {cut}: {note}")
        out.append(fold)
    return out
