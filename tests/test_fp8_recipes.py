"""FP8 scaling recipes (JobSpec.fp8_recipe): the quantization bytes each recipe moves, MXFP8 only on
Blackwell, plan files (old FP8 plans read as delayed scaling), the Megatron export and import
(``--fp8-recipe`` / ``--fp8-format``), torchtitan's single recipe, the CLI, and the calibration runs'
recipes."""

from __future__ import annotations

import json

import pytest

from cost_models.compute import (
    FP8_CAST_BYTES,
    fp8_cast_bytes,
    gemm_s,
    linear_s,
    memory_bound_s,
)
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.calibration.cases import cases
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import FP8_RECIPES
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.inputs.validation import require_precision
from planner.launch.megatron.export import export_files
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.launch.torchtitan.importer import parse_torchtitan
from planner.plans.plan_file import PlanInputs, job_to_mapping
from planner.profiles.hardware import load_cluster, load_gpu


def test_bytes_per_recipe():
    """Delayed: read 2, write the row-wise and transposed copies (4), 2 behind a fused norm;
    tensorwise: one more read for the amax (6), and no norm fusion; block-scaled: the cast plus one
    scale per 128 (FP32) or 32 (E8M0) elements of each copy, and no norm fusion either."""
    assert fp8_cast_bytes("delayed") == FP8_CAST_BYTES == 4.0
    assert fp8_cast_bytes("delayed", behind_norm=True) == 2.0
    assert fp8_cast_bytes("tensorwise") == fp8_cast_bytes("tensorwise", behind_norm=True) == 6.0
    assert fp8_cast_bytes("blockwise") == fp8_cast_bytes("blockwise", behind_norm=True) == 4.0 + 2 * 4 / 128
    assert fp8_cast_bytes("mxfp8") == fp8_cast_bytes("mxfp8", behind_norm=True) == 4.0 + 2 * 1 / 32


@pytest.mark.parametrize("recipe", FP8_RECIPES)
def test_a_linear_pays_its_recipes_casts(recipe):
    gpu = load_gpu("b200")
    T, n, k = 8192, 14336, 4096
    times = linear_s(T, n, k, gpu, "fp8", recipe=recipe, behind_norm=True)
    assert times.forward_s - gemm_s(T, n, k, gpu, "fp8") == pytest.approx(
        memory_bound_s(T * k * fp8_cast_bytes(recipe, True), gpu), rel=1e-9
    )
    assert times.input_grad_s - gemm_s(T, k, n, gpu, "fp8") == pytest.approx(
        memory_bound_s(T * n * fp8_cast_bytes(recipe), gpu), rel=1e-9
    )


def test_step_time_orders_the_recipes_by_their_traffic():
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-b200", 1)
    c = resolve(
        m, cluster, make_job(global_batch_size=32, seq_length=4096, precision="fp8"), ParallelConfig()
    )
    step = {
        r: estimate(
            m, cluster, make_job(global_batch_size=32, seq_length=4096, precision="fp8", fp8_recipe=r), c
        ).step_time_s
        for r in FP8_RECIPES
    }
    assert step["blockwise"] == pytest.approx(step["mxfp8"], rel=1e-12)
    assert step["delayed"] < step["mxfp8"] < step["tensorwise"]
    bf16 = estimate(m, cluster, make_job(global_batch_size=32, seq_length=4096), c).step_time_s
    assert max(step.values()) < bf16


def test_job_validation():
    assert make_job(global_batch_size=8, seq_length=4096, precision="fp8").fp8_recipe == "tensorwise"
    with pytest.raises(SpecError, match="fp8_recipe 'nvfp4' is not allowed; allowed values: tensorwise"):
        make_job(global_batch_size=8, seq_length=4096, precision="fp8", fp8_recipe="nvfp4")
    with pytest.raises(SpecError, match="needs precision fp8"):
        make_job(global_batch_size=8, seq_length=4096, fp8_recipe="delayed")


