"""``for``, ``while`` and ``until`` loops with ``break`` / ``continue``, and ``${NAME:?word}``, in a launch script, read as bash runs them
(planner/launch/megatron/loops.py, expansion.Required). Where the script launches, planner's words
are compared with the argv bash gives a stub torchrun; where bash stops first, planner says no launch
was found and names the line; a loop it cannot run stays an undeterminable branch."""

import re
import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words, read_arguments
from planner.launch.megatron.functions import positional_parameters
from planner.launch.megatron.loops import MAX_LOOP_RUNS
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

LAUNCHES = {
    # bash(1) "for name [ [ in [ word ... ] ] ; ] do list ; done": the body once per word, name set to it
    "for_over_words_builds_an_array": (
        'ARGS=()\nfor L in 1 2 3; do\n  ARGS+=(--x"$L")\ndone\ntorchrun pretrain_gpt.py "${ARGS[@]}" "$L"\n',
        ["--x1", "--x2", "--x3", "3"],
    ),
    "for_on_one_line_and_do_on_its_own": (
        'S=""\nfor w in a b; do S="$S$w"; done\nfor v in "x y" z\ndo\n  S="$S-$v"\ndone\ntorchrun pretrain_gpt.py "$S"\n',
        ["ab-x y-z"],
    ),
    "for_over_an_array_and_a_split_variable": (
        'A=(p "q r")\nW="s t"\nO=()\nfor e in "${A[@]}" $W; do O+=("[$e]"); done\ntorchrun pretrain_gpt.py "${O[@]}"\n',
        ["[p]", "[q r]", "[s]", "[t]"],
    ),
    "nested_for_with_an_if": (
        'O=()\nfor i in 1 2; do\n  for j in a b; do\n    if [ "$j" = b ]; then O+=("$i$j"); fi\n  done\ndone\n'
        'torchrun pretrain_gpt.py "${O[@]}"\n',
        ["1b", "2b"],
    ),
    "for_without_in_iterates_the_positional_parameters": (
        'set -- u v\nO=""\nfor a; do O="$O$a"; done\ntorchrun pretrain_gpt.py "$O"\n',
        ["uv"],
    ),
    "empty_word_list_runs_nothing": (
        'V=keep\nfor V in; do V=changed; done\ntorchrun pretrain_gpt.py "$V"\n',
        ["keep"],
    ),
    # bash(1) "while list-1; do list-2; done": list-2 as long as list-1 succeeds; until: fails
    "while_over_a_counter": (
        'i=0\nO=()\nwhile [ "$i" -lt 3 ]; do\n  O+=(--x$i)\n  i=$((i + 1))\ndone\ntorchrun pretrain_gpt.py "${O[@]}" "$i"\n',
        ["--x0", "--x1", "--x2", "3"],
    ),
    "until_with_do_on_its_own_line": (
        'n=5\nuntil [ "$n" -le 2 ]\ndo\n  n=$((n - 1))\ndone\ntorchrun pretrain_gpt.py "$n"\n',
        ["2"],
    ),
    "while_that_never_runs": ('while false; do X=1; done\ntorchrun pretrain_gpt.py "${X:-none}"\n', ["none"]),
    # bash(1) "break [n]", "continue [n]": leave (resume the next round of) the n-th enclosing loop
    "while_true_until_break": (
        "A=0\nwhile true; do A=$((A + 1)); if [ $A -eq 4 ]; then break; fi; done\ntorchrun pretrain_gpt.py $A\n",
        ["4"],
    ),
    "for_with_continue_and_break": (
        'O=""\nfor i in 1 2 3 4; do\n  [ $i = 2 ] && continue\n  [ $i = 4 ] && break\n  O="$O$i"\ndone\n'
        "torchrun pretrain_gpt.py $O $i\n",
        ["13", "4"],
    ),
    "continue_and_break_of_an_outer_loop": (
        'O=""\nfor i in 1 2; do for j in a b c; do [ $j = b ] && continue 2; O="$O$i$j"; done; done\n'
        'for i in 1 2; do while :; do O="$O-$i"; break 2; done; done\ntorchrun pretrain_gpt.py $O\n',
        ["1a2a-1"],
    ),
    "break_in_a_function_or_outside_a_loop_does_nothing": (
        'f() { break; }\nO=""\nfor i in 1 2; do f; O="$O$i"; done\nbreak\ntorchrun pretrain_gpt.py $O\n',
        ["12"],
    ),
    "if_after_a_command_on_one_line": (
        'A=1; if [ $A = 1 ]; then B=2; fi\ntorchrun pretrain_gpt.py "$B"\n',
        ["2"],
    ),
    # bash(1) "while list-1": list-1 is a command list, a function call's status as an if's
    "while_a_function_succeeds": (
        'n=0\nbelow() { [ "$n" -lt "$1" ]; }\nwhile below 3; do n=$((n + 1)); done\ntorchrun pretrain_gpt.py "$n"\n',
        ["3"],
    ),
    "until_a_negated_function": (
        'n=0\nready() { [ "$n" -ge 2 ]; }\nuntil ! ready; do n=9; done\nwhile ! ready; do n=$((n + 1)); done\n'
        'torchrun pretrain_gpt.py "$n"\n',
        ["2"],
    ),
    "set_e_ignores_a_failing_while_function": (
        'set -e\nno() { return 1; }\nwhile no; do X=1; done\ntorchrun pretrain_gpt.py "${X:-none}"\n',
        ["none"],
    ),
    "required_parameter_that_is_set": ('X=1\nY="${X:?X is needed}"\ntorchrun pretrain_gpt.py "$Y"\n', ["1"]),
}

