"""Agreement table: launch -> Megatron-LM's verdict (megatron-core 0.19.2's parse_args,
validate_args, micro-batch calculator, parallel state, TransformerConfig) -> planner check's
verdict. Every launch Megatron rejects, check rejects (exit 1) naming the flag; the launches it
accepts, check passes. The table is docs/megatron.md's; the Megatron column is re-run by
test_megatron_column_matches_megatron where the framework environment exists
(scripts/_framework_validators.py), skipped otherwise."""

import json
import sys
from pathlib import Path

import pytest

from planner.launch.check import check_file
from planner.launch.megatron.importer import megatron_words
from planner.profiles.hardware import load_cluster

BASE = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
TP=2
PP=2
ARGS=(
  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
  --kv-channels 128 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear
  --position-embedding-type rope --rotary-base 500000 --untie-embeddings-and-output-weights
  --vocab-size 128256 --max-position-embeddings 8192 --seq-length 4096
  --tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP}
  --sequence-parallel --micro-batch-size 1 --global-batch-size 64 --use-distributed-optimizer --bf16
)
torchrun --nproc-per-node 8 pretrain_gpt.py "${ARGS[@]}" \\
    --tokenizer-type NullTokenizer --mock-data --train-iters 10 --lr 1e-4
"""
WORLD = 16  # 2 DGX H100 nodes


def edit(*pairs: tuple[str, str]):
    text = BASE
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


MOE = (
    "--vocab-size 128256",
    "--vocab-size 128256 --num-experts 6 --moe-router-topk 2 --expert-model-parallel-size 4",
)

MOE_GROUPED = (
    ("PP=2", "PP=1"),
    ("--num-layers 32", "--num-layers 8"),
    (
        "--vocab-size 128256",
        "--vocab-size 128256 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 3584 "
        "--expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall --moe-grouped-gemm",
    ),
)
SELECTIVE_MODULES = "--bf16 --recompute-granularity selective --recompute-modules"

# name: (launch, Megatron rejects?, flag planner must name, Megatron's reason)
TABLE = {
    "accepted": (BASE, False, None, "accepted"),
    "full_recompute_without_method": (
        edit(("--bf16", "--bf16 --recompute-granularity full --recompute-num-layers 1")),
        True,
        "--recompute-method",
        "TransformerConfig: recompute_method must be block or uniform",
    ),
    "full_uniform_without_num_layers": (
        edit(("--bf16", "--bf16 --recompute-granularity full --recompute-method uniform")),
        True,
        "--recompute-num-layers",
        "TransformerConfig: recompute_num_layers must be between 1 and num_layers_per_pipeline_rank",
    ),
    "full_recompute_complete": (
        edit(
            (
                "--bf16",
                "--bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 16",
            )
        ),
        False,
        None,
        "accepted",
    ),
    "selective_with_method": (
        edit(("--bf16", "--bf16 --recompute-granularity selective --recompute-method uniform")),
        True,
        "--recompute-method",
        "validate_args: recompute method is not yet supported for selective",
    ),
    "overlap_param_gather_without_distributed_optimizer": (
        edit(("--use-distributed-optimizer", "--overlap-grad-reduce --overlap-param-gather")),
        True,
        "--overlap-param-gather",
        "validate_args: --overlap-param-gather only supported with distributed optimizer",
    ),
    "tp_comm_overlap_without_sp": (
        edit(("--sequence-parallel", "--tp-comm-overlap")),
        True,
        "--tp-comm-overlap",
        "validate_args: tensor parallel communication/GEMM overlap needs sequence parallelism",
    ),
    "tp_pp_dp_mapping": (
        edit(("--bf16", "--bf16 --use-tp-pp-dp-mapping")),
        False,
        None,
        "accepted",
    ),
    "tp_pp_dp_mapping_with_cp": (
        edit(
            ("--bf16", "--bf16 --use-tp-pp-dp-mapping --context-parallel-size 2"),
            ("--global-batch-size 64", "--global-batch-size 32"),
        ),
        True,
        "--use-tp-pp-dp-mapping",
        "parallel state: with pp-first rank ordering the dense and expert data-parallel sizes must agree",
    ),
    "misspelled_flag": (
        edit(("--sequence-parallel", "--sequence-paralel")),
        True,
        "--sequence-paralel",
        "argparse: unrecognized arguments",
    ),
    "max_position_below_seq_with_rope": (
        edit(("--max-position-embeddings 8192", "--max-position-embeddings 2048")),
        True,
        "--max-position-embeddings",
        "validate_args: max_position_embeddings must be >= seq_length",
    ),
    "missing_cuda_device_max_connections": (
        edit(("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", "")),
        True,
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "validate_args: tensor/context parallelism requires CUDA_DEVICE_MAX_CONNECTIONS=1",
    ),
    "interleaved_pp2_without_p2p_overlap": (
        edit(("--bf16", "--bf16 --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication")),
        True,
        "--no-overlap-p2p-communication",
        "validate_args: interleaved without p2p overlap needs pp > 2",
    ),
    "interleaved_pp2_with_p2p_overlap": (
        edit(("--bf16", "--bf16 --num-virtual-stages-per-pipeline-rank 2")),
        False,
        None,
        "accepted (p2p overlap is on by default)",
    ),
    "fsdp_without_ckpt_format": (
        edit(
            ("export CUDA_DEVICE_MAX_CONNECTIONS=1", "unset CUDA_DEVICE_MAX_CONNECTIONS"),
            ("PP=2", "PP=1"),
            ("--use-distributed-optimizer", "--use-megatron-fsdp --use-distributed-optimizer"),
        ),
        True,
        "--ckpt-format",
        "validate_args: Megatron-FSDP requires the fsdp_dtensor checkpointing format",
    ),
    "fsdp_complete": (
        edit(
            ("export CUDA_DEVICE_MAX_CONNECTIONS=1", "unset CUDA_DEVICE_MAX_CONNECTIONS"),
            ("PP=2", "PP=1"),
            (
                "--use-distributed-optimizer",
                "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads --use-distributed-optimizer "
                "--no-gradient-accumulation-fusion --ckpt-format fsdp_dtensor",
            ),
        ),
        False,
        None,
        "accepted",
    ),
    "fsdp_with_single_connection": (
        edit(
            ("PP=2", "PP=1"),
            (
                "--use-distributed-optimizer",
                "--use-megatron-fsdp --use-distributed-optimizer --no-gradient-accumulation-fusion "
                "--ckpt-format fsdp_dtensor",
            ),
        ),
        True,
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "validate_args: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset",
    ),
    "heads_not_divisible_by_tp": (
        edit(("TP=2", "TP=8"), ("--num-attention-heads 32", "--num-attention-heads 36")),
        True,
        "--num-attention-heads",
        "TransformerConfig: num_attention_heads must be a multiple of tensor_model_parallel_size",
    ),
    "layers_not_divisible_by_pp": (
        edit(("--num-layers 32", "--num-layers 31")),
        True,
        "--num-layers",
        "validate_args: number of layers should be divisible by the pipeline-model-parallel size",
    ),
    "layers_not_divisible_by_pp_vpp": (
        edit(
            ("--num-layers 32", "--num-layers 30"),
            ("--bf16", "--bf16 --num-virtual-stages-per-pipeline-rank 2"),
        ),
        True,
        "--num-layers",
        "model construction: transformer_block.get_num_layers_to_build asserts num_layers_per_pipeline_rank "
        "% vp_size == 0 (validate_args and TransformerConfig let it through)",
    ),
    "layers_per_virtual_stage_not_dividing": (
        edit(("--bf16", "--bf16 --num-layers-per-virtual-pipeline-stage 5")),
        True,
        "--num-layers-per-virtual-pipeline-stage",
        "validate_args: number of layers per pipeline stage must be divisible by layers per virtual stage",
    ),
    "uneven_first_last_not_splitting": (
        edit(
            ("PP=2", "PP=4"),
            ("--bf16", "--bf16 --decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 8"),
        ),
        True,
        "--decoder-first-pipeline-num-layers",
        "TransformerConfig: the middle stages cannot split the remaining layers evenly",
    ),
    "global_batch_not_divisible": (
        edit(("--global-batch-size 64", "--global-batch-size 62")),
        True,
        "--global-batch-size",
        "micro-batch calculator: global batch size not divisible by micro batch size times data parallel size",
    ),
    "seq_not_divisible_by_2cp": (
        edit(("--seq-length 4096", "--seq-length 4098 --context-parallel-size 2")),
        True,
        "--seq-length",
        "validate_args: seq-length should be a multiple of 2 * context-parallel-size",
    ),
    "experts_not_divisible_by_ep": (
        edit(("PP=2", "PP=1"), MOE),
        True,
        "--num-experts",
        "TransformerConfig: num_moe_experts must be divisible by expert_model_parallel_size",
    ),
    "recompute_modules_moe": (
        edit(*MOE_GROUPED, ("--bf16", f"{SELECTIVE_MODULES} moe_act layernorm")),
        False,
        None,
        "accepted",
    ),
    "recompute_modules_moe_act_without_grouped_gemm": (
        edit(*MOE_GROUPED, (" --moe-grouped-gemm", ""), ("--bf16", f"{SELECTIVE_MODULES} moe_act")),
        True,
        "--recompute-modules",
        "TransformerConfig: moe_act in recompute_modules is only supported with moe_grouped_gemm",
    ),
    "recompute_modules_mla_up_proj_without_mla": (
        edit(("--bf16", f"{SELECTIVE_MODULES} mla_up_proj")),
        True,
        "--recompute-modules",
        "TransformerConfig: mla_up_proj in recompute_modules is only supported with multi_latent_attention",
    ),
    "moe_layer_recompute_with_full_recompute": (
        edit(
            *MOE_GROUPED,
            (
                "--bf16",
                "--bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 8 "
                "--moe-layer-recompute",
            ),
        ),
        True,
        "--moe-layer-recompute",
        "TransformerConfig: Do not set --moe-layer-recompute with full recompute granularity",
    ),
    "main_grads_bf16_precision_aware": (
        edit(("--bf16", "--bf16 --use-precision-aware-optimizer --main-grads-dtype bf16")),
        False,
        None,
        "accepted (bf16 gradients: validate_args leaves fp32 accumulation off)",
    ),
    "main_grads_bf16_with_fp32_accumulation": (
        edit(
            (
                "--bf16",
                "--bf16 --use-precision-aware-optimizer --main-grads-dtype bf16 "
                "--accumulate-allreduce-grads-in-fp32",
            )
        ),
        True,
        "--main-grads-dtype",
        "validate_args: --main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set",
    ),
    "world_size_not_divisible": (
        edit(
            ("TP=2", "TP=3"),
            ("--num-attention-heads 32", "--num-attention-heads 33"),
            ("--num-query-groups 8", "--num-query-groups 3"),
        ),
        True,
        "--tensor-model-parallel-size",
        "parallel state: world size is not divisible by tp x pp x cp",
    ),
}


@pytest.fixture(scope="module")
def cluster():
    return load_cluster("dgx-h100", 2)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_planner_agrees_with_megatron(name, cluster, tmp_path):
    text, rejects, flag, _reason = TABLE[name]
    path = tmp_path / f"{name}.sh"
    path.write_text(text)
    verdict = check_file(str(path), cluster)
    errors = [f for f in verdict.findings if f.level == "error"]
    if not rejects:
        assert verdict.passed, [f.message for f in errors]
        return
    assert not verdict.passed
    named = [f for f in errors if flag in f.flags or flag in f.message]
    assert named, [(f.message, f.flags) for f in errors]


def test_check_cli_exits_1_naming_the_flag(run_cli, tmp_path):
    text, _, flag, _ = TABLE["overlap_param_gather_without_distributed_optimizer"]
    path = tmp_path / "launch.sh"
    path.write_text(text)
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "2", "--json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert any(flag in f["flags"] for f in data["configs"][0]["findings"] if f["level"] == "error")


BEYOND_VALIDATION = {"layers_not_divisible_by_pp_vpp"}
"""Launches Megatron rejects only when it builds the model (after the checks the validators run)."""


def _validators():
    scripts = Path(__file__).parent.parent / "scripts"
    sys.path.insert(0, str(scripts))
    try:
        import _framework_validators as v
    finally:
        sys.path.remove(str(scripts))
    probe = v.validate_megatron(["--num-layers", "2"], {"WORLD_SIZE": "1"}, timeout=300)
    if probe.get("accepted") is None and probe.get("stage") in ("unavailable", "crashed"):
        pytest.skip(f"Megatron-LM is not installed: {probe.get('error')}")
    return v


def megatron_verdict(v, text: str) -> dict:
    words, env, _ = megatron_words(text)
    launch_env = {"WORLD_SIZE": str(WORLD)}
    if env.get("CUDA_DEVICE_MAX_CONNECTIONS"):
        launch_env["CUDA_DEVICE_MAX_CONNECTIONS"] = env["CUDA_DEVICE_MAX_CONNECTIONS"]
    return v.validate_megatron([w for w, _ in words], launch_env)


def test_megatron_column_matches_megatron():
    v = _validators()
    wrong = {}
    for name, (text, rejects, _flag, _reason) in TABLE.items():
        if name in BEYOND_VALIDATION:
            continue
        result = megatron_verdict(v, text)
        if bool(result["accepted"]) == rejects:
            wrong[name] = (result.get("stage"), result.get("error"))
    assert not wrong, wrong
