"""The Megatron MoE Model Zoo's own benchmarking launch, imported end to end: the files under
tests/data/megatron/zoo_e8650517/ are copies of github.com/yanring/Megatron-MoE-ModelZoo at commit
e8650517 (``sbatch_benchmarking.sh``, its runtime and cluster configs and the Qwen3-30B-A3B model
config; each names its path in a comment at its top). The script takes its layout from calling
``set_model_configs`` in runtime.conf (``declare -A``, ``local -n``, ``[[ -v ]]``), fills the model
YAML with envsubst, turns it into flags with yq and submits the training command through
``sbatch <<EOF`` / ``srun bash -c \\${TRAINING_CMD}``.

The user sets what the Zoo says a user sets: MODEL (the script's "must be set" block; the others
there have defaults), and the data and checkpoint paths, which the template cluster config leaves
empty for this model ("YOUR_DATA_PATH"; planner's yq reader refuses the null they leave in the
YAML)."""

import json
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.importer import parse_megatron

ZOO = Path(__file__).parent / "data" / "megatron" / "zoo_e8650517" / "sbatch_benchmarking.sh"
USER = {"MODEL": "Qwen3-30B-A3B", "DATA_PATH": "/data/qwen3", "LOAD_PATH": "/ckpt/qwen3"}
SETS = [w for name, value in USER.items() for w in ("--set", f"{name}={value}")]


def _import(**extra: str):
    return parse_megatron(ZOO.read_text(), str(ZOO), 32, variables={**USER, **extra}, path=ZOO)


def test_the_zoo_launch_imports_to_its_documented_layout():
    """runtime.conf's row for the model: ``[Qwen3-30B-A3B]="1 1 8 1 1 1 256 48 alltoall true 4
    00:20:00 0 4096 CustomDataset"`` (TP PP EP CP VPP MBS GBS LAYERS DISPATCHER GROUPED_GEMM NNODES
    ...), no recompute in the model config. The dispatcher the job runs is the script's: the YAML
    gives ``--moe-token-dispatcher-type alltoall`` (the row's), then the script appends its
    DISPATCHER default (deepep) as ``flex`` with the deepep backend, and Megatron's argparse keeps
    the last occurrence."""
    imported = _import()
    c = imported.config
    assert (c.tp, c.pp, c.ep, c.cp, c.vpp, c.micro_batch_size) == (1, 1, 8, 1, 1, 1)
    assert imported.job.global_batch_size == 256 and imported.job.seq_length == 4096
    assert c.recompute == "none" and c.recompute_modules == ()
    assert imported.model.num_layers == 48 and imported.model.num_experts == 128
    assert imported.job.moe_dispatcher == "flex"
    assert imported.flags["--moe-flex-dispatcher-backend"] == "deepep"
    assert imported.flags["--moe-grouped-gemm"] is None  # the row's GROUPED_GEMM true, a switch
    assert imported.job.precision == "bf16" and imported.job.tp_comm_overlap  # PR=bf16's flag
    assert imported.flag_lines["--num-layers"] == 214  # the sbatch line that submits the job


def test_the_environment_overrides_the_row_as_the_script_reads_it():
    """``export TP=${TP:-${config[0]}}`` in the function: the environment wins; VPP 2 makes the
    function compute LAYERS_PER_VP = 48 / 4 / 2, which the YAML passes, and the script's ``=~``
    test then adds no second virtual-stage flag."""
    imported = _import(PP="4", VPP="2", DISPATCHER="alltoall")
    assert (imported.config.pp, imported.config.vpp) == (4, 2)
    assert imported.flags["--num-layers-per-virtual-pipeline-stage"] == "6"
    assert "--num-virtual-stages-per-pipeline-rank" not in imported.flags
    assert imported.job.moe_dispatcher == "alltoall"


def test_without_model_the_error_names_the_line():
    """MODEL left at the script's placeholder: runtime.conf's set_model_configs finds no config of
    that name and returns 1, and the script's ``set -euxo pipefail`` stops it there, as bash does
    (it prints "Error: Invalid model your_own_model." and exits): no launch, the error naming the
    line, the sourced file and the set -e."""
    with pytest.raises(
        SpecError,
        match=r"no launch found: the script stops on line 79 \(in .*runtime\.conf, sourced on line 19\) "
        r"\(set -e \(line 4\) and 'set_model_configs BENCHMARKING_MODEL_CONFIGS your_own_model' fails\)",
    ):
        parse_megatron(ZOO.read_text(), str(ZOO), 32, variables={}, path=ZOO)


def test_planner_check_on_the_zoo_launch(run_cli):
    """``planner check`` with only the user's --set: the launch imports (no import error) on the
    Zoo's 4 nodes of 8 H100s; PR=bf16's ``--tp-comm-overlap`` at tp 1 is the one error, Megatron's
    own rule; with PR=fp8 (no --tp-comm-overlap) the launch passes."""
    args = ("check", str(ZOO), "-c", "dgx-h100", "-n", "4", "--json", *SETS)
    res = run_cli(*args)
    assert res.exit_code == 1, res.stderr
    findings = json.loads(res.stdout)["configs"][0]["findings"]
    errors = [f for f in findings if f["level"] == "error"]
    assert [(f["check"], f["line"]) for f in errors] == [("megatron", 214)]
    assert "--tp-comm-overlap" in errors[0]["flags"]
    res = run_cli(*args, "--set", "PR=fp8")
    assert res.exit_code == 0 and json.loads(res.stdout)["passed"] is True, res.stdout
