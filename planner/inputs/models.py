"""Strict loading of models from YAML, JSON, HF config.json and presets, and the document reader
(:class:`Reader`) that planner.profiles.hardware and planner.inputs.jobs read GPUs, clusters and jobs with.

Every error names the file, the key path and the allowed values, and is a
:class:`~planner.inputs.errors.SpecError` (exit code 1, no traceback). Unknown keys are rejected.
Units are converted once here (GiB, GB/s, TFLOP/s, microseconds -> SI).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.inputs.documents import did_you_mean, preset_files, preset_or_path, read_document
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.model_spec import ModelSpec
from planner.inputs.model_yaml import model_from_mapping
from planner.inputs.validation import path_exists, short_path

# ---------------------------------------------------------------------------------------------
# Models


def _hf_config_file(path: Path) -> Path:
    """A directory given as a model: its ``config.json``, or that of its one Hugging Face snapshot
    (the hub cache layout ``models--org--name/snapshots/<revision>/config.json``)."""
    if (path / "config.json").is_file():
        return path / "config.json"
    snapshots = path / "snapshots" if (path / "snapshots").is_dir() else path
    found = sorted(p.parent for p in snapshots.glob("*/config.json"))
    if len(found) == 1:
        return found[0] / "config.json"
    if not found:
        raise SpecError(
            f"{short_path(str(path))}: a directory without config.json (nor one snapshot holding it)"
        )
    raise SpecError(
        f"{short_path(str(path))}: {len(found)} snapshots hold a config.json "
        f"({', '.join(p.name for p in found[:5])}); pass one snapshot directory"
    )


def model_preset_names(include_graph: bool = True) -> list[str]:
    """Names of the built-in model presets, sorted; ``include_graph=False`` leaves out graph models."""
    files = preset_files("planner.presets", "models")
    if include_graph:
        return sorted(files)
    return sorted(
        n for n, p in files.items() if (yaml.safe_load(p.read_text()) or {}).get("kind") != "graph_model"
    )


def load_model(name_or_path: str) -> ModelSpec:
    """A model from a preset name, a planner YAML/JSON file, or a HF ``config.json``."""
    presets = preset_files("planner.presets", "models")
    name_or_path = preset_or_path(name_or_path, presets)
    path = Path(name_or_path)
    if name_or_path in presets:
        data = yaml.safe_load(presets[name_or_path].read_text())
        if data.get("kind") == "graph_model":
            raise SpecError(
                f"preset {name_or_path} is a graph model (a DAG of blocks): plan it with planner search; "
                "estimate, timeline and bubbles take its plan file with --plan"
            )
        return model_from_mapping(data, f"preset {name_or_path}")
    if not path_exists(path):
        hint = did_you_mean(name_or_path, presets)
        raise SpecError(
            f"unknown model '{name_or_path}'{hint}: not a preset and no such file; presets: {', '.join(sorted(presets))}"
        )
    if path.is_dir():
        path = _hf_config_file(path)
    data = read_document(path)
    if "model_type" in data and "schema_version" not in data:
        return load_hf_config(path)
    return model_from_mapping(data, str(path))
