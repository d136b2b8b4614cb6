"""InternVL3 8B, a vision-language graph preset (issue 56, item 4): InternViT-300M over the image's
tiles, the pixel-shuffle MLP projector and the Qwen2.5 7B decoder. The parameter count is pinned to
a count worked by hand from the config's shapes and to the model card; each tile attends only to
itself; the search returns a plan and export megatron refuses it with the reason."""

from __future__ import annotations

import pytest

from cost_models.graph_units import unit_costs, unit_layout
from cost_models.parallel import ParallelConfig
from planner.inputs.graph_model import load_graph_model
from planner.inputs.jobs import make_job
from planner.profiles.hardware import load_cluster


def _internvl3_8b_by_hand() -> int:
    """OpenGVLab/InternVL3-8B shapes (the ViT's layer scales left out, as the preset documents)."""
    h, f = 1024, 4096
    vit_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    patch = 3 * 14 * 14 * h + h + h + 1025 * h  # conv with bias, class token, positions
    projector = 2 * 4 * h + 4 * h * 3584 + 3584 + 3584 * 3584 + 3584
    d, kv, ffn, vocab = 3584, 4 * 128, 18944, 151674
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * ffn + 2 * d
    return patch + 24 * vit_layer + projector + 28 * layer + 2 * vocab * d + d


def test_parameter_count():
    g = load_graph_model("internvl3-8b")
    assert g.params_total == _internvl3_8b_by_hand() == 7_944_324_608
    assert g.params_total == pytest.approx(8e9, rel=0.01)  # the model card's "8B"


def test_each_tile_attends_only_to_itself():
    """5 tiles of 1,025 tokens: every ViT layer's attention is 5 chunks of 1,025 keys, not one
    sequence of 5,125."""
    node = load_cluster("dgx-h100", 1).groups[0]
    job = make_job(global_batch_size=8, seq_length=4096)
    c = ParallelConfig(recompute="none", optimizer_sharding="none")
    g = load_graph_model("internvl3-8b")
    lay, uc = unit_layout(g), unit_costs(g, job, c, node)
    unit = {(g.blocks[bi].name, k): u for u, (bi, k) in enumerate(zip(lay.block, lay.layer))}
    s, tile, h, f = 5125, 1025, 1024, 4096
    span = s * (5 * tile * (tile + 1) / 2) / (s * (s + 1) / 2)  # chunked keys per query
    gemms = 2 * s * (4 * h * h + 2 * h * f)
    assert uc.cost[unit[("vision", 0)]].model_flop == pytest.approx(3 * (gemms + 4 * s * span * h))
    assert uc.cost[unit[("vision", 0)]].model_flop == uc.cost[unit[("vision", 23)]].model_flop


def test_search_returns_a_plan_and_megatron_export_refuses_it(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    job = ["-m", "internvl3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    res = run_cli("search", *job, "--top", "1", "--out", str(plan), "-q")
    assert res.exit_code == 0, res.stderr
    assert "internvl3-8b" in run_cli("models", "list").stdout
    res = run_cli("export", "megatron", str(plan), "--out", str(tmp_path / "launch"), "-q")
    # Megatron-Core's LLaVA model builds no InternViT tower: one line naming the blocks and the
    # best sequential plan's flags (docs/models.md, "Vision-language presets").
    assert res.exit_code == 1 and res.stdout == "" and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot express internvl3-8b's blocks" in lines[0], lines
    assert "--tensor-model-parallel-size" in lines[0]
