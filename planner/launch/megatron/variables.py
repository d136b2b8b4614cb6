"""Shell variables as bash keeps them, for a launch script read without running it: names bound
to scalars, indexed arrays (lists) or associative arrays (dicts), namerefs, and the order bash
lists an associative array's keys in. Pure data work; :mod:`.expansion` and :mod:`.shell` use it.

Bash stores an associative array in a hash table (bash(1) "Arrays": "associative arrays use
arbitrary strings"; the order of ``${!NAME[@]}`` is the table's): bash 5's ``hashlib.c`` hashes a
key with 32-bit FNV-1 (``hash_string``), puts it in bucket ``hash & (buckets - 1)`` of
``ASSOC_HASH_BUCKETS`` = 1024 buckets, each new key at the head of its bucket's chain, and
``assoc_to_word_list`` walks the buckets in order. :func:`bash_order` restates that walk; the table
grows (and reorders) at 2048 keys, which :data:`MAX_ASSOC_KEYS` keeps a script below."""

from __future__ import annotations

import re

REF_KEY = "@ref:"
"""The prefix of the scalars that hold namerefs (``declare -n REF=TARGET``: ``REF_KEY + REF`` holds
``TARGET``; not a name an assignment can set)."""

MAX_REF_HOPS = 8
"""How many namerefs one name may go through (bash warns of a circular reference and stops)."""

_BUCKETS = 1024
"""``ASSOC_HASH_BUCKETS`` (bash 5 ``assoc.h``)."""

MAX_ASSOC_KEYS = 2 * _BUCKETS
"""Keys one associative array may hold here: bash's table grows at ``nbuckets *
HASH_REHASH_FACTOR`` (2) entries, past which the order is no longer :func:`bash_order`'s."""

_SUBSCRIPTED = re.compile(r"^([A-Za-z_]\w*)\[(.*)\]$", re.S)
"""``NAME[SUBSCRIPT]`` as ``[[ -v ]]`` and ``unset`` take it."""


def resolve(name: str, scalars: dict[str, str]) -> str:
    """The variable ``name`` stands for, through its namerefs (bash(1) "PARAMETERS": "all references,
    assignments, and attribute modifications to name ... are actually performed on the variable
    specified by the nameref variable's value")."""
    for _ in range(MAX_REF_HOPS):
        target = scalars.get(REF_KEY + name)
        if target is None:
            return name
        name = target
    return name


def _fnv1(key: str) -> int:
    """bash's ``hash_string``: 32-bit FNV-1 over the key's bytes, each a (signed on x86-64) ``char``."""
    h = 2166136261
    for byte in key.encode("utf-8"):
        h = (h * 16777619) & 0xFFFFFFFF
        h ^= (byte - 256 if byte > 127 else byte) & 0xFFFFFFFF
    return h


def bash_order(keys: list[str]) -> list[str]:
    """The keys of an associative array in the order bash 5 lists them (``${!NAME[@]}``), given in
    the order they were first assigned: by bucket, and within a bucket the latest key first."""
    buckets: dict[int, list[str]] = {}
    for key in keys:
        buckets.setdefault(_fnv1(key) & (_BUCKETS - 1), []).insert(0, key)
    return [key for b in sorted(buckets) for key in buckets[b]]


def elements(value: list[str] | dict[str, str]) -> list[str]:
    """An array's values as ``${NAME[@]}`` gives them."""
    if isinstance(value, dict):
        return [value[k] for k in bash_order(list(value))]
    return list(value)


def indices(value: list[str] | dict[str, str]) -> list[str]:
    """An array's keys (associative) or indices as ``${!NAME[@]}`` gives them."""
    if isinstance(value, dict):
        return bash_order(list(value))
    return [str(k) for k in range(len(value))]


def subscripted(word: str) -> tuple[str, str] | None:
    """``NAME[SUBSCRIPT]`` split into its name and subscript; None for any other word."""
    m = _SUBSCRIPTED.match(word)
    return (m.group(1), m.group(2)) if m else None
