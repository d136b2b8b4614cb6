"""Layer 6, talking to the frameworks: a plan exported as a launch (Megatron-LM arguments and
torchrun / Slurm scripts, torchtitan TOML), existing launches imported back (:mod:`.megatron`,
:mod:`.torchtitan`), and ``planner check`` (:mod:`.check`), which validates a plan or a launch and
says how far it is from the best plan. What each framework can run is in :mod:`planner.frameworks`."""
