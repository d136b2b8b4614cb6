"""DeepSeek sparse attention (issue 56, item 1): DeepSeek-V3.2's config.json and preset against
the published parameter counts, the sparse span and the indexer's cost, Megatron-LM's
``--experimental-attention-variant dsa`` export read back by ``planner check``, and the refusals."""

from __future__ import annotations

import json

import pytest

from cost_models.attention import attention_block
from cost_models.constraints import resolve
from cost_models.flops import layer_flop_per_token
from cost_models.layers import layer_table
from cost_models.parallel import ParallelConfig
from cost_models.sparse_attention import indexer_block
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.hf_config import load_hf_config
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import local_attention_span, sparse_attention_span
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import args_text, megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import load_cluster
from tests.conftest import DATA

FIXTURE = DATA / "hf" / "deepseek-v3.2-exp" / "config.json"
LAYERS = (7, 8, 8, 8, 8, 8, 8, 6)  # 61 layers over 8 stages, as tests/test_frontier_models.py


def _plan(name: str, nodes: int, seq: int, **config) -> PlanInputs:
    m, cl = load_model(name), load_cluster("dgx-h100", nodes)
    job = make_job(global_batch_size=256, seq_length=seq)
    return PlanInputs(m, cl, job, resolve(m, cl, job, ParallelConfig(**config)))


def test_config_json_imports_with_the_published_counts():
    """deepseek-ai/DeepSeek-V3.2-Exp: 685B with the MTP module (its Hugging Face card; DeepSeek-V3's
    README splits the same 685B into 671B main + 14B MTP), 671B / 37B activated as DeepSeek-V3
    (arXiv:2412.19437) plus 61 indexers. Active without the input embedding, as deepseek-v3."""
    m = load_hf_config(FIXTURE)
    assert (m.dsa_indexer_n_heads, m.dsa_indexer_head_dim, m.dsa_indexer_topk) == (64, 128, 2048)
    # wq_b 1536 x 64 x 128, wk 7168 x 128, k_norm 2 x 128, weights_proj 7168 x 64
    assert m.indexer_params() == 1536 * 64 * 128 + 7168 * 128 + 256 + 7168 * 64 == 13_959_424
    assert m.params_total == pytest.approx(671e9, rel=0.01)
    assert m.params_total + m.mtp_params() == pytest.approx(685e9, rel=0.01)
    active = m.params_active - m.embedding_params()
    assert abs(active - 37e9) < 0.5e9  # the rounding of the published "37B"
    v3 = load_model("deepseek-v3")
    assert m.params_total - v3.params_total == 61 * m.indexer_params()


def test_preset_is_the_config_json():
    a = model_to_mapping(load_model("deepseek-v3.2"))
    b = model_to_mapping(load_hf_config(FIXTURE))
    for d in (a, b):
        d.pop("name"), d.pop("source", None)
    assert a == b


def test_sparse_span_is_the_top_k_pair_count():
    """Query i sees min(i + 1, k) keys: dense at or below k, about 2k keys per query far above."""
    assert sparse_attention_span(1024, 2048) == 1024.0
    assert sparse_attention_span(2048, 2048) == 2048.0
    s, k = 8192, 2048
    pairs = sum(min(i + 1, k) for i in range(s))
    assert sparse_attention_span(s, k) == pytest.approx(s * pairs / (s * (s + 1) / 2))
    assert sparse_attention_span(s, k) == local_attention_span(s, k)
    assert sparse_attention_span(1 << 20, k) == pytest.approx(2 * k, rel=2e-3)


def test_attention_is_dense_below_top_k_and_linear_above():
    """Core attention FLOPs per token: the absorbed width over s keys while s <= k (dense), then
    constant in s (O(s k)); the indexer's scores keep growing with s (O(s^2))."""
    m = load_model("deepseek-v3.2")
    width = 128 * (2 * 512 + 64)
    assert m.core_attention_width == width
    v3 = load_model("deepseek-v3")  # the same projections
    proj = layer_flop_per_token(v3, 3, 1) - 2 * v3.core_attention_width

    def core(s: int) -> float:
        return layer_flop_per_token(m, 3, s) - proj - _indexer_forward_equivalent(m, s)

    assert core(1024) == pytest.approx(2 * 1024 * width)
    assert core(1 << 17) == pytest.approx(core(1 << 18), rel=0.01)
    assert core(1 << 18) == pytest.approx(2 * 2 * 2048 * width, rel=0.01)
    growth = _indexer_forward_equivalent(m, 1 << 18) - _indexer_forward_equivalent(m, 1 << 17)
    assert growth == pytest.approx(2 * (1 << 17) * 64 * 128 / 3, rel=0.01)  # the scores: 2 s H^I d^I


