"""Fine-tuning jobs: LoRA on a frozen base and packed sequences (cost_models/finetune.py,
docs/finetune.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cost_models import finetune
from cost_models.flops import lora_flop_per_token, model_flop_per_iteration, model_flop_per_token
from cost_models.parallel import ParallelConfig
from cost_models.stage_terms import table_for
from planner import api
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import DTYPE_BYTES
from planner.inputs.jobs import job_from_mapping, make_job
from planner.plans.plan_file import job_to_mapping

# Llama 3 8B on one DGX H100, pipeline 4 (8 layers per stage), no recompute: the middle stages hold
# decoder layers only.
CONFIG = ParallelConfig(tp=1, pp=4, micro_batch_size=1, optimizer_sharding="distributed", schedule="1f1b")


def _problem(**job):
    return api.load_problem("llama3-8b", "dgx-h100", 1, 64, 4096, "bf16", **job)


def _pair(config=CONFIG, **lora):
    """(full, LoRA) problems and estimates of one configuration."""
    full = _problem()
    tuned = _problem(finetune="lora", **lora)
    return full, tuned, api.estimate_config(full, config), api.estimate_config(tuned, config)


def test_lora_memory_has_no_gradients_or_optimizer_state_of_frozen_weights():
    full, tuned, ef, el = _pair()
    node = full.cluster.groups[0]
    resolved = el.config
    adapters = finetune.adapter_terms(tuned.model, tuned.job, resolved, node).params
    assert adapters > 0
    for sf, sl in zip(ef.stages, el.stages):
        layers = sum(sl.layers)
        # gradients and optimizer state scale with the adapters' parameters only: the same bytes per
        # parameter as the full job's, over the adapters instead of every weight
        params_full = sf.memory.weights_bytes / 2  # 16-bit weights, unsharded (distributed optimizer)
        grad_per_param = sf.memory.gradients_bytes / params_full
        opt_per_param = sf.memory.optimizer_bytes / params_full
        assert grad_per_param == pytest.approx(DTYPE_BYTES[tuned.job.grad_dtype])
        assert sl.memory.gradients_bytes == pytest.approx(layers * adapters * grad_per_param)
        assert sl.memory.optimizer_bytes == pytest.approx(layers * adapters * opt_per_param)
        # the frozen weights stay, in 16 bits, beside the adapters' own
        assert sl.memory.weights_bytes == pytest.approx(sf.memory.weights_bytes + 2 * layers * adapters)
        assert sl.memory.gradients_bytes < 0.002 * sf.memory.gradients_bytes  # 0.1% of the weights


def test_frozen_fp8_weights_take_one_byte():
    base = api.load_problem("llama3-8b", "dgx-h100", 1, 64, 4096, "fp8", finetune="lora")
    fp8 = api.load_problem(
        "llama3-8b", "dgx-h100", 1, 64, 4096, "fp8", finetune="lora", frozen_weight_dtype="fp8"
    )
    node = base.cluster.groups[0]
    layer16 = table_for(base.model, base.job, CONFIG, node).dense
    layer8 = table_for(fp8.model, fp8.job, CONFIG, node).dense
    m = base.model
    gemm_weights = m.attention_params() + (3 if m.gated else 2) * m.hidden_size * m.ffn_hidden_size
    assert layer16.frozen_weight_bytes - layer8.frozen_weight_bytes == pytest.approx(gemm_weights, rel=1e-3)


def test_frozen_weight_gradients_are_absent_from_the_timeline():
    full, tuned, ef, el = _pair()
    node = full.cluster.groups[0]
    resolved = el.config
    f = table_for(full.model, full.job, resolved, node).dense
    lo = table_for(tuned.model, tuned.job, resolved, node).dense
    a = finetune.adapter_terms(tuned.model, tuned.job, resolved, node)
    # per layer: the frozen layer's backward is the full layer's input-gradient work plus the
    # adapters' own three GEMMs and elementwise work; its weight-gradient pass is the adapters' alone
    assert lo.backward_weight_s == pytest.approx(a.gemm.weight_grad_s)
    assert lo.backward_input_s == pytest.approx(f.backward_input_s + a.gemm.input_grad_s + a.backward_elem_s)
    assert lo.backward_weight_s < 0.05 * f.backward_weight_s
    m = el.num_microbatches
    for r in (1, 2):  # middle stages: decoder layers only
        n = sum(el.stages[r].layers)
        expected = n * (lo.backward_input_s + lo.backward_comm_s + lo.backward_weight_s)
        assert el.stages[r].backward_s == pytest.approx(expected)
        # the timeline runs exactly these passes: busy = m x (F + B) on a middle stage
        busy = m * (el.stages[r].forward_s + el.stages[r].backward_s)
        assert el.timeline.busy_s(r) == pytest.approx(busy)
        # and the full job's weight-gradient work is what went missing
        missing = ef.stages[r].backward_s - el.stages[r].backward_s
        assert missing == pytest.approx(
            n * (f.backward_weight_s - lo.backward_weight_s - a.gemm.input_grad_s - a.backward_elem_s)
        )
    assert el.step_time_s < ef.step_time_s


def test_frozen_inputs_are_not_kept_but_the_adapters_are():
    full, tuned, _, _ = _pair()
    node = full.cluster.groups[0]
    f = table_for(full.model, full.job, CONFIG, node).dense
    lo = table_for(tuned.model, tuned.job, CONFIG, node).dense
    a = finetune.adapter_terms(tuned.model, tuned.job, CONFIG, node)
    T, h = 4096, tuned.model.hidden_size
    # bf16, tp 1: the inputs of linear_qkv, linear_fc1 (norm outputs) and linear_fc2 go; the
    # attention adapters keep linear_qkv's input and two r-wide intermediates
    dropped = 2 * 2 * T * h + 2 * T * tuned.model.ffn_hidden_size
    assert finetune.frozen_kept_bytes(tuned.model, tuned.job, CONFIG) == dropped
    assert a.kept_bytes == 2 * T * h + 2 * 2 * T * 16
    assert lo.activation_bytes == pytest.approx(f.activation_bytes - dropped + a.kept_bytes)
    assert lo.weight_grad_bytes == a.kept_bytes


def test_adapter_gemms_are_priced_by_size_curve_and_roofline():
    from cost_models.compute import gemm_efficiency, gemm_s

    p = _problem(finetune="lora")
    gpu = p.cluster.groups[0].gpu
    # A of linear_qkv on Llama 3 8B: 4096 tokens x 4096 -> 16
    flop = 2 * 4096 * 16 * 4096
    compute = flop / (gpu.peak("bf16") * gemm_efficiency(flop, gpu))
    traffic = (4096 * 4096 + 4096 * 16 + 4096 * 16) * 2
    memory = traffic / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm_efficiency)
    t = finetune.adapter_gemm_s(4096, 16, 4096, gpu, "bf16")
    assert t == pytest.approx(max(compute, memory))
    assert memory > 0.5 * t  # close to the HBM roofline: about 16 FLOPs per byte
    # the large-GEMM tile quantization would issue a 16-wide output's work eight times over, in
    # 16 tiles of one wave on 132 SMs
    assert gemm_s(4096, 16, 4096, gpu, "bf16") > 2 * t
    # a long-K weight gradient (16 x 4096, reducing 4096 tokens) the same way
    assert finetune.adapter_gemm_s(4096, 16, 4096, gpu, "bf16") == finetune.adapter_gemm_s(
        16, 4096, 4096, gpu, "bf16"
    )


def test_lora_model_flops_follow_megatron_bridge():
    """Megatron-Bridge's LoRA count (flop_utils.py, transformer_flops) per token of a Llama without
    packing: frozen ``L h^2 (12 + 12 g/a + 18 f/h + 6 V/(L h)) x 2/3`` plus attention ``12 L h s``;
    planner adds the adapters' three passes."""
    p = _problem(finetune="lora")
    m, s = p.model, 4096
    L, h, f, V = m.num_layers, m.hidden_size, m.ffn_hidden_size, m.vocab_size
    g, a = m.num_query_groups, m.num_attention_heads
    bridge = L * h * h * (12 + 12 * g / a + 18 * f / h + 6 * V / (L * h)) * 2 / 3 + 12 * L * h * s
    adapters = 3 * L * 2 * (h * 16 + 16 * (h + 2 * g * m.kv_channels) + h * 16 + 16 * h)
    assert lora_flop_per_token(m, p.job) == pytest.approx(bridge + adapters, rel=1e-12)
    assert model_flop_per_iteration(m, p.job) == pytest.approx((bridge + adapters) * 64 * s, rel=1e-12)


