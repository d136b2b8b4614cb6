"""Layer 3, the hardware the cost model prices: GPU and cluster files (:mod:`.hardware`), software
profiles of framework releases (:mod:`.software`), and calibrated profiles from ``planner
calibrate`` (:mod:`.calibrated`, :mod:`.params`) applied to a cluster's efficiencies. Imports
inputs and cost_models."""
