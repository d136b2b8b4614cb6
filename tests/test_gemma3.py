"""Gemma 3 (issue 56): the Hugging Face config.json of model_type gemma3 (its text_config) and
gemma3_text, parameter counts against the technical report, the 5:1 local/global pattern, the GeGLU
MLP and the frameworks' answers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.flops import layer_flop_per_token
from cost_models.parallel import ParallelConfig
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export import export_files
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster

HF = Path(__file__).parent / "data" / "hf"

# Gemma Team, "Gemma 3 Technical Report", arXiv:2503.19786, Table 1: embedding + non-embedding
# parameters of the text decoder (the 417M vision encoder of 4B/12B/27B aside; 1B has none).
PUBLISHED = {
    "gemma-3-1b": 302e6 + 698e6,
    "gemma-3-4b": 675e6 + 3_209e6,
    "gemma-3-12b": 1_012e6 + 10_759e6,
    "gemma-3-27b": 1_416e6 + 25_600e6,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_totals_within_one_percent_of_the_report(name):
    m = load_model(str(HF / name))
    assert abs(m.params_total / PUBLISHED[name] - 1) < 0.01


@pytest.mark.parametrize("size", ["12b", "27b"])
def test_hf_config_matches_preset(size):
    a, b = (
        model_to_mapping(load_model(str(HF / f"gemma-3-{size}"))),
        model_to_mapping(load_model(f"gemma3-{size}")),
    )
    a.pop("name"), b.pop("name"), b.pop("source", None)
    assert a == b


def test_gemma3_27b_by_hand():
    """62 layers of GQA attention (32 query, 16 KV heads of 128; QK norms) and a GeGLU MLP of 21504
    (gate, up, down), two norms each, tied embedding of 262208 x 5376, the final norm."""
    h, q, kv = 5376, 32 * 128, 16 * 128
    attention = h * (q + 2 * kv) + q * h + 2 * 128
    mlp = 3 * h * 21504
    total = 62 * (attention + mlp + 2 * h) + 262208 * h + h
    m = load_model("gemma3-27b")
    assert m.params_total == total
    assert m.activation == "geglu" and m.gated and not m.untie_embeddings_and_output_weights


def test_local_global_pattern():
    """5 local : 1 global (transformers: layer i global iff (i + 1) % sliding_window_pattern == 0),
    Megatron's --window-attn-skip-freq 6 (is_layer_window_attention: layer_number % 6 != 0, 1-based);
    the 1B model's window is 512 tokens, the others' 1024; the 1B context 32K, the others' 128K."""
    small, big = load_model(str(HF / "gemma-3-1b")), load_model(str(HF / "gemma-3-4b"))
    assert (small.window_size, small.window_attn_skip_freq, small.max_position_embeddings) == (512, 6, 32768)
    assert (big.window_size, big.window_attn_skip_freq, big.max_position_embeddings) == (1024, 6, 131072)
    assert (small.vocab_size, big.vocab_size) == (262144, 262208)  # 4B-27B: Gemma3TextConfig's default


def _config(tmp_path: Path, name: str, **text) -> Path:
    data = json.loads((HF / name / "config.json").read_text())
    target = data.get("text_config", data)
    for key, value in text.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


def test_layer_types_read_as_the_pattern(tmp_path):
    """Newer configs list layer_types; the same 5:1 list gives the same model, a list with no period
    is refused naming the key."""
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)]
    listed = load_model(str(_config(tmp_path, "gemma-3-27b", layer_types=types, sliding_window_pattern=None)))
    assert listed.window_attn_skip_freq == 6 and listed.window_size == 1024
    types[0] = "full_attention"
    with pytest.raises(SpecError, match="key 'layer_types': the local/global layer pattern is not periodic"):
        load_model(str(_config(tmp_path, "gemma-3-12b", layer_types=types[:48])))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "gemma-3-1b",
            {"hidden_activation": "silu"},
            "key 'hidden_activation': 'silu' is not read for Gemma 3",
        ),
        ("gemma-3-4b", {"num_hidden_layers": -3}, "num_hidden_layers"),
    ],
)
def test_errors_name_the_key(tmp_path, name, text, message):
    with pytest.raises(SpecError) as err:
        load_model(str(_config(tmp_path, name, **text)))
    assert message in str(err.value)


