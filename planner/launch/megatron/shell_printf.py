"""``printf -v NAME FORMAT [ARGUMENTS...]`` of a launch script (bash(1) "SHELL BUILTIN COMMANDS",
``printf``): the value bash assigns, for the run names, checkpoint paths and padded numbers scripts
build with it (``printf -v RUN "llama-%s-tp%02d" "$SIZE" "$TP"``).

The format is the C ``printf(3)`` one bash implements: ``%s`` and ``%b`` (a string; ``%b`` with its
backslash escapes), ``%d`` / ``%i`` / ``%u`` / ``%o`` / ``%x`` / ``%X`` / ``%c`` (integers: decimal,
``0x`` hex or ``0`` octal arguments, a leading ``'`` or ``"`` giving the next character's code),
``%e`` / ``%E`` / ``%f`` / ``%F`` / ``%g`` / ``%G`` (floating point), ``%%``; flags ``-+ #0``, a width
and a precision, ``*`` for either taken from the arguments. The format's backslash escapes are
read. Arguments left over reuse the format; one missing is the empty string (0 for a number).
``%q``, ``%(...)T`` and other conversions are refused (:class:`PrintfError`), as is an argument
that is not a number where one is needed (bash prints an error and assigns a partial value).
"""

from __future__ import annotations

import re
import shlex

from planner.inputs.errors import SpecError
from planner.launch.megatron.assignments import assign
from planner.launch.megatron.expansion import UNRESOLVED, UNRESOLVED_RE
from planner.launch.megatron.shell_state import NAME, Script

__all__ = ["PrintfError", "printf_assign", "printf_maybe", "printf_value"]


class PrintfError(ValueError):
    """A format or argument whose value this reader does not give; its message says which."""


_SPEC = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?([a-zA-Z%]|\(.*?\)T)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v", '"': '"'}
_INTEGER = set("diouxXc")
_FLOAT = set("eEfFgG")


def _unescape(text: str, octal_zero: bool) -> str:
    """``text`` with bash printf's backslash escapes read (``\\n``, ``\\t``, ``\\\\``, ``\\xHH``,
    octal ``\\NNN``; in a ``%b`` argument ``\\0NNN``); an unknown escape stays as written."""
    out, k = [], 0
    while k < len(text):
        c = text[k]
        if c != "\\" or k + 1 == len(text):
            out.append(c)
            k += 1
            continue
        n = text[k + 1]
        if n in _ESCAPES:
            out.append(_ESCAPES[n])
            k += 2
        elif n == "x" and re.match(r"[0-9a-fA-F]", text[k + 2 : k + 3]):
            m = re.match(r"[0-9a-fA-F]{1,2}", text[k + 2 :])
            out.append(chr(int(m.group(0), 16)))
            k += 2 + len(m.group(0))
        elif n in "01234567":
            start = k + 2 if (octal_zero and n == "0") else k + 1
            m = re.match(r"[0-7]{1,3}", text[start:])
            out.append(chr(int(m.group(0), 8) & 0xFF) if m else "\0")
            k = start + (len(m.group(0)) if m else 0)
        else:
            out.append(text[k : k + 2])
            k += 2
    return "".join(out)


def _integer(arg: str) -> int:
    """An integer argument as bash's printf reads it (strtoimax with base 0, or a quote and the
    character whose code it is)."""
    if arg[:1] in ("'", '"'):
        return ord(arg[1]) if len(arg) > 1 else 0
    text = arg.strip()
    if not text:
        return 0
    m = re.fullmatch(r"([-+]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not m:
        raise PrintfError(f"{arg!r}: invalid number (bash's printf)")
    sign, digits = m.groups()
    value = (
        int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8) if digits[0] == "0" else int(digits)
    )
    return -value if sign == "-" else value


def _float(arg: str) -> float:
    if arg[:1] in ("'", '"'):
        return float(ord(arg[1])) if len(arg) > 1 else 0.0
    if not arg.strip():
        return 0.0
    try:
        return float(int(arg, 0)) if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", arg.strip()) else float(arg)
    except ValueError:
        raise PrintfError(f"{arg!r}: invalid number (bash's printf)") from None


