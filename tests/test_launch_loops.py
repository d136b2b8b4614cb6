"""``for`` loops over known words and ``${NAME:?word}`` in a launch script, read as bash runs them
(planner/launch/megatron/loops.py, expansion.Required). Where the script launches, planner's words
are compared with the argv bash gives a stub torchrun; where bash stops first, planner says no launch
was found and names the line; a loop it cannot run stays an undeterminable branch."""

import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.functions import positional_parameters
from tests.conftest import bash_argv

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
    "exit_inside_a_loop_that_runs": (
        "for m in a b; do\n  exit 4\ndone\ntorchrun pretrain_gpt.py x\n",
        3,
        r"exit 4",
    ),
}


def _script(tmp_path, text):
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n" + text)
    return path


def _planner(tmp_path, text, preset=None):
    path = _script(tmp_path, text)
    words, _, _ = megatron_words(path.read_text(), preset, path)
    return [w for w, _ in words]


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_loops_run_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert _planner(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_loops_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(_script(tmp_path, text), tmp_path)[0] == expected


@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_name_the_line(name, tmp_path):
    text, line, why = STOPS[name]
    with pytest.raises(SpecError, match=rf"^no launch found: the script stops on line {line}\b.*{why}"):
        _planner(tmp_path, text)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_agree_with_bash(name, tmp_path):
    words, status = bash_argv(_script(tmp_path, STOPS[name][0]), tmp_path)
    assert words is None and status != 0


def test_required_positional_given_by_arg(tmp_path):
    text = STOPS["required_positional_missing"][0]
    assert _planner(tmp_path, text, positional_parameters(["4"])) == ["4"]


def test_required_variable_from_the_environment_names_it_and_set(tmp_path):
    with pytest.raises(
        SpecError, match=r"line 2: \$\{DATA:\?\.\.\.\} stops the script unless DATA is set.*--set DATA="
    ):
        _planner(tmp_path, 'P="${DATA:?no data}"\ntorchrun pretrain_gpt.py x\n')
    assert _planner(tmp_path, 'P="${DATA:?no data}"\ntorchrun pretrain_gpt.py "$P"\n', {"DATA": "/d"}) == [
        "/d"
    ]


@pytest.mark.parametrize(
    "loop",
    [
        'for f in $(ls); do A="$f"; done\n',  # a word from a command planner does not run
        "for f in a b; do A=$f; break; done\n",  # break / continue
        "while read -r f; do A=$f; done < list.txt\n",  # while: a run-time condition
        "for ((i = 0; i < 2; i++)); do A=$i; done\n",  # the arithmetic form
    ],
)
def test_loops_that_cannot_run_stay_undeterminable(loop, tmp_path):
    """What the loop assigns is unknown: a marker naming the loop's line (2), which makes a flag that
    needs it an error naming that line (docs/megatron.md)."""
    words = _planner(tmp_path, loop + 'torchrun pretrain_gpt.py --tensor-model-parallel-size "$A"\n')
    assert words[0] == "--tensor-model-parallel-size" and words[1].startswith("@@unresolved:if:?:2@@")
