"""Megatron-LM model configs of the ENV_VARS / MODEL_ARGS form (its functional tests' and the MoE
Model Zoo's model_config.yaml) checked as the launch they stand for (planner.launch.megatron.model_args):
tests/data/megatron/ci_11debfa7/ holds Megatron-LM's MoE memory test config at the commit of its
golden values, the run recorded in tests/data/published_runs.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.model_args import is_model_args_file, model_args_words

DATA = Path(__file__).parent / "data" / "megatron"
CI_MOE = DATA / "ci_11debfa7" / "moe_memory_speed_model_config.yaml"
ZOO_QWEN = DATA / "zoo_e8650517" / "model_configs" / "benchmarking" / "Qwen3-30B-A3B.yaml"


def test_the_ci_moe_test_config_imports_to_its_recorded_run():
    imported = parse_megatron(CI_MOE.read_text(), str(CI_MOE), 8, vocab_size=50257, path=CI_MOE)
    c, m, job = imported.config, imported.model, imported.job
    assert (c.tp, c.pp, c.dp, c.ep, c.vpp, c.micro_batch_size) == (2, 2, 2, 4, 4, 4)
    assert c.sequence_parallel and c.optimizer_sharding == "distributed"
    assert m.multi_latent_attention and m.mtp_num_layers == 1 and m.qk_layernorm
    assert m.attention_dropout == 0.0 and m.num_experts == 32 and m.moe_router_topk == 4
    assert job.attention_impl == "unfused" and job.global_batch_size == 32 and job.seq_length == 4096
    # the flags keep their lines in the file
    line = next(
        i for i, t in enumerate(CI_MOE.read_text().splitlines(), 1) if t.strip().startswith("--num-layers:")
    )
    assert imported.flag_lines["--num-layers"] == line


def test_check_reads_the_config_and_judges_it(run_cli):
    res = run_cli("check", str(CI_MOE), "-c", "dgx-h100", "-n", "1", "--vocab-size", "50257", "--json")
    assert res.exit_code == 0, res.stdout
    cfg = json.loads(res.stdout)["configs"][0]
    assert cfg["passed"] is True
    assert cfg["metrics"]["peak_memory_bytes"] < 80e9


def test_placeholders_are_filled_from_set_and_an_unset_one_is_named():
    """The Zoo's config takes its layout from ${TP}, ${PP}, ...: given with --set, they fill it;
    one missing is an error naming the flag, its line and the variable. Paths planner never opens
    keep their placeholders."""
    text = ZOO_QWEN.read_text()
    assert is_model_args_file(text, ZOO_QWEN)
    layout = {"TP": "1", "PP": "1", "EP": "8", "CP": "1", "LAYERS_PER_VP": "48", "MBS": "1", "GBS": "256"}
    layout |= {"SEQ_LEN": "4096", "MOE_GROUPED_GEMM": "true", "MOE_TOKEN_DISPATCHER": "alltoall"}
    words, env = model_args_words(text, str(ZOO_QWEN), layout)
    flat = [w for w, _ in words]
    assert flat[flat.index("--expert-model-parallel-size") + 1] == "8"
    assert "--moe-grouped-gemm" in flat and "true" not in flat  # filled, then read as the switch
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    imported = parse_megatron(text, str(ZOO_QWEN), 8, variables=layout, path=ZOO_QWEN)
    assert (imported.config.ep, imported.config.micro_batch_size, imported.job.seq_length) == (8, 1, 4096)
    missing = {k: v for k, v in layout.items() if k != "TP"}
    with pytest.raises(SpecError, match=r"line 12: --tensor-model-parallel-size takes its value from 'TP'"):
        parse_megatron(text, str(ZOO_QWEN), 8, variables=missing, path=ZOO_QWEN)


def test_switches_and_lists_read_as_the_launchers_write_them(tmp_path):
    f = tmp_path / "model_config.yaml"
    f.write_text(
        "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --sequence-parallel: true\n"
        "  --use-flash-attn: false\n  --cuda-graph-modules: [attn, mlp]\n  --num-layers: 4\n"
        '  --note: "true"\n'
    )
    words, _ = model_args_words(f.read_text(), str(f))
    assert words == [
        ("--sequence-parallel", 4),
        ("--cuda-graph-modules", 6),
        ("attn", 6),
        ("mlp", 6),
        ("--num-layers", 7),
        ("4", 7),
        ("--note", 8),  # a quoted "true" is the switch too: yq compares the text
    ]
    assert not is_model_args_file("MODEL_ARGS: [1]\n", f) and not is_model_args_file("a: 1\n", f)
    assert not is_model_args_file(f.read_text(), tmp_path / "args.txt")
    bad = tmp_path / "bad.yaml"
    bad.write_text("MODEL_ARGS:\n  num-layers: 4\n")
    with pytest.raises(SpecError, match="line 2: MODEL_ARGS key 'num-layers' is not a --flag"):
        model_args_words(bad.read_text(), str(bad))
    empty = tmp_path / "empty.yaml"
    empty.write_text(
        "MODEL_ARGS:\n  --num-layers:\n  --hidden-size: 64\n  --num-attention-heads: 4\n  --seq-length: 128\n"
        "  --max-position-embeddings: 128\n  --vocab-size: 1000\n  --micro-batch-size: 1\n  --global-batch-size: 8\n"
    )
    assert model_args_words(empty.read_text(), str(empty))[0][:2] == [("--num-layers", 2), ("null", 2)]
    with pytest.raises(SpecError, match="--num-layers expects an integer, got 'null'"):
        parse_megatron(empty.read_text(), str(empty), 8, path=empty)
    # nested lists, an alias bomb among them (9^9 strings), are refused at once, not expanded
    bomb = tmp_path / "bomb.yaml"
    levels = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    levels += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb.write_text("\n".join(levels) + '\nMODEL_ARGS: {"--num-layers": *a8}\n')
    with pytest.raises(SpecError, match="--num-layers: expected a list of plain values"):
        model_args_words(bomb.read_text(), str(bomb))


def test_env_vars_are_the_launchs_environment(run_cli, tmp_path):
    """ENV_VARS is the environment the run starts with, judged as a launch script's: tp 2 on H100
    needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's validate_args), which the CI config sets."""
    bad = tmp_path / "model_config.yaml"
    bad.write_text(
        CI_MOE.read_text().replace("CUDA_DEVICE_MAX_CONNECTIONS: 1", "CUDA_DEVICE_MAX_CONNECTIONS: 8")
    )
    res = run_cli("check", str(bad), "-c", "dgx-h100", "-n", "1", "--vocab-size", "50257", "--json")
    assert res.exit_code == 1
    findings = json.loads(res.stdout)["configs"][0]["findings"]
    assert any(f["level"] == "error" and "ENV_VARS" in f["message"] for f in findings)
