"""ZB-V (Qi et al. 2023, Sec. 6; torch ``ScheduleZBVZeroBubble``, torchtitan's ``ZBVZeroBubble``):
the order torch runs, the V placement through the simulator, the estimate and the trace, its
memory and bubble, and where it is searched, exported and imported."""

from __future__ import annotations

import pytest

from cost_models import schedules as S
from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from planner.frameworks import get_framework
from planner.frameworks.torchtitan import EAGER_TORCHTITAN
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.outputs.trace import chrome_trace
from planner.profiles.hardware import load_cluster
from planner.search.bounds import cheap_bound

# torch 2.14 ScheduleZBVZeroBubble._calculate_single_rank_operations for pp 2, 4 micro-batches
# (stage r -> chunk 0, stage 2p-1-r -> chunk 1, I -> B), read from the installed torch
TORCH_P2_M4 = [
    [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (1, 1, 0), (2, 1, 0), (0, 1, 1), (1, 1, 1), (2, 1, 1),
     (0, 0, 3), (1, 0, 0), (2, 0, 0), (0, 1, 2), (1, 1, 2), (2, 1, 2), (1, 0, 1), (2, 0, 1), (0, 1, 3),
     (1, 1, 3), (2, 1, 3), (1, 0, 2), (2, 0, 2), (1, 0, 3), (2, 0, 3)],
    [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1), (1, 1, 0), (2, 1, 0), (0, 0, 2), (1, 0, 0), (2, 0, 0),
     (0, 1, 2), (1, 1, 1), (2, 1, 1), (0, 0, 3), (1, 0, 1), (2, 0, 1), (0, 1, 3), (1, 1, 2), (2, 1, 2),
     (1, 0, 2), (1, 1, 3), (1, 0, 3), (2, 0, 2), (2, 1, 3), (2, 0, 3)],
]  # fmt: skip


def test_the_order_is_torchs():
    assert S.generate("zb-v", 2, 4, 2) == TORCH_P2_M4
    with pytest.raises(S.ScheduleError, match="exactly 2 chunks"):
        S.generate("zb-v", 2, 4, 3)


def test_the_order_is_torchs_for_many_shapes():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    kind = {
        schedules._ComputationType.FORWARD: S.F,
        schedules._ComputationType.BACKWARD_INPUT: S.B,
        schedules._ComputationType.BACKWARD_WEIGHT: S.W,
    }
    for p in range(2, 7):
        for m in range(1, 3 * p + 2):
            torch_schedule = object.__new__(schedules.ScheduleZBVZeroBubble)
            torch_schedule.pp_group_size, torch_schedule._n_microbatches = p, m
            torch_schedule.num_stages = 2 * p
            ours = S.generate("zb-v", p, m, 2)
            for r in range(p):
                actions = [a for a in torch_schedule._calculate_single_rank_operations(r) if a is not None]
                theirs = [
                    (kind[a.computation_type], int(a.stage_index != r), a.microbatch_index) for a in actions
                ]
                assert theirs == ours[r], (p, m, r)
                assert {a.stage_index for a in actions} <= {r, 2 * p - 1 - r}


def test_the_v_placement():
    p = 4
    for vs in range(2 * p):
        r = S.stage_rank("zb-v", p, vs)
        assert vs in S.rank_stages("zb-v", p, 2, r)
        assert S.virtual_stage("zb-v", p, r, S.rank_stages("zb-v", p, 2, r).index(vs)) == vs
    assert S.rank_stages("zb-v", p, 2, 0) == [0, 7] and S.rank_stages("zb-v", p, 2, 3) == [3, 4]
    assert S.rank_stages("interleaved", p, 2, 0) == [0, 4]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_zero_bubble_inside_every_rank_and_1f1b_memory(p):
    # Equal F, B and W per chunk: every rank is busy from its first forward (at r) to its end, 6m
    # chunk-passes later, so the makespan is 6m + p - 1 (no post-validation: torch steps the
    # optimizer after the whole pipeline); each rank keeps at most 2p chunks, p micro-batches of a
    # whole stage, as 1F1B's first rank (Qi et al. 2023, Sec. 6).
    for m in (2 * p - 1, 2 * p, 3 * p + 1):
        tl = S.simulate(S.generate("zb-v", p, m, 2), S.uniform_durations(p, 2, 1.0, 1.0, 1.0), 0.0, m,
                        schedule_key=("zb-v", p, m, 2))  # fmt: skip
        for r in range(p):
            assert tl.start_s[r][0] == pytest.approx(r)
            assert tl.end_s[r][-1] - tl.start_s[r][0] == pytest.approx(6 * m)
            assert tl.peak_inflight(r) == pytest.approx(2 * p)
        assert tl.makespan_s == pytest.approx(6 * m + p - 1)
        assert S.peak_inflight("zb-v", p, m, 2) == (float(p),) * p
        assert S.peak_inflight("1f1b", p, m, 1)[0] == float(p)