def _indexer_forward_equivalent(m, s: int) -> float:
    from cost_models.sparse_attention import indexer_flop_per_token

    return indexer_flop_per_token(m, s) / 3


def test_layer_table_model_flops_match_the_per_token_count():
    """The layer table's model FLOPs (one GPU of tp 2) are three times the per-token count."""
    plan = _plan(
        "deepseek-v3.2", 32, 8192, tp=2, pp=8, ep=16, dp=16, recompute="full", layers_per_stage=LAYERS
    )
    t = layer_table(plan.model, plan.job, plan.config, plan.cluster.groups[0])
    tokens = 8192  # one micro-batch of one sequence
    for index, kind in ((0, t.dense), (3, t.moe)):
        per_token = layer_flop_per_token(plan.model, index, 8192)
        assert kind.model_flop == pytest.approx(3 * per_token * tokens / 2, rel=1e-9)


def test_indexer_is_duplicated_over_tensor_parallelism():
    """Megatron builds the indexer's projections duplicated: every tp rank holds them in full and
    scores all of the micro-batch's queries, so its time does not shrink with tp."""
    one = _plan("deepseek-v3.2", 4, 8192, tp=1, ep=8, dp=32, recompute="full")
    two = _plan("deepseek-v3.2", 4, 8192, tp=2, ep=8, dp=16, recompute="full")
    node = one.cluster.groups[0]
    a = indexer_block(one.model, one.job, one.config, node, 8192.0)
    b = indexer_block(two.model, two.job, two.config, node, 8192.0)
    assert a.params == b.params == one.model.indexer_params()
    assert a.gemm == b.gemm  # the same projections over the same queries on every rank
    assert a.model_flop == pytest.approx(2 * b.model_flop)  # the model's indexer work, over tp
    assert a.gather_fwd_s == 0.0 and b.gather_fwd_s > 0.0
    at = attention_block(two.model, two.job, two.config, node, 8192.0)
    assert at.params_replicated >= two.model.indexer_params()


def test_sparse_attention_is_cheaper_than_dense_at_long_context():
    """At 64K tokens the top-2048 layer is cheaper than DeepSeek-V3's dense MLA, at 2K dearer (the
    absorbed MQA form's wider products and the indexer): the report's Figure 3 crossover."""
    times = {}
    for name in ("deepseek-v3", "deepseek-v3.2"):
        for seq in (2048, 65536):
            p = _plan(name, 4, seq, tp=2, ep=8, dp=16, recompute="full")
            at = attention_block(p.model, p.job, p.config, p.cluster.groups[0], float(seq))
            times[name, seq] = at.attn_fwd_s + at.attn_bwd_s + at.gemm.forward_s
    assert times["deepseek-v3.2", 65536] < times["deepseek-v3", 65536]
    assert times["deepseek-v3.2", 2048] > times["deepseek-v3", 2048]


def test_megatron_export_and_import_round_trip():
    plan = _plan(
        "deepseek-v3.2", 64, 4096, tp=2, pp=8, ep=32, dp=32, recompute="full", layers_per_stage=LAYERS
    )
    args = megatron_args(plan)
    flags = dict(args)
    assert flags["--experimental-attention-variant"] == "dsa" and "--multi-latent-attention" in flags
    assert (flags["--dsa-indexer-n-heads"], flags["--dsa-indexer-head-dim"], flags["--dsa-indexer-topk"]) == (
        "64",
        "128",
        "2048",
    )
    assert flags["--dsa-indexer-loss-coeff"] == "0.01" and "--dsa-indexer-use-sparse-loss" in flags
    assert "--no-rope-fusion" in flags and "--disable-bias-linear" in flags
    back = parse_megatron(args_text(args), "a.txt", plan.cluster.num_gpus)
    assert back.unknown == () and back.rejected == ()
    from planner.launch.megatron.rules import megatron_findings

    assert not [m for level, m, _ in megatron_findings(back, plan.cluster) if "sparse attention" in m]
    a, b = model_to_mapping(back.model), model_to_mapping(plan.model)
    for d in (a, b):  # kv_channels does not apply to MLA (the export writes no --kv-channels)
        d.pop("name"), d.pop("source", None), d.pop("kv_channels")
    assert a == b


