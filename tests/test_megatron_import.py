"""Megatron import: shell variables resolved from the script's own assignments, a vocabulary that
cannot be known is an error naming --vocab-size, and `planner check` on each exported launch
reproduces the plan's predicted step time within 0.5% over a set of searched plans."""

import pytest

from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.check import check_file
from planner.launch.megatron.export import export_files
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.shell import read_script
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from planner.search.chain import search
from planner.search.space import Restrictions

MODEL = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --vocab-size 128256"
)


@pytest.mark.parametrize(
    "setup, use",
    [
        ("TP=8", "$TP"),
        ("TP=8", "${TP}"),
        ("", "${TP:-8}"),
        ("TP=", "${TP:-8}"),
        ("export TP=8", "$TP"),
        ("declare -x TP=8", '"$TP"'),
        ("HALF=4", "$((HALF * 2))"),
        ("TP=4\nTP2=${TP}", "$((TP2 + 4))"),
    ],
)
def test_shell_variables_resolve(setup, use):
    text = f"#!/bin/bash\n{setup}\ntorchrun --nproc-per-node 8 pretrain_gpt.py {MODEL} --tensor-model-parallel-size {use}\n"
    back = parse_megatron(text, "x.sh", 64)
    assert back.config.tp == 8 and back.config.dp == 8


def test_arrays_and_bash_c_are_resolved():
    text = f"""#!/bin/bash
PP=2
GPT_ARGS=(
    {MODEL}   # the model
    --pipeline-model-parallel-size $PP
)
GPT_ARGS+=(--tensor-model-parallel-size 4)
EXTRA="--sequence-parallel"
srun bash -c 'torchrun pretrain_gpt.py "$@"' bash "${{GPT_ARGS[@]}}" $EXTRA --lr 1e-4 2>&1 | tee log.txt
"""
    back = parse_megatron(text, "x.sh", 64)
    assert (back.config.tp, back.config.pp, back.config.dp, back.config.sequence_parallel) == (4, 2, 8, True)
    assert back.rejected == () and back.is_script


def test_script_environment_is_recorded():
    s = read_script("export CUDA_DEVICE_MAX_CONNECTIONS=1\nNCCL_DEBUG=INFO torchrun x.py\nunset FOO\n")
    assert s.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_DEBUG": "INFO", "FOO": None}


@pytest.mark.parametrize("use, name", [("$TP", "TP"), ("${TP}", "TP"), ("$(nproc)", "$(nproc)")])
def test_unresolvable_variable_is_an_error_naming_it(use, name):
    text = f"#!/bin/bash\ntorchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size {use}\n"
    with pytest.raises(SpecError, match="--tensor-model-parallel-size takes its value from") as err:
        parse_megatron(text, "x.sh", 64)
    assert name in str(err.value)


def test_unresolved_variable_outside_megatron_flags_is_harmless():
    text = f'#!/bin/bash\ntorchrun --master-addr "$MASTER_ADDR" pretrain_gpt.py {MODEL}\n'
    assert parse_megatron(text, "x.sh", 8).config.tp == 1


@pytest.mark.parametrize("tokenizer", ["--tokenizer-type HuggingFaceTokenizer --tokenizer-model /m", ""])
def test_unknown_vocabulary_is_an_error_naming_vocab_size(tokenizer):
    text = MODEL.replace("--vocab-size 128256", tokenizer)
    with pytest.raises(SpecError, match="add --vocab-size"):
        parse_megatron(text, "args.txt", 8)


def test_vocab_error_through_check_cli(run_cli, tmp_path):
    path = tmp_path / "llama3.sh"
    path.write_text(
        "#!/bin/bash\ntorchrun pretrain_gpt.py "
        + MODEL.replace("--vocab-size 128256", "--tokenizer-type HuggingFaceTokenizer --tokenizer-model m")
        + "\n"
    )
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1")
    assert res.exit_code == 1 and "--vocab-size" in res.stdout


def test_rotary_base_round_trips():
    text = MODEL + " --position-embedding-type rope --rotary-base 500000"
    assert parse_megatron(text, "a", 8).model.rotary_base == 500000


def _search(model, template, nodes, gbs, seq, precision="bf16", job_kw=None, **rules):
    """The best plan under the software profile a Megatron launch is checked with (the framework's
    newest fitted on the cluster's GPUs), so check must reproduce its step time."""
    from planner.profiles.software import cluster_families, configure, default_software

    m = load_model(model)
    cluster = load_cluster(template, nodes)
    cluster, _ = configure(cluster, default_software("megatron", cluster_families(cluster)))
    job = make_job(global_batch_size=gbs, seq_length=seq, precision=precision, **(job_kw or {}))
    result = search(m, cluster, job, Restrictions(max_micro_batch_size=2, **rules), top_k=1)
    assert result.plans, (model, rules)
    best = result.plans[0]
    return PlanInputs(m, best.cluster, job, best.config, best.stage_groups, "megatron"), best


