"""Eager versus fused elementwise kernels (JobSpec.eager_ops, cost_models.elementwise): the eager
layer moves exactly the bytes derived from torchtitan's and PyTorch's code more than the fused one,
the calibration parser sets the groups from each run's record, and the setting travels through the
CLI, plan files and torchtitan export/import unchanged."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

from cost_models import elementwise as ew
from cost_models.compute import memory_bound_s
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.layers import layer_table
from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import EAGER_OPS
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

# Llama 3 8B: h 4096, Q width 4096, K width 1024 (8 groups x 128), FFN 14336 (SwiGLU).
H, Q, KV, F = 4096, 4096, 1024, 14336
FWD_PER_TOKEN = 2 * H * (36 - 4) + (Q + KV) * (20 - 4) + F * (10 - 6)
"""Bytes per token a layer's eager forward adds: two RMSNorms, RoPE on Q and K, SwiGLU (= 401,408)."""
BWD_PER_TOKEN = 2 * H * (92 - 8) + (Q + KV) * (20 - 8) + F * (18 - 12)
"""Bytes per token a layer's eager backward adds (= 835,584)."""


def _layers(eager_ops, tp=1, mbs=2, model="llama3-8b", seq=8192):
    m, cluster = load_model(model), load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=16, seq_length=seq, eager_ops=eager_ops)
    c = resolve(m, cluster, job, ParallelConfig(tp=tp, micro_batch_size=mbs, optimizer_sharding="full"))
    return layer_table(m, job, c, cluster.groups[0]), cluster.groups[0].gpu, c


def test_unit_byte_counts_are_the_derived_ones():
    # Per element, 16-bit in and out; the docstrings of cost_models.elementwise derive each number.
    assert ew.norm("rmsnorm", True) == ew.Passes(36.0, 92.0)
    assert ew.norm("layernorm", True) == ew.norm("layernorm", False) == ew.Passes(4.0, 8.0)
    assert ew.rope(True) == ew.Passes(20.0, 20.0) and ew.rope(False) == ew.Passes(4.0, 8.0)
    assert ew.activation("swiglu", True) == ew.Passes(10.0, 18.0)
    assert ew.activation("swiglu", False) == ew.Passes(6.0, 12.0)
    assert ew.activation("gelu", True) == ew.activation("gelu", False) == ew.Passes(4.0, 8.0)
    assert ew.activation("squared_relu", True) == ew.Passes(8.0, 20.0)
    assert FWD_PER_TOKEN == 401_408 and BWD_PER_TOKEN == 835_584


def test_eager_layer_is_slower_by_exactly_the_derived_bytes():
    fused, gpu, c = _layers(())
    eager, _, _ = _layers(EAGER_OPS)
    T = c.micro_batch_size * 8192
    assert math.isclose(
        eager.dense.forward_s - fused.dense.forward_s, memory_bound_s(T * FWD_PER_TOKEN, gpu), rel_tol=1e-9
    )
    assert math.isclose(
        eager.dense.backward_input_s - fused.dense.backward_input_s,
        memory_bound_s(T * BWD_PER_TOKEN, gpu),
        rel_tol=1e-9,
    )
    # Nothing else moves: GEMMs of the weight gradient, communication, memory, FLOPs.
    for name in ("backward_weight_s", "forward_comm_s", "activation_bytes", "model_flop", "params_sharded"):
        assert getattr(eager.dense, name) == getattr(fused.dense, name)
    # The final norm of the output layer: one more RMSNorm.
    assert math.isclose(
        eager.output.forward_s - fused.output.forward_s, memory_bound_s(T * H * 32, gpu), rel_tol=1e-9
    )


def test_tensor_parallel_shards_the_eager_bytes():
    # tp 4 with sequence parallelism: norms on T/4 tokens, RoPE on Q/4 and K/4, FFN on F/4.
    fused, gpu, c = _layers((), tp=4)
    eager, _, _ = _layers(EAGER_OPS, tp=4)
    T = c.micro_batch_size * 8192
    assert c.sp
    expected = T * (FWD_PER_TOKEN / 4)
    assert math.isclose(
        eager.dense.forward_s - fused.dense.forward_s, memory_bound_s(expected, gpu), rel_tol=1e-9
    )


