"""Hybrid Mamba-2 / gated DeltaNet models exported for Megatron-LM and read back (issue 56): the
pinned release's pretrain_hybrid.py with --hybrid-layer-pattern (pipeline stages as | segments),
the Mamba-2 shape and the hybrid layer spec; gated DeltaNet in pretrain_gpt.py with
--experimental-attention-variant gated_delta_net; validate_args' refusals named by flag; search ->
export -> check at the plan's step time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.parallel import ParallelConfig
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_yaml import model_to_mapping
from planner.inputs.models import load_model
from planner.launch.megatron.export import export_files
from planner.launch.megatron.export_args import args_text, megatron_args
from planner.launch.megatron.hybrid import HYBRID_SPEC, staged_pattern
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import plan_document, write_plan
from planner.profiles.hardware import load_cluster
from planner.profiles.software import cluster_families, default_software
from tests.test_export_round_trip import round_trip
from tests.test_megatron import inputs

NEMOTRON_8B = load_model("nemotron-h-8b").hybrid_layer_pattern


def _flags(plan) -> dict:
    args = megatron_args(plan)
    return dict(args)


def test_staged_pattern_cuts_in_virtual_stage_order():
    assert staged_pattern("M-M*-M-", (7,)) == "M-M*-M-"
    assert staged_pattern("M-M*-M-", (3, 0, 4)) == "M-M||*-M-"
    assert staged_pattern("MM*-", (1, 1, 1, 1)) == "M|M|*|-"


def test_nemotron_h_export_is_pretrain_hybrid():
    """examples/mamba/train.sh's flags: the pattern in place of --num-layers, the Mamba shape, the
    hybrid layer spec; the launch runs pretrain_hybrid.py with the Triton cache it sets."""
    plan = inputs("nemotron-h-8b", "dgx-h100", 1, 64, 8192, tp=2)
    flags = _flags(plan)
    assert "--num-layers" not in flags
    assert flags["--hybrid-layer-pattern"] == NEMOTRON_8B
    assert (flags["--mamba-state-dim"], flags["--mamba-head-dim"]) == ("128", "64")
    assert (flags["--mamba-num-heads"], flags["--mamba-num-groups"]) == ("128", "8")
    assert flags["--spec"] == HYBRID_SPEC
    assert "--squared-relu" in flags and flags["--position-embedding-type"] == "none"
    for launcher in ("torchrun", "slurm"):
        script = export_files(plan, launcher)[f"launch_{launcher}.sh"]
        assert "pretrain_hybrid.py" in script and "pretrain_gpt.py" not in script
        assert (
            "TRITON_CACHE_MANAGER=megatron.core.ssm.triton_cache_manager:ParallelFileCacheManager" in script
        )
    text = export_files(plan, "torchrun")["megatron_args.txt"]
    assert f"--spec {HYBRID_SPEC}\n" in text  # --spec takes two words (nargs='*')


def test_gpt_export_is_unchanged_by_the_hybrid_path():
    plan = inputs("llama3-8b", "dgx-h100", 1, 64, 4096, tp=2)
    flags = _flags(plan)
    assert flags["--num-layers"] == "32"
    assert not [f for f in flags if "mamba" in f or "hybrid" in f or "--linear-" in f or f == "--spec"]
    assert "pretrain_gpt.py" in export_files(plan, "torchrun")["launch_torchrun.sh"]


@pytest.mark.parametrize(
    ("config", "segments", "vpp"),
    [
        ({"tp": 2, "pp": 2}, (26, 26), 1),
        ({"tp": 1, "pp": 2, "vpp": 2, "schedule": "interleaved"}, (13, 13, 13, 13), 2),
        ({"tp": 2, "pp": 4, "layers_per_stage": (11, 14, 14, 13)}, (11, 14, 14, 13), 1),
        (
            {"tp": 1, "pp": 2, "vpp": 2, "schedule": "interleaved", "layers_per_stage": (12, 14, 14, 12)},
            None,
            2,
        ),
    ],
)
def test_pipeline_stages_are_pattern_segments(config, segments, vpp):
    """Each (virtual) stage is one | segment, in Megatron's order v * pp + rank, and none of the
    split flags validate_args refuses beside the pattern is written; the import reads the same
    stages back."""
    plan = inputs("nemotron-h-8b", "dgx-h100", 2, 64, 8192, **config)
    flags = _flags(plan)
    pattern = flags["--hybrid-layer-pattern"]
    layers = segments or config["layers_per_stage"]
    assert tuple(len(s) for s in pattern.split("|")) == layers
    assert pattern.replace("|", "") == NEMOTRON_8B
    refused = (
        "--num-virtual-stages-per-pipeline-rank",
        "--pipeline-model-parallel-layout",
        "--decoder-first",
    )
    assert not [f for f in flags if f.startswith(refused)]
    back = parse_megatron(args_text(megatron_args(plan)), "a.txt", plan.cluster.num_gpus)
    assert back.config.vpp == vpp and back.config.pp == plan.config.pp
    assert back.config.stage_layers(back.model) == layers
    assert back.config.schedule == ("interleaved" if vpp > 1 else "1f1b")


@pytest.mark.parametrize(
    ("name", "nodes", "config"),
    [
        ("nemotron-h-8b", 1, {"tp": 2}),
        ("nemotron-h-56b", 4, {"tp": 4, "pp": 2, "cp": 2, "recompute": "full"}),
        ("qwen3-next-80b-a3b", 4, {"tp": 2, "ep": 8, "cp": 2}),
    ],
)
def test_import_is_the_model_field_for_field(name, nodes, config):
    """Everything the export writes is read back: the imported model is the preset (its name
    aside), and no flag is left not interpreted."""
    plan = inputs(name, "dgx-h100", nodes, 256, 8192, **config)
    back = parse_megatron(args_text(megatron_args(plan)), name, plan.cluster.num_gpus)
    assert back.unknown == () and back.rejected == ()
    a, b = model_to_mapping(back.model), model_to_mapping(plan.model)
    a.pop("name"), b.pop("name"), a.pop("source", None), b.pop("source", None)
    assert a == b
    assert back.model.params_total == plan.model.params_total
    assert back.config.expert_tp == plan.config.expert_tp  # the launch states Megatron's default
    assert replace(back.config, etp=0) == plan.config


def test_qwen3_next_export_is_gated_delta_net_in_pretrain_gpt():
    """megatron-core 0.19.2's functional test gpt3_mcore_te_tp2_pp1_gdn runs these flags with
    pretrain_gpt.py."""
    plan = inputs("qwen3-next-80b-a3b", "dgx-h100", 4, 256, 4096, tp=2, ep=8)
    flags = _flags(plan)
    assert flags["--experimental-attention-variant"] == "gated_delta_net"
    assert flags["--linear-attention-freq"] == "4"
    expected = {
        "--linear-conv-kernel-dim": "4",
        "--linear-key-head-dim": "128",
        "--linear-value-head-dim": "128",
        "--linear-num-key-heads": "16",
        "--linear-num-value-heads": "32",
    }
    assert {f: flags[f] for f in expected} == expected
    assert "--attention-output-gate" in flags and flags["--num-layers"] == "48"
    assert "--spec" not in flags and "--hybrid-layer-pattern" not in flags
    assert "pretrain_gpt.py" in export_files(plan, "slurm")["launch_slurm.sh"]


MAMBA_EXAMPLE = Path(__file__).parent / "data" / "megatron" / "mamba_train_8b.sh"


def test_the_pinned_mamba_example_imports():
    """examples/mamba/train.sh of megatron-core 0.19.2 (core_r0.19.0), MODEL_SCALE 8B: 56 layers
    (24 Mamba, 4 attention, 28 MLP), Mamba defaults (state 128, head dim 64, 8 groups, heads
    2h/64 = 128), the hybrid spec read, no flag left not interpreted."""
    imp = parse_megatron(MAMBA_EXAMPLE.read_text(), str(MAMBA_EXAMPLE), 8, vocab_size=256000)
    m = imp.model
    assert imp.is_script and m.num_layers == 56
    assert (m.hybrid_layer_pattern.count("M"), m.hybrid_layer_pattern.count("*")) == (24, 4)
    assert m.hybrid_layer_pattern.count("-") == 28
    assert (m.mamba_state_dim, m.mamba_head_dim, m.mamba_num_groups, m.mamba_num_heads) == (128, 64, 8, 128)
    assert imp.config.tp == 4 and imp.config.sp
    assert imp.unknown == () and imp.rejected == ()


SHAPE = (
    "--hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 --global-batch-size 8 "
    "--vocab-size 32000 "
)


def _hybrid(extra: str, pattern: str = "M-M*-M-M-M*-M-") -> str:
    return SHAPE + f"--hybrid-layer-pattern {pattern} " + extra


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _hybrid("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2"),
            "validate_args",
        ),
        (_hybrid("--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split"), "refuses"),
        (
            _hybrid("--pipeline-model-parallel-size 3", "M-M*|-M-M|-M*-M-|M-"),
            "4 pipeline segments, not a multiple of --pipeline-model-parallel-size 3",
        ),
        (
            _hybrid(
                "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3", "M-M*-M|-M-M*-M-"
            ),
            "with a | in --hybrid-layer-pattern",
        ),
        (_hybrid("--pipeline-model-parallel-size 3"), "not divisible by --pipeline-model-parallel-size 3"),
        (_hybrid("", "M-M*/MM"), "MTP"),
        (_hybrid("", "M-D-"), "has 'D'"),
        (_hybrid("--hybrid-override-pattern M-M-"), "cannot both be given"),
        (_hybrid("", "M-E-"), "num_experts is 0"),
        (_hybrid("--mamba-num-groups 3"), "must be divisible by mamba_num_groups (3)"),
        (SHAPE + "--num-layers 4 --experimental-attention-variant dsa", "dsa"),
        (
            SHAPE + "--num-layers 4 --experimental-attention-variant gated_delta_net",
            "without --linear-attention-freq",
        ),
        (
            SHAPE
            + "--num-layers 4 --experimental-attention-variant gated_delta_net --linear-attention-freq ([1]*3+[0])",
            "integer form",
        ),
    ],
)
def test_import_refusals_name_the_flag(text, message):
    with pytest.raises(SpecError) as err:
        parse_megatron(text, "a.txt", 8)
    assert message in str(err.value)
    assert str(err.value).startswith("a.txt")


def test_pipe_free_patterns_split_as_select_pipeline_segment():
    """Without | the layers split evenly over pp, or by --decoder-first/last-pipeline-num-layers
    (megatron/core/models/hybrid/hybrid_layer_allocation.py select_pipeline_segment)."""
    even = parse_megatron(_hybrid("--pipeline-model-parallel-size 2"), "a.txt", 8)
    assert even.config.stage_layers(even.model) == (7, 7) and even.config.vpp == 1
    first = parse_megatron(
        _hybrid("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 5"), "a", 8
    )
    assert first.config.layers_per_stage == (5, 9)
    assert parse_megatron(_hybrid("--num-layers 99"), "a", 8).model.num_layers == 14  # the pattern wins
    assert parse_megatron(_hybrid("--spec my.module my_spec"), "a", 8).unknown == ("--spec",)


def test_gated_delta_net_defaults_are_transformer_configs():
    m = parse_megatron(
        SHAPE + "--num-layers 8 --experimental-attention-variant gated_delta_net --linear-attention-freq 4",
        "a.txt",
        8,
    ).model
    shape = (m.linear_conv_kernel_dim, m.linear_key_head_dim, m.linear_value_head_dim)
    assert shape + (m.linear_num_key_heads, m.linear_num_value_heads) == (4, 128, 128, 16, 32)
    mixers = [m.layer_parts(i)[0] for i in range(8)]
    assert mixers == (["gdn"] * 3 + ["attention"]) * 2  # get_linear_attention_pattern: (i + 1) % 4 == 0


def _case(name="nemotron-h-8b", nodes=2, precision="bf16"):
    m = load_model(name)
    return (
        m,
        load_cluster("dgx-h100", nodes),
        JobSpec(global_batch_size=64, seq_length=8192, precision=precision),
    )


def test_megatron_runs_hybrid_layouts():
    """Tensor, context, pipeline (uneven, interleaved) parallelism and the distributed optimizer are
    inside Megatron's space for a hybrid model; torchtitan has no such model."""
    m, cluster, job = _case()
    megatron = get_framework("megatron")
    for c in (
        ParallelConfig(tp=2, pp=1, dp=8),
        ParallelConfig(tp=2, cp=2, pp=2, dp=2, optimizer_sharding="distributed"),
        ParallelConfig(tp=1, pp=2, vpp=2, dp=8, schedule="interleaved", layers_per_stage=(12, 14, 14, 12)),
    ):
        assert megatron.violations(m, cluster, job, c) == [], c
    titan = get_framework("torchtitan").violations(m, cluster, job, ParallelConfig(tp=2, dp=8))
    assert any("hybrid layer pattern" in v for v in titan)


