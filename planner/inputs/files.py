"""Writing output files: the plan-file YAML dumper (one row a line for short lists) and the atomic
writer every command's ``--out`` goes through."""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError
from planner.inputs.validation import short_path


class _Row(dict):
    """A mapping written on one line (a per-stage row of a plan file)."""


class _PlanDumper(yaml.SafeDumper):
    """Keys in the document's order; lists of scalars and per-stage rows on one line each."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    flow = all(not isinstance(x, (dict, list, tuple)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_row(dumper: yaml.SafeDumper, data: _Row):
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)


_PlanDumper.add_representer(list, _represent_list)


_PlanDumper.add_representer(_Row, _represent_row)


def _rows(data):
    """Wrap the items of every ``per_stage`` list in :class:`_Row`."""
    if isinstance(data, dict):
        return {
            k: [_Row(_rows(x)) if isinstance(x, dict) else x for x in v]
            if k == "per_stage" and isinstance(v, list)
            else _rows(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_rows(x) for x in data]
    return data


def plan_yaml(doc: dict) -> str:
    """A plan document as YAML, in its own key order, one line per per-stage row."""
    return yaml.dump(_rows(doc), Dumper=_PlanDumper, sort_keys=False, default_flow_style=False, width=100_000)


def _temporary_stem(path: Path) -> str:
    """Start of the names of :func:`write_text_atomic`'s temporary files for ``path``: hidden files
    beside the target, ``.plan.yaml.<writer's pid>.<8 random characters>.tmp``."""
    return f".{path.name[:100]}."


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without signalling; a process of another
    user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files a killed :func:`write_text_atomic` left beside ``path``: those
    named for ``path`` whose writer's process is gone. A running writer's file is left alone, as
    is every other file; one that cannot be removed is left too (the write goes on)."""
    stem = _temporary_stem(path)
    shape = re.compile(re.escape(stem) + r"(\d+)\.[a-z0-9_]{8}\.tmp")  # mkstemp's 8 random characters
    try:
        siblings = list(path.parent.glob(f"{glob.escape(stem)}*.tmp"))
    except OSError:
        return
    for tmp in siblings:
        match = shape.fullmatch(tmp.name)
        if match is None or _process_alive(int(match.group(1))):
            continue
        try:
            tmp.unlink()
        except OSError:
            pass


STDOUT_NAMES = ("-", "/dev/stdout")
"""Output names that mean standard output: the text is streamed there, no file is written."""


def is_stdout(path: Path | str) -> bool:
    """Whether an output name means standard output (:data:`STDOUT_NAMES`)."""
    return str(path) in STDOUT_NAMES


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def output_target(path: Path) -> Path:
    """The file writing ``path`` replaces: ``path`` itself when it is a regular file or absent, the
    file a symbolic link points to (followed to its end; created when absent, as a shell's ``>``
    does) when it is a link. Anything else planner did not write and must not replace, a
    directory, device, FIFO or socket (``--svg /dev/full`` as root would otherwise replace the
    device node with a regular file), or a link loop, is a one-line SpecError naming it."""
    if path.name in ("", ".", ".."):
        raise SpecError(f"{short_path(path)}: is a directory; give a file name (or - for standard output)")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise SpecError(f"{short_path(path)}: cannot write: {exc.strerror or exc}") from None
    target = path
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(path))
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return target
        except OSError as exc:
            raise SpecError(f"{short_path(path)}: cannot write: {exc.strerror or exc}") from None
        if stat.S_ISLNK(info.st_mode):
            raise SpecError(f"{short_path(path)}: a loop of symbolic links; give a file name")
    if stat.S_ISREG(info.st_mode):
        return target
    via = "" if target == path else f" (a symbolic link to {short_path(target)})"
    raise SpecError(
        f"{short_path(path)}{via}: is {_kind(info.st_mode)}, not a regular file; planner writes only regular "
        "files (give a file name, or - for standard output)"
    )


def write_text_atomic(path: Path | str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically: a unique temporary file beside the target, flushed to
    disk, then renamed over it (POSIX ``rename`` is atomic within a file system). A crash or
    ``SIGKILL`` at any moment leaves the old file or the new one, never a truncated one; concurrent
    writers each use their own temporary file, so the target is always one writer's whole text.
    A writer killed before its rename leaves its temporary file behind (``SIGKILL`` cannot be
    caught); the file's name carries the writer's process id, and the next write of the same
    target removes those of writers no longer running (:func:`_remove_stale_temporaries`). Only
    the target and such temporary files of it are touched.

    The target is :func:`output_target`'s: a regular file is replaced, a symbolic link is followed
    and the file it points to replaced, and a directory, device, FIFO or socket is refused (never
    replaced). ``-`` and ``/dev/stdout`` stream ``text`` to standard output instead."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = output_target(Path(path))
    tmp = None
    try:
        _remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(
            prefix=f"{_temporary_stem(path)}{os.getpid()}.", suffix=".tmp", dir=path.parent
        )
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise SpecError(f"{short_path(path)}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
