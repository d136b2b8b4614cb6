"""The time breakdown of every estimate sums exactly to its step time, with no negative term
(issue 12: an FSDP plan's breakdown once missed 1.23 s of its step)."""

import math

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.outputs.views import TIME_KEYS
from planner.profiles.hardware import load_cluster

CASES = [
    (
        "llama3-70b",
        "dgx-h100",
        64,
        1024,
        8192,
        dict(tp=1, pp=1, cp=2, optimizer_sharding="full", recompute="full"),
    ),
    ("llama3-70b", "dgx-h100", 8, 64, 4096, dict(tp=8, pp=4, vpp=5, schedule="interleaved")),
    ("llama3-70b", "dgx-h100", 8, 64, 4096, dict(tp=8, pp=4, schedule="zb-h1")),
    ("llama3-8b", "dgx-h100", 2, 64, 8192, dict(tp=2, pp=1, optimizer_sharding="zero2", micro_batch_size=2)),
    ("gpt3-175b", "dgx-a100", 128, 1536, 2048, dict(tp=8, pp=8, optimizer_sharding="distributed")),
    (
        "mixtral-8x7b",
        "dgx-h100",
        8,
        256,
        4096,
        dict(tp=2, pp=4, ep=8, recompute="full", recompute_num_layers=2),
    ),
    ("llama3-8b", "dgx-a100", 1, 32, 2048, dict(tp=1, pp=1, optimizer_sharding="none")),
    (
        "llama3-70b",
        "dgx-h100",
        64,
        1024,
        8192,
        dict(tp=1, pp=1, cp=2, optimizer_sharding="full", recompute="full", fsdp_shard=8),
    ),
    # Activation offloading: its exposed copies are a term of their own.
    (
        "llama3-70b",
        "gb200-nvl72",
        16,
        64,
        8192,
        dict(tp=1, pp=1, optimizer_sharding="full", offload_layers=40),
    ),
]


