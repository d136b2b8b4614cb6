"""``exit``, ``set -e``, ``set -u``, ``set -o pipefail`` and brace groups in a launch script, read
as bash runs them (planner/launch/megatron/shell_exit.py). Each fixture is a script written here;
where it launches, planner's words are compared with the argv bash itself gives a stub torchrun;
where bash stops before the launch (the stub never runs), planner says no launch was found and
names the line it stops on. What planner cannot determine is a one-line error naming the
variable and ``--set``."""

import shutil

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from tests.conftest import bash_argv

BASH = shutil.which("bash")

LAUNCHES = {
    # bash(1) "exit": the words after an exit never run; an exit in a branch the script decides
    # against, or in a function nobody calls, stops nothing.
    "exit_after_the_launch": ("torchrun pretrain_gpt.py a\nexit 0\necho never\n", ["a"]),
    "exit_in_a_branch_not_taken": (
        'TP=2\nif [ "$TP" = 2 ]; then A=x; else exit 1; fi\ntorchrun pretrain_gpt.py "$A"\n',
        ["x"],
    ),
    "exit_in_a_function_not_called": (
        'die() { echo "$1" >&2; exit 1; }\nV=1\n[ "$V" = 1 ] || die "V must be 1"\ntorchrun pretrain_gpt.py "$V"\n',
        ["1"],
    ),
    "exit_in_a_case_arm_not_taken": (
        'M=8b\ncase "$M" in\n  8b) L=32 ;;\n  *) echo "unknown $M"; exit 1 ;;\nesac\ntorchrun pretrain_gpt.py "$L"\n',
        ["32"],
    ),
    # bash(1) "Pipelines": each command of a pipeline runs in a subshell; its exit ends only that.
    "exit_in_a_pipeline_is_a_subshells": ("echo x | exit 3\ntorchrun pretrain_gpt.py y\n", ["y"]),
    # brace groups after && / ||: run on the status of the list before them.
    "brace_group_after_a_command_that_succeeds": (
        'mkdir -p logs || {\n  echo "cannot create logs" >&2\n  exit 1\n}\nA=1\n[ "$A" = 1 ] && { B=2; C=3; }\n'
        "torchrun pretrain_gpt.py $B $C\n",
        ["2", "3"],
    ),
    # bash(1) "set -e": the failures it exempts.
    "errexit_exempts_conditions_lists_and_negation": (
        "set -e\nfalse || true\nif false; then X=no; fi\n! false\nfalse && echo never\n"
        '[ 1 = 2 ] && A=no\ntorchrun pretrain_gpt.py "${X:-yes}"\n',
        ["yes"],
    ),
    "errexit_ignored_inside_a_function_called_before_or": (
        'f() { false; A=ran; }\nset -e\nf || true\ntorchrun pretrain_gpt.py "$A"\n',
        ["ran"],
    ),
    "errexit_off_again_with_plus_e": ("set -e\nset +e\nfalse\ntorchrun pretrain_gpt.py z\n", ["z"]),
    "pipeline_status_is_the_last_commands_without_pipefail": (
        "set -e\nfalse | cat\ntorchrun pretrain_gpt.py p\n",
        ["p"],
    ),
    # bash(1) "set -u": the operators with a default, "$@" and "${A[@]}" are not errors.
    "nounset_exempts_defaults_and_at": (
        'set -u\nA="${X:-d}"\nB="${X-e}${X:+f}"\nC=()\ntorchrun pretrain_gpt.py "$A" "$B" "$@" "${C[@]}" "${#C[@]}"\n',
        ["d", "e", "0"],
    ),
    "set_double_dash_sets_the_positional_parameters": (
        'set -euo pipefail -- "a b" c\ntorchrun pretrain_gpt.py "$@" "$#"\n',
        ["a b", "c", "2"],
    ),
    # bash(1) "( list )": a subshell; its assignments stay in it, its exit ends only it, its
    # status is the exit's or its last command's
    "subshell_assignments_do_not_leak": (
        'A=1\n(A=2; B=3; cd /)\ntorchrun pretrain_gpt.py "$A" "${B:-unset}"\n',
        ["1", "unset"],
    ),
    "exit_in_a_subshell_ends_only_it": (
        '( exit 1 )\n(exit 0) && A=ok\n( exit 3 ) || B=failed\n(true) && C=yes\ntorchrun pretrain_gpt.py "$A" "$B" "$C"\n',
        ["ok", "failed", "yes"],
    ),
    "errexit_ignores_a_subshell_before_or": (
        "set -e\n( false; exit 1 ) || echo handled\n( exit 2 ) | cat\ntorchrun pretrain_gpt.py after\n",
        ["after"],
    ),
    "training_command_in_a_subshell": (
        'A=1\n(A=2; cd /tmp && torchrun pretrain_gpt.py "$A" > log.txt)\necho "$A"\n',
        ["2"],
    ),
    # set -e in a branch planner cannot decide, and nothing fails after it: the same launch either way
    "errexit_in_an_undecidable_branch_with_nothing_failing": (
        'if [ "$X" = 1 ]; then set -e; fi\ntrue\nmkdir -p logs\nfalse || true\ntorchrun pretrain_gpt.py x\n',
        ["x"],
    ),
    "training_command_in_a_piped_subshell": ("(torchrun pretrain_gpt.py p) 2>&1 | tee log.txt\n", ["p"]),
    # set -u / set -o pipefail in a branch planner cannot decide, and nothing they change follows
    "nounset_in_an_undecidable_branch_with_only_defaults_after": (
        'if [ "$X" = 1 ]; then set -u; fi\nA="${DATA:-d}"\nB=()\ntorchrun pretrain_gpt.py "$A" "$@" "${B[@]}"\n',
        ["d"],
    ),
    "pipefail_in_an_undecidable_branch_with_no_pipeline_failing": (
        'set -e\n[ -n "$X" ] && set -o pipefail\ntrue | cat\nfalse | true || echo handled\ntorchrun pretrain_gpt.py x\n',
        ["x"],
    ),
}

