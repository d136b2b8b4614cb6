"""The conditions of ``if``, ``&&`` and ``||`` in a launch script (bash(1) "CONDITIONAL
EXPRESSIONS", test(1)), evaluated on what the script determines; anything else is unknown, as a
marker naming the line (``if:NAME:LINE``)."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex

from planner.launch.megatron.expansion import expand, unresolved_in
from planner.launch.megatron.paths import PATH_TESTS, path_test
from planner.launch.megatron.shell_arithmetic import arithmetic_maybe, is_arithmetic, protect, run_arithmetic
from planner.launch.megatron.shell_state import NAME, Script
from planner.launch.megatron.variables import resolve, subscripted

_TESTS = {
    "=": lambda a, b: a == b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_INT_TESTS = {
    "-eq": "__eq__",
    "-ne": "__ne__",
    "-lt": "__lt__",
    "-le": "__le__",
    "-gt": "__gt__",
    "-ge": "__ge__",
}


def condition_text(text: str) -> str:
    """An ``if`` / ``elif`` condition without the ``then`` that ends it (``[ -n "$X" ]; then``)."""
    return re.sub(r"\s*;?\s*then\s*$", "", text.strip())


def condition(text: str, number: int, s: Script) -> bool | str:
    """The value of an ``if`` condition (bash(1) "CONDITIONAL EXPRESSIONS", test(1)): ``[ A OP B ]``
        or ``[[ A OP B ]]`` with ``=``, ``==``, ``!=``, ``-eq``, ``-ne``, ``-lt``, ``-le``, ``-gt``,
        ``-ge``, ``A =~ PATTERN`` (when PATTERN holds no character special in a regular expression, which
    makes it a substring test whether it was quoted or not), ``-z A``, ``-n A``, ``-v NAME`` / ``-v NAME[KEY]`` (:func:`_is_set`), the file tests of
        :data:`.paths.PATH_TESTS` on a file in the script's directory (:func:`.paths.path_test`), ``A``
        alone, each optionally negated by ``!``; ``true``/``false``; tests joined by ``&&`` and ``||``
        (bash(1) "Lists": equal precedence, left to right; inside ``[[ ]]`` ``&&`` binds tighter).
        Anything else, or an operand needing a variable nothing sets: ``if:NAME:LINE`` (``NAME`` ``?``
        when no variable is to blame); an unknown operand that cannot change the result (``false &&
        ...``) does not make the list unknown."""
    text = condition_text(text)
    if "((" in text:
        text = protect(text)
    text = with_pattern_marks(text)
    try:
        words = shlex.split(expand(text, s.scalars, s.arrays), posix=True)
    except ValueError:
        return f"if:?:{number}"
    return _list(words, number, s, inner=False)


GLOB = "@@glob@@"
"""Put before the right-hand side of ``==`` / ``=`` / ``!=`` in ``[[ ]]`` when it was written
unquoted (:func:`mark_patterns`): bash matches it as a pattern (bash(1) "[[ expression ]]": "the
string to the right of the operator is considered a pattern ... Any part of the pattern may be
quoted to force the quoted portion to be matched as a string")."""
_PATTERN_RHS = re.compile(r"==|!=|\s=\s")
_EXTGLOB = re.compile(r"[?*+@!]\(")
"""An extended pattern (bash(1) "Pattern Matching", extglob): not matched here."""
_QUOTED = re.compile(r"""^(?:'[^']*'|"(?:[^"\\]|\\.)*")$""")


def with_pattern_marks(text: str) -> str:
    """``text`` (a condition or a command of a list, before expansion) with :func:`mark_patterns`
    applied where it holds a ``[[ ]]`` comparison."""
    return mark_patterns(text) if "[[" in text and _PATTERN_RHS.search(text) else text


def mark_patterns(text: str) -> str:
    """``text`` with each unquoted right-hand side of ``==`` / ``=`` / ``!=`` inside ``[[ ]]``
    marked :data:`GLOB` (a pattern), a wholly quoted one left as it is (a string); one partly
    quoted (``*"70"*``) is marked partly quoted, and :func:`_test` does not decide it."""
    try:
        lex = shlex.shlex(text, posix=False)
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return text
    depth, out = 0, []
    for k, tok in enumerate(tokens):
        depth += {"[[": 1, "]]": -1}.get(tok, 0)
        if depth > 0 and k > 0 and tokens[k - 1] in ("==", "=", "!=") and tok != "]]":
            if not any(q in tok for q in "'\"\\"):
                tok = GLOB + tok
            elif not _QUOTED.match(tok):
                tok = GLOB + "@@partly@@" + tok
        out.append(tok)
    return " ".join(out)


def _list(words: list[str], number: int, s: Script, inner: bool) -> bool | str:
    """Tests joined by ``&&`` / ``||`` (outside ``[[ ]]`` when not ``inner``), in three values: an
    unknown (``if:...``) side decides nothing unless the other side decides alone."""
    groups: list[list[str]] = [[]]
    ops: list[str] = []
    depth = 0
    for w in words:
        depth += {"[[": 1, "]]": -1}.get(w, 0) if not inner else 0
        if w in ("&&", "||") and depth == 0:
            ops.append(w)
            groups.append([])
        else:
            groups[-1].append(w)
    if not ops:
        return _test(words, number, s) if not inner else _test(["[[", *words, "]]"], number, s)
    if inner and "||" in ops and "&&" in ops:
        k = ops.index("||")  # && binds tighter inside [[ ]]: split at the first ||
        left, right = _join(groups[: k + 1], ops[:k]), _join(groups[k + 1 :], ops[k + 1 :])
        return _or(_list(left, number, s, inner), _list(right, number, s, inner))
    one = (lambda g: _test(["[[", *g, "]]"], number, s)) if inner else (lambda g: _test(g, number, s))
    value = one(groups[0])
    for op, group in zip(ops, groups[1:]):
        if value is (op == "||"):
            continue  # decided: bash does not run the test after it
        if isinstance(value, str) and not inner and is_arithmetic(group):
            arithmetic_maybe(group, number, s, value)  # it may run or not: what it assigns is unknown
            continue
        value = _and(value, one(group)) if op == "&&" else _or(value, one(group))
    return value


def _join(groups: list[list[str]], ops: list[str]) -> list[str]:
    out = list(groups[0])
    for op, group in zip(ops, groups[1:]):
        out += [op, *group]
    return out


def _and(a: bool | str, b: bool | str) -> bool | str:
    if a is False or b is False:
        return False
    return b if a is True else a


def _or(a: bool | str, b: bool | str) -> bool | str:
    if a is True or b is True:
        return True
    return b if a is False else a


def _test(words: list[str], number: int, s: Script) -> bool | str:
    """One test command (expanded words)."""
    if words[:1] == ["!"]:
        value = _test(words[1:], number, s)
        return (not value) if isinstance(value, bool) else value
    if is_arithmetic(words):
        return run_arithmetic(words, number, s)
    for w in words:
        name = unresolved_in(w)
        if name is not None:
            blamed = name if NAME.fullmatch(name) else "?"
            return f"if:{blamed}:{number}"
    if words in (["true"], [":"], ["false"]):
        return words != ["false"]
    bracket = words[0] if words else ""
    if len(words) >= 2 and (words[0], words[-1]) in (("[", "]"), ("[[", "]]")):
        words = words[1:-1]
    else:
        return f"if:?:{number}"
    if bracket == "[[" and any(w in ("&&", "||") for w in words):
        return _list(words, number, s, inner=True)
    negate = bool(words) and words[0] == "!"
    words = words[1:] if negate else words
    if len(words) == 3 and words[1] in _TESTS and words[2].startswith(GLOB):
        pattern = words[2][len(GLOB) :]
        if (
            bracket != "[["
            or pattern.startswith("@@partly@@")
            or "\\" in pattern
            or "[^" in pattern  # bash's negated class; fnmatch reads ^ literally
            or _EXTGLOB.search(pattern)
        ):
            return f"if:?:{number}"  # partly quoted, escaped or extended: not matched here
        value = fnmatch.fnmatchcase(words[0], pattern) == (words[1] != "!=")
    elif len(words) == 3 and words[1] in _TESTS:
        value = _TESTS[words[1]](words[0], words[2])
    elif len(words) == 3 and words[1] == "=~" and bracket == "[[":
        if re.search(r"[\\^$.|?*+()\[\]{}]", words[2]):
            return f"if:?:{number}"  # a regular expression, not matched here
        value = words[2] in words[0]  # no special character: quoted or not, a substring match
    elif len(words) == 3 and words[1] in _INT_TESTS:
        try:
            a, b = int(words[0]), int(words[2])
        except ValueError:
            return f"if:?:{number}"
        value = getattr(a, _INT_TESTS[words[1]])(b)
    elif len(words) == 2 and words[0] in ("-z", "-n"):
        value = (words[1] == "") == (words[0] == "-z")
    elif len(words) == 2 and words[0] == "-v":
        known = _is_set(words[1], number, s)
        if isinstance(known, str):
            return known
        value = known
    elif len(words) == 2 and words[0] in PATH_TESTS:
        pwd = s.scalars.get("PWD")
        known = path_test(words[0], words[1], pwd if pwd and unresolved_in(pwd) is None else None, s.root)
        if known is None:
            s.assumed.add(f"if:?:{number}")  # a stop guarded by it is not taken (shell_exit.maybe_stop)
            return f"if:?:{number}"  # a file outside the script's directory: on the cluster, not here
        value = known
        if not known and not words[1].startswith("/") and pwd and os.path.realpath(pwd) == s.root:
            s.missing.append(words[1])  # not in the directory planner assumes the script runs from
    elif len(words) == 1:
        value = words[0] != ""
    elif len(words) == 0:
        value = False
    else:
        return f"if:?:{number}"
    return value != negate


def _is_set(word: str, number: int, s: Script) -> bool | str:
    """``-v NAME`` / ``-v NAME[KEY]`` (bash(1) "CONDITIONAL EXPRESSIONS": "True if the shell variable
    varname is set (has been assigned a value)"; an array name alone tests its element 0, a
    nameref its target). Determined for the script's own arrays and variables, and for one it
    unset; a name it never sets may be in the environment it starts with: unknown."""
    parts = subscripted(word)
    name, sub = parts if parts else (word, None)
    if name.isdigit():
        return int(name) <= int(s.scalars.get("#", "0")) and int(name) > 0
    if not NAME.fullmatch(name):
        return f"if:?:{number}"
    name = resolve(name, s.scalars)
    value = s.arrays.get(name)
    if value is None and name in s.scalars:
        value = [s.scalars[name]]
    if value is None:
        return False if name in s.env and s.env[name] is None else f"if:{name}:{number}"
    if sub in ("@", "*"):
        return len(value) > 0
    if isinstance(value, dict):
        return (sub if sub is not None else "0") in value
    index = "0" if sub is None else (sub if re.fullmatch(r"-?\d+", sub.strip()) else None)
    if index is None:
        return f"if:?:{number}"
    k = int(index) + (len(value) if int(index) < 0 else 0)
    return 0 <= k < len(value)


def command_status(command: list[str], number: int, s: Script) -> bool | str:
    """Whether a command (expanded words) succeeds, when it is a test planner evaluates;
    ``if:NAME:LINE`` (unknown) otherwise."""
    if command and command[0] == "test":
        command = ["[", *command[1:], "]"]
    if command and command[0] in ("[", "[[", "true", "false", ":"):
        return condition(" ".join(shlex.quote(w) for w in command), number, s)
    return f"if:?:{number}"
