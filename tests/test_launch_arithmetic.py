"""bash arithmetic in a launch script: the expressions (planner/launch/megatron/arithmetic.py) and
the ``(( ... ))`` and ``let`` commands that run them (shell_arithmetic.py). Every expression's value
and side effects are compared with bash's own ``$(( ))``, hand-picked ones and a seeded random set;
every launch with the argv bash gives a stub torchrun; what bash refuses (division by 0, a syntax
error) is a one-line error naming the line, never a traceback."""

import random
import shlex
import shutil
import subprocess

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words, read_arguments
from planner.launch.megatron.arithmetic import ArithmeticFailure, assigned, evaluate, parse
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")

START = {"i": "3", "j": "-2", "k": "5", "v": "i+1", "e": ""}
"""The variables every expression starts with (``v`` holds an expression, ``e`` is empty)."""

EXPRESSIONS = {
    # expression: (its value, i j k after it), as bash 5.2 gives them
    "1 + 2 * 3": (7, "3 -2 5"),
    "(1 + 2) * 3": (9, "3 -2 5"),
    "7 / 2": (3, "3 -2 5"),
    "-7 / 2": (-3, "3 -2 5"),
    "-7 % 3": (-1, "3 -2 5"),
    "7 % -3": (1, "3 -2 5"),
    "2 ** 10": (1024, "3 -2 5"),
    "-2 ** 2": (4, "3 -2 5"),
    "2 ** 3 ** 2": (512, "3 -2 5"),
    "2 ** 63": (-9223372036854775808, "3 -2 5"),
    "9223372036854775807 + 1": (-9223372036854775808, "3 -2 5"),
    "-9223372036854775808 / -1": (-9223372036854775808, "3 -2 5"),
    "1 << 3": (8, "3 -2 5"),
    "-16 >> 2": (-4, "3 -2 5"),
    "5 & 3": (1, "3 -2 5"),
    "5 | 3": (7, "3 -2 5"),
    "5 ^ 3": (6, "3 -2 5"),
    "~5": (-6, "3 -2 5"),
    "!0": (1, "3 -2 5"),
    "!7": (0, "3 -2 5"),
    "3 < 4": (1, "3 -2 5"),
    "3 >= 4": (0, "3 -2 5"),
    "3 == 3": (1, "3 -2 5"),
    "3 != 3": (0, "3 -2 5"),
    "1 && 0": (0, "3 -2 5"),
    "0 || 2": (1, "3 -2 5"),
    "0 && 1 / 0": (0, "3 -2 5"),
    "1 || 1 / 0": (1, "3 -2 5"),
    "i > 2 ? 10 : 20": (10, "3 -2 5"),
    "0 ? 1 : 2 ? 3 : 4": (3, "3 -2 5"),
    "1 ? 2 : (k = 9)": (2, "3 -2 5"),
    "010 + 0x10 + 2#101 + 64#@": (91, "3 -2 5"),
    "i++": (3, "4 -2 5"),
    "++i": (4, "4 -2 5"),
    "i--": (3, "2 -2 5"),
    "--i": (2, "2 -2 5"),
    "i += 4": (7, "7 -2 5"),
    "i -= 4": (-1, "-1 -2 5"),
    "i *= j": (-6, "-6 -2 5"),
    "i /= 2": (1, "1 -2 5"),
    "i %= 2": (1, "1 -2 5"),
    "i <<= 2": (12, "12 -2 5"),
    "i >>= 1": (1, "1 -2 5"),
    "i &= 2": (2, "2 -2 5"),
    "i |= 4": (7, "7 -2 5"),
    "i ^= 1": (2, "2 -2 5"),
    "k = i = 7": (7, "7 -2 7"),
    "i++ + i": (7, "4 -2 5"),
    "i = 2, j = i * 10": (20, "2 20 5"),
    "j /= ++j": (2, "3 2 5"),  # the left side is read before the right side runs
    "i+++j": (1, "4 -2 5"),
    "1 --1": (2, "3 -2 5"),  # -- next to no variable: two signs
    "--5": (5, "3 -2 5"),
    "v * 2": (8, "3 -2 5"),  # a value that is an expression is evaluated
    "e + 1": (1, "3 -2 5"),  # null is 0
}