STOPS = {
    # (script, the line planner names, the words of its reason); bash never runs the launch.
    "exit_before_the_launch": ("echo hi\nexit 0\ntorchrun pretrain_gpt.py x\n", 3, r"\(exit 0\)"),
    "exit_in_a_branch_taken": (
        'TP=3\nif [ "$TP" != 2 ]; then\n  echo "tp must be 2"\n  exit 1\nfi\ntorchrun pretrain_gpt.py x\n',
        5,
        r"\(exit 1\)",
    ),
    "exit_in_a_called_function": (
        'die() {\n  exit 2\n}\nV=0\n[ "$V" = 1 ] || die\ntorchrun pretrain_gpt.py x\n',
        3,
        r"\(in die, called on line 6\) \(exit 2\)",
    ),
    "errexit_on_false": (
        "set -e\nfalse\ntorchrun pretrain_gpt.py x\n",
        3,
        r"set -e \(line 2\) and 'false' fails",
    ),
    "errexit_on_a_function_that_returns_1": (
        "f() { return 1; }\nset -o errexit\nf\ntorchrun pretrain_gpt.py x\n",
        4,
        r"set -e \(line 3\) and 'f' fails",
    ),
    "errexit_on_the_last_command_of_a_list": (
        "set -e\ntrue && [ a = b ]\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'\[ a = b \]' fails",
    ),
    "errexit_on_return_outside_a_function": (
        "set -e\nreturn 1\ntorchrun pretrain_gpt.py x\n",
        3,
        "'return 1' fails",
    ),
    "errexit_on_shift_past_the_arguments": (
        "set -e\nshift\ntorchrun pretrain_gpt.py x\n",
        3,
        "'shift' fails",
    ),
    "errexit_with_pipefail_on_a_failing_pipeline": (
        "set -eo pipefail\nfalse | cat\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'cat' fails",
    ),
    "errexit_on_a_failing_subshell": (
        "set -e\n( exit 1 )\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'\( exit 1 \)' fails",
    ),
    "errexit_inside_and_on_a_subshell": (
        "set -e\n(A=1; false; exit 0)\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'\( A=1; false; exit 0 \)' fails",
    ),
    "errexit_with_pipefail_on_a_piped_subshell": (
        "set -eo pipefail\n( exit 2 ) | cat\ntorchrun pretrain_gpt.py x\n",
        3,
        r"'\( exit 2 \)' fails",
    ),
    "nounset_on_a_variable_the_script_unset": (
        "set -u\nX=1\nunset X\necho $X\ntorchrun pretrain_gpt.py x\n",
        5,
        r"set -u \(line 2\) and X is unset \(bash: X: unbound variable\)",
    ),
    "nounset_on_a_missing_positional_parameter": (
        'set -u\nMODEL=$1\ntorchrun pretrain_gpt.py "$MODEL"\n',
        3,
        r"\$1: unbound variable",
    ),
    "nounset_on_a_missing_element": (
        'set -u\ndeclare -A C=([8b]=32)\nL=${C[70b]}\ntorchrun pretrain_gpt.py "$L"\n',
        4,
        r"C\[70b\]: unbound variable",
    ),
}