@pytest.mark.parametrize("name,cluster,nodes,gbs,seq,cfg", CASES)
def test_breakdown_sums_to_step_time(name, cluster, nodes, gbs, seq, cfg):
    model, spec = load_model(name), load_cluster(cluster, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    est = estimate(model, spec, job, resolve(model, spec, job, ParallelConfig(**cfg)))
    parts = est.time_breakdown()
    # The offload term is itemised only for plans that offload (others read as before).
    expected = [k for k in TIME_KEYS if k != "exposed activation offload" or cfg.get("offload_layers")]
    assert [n for n, _ in parts] == expected
    assert all(v >= -1e-9 * est.step_time_s for _, v in parts), parts
    assert math.isclose(sum(v for _, v in parts), est.step_time_s, rel_tol=1e-9)


def test_fsdp_communication_is_in_the_breakdown():
    """Fully sharded plans pay per-layer gathers: the data-parallel traffic is not reported as zero."""
    model, spec = load_model("llama3-70b"), load_cluster("dgx-h100", 64)
    job = make_job(global_batch_size=1024, seq_length=8192)
    c = ParallelConfig(tp=1, pp=1, cp=2, optimizer_sharding="full", recompute="full")
    est = estimate(model, spec, job, resolve(model, spec, job, c))
    assert all(s.dp_comm_s > 0 for s in est.stages)


def test_megatron_first_last_stage_split():
    """Megatron's --decoder-first/last-pipeline-num-layers: the middle stages split the rest evenly
    (Llama 3.1 405B's 126 layers on 16 stages), and a split that does not divide is an error."""
    from cost_models.parallel import first_last_split
    from planner.inputs.errors import ConfigError

    assert first_last_split(126, 16, 7, 7) == (7,) + (8,) * 14 + (7,)
    assert first_last_split(126, 16, 6, None) == (6,) + (8,) * 15
    assert first_last_split(94, 2, 47, 47) == (47, 47)
    with pytest.raises(ConfigError, match="do not split evenly"):
        first_last_split(126, 16, 5, None)


def test_cli_estimate_uneven_split(run_cli):
    import json

    r = run_cli(
        "estimate",
        "-m",
        "llama3.1-405b",
        "-c",
        "dgx-h100",
        "-n",
        "128",
        "-b",
        "512",
        "-s",
        "8192",
        "--tp",
        "8",
        "--pp",
        "16",
        "--decoder-first-pipeline-num-layers",
        "7",
        "--decoder-last-pipeline-num-layers",
        "7",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["config"]["layers_per_stage"] == [7] + [8] * 14 + [7]
    bad = run_cli(
        "estimate",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "1",
        "-b",
        "64",
        "-s",
        "4096",
        "--pp",
        "2",
        "--layers-per-stage",
        "16,15",
    )
    assert bad.exit_code == 1 and "sums to 31" in bad.stderr
    both = run_cli(
        "estimate",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "1",
        "-b",
        "64",
        "-s",
        "4096",
        "--pp",
        "2",
        "--layers-per-stage",
        "16,16",
        "--decoder-first-pipeline-num-layers",
        "16",
    )
    assert both.exit_code == 2


def test_plausibility_flags_predictions_above_the_best_published_mfu():
    """Issue 12: each estimate names the best published MFU of its class and flags a prediction above it."""
    from planner.profiles.plausibility import plausibility, published_classes

    best = published_classes()["h100-sxm5-80gb bf16 dense"]
    above = plausibility("h100-sxm5-80gb", "bf16", False, best["mfu"] + 0.05)
    below = plausibility("h100-sxm5-80gb", "bf16", False, best["mfu"] - 0.05)
    assert above.above_best_published and not below.above_best_published
    assert above.best_run_id == best["run_id"]
    unknown = plausibility("l40s", "bf16", True, 0.9)
    assert unknown.best_published_mfu is None and not unknown.above_best_published


def test_a_megatron_plan_is_held_to_runs_stock_megatron_can_schedule():
    """A run's framework is its software class's: the zero-bubble fork's ZB-2p runs (A100 fp16,
    57% MFU) are not a bound stock Megatron-LM can reach, nor are BigScience's DeepSpeed-engine runs
    Megatron's; a Megatron plan is checked against Megatron-LM's own runs."""
    import importlib.util
    from pathlib import Path

    from planner.calibration import cases as cal
    from planner.profiles.plausibility import plausibility, published_classes

    script = Path(__file__).resolve().parent.parent / "scripts" / "published_mfu.py"
    spec = importlib.util.spec_from_file_location("published_mfu", script)
    published_mfu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(published_mfu)
    by_id = {c.run_id: c for c in cal.cases()}
    assert (
        published_mfu.framework_of(by_id["qi2024_zb_a100_gpt28.3b_32gpu_gbs128_zb2p_mbs1"]) == "zero-bubble"
    )
    assert published_mfu.framework_of(by_id["bloom176b_reshape_24nodes_tp2_pp24_mbs1"]) == "deepspeed"
    assert published_mfu.framework_of(by_id["narayanan2021_t2_ptdp_529b_560gpu"]) == "megatron"
    cls = published_classes()["a100-sxm4-80gb fp16 dense"]
    megatron = cls["by_framework"]["megatron"]
    assert by_id[megatron["run_id"]].software == ""  # a stock Megatron-LM run
    assert cls["mfu"] > megatron["mfu"]  # the fork's best is above it
    between = (cls["mfu"] + megatron["mfu"]) / 2
    assert plausibility("a100-sxm4-80gb", "fp16", False, between, "megatron").above_best_published
    assert not plausibility("a100-sxm4-80gb", "fp16", False, between, "zero-bubble").above_best_published


def test_plans_beyond_the_calibration_runs_of_their_class_are_flagged():
    """Issue 12: FSDP over more ranks, or more GPUs, than any calibration run of the class is an
    extrapolation; the reason names the run that bounds the class."""
    from planner.profiles.plausibility import plausibility, published_classes

    cover = published_classes()["a100-sxm4-80gb bf16 dense"]["coverage"]
    ranks, gpus = cover["largest_fsdp_shard"]["ranks"], cover["largest_run"]["gpus"]
    inside = plausibility("a100-sxm4-80gb", "bf16", False, 0.4, gpus=gpus, fsdp_shard=ranks)
    assert inside.extrapolation == ()
    wide = plausibility("a100-sxm4-80gb", "bf16", False, 0.4, gpus=2 * gpus, fsdp_shard=4 * ranks)
    assert len(wide.extrapolation) == 2
    assert cover["largest_run"]["run_id"] in wide.extrapolation[0]
    assert f"FSDP over {4 * ranks} ranks" in wide.extrapolation[1]
    assert cover["largest_fsdp_shard"]["run_id"] in wide.extrapolation[1]
    # a class with no fully sharded run at all
    assert "no fully sharded run" in plausibility("b200", "fp8", True, 0.2, fsdp_shard=16).extrapolation[0]
    assert "no published run" in plausibility("l40s", "bf16", True, 0.2).extrapolation[0]


def test_plans_with_steps_shorter_than_any_calibration_run_of_their_class_are_flagged():
    """A step shorter than the class's shortest measured one extrapolates (unseen MLPerf Training
    v6.0 runs of 0.07-0.2 s steps were predicted 11-143% too fast); the reason names the run. The
    shortest step is the run's tokens per step over its measured throughput."""
    from planner.calibration import cases as cal
    from planner.profiles.plausibility import plausibility, published_classes

    shortest = published_classes()["h100-sxm5-80gb bf16 dense"]["coverage"]["shortest_step"]
    run = {c.run_id: c for c in cal.cases()}[shortest["run_id"]]
    measured = run.job.tokens_per_step / (run.measured_tokens_per_s_per_gpu * run.cluster.num_gpus)
    assert shortest["seconds"] == pytest.approx(measured, abs=1e-4)
    at = plausibility("h100-sxm5-80gb", "bf16", False, 0.4, step_s=shortest["seconds"])
    assert at.extrapolation == ()
    short = plausibility("h100-sxm5-80gb", "bf16", False, 0.4, step_s=shortest["seconds"] / 4)
    assert len(short.extrapolation) == 1
    assert shortest["run_id"] in short.extrapolation[0] and "s step" in short.extrapolation[0]
    assert plausibility("h100-sxm5-80gb", "bf16", False, 0.4).extrapolation == ()  # step not judged


def test_moe_plans_running_a_way_no_calibration_run_did_are_flagged():
    """An MoE plan's dispatcher, all-to-all overlap or CUDA graphs outside what its class's runs used
    is an extrapolation, named; what the runs covered is not."""
    from planner.profiles.plausibility import plausibility, published_classes

    cover = published_classes()["h100-sxm5-80gb bf16 moe"]["coverage"]
    assert set(cover["moe_dispatchers"]) == {"alltoall", "flex"}
    seen = plausibility("h100-sxm5-80gb", "bf16", True, 0.2, moe_runtime=("flex", False, False))
    assert seen.extrapolation == ()
    gather = plausibility("h100-sxm5-80gb", "bf16", True, 0.2, moe_runtime=("allgather", False, False))
    assert gather.extrapolation == (
        "MoE dispatcher allgather: no calibration run of the class used it (they used alltoall, flex)",
    )
    assert "cuda_graphs" not in cover  # no H100 bf16 MoE run captured graphs
    graphs = plausibility("h100-sxm5-80gb", "bf16", True, 0.2, moe_runtime=("alltoall", False, True))
    assert graphs.extrapolation == ("CUDA graphs: no calibration run of the class captured CUDA graphs",)
    gb = published_classes()["gb200 fp8 moe"]["coverage"]
    assert gb["moe_a2a_overlap"] and gb["cuda_graphs"]
    assert plausibility("gb200", "fp8", True, 0.3, moe_runtime=("flex", True, True)).extrapolation == ()


def test_search_json_flags_an_fsdp_plan_beyond_the_calibration():
    from typer.testing import CliRunner

    from planner.cli import app

    args = ["search", "-m", "gpt3-175b", "-c", "dgx-a100", "-n", "128", "-b", "1536", "-s", "2048"]
    args += ["--tp", "4", "--pp", "1", "--optimizer-sharding", "full", "--top", "1", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    import json

    plan = json.loads(out.stdout)["plans"][0]
    assert plan["optimizer_sharding"] == "full"
    assert any("FSDP over" in r for r in plan["plausibility"]["outside_calibration"])


def test_published_mfu_table_is_up_to_date():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "published_mfu.py"
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0


def test_overlap_slowdown_charges_hidden_communication():
    """EfficiencySpec.comm_overlap_slowdown: hidden FSDP / data-parallel traffic slows the compute it
    overlaps; zero leaves the estimate as it was, and the breakdown still sums to the step."""
    from dataclasses import replace

    model, spec = load_model("llama3-70b"), load_cluster("dgx-h100", 64)
    job = make_job(global_batch_size=1024, seq_length=8192)
    c = resolve(
        model, spec, job, ParallelConfig(tp=1, pp=1, cp=2, optimizer_sharding="full", recompute="full")
    )

    def with_slowdown(k):
        gpu = spec.groups[0].gpu
        gpu = replace(gpu, efficiency=replace(gpu.efficiency, comm_overlap_slowdown=k))
        return replace(spec, groups=tuple(replace(g, gpu=gpu) for g in spec.groups))

    base, slow = estimate(model, with_slowdown(0.0), job, c), estimate(model, with_slowdown(0.2), job, c)
    assert slow.step_time_s > base.step_time_s
    assert math.isclose(sum(v for _, v in slow.time_breakdown()), slow.step_time_s, rel_tol=1e-9)
    fsdp = dict(slow.time_breakdown())["exposed FSDP / ZeRO-2 communication"]
    assert fsdp > dict(base.time_breakdown())["exposed FSDP / ZeRO-2 communication"]


def test_hsdp_gathers_inside_the_shard_group_and_all_reduces_across_replicas():
    """HSDP (shard 8 = one NVLink node, 64 replicas): per-layer gathers ride NVLink, so less FSDP
    communication is exposed than with 512-way sharding; the replicas' all-reduce of the gradient
    shard is charged once per iteration; states are 8-way sharded, so memory grows."""
    from cost_models.placement import group
    from planner.inputs.errors import ConfigError

    model, spec = load_model("llama3-70b"), load_cluster("dgx-h100", 64)
    job = make_job(global_batch_size=1024, seq_length=8192)
    base = dict(tp=1, pp=1, cp=2, optimizer_sharding="full", recompute="full")
    fsdp = estimate(model, spec, job, resolve(model, spec, job, ParallelConfig(**base)))
    c = resolve(model, spec, job, ParallelConfig(**base, fsdp_shard=8))
    assert c.fsdp_shard == 8 and group(c, "replicate").size == 64
    hsdp = estimate(model, spec, job, c)
    assert hsdp.stages[0].fsdp_exposed_s < fsdp.stages[0].fsdp_exposed_s
    assert hsdp.stages[0].memory.optimizer_bytes > 8 * fsdp.stages[0].memory.optimizer_bytes
    assert hsdp.stages[0].dp_comm_s > hsdp.stages[0].dp_comm_s - hsdp.stages[0].dp_exposed_s >= 0
    with pytest.raises(ConfigError, match="fsdp_shard"):
        resolve(
            model, spec, job, ParallelConfig(**{**base, "optimizer_sharding": "distributed"}, fsdp_shard=8)
        )
    with pytest.raises(ConfigError, match="fsdp_shard"):
        resolve(model, spec, job, ParallelConfig(**base, fsdp_shard=3))


def test_breakdown_itemises_the_busiest_stage_not_an_embedding_only_one(run_cli):
    """An embedding-only first stage ends last (it runs the last backward) but is almost idle: the
    terms are the busiest stage's, so compute, not a bubble, dominates; they still sum to the step."""
    import json

    args = "estimate -m llama3-8b -c dgx-h100 -n 1 -b 64 -s 4096 --tp 2 --pp 4 --layers-per-stage 0,11,11,10 --json"
    r = run_cli(*args.split())
    assert r.exit_code == 0, r.stderr
    t = json.loads(r.stdout)["time"]
    assert t["critical_stage"] == 0 and t["slowest_stage"] == 3
    busiest = t["per_stage"][3]
    assert t["compute_s"] > 0.9 * busiest["busy_s"] - t["tp_cp_ep_comm_s"]
    assert t["bubble_s"] < 0.1 * t["step_time_s"]
    keys = ("compute_s", "recompute_s", "tp_cp_ep_comm_s", "fsdp_exposed_s", "bubble_s", "dp_exposed_s")
    total = sum(t[k] for k in keys) + t["optimizer_s"] + t["param_gather_exposed_s"]
    assert total == pytest.approx(t["step_time_s"], rel=1e-3)


def test_fp8_mfu_labels_name_the_bf16_peak():
    """MFU is over the dense 16-bit peak for every precision (Estimate.mfu), so an FP8 job's can
    pass 100% (the GB300 FP8 class's best published run is above it): the estimate and search
    tables say which peak for FP8 jobs, and only for them."""
    from typer.testing import CliRunner

    from planner.cli import app

    def run(*extra):
        args = ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096", *extra]
        out = CliRunner().invoke(app, ["estimate", *args, "--tp", "1", "--pp", "1"])
        assert out.exit_code == 0, out.output
        found = CliRunner().invoke(app, ["search", *args, "--top", "1"])
        assert found.exit_code == 0, found.output
        return out.output, found.output

    est, found = run("--precision", "fp8")
    assert "MFU / HFU (of dense BF16 peak)" in est
    assert "of the dense BF16 peak, FP8 jobs included" in found
    est, found = run()
    assert "MFU / HFU" in est and "dense BF16 peak" not in est + found
