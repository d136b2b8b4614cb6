"""Megatron-LM export (golden files), import round trip, launch scripts, and planner check."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.parallel import ParallelConfig, resolve
from planner.exporters.megatron import (
    args_text,
    layout_for,
    megatron_args,
    parse_megatron,
    slurm_script,
    torchrun_script,
)
from planner.loading import load_cluster, load_model, make_job
from planner.plan import PlanInputs
from planner.search import search
from planner.space import Restrictions

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
    needs_one = plan.config.tp > 1 or plan.config.cp > 1
    assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in torchrun_script(plan, 8, nodes)) == needs_one


def normalise(c: ParallelConfig, model) -> tuple:
    sharding = "distributed" if c.optimizer_sharding == "zero2" else c.optimizer_sharding
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
        "#!/bin/bash\nARGS=(\n" + ARGS_OK.replace(*edit) + ")\ntorchrun pretrain_gpt.py ${ARGS[@]}\n"
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


def test_zero_bubble_plans_are_not_exported(run_cli, tmp_path):
    from planner.errors import SpecError

    plan = inputs("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, pp=4, schedule="zb-h1")
    with pytest.raises(SpecError, match="re-run planner search with --schedule 1f1b,interleaved"):
        megatron_args(plan)


def test_zero2_plans_export_only_when_zero1_fits(run_cli, tmp_path):
    from planner.plan import plan_document, write_plan

    fits = inputs("llama3-8b", "dgx-h100", 2, 64, 4096, tp=2, pp=2, optimizer_sharding="zero2")
    path = tmp_path / "z2.yaml"
    write_plan(path, plan_document(fits, {}, None))
    res = run_cli("export", "megatron", str(path), "--out", str(tmp_path / "a"))
    assert res.exit_code == 0 and "ZeRO-1" in res.stderr and "still fits" in res.stderr
    tight = inputs(
        "llama2-70b", "dgx-h100", 4, 64, 4096, tp=4, pp=1, optimizer_sharding="zero2", recompute="full"
    )
    path2 = tmp_path / "z2b.yaml"
    write_plan(path2, plan_document(tight, {}, None))
    res = run_cli("export", "megatron", str(path2), "--out", str(tmp_path / "b"))
    assert res.exit_code == 1 and "--optimizer-sharding distributed,full" in res.stderr


def test_launch_scripts_import_without_unknown_flags():
    for name in ("dense_gqa_interleaved", "moe_expert_parallel"):
        plan = CASES[name]()
        nodes = plan.cluster.groups[0].num_nodes
        for script in (torchrun_script(plan, 8, nodes), slurm_script(plan, 8, nodes)):
            back = parse_megatron(script, name, plan.cluster.num_gpus)
            assert back.unknown == (), back.unknown
            assert normalise(back.config, back.model) == normalise(plan.config, plan.model)
