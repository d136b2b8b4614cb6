"""Strict YAML and JSON documents: the reader every input file goes through (size, depth and
key checks with the file and key path in each error), file headers, and built-in preset files."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from planner.inputs.errors import SpecError
from planner.inputs.validation import check_number, path_exists, read_text_capped

SCHEMA_VERSION = 1
"""The ``schema_version`` that model, cluster, job and graph-model files carry (the only one read)."""


GIB = 1024**3


GB = 1e9


MISSING = object()
"""Sentinel default of :meth:`Reader.get`: the key is required."""


class Reader:
    """Reads one mapping strictly: typed getters, then :meth:`done` rejects unknown keys."""

    def __init__(self, data: Any, where: str, path: str = "") -> None:
        if not isinstance(data, dict):
            raise SpecError(f"{where}: {path or 'top level'}: expected a mapping, got {type(data).__name__}")
        self.data, self.where, self.path, self.used = data, where, path, set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(
        self,
        key: str,
        kind: type | tuple,
        default: Any = MISSING,
        *,
        choices=None,
        positive=False,
        maximum: float | None = None,
    ) -> Any:
        """Return ``data[key]`` checked against ``kind``, ``choices``, positivity, finiteness and the
        key's upper bound (``maximum``, default :data:`planner.inputs.validation.LIMITS`)."""
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if default is MISSING:
                raise SpecError(f"{self.where}: missing required key '{self._key(key)}'")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise SpecError(f"{self.where}: key '{self._key(key)}': expected {_names(kinds)}, got a boolean")
        if not isinstance(value, kinds):
            raise SpecError(
                f"{self.where}: key '{self._key(key)}': expected {_names(kinds)}, got {type(value).__name__} {value!r}"
            )
        if choices is not None and value not in choices:
            raise SpecError(
                f"{self.where}: key '{self._key(key)}': {value!r} is not allowed; allowed values: {', '.join(map(str, choices))}"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Finite, non-negative (positive if asked), under the key's realistic bound (validation.py).
            check_number(value, self.where, self._key(key), positive=positive, maximum=maximum)
        return value

    def optional_sub(self, key: str) -> Reader | None:
        """:meth:`sub` for an optional nested mapping: ``None`` when ``key`` is absent or null."""
        self.used.add(key)
        return None if self.data.get(key) is None else self.sub(key)

    def sub(self, key: str) -> Reader:
        """A reader over the nested mapping at ``key``."""
        self.used.add(key)
        if key not in self.data:
            raise SpecError(f"{self.where}: missing required key '{self._key(key)}'")
        return Reader(self.data[key], self.where, self._key(key))

    def done(self) -> None:
        """Reject keys that were never read."""
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise SpecError(
                f"{self.where}: unknown key '{self._key(str(unknown[0]))}'{did_you_mean(str(unknown[0]), self.used)}; "
                f"allowed keys: {', '.join(sorted(self.used))}"
            )


def _names(kinds: tuple) -> str:
    return " or ".join(
        {
            int: "an integer",
            float: "a number",
            str: "a string",
            bool: "true/false",
            list: "a list",
            dict: "a mapping",
        }.get(k, k.__name__)
        for k in kinds
    )


def read_document(path: Path) -> dict:
    """Parse a YAML or JSON file into a mapping, with a one-line error on failure. The work is
    bounded whatever the file holds: at most :data:`planner.inputs.validation.MAX_FILE_BYTES` read, at most
    :data:`MAX_NODES` values (a YAML alias counted as all the values it stands for, checked on the
    event stream before anything is built, so a 350-byte alias bomb is refused in microseconds)
    and at most :data:`MAX_DEPTH` levels."""
    text = read_text_capped(path)
    as_json = path.suffix == ".json"
    try:
        if as_json:
            data = json.loads(text)
            _check_tree(data, path)
        else:
            _check_yaml_events(text, path)
            data = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 (a safe loader: SafeLoader or its C twin)
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a planner input") from None
    except (yaml.YAMLError, json.JSONDecodeError, ValueError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        detail = getattr(exc, "problem", None) or getattr(exc, "msg", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}: malformed {'JSON' if as_json else 'YAML'}{where}: {detail}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return data


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""The YAML loader of input files: PyYAML's safe loader, on libyaml when PyYAML was built with it
(the same YAML 1.1 resolution; about 5x faster on the 2.7 MB calibration set)."""

MAX_DEPTH = 32
"""Deepest nesting of an input (a graph plan nests about 6 levels); deeper data is refused before
any recursive code walks it."""

MAX_NODES = 500_000
"""Most values (mappings, lists and scalars, each counted once; a YAML alias counts as every value
it stands for) an input document may hold. The largest input planner reads, the calibration set
tests/data/published_runs.yaml (2.7 MB, 701 runs), holds about 98,000 (five times fewer); a graph
plan of thousands of blocks holds tens of thousands. Loading 500,000 values takes about 3 s and
200 MB, the bound on the work any input file can cause: without it a 350-byte YAML of ten levels
of nine aliases stands for 9**10 = 3.5e9 values and every reader of the document walks them."""


def _too_many(path: Path) -> SpecError:
    return SpecError(
        f"{path}: more than {MAX_NODES:,} values (a YAML alias counts as all it stands for); "
        "not a planner input"
    )


def _too_deep(path: Path) -> SpecError:
    return SpecError(f"{path}: nested more than {MAX_DEPTH} levels deep; not a planner input")


def _check_yaml_events(text: str, path: Path) -> None:
    """Refuse a YAML text that stands for more than :data:`MAX_NODES` values or nests more than
    :data:`MAX_DEPTH` mappings and lists, aliases expanded, or whose alias refers to the mapping or
    list it is in (a recursive document); read from the parser's event stream, in constant memory
    and time proportional to the text, before any node is built."""
    size: dict[str, int] = {}  # anchor -> values of its node (collections closed so far)
    levels: dict[str, int] = {}  # anchor -> nesting levels of its node (0 for a scalar)
    stack: list[list] = []  # open collections: [anchor, values before it, deepest level inside]
    total = 0
    for event in yaml.parse(text, Loader=YAML_LOADER):
        if isinstance(event, yaml.AliasEvent):
            anchor = event.anchor
            if any(frame[0] == anchor for frame in stack):
                raise SpecError(
                    f"{path}: alias '*{anchor}' refers to the mapping or list it is in; not a planner input"
                )
            if anchor not in size:
                continue  # an undefined alias: the loader reports it with its line
            total += size[anchor]
            depth = len(stack) + levels[anchor]
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            depth = len(stack)
            if event.anchor is not None:
                size[event.anchor], levels[event.anchor] = 1, 0
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, total, len(stack) + 1])
            total += 1
            depth = len(stack)
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, before, deepest = stack.pop()
            if anchor is not None:
                size[anchor], levels[anchor] = total - before, deepest - len(stack)
            if stack:
                stack[-1][2] = max(stack[-1][2], deepest)
            continue
        else:
            continue
        if total > MAX_NODES:
            raise _too_many(path)
        if depth > MAX_DEPTH:
            raise _too_deep(path)
        if stack:
            stack[-1][2] = max(stack[-1][2], depth)


def _check_tree(data: Any, path: Path) -> None:
    """Refuse parsed data (JSON: no aliases) of more than :data:`MAX_NODES` values or
    :data:`MAX_DEPTH` levels (iterative: no recursion)."""
    count, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise _too_many(path)
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise _too_deep(path)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)


def check_header(r: Reader, kind: str) -> None:
    """The document's ``schema_version`` is this planner's and its ``kind`` is ``kind`` (SpecError
    naming the file otherwise)."""
    version = r.get("schema_version", int)
    if version != SCHEMA_VERSION:
        raise SpecError(f"{r.where}: schema_version {version} is not supported; supported: {SCHEMA_VERSION}")
    r.get("kind", str, choices=(kind,))


def preset_files(package: str, folder: str) -> dict[str, Any]:
    """The YAML presets shipped in ``package``/``folder``, by name (file name less ``.yaml``)."""
    base = resources.files(package).joinpath(folder)
    return {
        p.name[: -len(".yaml")]: p
        for p in sorted(base.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".yaml")
    }


def preset_or_path(name_or_path: str, files: Iterable[str]) -> str:
    """``name_or_path`` as a command line gives it, resolved: an existing file or an exact preset name
    stays as it is; otherwise the preset it names ignoring case (:func:`preset_name`), if one."""
    if name_or_path in files or path_exists(Path(name_or_path)):
        return name_or_path
    return preset_name(name_or_path, files) or name_or_path


def preset_name(name: str, names: Iterable[str]) -> str | None:
    """The built-in name ``name`` refers to: itself, or the one name equal to it ignoring case."""
    names = list(names)
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """`` (did you mean a or b?)`` for the closest built-in names (difflib, case ignored), or ''."""
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(by_lower[c] for c in close) + "?)"
