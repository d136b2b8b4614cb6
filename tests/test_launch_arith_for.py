"""The arithmetic ``for (( INIT; COND; STEP ))`` loop (bash(1) "Compound Commands": INIT
evaluated once, then the body run and STEP evaluated while COND is non-zero, an empty COND being
1), with ``break`` / ``continue`` (STEP still evaluated after a continue) and planner's round cap.
Each launch is compared with the words bash gives the stub torchrun
(planner.launch.megatron.loops.run_loop)."""

from __future__ import annotations

import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words, read_arguments
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

LAUNCHES = {
    "counts_up": (
        'L=\nfor (( i = 0; i < 3; i++ )); do L="$L $i"; done\ntorchrun pretrain_gpt.py $L $i\n',
        ["0", "1", "2", "3"],
    ),
    "no_spaces_and_step_down": (
        'L=\nfor((j=10;j>7;j-=1)); do L="$L j$j"; done\ntorchrun pretrain_gpt.py $L $j\n',
        ["j10", "j9", "j8", "7"],
    ),
    "continue_still_steps_break_does_not": (
        'L=\nfor (( i = 0; i < 5; i++ ))\ndo\n  (( i == 1 )) && continue\n  L="$L $i"\n'
        '  [ "$i" = 3 ] && break\ndone\ntorchrun pretrain_gpt.py $L $i\n',
        ["0", "2", "3", "3"],
    ),
    "empty_parts_loop_until_break": (
        "n=0\nfor (( ; ; )); do (( n += 2 )); (( n > 5 )) && break; done\ntorchrun pretrain_gpt.py $n\n",
        ["6"],
    ),
    "layers_per_stage": (
        'PP=4\nLAYERS=32\nS=\nfor (( st = 0; st < PP; st++ )); do S+="$(( LAYERS / PP ))"; done\n'
        'torchrun pretrain_gpt.py --x "$S"\n',
        ["--x", "8888"],
    ),
    "nested_with_break_2": (
        "L=\nfor (( a = 0; a < 3; a++ )); do for (( b = 0; b < 3; b++ )); do (( a + b == 3 )) && break 2; "
        'L="$L $a$b"; done; done\ntorchrun pretrain_gpt.py $L $a $b\n',
        ["00", "01", "02", "10", "11", "1", "2"],
    ),
    "no_space_in_a_branch_that_does_not_run": (
        "A=x\nif false; then\n  for((i=0;i<3;i++)); do A=$i; done\nfi\ntorchrun pretrain_gpt.py $A\n",
        ["x"],
    ),
    "never_runs": (
        "A=x\nfor (( i = 5; i < 3; i++ )); do A=y; done\ntorchrun pretrain_gpt.py $A $i\n",
        ["x", "5"],
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_arithmetic_for_runs_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_arithmetic_for_agrees_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


@pytest.mark.parametrize(
    "loop, match",
    [
        (
            "for (( i = 0; i < n; i++ )); do A=$i; done\n",
            r"a branch of the loop on line 2, which depends on 'n', which the script never sets; pass "
            r"planner check --set n=VALUE",
        ),
        (
            "A=1\nfor (( ; ; )); do A=2; done\n",
            r"the loop on line 3 \(stopped at planner's cap of 4096 iterations\)",
        ),
        (
            "A=1\nfor (( i = 0; i < 3; i += $(nproc) )); do A=2; done\n",
            r"a branch of the loop on line 3",
        ),
    ],
)
def test_arithmetic_for_that_cannot_run_names_why(loop, match, tmp_path):
    path = launch_script(tmp_path, loop + 'torchrun pretrain_gpt.py --tensor-model-parallel-size "$A"\n')
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=match):
        read_arguments(words, "launch.sh")


def test_set_decides_the_bound(tmp_path):
    text = "for (( i = 0; i < n; i++ )); do A=$i; done\ntorchrun pretrain_gpt.py $A\n"
    assert planner_words(tmp_path, text, {"n": "3"}) == ["2"]
