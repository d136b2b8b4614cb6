"""Assignments in a launch script, recorded as bash makes them (bash(1) "PARAMETERS", "Arrays",
"SHELL BUILTIN COMMANDS" ``declare``/``local``/``export``): ``NAME=value`` (several on a line),
``NAME+=value``, ``NAME=( ... )`` and ``NAME+=( ... )`` arrays, ``NAME[KEY]=value`` elements,
``declare -A NAME=( [KEY]=value ... )`` associative arrays, ``declare -n REF=NAME`` /
``local -n`` namerefs, ``declare -a``/``-A``/``-x``/``-g``, ``local`` (the name made local to the
call being run, :func:`.functions.make_local`; at the top level bash refuses it: "can only be used
in a function", and nothing is assigned), ``export NAME``, and the ``export``/``readonly``/
``typeset`` prefixes."""

from __future__ import annotations

import re
import shlex

from planner.inputs.errors import SpecError
from planner.launch.megatron.expansion import arith, expand, expand_word
from planner.launch.megatron.functions import make_local
from planner.launch.megatron.shell_state import NAME, Script, exports
from planner.launch.megatron.shell_text import strip_comment
from planner.launch.megatron.variables import MAX_ASSOC_KEYS, REF_KEY, resolve

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
PREFIXES = ("export", "declare", "readonly", "local", "typeset")
_ELEMENT = re.compile(r"^([A-Za-z_]\w*)\[([^\]]*)\](\+?)=(.*)$", re.S)
_ARRAY = re.compile(r"^([A-Za-z_]\w*)(\+?)=\((.*)\)\s*$", re.S)
_ASSOC_ITEM = re.compile(r"^\[([^\]]*)\]=(.*)$", re.S)


def assign(line: str, number: int, s: Script) -> bool:
    """Record the assignments of a line; False when the line is not one (a command)."""
    text = line.strip()
    prefix, opts = None, ""
    if text.split(None, 1)[0] in PREFIXES:
        prefix, _, text = text.partition(" ")
        text = text.strip()
        while text[:1] in ("-", "+") and text[1:2].isalpha():
            word, _, text = text.partition(" ")
            opts += word[1:] if word[0] == "-" else ""
            text = text.strip()
    if any(o in opts for o in "fFp"):
        return True  # declare -f / -F / -p print definitions or values; nothing is assigned
    if prefix == "local" and not s.frames:
        return True  # bash: "local: can only be used in a function"; nothing is assigned
    local = prefix == "local" or (prefix in ("declare", "typeset") and bool(s.frames) and "g" not in opts)
    exported = prefix == "export" or "x" in opts
    m = _ARRAY.match(text)
    if m:
        _array(m.group(1), m.group(2) == "+", m.group(3), number, s, local, "A" in opts)
        return True
    try:
        words = shlex.split(expand(text, s.scalars, s.arrays, split=False), posix=True)
    except ValueError:
        return False
    if not words:
        return prefix is not None
    if not all(ASSIGN.match(w) or _ELEMENT.match(w) or (prefix and NAME.fullmatch(w)) for w in words):
        return False
    for w in words:
        if "n" in opts:
            _nameref(w, number, s, local)
        elif NAME.fullmatch(w):
            _declared(w, s, local, opts, exported)
        elif _ELEMENT.match(w):
            _element(w, number, s, local)
        else:
            name, append, value = ASSIGN.match(w).groups()
            name = resolve(name, s.scalars)
            if local:
                make_local(s, name)
            value = (s.scalars.get(name, "") + value) if append else value
            s.scalars[name] = value
            s.arrays.pop(name, None)
            if exported:
                s.exported.add(name)
            if exported or exports(s, name):
                s.env[name] = value
        s.assigned_lines[re.match(r"[A-Za-z_]\w*", w).group(0)] = number
    return True


def _array(name: str, append: bool, body: str, number: int, s: Script, local: bool, assoc: bool) -> None:
    """``NAME=( ... )``: the words of the body, expanded and split as a command's are; with
    ``-A`` (or NAME already associative) each is ``[KEY]=VALUE``."""
    name = resolve(name, s.scalars)
    if local:
        make_local(s, name)
    body = " ".join(strip_comment(x) for x in body.splitlines())
    try:
        items = shlex.split(expand(body, s.scalars, s.arrays), posix=True)
    except ValueError:
        items = body.split()
    old = s.arrays.get(name)
    if assoc or isinstance(old, dict):
        table = dict(old) if append and isinstance(old, dict) else {}
        for item in items:
            m = _ASSOC_ITEM.match(item)
            if not m:
                raise SpecError(
                    f"line {number}: {name}=( ... ): an associative array's element is [KEY]=VALUE, "
                    f"not {item!r} (bash: must use subscript when assigning associative array)"
                )
            table[m.group(1)] = m.group(2)
        _bounded(name, table, number)
        s.arrays[name] = table
    else:
        s.arrays[name] = (list(old) if append and isinstance(old, list) else []) + items
    s.scalars.pop(name, None)
    s.assigned_lines[name] = number


