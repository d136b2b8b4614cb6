"""Memory validation: measured vs predicted rows, summary, headroom default, measure_memory without GPU."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

from planner.memory_validation import GIB, HEADROOM_GIB_DEFAULT, MemoryRow, summarize

ROOT = Path(__file__).resolve().parent.parent


def test_summary_figures():
    rows = [
        MemoryRow("a", "reserved", 80 * GIB, 60 * GIB),
        MemoryRow("b", "torch.cuda.max_memory_allocated", 50 * GIB, 55 * GIB),
        MemoryRow("c", "reserved", 40 * GIB, 40 * GIB),
    ]
    s = summarize(rows)
    assert s["n"] == 3 and s["n_reserved"] == 2
    assert abs(s["max_abs_error"] - 0.25) < 1e-12
    assert abs(s["median_abs_error"] - 0.1) < 1e-12
    assert abs(s["median_signed_error"] - 0.0) < 1e-12
    assert abs(s["excess_p90_gib"] - 20.0) < 1e-12
    assert abs(s["reserved_excess_p90_gib"] - 20.0) < 1e-12


def test_search_headroom_default_is_the_documented_constant():
    cli_app = importlib.import_module("planner.cli.app")

    default = inspect.signature(cli_app.search).parameters["headroom_gib"].default
    assert default == HEADROOM_GIB_DEFAULT


def test_measure_memory_without_cuda(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("measure_memory", ROOT / "scripts" / "measure_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mod.main([]) == 0
    out = capsys.readouterr().out
    assert "nothing measured" in out


def test_measure_memory_torch_without_cuda_device(monkeypatch, capsys):
    """The no-device branch, with a stand-in torch whose CUDA is unavailable."""
    import sys
    import types

    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    spec = importlib.util.spec_from_file_location("measure_memory", ROOT / "scripts" / "measure_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([]) == 0
    assert "no CUDA device present" in capsys.readouterr().out
