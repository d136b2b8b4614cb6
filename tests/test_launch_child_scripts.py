"""Script files a launch runs as another process (planner/launch/megatron/child_scripts.py): the
job script ``sbatch FILE ARGS`` submits and the file ``bash FILE ARGS`` runs (after ``srun`` too)
are read in a new shell holding the exported variables, with ARGS as positional parameters; and
the export attribute (``export NAME`` before NAME has a value, ``unset``, the ``--set``
environment) decides what reaches such a shell. Where bash is installed the words are compared
with what bash itself gives a stub torchrun (``bash FILE``; ``sbatch`` needs Slurm)."""

import json
import shutil

import pytest

from planner.inputs.errors import SpecError
from tests.conftest import bash_argv, launch_script, planner_words

BASH = shutil.which("bash")
SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64"
)
JOB = f'#!/bin/bash\n#SBATCH --nodes=2\nPP=$1\ntorchrun pretrain_gpt.py {SHAPE} --tp "$TP" --pp "$PP" --h "$HIDDEN"\n'


def _after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_sbatch_reads_the_job_script_with_the_exported_environment(tmp_path):
    """An exported variable reaches the job, one set without ``export`` is empty there, the
    arguments after FILE are its $1...; sbatch's own options (``--nodes 2``, ``-J NAME``) come
    before FILE."""
    (tmp_path / "job.sh").write_text(JOB)
    words = planner_words(tmp_path, "export TP=2\nHIDDEN=local\nsbatch --nodes 2 -J run job.sh 4\n")
    assert (_after(words, "--tp"), _after(words, "--pp"), _after(words, "--h")) == ("2", "4", "")


@pytest.mark.parametrize(
    "export, tp, hidden",
    [
        ("--export=NONE", "", ""),
        ("--export=TP", "2", ""),
        ("--export TP=8", "8", ""),
        ("--export=ALL,HIDDEN=x", "2", "x"),
        ("--export=TP,LOCAL", "2", ""),
    ],
)
def test_sbatch_export_option_decides_the_jobs_environment(tmp_path, export, tp, hidden):
    """sbatch(1) ``--export``: NONE passes nothing, a list of names only those (NAME=VALUE giving
    its value), ALL with a list everything and the list; a name the script did not export is not
    in sbatch's environment, so empty in the job even when listed."""
    job = JOB.replace('--h "$HIDDEN"', '--h "$HIDDEN$LOCAL"')
    (tmp_path / "job.sh").write_text(job)
    words = planner_words(tmp_path, f"export TP=2\nexport HIDDEN=h\nLOCAL=l\nsbatch {export} job.sh 1\n")
    assert (_after(words, "--tp"), _after(words, "--h")) == (tp, hidden)


