"""Layer 7, the model held against measurements: the published runs as cases (:mod:`.cases`,
:mod:`.run_records`), fitting the shipped GPU and software profiles to them (:mod:`.fitting`,
:mod:`.descent`, :mod:`.kernel_measurements`), held-out validation (:mod:`.releases`,
:mod:`.ranking`), memory validation (:mod:`.memory_validation`), the plausibility check against the
best published MFU (:mod:`.plausibility`), and ``planner calibrate`` on a user's own runs
(:mod:`.user`). See docs/calibration.md and docs/calibrate.md."""
