"""Shell functions, positional parameters, ``local``, associative arrays, namerefs, ``[[ -v ]]``,
``&&``/``||`` conditions and ``sbatch <<EOF`` job scripts in a launch script, read as bash runs
them (planner/launch/megatron/functions.py, assignments.py, variables.py, heredoc.py,
conditions.py). Each construct is a fixture script written here whose words are compared with the
argv bash itself gives a stub torchrun (where bash is installed); each construct planner cannot
determine is a one-line error naming the line."""

import os
import shutil
import subprocess

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.variables import bash_order
from tests.conftest import TORCHRUN_STUB

BASH = shutil.which("bash")
SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --vocab-size 32000"
)

# Each fixture: (script, the words pretrain_gpt.py gets, as bash gives them).
FIXTURES = {
    "positional_parameters_in_a_call": (
        'f() {\n  torchrun pretrain_gpt.py "$@" $@ "$*" "$1" ${2} "$#" "${3:-none}"\n}\nf "a b" c\n',
        ["a b", "c", "a", "b", "c", "a b c", "a b", "c", "2", "none"],
    ),
    "function_keyword_shift_and_ten_arguments": (
        'function g {\n  shift\n  torchrun pretrain_gpt.py ${10} $1 "$#"\n}\ng 0 1 2 3 4 5 6 7 8 9 10 11\n',
        ["10", "1", "11"],
    ),
    "one_line_definition_and_script_without_arguments": (
        'h() { A="$1-$#"; }\nh x y\ntorchrun pretrain_gpt.py "$A" "$#" "$@" "${1:-unset}"\n',
        ["x-2", "0", "unset"],
    ),
    "local_is_dynamically_scoped": (
        'X=global\ninner() { ARGS+=("$X"); }\nouter() { local X=outer; inner; X=changed; inner; }\n'
        'ARGS=()\nouter\nARGS+=("$X")\ntorchrun pretrain_gpt.py "${ARGS[@]}"\n',
        ["outer", "changed", "global"],
    ),
    "declare_in_a_function_is_local_unless_g": (
        "f() { declare A=inner; declare -g B=global; export C=exported; }\nA=a\nf\n"
        'torchrun pretrain_gpt.py "$A" "$B" "$C"\n',
        ["a", "global", "exported"],
    ),
    "return_ends_the_call": (
        'f() {\n  A=1\n  if [ "$1" = stop ]; then\n    return 0\n  fi\n  A=2\n}\nf stop\nB=$A\nf go\n'
        'torchrun pretrain_gpt.py "$B" "$A"\n',
        ["1", "2"],
    ),
    "associative_arrays": (
        'declare -A M=(\n  # a comment\n  [b]="2 3"  # after a value\n  ["a x"]=1\n  [c]=4\n)\nM[d]=5\nK=c\n'
        'torchrun pretrain_gpt.py ${M[b]} "${M["a x"]}" "${!M[@]}" "${M[@]}" ${#M[@]} "${M[nope]:-none}" '
        '"${M[$K]}"\n',
        ["2", "3", "1", *bash_order(["b", "a x", "c", "d"])]
        + [{"b": "2 3", "a x": "1", "c": "4", "d": "5"}[k] for k in bash_order(["b", "a x", "c", "d"])]
        + ["4", "none", "4"],
    ),
    "namerefs_and_v_tests": (
        "declare -A T=([k]=v [w]=x)\nget() {\n  local -n t=$1\n  local key=$2\n"
        '  if [[ -v t[$key] ]]; then R+=("${t[$key]}"); else R+=(absent); fi\n}\n'
        "R=()\nget T k\nget T z\nS=1\nif [[ -v S ]]; then R+=(set); fi\nif [[ -v T ]]; then R+=(t0); fi\n"
        'torchrun pretrain_gpt.py "${R[@]}" "${#T[@]}"\n',
        ["v", "absent", "set", "2"],
    ),
    "indexed_array_subscripts": (
        "L=(p q r)\nL[3]=s\nL[0]=o\ni=1\nc=(${L[@]})\n"
        'torchrun pretrain_gpt.py "${L[i+1]}" "${L[-1]}" "${c[$i]}" "${#L[@]}" "${!L[@]}"\n',
        ["r", "s", "q", "4", "0", "1", "2", "3"],
    ),
    "and_or_lists_in_conditions": (
        "R=()\nif [[ a == a ]] && [[ b == c ]]; then R+=(x); else R+=(y); fi\n"
        "if [[ a == b ]] || [[ c == c ]]; then R+=(z); fi\n"
        "if [[ 1 -eq 1 && 2 -eq 3 || 4 -eq 4 ]]; then R+=(w); fi\n"
        "if false && [[ $NEVER_SET == 1 ]]; then R+=(no); else R+=(decided); fi\n"
        'torchrun pretrain_gpt.py "${R[@]}"\n',
        ["y", "z", "w", "decided"],
    ),
    "local_at_the_top_level_assigns_nothing": (
        'local X=1 2>/dev/null\ntorchrun pretrain_gpt.py "${X:-unset}"\n',
        ["unset"],
    ),
    "sbatch_here_document_runs_the_job_script": (
        'export CMD="torchrun pretrain_gpt.py --lr 1e-4"\n'
        "sbatch --nodes=1 <<EOF\n#!/bin/bash\n#SBATCH --nodes=1\nsrun --mpi=pmix bash -c \\\\\\${CMD} 2>&1\nEOF\n",
        ["--lr", "1e-4"],
    ),
    "here_document_expanded_where_the_delimiter_is_unquoted": (
        'V=outer\nexport W=exported\nsbatch <<EOF\ntorchrun pretrain_gpt.py "$V" "\\$V" "\\$W" \\\n  "$((1 + 2))"\nEOF\n',
        ["outer", "", "exported", "3"],
    ),
    "arithmetic_as_bash_computes_it_and_a_shift_is_no_here_document": (
        "x=3\ny=1\nA=$((x<<y))\ntorchrun pretrain_gpt.py $A $((-7 / 2)) $((-7 % 2)) $((1 << 4 | 1))\n",
        ["6", "-3", "-1", "17"],
    ),
    "status_of_the_last_command_of_the_body": (
        'big() { [ "$TP" -gt 1 ]; }\nlocal_only() { local a=1; }\nfails() { echo no >/dev/null; false; }\n'
        "TP=2\nbig && A=yes || A=no\nlocal_only && B=yes || B=no\nfails && C=yes || C=no\n"
        'torchrun pretrain_gpt.py "$A" "$B" "$C"\n',
        ["yes", "yes", "no"],
    ),
    "if_and_elif_run_a_function_call": (
        'on() {\n  SEEN="$SEEN$1"\n  [ "$1" = "$2" ]\n}\n'
        "SEEN=\nif on a b; then X=1; elif ! on c d; then X=2; else X=3; fi\n"
        "set -e\nif on e f; then Y=1; else Y=0; fi\n"
        'torchrun pretrain_gpt.py "$X" "$Y" "$SEEN"\n',
        ["2", "0", "ace"],
    ),
    "quoted_here_document_and_one_only_printed": (
        "V=outer\nexport W=exported\ncat <<EOF >/dev/null\ntorchrun pretrain_gpt.py not-run\nEOF\n"
        'sbatch <<-\'EOF\'\n\ttorchrun pretrain_gpt.py "$V" "$W"\n\tEOF\n',
        ["", "exported"],
    ),
}

