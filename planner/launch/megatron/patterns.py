"""bash's pathname patterns as :mod:`fnmatch` patterns, for ``${NAME%PATTERN}``, ``%%``, ``#`` and
``##`` (bash(1) "Parameter Expansion", "Pattern Matching"): the pattern word with its quoted parts
matching themselves, and the value with the matching suffix or prefix removed."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable


def glob_pattern(word: str, expand: Callable[[str], str]) -> str:
    """The :mod:`fnmatch` pattern of the PATTERN of ``${NAME%PATTERN}``: it is expanded (bash(1)
    "Parameter Expansion": "The word is expanded to produce a pattern"), and a quoted part, or a
    character after a backslash, matches itself (bash(1) "Pattern Matching": "The special pattern
    characters must be quoted if they are to be matched literally"), while an unquoted part, an
    unquoted expansion's value too, stays a pattern (``P='*'; ${S#a$P}`` removes ``a`` and the rest).
    ``expand`` expands and unquotes one word (:func:`.expansion.expand_word` on the script's state)."""
    out: list[str] = []
    i, n = 0, len(word)
    while i < n:
        ch = word[i]
        if ch == "\\" and i + 1 < n:
            out.append(literal(word[i + 1]))
            i += 2
        elif ch == "'":
            j = word.find("'", i + 1)
            j = n if j < 0 else j
            out.append(literal(word[i + 1 : j]))
            i = j + 1
        elif ch == '"':
            j = i + 1
            while j < n and word[j] != '"':
                j += 2 if word[j] == "\\" else 1
            out.append(literal(expand(word[i : j + 1])))
            i = j + 1
        else:
            j = i
            while j < n and word[j] not in "\\'\"":
                j += 1
            out.append(expand(word[i:j]))
            i = j
    return "".join(out)


def literal(text: str) -> str:
    """``text`` as an :mod:`fnmatch` pattern that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def removed(value: str, op: str, pattern: str) -> str:
    """``${NAME%PATTERN}`` (``%%``: the longest), ``${NAME#PATTERN}`` (``##``): NAME's value
    without the shortest (longest) suffix (prefix) PATTERN matches as a pathname pattern (bash(1)
    "Parameter Expansion", "Remove matching suffix/prefix pattern")."""
    cuts = range(len(value) + 1)
    if op.startswith("%"):
        ends = [k for k in cuts if fnmatch.fnmatchcase(value[k:], pattern)]
        return value[: (min(ends) if op == "%%" else max(ends))] if ends else value
    starts = [k for k in cuts if fnmatch.fnmatchcase(value[:k], pattern)]
    return value[(max(starts) if op == "##" else min(starts)) :] if starts else value