def test_groups_add_up_and_each_costs_its_own_bytes():
    fused, gpu, c = _layers(())
    T = c.micro_batch_size * 8192
    per_group = {
        "norm": 2 * H * 32,
        "rope": (Q + KV) * 16,
        "activation": F * 4,
    }
    for op, per_token in per_group.items():
        one, _, _ = _layers((op,))
        assert math.isclose(
            one.dense.forward_s - fused.dense.forward_s, memory_bound_s(T * per_token, gpu), rel_tol=1e-9
        )


def test_layernorm_gelu_model_costs_the_same_eager():
    # MPT-like GPT (LayerNorm, GELU, learned positions): F.layer_norm and F.gelu are one kernel each.
    fused, _, _ = _layers((), model="gpt-7.5b", seq=2048)
    eager, _, _ = _layers(EAGER_OPS, model="gpt-7.5b", seq=2048)
    assert eager.dense == fused.dense and eager.output == fused.output


def test_moe_experts_pay_the_eager_activation():
    fused, _, _ = _layers((), model="mixtral-8x7b")
    eager, _, _ = _layers(("activation",), model="mixtral-8x7b")
    assert (
        eager.moe.forward_s > fused.moe.forward_s and eager.moe.backward_input_s > fused.moe.backward_input_s
    )


def test_estimate_eager_is_slower_and_recompute_repeats_it():
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    steps = {}
    for ops in ((), EAGER_OPS):
        job = make_job(global_batch_size=16, seq_length=8192, eager_ops=ops)
        for rec in ("none", "full"):
            c = resolve(
                m, cluster, job, ParallelConfig(micro_batch_size=2, optimizer_sharding="full", recompute=rec)
            )
            steps[ops, rec] = estimate(m, cluster, job, c).step_time_s
    assert steps[EAGER_OPS, "none"] > steps[(), "none"]
    # Full recompute re-runs the eager forward too.
    assert steps[EAGER_OPS, "full"] - steps[(), "full"] > steps[EAGER_OPS, "none"] - steps[(), "none"]


def test_job_validation_names_the_key():
    assert make_job(global_batch_size=8, seq_length=8, eager_ops=["activation", "norm"]).eager_ops == (
        "norm",
        "activation",
    )
    with pytest.raises(SpecError, match="'fuse' is not allowed; allowed values: norm, rope, activation"):
        make_job(global_batch_size=8, seq_length=8, eager_ops=["fuse"])
    data = {"global_batch_size": 8, "seq_length": 8, "eager_ops": "rope"}
    with pytest.raises(SpecError, match="plan.yaml: key 'job.eager_ops': expected a list"):
        job_from_mapping(data, "plan.yaml")
    with pytest.raises(SpecError, match="listed twice"):
        job_from_mapping({**data, "eager_ops": ["rope", "rope"]}, "plan.yaml")
    assert job_from_mapping({"global_batch_size": 8, "seq_length": 8}, "old.yaml").eager_ops == ()


# --- calibration cases -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def by_id():
    from planner.calibration.cases import cases

    return {c.run_id: c for c in cases()}


def test_calibration_parser_sets_eager_from_the_record(by_id):
    all_eager = ("norm", "rope", "activation")
    for table in ("t1", "t3"):
        eager = by_id[f"torchtitan_h100_202412_llama3.1_8b_{table}_fsdp"]
        compiled = by_id[f"torchtitan_h100_202412_llama3.1_8b_{table}_fsdp_compile"]
        assert eager.job.eager_ops == all_eager and compiled.job.eager_ops == ()
        assert any("eager PyTorch" in n for n in eager.assumptions)
        assert any("torch.compile" in n for n in compiled.assumptions)
    # Async TP needs torch.compile: the asyncTP benchmark is compiled.
    assert by_id["torchtitan_h100_202506_asynctp_bench_llama3_8b_64gpu_bf16_vanilla_tp"].job.eager_ops == ()
    # docs/performance.md (A100, no compile): the 8B and 13B presets ran the fused_rmsnorm kernel.
    assert by_id["torchtitan_a100_llama_3_8b_bs1_selective_op"].job.eager_ops == ("rope", "activation")
    assert by_id["torchtitan_a100_llama_2_70b_bs2_full"].job.eager_ops == all_eager
    assert by_id["llmfoundry_mpt7b_h100_8gpu_gbs48_noac"].job.eager_ops == all_eager
    assert by_id["megatronlm_readme_h100_70B"].job.eager_ops == ()
    assert by_id["narayanan2021_t1_gpt1.7b"].job.eager_ops == ()


