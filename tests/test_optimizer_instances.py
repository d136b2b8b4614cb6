"""The partial distributed optimizer (Megatron-Core ``--num-distributed-optimizer-instances``):
optimizer states sharded over one instance of dp*cp/N consecutive data-parallel ranks and
replicated across N instances; gradients reduce-scattered inside an instance and the shard
all-reduced across instances; the knob travels through plan files, the CLI, the search and
Megatron import and export. Also Megatron-Core's default bucket size (max(40M, 1M x dp))."""

from __future__ import annotations

import json

import pytest

from cost_models import communication as comm
from cost_models import memory as mem
from cost_models.constraints import resolve, violations
from cost_models.estimate import DDP_BUCKET_PARAMS, ddp_bucket_params, dp_sync, estimate
from cost_models.parallel import ParallelConfig
from cost_models.placement import group, group_ranks
from planner.frameworks.torchtitan import TORCHTITAN
from planner.inputs.errors import ConfigError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs, config_from_mapping, config_to_mapping
from planner.profiles.hardware import load_cluster

ESTIMATE = ("estimate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "16", "-b", "256", "-s", "4096", "--tp", "8", "--pp", "2")  # fmt: skip
SEARCH = ("search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "4", "-b", "256", "-s", "4096")


def _args_text(m, spec, job, c) -> str:
    """The Megatron arguments of a configuration, as one line."""
    inputs = PlanInputs(m, spec, job, c, framework="megatron")
    return " ".join(f if v is None else f"{f} {v}" for f, v in megatron_args(inputs))


def _setup(instances: int, model: str = "llama3-70b", nodes: int = 128, **kw):
    m, spec = load_model(model), load_cluster("dgx-h100", nodes)
    job = make_job(global_batch_size=1024, seq_length=4096, precision="bf16")
    base = dict(tp=8, pp=2, optimizer_instances=instances)
    base.update(kw)
    return m, spec, job, resolve(m, spec, job, ParallelConfig(**base))


def test_optimizer_states_are_sharded_inside_one_instance():
    """Four instances of dp 64 / 4 = 16 ranks hold four times the optimizer state of one instance
    of 64; weights and gradients do not change."""
    m, spec, job, one = _setup(1)
    _, _, _, four = _setup(4)
    assert (one.dp, one.shard_degree, four.shard_degree) == (64, 64, 16)
    a, b = estimate(m, spec, job, one).stages[0].memory, estimate(m, spec, job, four).stages[0].memory
    assert b.optimizer_bytes == pytest.approx(4 * a.optimizer_bytes, rel=1e-12)
    assert (b.weights_bytes, b.gradients_bytes) == (a.weights_bytes, a.gradients_bytes)
    assert mem.shard_degrees(four) == (16, four.expert_dp // 4)


def test_reduction_is_a_reduce_scatter_inside_and_an_all_reduce_across():
    """The data-parallel terms are exactly: reduce-scatter of the gradients over the instance, then
    all-reduce of the 1/instance shard over the instances; all-gather of the parameters over the
    instance; the optimizer step updates the instance's shard."""
    m, spec, job, c = _setup(4)
    node = spec.groups[0]
    params, grad_b = 2.0e9, 4.0
    sync = dp_sync(job, c, node, params, 0.0, 8, backward_window_s=0.0, forward_window_s=0.0)
    inside, across = group(c, "shard"), group(c, "replicate")
    assert (inside.stride, inside.size, across.stride, across.size) == (8, 16, 128, 4)
    li, la = comm.link_for(inside, node), comm.link_for(across, node)
    assert li.crosses_network and la.crosses_network
    expected = comm.reduce_scatter_s(params * grad_b, 16, li) + comm.all_reduce_s(params * grad_b / 16, 4, la)
    assert sync.reduce_s == pytest.approx(expected, rel=1e-12)
    assert sync.gather_s == pytest.approx(comm.all_gather_s(params * 2.0, 16, li), rel=1e-12)
    # Nothing to hide the collectives behind: all of them are exposed.
    assert sync.reduce_exposed_s == pytest.approx(sync.reduce_s)
    flat = dp_sync(job, c.with_(optimizer_instances=1), node, params, 0.0, 8, 0.0, 0.0)
    assert sync.optimizer_s == pytest.approx(4 * flat.optimizer_s, rel=1e-9)


def test_instance_groups_follow_megatrons_rank_order():
    """Megatron-Core takes each instance as consecutive ranks of the dp-cp group
    (parallel_state.py ``intra_partial_dp_ranks_with_cp``); the inter-instance group strides over
    them. Expert groups split the expert data-parallel ranks the same way."""
    c = ParallelConfig(tp=2, dp=8, optimizer_instances=2)
    assert group_ranks(c, "shard", 0) == [0, 2, 4, 6]
    assert group_ranks(c, "replicate", 0) == [0, 8]
    e = ParallelConfig(tp=2, dp=8, ep=4, optimizer_instances=2)
    assert e.expert_dp == 4 and e.expert_shard_degree == 2
    assert group_ranks(e, "eshard", 0) == [0, 4]
    assert group_ranks(e, "ereplicate", 0) == [0, 8]


def test_megatrons_conditions_hold():
    m, spec = load_model("llama3-70b"), load_cluster("dgx-h100", 16)
    job = make_job(global_batch_size=256, seq_length=4096)
    c = ParallelConfig(tp=8, pp=2, dp=8, optimizer_instances=3)
    assert any("must divide dp*cp (8)" in v for v in violations(m, spec, job, c))
    none = c.with_(optimizer_instances=2, optimizer_sharding="none")
    assert any("needs the distributed optimizer" in v for v in violations(m, spec, job, none))
    assert any(">= 1" in v for v in violations(m, spec, job, c.with_(optimizer_instances=0)))
    moe, spec2 = load_model("mixtral-8x7b"), load_cluster("dgx-h100", 2)
    job2 = make_job(global_batch_size=64, seq_length=4096)
    # dp 16 splits into 8 instances, but the expert data-parallel group (16 / ep 8 = 2) does not.
    bad = ParallelConfig(tp=1, pp=1, dp=16, ep=8, optimizer_instances=8)
    assert any("expert data-parallel degree (2)" in v for v in violations(moe, spec2, job2, bad))
    assert not violations(moe, spec2, job2, bad.with_(optimizer_instances=2))
    with pytest.raises(ConfigError, match="optimizer_instances"):
        resolve(m, spec, job, ParallelConfig(tp=8, pp=2, optimizer_instances=5))


def test_plan_files_carry_the_count_only_when_set():
    c = ParallelConfig(tp=8, pp=2, dp=64, optimizer_instances=4)
    data = config_to_mapping(c)
    assert data["optimizer_instances"] == 4
    assert config_from_mapping(data, "plan.yaml").optimizer_instances == 4
    plain = config_to_mapping(c.with_(optimizer_instances=1))
    assert "optimizer_instances" not in plain
    assert config_from_mapping(plain, "plan.yaml").optimizer_instances == 1


def test_megatron_export_and_import_round_trip():
    m, spec, job, c = _setup(4)
    text = _args_text(m, spec, job, c)
    assert "--use-distributed-optimizer" in text and "--num-distributed-optimizer-instances 4" in text
    back = parse_megatron(text, "args.txt", spec.num_gpus)
    assert back.config.optimizer_instances == 4 and back.unknown == ()
    plain = parse_megatron(
        text.replace("--num-distributed-optimizer-instances 4", ""), "args.txt", spec.num_gpus
    )
    assert plain.config.optimizer_instances == 1
    # With Megatron-FSDP the same flag turns on its hybrid sharding, which planner does not price:
    # it is reported among the flags not interpreted.
    fsdp = parse_megatron(
        text.replace("--use-distributed-optimizer", "--use-megatron-fsdp --ckpt-format fsdp_dtensor"),
        "args.txt",
        spec.num_gpus,
    )
    assert fsdp.config.optimizer_instances == 1
    assert "--num-distributed-optimizer-instances" in fsdp.unknown


def test_flags_planner_does_not_interpret_are_reported():
    """An accepted flag planner does not read lands in ``unknown`` (check warns about it); the
    recompute-module names read later do not replace that list."""
    m, spec, job, c = _setup(1)
    text = _args_text(m, spec, job, c) + " --num-layers-at-start-in-bf16 1 --recompute-activations"
    back = parse_megatron(text, "args.txt", spec.num_gpus)
    assert back.unknown == ("--num-layers-at-start-in-bf16",)


def test_torchtitan_runs_no_partial_distributed_optimizer():
    m, spec, job, c = _setup(4)
    assert any("no optimizer instances" in v for v in TORCHTITAN.violations(m, spec, job, c))


def test_estimate_cli_shows_the_instances(run_cli):
    out = run_cli(*ESTIMATE, "--optimizer-instances", "4", "--json")
    assert out.exit_code == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["config"]["optimizer_instances"] == 4
    plain = json.loads(run_cli(*ESTIMATE, "--json").stdout)
    assert "optimizer_instances" not in plain["config"]
    assert d["memory"]["per_stage"][0]["optimizer_bytes"] == pytest.approx(
        4 * plain["memory"]["per_stage"][0]["optimizer_bytes"], rel=1e-6
    )
    table = run_cli(*ESTIMATE, "--optimizer-instances", "4")
    assert "distributed, 4 instances" in table.stdout
    bad = run_cli(*ESTIMATE, "--optimizer-instances", "5")
    assert bad.exit_code != 0 and "optimizer_instances (5) must divide dp*cp" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_search_tries_the_asked_instance_counts(run_cli, tmp_path):
    """--optimizer-instances restricts the distributed optimizer's instance counts; the plan file
    and the Megatron export carry the count; torchtitan refuses the flag."""
    plan = tmp_path / "plan.yaml"
    r = run_cli(
        *SEARCH, "--optimizer-sharding", "distributed", "--optimizer-instances", "4", "--top", "3",
        "--json", "--out", str(plan), "-q",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert plans and all(p["optimizer_instances"] == 4 for p in plans)
    again = json.loads(run_cli("estimate", "--plan", str(plan), "--json").stdout)
    assert again["config"]["optimizer_instances"] == 4
    out = tmp_path / "launch"
    assert run_cli("export", "megatron", str(plan), "--out", str(out), "-q").exit_code == 0
    words = (out / "megatron_args.txt").read_text().split()
    assert words[words.index("--num-distributed-optimizer-instances") + 1] == "4"
    titan = run_cli(*SEARCH, "--optimizer-instances", "4", "--framework", "torchtitan")
    assert titan.exit_code == 2 and "--optimizer-instances" in titan.stderr
    both = run_cli(*SEARCH, "--optimizer-sharding", "full", "--optimizer-instances", "4")
    assert both.exit_code == 2 and "needs distributed" in both.stderr


def test_check_refuses_instances_without_the_distributed_optimizer(run_cli, tmp_path):
    m, spec, job, c = _setup(4)
    f = tmp_path / "args.txt"
    f.write_text(_args_text(m, spec, job, c).replace("--use-distributed-optimizer", ""))
    r = run_cli("check", str(f), "-c", "dgx-h100", "-n", "128", "--json")
    assert r.exit_code != 0
    messages = " ".join(x["message"] for x in json.loads(r.stdout)["configs"][0]["findings"])
    assert "needs the distributed optimizer" in messages


def test_bucket_size_grows_with_the_data_parallel_group():
    """Megatron-Core's default bucket: max(40M, 1M x dp) parameters; the last bucket's reduction
    is what no backward pass hides."""
    assert ddp_bucket_params(8) == DDP_BUCKET_PARAMS
    assert ddp_bucket_params(512) == 512_000_000
    m, spec, job, c = _setup(1, nodes=1024)
    assert c.dp == 512
    node = spec.groups[0]
    params = 4.0e9
    sync = dp_sync(job, c, node, params, 0.0, 8, backward_window_s=1e3, forward_window_s=1e3)
    # A window long enough to hide everything leaves the last bucket, 512M of 4G parameters, and
    # the compute slowdown while the rest runs hidden.
    floor = sync.reduce_s * 512e6 / params
    slowdown = node.gpu.efficiency.comm_overlap_slowdown
    assert sync.reduce_exposed_s == pytest.approx(floor + slowdown * (sync.reduce_s - floor), rel=1e-9)
