"""Overlapped tensor-parallel communication (Megatron-LM ``--tp-comm-overlap``): priced only when
the job says so, carried through plan files, Megatron import and export, and refused for a
framework whose launch cannot overlap."""

from __future__ import annotations

import dataclasses
import math

import yaml

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.layers import layer_table
from cost_models.parallel import ParallelConfig
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster


def _setup(overlap: bool, tp: int = 8, sp: bool = True):
    model, spec = load_model("llama3-70b"), load_cluster("dgx-h100", 8)
    job = make_job(global_batch_size=256, seq_length=8192, tp_comm_overlap=overlap)
    c = resolve(model, spec, job, ParallelConfig(tp=tp, pp=4, sequence_parallel=sp))
    return model, spec, job, c


def test_overlap_hides_all_but_one_chunk_and_slows_the_gemms():
    model, spec, job, c = _setup(False)
    node = spec.groups[0]
    exposed = layer_table(model, job, c, node).dense
    _, _, job_o, _ = _setup(True)
    hidden = layer_table(model, job_o, c, node).dense
    # The same collectives, now overlapped: never below one of tp chunks, never above exposed.
    for a, b in (
        (exposed.forward_comm_s, hidden.forward_comm_s),
        (exposed.backward_comm_s, hidden.backward_comm_s),
    ):
        assert a / c.tp <= b < a
    # Compute is unchanged: only the communication term moves.
    assert hidden.forward_s == exposed.forward_s
    step = estimate(model, spec, job, c).step_time_s
    step_o = estimate(model, spec, job_o, c).step_time_s
    assert step_o < step
    parts = estimate(model, spec, job_o, c).time_breakdown()
    assert math.isclose(sum(v for _, v in parts), step_o, rel_tol=1e-9)


def test_no_effect_without_sequence_parallelism():
    model, spec, job, c = _setup(False, sp=False)
    _, _, job_o, _ = _setup(True, sp=False)
    assert estimate(model, spec, job, c).step_time_s == estimate(model, spec, job_o, c).step_time_s


def test_megatron_import_and_export_carry_the_flag(run_cli, tmp_path):
    base = (
        "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
        "--disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope "
        "--vocab-size 128256 --max-position-embeddings 8192 --seq-length 8192 "
        "--tensor-model-parallel-size 4 --sequence-parallel --micro-batch-size 1 "
        "--global-batch-size 64 --use-distributed-optimizer --bf16"
    )
    off = parse_megatron(base, "off.txt", 16)
    on = parse_megatron(base + " --tp-comm-overlap", "on.txt", 16)
    assert not off.job.tp_comm_overlap and on.job.tp_comm_overlap
    assert "--tp-comm-overlap" not in on.unknown


def test_search_plan_export_round_trip(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    args = ("search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "8192", "--tp", "2")
    res = run_cli(*args, "--tp-comm-overlap", "--quiet", "--out", str(plan))
    assert res.exit_code == 0, res.stderr
    data = yaml.safe_load(plan.read_text())
    assert data["job"]["tp_comm_overlap"] is True
    from planner.plans.plan_file import read_plan

    inputs = read_plan(str(plan))
    assert inputs.job.tp_comm_overlap
    flags = [f for f, _ in megatron_args(inputs)]
    assert "--tp-comm-overlap" in flags and "--sequence-parallel" in flags
    plain = dataclasses.replace(inputs, job=dataclasses.replace(inputs.job, tp_comm_overlap=False))
    assert "--tp-comm-overlap" not in [f for f, _ in megatron_args(plain)]
    # Without the flag the plan file has no such key (plans written before it read the same).
    res = run_cli(*args, "--quiet", "--out", str(tmp_path / "plain.yaml"))
    assert res.exit_code == 0 and "tp_comm_overlap" not in (tmp_path / "plain.yaml").read_text()


def test_framework_without_overlap_refuses_the_flag(run_cli):
    res = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "8192",
        "--framework", "torchtitan", "--tp-comm-overlap", "--quiet",
    )  # fmt: skip
    assert res.exit_code == 2 and "--tp-comm-overlap" in res.stderr and "Traceback" not in res.stderr


def test_estimate_flag_changes_the_prediction(run_cli):
    import json

    args = (
        "estimate",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "1",
        "-b",
        "32",
        "-s",
        "8192",
        "--tp",
        "8",
        "--json",
    )
    plain = json.loads(run_cli(*args).stdout)
    over = json.loads(run_cli(*args, "--tp-comm-overlap").stdout)
    assert over["job"]["tp_comm_overlap"] is True and plain["job"]["tp_comm_overlap"] is False
    assert over["step_time_s"] < plain["step_time_s"]
