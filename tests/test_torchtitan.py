"""torchtitan target: capabilities, export (golden files), import, round trip, CLI."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.frameworks.torchtitan import EAGER_TORCHTITAN, TORCHTITAN
from planner.frameworks.torchtitan_models import FLAVORS, model_from_flavor, titan_model
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.torchtitan import export as tx
from planner.launch.torchtitan.importer import default_layer_split, parse_torchtitan, read_torchtitan
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from planner.search.chain import search
from planner.search.space import Restrictions

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the importer needs it too)

GOLDEN = Path(__file__).parent / "golden"


def _job(gbs=64, seq=4096, precision="bf16", eager_ops=()):
    return make_job(
        global_batch_size=gbs, seq_length=seq, precision=precision, eager_ops=eager_ops, where="test"
    )


def _searched(model, nodes, job, **restrict) -> tuple[PlanInputs, float]:
    cluster = load_cluster("dgx-h100", nodes)
    m = load_model(model) if isinstance(model, str) else model
    result = search(m, cluster, job, Restrictions(framework="torchtitan", **restrict), top_k=1)
    best = result.plans[0]
    inputs = PlanInputs(m, best.cluster, job, best.estimate.config, best.stage_groups, "torchtitan")
    return inputs, best.estimate.step_time_s


CASES = {
    "dense_fsdp_pp1": ("llama3-8b", 2, _job(), {"pp": (1,), "optimizer_sharding": ("full",)}),
    "dense_zero2_1f1b": ("llama3-70b", 8, _job(), {"pp": (4,), "schedule": ("1f1b",), "tp": (8,)}),
    "gqa_interleaved": ("llama3-70b", 8, _job(), {"pp": (4,), "schedule": ("interleaved",), "tp": (8,)}),
    # InterleavedZeroBubble refuses compiled stages: zb-h1 is planned with RoPE and SwiGLU eager
    "zb_h1": (
        "llama3-70b",
        8,
        _job(eager_ops=EAGER_TORCHTITAN),
        {"pp": (4,), "schedule": ("zb-h1",), "tp": (8,)},
    ),
    # ZBVZeroBubble: two stages per rank as a V, eager as zb-h1
    "zb_v": (
        "llama3-70b",
        8,
        _job(eager_ops=EAGER_TORCHTITAN),
        {"pp": (4,), "schedule": ("zb-v",), "tp": (8,)},
    ),
    "gpipe": ("llama3-8b", 2, _job(), {"pp": (2,), "schedule": ("gpipe",), "tp": (4,)}),
    "context_parallel": ("llama3-8b", 2, _job(seq=16384), {"cp": (2,), "tp": (4,)}),
    "fp8_full_recompute": ("llama3-8b", 2, _job(precision="fp8"), {"recompute": ("full",), "tp": (2,)}),
    "op_recompute": ("llama3-70b", 8, _job(), {"recompute": ("op",), "tp": (8,), "pp": (1,)}),
    # full recompute of some blocks: selective_ac_option = "<n>" (every n-th block)
    "every_nth_recompute": ("llama3-70b", 8, _job(), {"recompute": ("full",), "pp": (4,), "tp": (8,)}),
    "ddp_tp1": (
        model_from_flavor("qwen3", "1.7B", "test"),
        4,
        _job(gbs=128, seq=2048),
        {"optimizer_sharding": ("none",), "tp": (1,)},
    ),
    "moe_ep": ("qwen3-30b-a3b", 2, _job(), {"ep": (8,), "tp": (1,)}),
    "custom_dense": ("llama2-7b", 2, _job(), {"pp": (2,), "tp": (4,)}),
    "custom_moe": ("mixtral-8x7b", 4, _job(), {"ep": (8,), "tp": (2,)}),
}


@pytest.fixture(scope="module")
def plans() -> dict:
    return {name: _searched(m, n, job, **r) for name, (m, n, job, r) in CASES.items()}


def _import(tmp_path: Path, inputs: PlanInputs):
    files = tx.export_files(inputs, "torchrun")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return read_torchtitan(tmp_path / tx.CONFIG_FILE, inputs.cluster.num_gpus)


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_reproduces_step_time(name, plans, tmp_path):
    inputs, step = plans[name]
    assert not TORCHTITAN.violations(inputs.model, inputs.cluster, inputs.job, inputs.config)
    back = _import(tmp_path, inputs)
    c = back.config
    assert (c.tp, c.pp, c.dp, c.cp, c.ep, c.vpp, c.micro_batch_size) == (
        inputs.config.tp,
        inputs.config.pp,
        inputs.config.dp,
        inputs.config.cp,
        inputs.config.ep,
        inputs.config.vpp,
        inputs.config.micro_batch_size,
    )
    assert (c.schedule if c.pp > 1 else "1f1b") == (inputs.config.schedule if c.pp > 1 else "1f1b")
    assert c.optimizer_sharding == inputs.config.optimizer_sharding
    assert (c.recompute, c.recompute_num_layers) == (
        inputs.config.recompute,
        inputs.config.recompute_num_layers,
    )
    est = estimate(back.model, inputs.cluster, back.job, c)
    assert abs(est.step_time_s / step - 1) < 0.005


def test_cases_cover_the_space(plans):
    configs = [p.config for p, _ in plans.values()]
    assert {c.schedule for c in configs if c.pp > 1} == {"1f1b", "interleaved", "zb-h1", "gpipe", "zb-v"}
    assert {c.optimizer_sharding for c in configs} == {"none", "zero2", "full"}
    assert any(c.cp > 1 for c in configs) and any(c.ep > 1 for c in configs)
    assert any(c.tp == 1 for c in configs) and any(c.pp == 1 for c in configs)
    assert any(p.job.precision == "fp8" for p, _ in plans.values())


def test_uneven_split_round_trip(tmp_path):
    m, cluster, job = load_model("llama3-8b"), load_cluster("dgx-h100", 2), _job()
    c = ParallelConfig(
        tp=4,
        pp=2,
        dp=2,
        vpp=2,
        micro_batch_size=1,
        optimizer_sharding="zero2",
        schedule="interleaved",
        layers_per_stage=(7, 9, 9, 7),
    )
    inputs = PlanInputs(m, cluster, job, c, (), "torchtitan")
    toml = tomllib.loads(tx.job_toml(inputs))
    parts = toml["parallelism"]["module_fqns_per_model_part"]
    assert [len([x for x in p if x.startswith("layers.")]) for p in parts] == [7, 9, 9, 7]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    back = _import(tmp_path, inputs)
    assert back.config.layers_per_stage == (7, 9, 9, 7) and back.config.vpp == 2
    a, b = estimate(m, cluster, job, c), estimate(back.model, cluster, back.job, back.config)
    assert abs(a.step_time_s / b.step_time_s - 1) < 0.005


def test_hsdp_round_trip(tmp_path):
    """HSDP exports as data_parallel_shard_degree x data_parallel_replicate_degree and reads back."""
    m, cluster, job = load_model("llama3-8b"), load_cluster("dgx-h100", 4), _job()
    c = ParallelConfig(tp=1, pp=1, dp=16, cp=2, micro_batch_size=1, optimizer_sharding="full", fsdp_shard=8)
    inputs = PlanInputs(m, cluster, job, c, (), "torchtitan")
    par = tomllib.loads(tx.job_toml(inputs))["parallelism"]
    assert par["data_parallel_shard_degree"] == 4 and par["data_parallel_replicate_degree"] == 4
    back = _import(tmp_path, inputs)
    assert back.config.fsdp_shard == 8 and back.config.dp == 16
    a, b = estimate(m, cluster, job, c), estimate(back.model, cluster, back.job, back.config)
    assert abs(a.step_time_s / b.step_time_s - 1) < 0.005
    assert any("multiple of cp" in v for v in TORCHTITAN.violations(m, cluster, job, c.with_(fsdp_shard=3)))


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 to rewrite)"


@pytest.mark.parametrize("name", ["zb_h1", "moe_ep", "custom_dense", "fp8_full_recompute"])
def test_golden_exports(name, plans):
    inputs, _ = plans[name]
    _golden(f"torchtitan_{name}.toml", tx.job_toml(inputs))
    _golden(f"torchtitan_{name}.overrides.txt", tx.overrides_text(inputs))
    _golden(f"torchtitan_{name}.slurm.sh", tx.slurm_script(inputs, 8, inputs.cluster.num_gpus // 8))
    flavor = tx.flavor_file(inputs)
    if flavor is not None:
        _golden(f"torchtitan_{name}.flavor.py", flavor)


def test_export_mapping_details(plans):
    zb = tomllib.loads(tx.job_toml(plans["zb_h1"][0]))
    assert zb["parallelism"]["pipeline_parallel_schedule"] == "InterleavedZeroBubble"
    assert len(zb["parallelism"]["module_fqns_per_model_part"]) == 4  # one stage per rank
    zbv = tomllib.loads(tx.job_toml(plans["zb_v"][0]))["parallelism"]
    assert zbv["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    assert len(zbv["module_fqns_per_model_part"]) == 8  # two stages per rank, placed by torchtitan
    assert "the V" in tx.job_toml(plans["zb_v"][0])
    assert zb["parallelism"]["fsdp_reshard_after_forward"] == "never"  # ZeRO-2
    full = tomllib.loads(tx.job_toml(plans["dense_fsdp_pp1"][0]))
    assert full["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert full["activation_checkpoint"]["mode"] in ("none", "full")
    ddp = tomllib.loads(tx.job_toml(plans["ddp_tp1"][0]))["parallelism"]
    assert ddp["data_parallel_shard_degree"] == 1 and ddp["data_parallel_replicate_degree"] == 32
    op = tomllib.loads(tx.job_toml(plans["op_recompute"][0]))["activation_checkpoint"]
    assert op == {"mode": "selective", "selective_ac_option": "op"}
    assert plans["op_recompute"][0].config.recompute == "op"
    nth_inputs = plans["every_nth_recompute"][0]
    nth = tomllib.loads(tx.job_toml(nth_inputs))["activation_checkpoint"]
    c = nth_inputs.config
    stage = 80 // (c.pp * c.vpp)
    assert 0 < c.recompute_num_layers < stage and c.layers_per_stage == ()  # even split: exact count
    assert nth == {"mode": "selective", "selective_ac_option": str(stage // c.recompute_num_layers)}
    assert stage % int(nth["selective_ac_option"]) == 0
    fp8 = tomllib.loads(tx.job_toml(plans["fp8_full_recompute"][0]))
    assert fp8["model"]["converters"] == ["quantize.linear.float8"]
    # partial full recompute wins here: one block in 32 (every_nth_recompute has the mapping)
    assert fp8["activation_checkpoint"]["mode"] == "selective"
    full_all = ParallelConfig(tp=2, pp=1, dp=8, recompute="full", optimizer_sharding="zero2")
    assert tx._activation_checkpoint(full_all, 32) == [("mode", "full", "")]
    moe = tomllib.loads(tx.job_toml(plans["moe_ep"][0]))
    assert moe["model"] == {**moe["model"], "name": "qwen3", "flavor": "30B-A3B"}
    assert moe["parallelism"]["expert_parallel_degree"] == 8
    overrides = dict(tx.cli_overrides(plans["zb_h1"][0]))
    assert overrides["--parallelism.tensor_parallel_degree"] == "8"
    assert overrides["--parallelism.pipeline_parallel_schedule"] == "InterleavedZeroBubble"


def test_flavor_table_matches_presets():
    assert titan_model(load_model("llama3-8b")).flavor == "8B"
    assert titan_model(load_model("llama3-70b")).flavor == "70B"
    assert titan_model(load_model("llama3.1-405b")).flavor == "405B"
    assert FLAVORS[("llama3", "405B")]["ffn_hidden_size"] == 53248  # 1.2 * int(8 * 16384 / 3) -> x4096
    m = model_from_flavor("llama3", "70B", "x")
    assert m.params_total == load_model("llama3-70b").params_total


def test_refusals_name_the_reason():
    cluster, job = load_cluster("dgx-h100", 2), _job()
    gpt = load_model("gpt3-175b")
    c = ParallelConfig(tp=8, pp=2, dp=1, optimizer_sharding="zero2")
    with pytest.raises(SpecError, match="no model with a gelu MLP"):
        tx.job_toml(PlanInputs(gpt, cluster, job, c, (), "torchtitan"))
    llama = load_model("llama3-8b")
    reasons = TORCHTITAN.violations(
        llama, cluster, job, ParallelConfig(tp=2, pp=1, dp=8, optimizer_sharding="none")
    )
    assert any("DDP" in r for r in reasons)
    reasons = TORCHTITAN.violations(
        llama, cluster, job, ParallelConfig(tp=8, pp=2, dp=1, optimizer_sharding="none")
    )
    assert any("fp32" in r for r in reasons)
    qwen = load_model("qwen3-30b-a3b")
    reasons = TORCHTITAN.violations(
        qwen, cluster, job, ParallelConfig(tp=1, pp=2, dp=8, optimizer_sharding="zero2")
    )
    assert any("no pipeline parallelism for qwen3" in r for r in reasons)
    reasons = TORCHTITAN.violations(
        llama,
        cluster,
        job,
        ParallelConfig(tp=2, pp=1, dp=8, recompute="selective", optimizer_sharding="full"),
    )
    assert any("selective" in r for r in reasons)
    bf16_grads = replace(job, grad_dtype="bf16")
    reasons = TORCHTITAN.violations(
        llama, cluster, bf16_grads, ParallelConfig(tp=2, pp=1, dp=8, optimizer_sharding="full")
    )
    assert any("does not reduce bf16 gradients in bf16 (it reduces them in fp32)" in r for r in reasons)


def test_import_errors_name_the_key(tmp_path):
    base = '[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n'
    with pytest.raises(SpecError, match="model.flavor"):
        parse_torchtitan(base.replace("70B", "9B"), "j.toml", 16)
    with pytest.raises(SpecError, match="parallelism.bogus"):
        parse_torchtitan(base + "[parallelism]\nbogus = 1\n", "j.toml", 16)
    with pytest.raises(SpecError, match="pipeline_parallel_schedule"):
        parse_torchtitan(
            base + '[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "DualPipeV"\n',
            "j.toml",
            16,
        )
    hsdp = parse_torchtitan(
        base + "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 8\n",
        "j.toml",
        16,
    )
    assert hsdp.config.fsdp_shard == 8 and hsdp.config.dp == 16 and hsdp.config.optimizer_sharding == "full"
    with pytest.raises(SpecError, match="HSDP"):
        parse_torchtitan(
            base
            + "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 8\n"
            + 'fsdp_reshard_after_forward = "never"\n',
            "j.toml",
            16,
        )
    with pytest.raises(SpecError, match="not valid TOML"):
        parse_torchtitan("[model\n", "j.toml", 16)
    with pytest.raises(SpecError, match="selective_ac_option"):
        parse_torchtitan(base + '[activation_checkpoint]\nselective_ac_option = "ops"\n', "j.toml", 16)
    op = parse_torchtitan(base + '[activation_checkpoint]\nselective_ac_option = "op"\n', "j.toml", 16)
    assert op.config.recompute == "op" and op.config.recompute_num_layers == 0


def test_every_nth_block_recompute_is_what_torchtitan_runs():
    from planner.frameworks.base import every_nth, every_nth_counts
    from planner.frameworks.megatron import MEGATRON
    from planner.search.shape_partition import full_recompute_variants

    assert every_nth(8, 32) == 4 and every_nth(10, 32) == 3 and every_nth(7, 32) == 0
    assert every_nth(32, 32) == 0 and every_nth(0, 32) == 0
    assert every_nth_counts(32) == [1, 2, 3, 4, 5, 6, 8, 10, 16]
    llama, cluster, job = load_model("llama3-8b"), load_cluster("dgx-h100", 1), _job()
    ok = ParallelConfig(
        tp=1, pp=1, dp=8, recompute="full", recompute_num_layers=10, optimizer_sharding="full"
    )
    assert not TORCHTITAN.violations(llama, cluster, job, ok)  # 32 // 3 (importer's reading of "3")
    bad = replace(ok, recompute_num_layers=7)
    reasons = TORCHTITAN.violations(llama, cluster, job, bad)
    assert any("every n-th block" in r and "1, 2, 3, 4, 5, 6, 8, 10, 16" in r for r in reasons), reasons
    assert not MEGATRON.violations(llama, cluster, job, replace(bad, optimizer_sharding="distributed"))
    # Searched counts divide the stage (exact on every stage), nearest Megatron's 1, 2, S/4, S/2, 3S/4.
    full = ParallelConfig(tp=1, pp=1, dp=8, recompute="full", optimizer_sharding="full")
    ks = [v.recompute_num_layers for v in full_recompute_variants(llama, full, False, True)]
    assert ks == [1, 2, 8, 16, 0]
    assert [v.recompute_num_layers for v in full_recompute_variants(llama, full, True, False)] == [
        1,
        2,
        8,
        16,
        24,
        0,
    ]
    assert full_recompute_variants(llama, full, False, False) == [full]
    odd = ParallelConfig(tp=1, pp=3, dp=2, recompute="full", optimizer_sharding="zero2")  # 32 layers on 3
    assert full_recompute_variants(llama, odd, False, True) == [odd]


def test_every_nth_variants_are_partitioned_evenly():
    """Uneven splits are searched for full recompute of every layer only: on an uneven split an
    every-n-th variant would recompute different counts on different stages."""
    m, cluster, job = load_model("llama3-8b"), load_cluster("dgx-h100", 4), _job()
    restrict = Restrictions(framework="torchtitan", recompute=("full",), pp=(2, 4), tp=(4,))
    result = search(m, cluster, job, restrict, top_k=8)
    assert any(p.estimate.config.recompute_num_layers for p in result.plans)
    for p in result.plans:
        c = p.estimate.config
        if c.recompute_num_layers:
            assert c.layers_per_stage == ()
            stage = m.num_layers // (c.pp * c.vpp)
            assert stage % c.recompute_num_layers == 0


def test_import_reads_torchtitan_defaults():
    text = '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\npipeline_parallel_degree = 2\n'
    got = parse_torchtitan(
        text, "j.toml", 16, ["--training.local_batch_size", "8", "--training.seq_len=4096"]
    )
    c = got.config
    assert c.dp == 8 and c.optimizer_sharding == "zero2"  # dp_shard -1 takes the rest; "default" with pp
    assert default_layer_split(2, 32, 1, 1) == [16, 16] and c.layers_per_stage == ()  # even: no list
    assert c.recompute == "full" and c.recompute_num_layers == 8  # default selective every 2nd block
    assert got.job.global_batch_size == 64 and got.job.seq_length == 4096
    assert default_layer_split(4, 32, 1, 1) == [8, 9, 8, 7]  # 34 effective layers: 9, 9, 8, 8


def test_readme_job_with_torchtitan(tmp_path, run_cli):
    plan = tmp_path / "plan.yaml"
    r = run_cli(
        "search", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "64", "--global-batch-size",
        "1024", "--seq-len", "8192", "--framework", "torchtitan", "--out", str(plan),
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "launch"
    r = run_cli("export", "torchtitan", str(plan), "--out", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["framework"]["version"] == "0.2.2"
    assert (out / "torchtitan_job.toml").exists() and os.access(out / "launch_torchrun.sh", os.X_OK)
    assert subprocess.run(["bash", "-n", str(out / "launch_torchrun.sh")]).returncode == 0
    r = run_cli("export", "torchtitan", str(plan), "--out", str(out))
    assert r.exit_code == 1 and "--force" in r.stderr and "Traceback" not in r.stderr
    toml = str(out / "torchtitan_job.toml")
    r = run_cli("check", toml, "--cluster", "dgx-h100", "--nodes", "64", "--max-slowdown", "0.01", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    verdict = json.loads(r.stdout)["configs"][0]
    assert verdict["metrics"]["framework"] == "torchtitan"
    assert verdict["metrics"]["slowdown_vs_best"] < 0.005
    r = run_cli("export", "torchtitan", str(plan), "--out", str(out), "--launcher", "pbs")
    assert r.exit_code == 2 and "torchrun, slurm" in r.stderr


def test_cli_check_invalid_toml_exits_1(tmp_path, run_cli):
    bad = tmp_path / "job.toml"
    bad.write_text('[model]\nname = "llama3"\nflavor = "nope"\n')
    r = run_cli("check", str(bad), "--cluster", "dgx-h100", "--nodes", "2")
    assert r.exit_code == 1 and "model.flavor" in (r.stdout + r.stderr)


def test_cli_export_refuses_a_plan_torchtitan_cannot_run(tmp_path, run_cli):
    plan = tmp_path / "plan.yaml"
    r = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096",
        "--framework", "megatron", "--optimizer-sharding", "distributed", "--out", str(plan),
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    r = run_cli("export", "torchtitan", str(plan), "--out", str(tmp_path / "x"))
    assert r.exit_code == 1 and "distributed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_zero_bubble_is_refused_with_torch_compile():
    # torch.distributed.pipelining ScheduleInterleavedZeroBubble: _check_torch_compile_compatibility
    m, cluster = load_model("llama3-70b"), load_cluster("dgx-h100", 8)
    c = ParallelConfig(tp=8, pp=4, dp=2, micro_batch_size=1, schedule="zb-h1", optimizer_sharding="zero2")
    fused = [v for v in TORCHTITAN.violations(m, cluster, _job(), c) if "torch.compile" in v]
    assert fused and "--eager-ops rope,activation" in fused[0]
    eager = _job(eager_ops=EAGER_TORCHTITAN)
    assert not [v for v in TORCHTITAN.violations(m, cluster, eager, c) if "torch.compile" in v]