def test_megatron_refuses_context_parallelism_and_torchtitan_the_model():
    plan = _plan("deepseek-v3.2", 8, 8192, tp=2, cp=2, ep=8, dp=16, recompute="full")
    reasons = get_framework("megatron").violations(plan.model, plan.cluster, plan.job, plan.config)
    assert any("--cp-comm-type allgather" in r for r in reasons), reasons
    reasons = get_framework("torchtitan").violations(plan.model, plan.cluster, plan.job, plan.config)
    assert any("DeepSeek sparse attention" in r for r in reasons), reasons


SHAPE = (
    "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
    "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --disable-bias-linear --vocab-size 32000 "
)
MLA = "--multi-latent-attention --q-lora-rank 192 --kv-lora-rank 64 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 "
DSA = "--experimental-attention-variant dsa --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 --dsa-indexer-topk 2048 "
LOSS = "--dsa-indexer-loss-coeff 0.01 --dsa-indexer-use-sparse-loss"


def test_megatrons_dsa_functional_test_imports():
    """Megatron-LM's tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp2_dsa shape."""
    m = parse_megatron(SHAPE + MLA + DSA + LOSS, "a.txt", 8).model
    assert (m.dsa_indexer_n_heads, m.dsa_indexer_head_dim, m.dsa_indexer_topk) == (64, 128, 2048)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SHAPE + DSA + LOSS, "without --multi-latent-attention"),
        (SHAPE + MLA + DSA.replace("--dsa-indexer-topk 2048 ", "") + LOSS, "without --dsa-indexer-topk"),
        (SHAPE + MLA + DSA, "sparse KL loss"),
        (SHAPE + MLA + DSA + "--dsa-indexer-loss-coeff 0.01", "--dsa-indexer-use-sparse-loss"),
        (SHAPE + MLA + DSA + "--dsa-indexer-loss-coeff x --dsa-indexer-use-sparse-loss", "expects a number"),
    ],
)
def test_import_refusals_name_the_flag(text, message):
    with pytest.raises(SpecError) as err:
        parse_megatron(text, "a.txt", 8)
    assert message in str(err.value) and str(err.value).startswith("a.txt")
    assert "\n" not in str(err.value)


def test_model_file_and_config_json_errors_name_the_key(tmp_path):
    base = model_to_mapping(load_model("deepseek-v3.2"))
    with pytest.raises(SpecError, match="dsa_indexer_n_heads, dsa_indexer_head_dim and dsa_indexer_topk"):
        model_from_mapping({**base, "dsa_indexer_topk": 0}, "m.yaml")
    dense = model_to_mapping(load_model("llama3-8b"))
    with pytest.raises(SpecError, match="multi_latent_attention is false"):
        model_from_mapping(
            {**dense, "dsa_indexer_n_heads": 8, "dsa_indexer_head_dim": 64, "dsa_indexer_topk": 64}, "m.yaml"
        )
    config = json.loads(FIXTURE.read_text())
    del config["index_topk"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError, match="missing required key 'index_topk' for model_type 'deepseek_v32'"):
        load_hf_config(path)


@pytest.mark.parametrize(
    ("drop", "add", "message"),
    [
        ("--disable-bias-linear ", "", "needs --disable-bias-linear"),
        ("--no-rope-fusion", "", "add --no-rope-fusion"),
        ("", " --context-parallel-size 2", "--cp-comm-type allgather only (got p2p"),
        ("", " --context-parallel-size 2 --cp-comm-type a2a", "allgather only (got a2a"),
    ],
)
def test_check_names_what_transformer_config_refuses_in_a_dsa_launch(drop, add, message):
    """TransformerConfig.__post_init__'s DSA checks (megatron-core at d98e8a64): no linear biases, no
    RoPE fusion, context parallelism only with the all-gather communication."""
    from planner.launch.megatron.rules import megatron_findings

    ok = SHAPE + MLA + DSA + LOSS + " --no-rope-fusion"
    errors = lambda text: [  # noqa: E731
        m
        for level, m, _ in megatron_findings(parse_megatron(text, "a.txt", 8), load_cluster("dgx-h100", 1))
        if level == "error"
    ]
    assert not [e for e in errors(ok) if "sparse attention" in e]
    assert not [
        e
        for e in errors(ok + " --context-parallel-size 2 --cp-comm-type allgather")
        if "sparse attention" in e
    ]
    found = errors(ok.replace(drop, "") + add) if drop else errors(ok + add)
    assert any(message in e for e in found), found