def _bash(script: str, tmp_path) -> tuple[list[str] | None, int]:
    """The words bash gives the stub torchrun running ``script`` (None: the stub never ran), and
    bash's exit status."""
    (tmp_path / "bash_launch.sh").write_text("#!/bin/bash\n" + script)
    return bash_argv(tmp_path / "bash_launch.sh", tmp_path)


def _planner(script: str, tmp_path, preset: dict | None = None) -> list[str]:
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n" + script)
    words, _, is_script = megatron_words(path.read_text(), preset, path)
    assert is_script
    return [w for w, _ in words]


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches_are_read_as_written(name, tmp_path):
    script, expected = LAUNCHES[name]
    assert _planner(script, tmp_path) == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_launches_agree_with_bash(name, tmp_path):
    script, expected = LAUNCHES[name]
    assert _bash(script, tmp_path)[0] == expected


@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_before_the_launch_say_no_launch_naming_the_line(name, tmp_path):
    script, line, why = STOPS[name]
    with pytest.raises(SpecError, match=rf"^no launch found: the script stops on line {line}\b.*{why}"):
        _planner(script, tmp_path)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(STOPS))
def test_stops_agree_with_bash(name, tmp_path):
    """bash stops there too: the stub never runs and the status is not 0."""
    words, status = _bash(STOPS[name][0], tmp_path)
    assert words is None and (status != 0 or name == "exit_before_the_launch")


