"""Training frameworks as part of the problem: what each runs at a pinned version
(``<name>/capabilities.py``), how a plan is exported to it (``<name>/export.py``), and how an
existing launch of it is imported (``<name>/importer.py``). This module is the registry."""

from __future__ import annotations

from planner.errors import UsageError
from planner.frameworks.base import ANY, Capabilities, Framework
from planner.frameworks.megatron.capabilities import MEGATRON
from planner.frameworks.torchtitan.capabilities import TORCHTITAN

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (MEGATRON, TORCHTITAN, ANY)}
"""Every framework by its command-line name, in the order help lists them."""

DEFAULT_FRAMEWORK = "megatron"


def get_framework(name: str) -> Framework:
    """The framework called ``name`` (case-insensitive); a usage error listing the names otherwise."""
    key = name.strip().lower()
    if key not in FRAMEWORKS:
        raise UsageError(f"--framework {name!r}: allowed values are {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[key]


__all__ = ["ANY", "Capabilities", "DEFAULT_FRAMEWORK", "FRAMEWORKS", "Framework", "get_framework"]
