"""``planner check --arg``: a launch script's positional parameters, as ``bash SCRIPT ARG ...``
binds them (bash(1) "Positional Parameters"). Each fixture is compared with the argv bash gives a
stub torchrun when run with the same arguments; without ``--arg`` a script that requires them stops
where bash stops."""

import shutil
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.functions import positional_parameters
from tests.conftest import bash_argv

BASH = shutil.which("bash")

# The shape of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh: paths as $1 ... $5.
SCRIPT = """#!/bin/bash
if [ "$#" -lt 2 ]; then
  echo "usage: $0 TP CHECKPOINT_PATH [PP]" >&2
  exit 1
fi
TP=$1
CHECKPOINT_PATH=$2
PP=${3:-1}
torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size "$TP" \\
  --pipeline-model-parallel-size "$PP" --save "$CHECKPOINT_PATH" --load "$CHECKPOINT_PATH" "$#" "$@"
"""


def _bash(tmp_path, args: list[str]) -> list[str] | None:
    script = tmp_path / "launch.sh"
    script.write_text(SCRIPT)
    return bash_argv(script, tmp_path, args)[0]


def _planner(tmp_path, args: list[str]) -> list[str]:
    path = tmp_path / "launch.sh"
    path.write_text(SCRIPT)
    words, _, _ = megatron_words(SCRIPT, positional_parameters(args), path)
    return [w for w, _ in words]


ARGS = {
    "two": ["4", "/ckpt/run a"],
    "three": ["2", "/ckpt", "4"],
}


@pytest.mark.parametrize("name", sorted(ARGS))
def test_arguments_bind_as_positional_parameters(name, tmp_path):
    words = _planner(tmp_path, ARGS[name])
    assert words[:2] == ["--tensor-model-parallel-size", ARGS[name][0]]
    assert words[words.index("--save") + 1] == ARGS[name][1]
    assert words[words.index("--load") + 2 :] == [str(len(ARGS[name])), *ARGS[name]]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(ARGS))
def test_arguments_agree_with_bash(name, tmp_path):
    assert _planner(tmp_path, ARGS[name]) == _bash(tmp_path, ARGS[name])


def test_without_arguments_the_script_stops_where_bash_does(tmp_path):
    with pytest.raises(SpecError, match=r"^no launch found: the script stops on line 4\b.*exit 1"):
        _planner(tmp_path, [])
    if BASH is not None:
        assert _bash(tmp_path, []) is None


def test_check_cli_takes_arg(run_cli, tmp_path):
    """``--arg`` values are the script's $1 ...: the verdict is the one of the script with them
    written in; without them the script stops at its usage check (exit 1, no traceback)."""
    import json

    model = (
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --vocab-size 32000 --bf16"
    )
    path = tmp_path / "launch.sh"
    path.write_text(SCRIPT.replace('"$#" "$@"', model))
    literal = tmp_path / "literal.sh"
    literal.write_text(SCRIPT.replace('"$#" "$@"', model).replace('"$TP"', "4").replace('"$PP"', "2"))
    base = ["--cluster", "dgx-h100", "--nodes", "2", "--json"]
    res = run_cli("check", str(path), *base)
    assert res.exit_code == 1 and "no launch found" in res.stdout and "Traceback" not in res.stderr
    given = run_cli("check", str(path), *base, "--arg", "4", "--arg", "/ckpt", "--arg", "2")
    written = run_cli("check", str(literal), *base, "--arg", "x", "--arg", "/ckpt")
    assert "Traceback" not in given.stderr + written.stderr, given.stderr
    metrics = [json.loads(r.stdout)["configs"][0]["metrics"] for r in (given, written)]
    assert metrics[0]["step_time_s"] == metrics[1]["step_time_s"]
    assert metrics[0]["peak_memory_bytes"] == metrics[1]["peak_memory_bytes"]
    other = json.loads(run_cli("check", str(path), *base, "--arg", "2", "--arg", "/ckpt").stdout)
    assert other["configs"][0]["metrics"]["step_time_s"] != metrics[0]["step_time_s"]


def test_arg_is_refused_for_a_bridge_recipe(run_cli):
    recipe = Path(__file__).parent / "data" / "bridge_recipes" / "llama3_h100.py"
    res = run_cli("check", str(recipe), "--cluster", "dgx-h100", "--nodes", "1", "--arg", "1")
    assert res.exit_code == 2 and "--arg" in res.stderr and "Traceback" not in res.stderr
