"""Resilience planning: what a GPU or node failure costs a plan, and what to do about it.

* :mod:`.failures`: where failed GPUs sit in the rank grid, what each replica keeps.
* :mod:`.strategies`: drop-replica, replan, nonuniform tensor parallelism, hot spares (``whatif``).
* :mod:`.goodput`: failure rates, checkpoint cost, Young/Daly interval, useful fraction (formulas).
* :mod:`.spares`: a plan's expected goodput over a run, best hot-spare count, failure-aware ranking.
* :mod:`.views`: JSON-ready views.

See docs/resilience.md.
"""