def test_sbatch_chdir_runs_the_job_there_and_reads_the_file_where_sbatch_runs(tmp_path):
    """``--chdir DIR`` / ``-D DIR`` (relative to where sbatch runs): the job runs in DIR, but sbatch
    reads FILE where it runs itself (Slurm's sbatch.c reads the script before submitting; the job's
    working directory is only a field of the request), so a FILE only in DIR is not found."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "job.sh").write_text(JOB.replace('--h "$HIDDEN"', '--h "$PWD"'))
    for option in ("-D jobs", "--chdir=jobs", "--chdir jobs", "-Djobs"):
        words = planner_words(tmp_path, f"export TP=4\nsbatch {option} job.sh 2\n")
        assert (_after(words, "--tp"), _after(words, "--pp")) == ("4", "2")
        assert _after(words, "--h") == str(tmp_path / "jobs")
    (tmp_path / "jobs" / "only.sh").write_text(JOB)
    with pytest.raises(SpecError, match=r"no launch found.*submits only\.sh with sbatch"):
        planner_words(tmp_path, "export TP=2\nsbatch -D jobs only.sh\nexit 0\n")


SBATCH_OPTION_FIXTURES = {
    # (the job's #SBATCH lines, what the submitting script does, expected --tp and --h)
    "directive_export_none": ("#SBATCH --export=NONE\n", "sbatch job.sh", ("", "")),
    "directive_export_names": ("#SBATCH --export=TP\n", "sbatch job.sh", ("2", "")),
    "command_line_over_directive": ("#SBATCH --export=NONE\n", "sbatch --export=ALL job.sh", ("2", "h")),
    "environment_over_directive": (
        "#SBATCH --export=NONE\n",
        "export SBATCH_EXPORT=ALL\nsbatch job.sh",
        ("2", "h"),
    ),
    "command_line_over_environment": (
        "",
        "export SBATCH_EXPORT=NONE\nsbatch --export=TP job.sh",
        ("2", ""),
    ),
    "unexported_sbatch_export_is_not_read": ("", "SBATCH_EXPORT=NONE\nsbatch job.sh", ("2", "h")),
    "later_directive_wins": ("#SBATCH --export=NONE\n#SBATCH --export=ALL\n", "sbatch job.sh", ("2", "h")),
    "directive_with_a_comment": ("#SBATCH --export=TP  # only TP\n", "sbatch job.sh", ("2", "")),
    "directive_after_a_command_is_a_comment": ("true\n#SBATCH --export=NONE\n", "sbatch job.sh", ("2", "h")),
    "not_a_directive": ("#SBATCHX --export=NONE\n##SBATCH --export=NONE\n", "sbatch job.sh", ("2", "h")),
}


@pytest.mark.parametrize("name", sorted(SBATCH_OPTION_FIXTURES))
def test_sbatch_options_from_directives_environment_and_command_line(tmp_path, name):
    """sbatch(1): a job script's ``#SBATCH`` lines before its first command give options, the
    ``SBATCH_EXPORT`` environment variable overrides them and the command line overrides both."""
    directives, submit, expected = SBATCH_OPTION_FIXTURES[name]
    job = JOB.replace("#SBATCH --nodes=2\n", "#SBATCH --nodes=2\n" + directives)
    (tmp_path / "job.sh").write_text(job.replace('--h "$HIDDEN"', '--h "$HIDDEN$LOCAL"'))
    words = planner_words(tmp_path, f"export TP=2\nexport HIDDEN=h\nLOCAL=l\n{submit} 1\n")
    assert (_after(words, "--tp"), _after(words, "--h")) == expected


def test_sbatch_directive_chdir_is_the_jobs_directory(tmp_path):
    (tmp_path / "job.sh").write_text(
        JOB.replace("#SBATCH --nodes=2\n", "#SBATCH -D /scratch/run\n").replace('--h "$HIDDEN"', '--h "$PWD"')
    )
    words = planner_words(tmp_path, "export TP=2\nsbatch job.sh 1\n")
    assert _after(words, "--h") == "/scratch/run"
    words = planner_words(tmp_path, "export TP=2\nsbatch --chdir=/other job.sh 1\n")
    assert _after(words, "--h") == "/other"


def test_return_at_the_top_of_a_wrapped_job_does_not_end_it(tmp_path):
    """bash: "can only `return' from a function or sourced script": status 1, and the job goes
    on (was: the return escaped the job and ended planner's reading with a traceback)."""
    words = planner_words(tmp_path, f"sbatch --wrap 'return 1; torchrun pretrain_gpt.py {SHAPE} --tp 2'\n")
    assert _after(words, "--tp") == "2"


def test_sbatch_wrap_runs_its_string_as_the_job(tmp_path):
    """``sbatch --wrap STRING``: sbatch wraps STRING in a /bin/sh script (Slurm's ``_script_wrap``),
    run as a job with the ``--export`` environment."""
    wrap = f"torchrun pretrain_gpt.py {SHAPE} --tp $TP --h x$HIDDEN"
    words = planner_words(tmp_path, f"export TP=2\nexport HIDDEN=h\nsbatch -N 2 --wrap '{wrap}'\n")
    assert (_after(words, "--tp"), _after(words, "--h")) == ("2", "xh")
    words = planner_words(tmp_path, f"export TP=2\nexport HIDDEN=h\nsbatch --export=TP --wrap='{wrap}'\n")
    assert (_after(words, "--tp"), _after(words, "--h")) == ("2", "x")


def test_sbatch_here_document_takes_sbatchs_options(tmp_path):
    """A job given on sbatch's standard input has sbatch's ``--export`` and ``--chdir`` and its own
    ``#SBATCH`` lines, and Slurm's ``SLURM_*`` variables are set in it (``set -u`` does not stop at
    them)."""
    body = (
        "#!/bin/bash\n#SBATCH --export=TP\nset -u\nN=$SLURM_NNODES\n"
        f'torchrun pretrain_gpt.py {SHAPE} --tp $TP --h "x${{HIDDEN:-}}$PWD"\n'
    )
    script = f"export TP=2\nexport HIDDEN=h\nsbatch -D /run <<'EOF'\n{body}EOF\n"
    words = planner_words(tmp_path, script)
    assert (_after(words, "--tp"), _after(words, "--h")) == ("2", "x/run")
    words = planner_words(tmp_path, script.replace("sbatch -D /run", "sbatch --export=ALL"))
    assert (_after(words, "--tp"), _after(words, "--h")) == ("2", f"xh{tmp_path}")


def test_bash_s_arguments_are_the_here_documents_positional_parameters(tmp_path):
    body = f'torchrun pretrain_gpt.py {SHAPE} --tp "$1" --pp "$2" --h "$0"\n'
    words = planner_words(tmp_path, f"bash -s 4 2 <<'EOF'\n{body}EOF\n")
    assert (_after(words, "--tp"), _after(words, "--pp"), _after(words, "--h")) == ("4", "2", "bash")


def test_sbatch_of_a_missing_job_script_names_it(tmp_path):
    """A job script that is not beside the wrapper is not read: no launch, and the message says
    which file to check."""
    with pytest.raises(SpecError, match=r"no launch found.*submits job\.sh with sbatch"):
        planner_words(tmp_path, "export TP=2\nsbatch job.sh\nexit 0\n")


CHILD_FIXTURES = {
    "bash_file_with_arguments": ("HIDDEN=local\nexport TP=2\nbash job.sh 4\n", "job.sh"),
    "redirections_are_not_arguments": ("HIDDEN=local\nexport TP=2\nbash job.sh > log 4 2>&1\n", "job.sh"),
    "after_srun_and_options": ("HIDDEN=local\nexport TP=2\nsrun -N 2 bash -x job.sh 2\n", "job.sh"),
    "exit_of_the_child_does_not_stop_the_script": (
        "HIDDEN=local\nexport TP=2\nbash stop.sh\nbash job.sh 8\n",
        "job.sh",
    ),
    "export_without_value_then_assignment": ("HIDDEN=local\nexport TP\nTP=4\nbash job.sh 2\n", "job.sh"),
    "declare_x_then_assignment": ("HIDDEN=local\ndeclare -x TP\nTP=8\nbash job.sh 1\n", "job.sh"),
    "unset_clears_the_export_attribute": (
        "HIDDEN=local\nexport TP=2\nunset TP\nTP=4\nbash job.sh 2\n",
        "job.sh",
    ),
    "set_a_exports": ("HIDDEN=local\nset -a\nTP=2\nset +a\nbash job.sh 2\n", "job.sh"),
    "return_outside_a_function_is_an_error_the_child_goes_on": (
        "HIDDEN=local\nexport TP=2\nbash ret.sh 4\n",
        "ret.sh",
    ),
    "executed_by_its_path": ("HIDDEN=local\nexport TP=2\n./job.sh 4\n", "job.sh"),
    "executed_from_the_scripts_directory": (
        'HIDDEN=local\nexport TP=2\n"$(dirname "$0")"/job.sh 4\n',
        "job.sh",
    ),
    "executed_after_srun": ("HIDDEN=local\nexport TP=2\nchmod +x ./job.sh\nsrun -N 2 ./job.sh 2\n", "job.sh"),
    "executed_without_a_shebang": ("HIDDEN=local\nexport TP=2\n./plain.sh 8\n", "plain.sh"),
    # bash(1) "exec": "If command is specified, it replaces the shell": nothing after it runs
    "exec_replaces_the_shell": (
        f"HIDDEN=local\nexport TP=2\nexec ./job.sh 4\ntorchrun pretrain_gpt.py {SHAPE} --tp 1\n",
        "job.sh",
    ),
    "exec_with_options_replaces_the_shell": (
        f"HIDDEN=local\nexport TP=2\nexec -a job 2>&1 ./job.sh 4\ntorchrun pretrain_gpt.py {SHAPE} --tp 1\n",
        "job.sh",
    ),
    "exec_with_only_redirections_keeps_the_shell": (
        "exec 2>&1\nexec 3>/dev/null\nHIDDEN=local\nexport TP=2\nbash job.sh 4\n",
        "job.sh",
    ),
    "exec_in_a_subshell_ends_only_it": (
        "HIDDEN=local\nexport TP=2\n( exec ./stop.sh )\nbash job.sh 8\n",
        "job.sh",
    ),
    "exec_in_a_function_ends_the_script": (
        f'HIDDEN=local\nexport TP=2\nrun() {{ exec ./job.sh "$@"; }}\nrun 2\ntorchrun pretrain_gpt.py {SHAPE}\n',
        "job.sh",
    ),
}


def _write_children(tmp_path):
    (tmp_path / "job.sh").write_text(JOB)
    (tmp_path / "plain.sh").write_text(JOB.replace("#!/bin/bash\n", ""))
    (tmp_path / "stop.sh").write_text("#!/bin/bash\nexit 3\n")
    (tmp_path / "ret.sh").write_text(JOB.replace("PP=$1\n", "return 1 2>/dev/null\nPP=$1\n"))
    for name in ("job.sh", "plain.sh", "stop.sh", "ret.sh"):
        (tmp_path / name).chmod(0o755)


def test_a_file_named_as_an_argument_or_not_a_shell_script_is_not_run(tmp_path):
    """Only a command (first, or after a wrapper such as srun) runs a file: ``cat ./job.sh`` and
    ``cp`` do not; a Python file or another interpreter's script is not read as a shell script."""
    _write_children(tmp_path)
    (tmp_path / "tool.py").write_text(f"#!/usr/bin/env python3\nprint('torchrun pretrain_gpt.py {SHAPE}')\n")
    (tmp_path / "tool.sh").write_text("#!/usr/bin/env zsh\ntorchrun pretrain_gpt.py --tp 8\n")
    script = (
        "export TP=2\ncat ./job.sh\ncp ./job.sh /tmp/x\n./tool.py\n./tool.sh\n"
        f"torchrun pretrain_gpt.py {SHAPE} --tp 1\n"
    )
    words = planner_words(tmp_path, script)
    assert words.count("--num-layers") == 1 and _after(words, "--tp") == "1"


@pytest.mark.parametrize("name", sorted(CHILD_FIXTURES))
def test_child_script_words_agree_with_bash(name, tmp_path):
    script, _ = CHILD_FIXTURES[name]
    _write_children(tmp_path)
    words = planner_words(tmp_path, script)
    assert words[:2] == ["--num-layers", "32"]
    if BASH is None:
        return
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nshift 2\nexec "$@"\n')  # srun -N 2 CMD...: runs CMD here
    srun.chmod(0o755)
    argv, status = bash_argv(launch_script(tmp_path, script), tmp_path)
    assert status == 0
    assert words == argv


def test_set_environment_is_exported_when_the_script_reassigns_it(tmp_path):
    """A ``--set`` variable is the environment the script starts in: inherited, so exported, and
    a new value the script gives it reaches the child too."""
    (tmp_path / "job.sh").write_text(JOB)
    words = planner_words(tmp_path, "TP=8\nbash job.sh 2\n", {"TP": "2"})
    assert _after(words, "--tp") == "8"


def test_a_child_in_a_branch_that_cannot_be_known_is_an_error_naming_it(tmp_path):
    (tmp_path / "job.sh").write_text(JOB)
    with pytest.raises(SpecError, match=r"branch of the if/case on line 3.*MODE"):
        planner_words(tmp_path, 'export TP=2\nif [ "$MODE" = train ]; then\n  bash job.sh 2\nfi\n')


def test_an_error_in_the_child_names_its_file(tmp_path):
    (tmp_path / "job.sh").write_text("#!/bin/bash\nif [ 1 = 1 ]; then\n")
    with pytest.raises(SpecError, match=r"line 3: job\.sh \(run by bash\): the script ends inside an if"):
        planner_words(tmp_path, "\nbash job.sh\n")


def test_a_script_that_runs_itself_is_bounded(tmp_path):
    """``bash "$0"`` would recurse for ever: an error, not a hang or a traceback."""
    with pytest.raises(SpecError, match=r"^line 2: launch\.sh \(run by bash\): scripts nest deeper") as info:
        planner_words(tmp_path, 'bash "$0"\n')
    assert str(info.value).count("run by bash") == 1  # said once, not once per level


def test_check_reads_an_sbatch_wrapper_end_to_end(tmp_path, run_cli):
    """``planner check submit.sh`` judges the launch in the job script it submits, with the
    environment the job inherits and exports itself (CUDA_DEVICE_MAX_CONNECTIONS, which tp 2
    needs): the same verdict and prediction as checking the job script given that environment
    (``--set``) and arguments (``--arg``)."""
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        f"torchrun --nproc-per-node 8 pretrain_gpt.py {SHAPE} --tensor-model-parallel-size $TP "
        "--pipeline-model-parallel-size $1 --bf16 --vocab-size 32000 --lr 1e-4 --train-iters 10\n"
    )
    path = launch_script(tmp_path, "export TP=2\nsbatch --nodes=2 job.sh 2\n")
    cluster = ("--cluster", "dgx-h100", "--nodes", "2", "--json")
    wrapped = run_cli("check", str(path), *cluster)
    direct = run_cli("check", str(job), "--set", "TP=2", "--arg", "2", *cluster)
    other = run_cli("check", str(job), "--set", "TP=4", "--arg", "1", *cluster)
    assert wrapped.exit_code == direct.exit_code == 0, wrapped.stdout + wrapped.stderr
    step = [json.loads(r.stdout)["configs"][0]["metrics"]["step_time_s"] for r in (wrapped, direct, other)]
    assert step[0] == step[1] != step[2]


@pytest.mark.parametrize(
    ("words", "text", "expected"),
    [
        (["exec", "./job.sh", "4"], "exec ./job.sh 4", "exec ./job.sh"),
        (["exec", "-c", "-a", "name", "--", "torchrun", "x.py"], "", "exec torchrun"),
        (["exec", ">", "log", "2>&1"], "exec > log 2>&1", None),
        (["exec", "2>&1"], "exec 2>&1", None),
        (["exec", ">", ">(tee", "log)"], "exec > >(tee log)", None),  # process substitution: left alone
        (["exec", "./job.sh", "|", "tee", "log"], "", None),  # a pipeline's command runs in a subshell
        (["exec", "./job.sh", "&"], "", None),
        (["echo", "exec", "./job.sh"], "", None),
    ],
)
def test_exec_replaces_the_shell_only_with_a_command(words, text, expected):
    from planner.launch.megatron.shell_exit import exec_replaces

    assert exec_replaces(words, text) == expected
