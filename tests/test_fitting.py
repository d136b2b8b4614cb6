"""Layout-group ranking statistics (planner.calibration.fitting) against hand-worked values."""

import math
from types import SimpleNamespace

from planner.calibration.ranking import group_ranking, spearman
from planner.calibration.run_records import source_of


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

    from planner.calibration.cases import cases

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


def test_lineage_table_is_a_tree_over_the_calibrated_families():
    """Every parent is itself in the table, the order puts parents first, and every family with
    published runs has an entry (so no fold falls back to the vendor-typical values silently)."""
    from planner.calibration.cases import cases
    from planner.calibration.descent import PARAMS
    from planner.calibration.fitting import LINEAGE, family, fitted_params, lineage_order, usable

    for fam, lin in LINEAGE.items():
        assert lin.parent is None or lin.parent in LINEAGE, fam
        assert len(lin.why) > 40, fam
        # a tied parameter is a fitted one, with its parent to take it from and its measurement
        assert set(lin.tied) <= set(PARAMS) and (not lin.tied or (lin.parent and len(lin.tied_why) > 40)), fam
        assert fitted_params(fam) == tuple(p for p in PARAMS if p not in lin.tied)
    order = lineage_order(LINEAGE)
    for fam, lin in LINEAGE.items():
        if lin.parent:
            assert order.index(lin.parent) < order.index(fam)
    assert lineage_order({"b200"}) == ["a100", "h100", "b200"]
    assert {family(c) for c in usable(cases())} <= set(LINEAGE)


def test_v100_16gb_runs_belong_to_the_v100_family():
    from planner.profiles.software import efficiency_family

    assert efficiency_family("v100-sxm2-16gb") == efficiency_family("v100-sxm2-32gb") == "v100"


def test_gb300_family_prices_the_racks_measured_gap():
    """GB300 is a family of its own under b200 (planner.calibration.fitting.LINEAGE): on the one layout the
    Megatron-Bridge 25.11 tables ran on both racks with the same recipe (Llama 3 8B FP8, 8 GPUs,
    measured 1.19x), the shipped fit predicts GB300 ahead of GB200 by most of the measured gap,
    where one set of values for both (the GPU files' equal dense peaks) gave 1.04x; the rest is
    attention, whose GB300 speed-up is the measured kernels' (tied, test_blackwell_ultra_attention)."""
    from planner.calibration.cases import cases
    from planner.calibration.descent import predict
    from planner.calibration.fitting import LINEAGE, family

    assert LINEAGE["gb300"].parent == "b200"
    by = {c.run_id: c for c in cases()}
    gb300 = by["mbridge2511_gb300_fp8cs_llama3_8b_8gpu"]
    gb200 = by["mbridge2511_gb200_fp8cs_llama3_8b_8gpu"]
    assert (family(gb300), family(gb200)) == ("gb300", "b200")
    assert (gb300.config, gb300.job) == (gb200.config, gb200.job)
    measured = gb300.measured_tokens_per_s_per_gpu / gb200.measured_tokens_per_s_per_gpu
    predicted = predict(gb300).predicted / predict(gb200).predicted
    assert 1.18 < measured < 1.20
    assert 1.08 < predicted < measured, (predicted, measured)


