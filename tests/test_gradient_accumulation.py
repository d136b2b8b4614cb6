"""Unfused gradient accumulation (JobSpec.gradient_accumulation_fusion False, Megatron-LM
``--no-gradient-accumulation-fusion``): one memory-bound add of every local weight gradient into the
main gradient per micro-batch, on the DDP / distributed-optimizer path only; carried by plan files,
the Megatron export and import, the CLI, and the calibration runs that set it."""

from __future__ import annotations

import json

import pytest

from cost_models.compute import memory_bound_s
from cost_models.constraints import resolve
from cost_models.estimate import estimate, unfused_accumulation_bytes
from cost_models.parallel import ParallelConfig
from planner.calibration.cases import cases
from planner.frameworks import get_framework
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export import export_files
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs, job_to_mapping
from planner.profiles.hardware import load_cluster


def _pair(sharding: str, gbs: int = 32, grad_dtype: str | None = None, pp: int = 1):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    fused = make_job(global_batch_size=gbs, seq_length=4096, grad_dtype=grad_dtype)
    unfused = make_job(
        global_batch_size=gbs, seq_length=4096, grad_dtype=grad_dtype, gradient_accumulation_fusion=False
    )
    c = resolve(
        m, cluster, fused, ParallelConfig(tp=1, pp=pp, micro_batch_size=1, optimizer_sharding=sharding)
    )
    return m, cluster, fused, unfused, c


@pytest.mark.parametrize("sharding", ["none", "distributed"])
def test_each_micro_batch_pays_one_add_of_every_local_gradient(sharding):
    m, cluster, fused, unfused, c = _pair(sharding)
    a, b = estimate(m, cluster, fused, c), estimate(m, cluster, unfused, c)
    add = memory_bound_s(m.params_total * 10.0, cluster.groups[0].gpu)
    assert unfused_accumulation_bytes(unfused) == 10.0  # read bf16 grad, read + write fp32 main grad
    assert b.stages[0].backward_s - a.stages[0].backward_s == pytest.approx(add, rel=1e-9)
    # one data-parallel rank, one stage: the step grows by the add of every micro-batch
    assert b.step_time_s - a.step_time_s == pytest.approx(c.num_microbatches(fused) * add, rel=1e-6)
    assert b.peak_memory_bytes == a.peak_memory_bytes


def test_the_add_reads_and_writes_the_main_gradient_dtype():
    m, cluster, fused, unfused, c = _pair("distributed", grad_dtype="bf16")
    assert unfused_accumulation_bytes(unfused) == 6.0
    a, b = estimate(m, cluster, fused, c), estimate(m, cluster, unfused, c)
    add = memory_bound_s(m.params_total * 6.0, cluster.groups[0].gpu)
    assert b.stages[0].backward_s - a.stages[0].backward_s == pytest.approx(add, rel=1e-9)


def test_more_micro_batches_pay_more():
    small = _pair("distributed", gbs=16)
    large = _pair("distributed", gbs=64)
    cost = [
        estimate(m, cl, u, c).step_time_s - estimate(m, cl, f, c).step_time_s
        for m, cl, f, u, c in (small, large)
    ]
    assert cost[1] == pytest.approx(4 * cost[0], rel=1e-6)


def test_pipeline_stages_each_add_their_own_gradients():
    m, cluster, fused, unfused, c = _pair("distributed", pp=4)
    a, b = estimate(m, cluster, fused, c), estimate(m, cluster, unfused, c)
    extra = [y.backward_s - x.backward_s for x, y in zip(a.stages, b.stages)]
    assert all(e > 0 for e in extra)
    # the first and last stages also hold the embedding and the output layer (untied in Llama 3)
    assert extra[1] == pytest.approx(extra[2], rel=1e-9)
    assert extra[0] > extra[1] and extra[3] > extra[2]
    assert sum(extra) == pytest.approx(memory_bound_s(m.params_total * 10.0, cluster.groups[0].gpu), rel=1e-9)


@pytest.mark.parametrize("sharding", ["zero2", "full"])
def test_megatron_fsdp_prices_its_own_gradient_path(sharding):
    m, cluster, fused, unfused, c = _pair(sharding)
    assert estimate(m, cluster, unfused, c).step_time_s == estimate(m, cluster, fused, c).step_time_s


def test_plan_files_carry_the_setting_and_old_plans_read_as_fused():
    fused = make_job(global_batch_size=32, seq_length=4096)
    unfused = make_job(global_batch_size=32, seq_length=4096, gradient_accumulation_fusion=False)
    assert "gradient_accumulation_fusion" not in job_to_mapping(fused)
    assert job_to_mapping(unfused)["gradient_accumulation_fusion"] is False
    assert job_from_mapping(job_to_mapping(unfused), "plan.yaml") == unfused
    assert job_from_mapping(job_to_mapping(fused), "plan.yaml") == fused
    with pytest.raises(Exception, match="gradient_accumulation_fusion"):
        job_from_mapping({**job_to_mapping(fused), "gradient_accumulation_fusion": "no"}, "plan.yaml")


