"""bash's integer arithmetic (bash(1) "ARITHMETIC EVALUATION"), parsed and evaluated as bash 5.2
evaluates it: "fixed-width integers with no check for overflow" (64-bit, wrapping), division
truncating toward zero, "a shell variable that is null or unset evaluates to 0" (whose value, when
it is not a number, is itself evaluated as an expression), and the operators by decreasing
precedence::

    id++ id--  ++id --id  - + ! ~  **  * / %  + -  << >>  <= >= < >  == !=  &  ^  |  &&  ||
    expr ? expr : expr  = *= /= %= += -= <<= >>= &= ^= |=  expr , expr

with ``&&``, ``||`` and ``?:`` leaving the side they do not need unevaluated. Constants are
decimal, ``0x``/``0X`` hexadecimal, ``0`` octal or ``BASE#DIGITS`` (base 2 to 64). ``++`` and
``--`` are increments only next to a variable (after one, or before optional blanks and one), as
bash's lexer reads them: ``--5`` is 5.

Pure: variables are read and written through the caller's callbacks (:func:`evaluate`), so the
module knows nothing of a script. What bash refuses (a syntax error, ``division by 0``, a negative
exponent, a digit too great for its base, a variable whose value refers back to itself) is
:class:`ArithmeticFailure`, with bash's own words; a value the caller cannot know is its
:class:`UnknownOperand`, an assignment it does not make :class:`NotFollowed`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MAX_DEPTH",
    "ArithmeticFailure",
    "Node",
    "NotFollowed",
    "UnknownOperand",
    "assigned",
    "evaluate",
    "parse",
]

_BITS = 64
_MIN = -(2 ** (_BITS - 1))
MAX_DEPTH = 64
"""How deep variable values may refer to other variables' expressions (bash stops at 1024 with
"expression recursion level exceeded"; a launch script goes one or two deep)."""


class ArithmeticFailure(Exception):
    """An expression bash refuses, in bash's words (``division by 0``, ``syntax error: operand
    expected``)."""


class UnknownOperand(Exception):
    """A variable whose value the caller cannot know (``name``): the expression's value cannot be
    known either."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class NotFollowed(Exception):
    """An assignment the caller does not make (an array element's, any under ``$(( ))``): the
    expression is not evaluated here."""


Read = Callable[[str, "str | None"], str]
"""The caller's reader: a variable's value by name and subscript text (None: the name alone), ""
for one unset or null; raises :class:`UnknownOperand` for one it cannot know."""
Write = Callable[[str, int], None]
"""The caller's writer: a variable set to a value (an assignment, ``++``, ``--``); raises
:class:`NotFollowed` for one it does not set."""


@dataclass(frozen=True, slots=True)
class Node:
    """One operation: ``op`` is ``num``, ``var``, a unary operator (``neg``, ``pos``, ``!``,
    ``~``), ``++``/``--`` with ``prefix``, a binary operator, ``?:`` or an assignment operator;
    ``value`` a constant or a variable's name; ``args`` the operands (a variable's subscript)."""

    op: str
    args: tuple[Node, ...] = ()
    value: int | str | None = None
    prefix: bool = False
    sub: str | None = None
    """A variable's subscript as written (``a[i+1]``: ``i+1``)."""


_ASSIGN_OPS = ("=", "*=", "/=", "%=", "+=", "-=", "<<=", ">>=", "&=", "^=", "|=")
_BINARY = (  # loosest first, below the ternary; ** is right-associative and handled apart
    ("||",),
    ("&&",),
    ("|",),
    ("^",),
    ("&",),
    ("==", "!="),
    ("<=", ">=", "<", ">"),
    ("<<", ">>"),
    ("+", "-"),
    ("*", "/", "%"),
)
_OPERATORS = sorted(
    {"**", "++", "--", "?", ":", ",", "(", ")", "!", "~", *_ASSIGN_OPS, *(o for g in _BINARY for o in g)},
    key=len,
    reverse=True,
)
_NAME = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"[0-9][0-9A-Za-z@_#]*")
_BLANK = " \t\n"


def _wrap(v: int) -> int:
    """``v`` as a 64-bit two's-complement integer (bash does not check for overflow)."""
    return (v - _MIN) % 2**_BITS + _MIN


def _constant(word: str) -> int:
    """A constant's value (bash(1): ``0x`` hexadecimal, leading ``0`` octal, ``BASE#N``)."""
    base, digits = 10, word
    if "#" in word:
        head, _, digits = word.partition("#")
        if not head.isdigit() or not 2 <= int(head) <= 64 or "#" in digits:
            raise ArithmeticFailure(f"{word}: invalid arithmetic base (error token is {word!r})")
        base = int(head)
    elif word[:2] in ("0x", "0X"):
        base, digits = 16, word[2:]
    elif word.startswith("0"):
        base = 8
    value = 0
    for ch in digits:
        if ch.isdigit():
            d = int(ch)
        elif ch.islower():
            d = ord(ch) - ord("a") + 10
        elif ch.isupper():
            d = ord(ch) - ord("A") + (36 if base > 36 else 10)
        else:
            d = {"@": 62, "_": 63}[ch]
        if d >= base:
            raise ArithmeticFailure(f"{word}: value too great for base (error token is {word!r})")
        value = value * base + d
    return _wrap(value)


