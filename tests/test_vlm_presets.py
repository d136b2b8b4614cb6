"""Vision-language graph presets (issue 56, item 4): Llama 3.2 11B Vision (a ViT feeding a decoder
through cross-attention layers) and Qwen2.5-VL 7B (vision tokens concatenated into the decoder's
sequence). Parameter counts are pinned to counts worked by hand from each config.json and to the
model cards' totals; the search must return a plan."""

from __future__ import annotations

import pytest
import yaml

from cost_models.graph_units import unit_costs, unit_layout
from cost_models.parallel import ParallelConfig
from planner.inputs.graph_model import graph_model_to_mapping, load_graph_model
from planner.inputs.jobs import make_job
from planner.profiles.hardware import load_cluster


def _mllama_by_hand() -> int:
    """meta-llama/Llama-3.2-11B-Vision config.json shapes (biases of the vision MLP, the tanh gates,
    q/k norms and the 8 image-token embedding rows left out, as the preset documents)."""
    h, tiles, tokens = 1280, 4, 4 * 1601
    vit_layer = 4 * h * h + 2 * h * 5120 + 2 * 2 * h  # attention, GELU MLP, two LayerNorms
    patch = 3 * 14 * 14 * h + h + (1601 * h + 1) + 9 * tiles * 1601 * h + 2 * (9 * tiles * h + 1) + 4 * h
    projector = 7680 * 4096 + 4096
    d, kv, ffn, vocab = 4096, 8 * 128, 14336, 128256
    mlp = 3 * d * ffn
    self_layer = 2 * d * d + 2 * d * kv + mlp + 2 * d
    cross_layer = 2 * d * d + 2 * d * kv + mlp + 2 * d  # K, V from the projector's 4096-wide output
    text = 32 * self_layer + 8 * cross_layer + 2 * vocab * d + d
    assert tokens == 6404
    return patch + 40 * vit_layer + projector + text


def _qwen25vl_by_hand() -> int:
    """Qwen/Qwen2.5-VL-7B-Instruct config.json shapes."""
    h, f = 1280, 3420
    vit_layer = (h * 3 * h + 3 * h) + (h * h + h) + (3 * h * f + 2 * f + h) + 2 * h
    vision = 3 * 2 * 14 * 14 * h + 32 * vit_layer + h + (4 * h) ** 2 + 4 * h + 4 * h * 3584 + 3584
    d, kv, ffn, vocab = 3584, 4 * 128, 18944, 152064
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * ffn + 2 * d
    return vision + 28 * layer + 2 * vocab * d + d


@pytest.mark.parametrize(
    "name, by_hand, card",
    [("llama3.2-vision-11b", _mllama_by_hand, 10.6e9), ("qwen2.5-vl-7b", _qwen25vl_by_hand, 8.3e9)],
)
def test_parameter_counts(name, by_hand, card):
    g = load_graph_model(name)
    assert g.params_total == by_hand()
    assert g.params_total == pytest.approx(card, rel=0.02)


def test_llama_vision_has_8_cross_attention_layers_at_the_configs_indices():
    g = load_graph_model("llama3.2-vision-11b")
    layers, cross_at = 0, []
    for b in g.blocks:
        if b.name.startswith(("text_", "xattn_")):
            if b.cross_attention_from:
                assert b.cross_attention_from == "projector" and b.transformer.hybrid_layer_pattern == "-"
                cross_at.append(layers)
            layers += b.num_units
    assert layers == 40 and cross_at == [3, 8, 13, 18, 23, 28, 33, 38]


def test_cross_attention_layer_has_no_self_attention_and_windows_are_cheaper():
    node = load_cluster("dgx-h100", 1).groups[0]
    job = make_job(global_batch_size=8, seq_length=2048)
    c = ParallelConfig(recompute="none", optimizer_sharding="none")
    g = load_graph_model("llama3.2-vision-11b")
    lay, uc = unit_layout(g), unit_costs(g, job, c, node)
    unit = {(g.blocks[bi].name, k): u for u, (bi, k) in enumerate(zip(lay.block, lay.layer))}
    T, s_img, d, kv, ffn = 2048, 6404, 4096, 1024, 14336
    mlp = 2 * T * 3 * d * ffn
    cross = 2 * T * d * d * 2 + 2 * s_img * d * 2 * kv + 4 * T * s_img * d
    assert uc.cost[unit[("xattn_0", 0)]].model_flop == pytest.approx(3 * (mlp + cross))
    q = load_graph_model("qwen2.5-vl-7b")
    lay, uc = unit_layout(q), unit_costs(q, job, c, node)
    unit = {(q.blocks[bi].name, k): u for u, (bi, k) in enumerate(zip(lay.block, lay.layer))}
    # fullatt_block_indexes [7, 15, 23, 31]: full attention over 4,096 patches, else 64-token windows
    full, window = uc.cost[unit[("vision", 7)]].model_flop, uc.cost[unit[("vision", 0)]].model_flop
    # a window's keys per query in the non-causal convention: s x P_chunked / P_causal
    span = 4096 * (64 * 64 * 65 / 2) / (4096 * 4097 / 2)
    assert full - window == pytest.approx(3 * 4 * 4096 * (4096 - span) * 1280)
    assert uc.tau_s[unit[("vision", 0)]] < uc.tau_s[unit[("vision", 7)]]
    assert uc.tau_s[unit[("vision", 15)]] == uc.tau_s[unit[("vision", 7)]]


@pytest.mark.parametrize("name", ["llama3.2-vision-11b", "qwen2.5-vl-7b"])
def test_search_returns_a_plan_and_show_works(run_cli, name):
    res = run_cli("search", "-m", name, "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "2048", "--json")
    assert res.exit_code == 0, res.stderr
    assert '"step_time_s"' in res.stdout
    show = run_cli("models", "show", name)
    assert show.exit_code == 0 and name in show.stdout
    assert name in run_cli("models", "list").stdout


def test_generic_cross_attention_source_needs_its_token_count(run_cli, tmp_path):
    doc = graph_model_to_mapping(load_graph_model("llama3.2-vision-11b"))
    for b in doc["blocks"]:
        if b["name"] == "projector":
            del b["seq_length"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = run_cli("models", "show", str(path))
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert "'projector' is a generic block without seq_length" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
