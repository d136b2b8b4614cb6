"""Expansion of the words of a Megatron launch script, bash(1) "Parameter Expansion", "Arrays",
"Arithmetic Expansion" and "Command Substitution" as far as planning needs: ``$NAME``,
``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``, ``${NAME:=default}``,
``"${NAME[@]}"`` / ``${NAME[*]}``, integer ``$(( ... ))`` over resolved names, word splitting of
unquoted expansions; a reference nothing defines becomes a marker naming it (:func:`unresolved_in`),
and a command substitution is never run, except the pure path commands of
:func:`.paths.path_command` and the ``$(yq ...)`` reads of :mod:`.yq`, whose output is worked out.
:mod:`.shell` reads the script's statements and calls these on each word."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from planner.inputs.errors import SpecError
from planner.inputs.validation import printable, read_text_capped
from planner.launch.megatron import yq
from planner.launch.megatron.arithmetic import ArithmeticFailure, NotFollowed, UnknownOperand, evaluate, parse
from planner.launch.megatron.paths import inside, joined, path_command
from planner.launch.megatron.patterns import glob_pattern, removed
from planner.launch.megatron.variables import elements, indices, resolve

UNRESOLVED = "@@unresolved:{}@@"

UNRESOLVED_RE = re.compile(r"@@unresolved:([^@]*)@@")

NOUNSET_KEY = "@nounset"
"""Among the scalars while ``set -u`` is in force (the line of the ``set``; not a name an
assignment can set): a reference to an unset variable raises :class:`Unbound`."""

BASH_SETS = frozenset(
    "BASH BASHOPTS BASHPID BASH_ALIASES BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_CMDS BASH_COMMAND "
    "BASH_LINENO BASH_SOURCE BASH_SUBSHELL BASH_VERSINFO BASH_VERSION DIRSTACK EPOCHREALTIME "
    "EPOCHSECONDS EUID GROUPS HISTCMD HOSTNAME HOSTTYPE IFS LINENO MACHTYPE OPTERR OPTIND OSTYPE "
    "PATH PPID PS4 PWD RANDOM SECONDS SHELL SHELLOPTS SHLVL SRANDOM TERM UID".split()
)
"""Variables bash itself sets in every script (bash(1) "Shell Variables"; what ``env -i bash -c
set`` lists under bash 5.2, and the dynamic ones): never unbound under ``set -u``, though their
values are not known here."""


LOGIN_SETS = frozenset({"HOME", "USER", "LOGNAME"})
"""Variables every login session and Slurm job has (login(1) sets HOME and LOGNAME, sshd and su
USER; sbatch(1) propagates the submitting environment): not unbound under ``set -u``."""

SLURM_KEY = "@slurm"
"""Among the scalars when the script is a Slurm batch script (it has ``#SBATCH`` lines): the
``SLURM_*`` variables sbatch(1) "OUTPUT ENVIRONMENT VARIABLES" sets in the job
(``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ``SLURM_NNODES``, ...) are not unbound under ``set -u``,
though their values are not known here."""


class Unbound(Exception):
    """``set -u`` (bash(1) "set": "Treat unset variables and parameters other than the special
    parameters '@' and '*' ... as an error when performing parameter expansion"; a non-interactive
    shell exits): the expansion of ``name``, which is unset. ``known``: certainly unset (a
    positional parameter past ``$#``, an element the script's array lacks), not one the environment
    may give."""

    def __init__(self, name: str, known: bool = False):
        super().__init__(name)
        self.name, self.known = name, known


class Required(Exception):
    """``${NAME:?word}`` / ``${NAME?word}`` on a NAME unset (``:?``: or empty): bash(1) "Parameter
    Expansion": "the expansion of word ... is written to the standard error and the shell, if it is
    not interactive, exits". ``known``: certainly so (a positional parameter, a value the script
    set empty), not a variable the environment may give."""

    def __init__(self, name: str, word: str, known: bool):
        super().__init__(name)
        self.name, self.word, self.known = name, word, known


def _required(op: str | None, value: str | None, name: str, word: str | None, known: bool) -> None:
    """:class:`Required` when ``op`` is ``:?`` and ``value`` unset or empty, or ``?`` and unset."""
    if (op == ":?" and not value) or (op == "?" and value is None):
        raise Required(name, word or "", known or value is not None)


def _unset(name: str, scalars: dict[str, str], known: bool = False) -> str:
    """The marker for an unset ``name``; under ``set -u`` (:data:`NOUNSET_KEY`) :class:`Unbound`."""
    if NOUNSET_KEY in scalars and not environment_sets(name, scalars):
        raise Unbound(name, known)
    return UNRESOLVED.format(name)


def environment_sets(name: str, scalars: dict[str, str]) -> bool:
    """Whether bash, the login or Slurm sets ``name`` in every run of the script."""
    return name in BASH_SETS or name in LOGIN_SETS or (SLURM_KEY in scalars and name.startswith("SLURM_"))


_FIELD = re.compile(r"(?:@@unresolved:[^@]*@@|\S)+")
"""A field of an unquoted expansion: a run of non-whitespace, an unresolved marker kept whole."""


def unresolved_in(word: str) -> str | None:
    """The variable a word needed but the script never set (None when resolved): a name, a
    command substitution or arithmetic as written (``$(scontrol ...)``), or ``if:NAME:LINE`` for
    a value an undeterminable ``if`` on LINE (depending on NAME; ``?`` when no variable) sets."""
    m = UNRESOLVED_RE.search(word)
    if not m:
        return None
    name = m.group(1)
    if name.startswith("$:"):
        try:
            return bytes.fromhex(name[2:]).decode("utf-8")
        except ValueError:  # a script that writes a marker-like word itself
            return name
    return name


def known_value(value: str | None) -> str | None:
    """``value`` (a variable's, e.g. ``$PWD``) where the script determines it; None when it is unset
    or holds a marker of what planner cannot know."""
    return value if value is not None and unresolved_in(value) is None else None


def command_marker(text: str) -> str:
    """The marker for a command substitution (or arithmetic) planner does not run: its text
    hex-encoded, so that no character of it (``|``, ``(``, a space) reaches a word or an inner
    ``bash -c`` lexer; :func:`unresolved_in` gives the text back for messages."""
    return UNRESOLVED.format("$:" + text.encode("utf-8").hex())


def arith(expr: str, scalars: dict[str, str]) -> str | None:
    """An integer ``$(( ))`` expression over resolved names (bash: bare names are variables),
    evaluated by :mod:`.arithmetic`; None when its value cannot be known here (a name the script
    never sets, an array element, an assignment, an expression bash refuses)."""
    text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", expr).strip()  # "$(( (a + b) / c ))": no indent

    def read(name: str, sub: str | None) -> str:
        name = resolve(name, scalars)
        v = scalars.get(name)
        if v is None and NOUNSET_KEY in scalars and not environment_sets(name, scalars):
            raise Unbound(name)
        if v is None or sub is not None or unresolved_in(v) is not None:
            raise UnknownOperand(name)
        return v

    try:
        return str(evaluate(parse(text), read, None))
    except (ArithmeticFailure, NotFollowed, UnknownOperand):
        return None


def expand(text: str, scalars: dict[str, str], arrays: dict[str, list[str]], split: bool = True) -> str:
    """``text`` with every parameter reference replaced by its value, re-quoted so that
    :func:`shlex.split` yields the words bash would (unknown names become markers).

    Word splitting as bash(1) "Word Splitting" does it with the default IFS (space, tab,
    newline): an unquoted expansion, ``$NAME`` or each element of ``${NAME[@]}`` / ``${NAME[*]}``,
    is split into words at whitespace (an empty one gives no word); inside double quotes it is
    not, and ``"${NAME[@]}"`` gives one word per element, whole. ``split=False`` is the right
    side of an assignment, which bash does not split. A marker for an unresolved value stays one
    word. Pathname expansion is not performed (a launch's flags hold no glob patterns)."""
    out: list[str] = []
    i, quote = 0, None
    n = len(text)
    while i < n:
        ch = text[i]
        if quote == "'":
            out.append(ch)
            quote = None if ch == "'" else quote
            i += 1
            continue
        if ch == "\\" and i + 1 < n:
            out.append(text[i : i + 2])
            i += 2
            continue
        if ch == "'" and quote is None:
            quote = "'"
            out.append(ch)
            i += 1
            continue
        if ch == '"':
            # "${NAME[@]}" as a whole word: one word per element.
            m = _QUOTED_ALL.match(text, i) if quote is None else None
            if m:
                if m.group(3) or m.group(4):  # "$@" (bash(1) "Special Parameters")
                    items = arrays.get("@", [])
                elif m.group(1):
                    items = _indices(m.group(2), scalars, arrays)
                else:
                    items = _array(m.group(2), scalars, arrays)
                out.append(" ".join(shlex.quote(e) for e in items))
                i = m.end()
                continue
            quote = None if quote == '"' else '"'
            out.append(ch)
            i += 1
            continue
        if ch == "$" or ch == "`":
            value, used = _reference(text[i:], scalars, arrays)
            if used:
                if value is None:
                    out.append(text[i : i + used])
                elif isinstance(value, list):
                    joined = " ".join(value)
                    out.append(_requote(joined, quote) if quote else _unquoted(value, split))
                else:
                    out.append(_requote(value, quote) if quote else _unquoted([value], split))
                i += used
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unquoted(values: list[str], split: bool) -> str:
    """The words of an unquoted expansion, re-quoted for :func:`shlex.split`: each value split at
    IFS whitespace (bash(1) "Word Splitting"), a marker kept whole; ``split=False``: each value one
    word."""
    words: list[str] = []
    for v in values:
        words += _FIELD.findall(v) if split else [v]
    return " ".join(shlex.quote(w) for w in words)


def _requote(value: str, quote: str | None) -> str:
    """``value`` escaped for the inside of a double-quoted string as :func:`shlex.split` reads one
    (posix: a backslash escapes only ``"`` and ``\\`` there; ``$`` and a backtick stay literal)."""
    return re.sub(r'(["\\])', r"\\\1", value)


_QUOTED_ALL = re.compile(r'"(?:\$\{(!?)([A-Za-z_]\w*)\[@\]\}|\$(@)|\$\{(@)\})"')
"""A double-quoted word that is all of ``${NAME[@]}``, ``${!NAME[@]}`` or ``$@``: one word per element."""


def _array(name: str, scalars: dict[str, str], arrays: dict) -> list[str]:
    """The elements of ``${NAME[@]}`` (a scalar is an array of one, bash(1) "Arrays")."""
    name = resolve(name, scalars)
    if name in arrays:
        return elements(arrays[name])
    if name in scalars:
        return [scalars[name]]
    return [UNRESOLVED.format(name)]


def _indices(name: str, scalars: dict[str, str], arrays: dict) -> list[str]:
    """``${!NAME[@]}``: an array's keys or indices (``0`` for a set scalar)."""
    name = resolve(name, scalars)
    if name in arrays:
        return indices(arrays[name])
    if name in scalars:
        return [scalars[name]] if unresolved_in(scalars[name]) is not None else ["0"]
    return [UNRESOLVED.format(name)]


def _reference(s: str, scalars: dict[str, str], arrays: dict[str, list[str]]):
    """(value, characters consumed) of the reference at the start of ``s``; value None keeps
    the text (``$`` alone, ``$@``, positional parameters)."""
    m = re.match(r"\$\(\((.*?)\)\)", s)
    if m:
        value = arith(m.group(1), scalars)
        return (value if value is not None else command_marker(f"$(({m.group(1)}))")), m.end()
    if s.startswith("`"):
        end = s.find("`", 1)
        if end > 0:
            # bash(1) "Command Substitution": `command` is $(command), a backslash inside escaping
            # only $, ` and \; written back as $( ) so that messages name it as a command
            inner = re.sub(r"\\([$`\\])", r"\1", s[1:end])
            value = _path_output(inner, scalars, arrays)
            return (value if value is not None else command_marker(f"$({inner})")), end + 1
        return None, 0
    if s.startswith("$("):
        depth, j = 0, 1
        while j < len(s):
            depth += {"(": 1, ")": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        value = _path_output(s[2:j], scalars, arrays)
        return (value if value is not None else command_marker(s[: j + 1])), j + 1
    m = re.match(r"\$(?:0|\{0\})", s)
    if m:
        return scalars.get("0"), m.end()  # the script's path when known (read_script), else kept
    m = re.match(r"\$(?:([#@*])|\{([#@*])\})", s)
    if m:  # bash(1) "Special Parameters": $# the count, $@ and $* the positional parameters
        which = m.group(1) or m.group(2)
        if which == "#":
            return scalars.get("#"), m.end()
        return (list(arrays["@"]) if "@" in arrays else None), m.end()
    m = re.match(r"\$([1-9])", s)
    if m:
        return _positional(m.group(1), scalars), m.end()
    m = re.match(r"\$\{!([A-Za-z_]\w*)\[[@*]\]\}", s)
    if m:
        return _indices(m.group(1), scalars, arrays), m.end()
    m = re.match(r"\$\{(#?)([A-Za-z_]\w*)\[", s)
    if m:
        return _subscripted(s, m, scalars, arrays)
    m = re.match(r"\$\{#([A-Za-z_]\w*)\}", s)
    if m:
        name = resolve(m.group(1), scalars)
        value = _scalar(name, scalars, arrays)
        return (str(len(value)) if value is not None else _unset(name, scalars)), m.end()
    m = re.match(r"\$\{([A-Za-z_]\w*|\d+)(?:(:?[-=+?])([^}]*))?\}", s)
    nested = re.match(r"\$\{([A-Za-z_]\w*|\d+)(:?[-=+?])", s) if m and "${" in (m.group(3) or "") else None
    end = None
    if nested:
        # ${NAME:-"${OTHER}/x"}: the word runs to the brace that closes this one (bash(1): "word is
        # subject to ... parameter expansion"), past the nested references and quoted braces.
        end = _closing_brace(s, nested.end())
        if end is not None:
            name, op, default = nested.group(1), nested.group(2), s[nested.end() : end]
            m = None
    if m or end is not None:
        if m:
            name, op, default = m.group(1), m.group(2), m.group(3)
        used = m.end() if m else end + 1
        if name.isdigit():
            if "#" not in scalars:
                return None, 0
            _required(op, scalars.get(str(int(name))), str(int(name)), default, True)
            value = _operate(op, scalars.get(str(int(name))), default, scalars, arrays)
            if value is None and NOUNSET_KEY in scalars:
                raise Unbound(str(int(name)), known=True)
            return (value if value is not None else ""), used
        name = resolve(name, scalars)
        _required(op, _scalar(name, scalars, arrays), name, default, False)
        value = _operate(op, _scalar(name, scalars, arrays), default, scalars, arrays)
        if op in (":=", "=") and value is not None:
            scalars[name] = value
        return (value if value is not None else _unset(name, scalars)), used
    m = re.match(r"\$\{([A-Za-z_]\w*)(%%|%|##|#)", s)
    close = _closing_brace(s, m.end()) if m else None
    if close is not None:
        name = resolve(m.group(1), scalars)
        value = _scalar(name, scalars, arrays)
        if value is None:
            return _unset(name, scalars), close + 1
        if unresolved_in(value) is not None:
            return value, close + 1  # what it is cut from cannot be known: its marker stays
        pattern = glob_pattern(s[m.end() : close], lambda part: expand_word(part, scalars, arrays))
        if unresolved_in(pattern) is not None:
            return UNRESOLVED.format(unresolved_in(pattern)), close + 1  # nor what is cut
        return removed(value, m.group(2), pattern), close + 1
    m = re.match(r"\$\{[A-Za-z_]\w*[^\w}'\"$][^}'\"$]*\}", s)
    if m:  # ${NAME/a/b}, ${NAME:1:2}, ${NAME^^}: not evaluated, a marker naming it (never its text)
        return command_marker(m.group(0)), m.end()
    m = re.match(r"\$([A-Za-z_]\w*)", s)
    if m:
        name = resolve(m.group(1), scalars)
        value = _scalar(name, scalars, arrays)
        return (value if value is not None else _unset(name, scalars)), m.end()
    return None, 0


def _positional(n: str, scalars: dict[str, str]) -> str | None:
    """``$N``: the Nth positional parameter, empty when there are fewer (bash(1) "Positional
    Parameters"); None (the text kept) where no positional parameters are bound."""
    if "#" not in scalars:
        return None
    if str(int(n)) not in scalars and NOUNSET_KEY in scalars:
        raise Unbound(n, known=True)
    return scalars.get(str(int(n)), "")


def _scalar(name: str, scalars: dict[str, str], arrays: dict) -> str | None:
    """``$NAME``: a scalar's value, or an array's element 0 (bash(1) "Arrays": "Referencing an array
    variable without a subscript is equivalent to referencing the array with a subscript of 0");
    None when unset."""
    if name in scalars:
        return scalars[name]
    value = arrays.get(name)
    if isinstance(value, dict):
        return value.get("0")
    return value[0] if value else None


def _operate(op: str | None, value: str | None, word: str | None, scalars: dict[str, str], arrays: dict):
    """``${NAME:-word}``, ``-``, ``:=``, ``=``, ``:+``, ``+`` applied to NAME's value (None: unset;
    bash(1) "Parameter Expansion"); word is expanded only when it is used."""
    if op in (":-", ":=") and not value:
        return expand_word(word or "", scalars, arrays)
    if op in ("-", "=") and value is None:
        return expand_word(word or "", scalars, arrays)
    if op == ":+":
        return expand_word(word or "", scalars, arrays) if value else ""
    if op == "+":
        return expand_word(word or "", scalars, arrays) if value is not None else ""
    return value


def _subscripted(s: str, m: re.Match, scalars: dict[str, str], arrays: dict):
    """``${NAME[SUBSCRIPT]}``, ``${NAME[SUBSCRIPT]:-word}`` (and the other operators) and
    ``${#NAME[...]}``: an associative array's SUBSCRIPT is a key, expanded (bash(1) "Arrays"); an
    indexed array's is arithmetic, a negative one counted from the end; ``@``/``*`` are every
    element. An element the script's array does not hold is unset; an array nothing sets is a
    marker naming it."""
    close = _closing_brace(s, m.end(), "]")
    if close is None:
        return None, 0
    count, name, sub = m.group(1) == "#", resolve(m.group(2), scalars), s[m.end() : close]
    rest = re.match(r"(?:(:?[-=+?])([^}]*))?\}", s[close + 1 :])
    end = _closing_brace(s, close + 1) if rest is None or (rest.group(2) and "${" in rest.group(2)) else None
    if end is not None:
        op, word, used = re.match(r"(:?[-=+?])?", s[close + 1 :]).group(1), None, end + 1
        word = s[close + 1 + len(op or "") : end] if op else None
    elif rest is not None:
        op, word, used = rest.group(1), rest.group(2), close + 2 + rest.end() - 1
    else:
        return None, 0
    if sub in ("@", "*"):
        if count and name not in arrays and name not in scalars:
            _unset(name, scalars)  # ${#A[@]} of an unset A: unbound under set -u ("${A[@]}" is not)
        items = _array(name, scalars, arrays)
        return (str(len(items)) if count else items), used
    value = _element(name, sub, scalars, arrays)
    if count:
        return (str(len(value)) if value is not None and unresolved_in(value) is None else value or ""), used
    if op is None and NOUNSET_KEY in scalars:
        if value is None:
            raise Unbound(f"{name}[{sub}]", known=True)
        if value == UNRESOLVED.format(name):
            _unset(name, scalars)
    value = _operate(op, value, word, scalars, arrays)
    if op in (":=", "=") and isinstance(arrays.get(name), dict) and value is not None:
        arrays[name][expand_word(sub, scalars, arrays)] = value
    return (value if value is not None else ""), used


def _element(name: str, sub: str, scalars: dict[str, str], arrays: dict) -> str | None:
    """One element of an array (``name`` resolved); None when the script's array has no such
    element; a marker when the array is not the script's or the subscript cannot be known."""
    value = arrays.get(name)
    if isinstance(value, dict):
        key = expand_word(sub, scalars, arrays)
        return key if unresolved_in(key) is not None else value.get(key)
    if value is None and name not in scalars:
        return UNRESOLVED.format(name)
    if value is None and unresolved_in(scalars[name]) is not None:
        return scalars[name]  # set where the script cannot be known (an if's branch): so is each element
    index = arith(expand(sub, scalars, arrays, split=False), scalars)
    if index is None:
        return command_marker(f"${{{name}[{sub}]}}")
    items = value if value is not None else [scalars[name]]
    k = int(index) + (len(items) if int(index) < 0 else 0)
    return items[k] if 0 <= k < len(items) else None


def _closing_brace(s: str, i: int, end: str = "}") -> int | None:
    """The index of the ``}`` that closes a ``${`` whose word starts at ``i`` (``end="]"``: of the
    ``]`` that ends a subscript starting at ``i``); nested ``${ }`` counted, quoted text skipped;
    None when it never closes."""
    depth, quote = 0, None
    while i < len(s):
        ch = s[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif s.startswith("${", i):
            depth += 1
            i += 2
            continue
        elif ch == "}" and depth:
            depth -= 1
        elif ch == end and depth == 0:
            return i
        i += 1
    return None


def _path_output(command: str, scalars: dict[str, str], arrays: dict[str, list[str]]) -> str | None:
    """What a command substitution prints when it only computes a path (:func:`.paths.path_command`
    on its expanded words, against ``$PWD``); None for any other command or an undetermined word."""
    try:
        words = shlex.split(expand(command, scalars, arrays), posix=True)
    except (ValueError, Unbound):  # the command runs in a subshell planner does not run
        return None
    if not words or any(unresolved_in(w) is not None for w in words):
        return None
    pwd = known_value(scalars.get("PWD"))
    out = path_command(words, pwd)
    return out if out is not None else _yq_output(words, pwd, scalars)


ROOT_KEY = "@root"
"""The script's directory (:attr:`.shell.Script.root`) among the scalars, where the expansion of a
``$(yq ...)`` finds it (not a name an assignment can set)."""

FILE_KEY = "@file:"
"""The prefix of the scalars holding the files the script writes with ``envsubst < IN > OUT``
(:func:`.shell_builtins.envsubst`), by absolute path."""


class YamlReadError(SpecError):
    """A YAML file a ``$(yq ...)`` reads cannot be read as yq reads it; :func:`.shell._read` adds the line."""


def _yq_output(words: list[str], pwd: str | None, scalars: dict[str, str]) -> str | None:
    """What ``$(yq PROGRAM FILE [| tr A B])`` prints (:mod:`.yq`), trailing newlines dropped as
    command substitution drops them; None for any other command, a program not read, or a FILE
    that is neither written by the script nor inside its directory (on the cluster)."""
    commands, buf = [], []
    for w in words + ["|"]:
        if w == "|":
            commands.append(buf)
            buf = []
        else:
            buf.append(w)
    got = yq.yq_command(commands[0])
    if got is None or any(not c or c[0] != "tr" for c in commands[1:]):
        return None
    program, target = got
    root = scalars.get(ROOT_KEY)
    full = joined(pwd, target)
    if full is None:
        return None
    text = scalars.get(FILE_KEY + full)
    if text is None:
        if root is None or not inside(full, root):
            return None
        if not os.path.isfile(full):
            raise YamlReadError(f"yq reads {printable(target)}, and {printable(full)} does not exist")
        text = read_text_capped(Path(full))
    try:
        lines = yq.evaluate(program, text)
    except yq.Undetermined as exc:
        name = unresolved_in(exc.marker) or "?"
        raise YamlReadError(
            f"yq: {printable(target)}: the value of {printable(exc.key)} needs {name}, which the script does "
            f"not export; export it in the script or pass planner check --set {name}=VALUE"
        ) from None
    except SpecError as exc:
        raise YamlReadError(f"{printable(target)}: {exc}") from None
    if lines is None:
        return None
    out = "".join(line + "\n" for line in lines)
    for c in commands[1:]:
        out = yq.tr(out, c[1:])
        if out is None:
            return None
    return out.rstrip("\n")


def expand_word(text: str, scalars: dict[str, str], arrays: dict[str, list[str]]) -> str:
    """One word (a default value, an assignment's right side) expanded and unquoted."""
    try:
        parts = shlex.split(expand(text, scalars, arrays))
    except ValueError:
        return text
    return " ".join(parts)


def expand_heredoc(body: str, scalars: dict[str, str], arrays: dict) -> str:
    """A here-document's lines as bash passes them when its delimiter is unquoted (bash(1) "Here
    Documents": "subjected to parameter expansion, command substitution, and arithmetic
    expansion, the character sequence \\newline is ignored, and '\\' must be used to quote the
    characters '\\', '$', and '`'"): quotes are ordinary characters; an array is joined by spaces;
    an unresolved value stays a marker."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in "\\$`\n":
            out.append("" if body[i + 1] == "\n" else body[i + 1])
            i += 2
            continue
        if ch in "$`":
            value, used = _reference(body[i:], scalars, arrays)
            if used:
                out.append(
                    " ".join(value)
                    if isinstance(value, list)
                    else (value if value is not None else body[i : i + used])
                )
                i += used
                continue
        out.append(ch)
        i += 1
    return "".join(out)
