"""``source FILE`` / ``. FILE`` in a Megatron launch script (planner/launch/megatron/shell.py,
paths.py): the file read beside the script with the same shell semantics, the directory idioms
scripts find their files with, ``cd``, file tests, and every way it can fail as a one-line error
naming the line. Each fixture is a small tree of files written here; where bash is installed the
words are compared with the argv bash itself gives a stub torchrun, run from the script's
directory."""

import os
import shutil
import subprocess

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.shell import MAX_SOURCE_DEPTH, read_script
from tests.conftest import TORCHRUN_STUB

BASH = shutil.which("bash")
SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --vocab-size 32000"
)

# Each fixture: ({path: text}, with launch.sh the script; the words pretrain_gpt.py gets from bash).
FIXTURES = {
    "source_a_file_beside_the_script": (
        {
            "launch.sh": "source env.sh\ntorchrun pretrain_gpt.py $MODEL_ARGS --lr $LR\n",
            "env.sh": 'MODEL_ARGS="--num-layers 32 --hidden-size 4096"\nLR=1e-4\n',
        },
        ["--num-layers", "32", "--hidden-size", "4096", "--lr", "1e-4"],
    ),
    "dot_and_a_subdirectory": (
        {
            "launch.sh": '. ./conf/model.sh\ntorchrun pretrain_gpt.py "${MODEL[@]}"\n',
            "conf/model.sh": 'MODEL=(--num-layers 16 "--tokenizer-model" "/my tok")\n',
        },
        ["--num-layers", "16", "--tokenizer-model", "/my tok"],
    ),
    "script_dir_idiom": (
        {
            "launch.sh": 'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'source "${SCRIPT_DIR}/conf/common.sh"\ntorchrun pretrain_gpt.py --num-layers $LAYERS\n',
            "conf/common.sh": "LAYERS=48\n",
        },
        ["--num-layers", "48"],
    ),
    "model_zoo_workspace_idiom": (
        {
            "launch.sh": 'export WORKSPACE=$(dirname "$(readlink -f "$0")")\n'
            'source "${WORKSPACE}/runtime_configs/common.conf"\n'
            "torchrun pretrain_gpt.py --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size ${PP}\n",
            "runtime_configs/common.conf": "export TP=${TP:-2}\nexport PP=${PP:-4}\n",
        },
        ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4"],
    ),
    "nested_source_finds_its_own_neighbour": (
        {
            "launch.sh": "source conf/b.sh\ntorchrun pretrain_gpt.py --num-layers $LAYERS --hidden-size $HIDDEN\n",
            "conf/b.sh": 'HIDDEN=1024\nsource "$(dirname "${BASH_SOURCE[0]}")/c.sh"\n',
            "conf/c.sh": "LAYERS=$((HIDDEN / 64))\n",
        },
        ["--num-layers", "16", "--hidden-size", "1024"],
    ),
    "sourced_file_runs_the_training_command": (
        {
            "launch.sh": "TP=2\nsource run.sh\n",
            "run.sh": "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --bf16\n",
        },
        ["--tensor-model-parallel-size", "2", "--bf16"],
    ),
    "file_tests_guard_sources": (
        {
            "launch.sh": "LAYERS=32\nif [ -f ./local.sh ]; then source ./local.sh; fi\n"
            "if [[ -e missing.sh ]]; then source missing.sh; else HIDDEN=512; fi\n"
            "torchrun pretrain_gpt.py --num-layers $LAYERS --hidden-size $HIDDEN\n",
            "local.sh": "LAYERS=8\n",
        },
        ["--num-layers", "8", "--hidden-size", "512"],
    ),
    "and_or_lists_guard_sources": (
        {
            "launch.sh": "[ -f ./local.sh ] && source ./local.sh\ntest -e missing.sh && . missing.sh\n"
            "[[ -d conf ]] || source nothere.sh\n[ -f nothere.sh ] || source conf/seq.sh\n"
            "torchrun pretrain_gpt.py --num-layers $LAYERS --seq-length $SEQ\n",
            "local.sh": "LAYERS=8\n",
            "conf/seq.sh": "SEQ=1024\n",
        },
        ["--num-layers", "8", "--seq-length", "1024"],
    ),
    "cd_then_relative_source": (
        {
            "launch.sh": "cd conf && source model.sh\ncd ..\nsource top.sh\n"
            "torchrun pretrain_gpt.py --num-layers $LAYERS --seq-length $SEQ\n",
            "conf/model.sh": "LAYERS=24\n",
            "top.sh": "SEQ=2048\n",
        },
        ["--num-layers", "24", "--seq-length", "2048"],
    ),
    "assignment_after_the_source_wins": (
        {
            "launch.sh": "source env.sh; LAYERS=12\ntorchrun pretrain_gpt.py --num-layers $LAYERS\n",
            "env.sh": "LAYERS=99\n",
        },
        ["--num-layers", "12"],
    ),
}


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(("#!/bin/bash\n" if rel == "launch.sh" else "") + text)
    return root / "launch.sh"


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_sourced_words_as_bash_gives_them(name, tmp_path):
    files, expected = FIXTURES[name]
    script = _tree(tmp_path, files)
    words, _, is_script = megatron_words(script.read_text(), path=script)
    assert is_script and [w for w, _ in words] == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_source_fixtures_agree_with_bash(name, tmp_path):
    """The expected words are what bash passes, the script run from its own directory (a stub
    torchrun prints its argv after the .py)."""
    files, expected = FIXTURES[name]
    script = _tree(tmp_path / "job", files)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "torchrun"
    stub.write_text(TORCHRUN_STUB)
    stub.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run(
        [BASH, str(script)], capture_output=True, text=True, env=env, timeout=60, cwd=script.parent
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\0")[:-1] == expected


def test_words_from_a_sourced_file_carry_the_source_line(tmp_path):
    script = _tree(
        tmp_path,
        {"launch.sh": "TP=2\n\nsource run.sh\n", "run.sh": f"\n\ntorchrun pretrain_gpt.py {SHAPE}\n"},
    )
    imported = parse_megatron(script.read_text(), "launch.sh", 8, path=script)
    assert imported.model.num_layers == 32 and imported.flag_lines["--num-layers"] == 4


def test_set_a_exports_what_a_sourced_file_assigns(tmp_path):
    script = _tree(
        tmp_path,
        {
            "launch.sh": f"set -a\nsource cluster.env\nset +a\nLOCAL=1\ntorchrun pretrain_gpt.py {SHAPE}\n",
            "cluster.env": "CUDA_DEVICE_MAX_CONNECTIONS=1\n",
        },
    )
    s = read_script(script.read_text(), path=script)
    assert s.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def _error(tmp_path, files, variables=None):
    script = _tree(tmp_path, files)
    with pytest.raises(SpecError) as info:
        parse_megatron(script.read_text(), "launch.sh", 8, variables=variables, path=script)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file_is_an_error_naming_the_line(tmp_path):
    message = _error(tmp_path, {"launch.sh": f"X=1\nsource nothere.sh\ntorchrun pretrain_gpt.py {SHAPE}\n"})
    assert message.startswith("launch.sh: line 3: source nothere.sh: ") and message.endswith(
        "nothere.sh does not exist"
    )
    message = _error(tmp_path, {"launch.sh": "source conf\n", "conf/x": ""})
    assert message.endswith("conf is not a file")


def test_undeterminable_path_names_the_variable_and_set_gives_it(tmp_path):
    files = {
        "launch.sh": f'source "$CONF_DIR/x.sh"\ntorchrun pretrain_gpt.py {SHAPE} --lr $LR\n',
        "c/x.sh": "LR=1\n",
    }
    message = _error(tmp_path, files)
    assert "line 2: source $CONF_DIR/x.sh: the file's path needs CONF_DIR" in message
    assert "--set CONF_DIR=VALUE" in message
    script = tmp_path / "launch.sh"
    got = parse_megatron(script.read_text(), "launch.sh", 8, variables={"CONF_DIR": "c"}, path=script)
    assert got.flags["--lr"] == "1"


def test_command_a_path_needs_is_an_error(tmp_path):
    message = _error(tmp_path, {"launch.sh": "source $(git rev-parse --show-toplevel)/env.sh\n"})
    assert "needs $(git rev-parse --show-toplevel), which planner does not run" in message


def test_relative_source_after_an_unknown_cd(tmp_path):
    message = _error(tmp_path, {"launch.sh": "cd $MEGATRON_PATH\nsource env.sh\n"})
    assert (
        "line 3: source env.sh: a relative path is found from the working directory, which the cd " in message
    )
    assert "$MEGATRON_PATH on line 2 leaves unknown" in message


def test_cd_to_a_known_directory_elsewhere_is_followed(tmp_path):
    message = _error(tmp_path, {"launch.sh": "cd /workspace/megatron-lm\nsource ./env.sh\n"})
    assert message.endswith("/workspace/megatron-lm/env.sh does not exist")


@pytest.mark.parametrize("body", ["source launch.sh\n", ". ./launch.sh\n. ./launch.sh\n"])
def test_a_file_sourcing_itself_stops_at_the_bound(tmp_path, body):
    message = _error(tmp_path, {"launch.sh": body})
    assert f"nest deeper than {MAX_SOURCE_DEPTH}" in message and "source itself" in message
    assert message.startswith("launch.sh: line 2: source ") and "launch.sh sources " in message


def test_error_inside_a_sourced_file_names_the_file_and_its_line(tmp_path):
    message = _error(tmp_path, {"launch.sh": "A=1\nsource conf/env.sh\n", "conf/env.sh": 'X=1\nY="open\n'})
    assert message.startswith("launch.sh: line 3: conf/env.sh: line 2: a quote opened here is never closed")


def test_binary_sourced_file_is_an_error_not_a_traceback(tmp_path):
    script = _tree(tmp_path, {"launch.sh": "source blob\n"})
    (tmp_path / "blob").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(
        SpecError, match=r"line 2: source blob: .*not UTF-8 text \(byte 0\); expected a shell script$"
    ):
        parse_megatron(script.read_text(), "launch.sh", 8, path=script)


def test_text_without_its_file_cannot_source():
    with pytest.raises(SpecError, match="line 1: source env.sh: .* given without its file"):
        parse_megatron(f"source env.sh\ntorchrun pretrain_gpt.py {SHAPE}\n", "x.sh", 8)


def test_source_in_an_unknown_branch_makes_what_it_sets_unknown(tmp_path):
    files = {
        "launch.sh": 'LAYERS=32\nif [ "$MODE" = big ]; then source big.sh; fi\n'
        "torchrun pretrain_gpt.py --num-layers $LAYERS --hidden-size 4096 --num-attention-heads 32 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 32000\n",
        "big.sh": "LAYERS=80\n",
    }
    message = _error(tmp_path, files)
    assert (
        "--num-layers takes its value from a branch of the if/case on line 3" in message and "MODE" in message
    )
    script = tmp_path / "launch.sh"
    assert (
        parse_megatron(script.read_text(), "l", 8, variables={"MODE": "big"}, path=script).model.num_layers
        == 80
    )
    assert (
        parse_megatron(script.read_text(), "l", 8, variables={"MODE": "x"}, path=script).model.num_layers
        == 32
    )


def test_training_command_sourced_in_an_unknown_branch_is_an_error(tmp_path):
    files = {
        "launch.sh": 'if [ "$MODE" = train ]; then source run.sh; fi\n',
        "run.sh": f"torchrun pretrain_gpt.py {SHAPE}\n",
    }
    message = _error(tmp_path, files)
    assert "the training command runs in a branch of the if/case on line 2" in message and "MODE" in message


def test_unreadable_source_in_an_unknown_branch_is_harmless(tmp_path):
    files = {
        "launch.sh": f'if [ -f "$HOME/.env" ]; then source "$HOME/.env"; fi\ntorchrun pretrain_gpt.py {SHAPE}\n'
    }
    script = _tree(tmp_path, files)
    assert parse_megatron(script.read_text(), "launch.sh", 8, path=script).model.num_layers == 32


def test_guarded_source_of_a_file_on_the_cluster_is_harmless(tmp_path):
    files = {
        "launch.sh": f'[ -f "$HOME/.env" ] && source "$HOME/.env"\n[ -f /opt/env.sh ] && . /opt/env.sh\n'
        f"torchrun pretrain_gpt.py {SHAPE}\n"
    }
    script = _tree(tmp_path, files)
    assert parse_megatron(script.read_text(), "launch.sh", 8, path=script).model.num_layers == 32


def test_source_after_a_command_of_unknown_status_makes_what_it_sets_unknown(tmp_path):
    files = {
        "launch.sh": "L=32\nmkdir -p logs && source big.sh\ntorchrun pretrain_gpt.py --num-layers $L\n",
        "big.sh": "L=80\n",
    }
    assert "--num-layers takes its value from a branch of the if/case on line 3" in _error(tmp_path, files)


def test_file_test_outside_the_script_directory_is_not_answered(tmp_path):
    files = {
        "launch.sh": f"if [ -f /etc/hostname ]; then L=8; else L=16; fi\ntorchrun pretrain_gpt.py {SHAPE} --lr $L\n"
    }
    message = _error(tmp_path, files)
    assert "--lr takes its value from a branch of the if/case on line 2" in message


def test_check_cli_reads_sourced_files(run_cli, tmp_path):
    job = tmp_path / "job"
    script = _tree(
        job,
        {
            "launch.sh": 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\nsource "$HERE/model.sh"\n'
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun --nproc-per-node 8 pretrain_gpt.py $MODEL --bf16\n",
            "model.sh": f'MODEL="{SHAPE} --tensor-model-parallel-size 2"\n',
        },
    )
    res = run_cli("check", str(script), "-c", "dgx-h100", "-n", "1", "--json")
    assert res.exit_code == 0 and '"passed": true' in res.stdout, res.stdout
    (job / "model.sh").unlink()
    res = run_cli("check", str(script), "-c", "dgx-h100", "-n", "1")
    assert res.exit_code == 1 and "line 3: source " in res.stdout and "model.sh does not exist" in res.stdout
