"""The text of a bash script as its statements: lines joined over backslash continuations and
multi-line quotes, comments dropped, a line split into the commands of a list (bash(1) "Quoting",
"Comments", "Lists"). Pure string work; :mod:`.shell` reads the statements."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from typing import NamedTuple

from planner.inputs.errors import SpecError

SEPARATORS = {"|", "||", "&&", ";", "&", "|&"}
"""Words that end a simple command (bash(1) "Lists")."""
REDIRECT = re.compile(r"^(?:\d*|&)(?:>>|>&|>\||<&|<<<|<>|>|<)")
"""A redirection word (bash(1) "Redirection": ``[n]<``, ``[n]>``, ``[n]>>``, ``[n]>|``, ``[n]<>``,
``[n]>&``, ``[n]<&``, ``&>``, ``&>>``, ``<<<``), the operator alone or with its target. Only its
unquoted form is one (:func:`is_redirect`)."""


class Quoted(str):
    """A word that looks like an operator (``>foo``, ``&&``) but is not one: its operator
    characters were quoted (``">foo"``, ``\\&&``) or came from an expansion (``$R``). bash(1)
    "DEFINITIONS": an operator is "a control operator or a redirection operator" recognised on the
    unquoted text, before expansion and quote removal, so this word is an argument."""

    __slots__ = ()


def is_separator(word: str) -> bool:
    """Whether ``word`` ends a simple command (an unquoted :data:`SEPARATORS` word)."""
    return word in SEPARATORS and not isinstance(word, Quoted)


NOT_LAUNCHERS = frozenset(
    ("echo", "printf", "cat", "ls", "mkdir", "touch", "cp", "mv", "rm", "ln", "chmod", "test", "[", "[[")
)
"""Commands that name a file without running it: a ``.py`` word among their arguments
(``echo "Error: pretrain_gpt.py not found"``, ``[ -f pretrain_gpt.py ]``, the check the
Megatron-LM examples make before their launch) is not a training command."""


def training_scripts(words: list[str]) -> list[int]:
    """The indices of the ``*.py`` words among a script's command words (commands separated by
    :func:`is_separator` words) that a command may run: not the arguments of a command of
    :data:`NOT_LAUNCHERS`."""
    out: list[int] = []
    head: str | None = None
    for k, w in enumerate(words):
        if is_separator(w):
            head = None
            continue
        first, head = head is None, w if head is None else head
        if w.endswith(".py") and (first or head not in NOT_LAUNCHERS):
            out.append(k)
    return out


def is_redirect(word: str) -> bool:
    """Whether ``word`` is a redirection (an unquoted :data:`REDIRECT` word)."""
    return REDIRECT.match(word) is not None and not isinstance(word, Quoted)


def redirections(words: list[str]) -> set[int]:
    """The indices of a command's redirections among its words: each operator word, and the word
    after an operator written alone (its target). bash(1) "Redirection": they are performed and
    removed from the command wherever they stand, so the words around them are its arguments."""
    out: set[int] = set()
    for k, w in enumerate(words):
        if k in out or not is_redirect(w):
            continue
        out.add(k)
        if REDIRECT.match(w).end() == len(w) and k + 1 < len(words):
            out.add(k + 1)
    return out


def split_words(text: str) -> list[str]:
    """``text`` (expanded, re-quoted by :func:`.expansion.expand`) split into words as
    :func:`shlex.split` splits it, a word that looks like an operator but was quoted made
    :class:`Quoted`; ValueError on an unclosed quote."""
    words = shlex.split(text, posix=True)
    raws = _raw_words(text)
    if len(raws) != len(words):  # not expected: keep shlex's words as they are
        return words
    return [
        Quoted(w) if _operator(w) and not _operator(raw) else w for w, raw in zip(words, raws, strict=True)
    ]


def _operator(word: str) -> bool:
    return word in SEPARATORS or REDIRECT.match(word) is not None


def _raw_words(text: str) -> list[str]:
    """The words of ``text`` before quote removal, split where :func:`shlex.split` splits it
    (unquoted spaces, tabs and newlines)."""
    out, buf, quote, i, inword = [], "", None, 0, False
    while i < len(text):
        ch = text[i]
        if quote is None and ch in " \t\r\n":
            if inword:
                out.append(buf)
            buf, inword, i = "", False, i + 1
            continue
        inword = True
        if ch == "\\" and quote != "'":
            buf, i = buf + text[i : i + 2], i + 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        buf, i = buf + ch, i + 1
    if inword:
        out.append(buf)
    return out


class Heredoc(NamedTuple):
    """A here-document (bash(1) "Here Documents"): its lines, and whether its delimiter was quoted
    (then no line is expanded)."""

    body: str
    quoted: bool


class Logical(NamedTuple):
    """A logical line: its text, the number of its first line and the here-document it opens."""

    text: str
    number: int
    heredoc: Heredoc | None = None


_HEREDOC = re.compile(r"(?<![<\d])<<(-?)\s*(['\"]?)([A-Za-z_][\w.-]*)\2(?!<)")
"""``<<WORD``, ``<<-WORD``, ``<<'WORD'``, ``<<"WORD"`` (not the here-string ``<<<``)."""


def _heredoc(line: str) -> tuple[bool, str, bool] | None:
    """(strip leading tabs, delimiter, quoted) of the here-document a line opens outside quotes."""
    for m in _HEREDOC.finditer(line):
        before = line[: m.start()]
        in_arithmetic = before.count("((") > before.count("))")  # $((x<<y)), ((x<<y)) shift
        if (
            not _open_quote(before)
            and not in_arithmetic
            and "<<<" not in line[max(0, m.start() - 1) : m.start() + 3]
        ):
            return m.group(1) == "-", m.group(3), bool(m.group(2))
    return None


def logical_lines(text: str) -> list[Logical]:
    """Lines joined over backslash continuations, comments dropped (outside quotes), with the
    number of their first line; a quoted string runs to its closing quote and an array assignment
    ``NAME=(`` to its closing ``)``, over several lines. A line that opens a here-document holds its
    body, the lines up to the delimiter (to the end of the text, as bash reads one left open)."""
    out: list[Logical] = []
    raws = text.splitlines()
    buf, start, depth, i = "", 1, 0, 0
    while i < len(raws):
        number, raw = i + 1, raws[i]
        i += 1
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
        if _CONTINUED.search(buf) and i < len(raws) and _heredoc(buf) is None:
            buf += " "  # bash(1) "Lists": a newline after && / || / | continues the list
            continue
        depth = _paren_depth(buf)
        if depth > 0 and re.match(
            r"^\s*(?:(?:export|declare|readonly|local|typeset)\s+(?:-\w+\s+)*)?\w+\+?=\(", buf
        ):
            buf += "\n"
            continue
        heredoc, opened = None, _heredoc(buf)
        if opened is not None:
            strip_tabs, delimiter, quoted = opened
            body: list[str] = []
            while i < len(raws):
                body_line = raws[i].lstrip("\t") if strip_tabs else raws[i]
                i += 1
                if body_line == delimiter:
                    break
                body.append(body_line)
            heredoc = Heredoc("".join(b + "\n" for b in body), quoted)
        out.append(Logical(buf, start, heredoc))
        buf = ""
    if buf and _open_quote(buf):
        raise SpecError(f"line {start}: a quote opened here is never closed (bash: unexpected end of file)")
    if buf:
        out.append(Logical(buf, start))
    return out


_CONTINUED = re.compile(r"(?<![\\|])(?:&&|\|\||\|)\s*$")
"""A line ending in an unquoted control operator that needs a command after it (``&&``, ``||``,
``|``; not an escaped ``\\|``): bash reads the list on into the next line."""


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted string (bash(1) "Quoting": the string, newlines and all,
    runs on to its closing quote; a backslash escapes the next character outside single quotes)."""
    quote = None
    for _, _, quote in _scan(text):
        pass
    return quote is not None


