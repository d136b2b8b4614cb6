"""Selective recompute by module (Megatron-Core ``--recompute-modules``): what each module drops and
re-runs in the layer table, the constraints Megatron-Core enforces, the plan file, the Megatron
export and import, the framework capability, the search's cheap-module variant and the CLI."""

import json

import pytest

from cost_models.compute import memory_bound_s
from cost_models.constraints import module_violations, resolve
from cost_models.estimate import estimate
from cost_models.layers import layer_table
from cost_models.parallel import RECOMPUTE_MODULES, ParallelConfig, memory_modules
from cost_models.tensors import ACT_BYTES
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import argv, megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs, config_from_mapping, config_to_mapping
from planner.profiles.hardware import load_cluster
from planner.search.space import Restrictions, enumerate_shapes


def _table(model_name, nodes, config, **job):
    m = load_model(model_name)
    cluster = load_cluster("dgx-h100", nodes)
    j = make_job(global_batch_size=256, seq_length=4096, **job)
    c = resolve(m, cluster, j, config)
    return m, j, c, layer_table(m, j, c, cluster.groups[0]), cluster


def _selective(modules):
    return ParallelConfig(
        tp=1, pp=1, ep=8, micro_batch_size=1, recompute="selective", recompute_modules=modules
    )


def test_moe_act_and_layernorm_drop_the_hand_worked_bytes():
    # mixtral-8x7b, tp 1 (no SP), ep 8 over 32 GPUs, 4096 tokens per micro-batch, top-2 of 8 experts.
    m, _, c, core, _ = _table("mixtral-8x7b", 4, _selective(()))
    *_, cheap, _ = _table("mixtral-8x7b", 4, _selective(("moe_act", "layernorm")))
    h, fe, T = m.hidden_size, m.moe_ffn_hidden_size, 4096
    # the busiest expert-parallel rank's routed copies (balanced mean times the dropless load factor)
    from cost_models import moe

    P = T * m.moe_router_topk * moe.routed_load_factor(T * m.moe_router_topk * c.ep, c.ep, None)
    act_fn = P * fe * ACT_BYTES  # fc2's input, 16-bit without FP8
    router_in = T * h * ACT_BYTES  # the pre-MLP norm's output, kept by the router
    assert cheap.moe.selective_dropped_bytes == pytest.approx(act_fn + router_in)
    # core attention's own (the fp32 log-sum-exp per head) is what the default module drops
    assert core.moe.selective_dropped_bytes == pytest.approx(4 * T * m.num_attention_heads)
    assert cheap.moe.activation_bytes == core.moe.activation_bytes  # recompute does not change what exists
    # what they re-run: the activation (reads fc1's gated output, writes fc2's input) and the norm
    gpu = load_cluster("dgx-h100", 4).groups[0].gpu
    rerun = memory_bound_s(3 * P * fe * ACT_BYTES, gpu) + memory_bound_s(2 * T * h * ACT_BYTES, gpu)
    assert cheap.moe.selective_recompute_s == pytest.approx(rerun)
    # without core_attn in the list, core attention is kept (its bytes stay)
    only = _table("mixtral-8x7b", 4, _selective(("moe_act",)))[3]
    assert only.moe.selective_dropped_bytes == pytest.approx(act_fn)


def test_cheap_modules_fit_what_core_attention_recompute_does_not():
    m, j, _, _, cluster = _table("mixtral-8x7b", 4, _selective(()))
    base = ParallelConfig(tp=1, pp=1, ep=8, micro_batch_size=2, recompute="selective")

    def run(c):
        return estimate(m, cluster, j, resolve(m, cluster, j, c))

    none, core = run(base.with_(recompute="none")), run(base)
    cheap = run(base.with_(recompute_modules=("moe_act", "layernorm")))
    # fused core attention keeps only its log-sum-exp: recomputing it saves little and re-runs the
    # attention; the cheap modules drop the widest MoE tensors for memory-bound re-runs
    assert core.peak_memory_bytes - cheap.peak_memory_bytes > 5 * 2**30
    assert none.peak_memory_bytes - core.peak_memory_bytes < 0.5 * 2**30
    assert none.step_time_s < cheap.step_time_s < min(core.step_time_s, 1.03 * none.step_time_s)


