"""torchtitan: capabilities at the pinned version (:mod:`.capabilities`), export (:mod:`.export`),
import (:mod:`.importer`)."""
