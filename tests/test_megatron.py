"""Megatron-LM export (golden files), import round trip, launch scripts, and planner check."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.constraints import resolve
from cost_models.parallel import ParallelConfig
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export import slurm_script, torchrun_script
from planner.launch.megatron.export_args import args_text, layout_for, megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from planner.search.chain import search
from planner.search.space import Restrictions

GOLDEN = Path(__file__).parent / "golden"


def inputs(model, template, nodes, gbs, seq, precision="bf16", **config):
    m = load_model(model)
    cluster = load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq, precision=precision)
    return PlanInputs(m, cluster, job, resolve(m, cluster, job, ParallelConfig(**config)))


CASES = {
    "dense_gqa_interleaved": lambda: inputs(
        "llama3-70b", "dgx-h100", 8, 64, 8192, tp=8, pp=4, vpp=5, schedule="interleaved"
    ),
    "uneven_first_last": lambda: inputs(
        "llama3-8b", "dgx-h100", 2, 64, 8192, tp=2, pp=4, layers_per_stage=(7, 9, 9, 7)
    ),
    "uneven_layout": lambda: inputs(
        "llama3-8b", "dgx-h100", 2, 64, 8192, tp=2, pp=4, layers_per_stage=(7, 8, 9, 8)
    ),
    "moe_expert_parallel": lambda: inputs("mixtral-8x7b", "dgx-h100", 4, 128, 4096, tp=2, pp=2, ep=4),
    "context_parallel": lambda: inputs("llama3-8b", "dgx-h100", 2, 16, 65536, tp=2, cp=4, recompute="full"),
    "full_recompute_fp8": lambda: inputs(
        "gpt3-175b",
        "dgx-h100",
        64,
        512,
        2048,
        "fp8",
        tp=8,
        pp=8,
        recompute="full",
        recompute_num_layers=4,
        optimizer_sharding="distributed",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_exports(name):
    plan = CASES[name]()
    nodes = plan.cluster.groups[0].num_nodes
    produced = {
        f"{name}.args.txt": args_text(megatron_args(plan)),
        f"{name}.torchrun.sh": torchrun_script(plan, 8, nodes),
        f"{name}.slurm.sh": slurm_script(plan, 8, nodes),
    }
    for fname, text in produced.items():
        path = GOLDEN / fname
        if os.environ.get("UPDATE_GOLDEN"):
            path.write_text(text)
        assert path.read_text() == text, f"{fname} differs from its golden file (UPDATE_GOLDEN=1 to accept)"


def test_uneven_partitions_map_to_megatron():
    a = args_text(megatron_args(CASES["uneven_first_last"]()))
    assert "--decoder-first-pipeline-num-layers 7" in a and "--decoder-last-pipeline-num-layers 7" in a
    b = args_text(megatron_args(CASES["uneven_layout"]()))
    assert f"--pipeline-model-parallel-layout '{layout_for((7, 8, 9, 8))}'" in b  # quoted for the shell
    assert layout_for((2, 1, 2)) == "Ett|t|ttL"


@pytest.mark.parametrize("name", sorted(CASES))
def test_scripts_are_valid_bash_with_consistent_ranks(name, tmp_path):
    plan = CASES[name]()
    nodes = plan.cluster.groups[0].num_nodes
    world = plan.config.world_size
    for kind, script in (
        ("torchrun", torchrun_script(plan, 8, nodes)),
        ("slurm", slurm_script(plan, 8, nodes)),
    ):
        path = tmp_path / f"{kind}.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
        assert 8 * nodes == world
        if kind == "slurm":
            assert f"#SBATCH --nodes={nodes}" in script and "#SBATCH --gpus-per-node=8" in script
        else:
            assert f"NUM_NODES={nodes}" in script and "GPUS_PER_NODE=8" in script
    fsdp = plan.config.optimizer_sharding in ("zero2", "full")
    needs_one = (plan.config.tp > 1 or plan.config.cp > 1) and not fsdp
    assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in torchrun_script(plan, 8, nodes)) == needs_one


def normalise(c: ParallelConfig, model) -> tuple:
    sharding = c.optimizer_sharding
    return (
        c.tp,
        c.pp,
        c.dp,
        c.cp,
        c.ep,
        c.expert_tp,
        c.vpp,
        c.micro_batch_size,
        c.recompute,
        c.recompute_num_layers,
        c.sp,
        sharding,
        c.schedule,
        c.stage_layers(model),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_of_golden_cases(name):
    plan = CASES[name]()
    back = parse_megatron(args_text(megatron_args(plan)), name, plan.cluster.num_gpus)
    assert back.unknown == ()
    # Megatron needs max_position_embeddings >= seq_length, so the export raises it (no parameters with rope)
    expected = {f: getattr(plan.model, f) for f in plan.model.__slots__}
    expected.update(
        name=name, max_position_embeddings=max(plan.model.max_position_embeddings, plan.job.seq_length)
    )
    assert back.model == plan.model.__class__(**expected)
    assert normalise(back.config, back.model) == normalise(plan.config, plan.model)
    assert (back.job.global_batch_size, back.job.seq_length, back.job.precision) == (
        plan.job.global_batch_size,
        plan.job.seq_length,
        plan.job.precision,
    )


@settings(max_examples=8, deadline=None)
@given(
    model=st.sampled_from(["llama3-8b", "llama2-13b", "mixtral-8x7b", "gpt-7.5b"]),
    nodes=st.sampled_from([1, 2, 4]),
    gbs=st.sampled_from([32, 64]),
    seq=st.sampled_from([2048, 4096]),
)
def test_round_trip_of_searched_plans(model, nodes, gbs, seq):
    m = load_model(model)
    cluster = load_cluster("dgx-h100", nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    result = search(
        m, cluster, job, Restrictions(schedule=("1f1b", "interleaved"), max_micro_batch_size=2), top_k=3
    )
    for p in result.plans:
        plan = PlanInputs(m, p.cluster, job, p.config)
        back = parse_megatron(args_text(megatron_args(plan)), "x", cluster.num_gpus)
        assert normalise(back.config, back.model) == normalise(p.config, m)
        assert back.model.params_total == m.params_total


ARGS_OK = """--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
--ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear --position-embedding-type rope
--untie-embeddings-and-output-weights --vocab-size 128256 --max-position-embeddings 8192 --seq-length 4096
--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
--micro-batch-size 1 --global-batch-size 64 --use-distributed-optimizer --bf16 --lr 3e-4 --train-iters 100
"""


def test_check_passes_a_good_config(run_cli, tmp_path):
    good = tmp_path / "good_args.txt"
    good.write_text(ARGS_OK)
    res = run_cli("check", str(good), "-c", "dgx-h100", "-n", "2")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout.startswith("PASS")


@pytest.mark.parametrize(
    "edit, fragment, flag",
    [
        (
            ("--global-batch-size 64", "--global-batch-size 62"),
            "global batch size 62 is not divisible by micro-batch size x dp = 1 x 4 = 4",
            "--global-batch-size",
        ),
        (
            ("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 3"),
            "world size 16 is not divisible by tp*pp*cp",
            "--tensor-model-parallel-size",
        ),
        (("--micro-batch-size 1", "--micro-batch-size 16"), "does not fit", "--micro-batch-size"),
    ],
)
def test_check_fails_bad_configs(run_cli, tmp_path, edit, fragment, flag):
    bad = tmp_path / "bad_args.sh"
    bad.write_text(
        "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\nARGS=(\n"
        + ARGS_OK.replace(*edit)
        + ")\ntorchrun pretrain_gpt.py ${ARGS[@]}\n"
    )
    res = run_cli("check", str(bad), "-c", "dgx-h100", "-n", "2", "--json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    errors = [f for f in data["configs"][0]["findings"] if f["level"] == "error"]
    assert any(fragment in f["message"] and flag in f["flags"] for f in errors), errors
    gh = run_cli("check", str(bad), "-c", "dgx-h100", "-n", "2", "--format", "github")
    assert gh.exit_code == 1 and f"::error file={bad}" in gh.stdout


def test_check_heads_not_divisible_by_tp(run_cli, tmp_path):
    bad = tmp_path / "heads.txt"
    bad.write_text(
        ARGS_OK.replace("--num-attention-heads 32", "--num-attention-heads 30")
        .replace("--num-query-groups 8", "--num-query-groups 6")
        .replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 4")
        .replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 1")
    )
    res = run_cli("check", str(bad), "-c", "dgx-h100", "-n", "2")
    assert res.exit_code == 1 and "num_attention_heads (30) is not divisible by tp (4)" in res.stdout
    assert "--num-attention-heads" in res.stdout


def test_check_max_slowdown_names_the_best_plan(run_cli, tmp_path):
    slow = tmp_path / "slow.txt"
    slow.write_text(
        ARGS_OK.replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 8").replace(
            "--tensor-model-parallel-size 2", "--tensor-model-parallel-size 2"
        )
    )
    res = run_cli("check", str(slow), "-c", "dgx-h100", "-n", "2", "--max-slowdown", "0.01", "--json")
    data = json.loads(res.stdout)
    assert res.exit_code == 1, data
    msg = [f["message"] for f in data["configs"][0]["findings"] if f["check"] == "slowdown"][0]
    assert "slower than the best plan found (tp" in msg


def test_export_cli_refuses_to_overwrite(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    assert (
        run_cli(
            "search",
            "-m",
            "llama3-8b",
            "-c",
            "dgx-h100",
            "-n",
            "1",
            "-b",
            "32",
            "-s",
            "4096",
            "--schedule",
            "1f1b,interleaved",
            "--out",
            str(plan),
        ).exit_code
        == 0
    )
    out = tmp_path / "launch"
    res = run_cli("export", "megatron", str(plan), "--out", str(out), "--launcher", "slurm", "--json")
    assert res.exit_code == 0, res.stderr
    assert (out / "megatron_args.txt").exists() and (out / "launch_slurm.sh").exists()
    before = (out / "megatron_args.txt").read_text()
    again = run_cli("export", "megatron", str(plan), "--out", str(out), "--launcher", "slurm")
    assert again.exit_code == 1 and "--force" in again.stderr
    assert (out / "megatron_args.txt").read_text() == before
    check = run_cli("check", str(out / "megatron_args.txt"), str(plan), "-c", "dgx-h100", "-n", "1")
    assert check.exit_code == 0, check.stdout


def test_zero_bubble_plans_are_not_exported():
    from planner.inputs.errors import SpecError

    plan = inputs("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, pp=4, schedule="zb-h1")
    with pytest.raises(
        SpecError, match="no 'zb-h1' schedule.*re-run planner search with --framework megatron"
    ):
        megatron_args(plan)


def test_every_sharding_exports_its_own_flags():
    """ZeRO-1 = distributed optimizer; ZeRO-2/3 = Megatron-FSDP optim_grads / optim_grads_params
    with every flag NVIDIA's guide requires; FSDP scripts unset CUDA_DEVICE_MAX_CONNECTIONS."""
    expected = {
        "none": [],
        "distributed": ["--use-distributed-optimizer"],
        "zero2": [
            "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy optim_grads",
            "--use-distributed-optimizer",
            "--no-gradient-accumulation-fusion",
            "--ckpt-format fsdp_dtensor",
        ],
        "full": [
            "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy optim_grads_params",
            "--use-distributed-optimizer",
            "--no-gradient-accumulation-fusion",
            "--ckpt-format fsdp_dtensor",
        ],
    }
    for sharding, flags in expected.items():
        plan = inputs("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, optimizer_sharding=sharding)
        lines = args_text(megatron_args(plan)).splitlines()
        sharding_lines = [
            x
            for x in lines
            if x.split()[0]
            in {
                "--use-megatron-fsdp",
                "--data-parallel-sharding-strategy",
                "--use-distributed-optimizer",
                "--no-gradient-accumulation-fusion",
                "--ckpt-format",
            }
        ]
        assert sharding_lines == flags, (sharding, sharding_lines)
        script = torchrun_script(plan, 8, 2)
        fsdp = sharding in ("zero2", "full")
        assert ("unset CUDA_DEVICE_MAX_CONNECTIONS" in script) == fsdp
        assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in script) == (not fsdp)
        assert ("--overlap-param-gather" in lines) == (sharding != "none")
        back = parse_megatron(script, "x", 16)
        assert back.config.optimizer_sharding == sharding


