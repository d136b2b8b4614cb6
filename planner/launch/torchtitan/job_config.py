"""The job-config TOML of torchtitan 0.2.2 as a document: its sections and keys (``JobConfig``'s
dataclasses, ``torchtitan/config/job_config.py``), command-line overrides applied as
``ConfigManager`` does (CLI overrides > TOML), the line of every key for annotations, and typed
access whose errors name the key path. What the keys mean for planning is :mod:`.importer`'s.
"""

from __future__ import annotations

import re

from planner.frameworks.torchtitan_models import VERSION
from planner.inputs.errors import SpecError

try:  # Python >= 3.11; on 3.10 reading a TOML is an error naming the cause (no extra dependency)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - exercised on Python 3.10 only
    tomllib = None

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "model": (
        "name",
        "flavor",
        "hf_assets_path",
        "tokenizer_path",
        "converters",
        "print_after_conversion",
    ),
    "training": (
        "dataset",
        "dataset_path",
        "local_batch_size",
        "global_batch_size",
        "seq_len",
        "max_norm",
        "steps",
        "enable_cpu_offload",
        "dtype",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "gc_freq",
        "gc_debug",
        "dataloader",
    ),
    "parallelism": (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "expert_parallel_comm_backend",
    ),
    "compile": ("enable", "components", "backend"),
    "activation_checkpoint": (
        "mode",
        "selective_ac_option",
        "per_op_sac_force_recompute_mm_shapes_by_fqns",
        "early_stop",
        "memory_budget",
        "visualize_memory_budget_pareto",
        "preserve_rng_state",
        "determinism_check",
        "debug",
    ),
}
"""Keys of the sections planner interprets (every field of those 0.2.2 dataclasses)."""

SECTIONS = (
    "job",
    "profiling",
    "metrics",
    "model",
    "optimizer",
    "lr_scheduler",
    "training",
    "parallelism",
    "checkpoint",
    "activation_checkpoint",
    "compile",
    "quantize",
    "comm",
    "memory_estimation",
    "fault_tolerance",
    "experimental",
    "validation",
    "debug",
)
"""Top-level sections of ``JobConfig`` (0.2.2)."""


def apply_overrides(doc: dict, overrides: list[str] | tuple[str, ...], where: str) -> None:
    """Apply ``--section.key value`` / ``--section.key=value`` overrides in place (typed as TOML
    values where they parse, else strings; commas split ``converters``)."""
    i, items = 0, list(overrides)
    while i < len(items):
        tok = items[i]
        if not tok.startswith("--") or "." not in tok:
            raise SpecError(f"{where}: override {tok!r}: expected --section.key value")
        if "=" in tok:
            key, raw = tok[2:].split("=", 1)
        elif i + 1 < len(items):
            key, raw = tok[2:], items[i + 1]
            i += 1
        else:
            raise SpecError(f"{where}: override {tok!r} has no value")
        i += 1
        *path, last = key.replace("-", "_").split(".")
        node = doc
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError(f"{where}: override {tok!r}: {part!r} is not a section")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.split(",") if last == "converters" else raw
        node[last] = value


def key_lines(text: str) -> dict:
    """``section.key`` -> line number of every assignment in a TOML text."""
    out, section = {}, ""
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        head = re.match(r"^\[([^\]]+)\]", s)
        if head:
            section = head.group(1).strip()
            continue
        m = re.match(r"^([A-Za-z0-9_\-]+)\s*=", s)
        if m:
            out[f"{section}.{m.group(1)}"] = n
    return out


class Document:
    """Typed access to a TOML document with key paths in errors."""

    def __init__(self, doc: dict, where: str) -> None:
        self.doc, self.where = doc, where
        for name, value in doc.items():
            if name not in SECTIONS:
                raise SpecError(f"{where}: key {name!r}: not a torchtitan {VERSION} section")
            if not isinstance(value, dict):
                raise SpecError(f"{where}: key {name!r}: expected a section")
        for name, keys in SECTION_KEYS.items():
            for key in doc.get(name, {}):
                if key not in keys:
                    raise SpecError(f"{where}: key '{name}.{key}': not a torchtitan {VERSION} key")

    def get(self, section: str, key: str, kind: type | tuple, default):
        value = self.doc.get(section, {}).get(key, default)
        bad = isinstance(value, bool) and kind is int
        if value is not None and (bad or not isinstance(value, kind)):
            raise SpecError(
                f"{self.where}: key '{section}.{key}': expected {getattr(kind, '__name__', kind)}"
            )
        return value

    def positive(self, section: str, key: str, default: int, allow_minus_one: bool = False) -> int:
        value = self.get(section, key, int, default)
        if value < 1 and not (allow_minus_one and value == -1):
            raise SpecError(f"{self.where}: key '{section}.{key}': must be >= 1, got {value}")
        return value


def read_document(text: str, where: str, overrides: list[str] | tuple[str, ...]) -> Document:
    """The TOML text with the command-line overrides applied, its sections and keys checked."""
    if tomllib is None:
        raise SpecError(f"{where}: reading torchtitan TOML files needs Python >= 3.11 (tomllib)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    apply_overrides(doc, overrides, where)
    return Document(doc, where)