def test_mxfp8_runs_on_blackwell_only():
    job = make_job(global_batch_size=8, seq_length=4096, precision="fp8", fp8_recipe="mxfp8")
    require_precision(load_cluster("dgx-b200", 1), job, "--precision")
    with pytest.raises(SpecError, match="h100-sxm5-80gb has no MXFP8"):
        require_precision(load_cluster("dgx-h100", 1), job, "--precision")


def test_plan_files_carry_the_recipe_and_old_fp8_plans_read_as_delayed():
    bf16 = make_job(global_batch_size=8, seq_length=4096)
    assert "fp8_recipe" not in job_to_mapping(bf16)
    for recipe in FP8_RECIPES:
        job = make_job(global_batch_size=8, seq_length=4096, precision="fp8", fp8_recipe=recipe)
        assert job_to_mapping(job)["fp8_recipe"] == recipe
        assert job_from_mapping(job_to_mapping(job), "plan.yaml") == job
    old = {
        k: v
        for k, v in job_to_mapping(make_job(global_batch_size=8, seq_length=4096, precision="fp8")).items()
    }
    del old["fp8_recipe"]
    assert job_from_mapping(old, "plan.yaml").fp8_recipe == "delayed"
    with pytest.raises(SpecError, match="fp8_recipe"):
        job_from_mapping({**old, "fp8_recipe": "fp4"}, "plan.yaml")
    with pytest.raises(SpecError, match="needs precision fp8"):
        job_from_mapping({**job_to_mapping(bf16), "fp8_recipe": "delayed"}, "plan.yaml")


@pytest.mark.parametrize(
    "recipe, fmt", [("tensorwise", "hybrid"), ("delayed", "hybrid"), ("blockwise", "e4m3"), ("mxfp8", "e4m3")]
)
def test_megatron_export_and_import(recipe, fmt):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-b200", 1)
    job = make_job(global_batch_size=32, seq_length=4096, precision="fp8", fp8_recipe=recipe)
    c = resolve(m, cluster, job, ParallelConfig(tp=2, micro_batch_size=1, optimizer_sharding="distributed"))
    plan = PlanInputs(m, cluster, job, c)
    args = dict(megatron_args(plan))
    assert (args["--fp8-format"], args["--fp8-recipe"]) == (fmt, recipe)
    parsed = parse_megatron(export_files(plan, "torchrun")["megatron_args.txt"], "args.txt", cluster.num_gpus)
    assert parsed.unknown == ()
    assert parsed.job.fp8_recipe == recipe
    assert estimate(m, cluster, parsed.job, c).step_time_s == pytest.approx(
        estimate(m, cluster, job, c).step_time_s, rel=1e-12
    )


def test_megatron_import_defaults_to_delayed_and_refuses_custom():
    base = (
        "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 32 "
        "--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 128256 --fp8-format hybrid"
    )
    assert parse_megatron(base, "args.txt", 8).job.fp8_recipe == "delayed"  # Megatron-Core's default
    with pytest.raises(SpecError, match="--fp8-recipe 'custom': planner prices tensorwise"):
        parse_megatron(base + " --fp8-recipe custom", "args.txt", 8)


def test_torchtitan_runs_the_tensorwise_recipe_only():
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    titan = get_framework("torchtitan")
    c = ParallelConfig(tp=1, pp=1, dp=8, optimizer_sharding="full")
    tensorwise = make_job(global_batch_size=8, seq_length=4096, precision="fp8")
    delayed = make_job(global_batch_size=8, seq_length=4096, precision="fp8", fp8_recipe="delayed")
    assert not any("recipe" in r for r in titan.violations(m, cluster, tensorwise, c))
    assert any(
        "no 'delayed' FP8 recipe (it runs tensorwise)" in r for r in titan.violations(m, cluster, delayed, c)
    )
    assert get_framework("megatron").violations(m, cluster, delayed, c) == []
    from planner.launch.torchtitan.export import require_exportable

    with pytest.raises(SpecError, match="cannot export to torchtitan: .*no 'delayed' FP8 recipe"):
        require_exportable(PlanInputs(m, cluster, delayed, resolve(m, cluster, delayed, c)))
    toml = (
        '[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["quantize.linear.float8"]\n'
        "[training]\nlocal_batch_size = 1\nseq_len = 4096\n"
    )
    assert parse_torchtitan(toml, "j.toml", 8).job.fp8_recipe == "tensorwise"
    with pytest.raises(
        SpecError, match="quantize.linear.float8.recipe_name': planner prices torchao's tensorwise"
    ):
        parse_torchtitan(toml + '[quantize.linear.float8]\nrecipe_name = "rowwise"\n', "j.toml", 8)