def test_export_cli_has_no_zero1_fallback(run_cli, tmp_path):
    """A ZeRO-2 plan exports as Megatron-FSDP optim_grads, never silently as ZeRO-1."""
    from planner.plans.plan_file import plan_document, write_plan

    plan = inputs("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, optimizer_sharding="zero2")
    path = tmp_path / "z2.yaml"
    write_plan(path, plan_document(plan, {}, None))
    res = run_cli("export", "megatron", str(path), "--out", str(tmp_path / "a"))
    assert res.exit_code == 0, res.stderr
    assert "ZeRO-1" not in res.stderr
    text = (tmp_path / "a" / "megatron_args.txt").read_text()
    assert "--data-parallel-sharding-strategy optim_grads\n" in text


def test_launch_scripts_import_without_unknown_flags():
    for name in ("dense_gqa_interleaved", "moe_expert_parallel"):
        plan = CASES[name]()
        nodes = plan.cluster.groups[0].num_nodes
        for script in (torchrun_script(plan, 8, nodes), slurm_script(plan, 8, nodes)):
            back = parse_megatron(script, name, plan.cluster.num_gpus)
            assert back.unknown == (), back.unknown
            assert normalise(back.config, back.model) == normalise(plan.config, plan.model)


def test_export_refuses_a_plan_megatron_cannot_run(run_cli, tmp_path):
    """A zb-h1 plan searched with --framework any: exit 1, one line naming the reason and the fix."""
    plan = tmp_path / "any.yaml"
    res = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096",
        "--framework", "any", "--schedule", "zb-h1", "--pp", "4", "--out", str(plan),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    out = tmp_path / "launch"
    res = run_cli("export", "megatron", str(plan), "--out", str(out))
    assert res.exit_code == 1
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "zb-h1" in lines[0] and "--framework megatron" in lines[0], res.stderr
    assert not out.exists()


def test_force_replaces_only_the_export_files(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    res = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "32", "-s", "4096", "--out", str(plan)
    )
    assert res.exit_code == 0, res.stderr
    out = tmp_path / "launch"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "megatron_args.txt").write_text("old")
    assert run_cli("export", "megatron", str(plan), "--out", str(out)).exit_code == 1
    assert (out / "megatron_args.txt").read_text() == "old"
    assert run_cli("export", "megatron", str(plan), "--out", str(out), "--force").exit_code == 0
    assert (out / "megatron_args.txt").read_text() != "old" and (out / "notes.txt").read_text() == "mine"


