"""Parameter counts against published values, and spec invariants."""

import pytest

from planner.inputs.models import load_model, model_preset_names

# Published parameter counts: model cards / papers cited in each preset's YAML.
PUBLISHED = {
    "llama2-7b": (6.74e9, None),
    "llama2-13b": (13.0e9, None),
    "llama2-70b": (69.0e9, None),
    "llama3-8b": (8.03e9, None),
    "llama3-70b": (70.6e9, None),
    "llama3.1-405b": (405.9e9, None),
    "gpt3-175b": (174.6e9, None),  # Narayanan et al. 2021 Table 2
    "gpt-1t": (1008.0e9, None),  # Narayanan et al. 2021 Table 1
    "gpt-529.6b": (529.6e9, None),
    "gpt-145.6b": (145.6e9, None),
    "mixtral-8x7b": (46.7e9, 12.9e9),  # Jiang et al. 2024
    "mixtral-8x22b": (140.6e9, 39.2e9),  # Mistral AI: 141B total, 39B active
    "qwen3-30b-a3b": (30.5e9, 3.3e9),  # Qwen3 technical report
    "bloom-176b": (176.2e9, None),  # BLOOM model card
    "nemotron4-340b": (341.0e9, None),  # Nemotron-4 340B report: 340B
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    total, active = PUBLISHED[name]
    m = load_model(name)
    assert m.params_total == pytest.approx(total, rel=0.006)
    if active is not None:
        assert m.params_active == pytest.approx(active, rel=0.02)
    else:
        assert m.params_active == m.params_total


def test_narayanan_formula_matches_gpt_presets():
    # Narayanan et al. 2021 eq. (2): P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
    for name in ("gpt-1.7b", "gpt-18.4b", "gpt-145.6b", "gpt3-175b"):
        m = load_model(name)
        l, h, V, s = m.num_layers, m.hidden_size, m.vocab_size, m.max_position_embeddings
        expected = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
        assert m.params_total == pytest.approx(expected, rel=1e-3)


def test_every_preset_loads_and_is_consistent():
    for name in model_preset_names(include_graph=False):
        m = load_model(name)
        assert m.num_attention_heads % m.num_query_groups == 0
        assert m.params_total >= m.params_active > 0


def test_moe_layer_freq_selects_layers():
    from dataclasses import replace

    m = replace(load_model("mixtral-8x7b"), moe_layer_freq=2)
    assert [m.is_moe_layer(i) for i in range(4)] == [True, False, True, False]
    assert m.num_moe_layers == 16
    dense_every_other = m.params_total
    assert dense_every_other < load_model("mixtral-8x7b").params_total