@pytest.mark.parametrize(
    "script, match",
    [
        # an exit in a branch no value decides: whether the launch runs depends on the variable
        (
            'if [ "$MODE" = debug ]; then\n  exit 0\nfi\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(exit 0\) before the training command on line 5: it is in a "
            r"branch of the if/case on line 2, which depends on MODE, .*--set MODE=VALUE",
        ),
        ('[ -n "$DATA" ] || exit 1\ntorchrun pretrain_gpt.py x\n', r"^line 2: .*\(exit 1\).*depends on DATA"),
        (
            'set -e\nif [ "$X" = 1 ]; then false; fi\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(set -e \(line 2\) and 'false' fails\).*depends on X",
        ),
        (
            'die() { exit 1; }\n[ "$OK" = 1 ] || die\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(exit 1\).*depends on OK",
        ),
        # set -u on a name the script never sets: the environment may give it
        (
            'set -u\nL=$LAYERS\ntorchrun pretrain_gpt.py "$L"\n',
            r"^line 3: LAYERS is expanded under set -u \(line 2\) and the script never sets it.*--set LAYERS=VALUE",
        ),
        ("set -u\necho $((N + 1))\n", r"^line 3: N is expanded under set -u"),
        ("{ A=1\n", r"the script ends inside a \{ group \(no closing \}\)"),
        # set -e in a branch no value decides, then a command that fails: the script may stop there
        (
            'if [ "$X" = 1 ]; then set -e; fi\nfalse\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(set -e \(line 2, if it ran\) and 'false' fails\) before the "
            r"training command on line 4: .* on line 2, which depends on X, .*--set X=VALUE",
        ),
        # set -u in a branch no value decides, then an unset variable: the script may stop there
        (
            'if [ "$X" = 1 ]; then set -u; fi\nunset D\necho "$D"\ntorchrun pretrain_gpt.py x\n',
            r"^line 4: the script may stop here \(set -u \(line 2, if it ran\) and D is unset\) before the "
            r"training command on line 5: .* on line 2, which depends on X, .*--set X=VALUE",
        ),
        (
            '[ -n "$X" ] && set -euo pipefail\nf() { echo "$2"; }\nf a\ntorchrun pretrain_gpt.py x\n',
            r"^line 4: the script may stop here \(set -u \(line 2, if it ran\) and \$2 is unset\).*depends on X",
        ),
        (
            'if [ "$X" = 1 ]; then set -u; fi\nP=$DATA\ntorchrun pretrain_gpt.py "$P"\n',
            r"^line 3: the script may stop here \(set -u \(line 2, if it ran\) and DATA, which the script never "
            r"sets, is expanded\).*depends on X",
        ),
        # set -o pipefail in a branch no value decides, then a pipeline that fails only under it
        (
            'set -e\nif [ "$X" = 1 ]; then set -o pipefail; fi\nfalse | cat\ntorchrun pretrain_gpt.py x\n',
            r"^line 4: the script may stop here \(set -e \(line 2\) and 'false \| cat' fails under set -o "
            r"pipefail \(line 3, if it ran\)\) before the training command on line 5: .*depends on X",
        ),
        (
            '[ "$X" = 1 ] && set -eo pipefail\n( exit 3 ) | cat\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(set -e \(line 2, if it ran\) and '\( exit 3 \) \| cat' fails "
            r"under set -o pipefail \(line 2, if it ran\)\).*depends on X",
        ),
        (
            'if [ "$X" = 1 ]; then set -o pipefail; fi\nfalse | true || exit 4\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(exit 4\).* on line 2, which depends on X",
        ),
        # a subshell that may exit: under set -e the script may stop there
        (
            'set -e\n( if [ "$M" = d ]; then exit 1; fi )\ntorchrun pretrain_gpt.py x\n',
            r"^line 3: the script may stop here \(set -e \(line 2\) and '\( if .* \)' may fail\).*depends on M",
        ),
    ],
)
def test_undeterminable_stops_are_errors_naming_the_variable(script, match, tmp_path):
    with pytest.raises(SpecError, match=match):
        _planner(script, tmp_path)


def test_set_decides_an_exit_branch(tmp_path):
    """``--set`` gives the value the branch is decided on: debug stops, prod launches."""
    script = 'if [ "$MODE" = debug ]; then\n  exit 0\nfi\ntorchrun pretrain_gpt.py "$MODE"\n'
    assert _planner(script, tmp_path, {"MODE": "prod"}) == ["prod"]
    with pytest.raises(SpecError, match=r"^no launch found: the script stops on line 3 \(exit 0\)"):
        _planner(script, tmp_path, {"MODE": "debug"})
    assert _planner("set -u\n" + script.replace("$MODE", "${MODE}"), tmp_path, {"MODE": "prod"}) == ["prod"]


