"""Falcon-H1 imported (issue 56): in every layer attention and a Mamba-2 mixer side by side on one
normalised input, their outputs added, then an MLP (arXiv:2507.22448; transformers'
FalconH1DecoderLayer); priced as one layer whose token mixer is both (cost_models.ssm.parallel_block);
Megatron-LM refuses it with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cost_models.attention import attention_block
from cost_models.constraints import violations
from cost_models.flops import layer_flop_per_token
from cost_models.parallel import ParallelConfig
from cost_models.ssm import mamba_block, parallel_block
from cost_models.stage_terms import table_for
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster

HF = Path(__file__).parent / "data" / "hf"
SIZES = ("falcon-h1-3b", "falcon-h1-7b", "falcon-h1-34b")


@pytest.mark.parametrize("name", SIZES)
def test_falcon_configs_match_the_presets(name):
    hf, preset = (
        model_to_mapping(load_model(str(HF / name / "config.json"))),
        model_to_mapping(load_model(name)),
    )
    hf.pop("name"), preset.pop("name")
    assert hf == preset


def test_falcon_h1_7b_by_hand():
    """FalconH1Attention (q 12 x 128, k and v 2 x 128, o_proj), FalconH1Mixer (in_proj h -> 2 d_ssm +
    2 G N + H, conv over d_ssm + 2 G N with bias, dt_bias, A_log, D, the gated norm's d_ssm, out_proj),
    the SwiGLU MLP, two norms a layer, untied embeddings and the final norm."""
    h, di, n, heads = 3072, 3072, 256, 24
    attention = h * (1536 + 2 * 256) + 1536 * h
    mamba = h * (2 * di + 2 * n + heads) + (di + 2 * n) * 5 + 3 * heads + di + di * h
    layer = 2 * h + attention + mamba + 3 * h * 12288
    m = load_model("falcon-h1-7b")
    assert (m.attention_params(), m.mamba_params()) == (attention, mamba)
    assert m.layer_params(0) == layer
    assert m.params_total == 44 * layer + 2 * 130048 * h + h == 7_585_648_736


def test_falcon_h1_totals_against_published():
    """The names' sizes (arXiv:2507.22448, the model cards): 34B is 33.64B (-1.05%, within the name's
    rounding); 3B is 3.149B; "7B" names a 7.586B model (its untied 130K-token tables are 0.80B)."""
    counts = {name: load_model(name).params_total for name in SIZES}
    assert 33.5e9 <= counts["falcon-h1-34b"] < 34.5e9
    assert 2.5e9 <= counts["falcon-h1-3b"] < 3.5e9
    assert counts == {
        "falcon-h1-3b": 3_149_387_264,
        "falcon-h1-7b": 7_585_648_736,
        "falcon-h1-34b": 33_642_516_224,
    }


def test_every_layer_is_attention_and_mamba():
    m = load_model("falcon-h1-7b")
    assert {m.layer_parts(i) for i in range(m.num_layers)} == {("attention+mamba", "dense")}


def _falcon(tmp_path, **changes):
    data = json.loads((HF / "falcon-h1-7b" / "config.json").read_text())
    data.update(changes)
    path = tmp_path / "falcon" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mamba_proj_bias": True}, "key 'mamba_proj_bias': only false (Falcon-H1's) is priced"),
        ({"projectors_bias": True}, "key 'projectors_bias': only false (Falcon-H1's) is priced"),
        ({"mamba_conv_bias": False}, "key 'mamba_conv_bias': only true (Falcon-H1's) is priced"),
        ({"mamba_d_ssm": 4096}, "key 'mamba_d_ssm': 4096 is not mamba_n_heads x mamba_d_head (24 x 128)"),
        ({"hidden_act": "gelu"}, "key 'hidden_act': 'gelu' is not read for Falcon-H1; allowed values: silu"),
        ({"mamba_n_heads": 0}, "key 'mamba_n_heads'"),
    ],
)
def test_falcon_errors_name_the_key(tmp_path, changes, message):
    path = _falcon(tmp_path, **changes)
    with pytest.raises(SpecError) as err:
        load_hf_config(path)
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))


def test_falcon_auto_head_width_and_defaults(tmp_path):
    """FalconH1Config: mamba_d_head "auto" is mamba_d_ssm // mamba_n_heads; absent keys take its defaults."""
    m = load_hf_config(_falcon(tmp_path, mamba_d_head="auto", mamba_chunk_size=None))
    assert (m.mamba_head_dim, m.mamba_chunk_size) == (128, 256)


