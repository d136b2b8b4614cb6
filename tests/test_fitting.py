"""Layout-group ranking statistics (planner.fitting) against hand-worked values."""

import math
from types import SimpleNamespace

from planner.calibration import source_of
from planner.fitting import group_ranking, spearman


def _r(group, predicted, measured):
    return SimpleNamespace(
        predicted=predicted, case=SimpleNamespace(group=group, measured_tokens_per_s_per_gpu=measured)
    )


def test_spearman_hand_worked():
    assert math.isclose(spearman([1, 2, 3, 4], [10, 20, 30, 40]), 1.0)
    assert math.isclose(spearman([1, 2, 3, 4], [40, 30, 20, 10]), -1.0)
    # one swap among four: 1 - 6 * 2 / (4 * 15) = 0.8
    assert math.isclose(spearman([1, 2, 3, 4], [10, 30, 20, 40]), 0.8)
    assert math.isnan(spearman([1.0], [2.0]))


def test_group_ranking_top1_and_loss():
    rows = group_ranking(
        [
            _r("g", 4.0, 90.0),
            _r("g", 3.0, 100.0),
            _r("g", 2.0, 80.0),
            _r("g", 1.0, 70.0),
            _r("small", 1.0, 1.0),
        ]
    )
    assert [g["group"] for g in rows] == ["g"]  # groups under 4 runs are left out
    g = rows[0]
    assert g["runs"] == 4 and g["top1"] is False
    assert math.isclose(g["loss_following_prediction"], 0.1)
    assert math.isclose(g["predicted_spread"], 4.0) and math.isclose(g["measured_spread"], 100 / 70)


def test_source_is_the_citation_title_head():
    assert (
        source_of({"id": "x", "source": {"title": "Narayanan et al. 2021, 'Efficient ...'"}})
        == "Narayanan et al. 2021"
    )
    assert source_of(
        {"id": "x", "source": {"title": "pytorch/torchtitan docs/performance.md (Llama 2/3)"}}
    ) == ("pytorch/torchtitan docs/performance.md")


def test_cases_map_blackwell_runs_and_moe_fields(tmp_path):
    """Published runs on GB200/B200 get their node templates; MoE fields under the names sources use."""
    import yaml

    from planner.calibration import cases

    run = {
        "id": "example_gb200_moe",
        "source": {"title": "Example source, a table"},
        "group": "g1",
        "model": {
            "name": "moe",
            "num_layers": 16,
            "hidden_size": 2048,
            "ffn_hidden_size": 8192,
            "num_attention_heads": 16,
            "num_query_groups": 4,
            "vocab_size": 32000,
            "seq_length": 4096,
            "activation": "swiglu",
            "moe": {
                "num_experts": 64,
                "top_k": 8,
                "expert_ffn_hidden_size": 1024,
                "shared_expert_intermediate_size": 2048,
            },
        },
        "hardware": {"gpu": "GB200", "gpu_memory_gb": 186, "total_gpus": 72},
        "parallel": {
            "tp": 1,
            "pp": 1,
            "cp": 1,
            "ep": 8,
            "global_batch_size": 576,
            "micro_batch_size": 1,
            "precision": "bf16",
            "recompute": "none",
            "distributed_optimizer": True,
        },
        "measured": {"tokens_per_sec_per_gpu": 10000.0},
    }
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    (case,) = cases(path)
    assert not case.skip_reason, case.skip_reason
    assert case.gpu == "gb200" and case.cluster.num_gpus == 72 and case.cluster.groups[0].num_nodes == 18
    m = case.model
    assert (
        m.num_experts,
        m.moe_router_topk,
        m.moe_ffn_hidden_size,
        m.moe_shared_expert_intermediate_size,
    ) == (
        64,
        8,
        1024,
        2048,
    )
    assert case.source == "Example source" and case.group == "g1"
