"""``planner calibrate``: fit the cost model to a user's own cluster from the user's own runs.

* :mod:`.sources` - measured runs (runs YAML, Megatron-LM and torchtitan logs with their launch
  files) and ``nccl-tests`` measurements, each with the file and line it came from;
* :mod:`.params` - the fitted parameters, their priors (the shipped profiles), bounds, and how a
  set of values is applied to a cluster;
* :mod:`.fit` - bounded, prior-regularised least squares, uncertainties, identifiability,
  before/after and leave-one-run-out errors;
* :mod:`.profile` - the profile file (``kind: profile``): written, strictly read, applied;
* :mod:`.ranking` - how well predictions rank the layouts of the calibration set's layout groups,
  and the ceiling measurement noise puts on that.

See docs/calibrate.md.
"""