def test_falcon_round_trips_and_yaml_errors():
    m = load_model("falcon-h1-7b")
    assert model_from_mapping(model_to_mapping(m), "again.yaml") == m
    with pytest.raises(SpecError, match="mamba_num_heads must be positive|must be positive"):
        model_from_mapping(model_to_mapping(m) | {"mamba_num_heads": 0}, "m.yaml")
    with pytest.raises(
        SpecError, match="parallel_mamba_attention .* does not apply with hybrid_layer_pattern"
    ):
        model_from_mapping(model_to_mapping(m) | {"hybrid_layer_pattern": "M-" * 22}, "m.yaml")
    no_parallel = model_to_mapping(m) | {"parallel_mamba_attention": False}
    with pytest.raises(SpecError, match="mamba_\\* fields are set but no layer has a Mamba mixer"):
        model_from_mapping(no_parallel, "m.yaml")


def test_falcon_flops_add_the_two_mixers():
    m = load_model("falcon-h1-7b")
    h, di, n, s = 3072, 3072, 256, 4096
    attention = 2 * h * (1536 + 512) + 2 * 1536 * h + 2 * s * 12 * 256
    mamba = 2 * h * (2 * di + 2 * n + 24) + 7 * di * n + 2 * di * h
    assert layer_flop_per_token(m, 0, s) == attention + mamba + 2 * h * 12288 * 3


def _problem(name="falcon-h1-7b", nodes=1):
    return load_model(name), load_cluster("dgx-h100", nodes), JobSpec(global_batch_size=64, seq_length=4096)


@pytest.mark.parametrize("tp", [1, 2])
def test_layer_costs_are_attention_plus_mamba(tp):
    """One layer whose mixer is both: GEMMs, kernels, FLOPs and parameters add; the shared input is
    kept once; the tensor-parallel collectives are attention's alone (one input, one output)."""
    m, cluster, job = _problem("falcon-h1-34b", nodes=2)
    node = cluster.groups[0]
    c = ParallelConfig(tp=tp, pp=1, dp=16 // tp, micro_batch_size=1)
    att, mamba = attention_block(m, job, c, node, 4096.0), mamba_block(m, job, c, node)
    both = parallel_block(m, job, c, node, att)
    assert both.gemm.forward_s == att.gemm.forward_s + mamba.gemm.forward_s
    assert both.attn_fwd_s == att.attn_fwd_s + mamba.attn_fwd_s
    assert both.model_flop == att.model_flop + mamba.model_flop
    assert both.params_sharded == att.params_sharded + mamba.params_sharded
    assert both.act_bytes < att.act_bytes + mamba.act_bytes
    assert (both.tp_fwd_s, both.tp_bytes) == (att.tp_fwd_s, att.tp_bytes)
    table = table_for(m, job, c, node)
    assert [k for k, _ in table.parts] == [("attention+mamba", "dense")]
    layer = dict(table.parts)[("attention+mamba", "dense")]
    if tp == 1:
        assert layer.params == m.layer_params(0)


def test_tp_must_divide_both_head_counts():
    """Attention heads and KV groups (34B: 20 and 4) and Mamba heads and groups (32 and 2)."""
    m, cluster, job = _problem("falcon-h1-34b", nodes=2)
    found = {
        tp: violations(m, cluster, job, ParallelConfig(tp=tp, pp=1, dp=16 // tp, micro_batch_size=1))
        for tp in (2, 4, 8)
    }
    assert not [v for v in found[2] if "heads" in v or "groups" in v]
    assert any("mamba_num_groups (2) must be divisible by tp (4)" in v for v in found[4])
    assert not [v for v in found[4] if "num_attention_heads" in v]
    assert any("num_attention_heads (20) is not divisible by tp (8)" in v for v in found[8])


def test_megatron_has_no_parallel_layer_and_search_says_so(run_cli, tmp_path):
    m, cluster, job = _problem()
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1)
    reasons = get_framework("megatron").violations(m, cluster, job, c)
    assert any("has no layer running attention and a Mamba-2 mixer side by side" in v for v in reasons)
    args = ("-m", "falcon-h1-7b", "-c", "dgx-h100", "-n", "1", "-b", "256", "-s", "4096")
    res = run_cli("search", *args)
    assert (
        res.exit_code == 3 and "has no layer running attention and a Mamba-2 mixer side by side" in res.stderr
    )
    plan = tmp_path / "plan.yaml"
    assert (
        run_cli("search", *args, "--framework", "any", "--top", "1", "--out", str(plan), "-q").exit_code == 0
    )
    res = run_cli("export", "megatron", str(plan), "--out", str(tmp_path / "launch"), "-q")
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.stderr
    assert "side by side" in lines[0] and not (tmp_path / "launch").exists()
    res = run_cli("estimate", *args, "--tp", "1", "--json")
    assert res.exit_code == 0, res.stderr
