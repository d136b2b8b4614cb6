"""Megatron launch scripts run through real bash: the argument assembly with srun, torchrun and
scontrol replaced by stubs that print what they receive; heterogeneous Slurm jobs for mixed GPU
clusters; the README's main job exported."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cost_models.constraints import resolve
from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export import export_files, slurm_script, torchrun_script
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from planner.search.chain import search
from planner.search.space import Restrictions

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

STUBS = {
    # srun: drop its own options, run the command with SLURM_PROCID of the first node.
    "srun": '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexport SLURM_PROCID=0\nexec "$@"\n',
    # torchrun: print every argument on its own line.
    "torchrun": '#!/bin/bash\nprintf "ARG:%s\\n" "$@"\n',
    "scontrol": "#!/bin/bash\necho node-a\necho node-b\n",
}


def run_with_stubs(script: str, tmp_path: Path, env: dict | None = None) -> list[str]:
    """Run a generated launch script with stub srun/torchrun/scontrol; the arguments torchrun got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = tmp_path / "launch.sh"
    path.write_text(script)
    full_env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "MEGATRON_PATH": str(tmp_path),
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "node-a",
        **(env or {}),
    }
    proc = subprocess.run([BASH, str(path)], capture_output=True, text=True, env=full_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line[4:] for line in proc.stdout.splitlines() if line.startswith("ARG:")]


def plan_of(model, template, nodes, gbs, seq, **config):
    m = load_model(model)
    cluster = load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    return PlanInputs(m, cluster, job, resolve(m, cluster, job, ParallelConfig(**config)))


UNEVEN_VPP = dict(tp=2, pp=4, vpp=2, schedule="interleaved", layers_per_stage=(3, 4, 5, 4, 4, 4, 4, 4))


@pytest.mark.parametrize("launcher", ["slurm", "torchrun"])
def test_layout_with_pipes_arrives_intact(tmp_path, launcher):
    plan = plan_of("llama3-8b", "dgx-h100", 2, 64, 4096, **UNEVEN_VPP)
    args = megatron_args(plan)
    layout = dict(args)["--pipeline-model-parallel-layout"]
    assert layout.count("|") == 7 and "--num-virtual-stages-per-pipeline-rank" not in dict(args)
    script = (slurm_script if launcher == "slurm" else torchrun_script)(plan, 8, 2)
    got = run_with_stubs(script, tmp_path, {"SLURM_NNODES": "2"})
    assert got[got.index("--pipeline-model-parallel-layout") + 1] == layout
    # every Megatron argument arrives as one word, in order, after pretrain_gpt.py
    flat = [w for flag, value in args for w in ([flag] if value is None else [flag, value])]
    start = got.index("pretrain_gpt.py") + 1
    assert got[start : start + len(flat)] == flat
    if launcher == "slurm":
        assert got[got.index("--node-rank") + 1] == "0"
    # and the script imports back to the same plan
    back = parse_megatron(script, "x", plan.cluster.num_gpus)
    assert back.config.layers_per_stage == UNEVEN_VPP["layers_per_stage"] and back.config.vpp == 2