def test_fewer_micro_batches_than_the_v_needs_still_run():
    for p in range(2, 6):
        for m in range(1, 2 * p - 1):
            tl = S.simulate(S.generate("zb-v", p, m, 2), S.uniform_durations(p, 2, 1.0, 1.0, 1.0), 0.0, m,
                            schedule_key=("zb-v", p, m, 2))  # fmt: skip
            assert sum(len(k) for k in tl.kind) == 2 * p * 3 * m


def _estimate(schedule="zb-v", vpp=2, pp=4, gbs=32):
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-a100", 2)
    job = make_job(global_batch_size=gbs, seq_length=2048)
    c = resolve(m, cluster, job, ParallelConfig(tp=2, pp=pp, vpp=vpp, micro_batch_size=1, schedule=schedule))
    return m, cluster, job, c, estimate(m, cluster, job, c)


def test_the_estimate_places_chunks_as_a_v():
    m, cluster, job, c, e = _estimate()
    layers = c.stage_layers(m)
    assert [s.layers for s in e.stages] == [(layers[r], layers[7 - r]) for r in range(4)]
    assert [list(map(int, set(v))) for v in e.timeline.vstage] == [sorted({r, 7 - r}) for r in range(4)]
    # the turn of the V (virtual stage 3 -> 4) stays on rank 3: its forward follows at once
    tl = e.timeline
    r = 3
    f3 = [
        i
        for i in range(len(tl.kind[r]))
        if tl.kind[r][i] == S.F and tl.vstage[r][i] == 3 and tl.mb[r][i] == 0
    ]
    f4 = [
        i
        for i in range(len(tl.kind[r]))
        if tl.kind[r][i] == S.F and tl.vstage[r][i] == 4 and tl.mb[r][i] == 0
    ]
    assert tl.start_s[r][f4[0]] == pytest.approx(tl.end_s[r][f3[0]])
    assert sum(v for _, v in e.time_breakdown()) == pytest.approx(e.step_time_s, rel=1e-12)
    assert cheap_bound(m, cluster, job, c) <= e.step_time_s
    sends = [ev for ev in chrome_trace(e, "t")["traceEvents"] if ev.get("cat") == "p2p"]
    assert sends and not any(ev["args"]["from_virtual_stage"] == 3 and ev["args"]["to_virtual_stage"] == 4
                             for ev in sends)  # fmt: skip
    for ev in sends:
        assert ev["args"]["stage"] == S.stage_rank("zb-v", 4, ev["args"]["to_virtual_stage"])


def test_it_beats_1f1b_and_zb_h1_at_about_1f1b_memory():
    est = {s: _estimate(s, v)[4] for s, v in (("1f1b", 1), ("zb-h1", 1), ("zb-v", 2), ("interleaved", 2))}
    assert est["zb-v"].step_time_s < est["zb-h1"].step_time_s < est["1f1b"].step_time_s
    assert est["zb-v"].bubble_fraction < est["zb-h1"].bubble_fraction < est["1f1b"].bubble_fraction
    # peaks in chunk units: 2p half-stage chunks on the ranks without the embedding and loss,
    # p micro-batches of a whole stage, as 1F1B's first rank
    assert [s.memory.peak_inflight_microbatches for s in est["zb-v"].stages[1:]] == [8.0] * 3
    act = {s: max(st.memory.activations_bytes for st in e.stages) for s, e in est.items()}
    # rank 0 holds both ends of the V, the embedding and the output layer's logits
    assert act["1f1b"] < act["zb-v"] < 1.15 * act["1f1b"] < act["interleaved"]