def test_transfer_keeps_fractions_and_the_per_call_gemm_time():
    """Fractions of peak, kernel overhead and overlap slowdown carry over; F_half scales with the
    16-bit peak (fixed time F_half / (e_max x peak) per GEMM call); the FP8 speed-up keeps its share
    of the FP8 / BF16 peak ratio; a GPU without FP8 gets 1.0."""
    from dataclasses import replace

    from planner.calibration.fitting import UNCALIBRATED, reference_peaks, transfer

    h100 = replace(
        UNCALIBRATED,
        gemm_efficiency_max=0.66,
        gemm_half_efficiency_flop=40e9,
        attention_efficiency=0.24,
        fp8_gemm_speedup=1.9,
        kernel_overhead_s=5e-6,
        comm_overlap_slowdown=0.3,
    )
    b200 = transfer(h100, "h100", "b200")
    assert (b200.gemm_efficiency_max, b200.attention_efficiency) == (0.66, 0.24)
    assert (b200.kernel_overhead_s, b200.comm_overlap_slowdown) == (5e-6, 0.3)
    # per-call GEMM time F_half / (e_max x peak) is the same on both chips: 2250 / 989.4 TFLOP/s
    t_h100 = h100.gemm_half_efficiency_flop / (0.66 * reference_peaks("h100")[0])
    t_b200 = b200.gemm_half_efficiency_flop / (0.66 * reference_peaks("b200")[0])
    assert math.isclose(t_h100, t_b200)
    assert math.isclose(b200.gemm_half_efficiency_flop, 40e9 * 2250 / 989.4)
    assert math.isclose(b200.fp8_gemm_speedup, 1.9 / (1978.9 / 989.4) * 2.0)
    v100 = transfer(h100, "a100", "v100")
    assert v100.fp8_gemm_speedup == 1.0 and v100.hbm_efficiency == UNCALIBRATED.hbm_efficiency
    assert math.isclose(v100.gemm_half_efficiency_flop, 40e9 * 125 / 312)


def test_prior_penalty_hand_worked_and_weighted_by_sources():
    """One prior width off on one parameter costs PRIOR_SCALE / sources x 1/2."""
    from dataclasses import replace

    from planner.calibration.descent import PRIOR_LOG_SD, PRIOR_SCALE, prior_penalty
    from planner.calibration.fitting import UNCALIBRATED

    assert prior_penalty(UNCALIBRATED, UNCALIBRATED, 1) == 0.0
    off = replace(
        UNCALIBRATED,
        gemm_efficiency_max=UNCALIBRATED.gemm_efficiency_max * math.exp(PRIOR_LOG_SD["gemm_efficiency_max"]),
    )
    assert math.isclose(prior_penalty(off, UNCALIBRATED, 1), PRIOR_SCALE / 2)
    assert math.isclose(prior_penalty(off, UNCALIBRATED, 4), PRIOR_SCALE / 8)
    # parameters that may be 0 are compared with a floor, so 0 is a finite distance away
    assert math.isfinite(prior_penalty(replace(UNCALIBRATED, kernel_overhead_s=0.0), UNCALIBRATED, 1))


def _small_set():
    """Three A100 runs of two sources, three H100 runs, and the Blackwell runs' one source."""
    from planner.calibration.cases import cases
    from planner.calibration.fitting import family, usable

    runs = usable(cases())
    a100 = [c for c in runs if family(c) == "a100" and c.source.startswith("Korthikanti")][:2]
    a100 += [c for c in runs if family(c) == "a100" and c.source.startswith("Narayanan")][:1]
    h100 = [c for c in runs if family(c) == "h100" and c.source.startswith("NVIDIA NeMo")][:3]
    b200 = [c for c in runs if family(c) == "b200"][:2]
    return a100 + h100 + b200


def test_family_without_runs_keeps_its_lineage_parents_fit():
    """fit_families: a family with no runs (b200 here) gets its parent's fit transferred, and the
    parent (h100) was fitted from the transferred A100 fit."""
    from planner.calibration.fitting import family, fit_families, transfer

    runs = [c for c in _small_set() if family(c) != "b200"]
    out = fit_families(runs, {"b200"}, passes=1, steps=(0.9, 1.1))
    assert list(out) == ["a100", "h100", "b200"]
    assert out["b200"][2] == 0 and math.isnan(out["b200"][1])
    assert out["b200"][0] == transfer(out["h100"][0], "h100", "b200")