def test_whole_moe_recompute_subsumes_its_inner_modules_and_keeps_the_input():
    cfg = ParallelConfig(tp=1, pp=1, ep=8, micro_batch_size=1, recompute="selective")
    whole = _table("mixtral-8x7b", 4, cfg.with_(recompute_modules=("moe",)))[3].moe
    both = _table("mixtral-8x7b", 4, cfg.with_(recompute_modules=("moe_act", "moe")))[3].moe
    none = _table("mixtral-8x7b", 4, cfg.with_(recompute="none"))[3].moe
    assert both.selective_dropped_bytes == pytest.approx(whole.selective_dropped_bytes)
    assert both.selective_recompute_s == pytest.approx(whole.selective_recompute_s)
    # the MoE forward again costs at least its GEMMs, and far more than the activation alone
    act_only = _table("mixtral-8x7b", 4, cfg.with_(recompute_modules=("moe_act",)))[3].moe
    assert whole.selective_recompute_s > 5 * act_only.selective_recompute_s
    assert 0 < whole.selective_dropped_bytes < none.activation_bytes


def test_mla_up_proj_drops_the_queries_keys_and_values():
    cfg = ParallelConfig(tp=2, pp=1, ep=8, micro_batch_size=1, recompute="selective")
    m, _, c, t, _ = _table("deepseek-v3", 32, cfg.with_(recompute_modules=("mla_up_proj",)))
    core = _table("deepseek-v3", 32, cfg)[3]
    a, dqk, dv = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    qkv = 4096 * a * (2 * dqk + dv) / c.tp * ACT_BYTES
    lse = 4 * 4096 * a / c.tp  # core attention's own, dropped by the default module
    assert t.moe.selective_dropped_bytes == pytest.approx(qkv)
    assert core.moe.selective_dropped_bytes == pytest.approx(lse)
    assert t.moe.selective_recompute_s > 0


def test_mlp_recomputes_dense_layers_only():
    cfg = ParallelConfig(tp=1, pp=1, ep=8, micro_batch_size=1, recompute="selective")
    t = _table("deepseek-v3", 32, cfg.with_(recompute_modules=("mlp",)))[3]
    assert t.dense.selective_dropped_bytes > 0 and t.dense.selective_recompute_s > 0
    assert t.moe.selective_dropped_bytes == 0 and t.moe.selective_recompute_s == 0
    # moe_act is a no-op on the leading dense layers
    t2 = _table("deepseek-v3", 32, cfg.with_(recompute_modules=("moe_act",)))[3]
    assert t2.dense.selective_dropped_bytes == 0


@pytest.mark.parametrize(
    "model_name, modules, job, expected",
    [
        ("llama3-8b", ("mla_up_proj",), {}, "needs multi-latent attention"),
        ("llama3-8b", ("moe_act",), {}, "needs an MoE model"),
        ("mixtral-8x7b", ("moe_act",), {"precision": "fp8", "fp8_recipe": "delayed"}, "delayed scaling"),
        ("mixtral-8x7b", ("moe",), {"moe_a2a_overlap": True}, "all-to-all overlap"),
        ("mixtral-8x7b", ("layernorm", "moe_act"), {}, "in the order"),
        ("mixtral-8x7b", ("attention",), {}, "not in core_attn"),
    ],
)
def test_megatron_refusals_are_violations(model_name, modules, job, expected):
    m = load_model(model_name)
    j = make_job(global_batch_size=64, seq_length=4096, **job)
    c = ParallelConfig(ep=8 if m.is_moe else 1, recompute="selective", recompute_modules=modules)
    found = module_violations(m, j, c)
    assert any(expected in v for v in found), found


def test_modules_need_selective_recompute():
    m = load_model("mixtral-8x7b")
    j = make_job(global_batch_size=64, seq_length=4096)
    c = ParallelConfig(ep=8, recompute="full", recompute_modules=("moe_act",))
    assert "recompute_modules needs selective recompute" in module_violations(m, j, c)


def test_memory_modules_per_model():
    j = make_job(global_batch_size=64, seq_length=4096)
    assert memory_modules(load_model("llama3-70b"), j) == ()
    assert memory_modules(load_model("mixtral-8x7b"), j) == ("moe_act", "layernorm")
    assert memory_modules(load_model("deepseek-v3"), j) == ("moe_act", "layernorm", "mla_up_proj")
    delayed = make_job(global_batch_size=64, seq_length=4096, precision="fp8", fp8_recipe="delayed")
    assert memory_modules(load_model("deepseek-v3"), delayed) == ("mla_up_proj",)