def test_it_needs_exactly_two_chunks():
    m, cluster = load_model("llama3-8b"), load_cluster("dgx-a100", 2)
    job = make_job(global_batch_size=32, seq_length=2048)
    for vpp in (1, 4):
        errors = violations(m, cluster, job, ParallelConfig(tp=2, pp=4, dp=2, vpp=vpp, schedule="zb-v"))
        assert any("exactly 2 chunks" in e for e in errors), vpp
    errors = violations(m, cluster, job, ParallelConfig(tp=2, pp=4, dp=2, vpp=2, schedule="zb-h1"))
    assert any("vpp = 2 needs the interleaved" in e for e in errors)


def test_torchtitan_runs_it_eager_and_megatron_does_not():
    m, cluster, job, c, _ = _estimate()
    assert get_framework("megatron").violations(m, cluster, job, c)
    titan = get_framework("torchtitan")
    fused = [v for v in titan.violations(m, cluster, job, c) if "torch.compile" in v]
    assert fused and "ZBVZeroBubble" in fused[0]
    eager = make_job(global_batch_size=32, seq_length=2048, eager_ops=EAGER_TORCHTITAN)
    assert not [v for v in titan.violations(m, cluster, eager, c) if "torch.compile" in v]


def test_the_search_tries_it_for_torchtitan(run_cli):
    args = ("search", "-m", "llama3-8b", "-c", "dgx-a100", "-n", "2", "-b", "32", "-s", "2048",
            "--tp", "2", "--pp", "4", "--framework", "torchtitan", "--eager-ops", "rope,activation",
            "--top", "40", "--json")  # fmt: skip
    r = run_cli(*args)
    assert r.exit_code == 0, r.stderr
    assert '"schedule": "zb-v"' in r.stdout
    only = run_cli(*args, "--schedule", "zb-v")
    assert only.exit_code == 0, only.stderr
    assert '"schedule": "zb-v"' in only.stdout and '"schedule": "1f1b"' not in only.stdout
    refused = run_cli(*args[:-11], "--framework", "megatron", "--schedule", "zb-v", "--json")
    assert refused.exit_code != 0 and "zb-v" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout


def test_the_search_memory_model_puts_the_output_layer_on_rank_0():
    from planner.search.stage_model import stage_model

    m, cluster, job, c, e = _estimate()
    node = cluster.groups[0]
    v_first = stage_model(m, job, c, node, 0, 8.0)
    v_last = stage_model(m, job, c, node, 3, 8.0)
    inter = c.with_(schedule="interleaved")
    i_first = stage_model(m, job, inter, node, 0, 8.0)
    i_last = stage_model(m, job, inter, node, 3, 8.0)
    # V: rank 0 holds the embedding and the output layer, rank 3 neither
    assert v_first.memory(8) > i_first.memory(8) and v_last.memory(8) < i_last.memory(8)
    assert v_first.memory(8) == pytest.approx(i_first.memory(8) + i_last.memory(8) - v_last.memory(8))


@pytest.mark.parametrize("recompute", ["none", "full", "selective"])
def test_the_search_bounds_never_exceed_the_simulated_step(recompute):
    from planner.search.bounds import refined_bound

    m, cluster = load_model("llama3-8b"), load_cluster("dgx-a100", 2)
    for pp, mbs, gbs in ((2, 1, 16), (4, 1, 32), (4, 2, 64), (8, 1, 8), (8, 1, 64)):
        job = make_job(global_batch_size=gbs, seq_length=2048)
        c = resolve(
            m,
            cluster,
            job,
            ParallelConfig(
                tp=16 // pp, pp=pp, vpp=2, micro_batch_size=mbs, schedule="zb-v", recompute=recompute
            ),
        )
        step = estimate(m, cluster, job, c).step_time_s
        assert cheap_bound(m, cluster, job, c) <= step and refined_bound(m, cluster, job, c) <= step, (
            pp,
            mbs,
            gbs,
        )