def unquoted(text: str) -> Iterator[tuple[int, str]]:
    """The characters of ``text`` outside quotes (the quotes themselves and backslash escapes
    left out), with their indices."""
    for i, ch, quote in _scan(text):
        if quote is None and ch not in "'\"":
            yield i, ch


def _scan(text: str) -> Iterator[tuple[int, str, str | None]]:
    """Each character of ``text`` but a backslash escape (bash(1) "Quoting": a backslash outside
    single quotes escapes the next character, both skipped), with its index and the quote open
    after it (None outside quotes)."""
    quote, i = None, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        yield i, ch, quote
        i += 1


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


def _top_level(text: str) -> Iterator[int]:
    """The indices of ``text``'s characters outside quotes, backticks, ``( )`` / ``$( )`` and
    ``[[ ]]``: where a list operator can separate commands (bash(1) "QUOTING", "Lists"). A case
    pattern's ``)`` opens nothing."""
    quote, depth, tests, i = None, 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif text.startswith("[[", i) and (i == 0 or text[i - 1] in " \t;&|("):
            tests, i = tests + 1, i + 2
            continue
        elif text.startswith("]]", i) and tests:
            tests, i = tests - 1, i + 2
            continue
        elif depth == 0 and not tests:
            yield i
        i += 1


def _split(text: str, separator: Callable[[str, int], int]) -> list[str]:
    """``text`` cut at each top-level (:func:`_top_level`) separator, where ``separator(text, i)``
    is its length (0: none at ``i``): the pieces with the separators between them."""
    out: list[str] = []
    start = 0
    for i in _top_level(text):
        if i < start:
            continue  # inside the separator just cut
        n = separator(text, i)
        if n:
            out += [text[start:i], text[i : i + n]]
            start = i + n
    out.append(text[start:])
    return out


def statements(line: str) -> list[str]:
    """A line split at its unquoted ``;`` (outside ``$( )``, backticks and ``[[ ]]``; ``;;`` kept),
    as bash separates the commands of a list (bash(1) "Lists")."""

    def semicolon(text: str, i: int) -> int:
        single = text[i] == ";" and not text.startswith(";", i + 1) and not (i and text[i - 1] == ";")
        return 1 if single else 0

    return [x.strip() for x in _split(line, semicolon)[::2] if x.strip()]


def and_or_segments(text: str) -> list[str]:
    """``text`` (one statement) split at its unquoted ``&&`` and ``||`` (outside ``$( )``,
    backticks and ``[[ ]]``), the operators kept between the pieces: ``["A", "&&", "B"]``. bash(1)
    "Lists" runs the commands of such a list one after the other, and expands each when it reaches
    it, so ``X=1 && Y=$X`` gives Y the new X."""
    return _split(text, lambda t, i: 2 if t.startswith(("&&", "||"), i) else 0)