STUBS = {
    "torchrun": TORCHRUN_STUB,
    "sbatch": "#!/bin/bash\nexec bash -s\n",
    "srun": '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n',
}


def _planner_words(script: str, tmp_path) -> list[str]:
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n" + script)
    return [w for w, _ in megatron_words(path.read_text(), None, path)[0]]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixtures_are_read_as_written(name, tmp_path):
    script, expected = FIXTURES[name]
    assert _planner_words(script, tmp_path) == expected


def _bash_words(script: str, tmp_path) -> list[str]:
    """The words bash gives the stub torchrun running ``script`` (stub sbatch and srun on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for stub, text in STUBS.items():
        (bin_dir / stub).write_text(text)
        (bin_dir / stub).chmod(0o755)
    (tmp_path / "bash_launch.sh").write_text("#!/bin/bash\n" + script)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run(
        [BASH, str(tmp_path / "bash_launch.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\0")[:-1]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixtures_agree_with_bash(name, tmp_path):
    """The expected words are what bash passes."""
    script, expected = FIXTURES[name]
    assert _bash_words(script, tmp_path) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_associative_key_order_is_bashs(tmp_path):
    """``${!A[@]}`` lists keys in bash's hash-table order (variables.bash_order), not insertion order."""
    keys = [f"{a}{b}" for a in ("Mixtral-8x", "Qwen3-", "DeepSeek-V", "é:") for b in ("2B", "7B", "22B", "3")]
    body = "".join(f'A["{k}"]=1\n' for k in keys)
    script = f'declare -A A\n{body}printf "%s\\0" "${{!A[@]}}"\n'
    proc = subprocess.run([BASH, "-c", script], capture_output=True, timeout=60)
    assert proc.stdout.decode().split("\0")[:-1] == bash_order(keys) != keys