def test_multimodal_config_needs_its_text_config(tmp_path):
    path = tmp_path / "g" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "gemma3", "vision_config": {}}))
    with pytest.raises(
        SpecError, match="key 'text_config': model_type 'gemma3' needs the text decoder's mapping"
    ):
        load_model(str(path))


def test_geglu_costs_what_swiglu_costs():
    """Three matrices either way (GATED_ACTIVATIONS): the same parameters and FLOPs per token."""
    g = load_model("gemma3-12b")
    s = replace(g, activation="swiglu")
    assert g.params_total == s.params_total
    assert layer_flop_per_token(g, 0, 4096) == layer_flop_per_token(s, 0, 4096)
    assert g.mlp_params(15360) == 3 * 3840 * 15360


def test_frameworks_say_why_they_do_not_run_it():
    """Megatron-LM 0.19.2 has --swiglu (SiLU gate) and --quick-geglu (quick-GELU gate) but no tanh-GELU
    gate, so the search leaves Gemma 3 out with the reason and the export refuses; torchtitan has no
    Gemma model."""
    m = load_model("gemma3-27b")
    cluster = load_cluster("dgx-h100", 8)
    job = JobSpec(global_batch_size=256, seq_length=4096)
    c = ParallelConfig(tp=4, pp=2, dp=8)
    assert any("has no GeGLU flag" in v for v in get_framework("megatron").violations(m, cluster, job, c))
    assert any("a geglu MLP" in v for v in get_framework("torchtitan").violations(m, cluster, job, c))
    assert get_framework("any").violations(m, cluster, job, c) == []
    with pytest.raises(SpecError, match="has no GeGLU flag .* cannot be exported"):
        export_files(PlanInputs(m, cluster, job, c), "torchrun")


def test_gemma_and_gemma2_mlps_are_geglu_and_gemma2_alternates_local_and_global_layers():
    """Gemma and Gemma 2 gate a GELU (transformers GemmaMLP / Gemma2MLP), not a SiLU: imported as
    GeGLU, so export megatron refuses them as it refuses Gemma 3 (pretrain_gpt.py has no GeGLU
    flag) instead of launching a SwiGLU model. Gemma 2 9B: the report's 9,241,705,984 parameters
    (arXiv:2408.00118 Table 1, 917,504,000 embedding), less the two post-norms per layer planner does
    not count; local 4096-token windows on every other layer from layer 0."""
    from tests.conftest import DATA

    g1 = load_model(str(DATA / "hf" / "gemma-7b" / "config.json"))
    assert g1.activation == "geglu" and g1.window_size == 0
    g2 = load_model(str(DATA / "hf" / "gemma-2-9b" / "config.json"))
    assert g2.activation == "geglu"
    assert g2.params_total == 917_504_000 + 8_324_201_984 - 42 * 2 * 3584
    assert (g2.window_size, g2.window_attn_skip_freq, g2.window_type) == (4096, 2, "sliding")
    assert [g2.is_local_attention_layer(i) for i in range(4)] == [True, False, True, False]
    cluster, job = load_cluster("dgx-h100", 1), JobSpec(global_batch_size=64, seq_length=8192)
    c = ParallelConfig(tp=8, pp=1, dp=1)
    assert any("has no GeGLU flag" in v for v in get_framework("megatron").violations(g2, cluster, job, c))


def test_gemma_with_a_silu_activation_is_refused(tmp_path):
    data = json.loads((Path(__file__).parent / "data" / "hf" / "gemma-2-9b" / "config.json").read_text())
    data["hidden_activation"] = "silu"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        SpecError,
        match="key 'hidden_activation': 'silu' is not read for gemma2; allowed values: gelu_pytorch_tanh",
    ):
        load_model(str(path))
