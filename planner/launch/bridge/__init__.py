"""Megatron-Bridge export and import: a ``ConfigContainer`` override YAML for a recipe, and a
launch script that applies it (docs/megatron.md, "Megatron-Bridge")."""