def test_megatron_refuses_what_hybrid_stacks_do_not_run():
    m, cluster, job = _case()
    megatron = get_framework("megatron")
    offload = ParallelConfig(tp=2, dp=8, offload_layers=2)
    assert any(
        "HybridStack has no CPU offloading" in v for v in megatron.violations(m, cluster, job, offload)
    )
    # MambaMixer's FP8 assert: 2 d_inner + 2 G N + H = 2 * 1000 + 2 * 2 * 16 + 10 = 2074, not a multiple of 16
    odd = replace(m, hybrid_layer_pattern="M-M-", num_layers=4, mamba_head_dim=100, mamba_num_heads=10)
    odd = replace(odd, mamba_num_groups=2, mamba_state_dim=16)
    _, _, fp8 = _case(precision="fp8")
    reasons = megatron.violations(odd, cluster, fp8, ParallelConfig(tp=2, dp=8))
    assert any("2 d_inner + 2 G N + H = 2074" in r for r in reasons)
    assert not [r for r in megatron.violations(m, cluster, fp8, ParallelConfig(tp=2, dp=8)) if "FP8" in r]
    wide = replace(m, mamba_conv_kernel=3)
    reasons = megatron.violations(wide, cluster, job, ParallelConfig(tp=2, dp=8))
    assert any("mamba_conv_kernel 4 (MambaMixer; no flag changes it), not 3" in r for r in reasons)


