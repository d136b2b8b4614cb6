"""scripts/validate_published.py's per-run table (``--table``), built from a finished run's JSON
(``--from-json``): one row per predicted run in the runs file's order, signed errors, each run's
class, and a JSON of another runs file refused in one line. The committed table,
docs/data/calibration_runs.csv, is of the calibration set as it is (docs/calibration.md)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "data" / "calibration_runs.csv"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "validate_published", ROOT / "scripts" / "validate_published.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def all_cases(script):
    return script.cases(script.DEFAULT_RUNS)


def _run_json(all_cases, in_sample: float, held_out: float) -> dict:
    """A --json output whose every prediction is ``in_sample`` (held out: ``held_out``) times the
    measured figure; the folds predict the counted runs only, as leave_one_source_out does."""
    from planner.calibration.cases import excluded_reason

    runs = [c for c in all_cases if not c.skip_reason]
    return {
        "runs": [
            {
                "id": c.run_id,
                "measured_tokens_per_s_per_gpu": c.measured_tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": c.measured_tokens_per_s_per_gpu * in_sample,
            }
            for c in runs
        ],
        "leave_one_source_out": {
            "runs": [
                {
                    "id": c.run_id,
                    "source": c.source,
                    "measured_tokens_per_s_per_gpu": c.measured_tokens_per_s_per_gpu,
                    "predicted_tokens_per_s_per_gpu": c.measured_tokens_per_s_per_gpu * held_out,
                }
                for c in runs
                if not excluded_reason(c.run_id)
            ]
        },
    }


def test_the_table_has_one_row_per_predicted_run_with_signed_errors(
    script, all_cases, tmp_path, monkeypatch, capsys
):
    source = tmp_path / "run.json"
    source.write_text(json.dumps(_run_json(all_cases, 1.1, 0.8)))
    out = tmp_path / "runs.csv"
    monkeypatch.setattr(
        "sys.argv", ["validate_published.py", "--from-json", str(source), "--table", str(out)]
    )
    assert script.main() == 0
    text = out.read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert tuple(rows[0]) == script.TABLE_COLUMNS
    assert [r["id"] for r in rows] == [c.run_id for c in all_cases if not c.skip_reason]
    assert {r["in_sample_error_pct"] for r in rows} == {"+10.00"}
    counted = [r for r in rows if r["counted"] == "yes"]
    assert {r["held_out_error_pct"] for r in counted} == {"-20.00"}
    assert {r["held_out_error_pct"] for r in rows if r["counted"] == "no"} == {""}
    by_id = {r["id"]: r for r in rows}
    # classes: family x precision x dense/MoE x framework (none where the record names none)
    assert by_id["narayanan2021_t1_gpt1.7b"]["class"] == "a100 fp16 dense"
    assert by_id["mbridge2511_h100_bf16_gptoss120b_64gpu"]["class"] == "h100 bf16 moe megatron"
    printed = capsys.readouterr().out
    assert f"held out: runs {len(counted)}   median abs error 20.00%" in printed
    assert "signed median -20.00%" in printed
    # the same predictions give the same bytes
    again = tmp_path / "again.csv"
    in_sample, held_out = script.predictions_from_json(source, all_cases)
    frameworks = script.run_frameworks(script.DEFAULT_RUNS)
    script.write_table(again, script.table_rows(all_cases, frameworks, in_sample, held_out))
    assert again.read_text() == text


def test_a_json_of_another_runs_file_is_refused_in_one_line(script, all_cases, tmp_path, monkeypatch, capsys):
    data = _run_json(all_cases, 1.0, 1.0)
    data["runs"][0]["measured_tokens_per_s_per_gpu"] *= 2
    source = tmp_path / "run.json"
    source.write_text(json.dumps(data))
    out = tmp_path / "runs.csv"
    monkeypatch.setattr(
        "sys.argv", ["validate_published.py", "--from-json", str(source), "--table", str(out)]
    )
    assert script.main() == 1
    err = capsys.readouterr().err
    assert err.startswith(f"validate_published: {source}: run ") and "another runs file" in err
    assert not out.exists()


def test_the_committed_table_is_of_the_calibration_set(all_cases):
    """Every predicted run of tests/data/published_runs.yaml has its row, with its measured figure,
    and every counted run its held-out prediction: a run added or changed without regenerating the
    table (docs/calibration.md says how) fails here."""
    rows = list(csv.DictReader(TABLE.read_text().splitlines()))
    predicted = [c for c in all_cases if not c.skip_reason]
    assert [r["id"] for r in rows] == [c.run_id for c in predicted]
    for r, c in zip(rows, predicted):
        assert r["measured_tokens_per_s_per_gpu"] == f"{c.measured_tokens_per_s_per_gpu:.1f}", c.run_id
        assert bool(r["held_out_error_pct"]) == (r["counted"] == "yes"), c.run_id


def test_loso_steps_are_the_documented_coarse_ones_or_the_shipped_fits(script):
    """--loso-steps coarse (the default: the documented held-out figures) or shipped (the shipped
    fit's own 8 passes of descent.STEPS, docs/calibration.md 'Accuracy, held out')."""
    import inspect

    from planner.calibration.descent import STEPS
    from planner.calibration.fitting import fit_families
    from planner.calibration.folds import LOSO_STEPS

    defaults = inspect.signature(fit_families).parameters
    assert script.LOSO_DESCENT["shipped"] == {
        "passes": defaults["passes"].default,
        "steps": defaults["steps"].default,
    }
    assert script.LOSO_DESCENT["shipped"]["steps"] == STEPS
    assert script.LOSO_DESCENT["coarse"] == {"passes": 4, "steps": LOSO_STEPS}
