"""``printf -v NAME FORMAT ARGS...`` (planner.launch.megatron.shell_printf) and ``[[ A == PATTERN ]]``
(planner.launch.megatron.conditions), each compared with bash: the value bash's printf assigns,
and the words bash gives the stub torchrun."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.shell_printf import PrintfError, printf_value
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

FORMATS = [
    ("llama-%s-tp%02d", ["70b", "4"]),
    ("%s", []),
    ("%d-%i-%u", ["7", "-3", "012"]),
    ("%x %X %o %#x", ["255", "255", "8", "255"]),
    ("%5s|%-5s|%.2s", ["ab", "cd", "wxyz"]),
    ("%.2f %e %g", ["1.5", "12345.678", "0.0001"]),
    ("%s,", ["a", "b", "c"]),
    ("%s=%s ", ["k1", "v1", "k2"]),
    ("100%% %s", ["done"]),
    ("%*d|%-*s|", ["5", "42", "4", "x"]),
    ("%c%c", ["hello", "w"]),
    ("%b", ["a\\tb\\n"]),
    ("tab\\there\\\\", []),
    ("%d", ["0x1f"]),
    ("%d", ["'A"]),
    ("%05.1f", ["3.14159"]),
    ("%+d % d", ["5", "5"]),
    ("no conversion", ["extra", "args"]),
]


@pytest.mark.parametrize("fmt,args", FORMATS)
def test_printf_values(fmt, args):
    assert isinstance(printf_value(fmt, args), str)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("fmt,args", FORMATS)
def test_printf_values_agree_with_bash(fmt, args):
    proc = subprocess.run(
        [BASH, "-c", 'printf -v X "$@"; printf %s "$X"', "bash", fmt, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert printf_value(fmt, args) == proc.stdout


@pytest.mark.parametrize(
    "fmt,args,match",
    [("%d", ["abc"], "invalid number"), ("%q", ["x"], "%q"), ("%(%Y)T", ["-1"], "not read")],
)
def test_printf_refuses_what_it_does_not_read(fmt, args, match):
    with pytest.raises(PrintfError, match=match):
        printf_value(fmt, args)


LAUNCHES = {
    "printf_builds_a_run_name": (
        'S=70b\nTP=4\nprintf -v RUN "llama-%s-tp%02d" "$S" "$TP"\ntorchrun pretrain_gpt.py --name "$RUN"\n',
        ["--name", "llama-70b-tp04"],
    ),
    "printf_in_a_list": ('[ 1 ] && printf -v N "%03d" 7\ntorchrun pretrain_gpt.py $N\n', ["007"]),
    "printf_through_a_nameref": (
        'declare -n R=RUN\nprintf -v R "x%s" 1\ntorchrun pretrain_gpt.py $RUN\n',
        ["x1"],
    ),
    "printf_then_export": (
        "printf -v E \"%03d\" 5\nexport E\nbash -c 'torchrun pretrain_gpt.py $E'\n",
        ["005"],
    ),
    "printf_without_v_only_prints": ('printf "%s\\n" hello\ntorchrun pretrain_gpt.py x\n', ["x"]),
    "unquoted_pattern_matches": (
        'M=70b\nif [[ "$M" == *70* ]]; then L=80; else L=32; fi\ntorchrun pretrain_gpt.py $L\n',
        ["80"],
    ),
    "quoted_pattern_is_a_string": (
        'M=70b\nif [[ "$M" == "*70*" ]]; then L=80; else L=32; fi\ntorchrun pretrain_gpt.py $L\n',
        ["32"],
    ),
    "an_unquoted_variable_is_a_pattern": (
        'M=70b\nP="7*"\nif [[ $M == $P ]]; then A=1; else A=0; fi\nif [[ $M == "$P" ]]; then B=1; else B=0; fi\n'
        "torchrun pretrain_gpt.py $A $B\n",
        ["1", "0"],
    ),
    "classes_and_negation": (
        "M=8b\nif [[ $M != 7?b ]] && [[ $M == [0-9]b ]]; then L=1; else L=2; fi\n"
        "if [[ $M == *70* || $M == 8* ]]; then K=1; else K=2; fi\ntorchrun pretrain_gpt.py $L $K\n",
        ["1", "1"],
    ),
    "patterns_in_and_or_lists": (
        "M=70b\nP='7*'\n[[ $M == *70* ]] && A=1 || A=0\n[[ $M == \"*70*\" ]] && B=1 || B=0\n"
        '[[ $M != 8* ]] && [[ -n $M ]] && C=1 || C=0\n[[ $M == $P ]] && D=1 || D=0\n[[ $M == "$P" ]] && E=1 || E=0\n'
        "torchrun pretrain_gpt.py $A $B $C $D $E\n",
        ["1", "0", "1", "1", "0"],
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches_read_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


@pytest.mark.parametrize(
    "text",
    [
        # an extended pattern, a partly quoted one (in an if and in an && list), a ^-negated class
        'M=8b\nif [[ $M == @(8b|70b) ]]; then L=1; else L=2; fi\ntorchrun pretrain_gpt.py --num-layers "$L"\n',
        'M=8b\nif [[ $M == *"8"* ]]; then L=1; else L=2; fi\ntorchrun pretrain_gpt.py --num-layers "$L"\n',
        'M=8b\n[[ $M == *"8"* ]] && L=80 || L=1\ntorchrun pretrain_gpt.py --num-layers "$L"\n',
        'M=8b\nif [[ $M == [^7]b ]]; then L=1; else L=2; fi\ntorchrun pretrain_gpt.py --num-layers "$L"\n',
    ],
)
def test_patterns_not_matched_here_are_unknown_not_guessed(text, tmp_path):
    from planner.launch.megatron.arguments import megatron_words, read_arguments

    path = launch_script(tmp_path, text)
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match="condition planner cannot evaluate"):
        read_arguments(words, "launch.sh")


def test_printf_errors_name_the_line(tmp_path):
    with pytest.raises(SpecError, match=r"line 2: printf -v N: 'abc': invalid number"):
        planner_words(tmp_path, 'printf -v N "%d" abc\ntorchrun pretrain_gpt.py $N\n')