def test_plan_file_round_trip_and_errors():
    c = ParallelConfig(
        tp=2, pp=1, dp=4, ep=8, recompute="selective", recompute_modules=("moe_act", "layernorm")
    )
    data = config_to_mapping(c)
    assert data["recompute_modules"] == ["moe_act", "layernorm"]
    assert config_from_mapping(data, "p.yaml").recompute_modules == ("moe_act", "layernorm")
    # any order reads back canonical; the default (core attention alone) reads back as the default
    data["recompute_modules"] = ["layernorm", "moe_act"]
    assert config_from_mapping(data, "p.yaml").recompute_modules == ("moe_act", "layernorm")
    data["recompute_modules"] = ["core_attn"]
    assert config_from_mapping(data, "p.yaml").recompute_modules == ()
    assert "recompute_modules" not in config_to_mapping(c.with_(recompute_modules=()))
    data["recompute_modules"] = ["moe_acts"]
    with pytest.raises(
        SpecError, match=r"p\.yaml: key 'config\.recompute_modules': 'moe_acts' is not allowed"
    ):
        config_from_mapping(data, "p.yaml")
    data["recompute_modules"] = ["moe_act", "moe_act"]
    with pytest.raises(SpecError, match="listed twice"):
        config_from_mapping(data, "p.yaml")


def _inputs(modules):
    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    j = make_job(global_batch_size=256, seq_length=4096)
    c = resolve(m, cluster, j, _selective(modules))
    return PlanInputs(m, cluster, j, c, (), get_framework("megatron"))


def test_megatron_export_writes_each_module_as_its_own_word_and_imports_back():
    inputs = _inputs(("moe_act", "layernorm"))
    words = argv(megatron_args(inputs))
    i = words.index("--recompute-modules")
    assert words[i - 2 : i + 3] == [
        "--recompute-granularity",
        "selective",
        "--recompute-modules",
        "moe_act",
        "layernorm",
    ]
    back = parse_megatron(" ".join(words), "args.txt", 32)
    assert back.config.recompute == "selective"
    assert back.config.recompute_modules == ("moe_act", "layernorm")
    assert "--recompute-modules" not in back.unknown
    # the default module list is not written
    assert "--recompute-modules" not in argv(megatron_args(_inputs(())))


def test_megatron_import_reads_module_lists():
    base = argv(megatron_args(_inputs(())))

    def read(*extra):
        return parse_megatron(" ".join([*base, *extra]), "args.txt", 32).config

    assert read("--recompute-modules", "core_attn").recompute_modules == ()
    assert read("--recompute-modules", "layernorm", "moe_act").recompute_modules == ("moe_act", "layernorm")
    # the deprecated --moe-layer-recompute is selective with "moe" added to the (default) list
    # (TransformerConfig), with or without --recompute-granularity selective
    assert read("--moe-layer-recompute").recompute_modules == ("core_attn", "moe")
    plain = [w for w in base if w not in ("--recompute-granularity", "selective")]
    layer = parse_megatron(" ".join([*plain, "--moe-layer-recompute"]), "args.txt", 32).config
    assert (layer.recompute, layer.recompute_modules) == ("selective", ("core_attn", "moe"))
    with pytest.raises(SpecError, match="--recompute-modules gdn_norm_out: planner prices core_attn"):
        read("--recompute-modules", "gdn_norm_out")


def test_torchtitan_has_no_recompute_modules():
    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    j = make_job(global_batch_size=256, seq_length=4096)
    c = resolve(m, cluster, j, _selective(("moe_act",)))
    assert any(
        "has no recompute module list" in v for v in get_framework("torchtitan").violations(m, cluster, j, c)
    )
    assert not get_framework("megatron").violations(m, cluster, j, c)


def test_search_offers_the_cheap_modules_where_the_framework_launches_them():
    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    j = make_job(global_batch_size=256, seq_length=4096)

    def modules(framework, recompute=None):
        r = Restrictions(framework=framework, tp=(1,), pp=(1,), recompute=recompute)
        return {c.recompute_modules for c in enumerate_shapes(m, cluster, j, r)}

    assert modules("megatron") == {(), ("moe_act", "layernorm")}
    assert modules("megatron", ("none",)) == {()}
    assert modules("torchtitan") == {()}
    dense = {
        c.recompute_modules for c in enumerate_shapes(load_model("llama3-8b"), cluster, j, Restrictions())
    }
    assert dense == {()}


def test_every_module_is_priced_on_some_layer():
    # each name of RECOMPUTE_MODULES changes a layer of DeepSeek-V3 (MLA, shared experts, dense
    # leading layers) or is its default
    cfg = ParallelConfig(tp=2, pp=1, ep=8, micro_batch_size=1, recompute="selective")
    base = _table("deepseek-v3", 32, cfg.with_(recompute_modules=("moe",)))[3]
    for name in RECOMPUTE_MODULES:
        t = _table("deepseek-v3", 32, cfg.with_(recompute_modules=(name,)))[3]
        assert t.moe.selective_dropped_bytes + t.dense.selective_dropped_bytes > 0, name
        if name != "moe":
            assert t.moe.selective_dropped_bytes != base.moe.selective_dropped_bytes, name