def _bounded(name: str, table: dict, number: int) -> None:
    if len(table) > MAX_ASSOC_KEYS:
        raise SpecError(
            f"line {number}: {name} holds more than {MAX_ASSOC_KEYS} keys, where bash's table reorders "
            "them; not read"
        )


def _nameref(word: str, number: int, s: Script, local: bool) -> None:
    """``declare -n REF=NAME``: REF stands for NAME from now on (bash(1) "PARAMETERS")."""
    m = ASSIGN.match(word)
    ref, target = (m.group(1), m.group(3)) if m else (word, "")
    if local:
        make_local(s, ref)
    if not m:
        s.scalars.pop(REF_KEY + ref, None)
        return
    if not NAME.fullmatch(target) or target == ref:
        raise SpecError(
            f"line {number}: declare -n {ref}={target!r}: a nameref's value must be another variable's "
            "name (bash: invalid variable name for name reference)"
        )
    s.scalars[REF_KEY + ref] = target


def _declared(name: str, s: Script, local: bool, opts: str, exported: bool) -> None:
    """A name given without a value: ``local NAME`` (local and empty), ``declare -A NAME`` (an
    empty associative array unless it is one), ``declare -a NAME``, ``export NAME``."""
    name = resolve(name, s.scalars)
    if local:
        make_local(s, name)
    if "A" in opts:
        if not isinstance(s.arrays.get(name), dict) or local:
            s.arrays[name] = {}
            s.scalars.pop(name, None)
    elif "a" in opts:
        if not isinstance(s.arrays.get(name), list) or local:
            s.arrays[name] = []
            s.scalars.pop(name, None)
    elif local:
        s.arrays.pop(name, None)
        s.scalars[name] = ""
    if exported:
        s.exported.add(name)  # bash: a later NAME=value is exported, also when NAME is unset now
        if name in s.scalars:
            s.env[name] = s.scalars[name]


def _element(word: str, number: int, s: Script, local: bool) -> None:
    """``NAME[KEY]=value``: a key of an associative array, or an index (arithmetic) of an indexed
    one; an index past the end other than the next one would make the array sparse, which is not
    read (an error naming the line)."""
    name, key, append, value = _ELEMENT.match(word).groups()
    name = resolve(name, s.scalars)
    if local:
        make_local(s, name)
    table = s.arrays.get(name)
    if isinstance(table, dict):
        key = expand_word(key, s.scalars, s.arrays)
        table[key] = (table.get(key, "") + value) if append else value
        _bounded(name, table, number)
        return
    items = list(table) if table is not None else ([s.scalars[name]] if name in s.scalars else [])
    index = arith(key, s.scalars)
    k = int(index) if index is not None else -1
    k += len(items) if index is not None and k < 0 else 0
    if not 0 <= k <= len(items):
        raise SpecError(
            f"line {number}: {name}[{key}]=: the index {'cannot be known' if index is None else 'leaves a gap'}; "
            "planner reads arrays without gaps"
        )
    if k == len(items):
        items.append(value)
    else:
        items[k] = (items[k] + value) if append else value
    s.arrays[name] = items
    s.scalars.pop(name, None)


def unset(args: list[str], number: int, s: Script) -> None:
    """``unset [-v|-f|-n] NAME ...`` and ``unset 'NAME[KEY]'`` (bash(1) "SHELL BUILTIN COMMANDS"):
    a variable (through its nameref, unless ``-n``), a function (``-f``), or one element of an
    associative array or the last of an indexed one; any other element would leave a gap, which is
    not read (an error naming the line)."""
    opts = "".join(a[1:] for a in args if a.startswith("-"))
    for word in (a for a in args if not a.startswith("-")):
        if "f" in opts:
            s.functions.pop(word, None)
            continue
        m = re.fullmatch(r"([A-Za-z_]\w*)\[(.*)\]", word, re.S)
        name = m.group(1) if m else word
        if "n" in opts and s.scalars.pop(REF_KEY + name, None) is not None:
            continue
        name = resolve(name, s.scalars)
        if m:
            table = s.arrays.get(name)
            if isinstance(table, dict):
                table.pop(expand_word(m.group(2), s.scalars, s.arrays), None)
                continue
            index = arith(m.group(2), s.scalars)
            if isinstance(table, list) and index is not None and int(index) in (len(table) - 1, -1):
                table.pop()
                continue
            raise SpecError(
                f"line {number}: unset {word}: it would leave a gap in {name}; planner reads arrays without gaps"
            )
        s.scalars.pop(name, None)
        s.arrays.pop(name, None)
        s.env[name] = None
        s.exported.discard(name)  # bash: unset removes the variable with its export attribute
