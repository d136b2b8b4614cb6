"""Subshells over several lines in a launch script, ``(`` and ``)`` on lines of their own or with
commands beside them (planner/launch/megatron/subshell.py): the body runs on a copy of the state,
its ``exit`` ends only it, its status goes to ``&&`` / ``||`` / ``set -e`` as a one-line subshell's
does. Where the script launches, planner's words are compared with the argv bash gives a stub
torchrun; where bash stops first (or refuses the syntax), planner says so naming the line."""

import shutil

import pytest

from planner.inputs.errors import SpecError
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

LAUNCHES = {
    # bash(1) "(list)": "list is executed in a subshell environment": nothing it sets comes back
    "assignments_and_cd_stay_in_the_subshell": (
        'A=1\n(\n  A=2\n  B=3\n  cd /\n  set -e\n)\nfalse\ntorchrun pretrain_gpt.py "$A" "${B:-unset}" "$PWD"\n',
        ["1", "unset", "{tmp}"],
    ),
    "training_command_inside_with_redirections": (
        'DIR=/tmp\n(\n  cd "$DIR"\n  torchrun pretrain_gpt.py --x "$PWD"\n) > log.txt 2>&1\n',
        ["--x", "/tmp"],
    ),
    "training_command_inside_a_piped_subshell": (
        "( echo start\n  torchrun pretrain_gpt.py p ) 2>&1 | tee log.txt\n",
        ["p"],
    ),
    # its exit ends only it; its status is the exit's or its last command's
    "exit_ends_only_the_subshell": (
        "(\n  exit 3\n  A=never\n) || B=failed\n(\n  exit 0\n) && C=ok\n( true\n  false ) || D=last\n"
        'torchrun pretrain_gpt.py "${A:-no}" "$B" "$C" "$D"\n',
        ["no", "failed", "ok", "last"],
    ),
    "nested_subshells": (
        '(\n  A=1\n  (\n    A=2\n    exit 4\n  ) || B=$A\n  torchrun pretrain_gpt.py "$A" "$B"\n)\n',
        ["1", "1"],
    ),
    # a case pattern's ")" and a command substitution's parentheses do not close it
    "case_and_command_substitution_inside": (
        'M=b\n(\n  case "$M" in\n    a) V=1 ;;\n    (b) V=2 ;;\n  esac\n  D=$(dirname "$0")\n'
        '  torchrun pretrain_gpt.py "$V" "$D"\n)\n',
        ["2", "{tmp}"],
    ),
    "a_command_after_its_semicolon_or_ampersand": (
        '(\n  X=1\n); Y=2\n(\n  torchrun pretrain_gpt.py "${X:-none}" "$Y"\n) &\nwait\n',
        ["none", "2"],
    ),
    # set -u and set -e inside stop only the subshell
    "nounset_inside_ends_only_the_subshell": (
        'unset Z\n(\n  set -u\n  echo "$Z"\n  A=1\n) || B=stopped\ntorchrun pretrain_gpt.py "$B"\n',
        ["stopped"],
    ),
    "errexit_ignored_inside_before_or": (
        'set -e\n(\n  false\n  A=went_on\n  torchrun pretrain_gpt.py "$A"\n) || true\n',
        ["went_on"],
    ),
    # in a branch that does not run, or may not: what it runs is not read; an exit there ends it only
    "in_a_branch_not_taken": (
        "if false; then\n  (\n    torchrun pretrain_gpt.py no\n  )\nfi\ntorchrun pretrain_gpt.py yes\n",
        ["yes"],
    ),
    "exit_in_a_subshell_in_a_branch_that_cannot_be_known": (
        'if [ "$X" = 1 ]; then\n  (\n    exit 1\n  )\nfi\ntorchrun pretrain_gpt.py y\n',
        ["y"],
    ),
}

STOPS = {
    "errexit_on_a_failing_subshell": (
        "set -e\n(\n  false\n  X=1\n)\ntorchrun pretrain_gpt.py x\n",
        6,
        r"set -e \(line 2\) and '\( false; X=1 \)' fails",
    ),
    "errexit_on_a_subshell_that_exits": (
        "set -e\n( echo bye\n  exit 2 )\ntorchrun pretrain_gpt.py x\n",
        4,
        r"'\( echo bye; exit 2 \)' fails",
    ),
}

SYNTAX_ERRORS = {
    "never_closed": (
        "(\n  A=1\ntorchrun pretrain_gpt.py x\n",
        r"^line 2: the subshell opened here is never closed \(no closing '\)'; bash: unexpected end of file\)",
    ),
    "a_word_after_the_parenthesis": (
        "(\n  A=1\n) foo\ntorchrun pretrain_gpt.py x\n",
        r"^line 4: 'foo' after the '\)' of the subshell opened on line 2 \(bash: syntax error",
    ),
}


def _expected(tmp_path, words):
    return [w.replace("{tmp}", str(tmp_path)) for w in words]


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_subshells_run_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == _expected(tmp_path, expected)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_subshells_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == _expected(tmp_path, expected)


@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_on_a_subshell_name_the_line(name, tmp_path):
    text, line, why = STOPS[name]
    with pytest.raises(SpecError, match=rf"^no launch found: the script stops on line {line}\b.*{why}"):
        planner_words(tmp_path, text)


@pytest.mark.parametrize("name", sorted(SYNTAX_ERRORS))
def test_syntax_errors_name_the_line(name, tmp_path):
    text, match = SYNTAX_ERRORS[name]
    with pytest.raises(SpecError, match=match):
        planner_words(tmp_path, text)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(STOPS) + sorted(SYNTAX_ERRORS))
def test_bash_stops_there_too(name, tmp_path):
    text = (STOPS | SYNTAX_ERRORS)[name][0]
    words, status = bash_argv(launch_script(tmp_path, text), tmp_path)
    assert words is None and status != 0


def test_training_command_in_a_subshell_in_a_branch_that_cannot_be_known(tmp_path):
    with pytest.raises(
        SpecError,
        match=r"^line 3: the training command runs in a branch of the if/case on line 2, which depends on X",
    ):
        planner_words(tmp_path, 'if [ "$X" = 1 ]; then\n  (\n    torchrun pretrain_gpt.py x\n  )\nfi\n')
