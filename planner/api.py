"""The library surface: load a problem, estimate a configuration, search, re-estimate a plan file.

The CLI (:mod:`planner.cli`) is a thin skin over these functions and over the JSON views of
:mod:`planner.outputs.views`.
"""

from __future__ import annotations

from planner.plans.problem import (
    Problem,
    estimate_config,
    estimate_plan_file,
    load_problem,
    plan_inputs,
    run_search,
)

__all__ = ["Problem", "estimate_config", "estimate_plan_file", "load_problem", "plan_inputs", "run_search"]
