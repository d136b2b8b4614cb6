"""scripts/validate_exports.py: the frameworks' own validation of exported plans (runs only where
the framework environment is installed), and the script's bookkeeping with a stand-in validator."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "validate_exports.py"


@pytest.fixture(scope="module")
def ve():
    spec = importlib.util.spec_from_file_location("validate_exports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["validate_exports"] = module
    spec.loader.exec_module(module)
    return module


def test_cases_cover_the_issue_list(ve):
    names = {c.name for c in ve.CASES}
    assert len(ve.CASES) >= 20
    for needed in ("interleaved", "zb-h1", "cp", "fp8", "tp1", "pp1", "uneven-405b", "moe-qwen3-ep"):
        assert needed in names
    assert {"sharding-none", "sharding-distributed", "sharding-zero2", "sharding-full"} <= names


class _Stub:
    """Accepts every torchtitan export and rejects Megatron ones, recording what it was given."""

    def __init__(self):
        self.calls = []

    def validate_megatron(self, argv, env, gpu_arch=9):
        self.calls.append(("megatron", argv))
        self.gpu_arch = gpu_arch
        return {"accepted": False, "stage": "validate_args", "error": "stub rejection", "overridden": []}

    def validate_torchtitan(self, toml_path, overrides):
        self.calls.append(("torchtitan", Path(toml_path).read_text()))
        return {"accepted": True, "stage": "parse", "error": None, "overridden": []}


def test_rows_and_tally_with_a_stub(ve, tmp_path):
    stub = _Stub()
    case = next(c for c in ve.CASES if c.name == "dense-8b")
    zb = next(c for c in ve.CASES if c.name == "zb-h1-eager")
    rows = [ve.validate(c, f, stub, tmp_path) for f in ("megatron", "torchtitan") for c in (case, zb)]
    status = {(r["framework"], r["case"]): r["status"] for r in rows}
    assert status[("megatron", "dense-8b")] == "rejected"
    assert status[("megatron", "zb-h1-eager")] == "skipped"  # Megatron has no zb-h1: not searched
    assert status[("torchtitan", "zb-h1-eager")] == "accepted"
    assert any(kind == "torchtitan" and "InterleavedZeroBubble" in text for kind, text in stub.calls)
    assert "--tensor-model-parallel-size" in next(a for k, a in stub.calls if k == "megatron")
    t = ve.tally(rows)
    assert t["megatron"]["rejected"] == 1 and t["torchtitan"]["accepted"] == 2
    assert stub.gpu_arch == 9  # an H100 plan: validate_args is told Hopper
    blackwell = next(c for c in ve.CASES if c.name == "fp8-mxfp8-b200")
    ve.validate(blackwell, "megatron", stub, tmp_path)
    assert stub.gpu_arch == 10  # a B200 plan: Blackwell (no CUDA_DEVICE_MAX_CONNECTIONS rule)


@pytest.mark.slow  # megatron-core's and torchtitan's own validation, where installed (docs/ci.md)
def test_frameworks_accept_the_exports(ve):
    validators = ve.load_validators()
    if validators is None:
        pytest.skip("framework environment (megatron-core, torchtitan) not installed")
    assert ve.main(["--cases", "dense-8b,zb-h1-eager,moe-qwen3-ep,recompute-op"]) == 0


def test_a2a_overlap_case_launches_with_several_queues(ve):
    """The case Megatron-Core's validate_args checks with the all-to-all overlap and tp 2 on H100
    gets the environment the launch script sets (CUDA_DEVICE_MAX_CONNECTIONS=8, not 1)."""
    case = next(c for c in ve.CASES if c.name == "moe-a2a-overlap-tp2")
    inputs, why = ve.plan_for(case, "megatron")
    assert inputs is not None, why
    assert inputs.config.tp == 2 and inputs.config.ep == 8
    argv, env = ve.megatron_launch(inputs)
    assert "--overlap-moe-expert-parallel-comm" in argv
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"


class _ParserStub:
    """Refuses an argv holding a word no flag takes (as Megatron's parse_args exits), else accepts."""

    def validate_megatron(self, argv, env, gpu_arch=9):
        stray = [w for w in argv if w == "1M:64"]
        return {
            "accepted": not stray,
            "stage": "parse_args",
            "error": "unrecognized arguments" if stray else None,
        }


def test_imported_launches_agree_with_a_stand_in_parser(ve, tmp_path):
    """Each launch of LAUNCHES run by bash (stub torchrun recording the argv): planner reads the argv
    bash passes, and check's verdict matches the stand-in's; Megatron itself judges it where
    megatron-core is installed (python scripts/validate_exports.py --launches)."""
    if ve.bash_argv({"x.sh": "true\n"}, "x.sh", tmp_path) == "bash is not installed":
        pytest.skip("bash is not installed")
    rows = [ve.validate_launch(name, _ParserStub(), tmp_path) for name in ve.LAUNCHES]
    assert [r["status"] for r in rows] == ["agreed"] * len(ve.LAUNCHES), rows
    assert "planner check refuses" in rows[-1]["plan"] and "megatron refuses" in rows[-1]["plan"]
    assert ve.tally(rows)["megatron-import"] == {"agreed": len(ve.LAUNCHES), "disagreed": 0, "skipped": 0}
