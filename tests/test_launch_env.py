"""The environment the training command starts with (planner/launch/megatron/launch_env.py): the
shell's exported variables changed by ``env NAME=VALUE``, ``env -u`` / ``-i``, ``srun --export=...``
and ``mpirun -x`` / ``-genv`` in front of it, so ``planner check`` judges what the training
processes get (CUDA_DEVICE_MAX_CONNECTIONS, which tp > 1 needs before Blackwell). The ``env(1)``
cases are compared with what the real env gives a stub torchrun, where bash is installed."""

import json
import os
import shutil
import subprocess

import pytest

from planner.launch.megatron.arguments import megatron_words

BASH = shutil.which("bash")
SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000 "
    "--lr 1e-4 --train-iters 10 --tensor-model-parallel-size 2"
)
VAR = "CUDA_DEVICE_MAX_CONNECTIONS"

# (the lines before the launch, the words in front of torchrun, the value the training command gets)
ENV_CASES = {
    "nothing": ("", "", None),
    "assignment_prefix": ("", f"{VAR}=1 ", "1"),
    "env_assignment": ("", f"env {VAR}=1 ", "1"),
    "env_unset_other_then_assignment": ("", f"env -u FOO {VAR}=1 ", "1"),
    "env_unset_it": (f"export {VAR}=1\n", f"env -u {VAR} ", None),
    "env_unset_long_option": (f"export {VAR}=1\n", f"env --unset={VAR} ", None),
    "env_ignore_environment": (f"export {VAR}=1\n", "env -i PATH=$PATH ", None),
    "env_ignore_then_assignment": (f"export {VAR}=2\n", f"env -i PATH=$PATH {VAR}=1 ", "1"),
}
LAUNCHER_CASES = {
    "srun_export_all_with_value": ("", f"srun -N 1 --export=ALL,{VAR}=1 ", "1"),
    "srun_export_separate_word": ("", f"srun --export ALL,{VAR}=1 ", "1"),
    "srun_export_none": (f"export {VAR}=1\n", "srun --export=NONE ", None),
    "srun_export_names_keeps_listed": (f"export {VAR}=1\n", f"srun --export=PATH,{VAR} ", "1"),
    "srun_export_names_drops_others": (f"export {VAR}=1\n", "srun --export=PATH ", None),
    "srun_then_env": ("", f"srun -N1 env {VAR}=1 ", "1"),
    "srun_export_unknown_leaves_it": (f"export {VAR}=1\n", "srun --export=$LIST ", "1"),
    "mpirun_x": ("", f"mpirun -np 8 -x {VAR}=1 ", "1"),
    "mpiexec_genv": ("", f"mpiexec -n 8 -genv {VAR} 1 ", "1"),
    "export_flag_of_torchrun_is_not_srun": ("", "torchrun --export=X ", None),
}


def _script(before: str, prefix: str) -> str:
    return f"#!/bin/bash\n{before}{prefix}torchrun --nproc-per-node 8 pretrain_gpt.py {SHAPE}\n"


@pytest.mark.parametrize("name", sorted({**ENV_CASES, **LAUNCHER_CASES}))
def test_the_training_commands_environment(name):
    before, prefix, expected = {**ENV_CASES, **LAUNCHER_CASES}[name]
    _, env, launch = megatron_words(_script(before, prefix), None, None)
    assert launch and env.get(VAR) == expected


@pytest.mark.skipif(BASH is None or shutil.which("env") is None, reason="bash or env is not installed")
@pytest.mark.parametrize("name", sorted(ENV_CASES))
def test_env_cases_agree_with_env(name, tmp_path):
    before, prefix, expected = ENV_CASES[name]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "torchrun"
    stub.write_text(f'#!/bin/bash\nprintf "%s" "${{{VAR}-unset}}" > "{tmp_path}/got"\n')
    stub.chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(_script(before, prefix))
    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    subprocess.run([BASH, str(script)], env={"PATH": path}, timeout=60, check=True, cwd=tmp_path)
    got = (tmp_path / "got").read_text()
    assert (None if got == "unset" else got) == expected


def test_check_accepts_a_launch_that_sets_the_variable_with_srun_export(run_cli, tmp_path):
    """The false failure this fixes: ``srun --export=ALL,CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun``
    was reported as a launch without the variable."""
    cluster = ("--cluster", "dgx-h100", "--nodes", "1")
    good, bad = tmp_path / "good.sh", tmp_path / "bad.sh"
    good.write_text(_script("", f"srun --export=ALL,{VAR}=1 "))
    bad.write_text(_script(f"export {VAR}=1\n", "srun --export=NONE "))
    assert run_cli("check", str(good), *cluster).exit_code == 0
    result = run_cli("check", str(bad), *cluster)
    assert result.exit_code == 1 and VAR in result.stdout


@pytest.mark.parametrize(
    "text, expected",
    [
        ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py", (2, "torchrun --nnodes 2 on line 2")),
        ("torchrun --nnodes=4:4 pretrain_gpt.py", (4, "torchrun --nnodes 4 on line 2")),
        ("torchrun --nnodes=1:4 pretrain_gpt.py", None),  # elastic: no one count
        ("srun -N2 python pretrain_gpt.py", (2, "srun -N 2 on line 2")),
        ("srun --nodes 3 torchrun --nnodes $N pretrain_gpt.py", (3, "srun --nodes 3 on line 2")),
        ("srun --nodes=2-4 python pretrain_gpt.py", None),
        ("#SBATCH -N 4\nsrun python pretrain_gpt.py", (4, "#SBATCH --nodes=4")),
        ("#SBATCH --nodes=4\nsrun -N 2 python pretrain_gpt.py", (2, "srun -N 2 on line 3")),
        ("python pretrain_gpt.py", None),
    ],
)
def test_the_node_count_a_launch_gives(text, expected):
    """torchrun's ``--nnodes`` (what the training processes are started on), else srun's ``-N``,
    else the batch script's ``#SBATCH --nodes``."""
    from planner.launch.megatron.arguments import launch_nodes

    assert launch_nodes(f"#!/bin/bash\n{text}\n") == expected


