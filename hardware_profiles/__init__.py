"""Hardware catalogue: GPU types (``gpus/*.yaml``) and node templates (``clusters/*.yaml``).

Every number carries a citation in its file. The files are read by :mod:`planner.inputs.models`.
"""