@pytest.mark.parametrize(
    "sharding, fusion, flags, back",
    [
        ("distributed", False, 1, False),
        ("none", False, 1, False),
        ("distributed", True, 0, True),
        # Megatron-FSDP requires the flag, so it is there once either way and reads back as fused
        ("full", True, 1, True),
        ("full", False, 1, True),
    ],
)
def test_megatron_export_and_import(sharding, fusion, flags, back):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=32, seq_length=4096, gradient_accumulation_fusion=fusion)
    c = resolve(m, cluster, job, ParallelConfig(tp=2, pp=1, micro_batch_size=1, optimizer_sharding=sharding))
    plan = PlanInputs(m, cluster, job, c)
    args = [flag for flag, _ in megatron_args(plan)]
    assert args.count("--no-gradient-accumulation-fusion") == flags
    text = export_files(plan, "torchrun")["megatron_args.txt"]
    parsed = parse_megatron(text, "megatron_args.txt", cluster.num_gpus)
    assert parsed.unknown == ()
    assert parsed.job.gradient_accumulation_fusion is back
    assert estimate(m, cluster, parsed.job, c).step_time_s == pytest.approx(
        estimate(m, cluster, job, c).step_time_s, rel=1e-12
    )


def test_only_frameworks_with_the_switch_plan_it():
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=32, seq_length=4096, gradient_accumulation_fusion=False)
    c = resolve(m, cluster, job, ParallelConfig(tp=1, pp=1, micro_batch_size=1, optimizer_sharding="full"))
    assert get_framework("megatron").violations(m, cluster, job, c) == []
    assert get_framework("any").violations(m, cluster, job, c) == []
    (reason,) = get_framework("torchtitan").violations(m, cluster, job, c)
    assert "unfused gradient accumulation" in reason


def test_cli_estimate_and_search_take_the_flag(run_cli, tmp_path):
    base = ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "--global-batch-size", "32", "--seq-len", "4096"]
    layout = ["--tp", "1", "--pp", "1", "--micro-batch-size", "1", "--optimizer-sharding", "distributed"]
    fused = run_cli("estimate", *base, *layout, "--json")
    unfused = run_cli("estimate", *base, *layout, "--no-gradient-accumulation-fusion", "--json")
    assert fused.exit_code == unfused.exit_code == 0, unfused.stderr
    a, b = json.loads(fused.stdout), json.loads(unfused.stdout)
    assert (a["job"]["gradient_accumulation_fusion"], b["job"]["gradient_accumulation_fusion"]) == (
        True,
        False,
    )
    assert b["step_time_s"] > a["step_time_s"]
    text = run_cli("estimate", *base, *layout, "--no-gradient-accumulation-fusion")
    assert "unfused" in text.stdout
    out = tmp_path / "plan.yaml"
    res = run_cli(
        "search",
        *base,
        "--framework",
        "megatron",
        "--no-gradient-accumulation-fusion",
        "--top",
        "1",
        "--tp",
        "1,2",
        "--pp",
        "1",
        "--out",
        str(out),
        "--json",
        "--quiet",
    )
    assert res.exit_code == 0, res.stderr
    plan = run_cli("estimate", "--plan", str(out), "--json")
    assert json.loads(plan.stdout)["job"]["gradient_accumulation_fusion"] is False
    both = run_cli("estimate", "--plan", str(out), "--no-gradient-accumulation-fusion")
    assert both.exit_code == 2 and "--plan" in both.stderr and "Traceback" not in both.stderr
    refused = run_cli("search", *base, "--framework", "torchtitan", "--no-gradient-accumulation-fusion")
    # no feasible plan (exit code 3, README), the reason named, no traceback
    assert refused.exit_code == 3 and "Traceback" not in refused.stderr
    assert "no switch for unfused gradient accumulation" in refused.stderr


def test_calibration_runs_that_set_the_flag_are_priced_unfused():
    """The Megatron-LM CI 7B launches set --no-gradient-accumulation-fusion (its MoE memory test does
    not); BigScience's BF16 runs used DeepSpeed's BF16_Optimizer, which adds every micro-batch's
    gradients into fp32 ones; its FP16 runs accumulate in the gradients autograd writes."""
    all_cases = [c for c in cases() if c.job is not None]
    flagged = {c.run_id for c in all_cases if c.run_id.startswith("megatronlm_ci_gpt3_7b_")}
    bf16_deepspeed = {
        c.run_id for c in all_cases if c.source.startswith("BigScience") and c.job.precision == "bf16"
    }
    assert len(flagged) == 2 and len(bf16_deepspeed) == 8  # BLOOM's training run, 7 reshaping runs
    unfused = {c.run_id for c in all_cases if not c.job.gradient_accumulation_fusion}
    assert unfused == flagged | bf16_deepspeed
    assert all(
        c.job.gradient_accumulation_fusion for c in all_cases if c.source.startswith("BigScience tr11")
    )