ROUND_TRIP = {
    "dense_mha": lambda: _search("gpt3-5b", "dgx-h100", 1, 32, 2048),
    "gqa": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, tp=(2,), pp=(2,)),
    "moe_ep": lambda: _search("mixtral-8x7b", "dgx-h100", 4, 128, 4096, ep=(4,), pp=(2,)),
    "cp": lambda: _search("llama3-8b", "dgx-h100", 2, 16, 32768, cp=(2,), tp=(4,)),
    "interleaved": lambda: _search(
        "llama3-8b", "dgx-h100", 2, 64, 4096, pp=(4,), vpp=(2,), uneven_partitions=False
    ),
    "uneven": lambda: _search("llama2-13b", "dgx-h100", 3, 48, 4096, pp=(3,), tp=(8,)),
    "fp8": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, "fp8", tp=(2,)),
    "sharding_none": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, optimizer_sharding=("none",)),
    "sharding_distributed": lambda: _search(
        "llama3-8b", "dgx-h100", 2, 64, 4096, optimizer_sharding=("distributed",), pp=(2,)
    ),
    "sharding_zero2": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, optimizer_sharding=("zero2",)),
    "sharding_full": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, optimizer_sharding=("full",)),
    "tp1": lambda: _search("gpt3-5b", "dgx-h100", 1, 32, 2048, tp=(1,)),
    "pp1": lambda: _search("llama3-8b", "dgx-h100", 2, 64, 4096, pp=(1,)),
    "full_recompute": lambda: _search("llama2-13b", "dgx-a100", 1, 32, 4096, recompute=("full",), tp=(8,)),
    "fp16": lambda: _search("gpt3-5b", "dgx-a100", 1, 32, 2048, "fp16", tp=(2,)),
    "fp16_fp32_grads": lambda: _search(
        "gpt3-5b", "dgx-a100", 1, 32, 2048, "fp16", job_kw={"grad_dtype": "fp32"}, tp=(2,)
    ),
    "bf16_grads": lambda: _search(
        "llama3-8b", "dgx-h100", 2, 64, 4096, job_kw={"grad_dtype": "bf16"}, tp=(2,)
    ),
    "moe_runtime": lambda: _search(
        "mixtral-8x7b",
        "dgx-h100",
        4,
        128,
        4096,
        job_kw={
            "moe_dispatcher": "flex",
            "moe_a2a_overlap": True,
            "cuda_graph_scope": ("attn", "moe_router", "moe_preprocess"),
        },
        ep=(8,),
        tp=(1,),
        cp=(1,),
        pp=(2,),
        vpp=(2,),
        recompute=("selective",),
        framework="megatron",
    ),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_check_reproduces_the_planned_step_time(name, launcher, tmp_path):
    plan, best = ROUND_TRIP[name]()
    files = export_files(plan, launcher)
    script = tmp_path / f"launch_{launcher}.sh"
    script.write_text(files[f"launch_{launcher}.sh"])
    verdict = check_file(str(script), plan.cluster)
    assert verdict.passed, [f.message for f in verdict.findings if f.level == "error"]
    assert not [f for f in verdict.findings if f.level == "warning"], [f.message for f in verdict.findings]
    predicted = best.estimate.step_time_s
    assert abs(verdict.metrics["step_time_s"] / predicted - 1) <= 0.005, (
        name,
        verdict.metrics["step_time_s"],
        predicted,
        plan.config,
    )


def test_round_trip_set_covers_every_feature():
    plans = {name: make()[0].config for name, make in ROUND_TRIP.items()}
    assert any(c.ep > 1 for c in plans.values())
    assert any(c.cp > 1 for c in plans.values())
    assert any(c.vpp > 1 for c in plans.values())
    assert any(len(set(c.layers_per_stage)) > 1 for c in plans.values())
    assert {c.optimizer_sharding for c in plans.values()} == {"none", "distributed", "zero2", "full"}
    assert any(c.tp == 1 for c in plans.values()) and any(c.pp == 1 for c in plans.values())
    jobs = [make()[0].job for make in ROUND_TRIP.values()]
    assert any(j.moe_a2a_overlap and j.moe_dispatcher == "flex" and j.cuda_graph_scope for j in jobs)
    assert {(j.precision, j.grad_dtype) for j in jobs} >= {
        ("fp16", "fp16"),
        ("fp16", "fp32"),
        ("bf16", "bf16"),
    }