def test_cli(run_cli, tmp_path):
    base = ["-m", "llama3-8b", "-c", "dgx-b200", "-n", "1", "--global-batch-size", "32", "--seq-len", "4096"]
    layout = ["--tp", "1", "--pp", "1", "--micro-batch-size", "1", "--optimizer-sharding", "distributed"]
    out = {}
    for recipe in ("tensorwise", "mxfp8"):
        res = run_cli("estimate", *base, *layout, "--precision", "fp8", "--fp8-recipe", recipe, "--json")
        assert res.exit_code == 0, res.stderr
        out[recipe] = json.loads(res.stdout)
        assert out[recipe]["job"]["fp8_recipe"] == recipe
    assert out["mxfp8"]["step_time_s"] < out["tensorwise"]["step_time_s"]
    assert "FP8 recipe" in run_cli("estimate", *base, *layout, "--precision", "fp8").stdout
    assert json.loads(run_cli("estimate", *base, *layout, "--json").stdout)["job"]["fp8_recipe"] is None
    bad = run_cli("estimate", *base, *layout, "--precision", "fp8", "--fp8-recipe", "fp4")
    assert bad.exit_code == 2 and "allowed values: tensorwise, delayed, blockwise, mxfp8" in bad.stderr
    no_fp8 = run_cli("estimate", *base, *layout, "--fp8-recipe", "delayed")
    assert no_fp8.exit_code == 2 and "needs --precision fp8" in no_fp8.stderr
    hopper = [*base[:3], "dgx-h100", *base[4:]]
    mx = run_cli("estimate", *hopper, *layout, "--precision", "fp8", "--fp8-recipe", "mxfp8")
    assert mx.exit_code == 1 and "has no MXFP8" in mx.stderr and "Traceback" not in mx.stderr
    plan = tmp_path / "plan.yaml"
    res = run_cli(
        "search", *base, "--framework", "megatron", "--precision", "fp8", "--fp8-recipe", "mxfp8",
        "--top", "1", "--tp", "1,2", "--pp", "1", "--out", str(plan), "--json", "--quiet",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert (
        json.loads(run_cli("estimate", "--plan", str(plan), "--json").stdout)["job"]["fp8_recipe"] == "mxfp8"
    )
    both = run_cli("estimate", "--plan", str(plan), "--fp8-recipe", "delayed")
    assert both.exit_code == 2 and "--plan" in both.stderr
    refused = run_cli(
        "search", *base, "--framework", "torchtitan", "--precision", "fp8", "--fp8-recipe", "delayed"
    )
    assert refused.exit_code == 3 and "no 'delayed' FP8 recipe" in refused.stderr
    sweep = run_cli("sweep", "-m", "llama3-8b", "-c", "dgx-b200", "-n", "1", "--global-batch-size", "32",
                    "--seq-len", "4096", "--fp8-recipe", "mxfp8")  # fmt: skip
    assert sweep.exit_code == 2 and "needs --precision fp8" in sweep.stderr
    points = {}
    for recipe in ("tensorwise", "mxfp8"):
        res = run_cli("sweep", "-m", "llama3-8b", "-c", "dgx-b200", "-n", "1", "--global-batch-size", "32",
                      "--seq-len", "4096", "--precision", "fp8", "--fp8-recipe", recipe, "-j", "1", "--json")  # fmt: skip
        assert res.exit_code == 0, res.stderr
        points[recipe] = json.loads(res.stdout)["points"][0]["tokens_per_s_per_gpu"]
    assert points["mxfp8"] > points["tensorwise"]  # the sweep's searches priced the recipe


def test_calibration_runs_carry_their_sources_recipe():
    recipes = {c.run_id: c.job.fp8_recipe for c in cases() if c.job is not None and c.job.precision == "fp8"}
    assert {recipes[i] for i in recipes if i.startswith("nemo2407_")} == {"delayed"}
    assert {recipes[i] for i in recipes if i.startswith("megatronlm_examples_")} == {"delayed"}
    assert {recipes[i] for i in recipes if "_fp8cs_" in i} == {"tensorwise"}
    assert {recipes[i] for i in recipes if "mxfp8" in i or "_fp8mx_" in i} == {"mxfp8"}
    assert {recipes[i] for i in recipes if i.startswith("torchtitan_")} == {"tensorwise"}
    # Megatron-Bridge 26.x H100 "FP8" rows run the recipes' FP8_CS configs
    assert recipes["mbridge2606_h100_fp8_qwen3_30b_16gpu"] == "tensorwise"


@pytest.mark.parametrize("tp, sp", [(1, False), (4, True), (4, False)])
def test_fp8_linear_layers_keep_their_inputs_in_one_byte(tp, sp):
    """Under FP8 Transformer Engine keeps each linear layer's quantized input for the weight
    gradient (cost_models.tensors.gemm_input_bytes): a dense layer keeps the QKV, fc1 and fc2 inputs
    in one byte instead of two, and the output projection an FP8 copy of the attention output that
    core attention keeps in 16 bits. Everything else it keeps is unchanged."""
    from cost_models.layers import layer_table

    model, spec = load_model("llama3-8b"), load_cluster("dgx-h100", 1)
    c = resolve(
        model,
        spec,
        make_job(global_batch_size=8, seq_length=4096),
        ParallelConfig(tp=tp, sequence_parallel=sp),
    )
    node = spec.groups[0]
    bf16 = layer_table(model, make_job(global_batch_size=8, seq_length=4096), c, node).dense
    fp8 = layer_table(model, make_job(global_batch_size=8, seq_length=4096, precision="fp8"), c, node).dense
    T, h, f, q = 4096, model.hidden_size, model.ffn_hidden_size, model.query_projection_size
    sp_div = tp if sp else 1
    saved = 2 * T * h / sp_div + T * f / tp  # QKV and fc1 inputs (norm outputs), fc2 input: 2 -> 1 byte
    copy = T * q / tp  # the output projection's FP8 input beside core attention's 16-bit output
    assert bf16.activation_bytes - fp8.activation_bytes == pytest.approx(saved - copy, rel=1e-12)


def test_fp8_mla_attention_keeps_its_projections_inputs_in_one_byte():
    """The MLA block (DeepSeek-V3) keeps its linear layers' inputs as the MHA block does under FP8:
    the down projections' input and the latents entering the up projections in one byte, plus the
    output projection's FP8 copy of the attention output; Q, K, V and the norms' inputs in 16 bits."""
    from cost_models.attention import attention_block

    model, spec = load_model("deepseek-v3"), load_cluster("dgx-h100", 4)
    c = resolve(
        model,
        spec,
        make_job(global_batch_size=32, seq_length=4096),
        ParallelConfig(tp=1, ep=8),
    )
    node = spec.groups[0]
    bf16 = attention_block(model, make_job(global_batch_size=32, seq_length=4096), c, node, 4096)
    fp8 = attention_block(
        model, make_job(global_batch_size=32, seq_length=4096, precision="fp8"), c, node, 4096
    )
    T, h, a = 4096, model.hidden_size, model.num_attention_heads
    rq, rkv, dv = model.q_lora_rank, model.kv_lora_rank, model.v_head_dim
    saved = T * h + T * (rq + rkv)  # down-projection input, up-projection inputs: 2 -> 1 byte
    copy = T * a * dv  # the output projection's FP8 input beside the 16-bit attention output
    assert bf16.act_bytes - fp8.act_bytes == pytest.approx(saved - copy, rel=1e-12)
