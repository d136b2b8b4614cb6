"""Megatron import of the list form of --moe-layer-freq (``([0]*3+[1]*58)``, which Megatron's
moe_freq_type evaluates and the export writes for models with leading dense layers)."""

import pytest

from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export import export_files
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster

MOE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
    "--max-position-embeddings 2048 --micro-batch-size 1 --vocab-size 32000 --num-experts 8"
)


@pytest.mark.parametrize(
    "value, pattern", [("'([0]*1+[1]*3)'", (0, 1, 1, 1)), ("'([0]+[1])*2'", (0, 1, 0, 1)), ("2", ())]
)
def test_list_form_is_read(value, pattern):
    text = f'#!/bin/bash\nA=({MOE} --moe-layer-freq {value})\ntorchrun pretrain_gpt.py "${{A[@]}}"\n'
    model = parse_megatron(text, "x.sh", 8).model
    assert model.moe_layer_pattern == pattern
    assert [model.is_moe_layer(i) for i in range(4)] == [bool(v) for v in (pattern or (1, 0, 1, 0))]


@pytest.mark.parametrize(
    "value, message",
    [
        ("'([0]*2+[1]*3)'", "gives 5 layers, --num-layers is 4"),
        ("'([0]*1+[2]*3)'", "entries must be 0"),
        ("'([0]*1+[1]*3'", "missing '\\)'"),
    ],
)
def test_bad_list_form_is_an_error_naming_the_line(value, message):
    text = f"#!/bin/bash\ntorchrun pretrain_gpt.py {MOE} \\\n  --moe-layer-freq {value}\n"
    with pytest.raises(SpecError, match=rf"x.sh: line 2: --moe-layer-freq .*{message}"):
        parse_megatron(text, "x.sh", 8)


def test_deepseek_v3_export_round_trips_its_dense_layers():
    model = load_model("deepseek-v3")
    plan = PlanInputs(
        model,
        load_cluster("dgx-h100", 32),
        make_job(global_batch_size=512, seq_length=4096),
        ParallelConfig(tp=1, pp=1, dp=256, ep=64, micro_batch_size=1),
        (),
        "megatron",
    )
    for name, text in export_files(plan, "torchrun").items():
        assert "--moe-layer-freq '([0]*3+[1]*58)'" in text
        back = parse_megatron(text, name, 256).model
        assert back.moe_layer_pattern == model.moe_layer_pattern and back.num_experts == model.num_experts