def test_a_tied_parameter_is_left_out_of_the_familys_fit(monkeypatch):
    """fit_families asks fit for every parameter of a family except its tied ones (gb300: the
    attention efficiency), so that one stays the prior's, the b200 fit transferred."""
    import planner.calibration.fitting as fitting
    from planner.calibration.cases import cases

    asked = {}

    def fake_fit(group, start, passes, steps, only=fitting.PARAMS, prior=None):
        asked.setdefault(fitting.family(group[0]), set()).add(only)
        return start, 0.0

    monkeypatch.setattr(fitting, "fit", fake_fit)
    monkeypatch.setattr(fitting, "_FITS", {})
    gb300 = [c for c in fitting.usable(cases()) if fitting.family(c) == "gb300"][:2]
    out = fitting.fit_families(_small_set() + gb300, {"gb300"}, passes=1, steps=(0.9, 1.1))
    assert asked["gb300"] == {tuple(p for p in fitting.PARAMS if p != "attention_efficiency")}
    assert asked["b200"] == asked["h100"] == {fitting.PARAMS}
    prior = fitting.transfer(out["b200"][0], "b200", "gb300")
    assert out["gb300"][0].attention_efficiency == prior.attention_efficiency


def test_base_is_fitted_on_the_class_free_runs_when_three_sources_have_them():
    """base_runs / fit_families: a family whose class-free runs come from MIN_BASE_SOURCES sources
    has its base fitted on those, started from the fit on all its runs (which sets what they cannot
    inform: here the MoE numbers, fitted on the Megatron-Bridge MoE runs only); with fewer such
    sources, or no class runs, the base is the fit on all runs."""
    from planner.calibration.cases import cases
    from planner.calibration.fitting import (
        MIN_BASE_SOURCES,
        base_runs,
        family,
        fit_cached,
        fit_families,
        prior_of,
        usable,
    )

    runs = usable(cases())
    h100 = [c for c in runs if family(c) == "h100"]
    free = [c for c in h100 if not c.software and not c.model.is_moe]
    by_source = {}
    for c in free:
        by_source.setdefault(c.source, c)
    free3 = sorted(by_source.values(), key=lambda c: c.run_id)[:MIN_BASE_SOURCES]
    bridge_moe = [c for c in h100 if c.software.startswith("megatron-bridge") and c.model.is_moe][:1]
    assert len(free3) == MIN_BASE_SOURCES and bridge_moe
    group = free3 + bridge_moe
    assert base_runs(group) == free3
    assert base_runs(free3[:2] + bridge_moe) == free3[:2] + bridge_moe  # two sources: all runs
    assert base_runs(free3) == free3  # no class runs

    out = fit_families(group, {"h100"}, passes=1, steps=(0.9, 1.1))
    eff, _, count = out["h100"]
    assert count == MIN_BASE_SOURCES
    prior = prior_of("h100", {"a100": out["a100"][0]})
    all_runs = fit_cached(tuple(group), prior, 1, (0.9, 1.1))[0]
    assert eff == fit_cached(tuple(free3), prior, 1, (0.9, 1.1), start=all_runs)[0]
    # the class-free runs are dense: the MoE numbers are the all-runs fit's, moved off the prior
    assert (all_runs.grouped_gemm_efficiency, all_runs.host_launch_s) != (
        prior.grouped_gemm_efficiency,
        prior.host_launch_s,
    )
    assert eff.grouped_gemm_efficiency == all_runs.grouped_gemm_efficiency
    assert eff.host_launch_s == all_runs.host_launch_s
    assert eff != all_runs


