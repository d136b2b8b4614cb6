"""planner.calibration.cases.cases keeps what it built for a runs file: the same bytes give the same
cases again (a new list each call), changed bytes or a rewritten data file build them anew, and a
file that cannot be read is never kept."""

from __future__ import annotations

import os

import pytest
import yaml

from planner.calibration import cases as cases_module
from planner.calibration.cases import cases
from planner.inputs.errors import SpecError


def _run(run_id: str, tokens: float) -> dict:
    return {
        "id": run_id,
        "source": {"title": "Example source, a table"},
        "model": {
            "name": "dense",
            "num_layers": 8,
            "hidden_size": 1024,
            "ffn_hidden_size": 4096,
            "num_attention_heads": 16,
            "vocab_size": 32000,
            "seq_length": 2048,
        },
        "hardware": {"gpu": "H100", "total_gpus": 8},
        "parallel": {"tp": 2, "pp": 1, "global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16"},
        "measured": {"tokens_per_sec_per_gpu": tokens},
    }


def test_same_bytes_give_the_same_cases_in_a_new_list(tmp_path):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [_run("r1", 1000.0)]}))
    first = cases(path)
    second = cases(path)
    assert second == first and second is not first and second[0] is first[0]
    second.append(second[0])  # a caller's list is its own
    assert len(cases(path)) == 1
    assert cases(str(path)) == first  # a str names the same file


def test_changed_bytes_build_the_cases_anew(tmp_path):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [_run("r1", 1000.0)]}))
    assert cases(path)[0].measured_tokens_per_s_per_gpu == 1000.0
    path.write_text(yaml.safe_dump({"runs": [_run("r1", 2000.0)]}))  # same size, other bytes
    assert cases(path)[0].measured_tokens_per_s_per_gpu == 2000.0


def test_a_rewritten_data_file_builds_the_cases_anew(tmp_path, monkeypatch):
    """The key fingerprints the data files (here a stand-in folder of one file): touching one, as
    scripts/calibrate.py --write rewrites a GPU profile, misses the cache."""
    data = tmp_path / "data"
    data.mkdir()
    profile = data / "gpu.yaml"
    profile.write_text("a: 1\n")
    monkeypatch.setattr(cases_module, "DATA_FILES", (data,))
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [_run("r1", 1000.0)]}))
    key = cases_module._cache_key(path)
    stat = profile.stat()
    os.utime(profile, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cases_module._cache_key(path) != key
    first = cases(path)
    assert cases(path)[0] is first[0]
    profile.write_text("a: 22\n")
    again = cases(path)
    assert again[0] is not first[0] and again == first  # rebuilt (the stand-in feeds no case)


def test_an_unreadable_file_is_an_error_each_time_and_never_kept(tmp_path):
    missing = tmp_path / "absent.yaml"
    for _ in range(2):
        with pytest.raises(SpecError, match="absent.yaml"):
            cases(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs: 3\n")
    for _ in range(2):
        with pytest.raises(SpecError, match="key 'runs': expected a list of runs"):
            cases(bad)
    assert all(key[0] not in (str(missing), str(bad.resolve())) for key in cases_module._CASES)


def test_at_most_cached_files_files_are_kept(tmp_path):
    for i in range(cases_module.CACHED_FILES + 2):
        path = tmp_path / f"runs{i}.yaml"
        path.write_text(yaml.safe_dump({"runs": [_run(f"r{i}", 1000.0)]}))
        cases(path)
    assert len(cases_module._CASES) <= cases_module.CACHED_FILES
