"""planner: find the fastest way to train a large transformer on a GPU cluster.

Import the library surface from :mod:`planner.api`; this module has no side effects.
"""

__version__ = "0.1.0"