@pytest.mark.parametrize(
    "script, match",
    [
        (
            'f() {\n  if [ "$U" = 1 ]; then\n    return 0\n  fi\n}\nf\n',
            r"line 6: f .*line 3: return in a branch.*U",
        ),
        (
            'if [ "$U" = 1 ]; then\n  f() { A=1; }\nfi\nf\n',
            r"line 4: f is defined inside the if/case on line 1.*U",
        ),
        ("f() { f; }\nf\n", "calls nest deeper than 64"),
        ("f() {\n  A=1\n", r"line 1: function f: no closing \}"),
        ("f() ( A=1 )\nf\n", r"line 1: function f: only a body in braces"),
        ("declare -A A=(x y)\n", r"line 1: A=\( \.\.\. \): an associative array's element is \[KEY\]=VALUE"),
        ("declare -n R=1x\n", "line 1: declare -n R='1x': a nameref's value must be another variable's name"),
        ("A=(a)\nA[5]=b\n", r"line 2: A\[5\]=: the index leaves a gap"),
        ('f() {\n  torchrun pretrain_gpt.py --tensor-model-parallel-size "$TPX"\n}\nf\n', r"TPX"),
        (
            "sbatch <<EOF\nsource missing.sh\nEOF\n",
            r"line 1: the job script of this here-document: line 1: source",
        ),
    ],
)
def test_undeterminable_constructs_are_errors_naming_the_line(script, match, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(script)
    with pytest.raises(SpecError, match=match):
        parse_megatron(script + f"torchrun pretrain_gpt.py {SHAPE}\n", str(path), 8, path=path)


@pytest.mark.parametrize(
    "body",
    [
        "false; if [ 1 = 2 ]; then :; fi",  # an if whose branches were all skipped: 0 in bash
        "mkdir -p /tmp/x",  # a command planner does not run
        "false; return",  # the last command's status, after a return without N
        "X=$(false) &",  # a background job
    ],
)
def test_a_status_planner_cannot_know_leaves_the_branch_unknown(body, tmp_path):
    """Where the body's last command is a compound command, one planner does not run, or the call
    ends in a bare ``return``, the call's status is unknown, so a flag set in either branch is."""
    text = f"f() {{ {body}; }}\nif f; then TP=2; else TP=4; fi\ntorchrun pretrain_gpt.py {SHAPE} --tensor-model-parallel-size $TP\n"
    path = tmp_path / "launch.sh"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"line 3: --tensor-model-parallel-size .* the if/case on line 2,"):
        parse_megatron(text, str(path), 8, path=path)


@pytest.mark.parametrize("guard", ["setup || exit 1", "if ! setup; then exit 1; fi"])
def test_a_call_ending_in_a_command_planner_does_not_run_is_assumed_to_succeed(guard):
    """``setup || exit 1`` where setup ends in ``mkdir``: as for the command itself, the stop that
    hangs on its status is not taken (was: the script "may stop" before the launch)."""
    text = f'setup() {{ mkdir -p "$OUT"; }}\nOUT=/tmp/run\n{guard}\ntorchrun pretrain_gpt.py {SHAPE}\n'
    words = [w for w, _ in megatron_words(text, None, None)[0]]
    assert words[:2] == ["--num-layers", "32"]


def test_v_on_a_name_the_script_never_sets_is_unknown():
    """``[[ -v NAME ]]`` on a name the environment may hold: the branch is unknown, and a flag
    that needs it names the variable and --set; the script's own unset makes it known."""
    text = (
        "#!/bin/bash\nif [[ -v BIG ]]; then TP=8; else TP=1; fi\n"
        f"torchrun pretrain_gpt.py {SHAPE} --tensor-model-parallel-size $TP\n"
    )
    with pytest.raises(SpecError, match="BIG.*--set BIG=VALUE"):
        parse_megatron(text, "x.sh", 8)
    known = text.replace("if [[", "unset BIG\nif [[")
    assert parse_megatron(known, "x.sh", 8).config.tp == 1