def _convert(flags: str, width: str, precision: str | None, conv: str, arg: str | None) -> str:
    """One conversion of ``arg`` (None: the arguments ran out)."""
    spec = "%" + flags + width + ("." + precision if precision is not None else "")
    if conv in ("s", "b"):
        text = "" if arg is None else (_unescape(arg, True) if conv == "b" else arg)
        return (spec + "s") % text
    if conv in _INTEGER:
        if conv == "c":
            return (spec + "s") % (arg[:1] if arg else "")
        value = 0 if arg is None else _integer(arg)
        if conv in "uoxX" and value < 0:
            value += 1 << 64  # unsigned conversions of a negative intmax_t: its two's complement
        return (spec + {"i": "d", "u": "d"}.get(conv, conv)) % value
    if conv in _FLOAT:
        return (spec + conv) % (0.0 if arg is None else _float(arg))
    raise PrintfError(f"printf's %{conv} conversion is not read by planner")


def printf_value(fmt: str, args: list[str]) -> str:
    """What ``printf -v NAME fmt args...`` assigns to NAME (module docstring); PrintfError for what
    it does not read."""
    fmt = _unescape(fmt, False) if "\\" in fmt else fmt
    pieces = _SPEC.split(fmt)
    # split gives text, then (flags, width, precision, conversion) per specification
    texts, specs = pieces[0::5], [tuple(pieces[k : k + 4]) for k in range(1, len(pieces), 5)]
    consumes = any(sp[3] != "%" for sp in specs)
    out, rest, first = [], list(args), True
    while first or (rest and consumes):
        first = False
        for k, text in enumerate(texts):
            out.append(text)
            if k == len(specs):
                break
            flags, width, precision, conv = specs[k]
            if conv == "%":
                out.append("%")
                continue
            if width == "*":
                width = str(_integer(rest.pop(0))) if rest else ""
                if width.startswith("-"):
                    flags, width = flags + "-", width[1:]
            if precision == "*":
                precision = str(max(_integer(rest.pop(0)), 0)) if rest else "0"
            out.append(_convert(flags, width or "", precision, conv, rest.pop(0) if rest else None))
    return "".join(out)


def printf_assign(args: list[str], number: int, s: Script) -> bool:
    """``printf -v NAME FORMAT ARGS...`` (``args`` after ``printf``) on the script's state: NAME gets
    :func:`printf_value`; where an argument is a value planner cannot know and the format needs it
    as a number, NAME is that value's marker. A format planner does not read is an error naming the
    line. ``printf`` without ``-v`` only prints: True, nothing assigned."""
    if len(args) < 2 or args[0] != "-v":
        return True
    if len(args) < 3:
        raise SpecError(f"line {number}: printf -v {args[1]} has no format (bash: usage error)")
    name, fmt, rest = args[1], args[2], args[3:]
    if not NAME.fullmatch(name):
        raise SpecError(f"line {number}: printf -v {name!r}: not a valid identifier (bash's words)")
    try:
        value = printf_value(fmt, rest)
    except PrintfError as exc:
        marker = next((m.group(0) for a in rest if (m := UNRESOLVED_RE.search(a))), None)
        if marker is None:
            raise SpecError(f"line {number}: printf -v {name}: {exc}") from None
        value = marker
    assign(f"{name}={shlex.quote(value)}", number, s)  # as NAME=VALUE: namerefs, exports, allexport
    return True


def printf_maybe(args: list[str], number: int, s: Script, unknown: str) -> None:
    """``printf -v NAME ...`` in a branch that cannot be known: NAME is a marker naming it."""
    if len(args) >= 2 and args[0] == "-v" and NAME.fullmatch(args[1]):
        assign(f"{args[1]}={shlex.quote(UNRESOLVED.format(unknown))}", number, s)
