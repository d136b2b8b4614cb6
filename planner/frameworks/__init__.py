"""Layer 3, what each training framework runs at a pinned version (:mod:`.megatron`,
:mod:`.torchtitan`, the shared :mod:`.base`): the constraints the search and ``planner check``
apply. Exporting a plan to a framework and importing its launches is :mod:`planner.launch`. This
module is the registry."""

from __future__ import annotations

from planner.frameworks.base import ANY, Capabilities, Framework
from planner.frameworks.megatron import MEGATRON
from planner.frameworks.torchtitan import TORCHTITAN
from planner.inputs.errors import UsageError

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
