"""``${NAME%PATTERN}``, ``%%``, ``#``, ``##`` (bash(1) "Parameter Expansion": the shortest or
longest suffix or prefix a pathname pattern matches removed), as launch scripts trim a trailing
comma or take a file's name; the other operators planner does not evaluate (``${NAME/a/b}``,
``${NAME:1:2}``) are a marker naming them, never their text. Each launch is compared with the
words bash gives the stub torchrun (planner.launch.megatron.patterns)."""

from __future__ import annotations

import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words, read_arguments
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

TEXT = (
    'S="8,8,8,"\nP=/a/b/c.tar.gz\nE=\n'
    'torchrun pretrain_gpt.py "${S%,}" "${P##*/}" "${P%%.*}" "${P%.*}" "${P#*/}" "${P#x}" "${S%%,*}" '
    '"${E%x}" "${P%[.]gz}" "${P#/?/}"\n'
)
EXPECTED = [
    "8,8,8",
    "c.tar.gz",
    "/a/b/c",
    "/a/b/c.tar",
    "a/b/c.tar.gz",
    "/a/b/c.tar.gz",
    "8",
    "",
    "/a/b/c.tar",
    "b/c.tar.gz",
]


def test_pattern_removal(tmp_path):
    words = planner_words(tmp_path, TEXT)
    assert words[: len(EXPECTED)] == EXPECTED


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_pattern_removal_agrees_with_bash(tmp_path):
    assert bash_argv(launch_script(tmp_path, TEXT), tmp_path)[0][: len(EXPECTED)] == EXPECTED


QUOTED = (
    'S=run.sh.sh\nA="a*xb"\nG="*"\nD=a.b.c\nB="x}y"\n'
    'torchrun pretrain_gpt.py "${S%".sh"}" "${A#"a*"}" "${A#a*}" "${A#a$G}" "${A#"a$G"}" "${D%%".*"}" '
    '"${D%\'.\'*}" "${D%\\.*}" "${B%"}y"}" "${D%."c"}"\n'
)
QUOTED_EXPECTED = ["run.sh", "xb", "*xb", "*xb", "xb", "a.b.c", "a.b", "a.b", "x", "a.b"]


def test_quoted_pattern_characters_match_themselves(tmp_path):
    """bash(1) "Pattern Matching": a quoted part of the pattern (or a character after a backslash)
    matches itself, an unquoted one, an unquoted expansion's value too, stays a pattern; a quoted
    ``}`` does not close the expansion (was: any quote left the whole ``${...}`` as its text)."""
    assert planner_words(tmp_path, QUOTED)[: len(QUOTED_EXPECTED)] == QUOTED_EXPECTED


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_quoted_patterns_agree_with_bash(tmp_path):
    assert bash_argv(launch_script(tmp_path, QUOTED), tmp_path)[0][: len(QUOTED_EXPECTED)] == QUOTED_EXPECTED


def test_a_pattern_planner_cannot_know_leaves_the_value_unknown(tmp_path):
    path = launch_script(tmp_path, 'S=abc\ntorchrun pretrain_gpt.py --num-layers "${S%$SUFFIX}"\n')
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=r"--num-layers takes its value from \$SUFFIX|SUFFIX"):
        read_arguments(words, "launch.sh")


@pytest.mark.parametrize("word", ["${S/a/b}", "${S:1:2}", "${S^^}"])
def test_other_operators_are_named_not_kept_as_text(word, tmp_path):
    path = launch_script(tmp_path, f"S=ab\ntorchrun pretrain_gpt.py --num-layers {word}\n")
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=r"--num-layers takes its value from \$\{S"):
        read_arguments(words, "launch.sh")