def test_words_from_a_call_carry_the_call_line():
    text = '#!/bin/bash\nrun() {\n  torchrun pretrain_gpt.py "$@"\n}\n\nrun ' + SHAPE + "\n"
    imported = parse_megatron(text, "x.sh", 8)
    assert imported.flag_lines["--num-layers"] == 6


def test_unset_of_elements_functions_and_namerefs(tmp_path):
    script = (
        "declare -A M=([a]=1 [b]=2)\nunset 'M[a]'\nL=(x y z)\nunset 'L[2]'\nf() { A=1; }\nunset -f f\n"
        "A=0\nf 2>/dev/null\ndeclare -n R=M\nunset -n R\nR=plain\n"
        'torchrun pretrain_gpt.py "${!M[@]}" "${L[@]}" "$A" "$R" "${M[b]}"\n'
    )
    expected = ["b", "x", "y", "0", "plain", "2"]
    assert _planner_words(script, tmp_path) == expected
    if BASH is not None:
        assert _bash_words(script, tmp_path) == expected
    with pytest.raises(SpecError, match=r"line 2: unset L\[0\]: it would leave a gap"):
        parse_megatron("L=(x y)\nunset 'L[0]'\n", "x.sh", 8)


def test_a_loop_is_not_evaluated_its_assignments_are_unknown(tmp_path):
    """A while loop that does not end (here within planner's cap), or a for loop over words planner
    cannot know, may run any number of times:
    what it assigns is unknown (a flag needing it is an error naming the loop's line), a training
    command in it an error; the Zoo's ``while read ...; done < <(...)`` exporting ENV_VARS changes
    nothing a flag reads. (A for loop over known words runs: tests/test_launch_loops.py.)"""
    text = (
        "#!/bin/bash\nTP=1\nfor t in $(seq 2 4); do\n  TP=$t\ndone\n"
        f"torchrun pretrain_gpt.py {SHAPE} --tensor-model-parallel-size $TP\n"
    )
    with pytest.raises(SpecError, match="line 3"):
        parse_megatron(text, "x.sh", 8)
    text = "#!/bin/bash\nwhile true; do\n  torchrun pretrain_gpt.py " + SHAPE + "\ndone\n"
    with pytest.raises(
        SpecError,
        match=r"line 3: the training command runs in a branch of the loop on line 2 \(stopped at planner's cap",
    ):
        parse_megatron(text, "x.sh", 8)
    with pytest.raises(SpecError, match="line 1: done without a loop"):
        parse_megatron("done\n", "x.sh", 8)


def test_source_with_arguments_binds_them_and_return_ends_the_file(tmp_path):
    """bash(1) "source": the arguments are the positional parameters while the file runs, the
    caller's come back after; ``return`` at the file's top level stops reading it."""
    (tmp_path / "lib.sh").write_text('A="$1-$#"\nreturn\nA=never\n')
    script = (
        'f() {\n  source ./lib.sh x y\n  B="$1-$#"\n}\nf outer\ntorchrun pretrain_gpt.py "$A" "$B" "$#"\n'
    )
    expected = ["x-2", "outer-1", "0"]
    assert _planner_words(script, tmp_path) == expected
    if BASH is not None:
        assert _bash_words(script, tmp_path) == expected


@pytest.mark.parametrize(
    "before, branch, tp, big, expected",
    [
        ("set_tp() { TP=$1; }\nTP=1\n", "set_tp 8", "$TP", "1", 8),  # a call: what it sets
        ("declare -A M=([tp]=1)\n", "M[tp]=8", "${M[tp]}", "0", 1),  # an element
    ],
)
def test_what_an_unknown_branch_sets_is_unknown(before, branch, tp, big, expected):
    text = (
        f'#!/bin/bash\n{before}if [ "$BIG" = 1 ]; then {branch}; fi\n'
        f"torchrun pretrain_gpt.py {SHAPE} --tensor-model-parallel-size {tp}\n"
    )
    with pytest.raises(SpecError, match="BIG"):
        parse_megatron(text, "x.sh", 8)
    assert parse_megatron(text, "x.sh", 8, variables={"BIG": big}).config.tp == expected