def test_fold_holding_out_a_familys_only_source_predicts_with_the_parents_fit():
    """Leave-one-source-out: with Megatron-Bridge held out no Blackwell run is left, so its runs are
    predicted with the fold's H100 fit transferred (not the vendor-typical values, not the shipped fit)."""
    from planner.calibration.descent import predict
    from planner.calibration.fitting import family, fit_families, transfer
    from planner.calibration.folds import LOSO_STEPS, source_fold

    cases_ = _small_set()
    source = next(c.source for c in cases_ if family(c) == "b200")
    notes, results = source_fold((source, cases_, 1))
    rest = [c for c in cases_ if c.source != source]
    fitted = fit_families(rest, {"b200"}, 1, LOSO_STEPS)
    expected = transfer(fitted["h100"][0], "h100", "b200")
    assert any("b200 fitted on 0 runs, prior from h100" in n for n in notes), notes
    for r in results:
        assert r.case.source == source and family(r.case) == "b200"
        assert math.isclose(r.predicted, predict(r.case, expected).predicted)


def test_measured_kernels_set_the_h100_gemm_and_attention_prior():
    """H100's GEMM curve and attention priors are its measured kernels' (docs/calibration.md: e_max
    0.735, F_half 9.4 GFLOP on the GEMMs' GPU times; causal flash attention 0.13-0.29 of peak as
    planner charges it), the rest comes from the A100 parent; a family without measurements (b200)
    takes the transfer only."""
    from planner.calibration.fitting import UNCALIBRATED, kernel_prior, prior_of, transfer

    k = kernel_prior("h100")
    assert math.isclose(k["gemm_efficiency_max"], 0.735, abs_tol=0.002)
    assert math.isclose(k["gemm_half_efficiency_flop"], 9.44e9, rel_tol=0.01)
    # the attention curve's ceiling: the measured 0.13-0.29 (1,024-8,192 keys) over keys / (keys + K_half)
    assert 0.29 < k["attention_efficiency"] < 0.34
    prior = prior_of("h100", {"a100": UNCALIBRATED})
    assert prior.attention_efficiency == k["attention_efficiency"]
    assert prior.kernel_overhead_s == UNCALIBRATED.kernel_overhead_s
    assert kernel_prior("b200") == {}
    assert prior_of("b200", {"h100": prior}) == transfer(prior, "h100", "b200")


def test_gemm_gpu_times_remove_the_dispatch_of_single_call_timings():
    """Files timed one call between two events hold the host's dispatch (their ``launch`` entry):
    it is subtracted and GEMMs it dominates are left out; back-to-back timings are kept as they are."""
    import json

    from planner.calibration.kernel_curves import GEMM_LATENCY_KEEP, MEASUREMENTS_DIR, gemm_gpu_times

    rows = [{"flop": 1e9, "time_s": 30e-6}, {"flop": 1e11, "time_s": 200e-6}, {"flop": 2e9, "time_s": 40e-6}]
    old = {"gemm": rows, "launch": {"kernel": "tiny add", "time_s": 20e-6}}
    got = gemm_gpu_times(old)
    assert [g["flop"] for g, _ in got] == [1e11, 2e9]  # 30 us < 2 x 20 us: left out
    assert [round(t * 1e6, 6) for _, t in got] == [180.0, 20.0]
    assert GEMM_LATENCY_KEEP == 2.0
    new = {**old, "back_to_back": True}
    assert [t for _, t in gemm_gpu_times(new)] == [30e-6, 200e-6, 40e-6]
    h100 = json.loads((MEASUREMENTS_DIR / "h100-sxm5-80gb-kernels.json").read_text())
    assert len(gemm_gpu_times(h100)) == 90 and not h100.get("back_to_back")


