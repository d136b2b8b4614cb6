"""torchtitan launches: export (:mod:`.export`, a job TOML and a torchrun script) and import
(:mod:`.importer`)."""
