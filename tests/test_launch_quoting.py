"""Operators in a launch script's words, read as bash reads them (bash(1) "DEFINITIONS", "Quoting",
"Redirection"): a redirection or control operator is one only where its characters are unquoted
and written in the script, not where they are quoted or come from an expansion
(planner/launch/megatron/shell_text.py, ``split_words``), and a command ends at its newline or
``;``. Each fixture's words are compared with
the argv bash gives a stub torchrun."""

import shutil

import pytest

from planner.launch.megatron.arguments import megatron_words
from tests.conftest import bash_argv

BASH = shutil.which("bash")

LAUNCHES = {
    "quoted_redirection_characters_are_arguments": (
        "torchrun pretrain_gpt.py --data-path \">foo\" '<x>' a\\>b \\<c '2>e' \"1>&2\"\n",
        ["--data-path", ">foo", "<x>", "a>b", "<c", "2>e", "1>&2"],
    ),
    "an_expansion_is_never_a_redirection": (
        'R=">r"\nA=(\'<a\' "|" "&&")\ntorchrun pretrain_gpt.py $R "${A[@]}" "$R" z\n',
        [">r", "<a", "|", "&&", ">r", "z"],
    ),
    "quoted_control_operators_are_arguments": (
        "torchrun pretrain_gpt.py '|' \"&&\" ';' \\& x\n",
        ["|", "&&", ";", "&", "x"],
    ),
    # bash(1) "Redirection": performed and removed wherever it stands; the words around it are arguments
    "unquoted_redirections_are_removed_with_their_targets": (
        'torchrun pretrain_gpt.py a ">b" > log.txt 2>&1 c &>>all.log </dev/null d\n',
        ["a", ">b", "c", "d"],
    ),
    "a_redirection_with_a_quoted_target": (
        'torchrun pretrain_gpt.py c 2>"err log" d 1> "o" e\n',
        ["c", "d", "e"],
    ),
    "a_quoted_value_after_a_flag": (
        "torchrun pretrain_gpt.py --split '>90' --seed 3 >>train.log\n",
        ["--split", ">90", "--seed", "3"],
    ),
    # bash(1) "Lists": a newline or ";" ends the command; what follows is another command's words
    "commands_after_the_launch_are_not_its_arguments": (
        'torchrun pretrain_gpt.py a; echo f\necho "done training" > /dev/null\nA=1\n',
        ["a"],
    ),
}
"""(script, the words of its launch)."""


def _script(tmp_path, text):
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n" + text)
    return path


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_operators_are_read_as_bash_reads_them(name, tmp_path):
    text, expected = LAUNCHES[name]
    path = _script(tmp_path, text)
    words, _, is_script = megatron_words(path.read_text(), None, path)
    assert is_script and [w for w, _ in words] == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_operators_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(_script(tmp_path, text), tmp_path)[0] == expected