def test_check_takes_the_node_count_from_the_launch(run_cli, tmp_path):
    """With a node template and no ``--nodes``, check judges a launch on the nodes it names, says
    so in a notice, and gives the same prediction as ``--nodes`` would; a launch that names none is
    a usage error (exit 2) naming the file."""
    launch = tmp_path / "launch.sh"
    launch.write_text(
        f"#!/bin/bash\nexport {VAR}=1\ntorchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py {SHAPE}"
        " --use-distributed-optimizer\n"
    )
    inferred = run_cli("check", str(launch), "--cluster", "dgx-h100", "--json")
    given = run_cli("check", str(launch), "--cluster", "dgx-h100", "--nodes", "2", "--json")
    assert inferred.exit_code == given.exit_code == 0, inferred.stdout + inferred.stderr
    a, b = (json.loads(r.stdout)["configs"][0] for r in (inferred, given))
    assert a["metrics"]["step_time_s"] == b["metrics"]["step_time_s"]
    notes = [f["message"] for f in a["findings"] if f["check"] == "cluster"]
    assert notes == [
        "judged on dgx-h100 x 2 nodes, the node count of torchrun --nnodes 2 on line 3; --nodes N overrides"
    ]
    bare = tmp_path / "bare.sh"
    bare.write_text(f"#!/bin/bash\ntorchrun pretrain_gpt.py {SHAPE}\n")
    result = run_cli("check", str(bare), "--cluster", "dgx-h100")
    assert result.exit_code == 2 and "bare.sh does not give one" in result.stderr


@pytest.mark.parametrize(
    "submit, job, expected",
    [
        ("sbatch job.sh", "#SBATCH --nodes=4\n", (4, "#SBATCH --nodes=4 in job.sh")),
        (
            "sbatch -N 2 job.sh",
            "#SBATCH --nodes=4\n",
            (2, "sbatch --nodes 2 on line 2"),
        ),  # sbatch(1): the command line wins
        ("sbatch --nodes=3 job.sh", "", (3, "sbatch --nodes 3 on line 2")),
        (
            "sbatch job.sh",
            "#SBATCH --nodes=4\nsrun -N 2 ",
            (2, "srun -N 2 on line 2"),
        ),  # the launcher's own count (on the sbatch line)
        ("sbatch --nodes=2-4 job.sh", "", None),
        (
            "sbatch <<'EOF'\n#!/bin/bash\n#SBATCH -N 8\nEOF_BODY\nEOF",
            None,
            (8, "#SBATCH --nodes=8 in the job script of this here-document"),
        ),
        ("bash job.sh", "#SBATCH --nodes=4\n", None),  # not submitted: no job of its own
    ],
)
def test_the_node_count_of_a_job_the_launch_submits(tmp_path, submit, job, expected):
    """A submit wrapper's launch runs on the nodes of the job it submits: sbatch's ``-N`` on its
    command line, else the job script's ``#SBATCH --nodes``; the launcher in the job wins over
    both, as it does in a batch script."""
    from planner.launch.megatron.arguments import launch_nodes

    command = f"torchrun pretrain_gpt.py {SHAPE}"
    if job is None:
        submit = submit.replace("EOF_BODY", command)
    else:
        prefix, _, rest = job.rpartition("\n")
        (tmp_path / "job.sh").write_text(f"#!/bin/bash\n{prefix}\n{rest}{command}\n")
    path = tmp_path / "submit.sh"
    path.write_text(f"#!/bin/bash\n{submit}\n")
    assert launch_nodes(path.read_text(), None, path) == expected


def test_check_takes_a_plan_files_node_count_from_its_gpus(run_cli, readme_plan, tmp_path):
    """A plan file checked against a node template without ``--nodes`` is judged on the nodes its
    recorded GPUs fill, as with ``--nodes``; GPUs that are not whole nodes of the template are a
    usage error naming the file, and a file that is not there is check's FAIL, not a node-count
    error."""
    plan, _, (_, name, _, nodes) = readme_plan
    inferred = run_cli("check", str(plan), "-c", name, "--json")
    given = run_cli("check", str(plan), "-c", name, "-n", nodes, "--json")
    assert inferred.exit_code == given.exit_code == 0, inferred.stdout + inferred.stderr
    a, b = (json.loads(r.stdout)["configs"][0] for r in (inferred, given))
    assert a["metrics"]["step_time_s"] == b["metrics"]["step_time_s"]
    gpus = int(nodes) * 8
    notes = [f["message"] for f in a["findings"] if f["check"] == "cluster"]
    assert notes == [
        f"judged on {name} x {nodes} nodes, the node count of the plan's {gpus} GPUs; --nodes N overrides"
    ]
    small = tmp_path / "p12.yaml"
    searched = run_cli(
        "search", "-m", "llama3-8b", "-c", "gb200-nvl72", "-n", "3", "--global-batch-size", "48",
        "--seq-len", "2048", "--out", str(small), "-q",
    )  # fmt: skip
    assert searched.exit_code == 0, searched.stderr
    odd = run_cli("check", str(small), "-c", "dgx-h100")
    assert (
        odd.exit_code == 2 and "p12.yaml: the plan's 12 GPUs are not whole nodes of 'dgx-h100'" in odd.stderr
    )
    missing = run_cli("check", str(tmp_path / "launch.sh"), "-c", "dgx-h100")
    assert missing.exit_code == 1 and "file not found" in missing.stdout
