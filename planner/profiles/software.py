"""Software profiles: efficiency overrides per (GPU efficiency family, software release class).

A published run's ``parallel.framework`` / ``parallel.software`` keys name what it ran; 2025-26
Megatron-Bridge releases run 15-18% faster than the 2024 releases the GPU files' base efficiencies
are dominated by (issue 12; NVIDIA Megatron-Bridge performance summary pages, cited per run in
tests/data/published_runs.yaml). A profile (``hardware_profiles/software/<name>.yaml``) holds, per
family, only the numbers the release class changes, fitted by ``scripts/calibrate.py`` on that
class's runs (planner.calibration.fitting.fit_profile); a (family, class) with fewer than
:data:`MIN_RUNS` runs has no entry and the base values apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import yaml

from planner.inputs.cluster_spec import ClusterSpec, EfficiencySpec
from planner.inputs.errors import SpecError, UsageError

GPU_DIR = Path(__file__).resolve().parents[2] / "hardware_profiles" / "gpus"
SOFTWARE_DIR = Path(__file__).resolve().parents[2] / "hardware_profiles" / "software"
MIN_RUNS = 5
"""A (family, class) needs this many usable runs for a fitted profile. Five, not three (until
2026-11-28): profiles of three or four runs priced what they had not seen worse than the older,
larger profile they replaced. Leave-one-run-out inside the five classes of three or four runs
(19 runs; each refitted on its siblings, planner.calibration.fitting.fit_profile): median error 6.3%, against
2.4% with the Megatron-Bridge 25.11 profile fitted without them; release forward
(scripts/validate_releases.py), 26.06's runs priced with 26.04's four-run B200 profile 13.6%
median, with 25.11's 5.7%, and 26.08's with 26.06's 3.2%, with 25.11's 2.9%. The four-run 26.04
B200 profile had halved the grouped-GEMM efficiency (0.80 -> 0.43) to meet one run (gpt-oss-120b,
+15%) that the other three did not ask for (docs/calibration.md, "How many runs a profile
needs")."""
OVERRIDE_PARAMS = (
    "gemm_efficiency_max",
    "fp8_gemm_speedup",
    "kernel_overhead_s",
    "comm_overlap_slowdown",
    "grouped_gemm_efficiency",
    "host_launch_s",
)
"""The efficiency numbers a software release class may change (EfficiencySpec fields): the GEMM
ceiling and FP8 speed-up (cuBLAS / Transformer Engine releases), the per-layer overhead, the overlap
slowdown, and the two MoE numbers (the grouped-GEMM implementation and the host time per launch
change with Transformer Engine and Megatron-Core releases); the MoE ones only where the class has
MoE runs (planner.calibration.descent.fit)."""
_YAML_KEYS = {"kernel_overhead_s": ("kernel_overhead_us", 1e-6), "host_launch_s": ("host_launch_us", 1e-6)}

CLASSES = {
    "megatron-bridge-25.11": ("megatron", "2025-11", "Megatron-Bridge / NeMo 25.11 container"),
    "megatron-bridge-26.04": ("megatron", "2026-04", "Megatron-Bridge / NeMo 26.04 containers"),
    "megatron-bridge-26.06": ("megatron", "2026-06", "Megatron-Bridge / NeMo 26.06 container"),
    "megatron-bridge-26.08": ("megatron", "2026-08", "Megatron-Bridge / NeMo 26.08 container"),
    "torchtitan-2025": ("torchtitan", "2025-06", "torchtitan 2025 (FSDP2, torch 2.8 nightlies)"),
    "megatron-lm-zero-bubble-2024": (
        "zero-bubble",
        "2024-01",
        "sail-sg's zero-bubble fork of Megatron-LM (legacy GPT model, fp16; Qi et al. 2024's runs)",
    ),
    "megatron-deepspeed-bigscience-2022": (
        "deepspeed",
        "2022-02",
        "BigScience's Megatron-DeepSpeed fork on Jean Zay (DeepSpeed pipeline engine, ZeRO-1, "
        "CUDA_LAUNCH_BLOCKING=1)",
    ),
}
"""Release classes: name -> (framework, released, description). The runs' citations are in
tests/data/published_runs.yaml (Megatron-Bridge performance summary pages; torchtitan benchmarks;
BigScience's tr11 chronicles and reshaping log; Qi et al. 2024's Table 4). The zero-bubble fork
(sail-sg/zero-bubble-pipeline-parallelism, a Megatron-LM of late 2023 whose backward is split into B
and W passes) is a class of its own with a framework name no plan uses, so its profile describes
those runs and is never the default of a Megatron plan. The BigScience class ran every CUDA operation
synchronously: bigscience-workshop/bigscience ``train/tr11-176B-ml/chronicles-prequel.md``, "dealing
with JZ hanging on the large model" (``export CUDA_LAUNCH_BLOCKING=1``; 320 GPUs "always hangs"
without it) and ``tr11-176B-ml.slurm`` (the same export), so each kernel's host-side launch cost is
added to its GPU time instead of hidden behind the previous kernel: a fixed cost per layer and pass
(``kernel_overhead_s``) that the 2021-24 Megatron-LM runs of the base fit do not pay, and which
makes small micro-batches slow (the sweeps measure throughput rising from micro-batch 1 to 2-4)."""


@dataclass(frozen=True, slots=True)
class ProfileStart:
    """Where a class's profile fit starts (and is regularised toward) for numbers one document
    gives, instead of the family's base fit: ``values`` (EfficiencySpec fields) read from
    ``document`` (part of its runs' source label, planner.calibration.cases.Case.source) by the
    derivation in the docstring of :data:`PROFILE_START`."""

    document: str
    values: dict


PROFILE_START = {
    "megatron-deepspeed-bigscience-2022": (
        ProfileStart("chronicles-prequel.md", {"kernel_overhead_s": 1.2e-3}),
        ProfileStart("checkpoint reshaping experiments", {"kernel_overhead_s": 0.88e-3}),
    )
}
"""Where a class's profile fit starts, in order of preference, each from one document (else the
family's base fit); a leave-one-source-out fold takes the first whose document it keeps
(:func:`profile_start`). Coordinate descent's multiplicative steps cannot reach milliseconds from
the base fit's microseconds in a few passes, and the prior (planner.calibration.descent.PRIOR_LOG_SD) would pull
the fit back to the base: the launch-blocking class needs a start of its own.

* chronicles-prequel.md, the launch-blocking A/B ("dealing with JZ hanging": 200B model, tp 8, pp 10,
  8 layers per stage, 80 GPUs, GBS 512): 97.20 TFLOP/s asynchronous and 91.04 with
  ``CUDA_LAUNCH_BLOCKING=1``, a 6.8% longer step: on its ~0.43 s per micro-batch and stage (4 x 8
  layers' 1.3 TFLOP per GPU at 97 TFLOP/s), 29 ms per micro-batch, 3.6 ms per layer, 1.2 ms per layer
  and pass (forward, recomputed forward, backward: the three passes that pay ``kernel_overhead_s``).
  The direct measurement of the flag, hence first.
* checkpoint reshaping experiments (``train/tr11-176B-ml/reshaping-log.md``): its 24-node tp 4 /
  pp 12 pair that differs only in micro-batch size (MBS 1: 234.72 s per step, MBS 2: 215.99 s;
  BLOOM-176B, GBS 2048, full recompute), throughput ratio 1.086. planner's model with the
  uncalibrated efficiency values (planner.calibration.fitting.UNCALIBRATED) reproduces that ratio at 0.88 ms per
  layer and pass, with the BF16 optimizer's per-micro-batch fp32 gradient accumulation priced
  (planner.calibration.run_records.unfused_accumulation), the pipeline sends scattered over tp, the
  embedding-slot split (planner.calibration.run_records.pipeline_scatter_gather, embedding_slots), Jean Zay's
  ports at the NCCL bandwidth measured through them (planner.calibration.run_clusters.JEAN_ZAY_NCCL_PORT_BYTES_PER_S:
  the slower gradient reduction is the same time at either micro-batch size, so it narrows the
  ratio) and the tied embedding's gradient all-reduce between the first and the last stage
  (cost_models.data_parallel.embedding_sync_s, DeepSpeed's ``ReduceTiedGrads``: a fixed time per
  step that narrows it too); 2.3 ms before the accumulation pass was priced, 0.83 ms before the
  sends and the split were, 0.68 ms before the ports were, 0.80 ms before the embedding
  all-reduce was; with the GEMM size curve on the issued tile work (the 2026-12-02 form,
  cost_models.compute.issued_gemm_s) 0.88 ms gives 1.0835, 0.2% short, and 0.99 ms the ratio
  exactly (the start stays 0.88 ms until the next refit of the profile); the base fit's
  microseconds leave the ratio short: the larger micro-batch's GEMMs, the bubble and that pass alone
  do not explain it; tests/test_software_profiles.py keeps the derivation true). Used by the fold
  that holds out the chronicles."""


def profile_start(eff: EfficiencySpec, name: str, held_out_source: str = "") -> EfficiencySpec:
    """The family's base fit ``eff`` with the values of class ``name``'s first :data:`PROFILE_START`
    entry whose document is not ``held_out_source`` (a leave-one-source-out fold's held-out source):
    a fold must not learn from the source it predicts. ``eff`` itself when there is none."""
    for start in PROFILE_START.get(name, ()):
        if start.document not in held_out_source:
            return replace(eff, **start.values)
    return eff


VARIANT_OF = {"v100-sxm2-16gb": "v100-sxm2-32gb"}
"""GPU types the calibration derives from a catalogue file rather than reading one
(planner.calibration.run_clusters._v100_cluster: the 16 GB V100-SXM2 is the 32 GB file with 16 GiB); they
belong to that file's family."""


@cache
def efficiency_family(gpu: str) -> str:
    """The efficiency family of a GPU type: the ``# family:`` line of its YAML's efficiency block
    (GPU types of one family share fitted values; e.g. H200 inherits H100's)."""
    path = GPU_DIR / f"{VARIANT_OF.get(gpu, gpu)}.yaml"
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
    if text.startswith("Megatron-LM fork of sail-sg/zero-bubble-pipeline-parallelism"):
        return "megatron-lm-zero-bubble-2024"
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


def predecessor(cls: str, fitted_on_family: Iterable[str]) -> str:
    """The newest release class of ``cls``'s framework released before it, among
    ``fitted_on_family`` (the classes with a profile on a GPU family); '' for none (the family's
    base values)."""
    if cls not in CLASSES:
        return ""
    framework, released, _ = CLASSES[cls]
    earlier = [
        (CLASSES[c][1], c)
        for c in fitted_on_family
        if c in CLASSES and CLASSES[c][0] == framework and CLASSES[c][1] < released
    ]
    return max(earlier)[1] if earlier else ""


def release_for(cls: str, fitted: Iterable[str]) -> str:
    """The release class whose values price ``cls`` among the classes ``fitted`` on a GPU family:
    ``cls`` itself when fitted, else its :func:`predecessor` among them; '' for none (base values).
    The one rule for the shipped profiles (:func:`entry_source`) and for a leave-one-source-out
    fold's refitted ones (planner.calibration.fitting)."""
    fitted = list(fitted)
    return cls if cls in fitted else predecessor(cls, fitted)


def entry_source(name: str, family: str) -> str:
    """The profile whose entry for ``family`` applies under profile ``name``: ``name`` when it has
    one; else its :func:`predecessor` among the profiles fitted on the family, since a release
    class without the runs a profile needs (:data:`MIN_RUNS`) is priced as the newest earlier
    release of its framework fitted on the family (what ``scripts/validate_releases.py`` measures:
    a release priced with the one before it); '' when there is none (the GPU file's base values)."""
    return release_for(name, fitted_on(family))


def fitted_on(family: str) -> list[str]:
    """The shipped profiles with an entry for GPU family ``family`` (sorted by name)."""
    return [n for n, d in load_profiles().items() if family in (d.get("families") or {})]


def overrides(name: str, family: str) -> dict[str, float]:
    """The EfficiencySpec fields profile ``name`` sets for ``family`` (SI units; {} = none): its own
    entry's, or the release it inherits from (:func:`entry_source`)."""
    source = entry_source(name, family) if name else ""
    fam = (load_profiles().get(source) or {}).get("families", {}).get(family) or {}
    out = {}
    for field in OVERRIDE_PARAMS:
        key, scale = _YAML_KEYS.get(field, (field, 1.0))
        if key in fam:
            out[field] = float(fam[key]) * scale
    return out


def apply(eff: EfficiencySpec, name: str, family: str) -> EfficiencySpec:
    """``eff`` with profile ``name``'s overrides for ``family`` (unchanged when it has none)."""
    return replace(eff, **overrides(name, family)) if name else eff


MOE_OVERRIDES = ("grouped_gemm_efficiency", "host_launch_s")
"""The override fields only MoE layers read (written only for a class fitted on MoE runs)."""


def to_yaml_values(eff: EfficiencySpec, moe: bool = True) -> dict[str, float]:
    """The override fields of ``eff`` as written in a profile file (kernel overhead and host launch
    time in us); without ``moe``, the MoE-only fields are left out (the family's base values apply)."""
    out = {}
    for field in OVERRIDE_PARAMS:
        if not moe and field in MOE_OVERRIDES:
            continue
        key, scale = _YAML_KEYS.get(field, (field, 1.0))
        out[key] = round(getattr(eff, field) / scale, 4)
    return out


# ------------------------------------------------------------------------------------------------
# Selecting a profile for a plan (``--software``; recorded in plan files)

BASE = "base"
"""The name of "no software profile": the GPU files' base efficiencies (``--software base``)."""
BASE_ALIASES = (BASE, "none")
"""Names that select the base values (``none`` is accepted and recorded as ``base``)."""


def software_names() -> tuple[str, ...]:
    """Every name ``--software`` accepts: ``base`` then the shipped profiles (sorted)."""
    return (BASE, *sorted(load_profiles()))


def check_software(name: str, where: str = "--software") -> str:
    """``name`` as recorded (case-insensitive; ``none`` -> ``base``), or an error listing the
    allowed values: a :class:`UsageError` (exit 2) for the command-line flag, a :class:`SpecError`
    (exit 1) for a file's key (``where`` is then the file and key)."""
    key = str(name).strip().lower()
    if key in BASE_ALIASES:
        return BASE
    if key in load_profiles():
        return key
    error = UsageError if where == "--software" else SpecError
    raise error(f"{where} {name!r}: allowed values are {', '.join(software_names())} (or none)")


def default_software(framework: str, families: tuple[str, ...] = ()) -> str:
    """The profile a plan for ``framework`` gets when no ``--software`` is given: the newest (by
    ``released``; ties by name) profile of that framework that has an entry for every efficiency
    family in ``families`` (the cluster's GPUs, :func:`cluster_families`), else the newest covering
    any of them, else ``base`` (no release of the framework was fitted on these GPUs); with no
    families given, the newest of the framework fitted on any family; ``base`` when the framework
    has none (``any``). A release class is fitted only where it has :data:`MIN_RUNS` runs (e.g.
    Megatron-Bridge 26.04-26.08 have three or four per family), so a plan gets the newest release
    fitted on its GPUs rather than base values."""
    profiles = load_profiles()
    own = sorted(
        ((str(d.get("released", "")), n) for n, d in profiles.items() if d.get("framework") == framework),
        reverse=True,
    )
    if not own:
        return BASE
    wanted = set(families)

    def covered(name: str) -> set[str]:
        return wanted & set((profiles[name].get("families") or {}).keys())

    if not wanted:
        fitted = [n for _, n in own if profiles[n].get("families")]
        return (fitted or [own[0][1]])[0]
    for test in (lambda n: covered(n) == wanted, lambda n: bool(covered(n))):
        hits = [n for _, n in own if test(n)]
        if hits:
            return hits[0]
    return BASE


def cluster_families(cluster: ClusterSpec) -> tuple[str, ...]:
    """The efficiency families of a cluster's GPU types, in group order, without repeats."""
    return tuple(dict.fromkeys(efficiency_family(g.gpu.name) for g in cluster.groups))


def resolve_software(name: str | None, framework: str, families: tuple[str, ...] = ()) -> str:
    """The profile to use: ``name`` checked, or :func:`default_software` of ``framework`` for a
    cluster of ``families``."""
    return check_software(name) if name is not None else default_software(framework, families)


@dataclass(frozen=True, slots=True)
class SoftwareUse:
    """Which software profile a cluster's efficiencies come from, per GPU type."""

    name: str
    """The profile's name, or ``base``."""
    overridden: tuple[tuple[str, str], ...] = ()
    """(GPU type, efficiency family) whose efficiencies the profile sets."""
    base_values: tuple[tuple[str, str], ...] = ()
    """(GPU type, family) neither the profile nor an earlier release of its framework has an entry
    for: the GPU file's base values apply."""
    inherited: tuple[tuple[str, str, str], ...] = ()
    """(GPU type, family, profile) of ``overridden`` whose values come from an earlier release
    (:func:`entry_source`: the profile has no entry for the family)."""
    calibrated: tuple[str, ...] = ()
    """GPU types under a user's calibration profile (``--profile``): its values and the GPU file's
    base values apply, never the software profile's (the calibration was fitted over the base)."""

    @property
    def released(self) -> str:
        return str((load_profiles().get(self.name) or {}).get("released", ""))

    def note(self) -> str:
        """A note when the profile has no entry of its own for some GPU type: one line for those an
        earlier release prices, one for those left at base values ('' when neither)."""
        if self.name == BASE:
            return ""
        lines = [
            f"software profile {self.name} has no efficiencies for {gpu} (family {fam}): those of "
            f"{source}, the newest earlier release fitted on it, apply"
            for gpu, fam, source in self.inherited
        ]
        if self.base_values:
            gpus = ", ".join(f"{gpu} (family {fam})" for gpu, fam in self.base_values)
            lines.append(
                f"software profile {self.name} has no efficiencies for {gpus}: the GPU file's base values apply"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready: name, released, and which GPU types it sets (``inherited``: those set from an
        earlier release) or leaves at base values."""
        return {
            "name": self.name,
            "released": self.released,
            "overridden": [{"gpu": g, "family": f} for g, f in self.overridden],
            "base_values": [{"gpu": g, "family": f} for g, f in self.base_values],
            **(
                {"inherited": [{"gpu": g, "family": f, "from": n} for g, f, n in self.inherited]}
                if self.inherited
                else {}
            ),
            **({"calibrated": list(self.calibrated)} if self.calibrated else {}),
        }


def software_use(gpus, name: str, calibrated: tuple[str, ...] = ()) -> SoftwareUse:
    """Which of the GPU types ``gpus`` profile ``name`` sets (by efficiency family), which keep
    their base values because it has no entry for their family, and which are ``calibrated``
    (a user's calibration profile applies to them, over the base values)."""
    name = check_software(name)
    gpus = sorted(set(gpus))
    if name == BASE:
        return SoftwareUse(BASE)
    cal = tuple(g for g in gpus if g in calibrated)
    fams = [(g, efficiency_family(g)) for g in gpus if g not in cal]
    source = {f: entry_source(name, f) for _, f in fams}
    over = tuple((g, f) for g, f in fams if overrides(name, f))
    inherited = tuple((g, f, source[f]) for g, f in over if source[f] != name)
    return SoftwareUse(
        name, over, tuple(x for x in fams if x not in over), inherited=inherited, calibrated=cal
    )


def with_software(
    cluster: ClusterSpec, name: str, calibrated: tuple[str, ...] = ()
) -> tuple[ClusterSpec, SoftwareUse]:
    """``cluster`` with profile ``name``'s overrides on every node group, by its GPU's efficiency
    family, and what was set (:func:`software_use`: a family without an entry of its own takes an
    earlier release's, :func:`entry_source`, or keeps the base values, and is listed either way,
    not skipped silently; GPU types in ``calibrated`` are left alone).
    ``base`` returns the cluster unchanged."""
    use = software_use((g.gpu.name for g in cluster.groups), name, calibrated)
    fams = dict(use.overridden)
    groups = tuple(
        replace(g, gpu=replace(g.gpu, efficiency=apply(g.gpu.efficiency, use.name, fams[g.gpu.name])))
        if g.gpu.name in fams
        else g
        for g in cluster.groups
    )
    return (replace(cluster, groups=groups) if fams else cluster), use


def configure(cluster: ClusterSpec, software: str, profile=None) -> tuple[ClusterSpec, SoftwareUse]:
    """``cluster`` under software profile ``software``, then a user's calibration ``profile``
    (:class:`planner.profiles.calibrated.Profile`, ``--profile``; None for none).

    The calibration wins: its GPU type keeps the GPU file's base values under the calibrated ones
    and gets nothing from the software profile (``planner calibrate`` fits over the base values,
    and a user's own measurements of their own cluster say more than a release class's published
    runs); every other GPU type gets the software profile."""
    from planner.profiles.calibrated import apply_profile

    cluster, use = with_software(cluster, software, (profile.gpu,) if profile is not None else ())
    return apply_profile(cluster, profile), use


def profile_rows(family: str | None = None) -> list[dict]:
    """The shipped profiles as JSON-ready rows (``planner hardware software`` / ``show``): name,
    framework, released, description and, per family (only ``family`` when given; a profile without
    an entry for it is left out), the overridden values in file units and the runs they were fitted
    on (counted from the file's comment, which names them)."""
    rows = []
    for name, data in sorted(load_profiles().items()):
        fams = data.get("families") or {}
        keep = sorted(fams) if family is None else [f for f in sorted(fams) if f == family]
        if family is not None and not keep:
            continue
        rows.append(
            {
                "name": name,
                "framework": data.get("framework", ""),
                "released": str(data.get("released", "")),
                "description": data.get("description", ""),
                "families": [
                    {
                        "family": f,
                        "fitted_runs": fitted_runs(name, f),
                        **{k: float(v) for k, v in fams[f].items()},
                    }
                    for f in keep
                ],
            }
        )
    return rows


@cache
def fitted_runs(name: str, family: str) -> int:
    """How many runs profile ``name``'s entry for ``family`` was fitted on: the ``# fitted on N
    runs`` comment ``scripts/calibrate.py --write`` puts above each entry (0 when absent)."""
    path = SOFTWARE_DIR / f"{name}.yaml"
    text = path.read_text() if path.exists() else ""
    found = re.search(rf"^  {re.escape(family)}:\n\s*# fitted on (\d+) runs", text, re.M)
    return int(found.group(1)) if found else 0