def test_cli_estimate_with_recompute_modules(run_cli):
    args = ["estimate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "4", "-b", "256", "-s", "4096"]
    args += ["--ep", "8", "--recompute", "selective", "--recompute-modules", "moe_act,layernorm", "--json"]
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["config"]["recompute_modules"] == ["moe_act", "layernorm"]
    bad = run_cli(*args[:-5], "--recompute-modules", "moe_act")
    assert bad.exit_code == 2 and "--recompute-modules needs --recompute selective" in bad.stderr
    typo = run_cli(*args[:-2], "moe_actt", "--json")
    assert typo.exit_code == 2 and "'moe_actt' is not allowed; allowed values: core_attn" in typo.stderr
    twice = run_cli(*args[:-2], "moe_act,moe_act", "--json")
    assert twice.exit_code == 2 and "listed twice" in twice.stderr


def test_search_takes_the_selective_module_list(run_cli):
    # tp 1, cp 1, pp 2 on 16 GPUs: the experts' activations do not fit unless the MoE block is
    # recomputed, so the plans found take the module list (whatever the calibration's ranking of
    # the roomier shapes, where recomputing core attention alone may come first).
    base = ["search", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    base += ["--tp", "1", "--cp", "1", "--pp", "2"]
    res = run_cli(*base, "--recompute", "selective", "--recompute-modules", "moe", "--json")
    assert res.exit_code == 0, res.stderr
    plans = json.loads(res.stdout)["plans"]
    assert {tuple(p.get("recompute_modules") or ()) for p in plans} <= {(), ("moe",)}
    assert any(p.get("recompute_modules") == ["moe"] for p in plans)
    # a dense model gets the variant only when asked for
    dense = ["search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    only = run_cli(*dense, "--recompute", "selective", "--recompute-modules", "mlp", "--json")
    assert {tuple(p.get("recompute_modules") or ()) for p in json.loads(only.stdout)["plans"]} <= {
        (),
        ("mlp",),
    }
    refused = run_cli(*dense, "--recompute-modules", "mlp", "--framework", "torchtitan")
    assert refused.exit_code == 2 and "has no recompute module list" in refused.stderr
    clash = run_cli(*dense, "--recompute-modules", "mlp", "--recompute", "none")
    assert clash.exit_code == 2 and "needs selective among --recompute" in clash.stderr


def test_calibration_reads_active_module_lists_only():
    from planner.calibration import cases as calibration

    by_id = {c.run_id: c for c in calibration.cases()}
    active = by_id["mbridge260401_b200_bf16_gptoss120b_64gpu"].config
    assert (active.recompute, active.recompute_modules) == ("selective", ("moe_act", "layernorm"))
    # the 25.11 recipe set the modules without --recompute-granularity: nothing recomputed
    inactive = by_id["mbridge2511_h100_bf16_gptoss120b_64gpu"].config
    assert (inactive.recompute, inactive.recompute_modules) == ("none", ())
    assert not any("priced as no recompute" in a for c in by_id.values() for a in c.assumptions)


def test_the_search_stage_model_tells_module_lists_apart():
    # the chain search caches a stage's cost model; a key without the module list handed one
    # variant's memory and time to the other
    from planner.search.stage_model import stage_model

    m = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 4)
    j = make_job(global_batch_size=256, seq_length=4096)
    base = ParallelConfig(tp=1, pp=2, ep=8, micro_batch_size=1, recompute="selective")
    core = resolve(m, cluster, j, base)
    cheap = resolve(m, cluster, j, base.with_(recompute_modules=("moe_act", "layernorm")))
    node = cluster.groups[0]
    a, b = stage_model(m, j, core, node, 0, 2.0), stage_model(m, j, cheap, node, 0, 2.0)
    assert b.act_per_layer_bytes < a.act_per_layer_bytes
    assert b.layer_s != a.layer_s  # the selective re-runs are part of a layer's time


def test_sweep_reports_the_module_list(run_cli, tmp_path):
    csv_path = tmp_path / "sweep.csv"
    res = run_cli(
        "sweep", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--nodes", "4", "-b", "256", "-s", "4096",
        "--csv", str(csv_path), "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    point = json.loads(res.stdout)["points"][0]
    assert point["recompute"] == "selective" and point["recompute_modules"] == ["moe_act", "layernorm"]
    header, row = csv_path.read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["recompute_modules"] == "moe_act layernorm"
