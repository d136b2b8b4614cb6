"""Megatron-Bridge's own validation of ``planner export megatron-bridge`` overrides.

For each override file given (or, with none, the export of every golden case of
tests/test_megatron.py): load the recipe its ``# recipe: module:function`` header names, merge the
file with ``process_config_with_overrides`` (megatron.bridge.training.utils.omegaconf_utils) and
run ``ConfigContainer.validate()`` with ``WORLD_SIZE`` set to the plan's GPUs, as Megatron-Bridge's
runner does before training. Needs ``megatron-bridge`` (PyPI) importable; without it, one line and
exit 2 (nothing judged). Exit 0 when every file validates, 1 otherwise.

    python scripts/validate_bridge_exports.py [OVERRIDES.yaml --world-size N ...]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RECIPE = "# recipe: "


def _cases(folder: Path) -> list[tuple[Path, int]]:
    """The golden cases' exports, written under ``folder``, with their world sizes."""
    from planner.launch.bridge import export as bx
    from planner.plans.plan_file import plan_document, read_plan, write_plan
    from tests.test_megatron import CASES

    out = []
    for name, make in sorted(CASES.items()):
        plan = make()
        path = folder / f"{name}.plan.yaml"
        write_plan(path, plan_document(plan, {}, None))
        target = folder / f"{name}.{bx.OVERRIDES_FILE}"
        target.write_text(bx.overrides_yaml(read_plan(str(path))))
        out.append((target, plan.cluster.num_gpus))
    return out


def validate(path: Path, world_size: int) -> str | None:
    """None when Megatron-Bridge accepts the file, else its error in one line."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    header = next((x for x in path.read_text().splitlines() if x.startswith(RECIPE)), None)
    if header is None:
        return f"no '{RECIPE.strip()} module:function' header"
    module, function = header[len(RECIPE) :].split(":")
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ.setdefault("RANK", "0")
    try:
        config = getattr(importlib.import_module(module), function)()
        config = process_config_with_overrides(config, config_filepath=str(path))
        config.validate()
    except Exception as exc:  # noqa: BLE001 - whatever Bridge raises is the verdict
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--world-size", type=int, default=None, help="GPUs of the files given")
    args = parser.parse_args()
    try:
        importlib.import_module("megatron.bridge.training.utils.omegaconf_utils")
    except ImportError:
        print("megatron-bridge is not installed (pip install megatron-bridge): nothing validated")
        return 2
    if args.files and args.world_size is None:
        parser.error("--world-size is needed with files")
    with tempfile.TemporaryDirectory() as tmp:
        todo = [(f, args.world_size) for f in args.files] if args.files else _cases(Path(tmp))
        failed = 0
        for path, world in todo:
            error = validate(path, world)
            failed += error is not None
            print(f"{'ok  ' if error is None else 'FAIL'} {path.name}" + (f": {error}" if error else ""))
    print(f"{len(todo) - failed} of {len(todo)} accepted by Megatron-Bridge's ConfigContainer.validate()")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
