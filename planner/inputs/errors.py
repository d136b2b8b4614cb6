"""One exception hierarchy, mapped to exit codes at the CLI edge (STYLE.md lesson 10).

Exit codes (documented in README.md):
  0  success (also: a configuration that does not fit, reported as ``fits: false``)
  1  spec or user error: bad file, unknown name, invalid configuration, failed check
  2  usage error: bad command-line flags (typer/click's own code)
  3  no feasible plan: the search found nothing that fits
"""

from __future__ import annotations


class PlannerError(Exception):
    """Base class: a message for the user, no traceback. Exit code 1."""

    exit_code = 1


class SpecError(PlannerError):
    """An input file or preset is malformed, unknown or inconsistent."""


class ConfigError(PlannerError):
    """A parallel configuration violates a constraint (names the constraint and the numbers)."""


class UsageError(PlannerError):
    """Flags that contradict each other. Exit code 2."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """No plan satisfies the constraints and fits in memory. Exit code 3."""

    exit_code = 3
