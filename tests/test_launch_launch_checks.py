"""Idioms of the Megatron-LM examples around their launch: a check that the training script is
there before running it (``if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then echo "Error: pretrain_gpt.py
not found ..."; exit 1; fi``, examples/llama/train_llama3_8b_h100_fp8.sh and others at
NVIDIA/Megatron-LM d98e8a64), and the shell's options before ``-c`` (``srun ... bash -x -c
"${TRAINING_CMD}"``, examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh), each launch compared
with the words bash gives the stub torchrun."""

from __future__ import annotations

import shutil

import pytest

from planner.inputs.errors import SpecError
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

CHECKED = (
    'PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"\n'
    'if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then\n'
    '    echo "Error: pretrain_gpt.py not found at $PRETRAIN_SCRIPT_PATH"\n'
    "    exit 1\n"
    "fi\n"
    'echo "launching pretrain_gpt.py"\n'
    'torchrun --nproc_per_node 8 "$PRETRAIN_SCRIPT_PATH" --num-layers 2\n'
)

LAUNCHES = {
    "options_before_c": ('bash -x -c "cd /; torchrun pretrain_gpt.py --a 1"\n', ["--a", "1"]),
    "joined_options": ("bash -ec 'cd / && torchrun pretrain_gpt.py --a 2'\n", ["--a", "2"]),
    "o_option": ("bash -o pipefail -c 'true || true; torchrun pretrain_gpt.py --b 3'\n", ["--b", "3"]),
    "commands_over_lines": (
        'CMD="\ncd /;\nexport X=1;\ntorchrun pretrain_gpt.py --c 4"\nbash -x -c "${CMD}"\n',
        ["--c", "4"],
    ),
    "echo_naming_the_script_after_the_launch": (
        'torchrun pretrain_gpt.py --d 5; echo "pretrain_gpt.py done"\n',
        ["--d", "5"],
    ),
}


def test_the_check_passes_when_the_script_is_there(tmp_path):
    """With pretrain_gpt.py beside the script (where bash, run from there, finds it), the launch is
    the torchrun's: the echo naming pretrain_gpt.py is not read as a training command."""
    (tmp_path / "pretrain_gpt.py").write_text("")
    expected = ["--num-layers", "2"]
    assert planner_words(tmp_path, CHECKED) == expected
    if BASH is not None:
        assert bash_argv(launch_script(tmp_path, CHECKED), tmp_path)[0] == expected


def test_a_failed_check_names_the_file_and_set_pwd(tmp_path):
    """Without it, the script stops on its exit (bash too: the stub never runs), and the message
    says where planner looked and how to run the script from the Megatron-LM checkout."""
    if BASH is not None:
        assert bash_argv(launch_script(tmp_path, CHECKED), tmp_path)[0] is None
    with pytest.raises(
        SpecError,
        match=r"stops on line 5 \(exit 1\).*no pretrain_gpt.py in the script's own directory.*--set PWD=DIR",
    ):
        planner_words(tmp_path, CHECKED)


def test_set_pwd_elsewhere_reads_the_launch(tmp_path):
    """``--set PWD=/opt/megatron``: a directory outside the script's, on the cluster: the test is not
    answered, the stop not taken, and the echo in its branch is no training command there either."""
    assert planner_words(tmp_path, CHECKED, {"PWD": "/opt/megatron"}) == ["--num-layers", "2"]


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


def test_backticks_are_command_substitution(tmp_path):
    """``DIR=`pwd``` (Megatron-DeepSpeed's examples) is ``$(pwd)``: the path it prints, not a
    variable named `pwd`; bash agrees."""
    text = "DIR=`pwd`\nD2=`dirname $0`\ntorchrun pretrain_gpt.py --a $DIR --b $D2\n"
    expected = ["--a", str(tmp_path), "--b", str(tmp_path)]
    assert planner_words(tmp_path, text) == expected
    if BASH is not None:
        assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


def test_a_path_planner_never_reads_may_need_a_command(tmp_path):
    """``--load /ckpt/$(whoami)``: the checkpoint path is on the cluster and prices nothing, so a
    command or an unset variable in it is no error; in a flag planner reads it still is."""
    from planner.launch.megatron.arguments import megatron_words, read_arguments

    path = launch_script(tmp_path, "torchrun pretrain_gpt.py --load /ckpt/$(whoami) --save $OUT --lr $(x)\n")
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=r"--lr takes its value from \$\(x\)"):
        read_arguments(words, "launch.sh")
    words = [(w, n) for w, n in words if w not in ("--lr", words[-1][0])]
    assert read_arguments(words, "launch.sh").flags["--load"].startswith("/ckpt/")


def test_an_unknown_flag_s_value_is_not_a_second_error():
    """A fork's flag with its value (Megatron-DeepSpeed's ``--zero-stage 1``): one refusal, the
    flag's, not a second one for '1' as a word bash split."""
    from planner.launch.megatron.arguments import read_arguments

    args = read_arguments([("--zero-stage", 1), ("1", 1), ("--num-layers", 1), ("2", 1)], "args.txt")
    assert args.rejected == ["--zero-stage"] and args.flags["--num-layers"] == "2"


def test_a_script_that_submits_a_job_file_names_it(tmp_path):
    """Megatron-LM's SC21 scripts (examples/academic_paper_scripts/sc21/SBATCH.sh) submit the
    launch as a file, ``sbatch ... SRUN.sh``, then ``exit 0``: without SRUN.sh beside the script
    planner cannot read it (tests/test_launch_child_scripts.py reads one it finds), and says to
    check it."""
    text = 'sbatch -p "$P" --nodes=2 --export=MEGATRON_PARAMS SRUN.sh\nexit 0\n'
    with pytest.raises(
        SpecError, match=r"stops on line 3 \(exit 0\).*submits SRUN.sh with sbatch.*check that file"
    ):
        planner_words(tmp_path, text)