UNDECIDED_OPTIONS = [
    # a script whose launch hangs on whether the branch setting an option runs (X=1: bash stops)
    'if [ "$X" = 1 ]; then set -e; fi\nfalse\ntorchrun pretrain_gpt.py x\n',
    'if [ "$X" = 1 ]; then set -u; fi\nunset D\necho "$D"\ntorchrun pretrain_gpt.py x\n',
    'set -e\nif [ "$X" = 1 ]; then set -o pipefail; fi\nfalse | cat\ntorchrun pretrain_gpt.py x\n',
    '[ "$X" = 1 ] && set -euo pipefail\nfalse | true\ntorchrun pretrain_gpt.py x\n',
]


@pytest.mark.parametrize("script", UNDECIDED_OPTIONS)
def test_set_decides_an_option_set_in_a_branch(script, tmp_path):
    """``--set X=...`` decides the branch: planner launches where bash does and names the stop
    where bash stops."""
    assert _planner(script, tmp_path, {"X": "0"}) == ["x"]
    with pytest.raises(
        SpecError, match=r"^no launch found: the script stops on line \d+ \(set -[eu] \(line 2"
    ):
        _planner(script, tmp_path, {"X": "1"})


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("script", UNDECIDED_OPTIONS)
def test_options_set_in_a_branch_agree_with_bash(script, tmp_path):
    assert _bash("X=0\n" + script, tmp_path)[0] == ["x"]
    words, status = _bash("X=1\n" + script, tmp_path)
    assert words is None and status != 0


def test_set_decides_a_set_e_branch(tmp_path):
    script = 'if [ "$X" = 1 ]; then set -e; fi\nfalse\ntorchrun pretrain_gpt.py x\n'
    assert _planner(script, tmp_path, {"X": "0"}) == ["x"]
    with pytest.raises(SpecError, match=r"^no launch found: the script stops on line 3 \(set -e \(line 2\)"):
        _planner(script, tmp_path, {"X": "1"})


def test_stops_that_hang_on_commands_or_cluster_files_are_not_taken(tmp_path):
    """Commands are not run, and a file outside the script's directory is on the cluster: a stop
    that needs one to fail is not taken (the launch is read as it is meant to run)."""
    script = (
        "set -euo pipefail\ncd /workspace/megatron || exit 1\nif ! python -c 'import megatron'; then exit 1; fi\n"
        '[ -f /data/tokenizer.model ] || { echo "no tokenizer"; exit 1; }\n'
        "echo $SLURM_JOB_ID $HOME $HOSTNAME\ntorchrun pretrain_gpt.py ok\n"
    )
    with pytest.raises(SpecError, match="SLURM_JOB_ID is expanded under set -u"):
        _planner(script, tmp_path)
    assert _planner("#SBATCH --nodes=1\n" + script, tmp_path) == ["ok"]


def test_exit_in_a_sourced_file_names_it(tmp_path):
    (tmp_path / "env.sh").write_text("A=1\nexit 4\n")
    with pytest.raises(SpecError, match=r"stops on line 2 \(in env.sh, sourced on line 2\) \(exit 4\)"):
        _planner("source env.sh\ntorchrun pretrain_gpt.py x\n", tmp_path)


def test_exit_in_a_job_script_ends_only_the_job(tmp_path):
    """sbatch's here-document is the job's own shell: its exit ends the job after its launch; the
    submitting script goes on."""
    script = "sbatch <<EOF\ntorchrun pretrain_gpt.py job\nexit 0\nEOF\nA=after\n"
    assert _planner(script, tmp_path) == ["job"]


def test_check_cli_says_no_launch_was_found(run_cli, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\nset -e\n[ 1 -eq 2 ]\ntorchrun pretrain_gpt.py --num-layers 2\n")
    result = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1")
    assert result.exit_code == 1
    assert (
        "no launch found: the script stops on line 3 (set -e (line 2) and '[ 1 -eq 2 ]' fails)"
        in result.stdout
    )
    assert "Traceback" not in result.stdout + result.stderr
