"""The vocabulary of a launch that names its tokenizer but not ``--vocab-size``: the cited table of
common tokenizers (hardware_profiles/tokenizers.yaml) and Megatron-LM's padding of a tokenizer's
size (megatron/training/tokenizer/tokenizer.py, ``_vocab_size_with_padding``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError

TABLE = Path(__file__).resolve().parents[3] / "hardware_profiles" / "tokenizers.yaml"


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, int], dict[str, int]]:
    """(vocabulary by Hub id, vocabulary by Megatron ``--tokenizer-type``) from :data:`TABLE`."""
    try:
        doc = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{TABLE}: cannot be read: {exc}") from None
    by_id: dict[str, int] = {}
    by_type: dict[str, int] = {}
    for entry in doc.get("tokenizers") or []:
        size = entry["vocab_size"]
        for hf_id in entry.get("hf_ids") or []:
            by_id[hf_id] = size
        for kind in entry.get("megatron_types") or []:
            by_type[kind] = size
    return by_id, by_type


def known_vocabulary(tokenizer_type: str | None, tokenizer_model: str | None) -> tuple[int, str] | None:
    """(vocabulary size before padding, what matched) of a launch's tokenizer flags, or None when
    the table does not know it. ``--tokenizer-model`` matches a Hub id, or a local path whose last
    component is an id's repository name; a ``--tokenizer-type`` the table lists (GPT2BPETokenizer,
    whose vocabulary file is GPT-2's) fixes the vocabulary by itself. A launch naming no tokenizer
    is not guessed at."""
    by_id, by_type = _table()
    if tokenizer_model:
        model = tokenizer_model.rstrip("/")
        if model in by_id:
            return by_id[model], f"--tokenizer-model {tokenizer_model}"
        tail = model.rsplit("/", 1)[-1]
        names = {hf_id.rsplit("/", 1)[-1]: size for hf_id, size in sorted(by_id.items())}
        if tail in names:
            return names[tail], f"--tokenizer-model {tokenizer_model}"
    if tokenizer_type in by_type:
        return by_type[tokenizer_type], f"--tokenizer-type {tokenizer_type}"
    return None


def padded_vocabulary(size: int, divisible_by: int, tp: int) -> int:
    """``size`` padded as Megatron-LM's ``_vocab_size_with_padding`` pads it: up to a multiple of
    ``--make-vocab-size-divisible-by`` times the tensor-parallel size."""
    multiple = divisible_by * tp
    return -(-size // multiple) * multiple