def test_packed_sequences_price_attention_within_documents():
    full, packed = _problem(), _problem(packed_avg_doc_len=512)
    node = full.cluster.groups[0]
    f = table_for(full.model, full.job, CONFIG, node).dense
    pk = table_for(packed.model, packed.job, CONFIG, node).dense
    assert pk.forward_s < f.forward_s and pk.backward_input_s < f.backward_input_s
    assert pk.backward_weight_s == f.backward_weight_s  # GEMMs unchanged
    assert pk.activation_bytes == f.activation_bytes
    m = full.model
    core = 4 * m.query_projection_size  # per key per token, non-causal convention
    assert model_flop_per_token(m, 4096) - model_flop_per_token(m, 512) == pytest.approx(
        m.num_layers * core * (4096 - 512)
    )
    assert model_flop_per_iteration(m, packed.job) < model_flop_per_iteration(m, full.job)


def test_full_finetune_is_the_pretraining_job(run_cli):
    base = ["estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096", "--pp", "4"]
    plain = run_cli(*base, "--json")
    explicit = run_cli(*base, "--finetune", "full", "--json")
    assert plain.exit_code == explicit.exit_code == 0
    assert plain.stdout == explicit.stdout
    assert "finetune" not in plain.stdout and "lora" not in plain.stdout
    assert not set(job_to_mapping(make_job(global_batch_size=8, seq_length=128))) & {
        "finetune",
        "lora_rank",
        "lora_targets",
        "frozen_weight_dtype",
        "packed_avg_doc_len",
    }


