"""Per-layer 0/1 patterns in Megatron-LM's list grammar (``--moe-layer-freq "([0]*3+[1]*58)"``).

Megatron's ``moe_freq_type`` (megatron/training/arguments.py) evaluates such a string with Python's
``eval``; this module reads the same grammar without evaluating code, and writes a pattern back in
its shortest periodic run-length form, so that the export and plan files stay short:

    pattern  := term ('+' term)*
    term     := atom ('*' integer)*
    atom     := '[' integer (',' integer)* ']' | '(' pattern ')'

>>> parse_pattern("([0]*3+[1]*5)")
(0, 0, 0, 1, 1, 1, 1, 1)
>>> pattern_text((0, 1) * 3)
'([0]+[1])*3'
>>> pattern_text((0, 0, 0) + (1,) * 5)
'([0]*3+[1]*5)'
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\s*(\d+|[\[\](),+*])")
MAX_LAYERS = 10_000
"""Longest pattern read (``num_layers``' bound in planner.inputs.validation.LIMITS)."""


class PatternError(ValueError):
    """The text is not a pattern of the grammar above."""


def parse_pattern(text: str) -> tuple[int, ...]:
    """The 0/1 tuple a Megatron list-pattern string denotes; :class:`PatternError` otherwise."""
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise PatternError(f"unexpected character {text[pos]!r} at position {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    out, i = _pattern(tokens, 0)
    if i != len(tokens):
        raise PatternError(f"unexpected {tokens[i]!r} after a complete pattern")
    if any(v not in (0, 1) for v in out):
        raise PatternError("entries must be 0 (dense) or 1 (MoE)")
    return tuple(out)


def _pattern(tokens: list[str], i: int) -> tuple[list[int], int]:
    out, i = _term(tokens, i)
    while i < len(tokens) and tokens[i] == "+":
        more, i = _term(tokens, i + 1)
        out = out + more
        _check_size(out)
    return out, i


def _term(tokens: list[str], i: int) -> tuple[list[int], int]:
    out, i = _atom(tokens, i)
    while i < len(tokens) and tokens[i] == "*":
        if i + 1 >= len(tokens) or not tokens[i + 1].isdigit():
            raise PatternError("'*' must be followed by an integer")
        k = int(tokens[i + 1])
        if len(out) * k > MAX_LAYERS:
            raise PatternError(f"pattern longer than {MAX_LAYERS} layers")
        out, i = out * k, i + 2
    return out, i


def _atom(tokens: list[str], i: int) -> tuple[list[int], int]:
    if i >= len(tokens):
        raise PatternError("pattern ends early")
    if tokens[i] == "(":
        out, i = _pattern(tokens, i + 1)
        if i >= len(tokens) or tokens[i] != ")":
            raise PatternError("missing ')'")
        return out, i + 1
    if tokens[i] == "[":
        out: list[int] = []
        i += 1
        while True:
            if i >= len(tokens) or not tokens[i].isdigit():
                raise PatternError("a list holds integers separated by ','")
            out.append(int(tokens[i]))
            i += 1
            if i < len(tokens) and tokens[i] == ",":
                i += 1
                continue
            if i < len(tokens) and tokens[i] == "]":
                return out, i + 1
            raise PatternError("missing ']'")
    raise PatternError(f"unexpected {tokens[i]!r}")


def _check_size(out: list[int]) -> None:
    if len(out) > MAX_LAYERS:
        raise PatternError(f"pattern longer than {MAX_LAYERS} layers")


def _runs(values: tuple[int, ...]) -> str:
    parts, i = [], 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        n = j - i
        parts.append(f"[{values[i]}]" + (f"*{n}" if n > 1 else ""))
        i = j
    return "+".join(parts)


def pattern_text(pattern: tuple[int, ...]) -> str:
    """The shortest periodic run-length spelling of ``pattern`` (Megatron's grammar)."""
    n = len(pattern)
    for period in range(1, n + 1):
        if n % period == 0 and pattern == pattern[:period] * (n // period):
            body = f"({_runs(pattern[:period])})"
            return body if period == n else f"{body}*{n // period}"
    return "()"
