"""The conditions of ``if``, ``&&`` and ``||`` in a launch script (bash(1) "CONDITIONAL
EXPRESSIONS", test(1)), evaluated on what the script determines; anything else is unknown, as a
marker naming the line (``if:NAME:LINE``)."""

from __future__ import annotations

import re
import shlex

from planner.launch.megatron.expansion import expand, unresolved_in
from planner.launch.megatron.paths import PATH_TESTS, path_test
from planner.launch.megatron.shell_state import NAME, Script

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


def condition(text: str, number: int, s: Script) -> bool | str:
    """The value of an ``if`` condition (bash(1) "CONDITIONAL EXPRESSIONS", test(1)): ``[ A OP B ]``
    or ``[[ A OP B ]]`` with ``=``, ``==``, ``!=``, ``-eq``, ``-ne``, ``-lt``, ``-le``, ``-gt``,
    ``-ge``, ``-z A``, ``-n A``, the file tests of :data:`.paths.PATH_TESTS` on a file in the
    script's directory (:func:`.paths.path_test`), ``A`` alone, each optionally negated by ``!``;
    ``true``/``false``.
    Anything else, or an operand needing a variable nothing sets: ``if:NAME:LINE`` (``NAME`` ``?``
    when no variable is to blame)."""
    text = re.sub(r"\s*;?\s*then\s*$", "", text.strip())
    try:
        words = shlex.split(expand(text, s.scalars, s.arrays), posix=True)
    except ValueError:
        return f"if:?:{number}"
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
    negate = bool(words) and words[0] == "!"
    words = words[1:] if negate else words
    if len(words) == 3 and words[1] in _TESTS:
        if bracket == "[[" and re.search(r"[*?\[]", words[2]):
            return f"if:?:{number}"  # a pattern match, not compared here
        value = _TESTS[words[1]](words[0], words[2])
    elif len(words) == 3 and words[1] in _INT_TESTS:
        try:
            a, b = int(words[0]), int(words[2])
        except ValueError:
            return f"if:?:{number}"
        value = getattr(a, _INT_TESTS[words[1]])(b)
    elif len(words) == 2 and words[0] in ("-z", "-n"):
        value = (words[1] == "") == (words[0] == "-z")
    elif len(words) == 2 and words[0] in PATH_TESTS:
        pwd = s.scalars.get("PWD")
        known = path_test(words[0], words[1], pwd if pwd and unresolved_in(pwd) is None else None, s.root)
        if known is None:
            return f"if:?:{number}"  # a file outside the script's directory: on the cluster, not here
        value = known
    elif len(words) == 1:
        value = words[0] != ""
    elif len(words) == 0:
        value = False
    else:
        return f"if:?:{number}"
    return value != negate


def command_status(command: list[str], number: int, s: Script) -> bool | str:
    """Whether a command (expanded words) succeeds, when it is a test planner evaluates;
    ``if:NAME:LINE`` (unknown) otherwise."""
    if command and command[0] == "test":
        command = ["[", *command[1:], "]"]
    if command and command[0] in ("[", "[[", "true", "false", ":"):
        return condition(" ".join(shlex.quote(w) for w in command), number, s)
    return f"if:?:{number}"