def test_a2a_overlap_launches_with_several_queues_before_blackwell(run_cli, tmp_path):
    """With tp > 1 on H100 the MoE all-to-all overlap gets CUDA_DEVICE_MAX_CONNECTIONS=8 (as
    Megatron-Bridge's launcher sets), which is what the estimate prices; the checker passes that
    script and warns when the script forces one queue."""
    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    job = make_job(global_batch_size=128, seq_length=4096, moe_dispatcher="alltoall", moe_a2a_overlap=True)
    plan = PlanInputs(m, cluster, job, resolve(m, cluster, job, ParallelConfig(tp=2, pp=1, ep=8)))
    script = torchrun_script(plan, 8, 4)
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=8" in script
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in script
    path = tmp_path / "a2a.sh"
    path.write_text(script)
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "4", "--json")
    assert res.exit_code == 0, res.stdout + res.stderr
    findings = json.loads(res.stdout)["configs"][0]["findings"]
    assert not [f for f in findings if f["level"] == "error"], findings
    one = tmp_path / "a2a_one_queue.sh"
    one.write_text(script.replace("CUDA_DEVICE_MAX_CONNECTIONS=8", "CUDA_DEVICE_MAX_CONNECTIONS=1"))
    res = run_cli("check", str(one), "-c", "dgx-h100", "-n", "4", "--json")
    warned = [
        f["message"] for f in json.loads(res.stdout)["configs"][0]["findings"] if f["level"] == "warning"
    ]
    assert any("serialises the MoE all-to-all overlap" in w for w in warned), warned
    # without the overlap the same layout keeps the single queue validate_args asserts
    plain_job = make_job(global_batch_size=128, seq_length=4096, moe_dispatcher="alltoall")
    plain = PlanInputs(
        m, cluster, plain_job, resolve(m, cluster, plain_job, ParallelConfig(tp=2, pp=1, ep=8))
    )
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in torchrun_script(plain, 8, 4)
