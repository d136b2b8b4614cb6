"""Lists that go on past the end of a line (bash(1) "Lists", "Compound Commands"): a line ending
in ``&&``, ``||`` or ``|`` continues on the next, and a subshell opened after an operator
(``cd "$DIR" && (`` ... ``)``) holds the lines up to its ``)``. Each launch is compared with the
words bash gives the stub torchrun (planner.launch.megatron.shell_text.logical_lines,
planner.launch.megatron.shell._after_list)."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

LAUNCHES = {
    "and_or_over_lines": (
        'A=1\n[ "$A" = 1 ] &&\n  B=2 ||\n  B=3\n[ "$A" = 2 ] &&\n  C=2 ||\n  C=3\ntorchrun pretrain_gpt.py $B $C\n',
        ["2", "3"],
    ),
    "pipe_over_lines": (
        "echo x |\n  cat > /dev/null\ntorchrun pretrain_gpt.py --a 1 |\n  cat\n",
        ["--a", "1"],
    ),
    "comment_after_the_operator": ("true && # then\n  D=4\ntorchrun pretrain_gpt.py $D\n", ["4"]),
    "launch_after_and": ("cd / &&\n  torchrun pretrain_gpt.py \\\n    --b 2\n", ["--b", "2"]),
    "subshell_after_and": (
        'Y=0\ncd / && (\n  X=1\n  torchrun pretrain_gpt.py --a "$X" --y "$Y"\n) 2>&1 | cat\n',
        ["--a", "1", "--y", "0"],
    ),
    "subshell_assignment_stays_inside": (
        'cd / && (\n  X=1\n)\ntorchrun pretrain_gpt.py "${X:-unset}"\n',
        ["unset"],
    ),
    "one_line_subshell_fails_then_or": ("(exit 1) && F=yes || F=no\ntorchrun pretrain_gpt.py $F\n", ["no"]),
    "subshell_skipped_then_or": (
        "false && (\n  torchrun pretrain_gpt.py --never 1\n) || torchrun pretrain_gpt.py --b 2\n",
        ["--b", "2"],
    ),
    "subshell_after_or_skipped": (
        "true || (\n  torchrun pretrain_gpt.py --never 1\n)\ntorchrun pretrain_gpt.py --c 3\n",
        ["--c", "3"],
    ),
    "subshell_status_then_and": (
        "true && (\n  exit 1\n) && E=yes || E=no\ntorchrun pretrain_gpt.py $E\n",
        ["no"],
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_continued_lists(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_continued_lists_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


def test_an_unknown_status_before_the_subshell_names_its_condition(tmp_path):
    """``[ -n "$RUN" ] && (`` with RUN never set: a training command inside cannot be known to run."""
    from planner.inputs.errors import SpecError

    text = '[ -n "$RUN" ] && (\n  torchrun pretrain_gpt.py --a 1\n)\n'
    with pytest.raises(SpecError, match="RUN"):
        planner_words(tmp_path, text)
