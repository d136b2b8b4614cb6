"""Megatron-LM launches: the flag table (:mod:`.flags`), export (:mod:`.export`), bash as a launch
script writes it (:mod:`.shell`), import (:mod:`.importer`) and Megatron's own argument rules
(:mod:`.rules`)."""