def _tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` tokens: ``num``, ``var`` (a name, with its ``[subscript]``), or the
    operator; ``++``/``--`` not next to a variable are two signs, as bash reads them."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        if text[i] in _BLANK:
            i += 1
            continue
        m = _NAME.match(text, i)
        if m:
            end = m.end()
            if text.startswith("[", end):
                close = _closing_bracket(text, end)
                if close is None:
                    raise ArithmeticFailure(f"{text}: bad array subscript (error token is {text[end:]!r})")
                end = close + 1
            out.append(("var", text[i:end]))
            i = end
            continue
        m = _NUMBER.match(text, i)
        if m:
            out.append(("num", m.group(0)))
            i = m.end()
            continue
        op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
        if op is None:
            raise ArithmeticFailure(_syntax(text, text[i:]))
        if op in ("++", "--"):
            after = text[i + 2 :].lstrip(_BLANK)
            if not (out and out[-1][0] == "var") and not _NAME.match(after):
                op = op[0]  # not an increment: a sign, and the next character read again
        out.append((op, op))
        i += len(op)
    return out


def _closing_bracket(text: str, start: int) -> int | None:
    depth = 0
    for k in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[k], 0)
        if depth == 0:
            return k
    return None


def _syntax(text: str, rest: str, why: str = "operand expected") -> str:
    """bash's words for a syntax error in ``text`` at ``rest`` (empty: at its end)."""
    return f"{text}: syntax error: {why}" + (f" (error token is {rest!r})" if rest else "")


class _Parser:
    """Recursive descent over bash's grammar (expr.c: expcomma down to exp0)."""

    def __init__(self, text: str):
        self.text, self.toks, self.at = text, _tokens(text), 0

    def peek(self) -> str | None:
        return self.toks[self.at][0] if self.at < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        if self.at >= len(self.toks):
            raise ArithmeticFailure(_syntax(self.text, ""))
        self.at += 1
        return self.toks[self.at - 1]

    def fail(self, why: str = "operand expected") -> ArithmeticFailure:
        return ArithmeticFailure(_syntax(self.text, " ".join(t for _, t in self.toks[self.at :]), why))

    def comma(self) -> Node:
        node = self.assignment()
        while self.peek() == ",":
            self.take()
            node = Node(",", (node, self.assignment()))
        return node

    def assignment(self) -> Node:
        left = self.ternary()
        if self.peek() in _ASSIGN_OPS:
            op = self.take()[0]
            if left.op != "var":
                raise ArithmeticFailure(f"{self.text}: attempted assignment to non-variable")
            return Node(op, (left, self.assignment()))
        return left

    def ternary(self) -> Node:
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take()
        if self.peek() == ":":
            raise self.fail("expression expected")
        then = self.comma()
        if self.peek() != ":":
            raise self.fail("`:' expected for conditional expression")
        self.take()
        return Node("?:", (test, then, self.ternary()))

    def binary(self, level: int) -> Node:
        if level == len(_BINARY):
            return self.power()
        node = self.binary(level + 1)
        while self.peek() in _BINARY[level]:
            op = self.take()[0]
            node = Node(op, (node, self.binary(level + 1)))
        return node

    def power(self) -> Node:
        base = self.unary()
        if self.peek() == "**":
            self.take()
            return Node("**", (base, self.power()))
        return base

    def unary(self) -> Node:
        op = self.peek()
        if op in ("!", "~", "-", "+"):
            self.take()
            return Node({"-": "neg", "+": "pos"}.get(op, op), (self.unary(),))
        if op in ("++", "--"):
            self.take()
            target = self.operand()
            if target.op != "var":
                raise self.fail("identifier expected after pre-increment or pre-decrement")
            return Node(op, (target,), prefix=True)
        return self.operand()

    def operand(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            return Node("num", value=_constant(text))
        if kind == "(":
            node = self.comma()
            if self.peek() != ")":
                raise self.fail("missing `)'")
            self.take()
            return node
        if kind != "var":
            self.at -= 1
            raise self.fail()
        name, _, sub = text.partition("[")
        node = Node("var", value=name, sub=sub[:-1] if sub else None)
        if self.peek() in ("++", "--"):
            return Node(self.take()[0], (node,))
        return node


def parse(text: str) -> Node | None:
    """The expression ``text`` parsed (None when it is empty or blank: its value is 0)."""
    parser = _Parser(text)
    if not parser.toks:
        return None
    try:
        node = parser.comma()
    except RecursionError:
        raise ArithmeticFailure(f"{text}: expression recursion level exceeded") from None
    if parser.peek() is not None:
        raise parser.fail()
    return node


def assigned(node: Node | None) -> list[str]:
    """The names an expression may assign (an assignment's, ``++``'s or ``--``'s), in order."""
    if node is None:
        return []
    out = [node.args[0].value] if node.op in (*_ASSIGN_OPS, "++", "--") else []
    for arg in node.args:
        out += [n for n in assigned(arg) if n not in out]
    return out


def evaluate(node: Node | None, read: Read, write: Write | None, depth: int = 0) -> int:
    """The value of a parsed expression; ``read`` gives a variable's value, ``write`` sets one
    (None: an assignment is :class:`NotFollowed`)."""
    if node is None:
        return 0
    try:
        return _Evaluator(read, write, depth).value(node)
    except RecursionError:
        raise ArithmeticFailure("expression recursion level exceeded") from None


class _Evaluator:
    """Evaluation; the side ``&&``, ``||`` or ``?:`` does not take is evaluated as bash evaluates
    it (``noeval``): every variable 0, nothing assigned, a division by 0 divided by 1, and only a
    negative exponent still refused."""

    def __init__(self, read: Read, write: Write | None, depth: int):
        self.read, self.write, self.depth = read, write, depth
        self.noeval = 0

    def skipped(self, node: Node) -> int:
        self.noeval += 1
        try:
            self.value(node)
        finally:
            self.noeval -= 1
        return 0

    def variable(self, node: Node) -> int:
        """A variable's value: a number, or its text evaluated as an expression."""
        if self.noeval:
            return 0
        text = self.read(node.value, node.sub).strip(_BLANK)
        if re.fullmatch(r"-?[0-9]+", text) and not text.lstrip("-").startswith("0"):
            return _wrap(int(text))
        if self.depth >= MAX_DEPTH:
            raise ArithmeticFailure(f"{text}: expression recursion level exceeded (error token is {text!r})")
        return evaluate(parse(text), self.read, self.write, self.depth + 1)

    def store(self, target: Node, value: int) -> int:
        if self.noeval:
            return value
        if self.write is None or target.sub is not None:
            raise NotFollowed(target.value)
        self.write(target.value, value)
        return value

    def value(self, node: Node) -> int:
        op, args = node.op, node.args
        if op == "num":
            return node.value
        if op == "var":
            return self.variable(node)
        if op in ("++", "--"):
            old = self.variable(args[0])
            new = _wrap(old + (1 if op == "++" else -1))
            self.store(args[0], new)
            return new if node.prefix else old
        if op in _ASSIGN_OPS:
            old = self.variable(args[0]) if op != "=" else 0  # read before the right side, as bash does
            right = self.value(args[1])
            return self.store(args[0], right if op == "=" else self.binary(op[:-1], old, right))
        if op == "?:":
            taken, other = (args[1], args[2]) if self.value(args[0]) else (args[2], args[1])
            value = self.value(taken)
            self.skipped(other)
            return value
        if op in ("&&", "||"):
            left = bool(self.value(args[0]))
            if left == (op == "||"):
                return int(left) + self.skipped(args[1])
            return int(bool(self.value(args[1])))
        if op == ",":
            self.value(args[0])
            return self.value(args[1])
        if len(args) == 1:
            v = self.value(args[0])
            return {"neg": lambda: _wrap(-v), "pos": lambda: v, "!": lambda: int(v == 0), "~": lambda: ~v}[
                op
            ]()
        return self.binary(op, self.value(args[0]), self.value(args[1]))

    def binary(self, op: str, a: int, b: int) -> int:
        if op in ("/", "%") and b == 0 and self.noeval:
            b = 1  # bash's expr.c: a division not evaluated is by 1
        return _binary(op, a, b)


def _binary(op: str, a: int, b: int) -> int:
    """A binary operator on two 64-bit values, as bash's C code computes it."""
    if op in ("/", "%"):
        if b == 0:
            raise ArithmeticFailure("division by 0")
        if a == _MIN and b == -1:
            return _MIN if op == "/" else 0  # bash's own answer where C's would trap
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q if op == "/" else a - b * q
    if op == "**":
        if b < 0:
            raise ArithmeticFailure("exponent less than 0")
        return _wrap(pow(a, b, 2**_BITS))
    if op in ("<<", ">>"):
        count = b & (_BITS - 1)  # the shift count as x86-64 takes it
        return _wrap(a << count) if op == "<<" else a >> count
    table = {
        "+": lambda: _wrap(a + b),
        "-": lambda: _wrap(a - b),
        "*": lambda: _wrap(a * b),
        "<": lambda: int(a < b),
        ">": lambda: int(a > b),
        "<=": lambda: int(a <= b),
        ">=": lambda: int(a >= b),
        "==": lambda: int(a == b),
        "!=": lambda: int(a != b),
        "&": lambda: a & b,
        "^": lambda: a ^ b,
        "|": lambda: a | b,
    }
    return table[op]()
