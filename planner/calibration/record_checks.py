"""The calibration set's records checked before a case is built from them: each record's sections
are mappings and the integer fields the case builder computes with are positive, bounded integers,
the required ones given, with errors naming the file, the run and the key. Both readers of a runs
file use it: the validation scripts' :func:`planner.calibration.cases.cases` and ``planner
calibrate``'s runs YAML (planner.calibration.user.sources), so a record reads the same in both."""

from __future__ import annotations

from planner.inputs.errors import SpecError
from planner.inputs.validation import check_number, limit, printable

RUN_NUMBERS = {
    "model": (
        ("num_layers", True),
        ("hidden_size", True),
        ("num_attention_heads", True),
        ("ffn_hidden_size", False),
        ("num_query_groups", False),
        ("vocab_size", False),
        ("seq_length", False),
    ),
    "hardware": (("total_gpus", True), ("gpus_per_node", False)),
    "parallel": (
        ("tp", False),
        ("pp", False),
        ("dp", False),
        ("cp", False),
        ("ep", False),
        ("vpp", False),
        ("micro_batch_size", False),
        ("global_batch_size", False),
    ),
}
"""The integer fields of a run record the case builder computes with (planner.calibration.cases):
(key, required). Required ones must be given; the others may be null ("not published")."""

RUN_BOUNDS = {"total_gpus": "tp"}
"""Keys bounded as another key of planner.inputs.validation.LIMITS (a GPU count as a degree)."""


def check_run_records(doc: dict, where: str) -> None:
    """Each record of a runs YAML has its sections as mappings and the integer fields the case
    builder computes with (:data:`RUN_NUMBERS`) as positive, bounded integers, required ones
    given, with errors naming the run and the key: ``num_attention_heads: null`` was a
    ``TypeError`` (``int // NoneType``) in the message before, in ``planner calibrate`` and the
    validation scripts alike."""
    runs = doc.get("runs")
    if not isinstance(runs, list):
        return  # planner.calibration.cases words a file without a runs list
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            continue
        label = f"{where}: runs[{i}] (id {printable(str(run.get('id', '?')))!r})"
        if not isinstance(run.get("id"), str):
            raise SpecError(f"{label}: key 'id': expected a string naming the run")
        hw = run.get("hardware")
        if isinstance(hw, dict) and not isinstance(hw.get("gpu"), str):
            raise SpecError(f"{label}: key 'hardware.gpu': expected a GPU name, got {hw.get('gpu')!r}"[:300])
        for section, fields in RUN_NUMBERS.items():
            if section not in run:
                continue  # a missing section: planner.calibration.cases words it, as for the scripts
            data = run.get(section)
            if not isinstance(data, dict):
                raise SpecError(f"{label}: key '{section}': expected a mapping, got {type(data).__name__}")
            for key, required in fields:
                if key not in data:
                    continue  # a missing key: planner.calibration.cases words it
                value = data.get(key)
                if value is None:
                    if required:
                        raise SpecError(f"{label}: key '{section}.{key}': required, got null or nothing")
                    continue
                check_number(
                    value,
                    label,
                    f"{section}.{key}",
                    integer=True,
                    positive=True,
                    maximum=limit(RUN_BOUNDS.get(key, key)),
                )