def test_old_slurm_script_with_unquoted_layout_is_rejected(tmp_path):
    """The pre-fix Slurm form (arguments joined into the bash -c string) breaks on |: check says so."""
    plan = plan_of("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, pp=4, layers_per_stage=(7, 8, 9, 8))
    script = slurm_script(plan, 8, 2)
    head = script[: script.index("export MEGATRON_PATH")]
    broken = head + (
        'srun --ntasks-per-node=1 bash -c "cd \\"$MEGATRON_PATH\\" && torchrun --nproc-per-node $GPUS_PER_NODE '
        '--node-rank \\$SLURM_NODEID pretrain_gpt.py ${MODEL_AND_PARALLEL_ARGS[*]} ${TOKENIZER_ARGS[*]}"\n'
    )
    with pytest.raises(SpecError, match=r"unquoted '\|'"):
        parse_megatron(broken, "old.sh", 16)
    # and bash itself fails on it (the inner shell runs 'ttttttt' as a command)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "old.sh").write_text(broken)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MEGATRON_PATH": str(tmp_path), "SLURM_JOB_ID": "1"}
    env.update(SLURM_JOB_NODELIST="n", SLURM_NNODES="2")
    proc = subprocess.run(
        [BASH, str(tmp_path / "old.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0


def mixed_cluster(tmp_path, first="dgx-a100", second="dgx-h100", n1=2, n2=2):
    path = tmp_path / "mixed.yaml"
    path.write_text(
        f"schema_version: 1\nkind: cluster\ngroups:\n  - template: {first}\n    num_nodes: {n1}\n"
        f"  - template: {second}\n    num_nodes: {n2}\n"
    )
    return load_cluster(str(path))


def test_mixed_cluster_exports_a_heterogeneous_job_in_stage_order(tmp_path):
    cluster = mixed_cluster(tmp_path)
    model = load_model("llama2-13b")
    job = make_job(global_batch_size=64, seq_length=4096)
    result = search(
        model, cluster, job, Restrictions(pp=(2, 4), tp=(8,), cp=(1,), max_micro_batch_size=2), top_k=1
    )
    best = result.plans[0]
    plan = PlanInputs(model, best.cluster, job, best.config, best.stage_groups, "megatron")
    files = export_files(plan, "slurm")
    script = files["launch_slurm.sh"]
    # one component per node block of the plan, in rank (= pipeline stage) order
    components = [line for line in script.splitlines() if line.startswith("#SBATCH --nodes=")]
    assert len(components) == len(plan.cluster.groups) >= 2
    assert script.count("#SBATCH hetjob") == len(components) - 1
    for line, group in zip(components, plan.cluster.groups):
        assert f"--nodes={group.num_nodes} " in line
    constraints = [
        line.split()[1] for line in script.splitlines() if line.startswith("#SBATCH --constraint=")
    ]
    assert constraints == [f"--constraint={g.gpu.name}" for g in plan.cluster.groups]
    # stage s holds ranks [s*tp*cp*dp, (s+1)*tp*cp*dp): the GPU type of those nodes is the stage's
    per_stage_nodes = plan.config.tp * plan.config.cp * plan.config.dp // 8
    node_gpus = [g.gpu.name for g in plan.cluster.groups for _ in range(g.num_nodes)]
    stage_gpus = [s.gpu for s in best.estimate.stages]
    assert [node_gpus[s * per_stage_nodes] for s in range(plan.config.pp)] == stage_gpus
    assert "--het-group=0-" in script
    got = run_with_stubs(script, tmp_path)
    assert got[got.index("--nnodes") + 1] == str(cluster.num_gpus // 8)
    assert files["launch_slurm.sh"] == export_files(plan, "slurm")["launch_slurm.sh"]  # deterministic
    torchrun = export_files(plan, "torchrun")["launch_torchrun.sh"]
    assert "node ranks 0-" in torchrun


def test_mixed_cluster_with_different_gpus_per_node_is_refused(tmp_path):
    # a cluster whose groups differ in GPUs per node: torchrun cannot number the ranks in stage order
    path = tmp_path / "odd.yaml"
    path.write_text(
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-h100\n    num_nodes: 1\n"
        "  - template: dgx-a100\n    num_nodes: 2\n    gpus_per_node: 4\n"
    )
    try:
        cluster = load_cluster(str(path))
    except SpecError:
        pytest.skip("cluster files cannot override gpus_per_node")
    model = load_model("llama3-8b")
    job = make_job(global_batch_size=32, seq_length=2048)
    config = ParallelConfig(tp=8, pp=2, dp=1, layers_per_stage=(16, 16))
    plan = PlanInputs(model, cluster, job, config)
    with pytest.raises(SpecError, match="different GPUs per node"):
        export_files(plan, "slurm")


def test_readme_main_job_exports(run_cli, tmp_path):
    """The README's main job, then `planner export megatron plan.yaml --out launch/`."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "planner search --model llama3-70b" in x)
    argv = line[line.index("planner search") :].split()[1:]
    out_index = argv.index("--out") + 1 if "--out" in argv else None
    if out_index is not None:
        argv[out_index] = str(tmp_path / "plan.yaml")
    else:
        argv += ["--out", str(tmp_path / "plan.yaml")]
    res = run_cli(*argv)
    assert res.exit_code == 0, res.stderr
    exp = run_cli("export", "megatron", str(tmp_path / "plan.yaml"), "--out", str(tmp_path / "launch"))
    assert exp.exit_code == 0, exp.stderr
    assert (tmp_path / "launch" / "megatron_args.txt").exists()
    args = (tmp_path / "launch" / "megatron_args.txt").read_text()
    assert "--rotary-base 500000" in args
    check = run_cli(
        "check", str(tmp_path / "launch" / "launch_torchrun.sh"), "-c", "dgx-h100", "-n", _nodes(argv)
    )
    assert check.exit_code == 0, check.stdout


def _nodes(argv: list[str]) -> str:
    for flag in ("--nodes", "-n"):
        if flag in argv:
            return argv[argv.index(flag) + 1]
    raise AssertionError("the README job names no node count")
