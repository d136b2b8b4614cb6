"""The text of a bash script as its statements: lines joined over backslash continuations and
multi-line quotes, comments dropped, a line split into the commands of a list (bash(1) "Quoting",
"Comments", "Lists"). Pure string work; :mod:`.shell` reads the statements."""

from __future__ import annotations

import re

from planner.inputs.errors import SpecError


def logical_lines(text: str) -> list[tuple[str, int]]:
    """Lines joined over backslash continuations, comments dropped (outside quotes), with the
    number of their first line; a quoted string runs to its closing quote and an array assignment
    ``NAME=(`` to its closing ``)``, over several lines."""
    out: list[tuple[str, int]] = []
    buf, start, depth = "", 1, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw)
        if not buf:
            start = number
        if line.rstrip().endswith("\\") and not line.rstrip().endswith("\\\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if _open_quote(buf):
            buf += "\n"
            continue
        depth = _paren_depth(buf)
        if depth > 0 and re.match(
            r"^\s*(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?\w+\+?=\(", buf
        ):
            buf += "\n"
            continue
        out.append((buf, start))
        buf = ""
    if buf and _open_quote(buf):
        raise SpecError(f"line {start}: a quote opened here is never closed (bash: unexpected end of file)")
    if buf:
        out.append((buf, start))
    return out


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted string (bash(1) "Quoting": the string, newlines and all,
    runs on to its closing quote; a backslash escapes the next character outside single quotes)."""
    quote, i = None, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        i += 1
    return quote is not None


def strip_comment(line: str) -> str:
    """The line without a ``#`` comment (a # that starts a word outside quotes)."""
    quote, prev = None, " "
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t(;":
            return line[:i]
        prev = ch
    return line


def _paren_depth(text: str) -> int:
    depth, quote = 0, None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
    return depth


def statements(line: str) -> list[str]:
    """A line split at its unquoted ``;`` (outside ``$( )`` and ``[[ ]]``; ``;;`` kept), as bash
    separates the commands of a list (bash(1) "Lists")."""
    out, buf, quote, depth, i = [], "", None, 0, 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and quote != "'":
            buf += line[i : i + 2]
            i += 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)  # a case pattern's ")" opens nothing
        elif ch == ";" and depth == 0 and not line.startswith(";", i + 1) and not buf.endswith(";"):
            out.append(buf.strip())
            buf, i = "", i + 1
            continue
        buf += ch
        i += 1
    out.append(buf.strip())
    return [x for x in out if x]