@pytest.mark.parametrize(
    ("flags", "code", "needle"),
    [
        (["--finetune", "qlora"], 2, "allowed values: full, lora"),
        (["--lora-rank", "8"], 2, "--lora-rank needs --finetune lora"),
        (["--finetune", "lora", "--lora-targets", "linear_q"], 2, "allowed values: attention, mlp, all"),
        (["--finetune", "lora", "--lora-rank", "0"], 2, "--lora-rank"),
        (["--finetune", "lora", "--frozen-weight-dtype", "int4"], 2, "allowed values: bf16, fp8"),
        (["--finetune", "lora", "--frozen-weight-dtype", "fp8"], 2, "needs --precision fp8"),
        (["--finetune", "lora", "--lora-rank", "7", "--tp", "2"], 1, "divisible by tp"),
        (["--finetune", "lora", "--optimizer-sharding", "full"], 1, "optimizer sharding none or distributed"),
        (["--packed-avg-doc-len", "8192"], 1, "exceeds seq_length 4096"),
    ],
)
def test_bad_values_give_one_line_errors(run_cli, flags, code, needle):
    res = run_cli(
        "estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096", *flags
    )
    assert res.exit_code == code
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1 and not res.stdout


def test_lora_on_models_it_does_not_price_is_refused(run_cli):
    res = run_cli("estimate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096",
                  "--ep", "8", "--finetune", "lora")  # fmt: skip
    assert res.exit_code == 1 and "MoE layers" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("finetune", "qlora", "allowed values: full, lora"),
        ("lora_targets", ["linear_qkv", "q_proj"], "'q_proj' is not allowed"),
        ("lora_rank", True, "expected an integer, got a boolean"),
        ("packed_avg_doc_len", -1, "packed_avg_doc_len"),
    ],
)
def test_bad_plan_file_job_values(key, value, needle):
    data = {"global_batch_size": 8, "seq_length": 128, "finetune": "lora", key: value}
    with pytest.raises(SpecError, match=needle) as err:
        job_from_mapping(data, "plan.yaml")
    assert "\n" not in str(err.value)
    with pytest.raises(SpecError, match="needs finetune lora"):
        job_from_mapping({"global_batch_size": 8, "seq_length": 128, "lora_rank": 8}, "plan.yaml")


