"""More hybrid families of issue 56, item 2: Jamba imported (Mamba-1 and attention layers, each with
an MLP or MoE; its Mamba-1 mixer priced); Falcon-H1 and Kimi Linear, once refused, import
(tests/test_falcon_h1.py, tests/test_kda.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cost_models.constraints import violations
from cost_models.flops import layer_flop_per_token
from cost_models.parallel import ParallelConfig
from cost_models.ssm import selective_scan_bytes
from cost_models.stage_terms import table_for
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

HF = Path(__file__).parent / "data" / "hf"
JAMBA = HF / "jamba-1.5-mini" / "config.json"

# Jamba (arXiv:2403.19887, Sec. 3 and Table 1) and Jamba-1.5 (arXiv:2408.12570, abstract and Sec. 2):
# "12B active parameters", "52B total available parameters"; the ai21labs/AI21-Jamba-1.5-Mini model card
# says the same.
PUBLISHED_TOTAL, PUBLISHED_ACTIVE = 52e9, 12e9


def test_jamba_config_matches_the_preset():
    hf, preset = model_to_mapping(load_model(str(JAMBA))), model_to_mapping(load_model("jamba-1.5-mini"))
    hf.pop("name"), preset.pop("name")
    assert hf == preset


def test_jamba_totals_within_one_percent_of_published():
    m = load_model(str(JAMBA))
    assert abs(m.params_total / PUBLISHED_TOTAL - 1) < 0.01  # 51.57B
    assert abs(m.params_active / PUBLISHED_ACTIVE - 1) < 0.01  # 12.11B


def test_jamba_layers_follow_its_periods():
    """Layer i: attention iff i % 8 == 4, MoE iff i % 2 == 1 (JambaConfig.layers_block_type and
    layers_num_experts); each Jamba layer is a mixer symbol then an FFN symbol."""
    m = load_model(str(JAMBA))
    mixers, ffns = m.hybrid_layer_pattern[0::2], m.hybrid_layer_pattern[1::2]
    assert m.num_layers == 64
    assert [i for i, s in enumerate(mixers) if s == "*"] == [4, 12, 20, 28]
    assert set(mixers) == {"*", "M"}
    assert [i for i, s in enumerate(ffns) if s == "E"] == list(range(1, 32, 2))
    assert set(ffns) == {"E", "-"}


def test_jamba_by_hand():
    """28 Mamba-1 mixers, 4 attention mixers, 16 MLPs, 16 MoE layers, 64 norms, embedding, untied
    output and the final norm; Mamba-1 as JambaMambaMixer lays it out (no biases but conv1d's and
    dt_proj's)."""
    h, di, n, r, k = 4096, 8192, 16, 256, 4
    mamba = h * 2 * di + di * k + di + di * (r + 2 * n) + r * di + di + di * n + di + di * h
    attention = h * (4096 + 2 * 1024) + 4096 * h
    mlp = 3 * h * 14336
    moe = 16 * mlp + h * 16
    total = 28 * mamba + 4 * attention + 16 * mlp + 16 * moe + 64 * h + 2 * 65536 * h + h
    active = total - 16 * 14 * mlp
    m = load_model("jamba-1.5-mini")
    assert m.mamba_params() == mamba == 105_308_160
    assert (m.params_total, m.params_active) == (total, active)


def _jamba_config(tmp_path, **changes):
    data = json.loads(JAMBA.read_text())
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "jamba" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_jamba_dt_rank_auto_is_ceil_h_over_16(tmp_path):
    """JambaConfig: mamba_dt_rank "auto" is math.ceil(hidden_size / 16)."""
    m = load_hf_config(_jamba_config(tmp_path, mamba_dt_rank="auto", hidden_size=4100))
    assert m.mamba_dt_rank == 257


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mamba_proj_bias": True}, "key 'mamba_proj_bias': only false (Jamba's) is priced"),
        ({"mamba_conv_bias": False}, "key 'mamba_conv_bias': only true (Jamba's) is priced"),
        ({"attn_layer_offset": 8}, "key 'attn_layer_offset': 8 selects no layer; it must be below"),
        ({"hidden_act": "gelu"}, "key 'hidden_act': 'gelu' is not read for Jamba; allowed values: silu"),
        ({"mamba_d_state": -1}, "key 'mamba_d_state'"),
    ],
)
def test_jamba_errors_name_the_key(tmp_path, changes, message):
    path = _jamba_config(tmp_path, **changes)
    with pytest.raises(SpecError) as err:
        load_hf_config(path)
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))


def test_jamba_one_expert_is_dense(tmp_path):
    """num_experts 1 (JambaConfig.layers_num_experts all 1): every FFN is an MLP."""
    m = load_hf_config(_jamba_config(tmp_path, num_experts=1))
    assert "E" not in m.hybrid_layer_pattern and not m.is_moe
    assert m.params_total == m.params_active