def test_fit_moves_a_threshold_parameter_off_a_flat_start():
    """The host launch time changes nothing until an MoE pass is host-bound: the fit's absolute grid
    (planner.calibration.descent.GRID) finds it where multiplicative steps from a flat start would not."""
    from dataclasses import replace

    from cost_models.constraints import resolve
    from cost_models.parallel import ParallelConfig
    from planner.calibration.cases import Case
    from planner.calibration.descent import fit, predict
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m, job = load_model("qwen3-30b-a3b"), make_job(global_batch_size=32, seq_length=2048)
    base = load_cluster("dgx-h100", 1)
    eff = base.groups[0].gpu.efficiency
    truth = replace(eff, host_launch_s=60e-6)
    cases = []
    for mbs in (1, 2):
        c = resolve(m, base, job, ParallelConfig(tp=1, pp=1, ep=8, micro_batch_size=mbs))
        probe = Case(f"mbs{mbs}", "h100-sxm5-80gb", m, base, job, c, 1.0, source="synthetic")
        measured = predict(probe, truth).predicted
        cases.append(replace(probe, measured_tokens_per_s_per_gpu=measured))
    start = replace(eff, host_launch_s=10e-6)
    assert predict(cases[0], start).predicted > 1.05 * cases[0].measured_tokens_per_s_per_gpu
    fitted, err = fit(cases, start, only=("host_launch_s",))
    assert fitted.host_launch_s == 60e-6 and err < 1e-9


def _dense_cases(sources):
    """Synthetic dense cases on one H100 node, one per (source, micro-batch) pair."""
    from cost_models.constraints import resolve
    from cost_models.parallel import ParallelConfig
    from planner.calibration.cases import Case
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model
    from planner.profiles.hardware import load_cluster

    m, job = load_model("llama3-8b"), make_job(global_batch_size=64, seq_length=2048)
    cluster = load_cluster("dgx-h100", 1)
    out = []
    for i, (source, mbs) in enumerate(sources):
        c = resolve(m, cluster, job, ParallelConfig(tp=1, pp=1, micro_batch_size=mbs))
        out.append(Case(f"c{i}", "h100-sxm5-80gb", m, cluster, job, c, 1.0, source=source))
    return out


def test_source_loss_weighs_every_source_the_same():
    """planner.calibration.descent.source_loss: the mean over sources of each source's mean |log error|, so a
    source with three runs counts as much as one with one run (loss() weighs runs)."""
    from dataclasses import replace

    from planner.calibration.descent import loss, predict, source_loss

    probe = _dense_cases([("A", 1), ("A", 2), ("A", 4), ("B", 1)])
    eff = probe[0].cluster.groups[0].gpu.efficiency
    pred = [predict(c, eff).predicted for c in probe]
    # A's runs measured 10% above the prediction, B's run 50% above.
    cases = [
        replace(c, measured_tokens_per_s_per_gpu=p * (1.5 if c.source == "B" else 1.1))
        for c, p in zip(probe, pred)
    ]
    a, b = math.log(1.1), math.log(1.5)
    assert math.isclose(source_loss(cases, eff), (a + b) / 2)
    assert math.isclose(loss(cases, eff), (3 * a + b) / 4)


def test_attention_half_keys_is_the_measured_kernels_fit():
    """cost_models.compute.ATTENTION_HALF_KEYS is the fit of the size curve to the causal
    flash-attention cases measured on H100 and H200 (hardware_profiles/measurements), and the curve
    describes them far better than one constant efficiency."""
    import json

    import numpy as np

    from cost_models.compute import ATTENTION_HALF_KEYS
    from planner.calibration.fitting import reference_peaks
    from planner.calibration.kernel_curves import MEASUREMENTS_DIR, attention_points, fit_attention_curve

    keys, eff = [], []
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        data = json.loads((MEASUREMENTS_DIR / f"{name}-kernels.json").read_text())
        k, e = attention_points(data, reference_peaks("h100")[0])
        keys.append(k)
        eff.append(e)
    keys, eff = np.concatenate(keys), np.concatenate(eff)
    ceiling, half = fit_attention_curve(keys, eff)
    assert math.isclose(half, ATTENTION_HALF_KEYS, rel_tol=0.02)
    curve = np.log(ceiling * keys / (keys + half)) - np.log(eff)
    constant = np.log(np.exp(np.mean(np.log(eff)))) - np.log(eff)
    assert np.sqrt(np.mean(curve**2)) < 0.1 < 0.2 < np.sqrt(np.mean(constant**2))