REFUSED = {
    # expression: the words of bash's error
    "1 / 0": "division by 0",
    "5 % 0": "division by 0",
    "2 ** -1": "exponent less than 0",
    "1 ? 1 : 1 ** (k - 6)": "exponent less than 0",  # bash checks it on the side it skips too
    "1 +": "syntax error",
    "(1 + 2": "syntax error",
    "'1'": "syntax error",
    "08": "value too great for base",
    "1#1": "invalid arithmetic base",
    "3 = 4": "attempted assignment to non-variable",
}


def _evaluate(text: str) -> tuple[int, str]:
    env = dict(START)

    def write(name, value):
        env[name] = str(value)

    value = evaluate(parse(text), lambda name, sub: env.get(name, ""), write)
    return value, f"{env['i']} {env['j']} {env['k']}"


def _bash_values(expressions: list[str]) -> list[str]:
    """``value i j k`` (or ``error``) for each expression, as bash computes it, all in one run."""
    lines = [  # eval: an expression bash cannot parse fails its own line, not the whole script
        f"x={shlex.quote(x)}; ( i=3; j=-2; k=5; v='i+1'; e=''; eval 'out=$(( '\"$x\"' ))' && "
        'echo "$out $i $j $k" ) 2>/dev/null || echo error'
        for x in expressions
    ]
    run = subprocess.run([BASH, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=60)
    return run.stdout.splitlines()


@pytest.mark.parametrize("text", sorted(EXPRESSIONS))
def test_expressions_evaluate_as_written(text):
    assert _evaluate(text) == EXPRESSIONS[text]


@pytest.mark.parametrize("text", sorted(REFUSED))
def test_refused_expressions_say_bashs_words(text):
    with pytest.raises(ArithmeticFailure, match=REFUSED[text]):
        _evaluate(text)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_expressions_agree_with_bash():
    names = sorted(EXPRESSIONS) + sorted(REFUSED)
    expected = [f"{EXPRESSIONS[n][0]} {EXPRESSIONS[n][1]}" for n in sorted(EXPRESSIONS)]
    assert _bash_values(names) == expected + ["error"] * len(REFUSED)


def _random_expression(rng: random.Random, depth: int) -> str:
    atoms = ["i", "j", "k", "0", "1", "2", "7", "-1", "010", "0x1f", "2#11", "i++", "++j", "k--", "!i", "~j"]
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(atoms)
    if rng.random() < 0.15:
        return f"({_random_expression(rng, depth - 1)})"
    if rng.random() < 0.15:
        a, b, c = (_random_expression(rng, depth - 1) for _ in range(3))
        return f"{a} ? {b} : {c}"
    op = rng.choice(["+", "-", "*", "/", "%", "**", "<<", ">>", "<", ">=", "==", "!=", "&", "^", "|"])
    op = rng.choice([op, "&&", "||", ",", "=", "+=", "-=", "*=", "/=", "%=", "<<=", "&=", "|="])
    if op.endswith("=") and op not in ("==", "!=", ">="):
        return f"{rng.choice('ijk')} {op} {_random_expression(rng, depth - 1)}"
    return f"{_random_expression(rng, depth - 1)} {op} {_random_expression(rng, depth - 1)}"


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_random_expressions_agree_with_bash():
    """300 seeded random expressions over every operator, side effects and errors included."""
    rng = random.Random(20250)
    texts = [_random_expression(rng, 3) for _ in range(300)]
    mine = []
    for text in texts:
        try:
            value, after = _evaluate(text)
            mine.append(f"{value} {after}")
        except ArithmeticFailure:
            mine.append("error")
    assert mine == _bash_values(texts)


def test_assigned_names_every_target_once():
    assert assigned(parse("i++ + (j = k += 2) , --i")) == ["i", "j", "k"]
    assert assigned(parse(" ")) == []


LAUNCHES = {
    # bash(1) "((expression))": status 0 when the value is non-zero; let: the last argument's
    "while_on_an_arithmetic_condition_and_counter": (
        'i=0\nO=()\nwhile (( i < 3 )); do\n  O+=(--x$i)\n  ((i++))\ndone\ntorchrun pretrain_gpt.py "${O[@]}" "$i"\n',
        ["--x0", "--x1", "--x2", "3"],
    ),
    "test_loop_moved_only_by_an_arithmetic_command": (
        "i=0\nwhile [ $i -lt 2 ]; do A=$i; ((i++)); done\ntorchrun pretrain_gpt.py $A $i\n",
        ["1", "2"],
    ),
    "let_forms": (
        'i=1\nlet i++\nlet "i = i * 10" j=i+1\nlet k=i%7\ntorchrun pretrain_gpt.py $i $j $k\n',
        ["20", "21", "6"],
    ),
    "arithmetic_status_before_and_or": (
        "N=8\n(( N > 4 )) && { A=big; }\n(( N % 2 )) || { B=even; }\n(( N == 1 )) && C=one\n"
        'torchrun pretrain_gpt.py "$A" "$B" "${C:-no}"\n',
        ["big", "even", "no"],
    ),
    "arithmetic_in_if_and_until": (
        "L=32\nif (( L % 8 == 0 && L >= 16 )); then P=4; else P=1; fi\nn=5\nuntil ((n <= 2)); do ((n -= 2)); done\n"
        "torchrun pretrain_gpt.py $P $n\n",
        ["4", "1"],
    ),
    "operators_an_expansion_and_quotes": (
        'G=$((2 ** 3))\nM="2"\n(( T = G * "$M" + (G > 4 ? 1 : 0), T <<= 1 ))\ntorchrun pretrain_gpt.py $T\n',
        ["34"],
    ),
    "each_arithmetic_command_sees_the_last": (
        "i=0\n((i++)) || ((i++))\ntorchrun pretrain_gpt.py $i\n",
        ["2"],
    ),
    "a_variable_the_script_unset_is_zero": (
        "X=5\nunset X\n(( X += 2 ))\ntorchrun pretrain_gpt.py $X\n",
        ["2"],
    ),
    "arrays_read_in_arithmetic": (
        'S=(10 20 30)\ndeclare -A L=([8b]=32)\ni=1\n(( t = S[i] + S[-1] + L[8b] ))\ntorchrun pretrain_gpt.py "$t"\n',
        ["82"],
    ),
    "a_scalar_is_its_element_0": (
        "X=5\n(( C = X[1] + 1, D = X[0] ))\ntorchrun pretrain_gpt.py $C $D\n",
        ["1", "5"],
    ),
    "errexit_exempts_an_arithmetic_condition": (
        "set -e\ni=0\nif (( i )); then A=no; fi\n(( i )) || true\nwhile (( i )); do :; done\n"
        'torchrun pretrain_gpt.py "${A:-yes}"\n',
        ["yes"],
    ),
}

STOPS = {
    # bash(1) "set -e": ((i++)) with i 0 has the value 0 and fails
    "errexit_on_an_increment_from_zero": (
        "set -e\ni=0\n(( i++ ))\ntorchrun pretrain_gpt.py $i\n",
        4,
        r"set -e \(line 2\) and '\(\( i\+\+ \)\)' fails",
    ),
    "errexit_on_let_of_zero": (
        "set -e\nlet 'n = 2 - 2'\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'let n = 2 - 2' fails",
    ),
    "nounset_in_arithmetic": ("set -u\nunset N\n(( N++ ))\ntorchrun pretrain_gpt.py x\n", 4, r"N is unset"),
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_arithmetic_commands_run_as_written(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert planner_words(tmp_path, text) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_arithmetic_commands_agree_with_bash(name, tmp_path):
    text, expected = LAUNCHES[name]
    assert bash_argv(launch_script(tmp_path, text), tmp_path)[0] == expected


@pytest.mark.parametrize("name", sorted(STOPS))
def test_arithmetic_stops_name_the_line(name, tmp_path):
    text, line, why = STOPS[name]
    with pytest.raises(SpecError, match=rf"^no launch found: the script stops on line {line}\b.*{why}"):
        planner_words(tmp_path, text)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(STOPS))
def test_arithmetic_stops_agree_with_bash(name, tmp_path):
    words, status = bash_argv(launch_script(tmp_path, STOPS[name][0]), tmp_path)
    assert words is None and status != 0


@pytest.mark.parametrize(
    "text, match",
    [
        ("(( 1 / 0 ))\n", r"^line 2: '\(\( 1 / 0 \)\)' cannot be evaluated \(bash: division by 0\)$"),
        ('let "x = 1 +"\n', r"^line 2: 'let x = 1 \+' cannot be evaluated \(bash: x = 1 \+: syntax error"),
        ("i=0\nwhile (( 10 / i )); do :; done\n", r"^line 3: .* cannot be evaluated \(bash: division by 0\)"),
        ("(( 08 + 1 ))\n", r"value too great for base"),
        ("let\n", r"^line 2: 'let' cannot be evaluated \(bash: let: expression expected\)"),
        ("(( x = * 2 ))\n", r"^line 2: '\(\( x = \* 2 \)\)' cannot be evaluated \(bash: .*syntax error"),
    ],
)
def test_what_bash_refuses_is_an_error_naming_the_line(text, match, tmp_path):
    with pytest.raises(SpecError, match=match):
        planner_words(tmp_path, text + "torchrun pretrain_gpt.py x\n")


@pytest.mark.parametrize(
    "text, match",
    [
        # a name the script never sets: the environment may give it
        (
            "(( L = LAYERS * 2 ))\n",
            r"line 3: --num-layers takes its value from 'LAYERS', which the script never sets; .*--set LAYERS=VALUE",
        ),
        ("(( L++ ))\n", r"line 3: --num-layers takes its value from 'L', which the script never sets"),
        # a status that cannot be known: what depends on it depends on the variable
        (
            "L=1\n(( N > 2 )) && { L=2; }\n",
            r"line 4: --num-layers takes its value from a branch of the if/case on line 3, which depends "
            r"on 'N', which the script never sets; pass planner check --set N=VALUE",
        ),
        # in a branch that cannot be known: what it assigns depends on the branch
        (
            'L=1\nif [ "$M" = big ]; then (( L *= 4 )); fi\n',
            r"line 4: --num-layers takes its value from a branch of the if/case on line 3, which depends on 'M'",
        ),
        # a command planner does not run: what the expression assigns needs it too
        (
            "N=$(nproc)\n(( L = N * 2 ))\n",
            r"line 4: --num-layers takes its value from \$\(nproc\), which planner cannot evaluate",
        ),
        # an array element assigned: the array is not followed
        (
            "A=(1 2)\n(( A[1] = 5 ))\nL=${A[0]}\n",
            r"line 5: --num-layers takes its value from \$\(\( A\[1\] = 5 \)\), which planner cannot evaluate",
        ),
        (
            'L=1\n[ "$M" = big ] && let L=4\n',
            r"line 4: --num-layers takes its value from a branch of the if/case on line 3, which depends on 'M'",
        ),
    ],
)
def test_what_cannot_be_known_names_the_variable(text, match, tmp_path):
    path = launch_script(tmp_path, text + 'torchrun pretrain_gpt.py --num-layers "$L"\n')
    words, _, _ = megatron_words(path.read_text(), None, path)
    with pytest.raises(SpecError, match=match):
        read_arguments(words, "launch.sh")


def test_set_gives_what_an_arithmetic_command_needs(tmp_path):
    text = "(( L = LAYERS * 2 ))\n(( N > 2 )) && { TP=8; }\ntorchrun pretrain_gpt.py $L ${TP:-1}\n"
    assert planner_words(tmp_path, text, {"LAYERS": "16", "N": "4"}) == ["32", "8"]
    assert planner_words(tmp_path, text, {"LAYERS": "16", "N": "1"}) == ["32", "1"]


def test_an_unknown_arithmetic_condition_does_not_hide_a_stop(tmp_path):
    """An ``if (( ... ))`` planner cannot evaluate is not a command it assumes succeeds: an exit
    inside is a stop that may happen, naming the variable."""
    with pytest.raises(SpecError, match=r"^line 3: the script may stop here \(exit 1\).*depends on N"):
        planner_words(tmp_path, "if (( N > 2 )); then\n  exit 1\nfi\ntorchrun pretrain_gpt.py x\n")


def test_a_shift_in_arithmetic_is_not_a_here_document(tmp_path):
    assert planner_words(tmp_path, "b=1\n(( a = b << 3 ))\ntorchrun pretrain_gpt.py $a\n") == ["8"]
