"""Rewrite the ``efficiency:`` block of the GPU YAML files of one family (used by calibrate.py)."""

from __future__ import annotations

import re
from pathlib import Path

GPU_DIR = Path(__file__).resolve().parent.parent / "hardware_profiles" / "gpus"


def family_files(family: str) -> list[Path]:
    pattern = re.compile(rf"^\s*# family: {re.escape(family)}$", re.M)
    return [p for p in sorted(GPU_DIR.glob("*.yaml")) if pattern.search(p.read_text())]


def write_block(family: str, values: dict[str, float], comment: str) -> None:
    lines = ["efficiency:", f"  # family: {family}"] + [f"  # {c}" for c in comment.splitlines()]
    lines += [f"  {k}: {v:.6g}" for k, v in values.items()]
    block = "\n".join(lines) + "\n"
    for path in family_files(family):
        text = path.read_text()
        text = re.sub(r"efficiency:.*?(?=^source:)", block, text, flags=re.S | re.M)
        path.write_text(text)
