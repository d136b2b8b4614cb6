"""Paths as a launch script computes them, without running anything: the directory idioms scripts
use to find the files beside them (``SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)``,
``WORKSPACE=$(dirname "$(readlink -f "$0")")``, as the Megatron MoE Model Zoo's
``sbatch_benchmarking.sh`` writes it), ``cd``, and the file tests of ``if [ -f FILE ]``.

Planner takes a script to run from its own directory (the working directory bash resolves a
relative path against is not in the script; a launch is normally run from beside its files), so
``$0`` and ``${BASH_SOURCE[0]}`` are the script's path and ``$PWD`` its directory until a ``cd``.
Each function here is pure string work on words already expanded by :mod:`.shell`, except
:func:`path_test`, which looks at the file system, and only inside the script's own directory.
"""

from __future__ import annotations

import os
import posixpath

from planner.launch.megatron.shell_text import redirections


def joined(pwd: str | None, path: str) -> str | None:
    """``path`` made absolute against the working directory ``pwd`` (None when it is relative and
    ``pwd`` is not known), normalised as bash's ``cd`` does with ``-L`` (``a/../b`` is ``b``)."""
    if posixpath.isabs(path):
        return posixpath.normpath(path)
    if pwd is None or not posixpath.isabs(pwd):
        return None
    return posixpath.normpath(posixpath.join(pwd, path))


def dirname(path: str) -> str:
    """What dirname(1) prints: ``path`` without its last component and trailing slashes (``.``
    for a bare name, ``/`` for the root)."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/" if path else "."
    head = posixpath.dirname(stripped).rstrip("/")
    return head or ("/" if stripped.startswith("/") else ".")


def path_command(words: list[str], pwd: str | None) -> str | None:
    """The output of a command substitution that only computes a path, from its words (expanded,
    every one determined), or None for any other command (planner runs none):

    - ``pwd`` (``-L``/``-P``): ``pwd``;
    - ``dirname [--] PATH``: dirname(1);
    - ``readlink -f|-e|-m PATH``, ``realpath PATH``: the absolute path, links resolved on this
      machine (os.path.realpath);
    - ``cd [-P|-L] [--] DIR && pwd [-P]``: DIR made absolute (links resolved with ``-P``).

    Redirections (``&> /dev/null``, ``2>&1``) change no output of these and are dropped."""
    dropped = redirections(words)
    words = [w for k, w in enumerate(words) if k not in dropped]
    if not words:
        return None
    name, args = words[0], words[1:]
    if name == "pwd" and set(args) <= {"-L", "-P"}:
        return pwd if pwd is not None and posixpath.isabs(pwd) else None
    if name == "dirname":
        args = [a for a in args if a != "--"]
        return dirname(args[0]) if len(args) == 1 else None
    if (name == "readlink" and len(args) == 2 and args[0] in ("-f", "-e", "-m")) or (
        name == "realpath" and len(args) == 1
    ):
        full = joined(pwd, args[-1])
        return os.path.realpath(full) if full is not None else None
    if name == "cd" and "&&" in args:
        k = args.index("&&")
        target = [a for a in args[:k] if a not in ("-L", "--")]
        physical = "-P" in target
        target = [a for a in target if a != "-P"]
        after = args[k + 1 :]
        if len(target) != 1 or not after or after[0] != "pwd" or not set(after[1:]) <= {"-L", "-P"}:
            return None
        full = joined(pwd, target[0])
        if full is None:
            return None
        return os.path.realpath(full) if physical or "-P" in after else full
    return None


def inside(path: str, root: str) -> bool:
    """Whether ``path`` (absolute), links resolved, lies in the directory ``root``."""
    real = os.path.realpath(path)
    return os.path.commonpath([real, root]) == root


PATH_TESTS = ("-e", "-a", "-f", "-d", "-r", "-s")
"""test(1) file operators :func:`path_test` answers."""


def path_test(op: str, path: str, pwd: str | None, root: str | None) -> bool | None:
    """test(1)'s ``-e``/``-a`` (exists), ``-f`` (regular file), ``-d`` (directory), ``-r``
    (readable), ``-s`` (non-empty file) on ``path``, answered only for a path inside the script's
    directory ``root`` (the files given with it); None elsewhere (a file on the cluster, not on
    this machine) and when the working directory a relative path needs is not known."""
    full = joined(pwd, path) if root is not None else None
    if full is None or not inside(full, root):
        return None
    if op in ("-e", "-a"):
        return os.path.exists(full)
    if op == "-f":
        return os.path.isfile(full)
    if op == "-d":
        return os.path.isdir(full)
    if op == "-r":
        return os.access(full, os.R_OK)
    return os.path.isfile(full) and os.path.getsize(full) > 0
