"""The values a recipe's static evaluation holds besides Python's own (:mod:`.recipe_eval`,
:mod:`.recipe_dicts`): an :class:`Unknown` naming where a value could not be determined, and a
:class:`Section` of the ``ConfigContainer`` being built."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Unknown:
    """A value not statically determinable: where, and the expression."""

    line: int
    text: str


@dataclass
class Section:
    """A section built in the recipe: its fields (with the line each was set on)."""

    name: str
    fields: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)
    preset: str | None = None
    taint: Unknown | None = None
    """A call the section was passed to, which may have written any field not set after it."""
    after_taint: set = field(default_factory=set)