@pytest.mark.parametrize(("name", "nodes"), [("nemotron-h-8b", 1), ("qwen3-next-80b-a3b", 4)])
def test_search_export_check_round_trip(name, nodes, run_cli, tmp_path):
    """The default search's best plan (framework megatron) exports, and check predicts its step time
    from megatron_args.txt and both launch scripts within 0.5%."""
    plan = tmp_path / "plan.yaml"
    job = ["-m", name, "-c", "dgx-h100", "-n", str(nodes), "-b", "256", "-s", "4096"]
    res = run_cli("search", *job, "--top", "1", "--out", str(plan), "-q")
    assert res.exit_code == 0, res.stderr
    times = round_trip(plan, load_cluster("dgx-h100", nodes), tmp_path / "launch")
    for what, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (what, times)


def test_interleaved_uneven_plan_round_trips(tmp_path):
    plan = inputs(
        "nemotron-h-8b",
        "dgx-h100",
        2,
        64,
        8192,
        tp=2,
        pp=2,
        vpp=2,
        schedule="interleaved",
        layers_per_stage=(12, 14, 14, 12),
    )
    plan = replace(plan, software=default_software("megatron", cluster_families(plan.cluster)))
    path = tmp_path / "plan.yaml"
    write_plan(path, plan_document(plan, {}, None))
    times = round_trip(path, plan.cluster, tmp_path / "launch")
    for what, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (what, times)
