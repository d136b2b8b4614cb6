"""Assignments that are a command of a list (bash(1) "Lists"): ``[ -z "$TP" ] && TP=2``, the
defaulting idiom of launch scripts, and ``(( PP > 2 )) && MBS=1 || MBS=2``. Each launch is
compared with the words bash gives the stub torchrun; where the condition cannot be known the
variable names it (planner.launch.megatron.shell_commands._list_assignment)."""

from __future__ import annotations

import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words, read_arguments
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

LAUNCHES = {
    "default_when_empty": (
        'TP=${TP:-}\n[ -z "$TP" ] && TP=2\nPP=\n[ -z "$PP" ] || PP=9\ntorchrun pretrain_gpt.py $TP "${PP:-none}"\n',
        ["2", "none"],
    ),
    "and_or_chooses_one": (
        "PP=4\n(( PP > 2 )) && MBS=1 || MBS=2\n(( PP > 8 )) && GBS=64 || GBS=128\ntorchrun pretrain_gpt.py $MBS $GBS\n",
        ["1", "128"],
    ),
    "false_and_true_or_assign_nothing": (
        "A=1\nfalse && A=2\ntrue || A=3\ntorchrun pretrain_gpt.py $A\n",
        ["1"],
    ),
    "several_assignments_and_append": (
        'A=1\nC=x\n[ -n "$A" ] && B=y C+=z\ntorchrun pretrain_gpt.py $B $C\n',
        ["y", "xz"],
    ),
    "a_value_with_spaces_stays_one_word_in_quotes": (
        'V="a b"\n[ 1 ] && W="$V c"\ntorchrun pretrain_gpt.py "$W"\n',
        ["a b c"],
    ),
    "assignment_first_then_list": (
        "X=1 && Y=2\n[ $X = 1 ] && Z=3\ntorchrun pretrain_gpt.py $X $Y $Z\n",
        ["1", "2", "3"],
    ),
    "each_command_expanded_when_reached": (
        'X=0\nX=1 && Y=$X\nA=a; true && A=b || A=c; B=$A\n[ -n "$Y" ] && Z=$Y$X\ntorchrun pretrain_gpt.py $Y $B $Z\n',
        ["1", "b", "11"],
    ),
    "under_set_e_with_a_function_and_arithmetic": (
        "set -e\nf() { V=5; return 0; }\nf && W=$V\nN=2\n(( N > 1 )) && N=$(( N * 4 )) && M=$N\nfalse || M=$M$W\n"
        "torchrun pretrain_gpt.py $W $M\n",
        ["5", "85"],
    ),
    "command_environment_is_still_a_prefix": (
        "NCCL_DEBUG=INFO torchrun pretrain_gpt.py --a 1\n",
        ["--a", "1"],
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_list_assignments_are_recorded(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_list_assignments_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


def test_an_assignment_after_an_unknown_test_names_the_condition(tmp_path):
    """``[ "$NODES" -gt 1 ] && TP=8 || TP=1`` with NODES never set: TP is a marker naming NODES,
    and the launch is refused with that name, not read with either value."""
    text = '[ "$NODES" -gt 1 ] && TP=8 || TP=1\ntorchrun pretrain_gpt.py --num-layers "$TP"\n'
    path = launch_script(tmp_path, text)
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(
        SpecError, match=r"line 3: --num-layers takes its value from .*line 2, which depends on 'NODES'"
    ):
        read_arguments(words, "launch.sh")


def test_the_set_value_wins_with_check_set(tmp_path):
    """``--set NODES=2`` (planner check --set) decides the test: TP is 8."""
    text = '[ "$NODES" -gt 1 ] && TP=8 || TP=1\ntorchrun pretrain_gpt.py $TP\n'
    assert planner_words(tmp_path, text, {"NODES": "2"}) == ["8"]
    assert planner_words(tmp_path, text, {"NODES": "1"}) == ["1"]
