"""A sweep's results journal: every finished point appended as one JSON line the moment it comes
back, so that a study interrupted (a kill, a lost machine, Ctrl-C) and run again with
``--resume`` recomputes only the points the journal lacks.

The journal is JSON lines: a header ``{"kind": "sweep_journal", "schema_version": 1,
"planner_version": ...}``, then one ``{"key": ..., "point": ..., "row": ...}`` per point. ``key``
is :func:`task_key`, a digest of everything the point's result depends on (the task, and the bytes
of a model or cluster file it reads), so a study edited between runs recomputes exactly the points
it changed. ``row`` is the point's row as :func:`planner.outputs.sweep.run_point` returned it
(before rounding and scaling efficiency; JSON floats read back to the same float). Each line is
written with one ``write`` on a descriptor opened ``O_APPEND`` and flushed to disk (``fsync``)
before the next point is recorded; a line cut short by a kill is not JSON and is dropped on
resume, so a point is in the journal whole or not at all. Resuming first rewrites the journal
atomically with its whole lines only (:func:`planner.inputs.files.write_text_atomic`). A journal
of another planner version, or not a journal, is not reused: every point is recomputed.

Points that failed (:class:`planner.outputs.sweep_engines.Failure`) are not journaled: a resume
tries them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from planner import __version__
from planner.inputs.errors import SpecError
from planner.inputs.files import output_target, write_text_atomic
from planner.inputs.validation import short_path

JOURNAL_KIND = "sweep_journal"
JOURNAL_SCHEMA_VERSION = 1
JOURNAL_SUFFIX = ".journal.jsonl"
"""A ``--csv FILE``'s default journal is ``FILE`` + this suffix."""


def header() -> dict:
    return {"kind": JOURNAL_KIND, "schema_version": JOURNAL_SCHEMA_VERSION, "planner_version": __version__}


def task_key(task) -> str:
    """A digest of what a point's result depends on: the task (a frozen dataclass of strings,
    numbers, tuples and nested dataclasses, whose ``repr`` is the same in every process) and the
    contents of the model and cluster files it names (a preset name names no file)."""
    digest = hashlib.sha256(repr(task).encode())
    for name in (task.model, task.point.cluster):
        path = Path(name)
        try:
            if path.is_file():
                digest.update(path.read_bytes())
            elif path.is_dir():  # a Hugging Face snapshot: the config.json a model is read from
                for config in sorted(path.rglob("config.json")):
                    digest.update(config.read_bytes())
        except OSError:
            pass  # unreadable: the point fails to load and is not journaled
    return digest.hexdigest()


def default_journal(csv_out: Path | None) -> Path | None:
    """The journal beside ``--csv FILE`` (``FILE.journal.jsonl``), when FILE is a regular file or
    does not exist yet (not standard output, a device, a FIFO); None otherwise."""
    if csv_out is None or str(csv_out) in ("-", "/dev/stdout"):
        return None
    try:
        target = output_target(csv_out)
    except SpecError:
        return None
    if target.exists() and not target.is_file():
        return None
    return csv_out.with_name(csv_out.name + JOURNAL_SUFFIX)


class Journal:
    """An open journal: :attr:`done` (key -> row) read from it when resuming, :meth:`record` appends."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.done: dict[str, dict] = {}
        self.note = ""
        lines = [json.dumps(header(), sort_keys=True)]
        if resume:
            self.done, kept, self.note = _read(path)
            lines += kept
        write_text_atomic(path, "\n".join(lines) + "\n")
        try:
            self.fd = os.open(output_target(path), os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise SpecError(f"{short_path(path)}: cannot write: {exc.strerror or exc}") from None

    def record(self, key: str, point: dict, row: dict) -> None:
        """Append one finished point, on disk before this returns."""
        line = json.dumps({"key": key, "point": point, "row": row}, sort_keys=True) + "\n"
        data = line.encode()
        while data:
            data = data[os.write(self.fd, data) :]
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _read(path: Path) -> tuple[dict[str, dict], list[str], str]:
    """A journal's finished points (key -> row), its whole lines, and a note when it cannot be
    reused (absent, another version, not a journal)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        return {}, [], f"no journal at {short_path(path)} yet: every point is computed"
    except OSError as exc:
        raise SpecError(f"{short_path(path)}: cannot read: {exc.strerror or exc}") from None
    lines = text.split("\n")
    try:
        first = json.loads(lines[0])
    except ValueError:
        first = None
    if first != header():
        return (
            {},
            [],
            f"{short_path(path)} is not a journal of planner {__version__}: every point is recomputed",
        )
    done, kept = {}, []
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("key"), str)
            and isinstance(entry.get("row"), dict)
        ):
            done[entry["key"]] = entry["row"]
            kept.append(line)
    return done, kept, ""
