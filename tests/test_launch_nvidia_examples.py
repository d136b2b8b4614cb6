"""Megatron-LM's own example launches, imported end to end: the files under
tests/data/megatron/nvidia_d98e8a64/ are copies of github.com/NVIDIA/Megatron-LM at commit
d98e8a64 (each names its path in a comment at its top; the scripts are the user's input).

``examples/llama/train_llama3_8b_h100_fp8.sh`` checks ``[ ! -f "$PRETRAIN_SCRIPT_PATH" ]`` (a
relative ``pretrain_gpt.py``: run from the Megatron-LM checkout) and echoes the file's name before
``exit 1``; ``examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh`` submits ``srun ... bash -x -c
"${TRAINING_CMD}"`` through ``sbatch <<EOF``, the string ``cd ...; git rev-parse HEAD; export
...; python .../pretrain_gpt.py ...`` over several lines."""

from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.importer import parse_megatron

DATA = Path(__file__).parent / "data" / "megatron" / "nvidia_d98e8a64"
LLAMA = DATA / "train_llama3_8b_h100_fp8.sh"
DEEPSEEK = DATA / "sbatch_mfsdp_deepseek_v3.sh"


def _import(path: Path, gpus: int, **variables: str):
    return parse_megatron(path.read_text(), str(path), gpus, variables=variables, path=path)


def test_llama3_8b_fp8_run_from_the_checkout_imports_its_launch():
    """``--set PWD=/opt/megatron-lm`` (a directory on the cluster): the file test is not answered
    and the torchrun is read: the script's fixed layout (tp 1, cp 1, no pp flag), mbs 1, gbs 128,
    seq 8192, 32 layers, fp8 with the mock-data branch's NullTokenizer and --vocab-size 128256."""
    imported = _import(LLAMA, 8, PWD="/opt/megatron-lm")
    c = imported.config
    assert (c.tp, c.pp, c.cp, c.vpp, c.micro_batch_size) == (1, 1, 1, 1, 1)
    assert (imported.job.global_batch_size, imported.job.seq_length) == (128, 8192)
    assert imported.model.num_layers == 32 and imported.model.vocab_size == 128256
    assert imported.job.precision == "fp8" and c.recompute == "none"
    assert imported.flag_lines["--num-layers"] == 189  # the torchrun line (two comment lines added)


def test_llama3_8b_fp8_from_its_own_directory_names_the_missing_file():
    """Run from its own directory (planner's default), pretrain_gpt.py is not there: the script
    stops on its exit 1, as bash would, and the message names the file and --set PWD."""
    with pytest.raises(SpecError, match=r"stops on line 185 \(exit 1\).*no pretrain_gpt.py.*--set PWD=DIR"):
        _import(LLAMA, 8)


def test_deepseek_v3_fsdp_imports_its_bash_x_c_launch():
    """The job script's ``bash -x -c`` string: 61 layers (3 dense, 58 MoE of 256 experts), ep 8,
    mbs 4, gbs 2048, seq 4096, selective recompute of the four modules the script names, the
    distributed optimizer (Megatron-FSDP's optim_grads_params sharding), the flex dispatcher with
    HybridEP; the tokenizer deepseek-ai/DeepSeek-V3 (129,280, tokenizers.yaml)."""
    imported = _import(DEEPSEEK, 256)
    c = imported.config
    assert (c.tp, c.pp, c.ep, c.cp, c.vpp, c.micro_batch_size) == (1, 1, 8, 1, 1, 4)
    assert (imported.job.global_batch_size, imported.job.seq_length) == (2048, 4096)
    assert imported.model.num_layers == 61 and imported.model.num_experts == 256
    assert c.recompute == "selective"
    assert set(c.recompute_modules) == {"layernorm", "mla_up_proj", "mlp", "moe"}
    assert imported.model.vocab_size == 129280 and imported.job.precision == "bf16"
    assert imported.job.moe_dispatcher == "flex"
    assert imported.flags["--moe-flex-dispatcher-backend"] == "hybridep"
    assert imported.flag_lines["--num-layers"] == 205  # the sbatch line


def test_deepseek_v3_fsdp_checks_end_to_end(run_cli):
    """``planner check`` on 32 DGX B200 nodes: the launch is read whole (no parse or flag error)."""
    result = run_cli("check", str(DEEPSEEK), "--cluster", "dgx-b200", "--nodes", "32")
    assert "error: parse" not in result.stdout and "error: megatron" not in result.stdout
    assert "predicted" in result.stdout
