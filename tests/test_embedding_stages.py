"""Embedding-only first and loss-only last pipeline stages (issue 12: every published configuration
expressible). Megatron-LM places the embedding and the loss as units of their own with
``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` or the
``E`` / ``L`` letters of ``--pipeline-model-parallel-layout``; the Megatron-MoE-ModelZoo's Qwen3-235B
run on 256 H100s (94 layers, pp 32 x vpp 3 = 96 virtual stages) needs exactly that."""

import pytest

from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig, account_for_split
from planner.calibration.cases import cases
from planner.inputs.errors import ConfigError, SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import layout_for, partition_flags
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster

MODEL = (
    "--num-layers 6 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
    "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --vocab-size 32000"
)


def test_account_for_split_follows_megatron():
    # (L + emb + loss) units split evenly; the ends hold one decoder layer fewer.
    assert account_for_split(94, 96, True, True) == (0,) + (1,) * 94 + (0,)
    assert account_for_split(126, 16, True, True) == (7,) + (8,) * 14 + (7,)
    assert account_for_split(7, 4, True, False) == (1, 2, 2, 2)
    assert account_for_split(7, 4, False, True) == (2, 2, 2, 1)
    with pytest.raises(ConfigError, match="not divisible by pp\\*vpp = 16"):
        account_for_split(125, 16, True, True)


def test_only_the_ends_may_hold_no_layer():
    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100", nodes=1)
    job = make_job(global_batch_size=64, seq_length=4096)
    ok = ParallelConfig(tp=2, pp=4, micro_batch_size=1, layers_per_stage=(0, 11, 11, 10))
    assert violations(model, cluster, job, resolve(model, cluster, job, ok)) == []
    with pytest.raises(ConfigError, match="except the first"):
        resolve(model, cluster, job, ok.with_(layers_per_stage=(11, 0, 11, 10)))


def test_pipeline_may_be_two_stages_deeper_than_the_layers_with_empty_ends():
    """BigScience's reshaping log ran BLOOM's 70 layers on pp 72 (tp 1, 36 nodes): DeepSpeed's
    'type:transformer|embedding' partition gives each embedding a stage of its own."""
    model = load_model("llama3-8b")  # 32 layers
    job = make_job(global_batch_size=64, seq_length=4096)

    def config(pp: int, split: tuple[int, ...] = ()) -> tuple:
        cluster = load_cluster("dgx-h100", nodes=pp)  # tp 8: one node per stage
        return cluster, ParallelConfig(tp=8, pp=pp, micro_batch_size=1, layers_per_stage=split)

    cluster, deep = config(34, (0,) + (1,) * 32 + (0,))
    assert violations(model, cluster, job, resolve(model, cluster, job, deep)) == []
    cluster, deeper = config(35, (0, 0) + (1,) * 32 + (0,))
    with pytest.raises(ConfigError, match="exceeds num_layers \\(32\\) \\+ 2"):
        resolve(model, cluster, job, deeper)
    cluster, even = config(33)
    with pytest.raises(ConfigError, match="^pp \\(33\\) exceeds num_layers \\(32\\)$"):
        resolve(model, cluster, job, even)
    by_id = {c.run_id: c for c in cases()}
    bloom = by_id["bloom176b_reshape_36nodes_tp1_pp72_mbs1"]
    assert not bloom.skip_reason
    assert bloom.config.stage_layers(bloom.model) == (0,) + (1,) * 70 + (0,)


def test_empty_end_stages_cost_less_and_export_as_layout():
    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100", nodes=1)
    job = make_job(global_batch_size=64, seq_length=4096)
    split = ParallelConfig(tp=2, pp=4, micro_batch_size=1, layers_per_stage=(7, 9, 9, 7))
    ends = split.with_(layers_per_stage=(0, 16, 16, 0))
    est = estimate(model, cluster, job, resolve(model, cluster, job, ends))
    per_stage = [s.memory.peak_bytes for s in est.stages]
    assert per_stage[0] < per_stage[1] and per_stage[3] < per_stage[2]  # no decoder layers there
    flags = dict(partition_flags(resolve(model, cluster, job, ends), model))
    assert flags == {"--pipeline-model-parallel-layout": layout_for((0, 16, 16, 0))}
    assert layout_for((0, 2, 0)) == "E|tt|L"


def test_import_layout_with_embedding_and_loss_stages():
    text = f"pretrain_gpt.py {MODEL} --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'E|ttt|ttt|L'"
    back = parse_megatron(text, "x.sh", 8)
    assert back.config.layers_per_stage == (0, 3, 3, 0) and back.config.vpp == 2
    with pytest.raises(SpecError, match="stage 1 of the layout holds none"):
        parse_megatron(
            f"pretrain_gpt.py {MODEL} --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Ettt||ttt|L'",
            "x.sh",
            8,
        )


def test_import_account_for_flags():
    text = (
        f"pretrain_gpt.py {MODEL} --pipeline-model-parallel-size 4 "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
    )
    assert parse_megatron(text, "x.sh", 8).config.layers_per_stage == (1, 2, 2, 1)
    with pytest.raises(SpecError, match="--account-for-embedding-in-pipeline-split"):
        parse_megatron(
            f"pretrain_gpt.py {MODEL} --pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split",
            "x.sh",
            8,
        )


def test_qwen3_235b_pp32_vpp3_is_predicted():
    (case,) = [c for c in cases() if c.run_id == "moezoo_h100_bf16_qwen3_235b_256gpu_tp2_pp32_ep8_a2a"]
    assert not case.skip_reason
    assert case.config.layers_per_stage == (0,) + (1,) * 94 + (0,)