@pytest.mark.parametrize(
    ("model_type", "key"),
    [("falcon_h1", "num_attention_heads"), ("kimi_linear", "num_hidden_layers")],
)
def test_the_once_refused_families_import_and_name_a_missing_key(tmp_path, run_cli, model_type, key):
    """Falcon-H1 and Kimi Linear import now (tests/test_falcon_h1.py, tests/test_kda.py); a config
    without their keys fails in one line that names the file and the key, no traceback."""
    path = tmp_path / model_type / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": model_type, "hidden_size": 1024}))
    res = run_cli("models", "show", str(path))
    assert res.exit_code == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert str(path) in lines[0] and f"'{key}'" in lines[0]


def _yaml(**extra):
    data = {
        "schema_version": 1,
        "kind": "model",
        "name": "tiny-jamba",
        "num_layers": 4,
        "hidden_size": 256,
        "ffn_hidden_size": 512,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
        "position_embedding_type": "none",
        "hybrid_layer_pattern": "M-*-",
        "mamba_version": 1,
        "mamba_state_dim": 16,
        "mamba_expand": 2,
        "mamba_dt_rank": 16,
    }
    data.update(extra)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"mamba_dt_rank": None}, "mamba_version 1 (Mamba-1) layers need mamba_state_dim, mamba_expand"),
        ({"mamba_num_heads": 8}, "mamba_head_dim, mamba_num_heads and mamba_num_groups are Mamba-2 fields"),
        ({"mamba_version": None}, "mamba_expand and mamba_dt_rank are Mamba-1 fields; set mamba_version: 1"),
        ({"mamba_version": 3}, "key 'mamba_version': 3 is not allowed; allowed values: 1, 2"),
        ({"hybrid_layer_pattern": "*-*-"}, "mamba_version 1 is set but hybrid_layer_pattern has no M layer"),
    ],
)
def test_mamba1_yaml_errors_name_the_key(extra, message):
    with pytest.raises(SpecError) as err:
        model_from_mapping(_yaml(**extra), "m.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("m.yaml")


def test_mamba1_round_trips_through_yaml():
    m = model_from_mapping(_yaml(), "m.yaml")
    assert model_from_mapping(model_to_mapping(m), "again.yaml") == m


def test_mamba1_flops():
    """Per token: in_proj, x_proj, dt_proj, out_proj, the conv (2 d_conv d_inner) and the selective
    scan (9 d_inner N, state-spaces/mamba issue #110)."""
    m = load_model("jamba-1.5-mini")
    h, di, n, r = 4096, 8192, 16, 256
    expected = 2 * (h * 2 * di + di * (r + 2 * n) + r * di + di * h) + di * (2 * 4 + 9 * n)
    assert layer_flop_per_token(m, 0, 4096) == expected
    assert layer_flop_per_token(m, 0, 32768) == expected  # linear in the sequence


def test_selective_scan_is_memory_bound_in_the_sequence():
    fwd, bwd = selective_scan_bytes(4096, 8192, 16)
    assert fwd == 4096 * (4 * 8192 * 2 + 2 * 16 * 2)
    assert selective_scan_bytes(8192, 8192, 16) == (2 * fwd, 2 * bwd)
    assert bwd > 2 * fwd


def _problem(nodes=1):
    m = load_model("jamba-1.5-mini")
    return m, load_cluster("dgx-h100", nodes), JobSpec(global_batch_size=64, seq_length=4096)


def test_layer_table_prices_the_mamba1_layers():
    """One cost per (mixer, MLP) kind; summed over the layers they hold every decoder parameter
    (tp 1, ep 1), and tp 2 halves the Mamba-1 mixer's share."""
    m, cluster, job = _problem()
    node = cluster.groups[0]
    one = table_for(m, job, ParallelConfig(tp=1, pp=1, dp=8, ep=1, micro_batch_size=1), node)
    assert [k for k, _ in one.parts] == [("", "dense"), ("", "moe"), ("attention", ""), ("mamba", "")]
    total = one.layers(m, 0, m.num_layers).params
    assert total == pytest.approx(sum(m.layer_params(i) for i in range(m.num_layers)), rel=1e-12)
    two = table_for(m, job, ParallelConfig(tp=2, pp=1, dp=4, ep=1, micro_batch_size=1), node)
    mamba1, mamba2 = dict(one.parts)[("mamba", "")], dict(two.parts)[("mamba", "")]
    assert mamba2.params == pytest.approx(mamba1.params / 2, rel=0.01)
    assert mamba2.forward_s < mamba1.forward_s


def test_mamba1_parallel_limits():
    m, cluster, job = _problem(nodes=2)
    cp = ParallelConfig(tp=2, pp=1, dp=4, cp=2, ep=4, micro_batch_size=1)
    assert any("Mamba-1 layers are not context-parallel (cp 2)" in v for v in violations(m, cluster, job, cp))
    ok = ParallelConfig(tp=8, pp=1, dp=2, ep=2, micro_batch_size=1)
    assert not [v for v in violations(m, cluster, job, ok) if "Mamba" in v]


def test_megatron_has_no_mamba1_and_search_says_so(run_cli):
    m, cluster, job = _problem()
    c = ParallelConfig(tp=2, pp=1, dp=4, ep=4, micro_batch_size=1)
    assert any("has no Mamba-1 layer" in v for v in get_framework("megatron").violations(m, cluster, job, c))
    res = run_cli("search", "-m", "jamba-1.5-mini", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096")
    assert res.exit_code == 3 and "has no Mamba-1 layer" in res.stderr
