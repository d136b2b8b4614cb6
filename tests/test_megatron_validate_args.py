"""Optional: run Megatron-LM's own argument validation on exported plans (needs megatron-core and torch;
skipped otherwise, e.g. in CI). ../shared/reference/megatron-args.md §3: megatron-core >= 0.19.2 ships
megatron/training/arguments.py."""

import sys

import pytest

pytest.importorskip("torch")
arguments = pytest.importorskip("megatron.training.arguments")

from planner.launch.megatron.export_args import megatron_args  # noqa: E402
from tests.test_megatron import CASES  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_args_pass_megatron_validation(name, monkeypatch):
    plan = CASES[name]()
    argv = ["pretrain_gpt.py"]
    for flag, value in megatron_args(plan):
        argv += [flag] if value is None else [flag, value]
    argv += ["--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "10", "--lr", "1e-4"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("WORLD_SIZE", str(plan.config.world_size))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    args = arguments.parse_args()
    arguments.validate_args(args)
    assert args.data_parallel_size == plan.config.dp