STOPS = {
    "required_positional_missing": (
        'TP="${1:?usage: train.sh TP}"\ntorchrun pretrain_gpt.py "$TP"\n',
        2,
        r"\$1 is unset",
    ),
    "required_but_empty": (
        'D=""\nP="${D:?no data}"\ntorchrun pretrain_gpt.py x\n',
        3,
        r"D is unset or empty",
    ),
    "exit_in_a_round_of_a_while_loop": (
        "i=0\nwhile [ $i -lt 5 ]; do\n  i=$((i + 1))\n  [ $i = 3 ] && exit 7\ndone\ntorchrun pretrain_gpt.py x\n",
        5,
        r"exit 7",
    ),
    "exit_inside_a_loop_that_runs": (
        "for m in a b; do\n  exit 4\ndone\ntorchrun pretrain_gpt.py x\n",
        3,
        r"exit 4",
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_loops_run_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_loops_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_name_the_line(name, tmp_path):
    text, line, why = STOPS[name]
    with pytest.raises(SpecError, match=rf"^no launch found: the script stops on line {line}\b.*{why}"):
        planner_words(tmp_path, text)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_agree_with_bash(name, tmp_path):
    words, status = bash_argv(launch_script(tmp_path, STOPS[name][0]), tmp_path)
    assert words is None and status != 0


def test_required_positional_given_by_arg(tmp_path):
    text = STOPS["required_positional_missing"][0]
    assert planner_words(tmp_path, text, positional_parameters(["4"])) == ["4"]


def test_required_variable_from_the_environment_names_it_and_set(tmp_path):
    with pytest.raises(
        SpecError, match=r"line 2: \$\{DATA:\?\.\.\.\} stops the script unless DATA is set.*--set DATA="
    ):
        planner_words(tmp_path, 'P="${DATA:?no data}"\ntorchrun pretrain_gpt.py x\n')
    assert planner_words(
        tmp_path, 'P="${DATA:?no data}"\ntorchrun pretrain_gpt.py "$P"\n', {"DATA": "/d"}
    ) == ["/d"]


@pytest.mark.parametrize(
    "loop",
    [
        'for f in $(ls); do A="$f"; done\n',  # a word from a command planner does not run
        "while read -r f; do A=$f; done < list.txt\n",  # while: a run-time condition, a redirection
        "for ((i = 0; i < $(nproc); i++)); do A=$i; done\n",  # arithmetic on a command not run
    ],
)
def test_loops_that_cannot_run_stay_undeterminable(loop, tmp_path):
    """What the loop assigns is unknown: a marker naming the loop's line, which makes a flag that
    needs it an error naming that line (docs/megatron.md)."""
    words = planner_words(tmp_path, loop + 'torchrun pretrain_gpt.py --tensor-model-parallel-size "$A"\n')
    line = loop.count("\n") + 1
    assert words[0] == "--tensor-model-parallel-size"
    assert re.match(rf"@@unresolved:(loop|cap):\?:{line}@@", words[1])


@pytest.mark.parametrize(
    "loop, match",
    [
        (
            'while [ "$X" = 1 ]; do A=1; done\n',
            r"line 3: --tensor-model-parallel-size takes its value from a branch of the loop on line 2, which "
            r"depends on 'X', which the script never sets; pass planner check --set X=VALUE",
        ),
        (
            "while (( n < 2 )); do A=$n; done\n",  # an arithmetic condition on a name never set
            r"line 3: --tensor-model-parallel-size takes its value from a branch of the loop on line 2, which "
            r"depends on 'n', which the script never sets; pass planner check --set n=VALUE",
        ),
        (
            'A=1\nfor i in 1 2; do if [ "$Y" = 1 ]; then break; fi; A=$i; done\n',
            r"line 4: .* a branch of the loop on line 3, which depends on 'Y'.*--set Y=VALUE",
        ),
        (
            "A=1\nwhile true; do A=2; done\n",
            r"line 4: .* a branch of the loop on line 3 \(stopped at planner's cap of 4096 iterations\), which "
            "has a condition planner cannot evaluate",
        ),
    ],
)
def test_loops_that_cannot_run_name_why(loop, match, tmp_path):
    path = launch_script(tmp_path, loop + 'torchrun pretrain_gpt.py --tensor-model-parallel-size "$A"\n')
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=match):
        read_arguments(words, "launch.sh")


def test_nested_loops_past_the_scripts_cap_are_an_error_naming_it(tmp_path):
    words = " ".join(str(k) for k in range(8))
    with pytest.raises(
        SpecError, match=rf"loops run more than {MAX_LOOP_RUNS} bodies in all \(planner's cap\)"
    ):
        planner_words(
            tmp_path, f"while true; do for j in {words}; do A=$j; done; done\ntorchrun pretrain_gpt.py x\n"
        )