def test_compiled_and_eager_rows_now_predict_differently(by_id):
    eager = by_id["torchtitan_h100_202412_llama3.1_8b_t1_fsdp"]
    compiled = by_id["torchtitan_h100_202412_llama3.1_8b_t1_fsdp_compile"]
    assert eager.config == compiled.config and eager.cluster == compiled.cluster
    slow = estimate(eager.model, eager.cluster, eager.job, eager.config).tokens_per_s_per_gpu
    fast = estimate(compiled.model, compiled.cluster, compiled.job, compiled.config).tokens_per_s_per_gpu
    assert slow < fast


# --- CLI, plan files, export/import ------------------------------------------------------------

SEARCH = ("search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "8192")


def test_cli_estimate_flag_and_errors(run_cli):
    args = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "16", "-s", "8192", "--json")
    fused = json.loads(run_cli(*args).stdout)
    eager = json.loads(run_cli(*args, "--eager-ops", "activation,rope").stdout)
    assert fused["job"]["eager_ops"] == [] and eager["job"]["eager_ops"] == ["rope", "activation"]
    assert eager["step_time_s"] > fused["step_time_s"]
    for bad, why in (("fused", "allowed values: norm, rope, activation"), ("rope,rope", "listed twice")):
        res = run_cli(*args, "--eager-ops", bad)
        assert res.exit_code == 2 and why in res.stderr and "Traceback" not in res.stderr
    res = run_cli(*SEARCH, "--framework", "megatron", "--eager-ops", "rope", "--quiet")
    assert (
        res.exit_code == 2 and "--eager-ops rope" in res.stderr and "every elementwise op fused" in res.stderr
    )


def test_plan_file_and_torchtitan_round_trip(run_cli, tmp_path):
    from planner.launch.megatron.export_args import megatron_args
    from planner.launch.torchtitan import export as tx
    from planner.launch.torchtitan.importer import read_torchtitan
    from planner.plans.plan_file import read_plan

    pytest.importorskip("tomllib")
    for ops, compiled in (("", True), ("rope,activation", False)):
        plan = tmp_path / f"plan{int(compiled)}.yaml"
        extra = ("--eager-ops", ops) if ops else ()
        res = run_cli(*SEARCH, "--framework", "torchtitan", *extra, "--quiet", "--out", str(plan))
        assert res.exit_code == 0, res.stderr
        job = yaml.safe_load(plan.read_text())["job"]
        # Fused plans carry no key (plans written before it read the same); eager ones list the groups.
        assert ("eager_ops" in job) is (not compiled)
        inputs = read_plan(str(plan))
        assert inputs.job.eager_ops == (() if compiled else ("rope", "activation"))
        est = json.loads(run_cli("estimate", "--plan", str(plan), "--json").stdout)
        assert est["job"]["eager_ops"] == list(inputs.job.eager_ops)
        out = tmp_path / f"export{int(compiled)}"
        out.mkdir()
        for name, text in tx.export_files(inputs, "torchrun").items():
            (out / name).write_text(text)
        toml = (out / tx.CONFIG_FILE).read_text()
        assert f"[compile]\nenable = {'true' if compiled else 'false'}\n" in toml
        assert "compile" not in (out / tx.OVERRIDES_FILE).read_text()  # booleans stay in the TOML
        back = read_torchtitan(out / tx.CONFIG_FILE, inputs.cluster.num_gpus)
        assert back.job.eager_ops == inputs.job.eager_ops
        if not compiled:
            # Megatron runs fused kernels only: its export refuses the eager job.
            with pytest.raises(SpecError, match="every elementwise op fused"):
                megatron_args(dataclasses.replace(inputs, framework="megatron"))
    res = run_cli("estimate", "--plan", str(tmp_path / "plan1.yaml"), "--eager-ops", "rope")
    assert res.exit_code == 2 and "--plan" in res.stderr


def test_torchtitan_refuses_a_set_it_cannot_run(run_cli):
    res = run_cli(*SEARCH, "--framework", "torchtitan", "--eager-ops", "norm", "--quiet")
    assert res.exit_code == 2 and "rope,activation eager" in res.stderr and "Traceback" not in res.stderr
