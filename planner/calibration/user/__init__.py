"""``planner calibrate``: fit the cost model to a user's own cluster from the user's own runs.

* :mod:`.sources` - measured runs (runs YAML, Megatron-LM and torchtitan logs with their launch
  files) and ``nccl-tests`` measurements, each with the file and line it came from;
* :mod:`.fit` - bounded, prior-regularised least squares, uncertainties, identifiability,
  before/after and leave-one-run-out errors.

The fitted parameters and the profile file are in :mod:`planner.profiles.params` and
:mod:`planner.profiles.calibrated`. See docs/calibrate.md.
"""
