"""Every golden Megatron export round-trips through ``planner check`` (issue 54, item 4; issue 55):
the plan of each golden case (tests/test_megatron.py CASES, whose exports tests/golden holds) and
the README's main job, exported with both launchers, then checked as a user checks a launch: the
step time predicted from the exported files is the plan's, within 0.5%. A slow-marked variant does
the same for the default plan of every sequential preset (planner search's best on DGX H100 nodes
sized to the model, :func:`_default_job`), the presets the Megatron-LM framework refuses named with
the reason (:data:`REFUSED_BY_MEGATRON`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner import api
from planner.launch.check import check_file
from planner.plans.plan_file import plan_document, write_plan
from planner.profiles.software import cluster_families, default_software
from tests.test_megatron import CASES

LAUNCH_FILES = ("megatron_args.txt", "launch_torchrun.sh", "launch_slurm.sh")


def _step_time(path: Path, cluster=None) -> float:
    verdict = check_file(str(path), cluster)
    errors = [f.message for f in verdict.findings if f.level == "error"]
    assert not errors, f"{path.name}: {errors}"
    assert not [f for f in verdict.findings if "not interpreted" in f.message], verdict.findings
    return verdict.metrics["step_time_s"]


def round_trip(plan_path: Path, cluster, out: Path) -> dict[str, float]:
    """The plan's step time and each exported launch file's, as check predicts them."""
    times = {"plan": _step_time(plan_path)}
    for launcher in ("torchrun", "slurm"):
        api.write_export(out, api.export_megatron(plan_path, launcher), force=True)
    for name in LAUNCH_FILES:
        times[name] = _step_time(out / name, cluster)
    return times


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_export_re_checks_at_the_plans_step_time(name, tmp_path):
    plan = CASES[name]()
    software = default_software("megatron", cluster_families(plan.cluster))
    plan = replace(plan, software=software)
    path = tmp_path / "plan.yaml"
    write_plan(path, plan_document(plan, {}, None))
    times = round_trip(path, plan.cluster, tmp_path / "launch")
    for name_, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (name_, times)


def test_readme_main_job_re_checks_at_the_plans_step_time(tmp_path, readme_plan):
    plan, cluster, _ = readme_plan
    times = round_trip(plan, cluster, tmp_path / "launch")
    for name_, t in times.items():
        assert t == pytest.approx(times["plan"], rel=5e-3), (name_, times)


REFUSED_BY_MEGATRON = {
    "llama4-maverick": "has no chunked attention",
    "llama4-scout": "has no chunked attention",
    "opt-175b": "has no plain ReLU MLP flag",
    "falcon-h1-3b": "has no layer running attention and a Mamba-2 mixer side by side",
    "falcon-h1-7b": "has no layer running attention and a Mamba-2 mixer side by side",
    "falcon-h1-34b": "has no layer running attention and a Mamba-2 mixer side by side",
    "gemma3-12b": "has no GeGLU flag",
    "gemma3-27b": "has no GeGLU flag",
    "jamba-1.5-mini": "has no Mamba-1 layer",
    "kimi-linear-48b-a3b": "has no Kimi Delta Attention (KDA) layer",
}
"""Presets planner search under --framework megatron refuses (exit 3) with the reason named: the
export has no flags for them (Megatron-LM's framework capabilities, planner/frameworks/megatron.py).
Should a later export learn one, its plan must round-trip like every other."""


def _default_job(name: str) -> list[str]:
    """A preset's default search: DGX H100 nodes for about 20 bytes a parameter at 60% of the GPU
    memory (a power of two, 1-128 nodes), 256 sequences (1,024 from 16 nodes) of 4,096 tokens (or
    the model's context, if shorter)."""
    import math

    from planner.inputs.models import load_model

    m = load_model(name)
    nodes = max(1, min(128, 2 ** math.ceil(math.log2(max(1.0, m.params_total * 20 / (8 * 80e9 * 0.6))))))
    gbs = 1024 if nodes >= 16 else 256
    seq = min(4096, m.max_position_embeddings)
    return ["-m", name, "-c", "dgx-h100", "-n", str(nodes), "-b", str(gbs), "-s", str(seq)]


def _sequential_presets() -> list[str]:
    from planner.inputs.graph_model import graph_preset_names
    from planner.inputs.models import model_preset_names

    return sorted(set(model_preset_names()) - set(graph_preset_names()))


@pytest.mark.slow  # 50 searches, about 100 s of CPU (docs/ci.md)
@pytest.mark.parametrize("name", _sequential_presets())
def test_every_presets_default_plan_re_checks_at_its_step_time(name, run_cli, tmp_path):
    """Issue 55: every preset's default search plan exports with the default framework (megatron)
    and re-checks within 0.5%."""
    plan, launch = tmp_path / "plan.yaml", tmp_path / "launch"
    job = _default_job(name)
    res = run_cli("search", *job, "--top", "1", "--out", str(plan), "-q")
    if name in REFUSED_BY_MEGATRON and res.exit_code == 3:
        assert REFUSED_BY_MEGATRON[name] in res.stderr, res.stderr
        return
    assert res.exit_code == 0, res.stderr
    assert run_cli("export", "megatron", str(plan), "--out", str(launch), "-q").exit_code == 0
    res = run_cli("check", str(plan), str(launch / "megatron_args.txt"), *job[2:6], "--json")
    configs = json.loads(res.stdout)["configs"]
    assert res.exit_code == 0, res.stdout
    planned, imported = (c["metrics"]["step_time_s"] for c in configs)
    assert imported == pytest.approx(planned, rel=5e-3)
    assert not [f["message"] for c in configs for f in c["findings"] if "not interpreted" in f["message"]]


@pytest.mark.parametrize("name", ["mmt-4tower-4b", "t5-11b", "vlm-two-tower-13b"])
def test_graph_presets_default_plans_are_refused_with_the_reason(name, run_cli, tmp_path):
    """The graph presets (multi-block DAGs: towers, encoder-decoder) have no pretrain_gpt.py model:
    their default search returns a graph plan, and export megatron refuses it in one line that
    names Megatron-LM, the blocks it cannot express and the best sequential plan's parallel flags
    (planner/plans/graph_plan.py); no traceback, nothing written."""
    plan, launch = tmp_path / "plan.yaml", tmp_path / "launch"
    job = ["-m", name, "-c", "dgx-h100", "-n", "1", "-b", "256", "-s", "4096"]
    assert run_cli("search", *job, "--top", "1", "--out", str(plan), "-q").exit_code == 0
    res = run_cli("export", "megatron", str(plan), "--out", str(launch), "-q")
    assert res.exit_code == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Megatron-LM's pretrain_gpt.py cannot express" in lines[0], lines
    assert "--tensor-model-parallel-size" in lines[0] and "Traceback" not in res.stderr
    assert not launch.exists()


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2"])
def test_latent_attention_and_mtp_import_back(model):
    """The MLA and MTP flags the export writes are read back (they re-checked 11.9% and 5.0% off as
    flags not interpreted): the imported model is the preset, parameter for parameter."""
    from planner.launch.megatron.export_args import args_text, megatron_args
    from planner.launch.megatron.importer import parse_megatron
    from tests.test_megatron import inputs

    plan = inputs(model, "dgx-h100", 8, 256, 4096, tp=8, ep=8)
    back = parse_megatron(args_text(megatron_args(plan)), model, plan.cluster.num_gpus)
    assert back.unknown == ()
    fields = ("multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim")
    for field in (*fields, "v_head_dim", "mtp_num_layers", "params_total"):
        assert getattr(back.model, field) == getattr(plan.model, field), field


def test_latent_attention_defaults_and_exclusions():
    from planner.inputs.errors import SpecError
    from planner.launch.megatron.importer import parse_megatron

    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 1000 "
    base += "--micro-batch-size 1 --global-batch-size 8 --multi-latent-attention"
    m = parse_megatron(base, "a.txt", 8).model
    # megatron/training/arguments.py _add_mla_args: --q-lora-rank None, 32, 128, 64, 128
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim) == (
        0,
        32,
        128,
        64,
        128,
    )
    with pytest.raises(SpecError, match="--group-query-attention with --multi-latent-attention"):
        parse_megatron(base + " --group-query-attention --num-query-groups 4", "a.txt", 8)
    assert not parse_megatron(
        base.replace(" --multi-latent-attention", " --kv-lora-rank 64"), "a", 8
    ).model.multi_latent_attention