def test_plan_file_round_trip(tmp_path, run_cli):
    path = tmp_path / "plan.yaml"
    res = run_cli(
        "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096", "--precision", "fp8",
        "--finetune", "lora", "--lora-rank", "32", "--lora-targets", "attention,linear_fc2",
        "--frozen-weight-dtype", "fp8", "--packed-avg-doc-len", "1024", "--top", "1", "--out", str(path),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    text = path.read_text()
    assert "finetune: lora" in text and "packed_avg_doc_len: 1024" in text
    problem, est = api.estimate_plan_file(str(path))
    job = problem.job
    assert (
        job.finetune,
        job.lora_rank,
        job.lora_targets,
        job.frozen_weight_dtype,
        job.packed_avg_doc_len,
    ) == (
        "lora",
        32,
        ("linear_qkv", "linear_proj", "linear_fc2"),
        "fp8",
        1024,
    )
    again = run_cli("estimate", str(path), "--json")
    assert again.exit_code == 0
    data = json.loads(again.stdout)
    assert data["job"]["lora_targets"] == ["linear_qkv", "linear_proj", "linear_fc2"]
    assert data["step_time_s"] == pytest.approx(est.step_time_s, rel=1e-3)
    # an older plan file (no fine-tuning keys) reads as a pre-training job
    old = make_job(global_batch_size=64, seq_length=4096)
    assert job_from_mapping(job_to_mapping(old), "old.yaml") == old
    # exports refuse LoRA plans in one line
    for target in ("megatron", "torchtitan"):
        out = run_cli("export", target, str(path), "--out", str(tmp_path / target))
        assert out.exit_code == 1 and "LoRA" in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert not (tmp_path / target).exists()


def test_torchtitan_searches_no_lora(run_cli):
    res = run_cli("search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "64", "-s", "4096",
                  "--framework", "torchtitan", "--finetune", "lora")  # fmt: skip
    assert res.exit_code == 3


def test_lora_ranks_do_not_change_frozen_work():
    small, big = _problem(finetune="lora", lora_rank=8), _problem(finetune="lora", lora_rank=64)
    node = small.cluster.groups[0]
    a8 = finetune.adapter_terms(small.model, small.job, CONFIG, node)
    a64 = finetune.adapter_terms(big.model, big.job, CONFIG, node)
    assert a64.params == pytest.approx(8 * a8.params)
    s, b = (table_for(p.model, p.job, CONFIG, node).dense for p in (small, big))
    assert s.frozen_weight_bytes == b.frozen_weight_bytes
    assert b.forward_s - a64.gemm.forward_s - a64.forward_elem_s == pytest.approx(
        s.forward_s - a8.gemm.forward_s - a8.forward_elem_s
    )
    assert replace(s, frozen_weight_bytes=0.0).params == pytest.approx(a8.params)


def test_published_finetune_runs_are_predicted_held_out():
    """The Megatron-Bridge 26.06 SFT and LoRA rows (tests/data/published_finetune_runs.yaml), which
    no fit reads: the LoRA median within the pre-training held-out median (5.5%, docs/calibration.md)
    plus 3 points, every run within 20%, under whole-sequence attention and under short documents."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "validate_finetune.py"
    spec = importlib.util.spec_from_file_location("validate_finetune", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    software, runs = module.load_runs(module.RUNS)
    assert len(runs) == 10 and software == "megatron-bridge-26.06"
    for doc in (None, 128):
        rows = [module.predict(r, software, doc) for r in runs]
        lora = module.summary([r for r in rows if r["kind"] == "lora"])
        assert lora["count"] == 5 and lora["median_abs_error"] < 0.055 + 0.03
        assert max(abs(r["error"]) for r in rows) < 0.20