@pytest.mark.parametrize(
    "flags, grad",
    [
        ("--bf16", "fp32"),
        ("--bf16 --grad-reduce-in-bf16", "bf16"),
        ("--fp16", "fp16"),
        ("--fp16 --accumulate-allreduce-grads-in-fp32", "fp32"),
        ("--bf16 --fp8-format hybrid", "fp32"),
    ],
)
def test_gradient_reduction_dtype_follows_validate_args(flags, grad):
    assert parse_megatron(f"{MODEL} {flags}", "a", 8).job.grad_dtype == grad


@pytest.mark.parametrize(
    "grad, flag",
    [("fp16", None), ("fp32", "--accumulate-allreduce-grads-in-fp32")],
)
def test_fp16_gradient_dtype_is_exported(grad, flag):
    plan, _ = ROUND_TRIP["fp16" if grad == "fp16" else "fp16_fp32_grads"]()
    text = export_files(plan, "torchrun")["megatron_args.txt"]
    assert "--fp16\n" in text
    assert ("--accumulate-allreduce-grads-in-fp32" in text) == (flag is not None)
    assert parse_megatron(text, "megatron_args.txt", plan.cluster.num_gpus).job.grad_dtype == grad


def test_moe_runtime_round_trips_through_the_launch():
    plan, _ = ROUND_TRIP["moe_runtime"]()
    text = export_files(plan, "torchrun")["megatron_args.txt"]
    assert "--moe-token-dispatcher-type flex\n" in text
    assert "--overlap-moe-expert-parallel-comm\n" in text
    assert (
        "--cuda-graph-impl transformer_engine\n--cuda-graph-modules attn moe_router moe_preprocess\n" in text
    )
    back = parse_megatron(text, "megatron_args.txt", plan.cluster.num_gpus)
    assert (back.job.moe_dispatcher, back.job.moe_a2a_overlap, back.job.cuda_graph_scope) == (
        "flex",
        True,
        ("attn", "moe_router", "moe_preprocess"),
    )


@pytest.mark.parametrize(
    "flags, scope",
    [
        ("", ()),
        ("--cuda-graph-impl transformer_engine", ("full",)),
        ("--cuda-graph-impl local --cuda-graph-modules moe mamba", ("moe",)),
        ("--cuda-graph-impl full_iteration", ("full_iteration",)),
        ("--cuda-graph-impl local --cuda-graph-scope full_iteration", ("full_iteration",)),
        ("--enable-cuda-graph", ("full",)),
        ("--cuda-graph-modules attn", ()),  # no implementation: nothing captured
    ],
)
def test_cuda_graph_flags_import(flags, scope):
    assert parse_megatron(f"{MODEL} {flags}", "a", 8).job.cuda_graph_scope == scope


def test_megatron_default_dispatcher_is_allgather_on_import():
    moe = MODEL + " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
    assert parse_megatron(moe, "a", 8).job.moe_dispatcher == "allgather"
    assert (
        parse_megatron(moe + " --moe-token-dispatcher-type alltoall", "a", 8).job.moe_dispatcher == "alltoall"
    )
    with pytest.raises(SpecError, match="moe-token-dispatcher-type 'fast'.*allowed values: alltoall"):
        parse_megatron(moe + " --moe-token-dispatcher-type fast", "a", 8)


@pytest.mark.parametrize(
    "extra, message",
    [
        ("--pipeline-model-parallel-size 2", "virtual pipeline stages"),
        ("--expert-model-parallel-size 1", "needs expert parallelism"),
        ("--moe-token-dispatcher-type allgather", "alltoall or flex"),
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
            "excludes full recompute",
        ),
        ("--recompute-granularity selective --recompute-modules moe_act moe", "excludes 'moe'"),
        ("--moe-layer-recompute", "--moe-layer-recompute adds it"),
    ],
)
def test_a2a_overlap_rules_restate_transformer_config(extra, message):
    from planner.launch.megatron.rules import megatron_findings

    moe = (
        MODEL
        + " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
        + " --moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm "
        + extra
    )
    imp = parse_megatron(moe, "a", 8)
    errors = [
        msg for level, msg, _ in megatron_findings(imp, load_cluster("dgx-h100", 1)) if level == "error"
    ]
    assert any(message in e for e in errors), errors


def test_moe_layer_recompute_with_full_granularity_is_refused():
    from planner.launch.megatron.rules import megatron_findings

    moe = MODEL + " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
    full = " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    imp = parse_megatron(moe + full + " --moe-layer-recompute", "a", 8)
    errors = [m for level, m, _ in megatron_findings(imp, load_cluster("dgx-h100", 1)) if level == "error"]
    assert any("--moe-layer-recompute is refused with full recompute" in e for e in errors), errors
    assert imp.config.recompute == "full" and imp.config.recompute_modules == ()
    # without selective granularity a module list is inert, its names unchecked (as in Megatron)
    assert parse_megatron(moe + " --recompute-modules gdn_norm_out", "a", 8).config.recompute == "none"