def test_ridge_moves_keep_the_fp8_gemm_rate_and_only_move_the_split():
    """FP8 GEMMs run at ceiling x speed-up: the ridge moves change the split, never the product,
    stay inside both bounds, and are tried only when both parameters are fitted."""
    import math
    from dataclasses import replace

    from planner.calibration.descent import BOUNDS, RIDGE, ridge_moves
    from planner.profiles.hardware import load_gpu

    eff = replace(load_gpu("h100-sxm5-80gb").efficiency, gemm_efficiency_max=0.6, fp8_gemm_speedup=1.5)
    moves = ridge_moves(eff, list(RIDGE), (0.9, 1.1, 10.0))
    assert len(moves) == 2  # x 10 leaves the ceiling's bounds
    for m in moves:
        assert math.isclose(
            m.gemm_efficiency_max * m.fp8_gemm_speedup, eff.gemm_efficiency_max * eff.fp8_gemm_speedup
        )
        assert m.gemm_efficiency_max != eff.gemm_efficiency_max
        for name in RIDGE:
            lo, hi = BOUNDS[name]
            assert lo <= getattr(m, name) <= hi
    assert ridge_moves(eff, ["gemm_efficiency_max"], (0.9, 1.1)) == []


def test_moe_runs_do_not_move_the_dense_parameters():
    """A group with dense and MoE runs fits the shared numbers on its dense runs, then the MoE-only
    numbers on its MoE runs: MoE runs slower than their GEMMs explain change the grouped-GEMM
    efficiency, not the dense GEMM ceiling every dense prediction reads."""
    from dataclasses import replace

    from cost_models.constraints import resolve
    from cost_models.parallel import ParallelConfig
    from planner.calibration.cases import Case
    from planner.calibration.descent import fit, predict

    dense = _dense_cases([("A", 1), ("A", 2), ("B", 4)])
    eff = replace(dense[0].cluster.groups[0].gpu.efficiency, host_launch_s=0.0, grouped_gemm_efficiency=0.9)
    truth = replace(eff, gemm_efficiency_max=eff.gemm_efficiency_max * 0.9)
    dense = [replace(c, measured_tokens_per_s_per_gpu=predict(c, truth).predicted) for c in dense]
    from planner.inputs.jobs import make_job
    from planner.inputs.models import load_model

    m, job = load_model("qwen3-30b-a3b"), make_job(global_batch_size=32, seq_length=8192)
    cluster = dense[0].cluster
    moe = []
    for mbs in (1, 2):
        c = resolve(m, cluster, job, ParallelConfig(tp=1, pp=1, ep=8, micro_batch_size=mbs))
        probe = Case(f"moe{mbs}", "h100-sxm5-80gb", m, cluster, job, c, 1.0, source="C")
        # 30% slower than the dense truth prices it: an MoE-only effect
        moe.append(replace(probe, measured_tokens_per_s_per_gpu=predict(probe, truth).predicted * 0.7))
    only = ("gemm_efficiency_max", "grouped_gemm_efficiency")
    both, _ = fit(dense + moe, eff, passes=4, only=only)
    dense_only, _ = fit(dense, eff, passes=4, only=only)
    assert both.gemm_efficiency_max == dense_only.gemm_efficiency_max
    assert math.isclose(both.gemm_efficiency_max, truth.gemm_efficiency_max, rel_tol=0.06)
    assert both.grouped_gemm_efficiency < eff.grouped_gemm_efficiency  # the MoE runs' slowness lands here
    # dense runs of one source only (a release profile): one joint fit, the MoE runs move the ceiling
    one_source = [replace(c, source="A") for c in dense]
    joint, _ = fit(one_source + moe, eff, passes=4, only=only)
    assert joint.gemm_efficiency_max != dense_only.gemm_efficiency_max
