"""Software profiles: efficiency overrides per (GPU efficiency family, software release class).

A published run's ``parallel.framework`` / ``parallel.software`` keys name what it ran; 2025-26
Megatron-Bridge releases run 15-18% faster than the 2024 releases the GPU files' base efficiencies
are dominated by (issue 12; NVIDIA Megatron-Bridge performance summary pages, cited per run in
tests/data/published_runs.yaml). A profile (``hardware_profiles/software/<name>.yaml``) holds, per
family, only the numbers the release class changes, fitted by ``scripts/calibrate.py`` on that
class's runs (planner.fitting.fit_profile); a (family, class) with fewer than
:data:`MIN_RUNS` runs has no entry and the base values apply.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from pathlib import Path

import yaml

from planner.specs import EfficiencySpec

GPU_DIR = Path(__file__).resolve().parent.parent / "hardware_profiles" / "gpus"
SOFTWARE_DIR = Path(__file__).resolve().parent.parent / "hardware_profiles" / "software"
MIN_RUNS = 3
"""A (family, class) needs this many usable runs for a fitted profile."""
OVERRIDE_PARAMS = ("gemm_efficiency_max", "fp8_gemm_speedup", "kernel_overhead_s", "comm_overlap_slowdown")
"""The efficiency numbers a software release class may change (EfficiencySpec fields)."""
_YAML_KEYS = {"kernel_overhead_s": ("kernel_overhead_us", 1e-6)}

CLASSES = {
    "megatron-bridge-25.11": ("megatron", "2025-11", "Megatron-Bridge / NeMo 25.11 container"),
    "megatron-bridge-26.04": ("megatron", "2026-04", "Megatron-Bridge / NeMo 26.04 containers"),
    "megatron-bridge-26.06": ("megatron", "2026-06", "Megatron-Bridge / NeMo 26.06 container"),
    "torchtitan-2025": ("torchtitan", "2025-06", "torchtitan 2025 (FSDP2, torch 2.8 nightlies)"),
    "megatron-deepspeed-bigscience-2022": (
        "deepspeed",
        "2022-02",
        "BigScience's Megatron-DeepSpeed fork on Jean Zay (DeepSpeed pipeline engine, ZeRO-1, "
        "CUDA_LAUNCH_BLOCKING=1)",
    ),
}
"""Release classes: name -> (framework, released, description). The runs' citations are in
tests/data/published_runs.yaml (Megatron-Bridge performance summary pages; torchtitan benchmarks;
BigScience's tr11 chronicles and reshaping log). The BigScience class ran every CUDA operation
synchronously: bigscience-workshop/bigscience ``train/tr11-176B-ml/chronicles-prequel.md``, "dealing
with JZ hanging on the large model" (``export CUDA_LAUNCH_BLOCKING=1``; 320 GPUs "always hangs"
without it) and ``tr11-176B-ml.slurm`` (the same export), so each kernel's host-side launch cost is
added to its GPU time instead of hidden behind the previous kernel: a fixed cost per layer and pass
(``kernel_overhead_s``) that the 2021-24 Megatron-LM runs of the base fit do not pay, and which
makes small micro-batches slow (the sweeps measure throughput rising from micro-batch 1 to 2-4)."""


PROFILE_START = {"megatron-deepspeed-bigscience-2022": {"kernel_overhead_s": 1.2e-3}}
"""Where a class's profile fit starts, for numbers its own source measured (else the family's base
fit). BigScience's launch-blocking A/B (chronicles-prequel.md, "dealing with JZ hanging": 200B model,
tp 8, pp 10, 8 layers per stage, 80 GPUs, GBS 512) measured 97.20 TFLOP/s asynchronous and 91.04 with
``CUDA_LAUNCH_BLOCKING=1``, a 6.8% longer step: on its ~0.43 s per micro-batch and stage (4 x 8 layers'
1.3 TFLOP per GPU at 97 TFLOP/s), 29 ms per micro-batch, 3.6 ms per layer, 1.2 ms per layer and
pass (forward, recomputed forward, backward: the three passes that pay ``kernel_overhead_s``).
Coordinate descent's multiplicative steps cannot reach milliseconds from the base fit's microseconds
in a few passes, hence the start."""


def profile_start(eff: EfficiencySpec, name: str) -> EfficiencySpec:
    """The family's base fit ``eff`` with class ``name``'s :data:`PROFILE_START` values."""
    return replace(eff, **PROFILE_START.get(name, {}))


@cache
def efficiency_family(gpu: str) -> str:
    """The efficiency family of a GPU type: the ``# family:`` line of its YAML's efficiency block
    (GPU types of one family share fitted values; e.g. H200 inherits H100's)."""
    path = GPU_DIR / f"{gpu}.yaml"
    found = re.search(r"^\s*# family: (\S+)$", path.read_text(), re.M) if path.exists() else None
    return found.group(1) if found else gpu


def software_class(framework: str | None, software: str | None) -> str:
    """The release class of a run's ``parallel.framework`` / ``parallel.software`` ('' = base only)."""
    text = str(software or "")
    found = re.search(r"Megatron-Bridge / NeMo (\d\d)\.(\d\d)", text)
    if found:
        name = f"megatron-bridge-{found.group(1)}.{found.group(2)}"
        return name if name in CLASSES else ""
    if str(framework or "") == "torchtitan":
        return "torchtitan-2025"
    if text.startswith("Megatron-DeepSpeed (bigscience fork"):
        return "megatron-deepspeed-bigscience-2022"
    return ""


@cache
def load_profiles(directory: Path = SOFTWARE_DIR) -> dict[str, dict]:
    """Every profile file by name (sorted)."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        out[str(data["name"])] = data
    return out


def overrides(name: str, family: str) -> dict[str, float]:
    """The EfficiencySpec fields profile ``name`` sets for ``family`` (SI units; {} = none)."""
    fam = (load_profiles().get(name) or {}).get("families", {}).get(family) or {}
    out = {}
    for field in OVERRIDE_PARAMS:
        key, scale = _YAML_KEYS.get(field, (field, 1.0))
        if key in fam:
            out[field] = float(fam[key]) * scale
    return out


def apply(eff: EfficiencySpec, name: str, family: str) -> EfficiencySpec:
    """``eff`` with profile ``name``'s overrides for ``family`` (unchanged when it has none)."""
    return replace(eff, **overrides(name, family)) if name else eff


def to_yaml_values(eff: EfficiencySpec) -> dict[str, float]:
    """The override fields of ``eff`` as written in a profile file (kernel overhead in us)."""
    out = {}
    for field in OVERRIDE_PARAMS:
        key, scale = _YAML_KEYS.get(field, (field, 1.0))
        out[key] = round(getattr(eff, field) / scale, 4)
    return out
