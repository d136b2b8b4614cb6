"""The simulator against closed forms (oracles) and invariants on random inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.schedules import B, F, ScheduleError, W, generate, simulate, uniform_durations


def idle_per_stage(tl):
    return [tl.idle_s(s) for s in range(tl.num_stages)]


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 32), (3, 7), (8, 8)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_closed_form_gpipe_1f1b(schedule, p, m):
    tf, tb = 1.0, 2.0
    tl = simulate(generate(schedule, p, m), uniform_durations(p, 1, tf, tb))
    assert idle_per_stage(tl) == pytest.approx([(p - 1) * (tf + tb)] * p)
    assert tl.makespan_s == pytest.approx((m + p - 1) * (tf + tb))
    assert tl.bubble_fraction() == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4), (8, 16, 3)])
def test_interleaving_divides_bubble_by_v(p, m, v):
    tf, tb = 1.0, 2.0
    tl = simulate(generate("interleaved", p, m, v), uniform_durations(p, v, tf / v, tb / v))
    assert idle_per_stage(tl) == pytest.approx([(p - 1) * (tf + tb) / v] * p)


@pytest.mark.parametrize("p,m", [(2, 5), (4, 8), (8, 32), (5, 12), (3, 3)])
@pytest.mark.parametrize("tf,tb,tw", [(1, 1, 1), (1, 1.5, 0.7), (1.2, 1, 0.9)])
def test_zb_h1_bubble(p, m, tf, tb, tw):
    tl = simulate(generate("zb-h1", p, m), uniform_durations(p, 1, tf, tb, tw))
    assert idle_per_stage(tl) == pytest.approx([(p - 1) * (tf + tb - tw)] * p)


@pytest.mark.parametrize("p,m", [(2, 6), (4, 8), (8, 32), (5, 12), (8, 24)])
@pytest.mark.parametrize("tf,tb,tw", [(1, 1, 1), (1, 1.1, 0.8), (1.2, 1.3, 0.9)])
def test_zb_h2_bubble_without_a_barrier(p, m, tf, tb, tw):
    # Qi et al. 2023 Table 2: ZB-H2's bubble is (p - 1)(T_F + T_B - 2 T_W), zero at equal times, once
    # consecutive iterations overlap (optimizer post-validation): each rank's own span
    tl = simulate(generate("zb-h2", p, m), uniform_durations(p, 1, tf, tb, tw)).aligned()
    assert all(float(s[0]) == 0.0 for s in tl.start_s)
    assert tl.makespan_s == pytest.approx(m * (tf + tb + tw) + (p - 1) * (tf + tb - 2 * tw))
    assert tl.bubble_fraction() == pytest.approx(
        sum(tl.makespan_s - tl.busy_s(r) for r in range(p)) / (p * tl.makespan_s)
    )


@pytest.mark.parametrize("p,m", [(4, 8), (8, 24)])
def test_zb_h2_holds_the_papers_activation_budget(p, m):
    # Qi et al. 2023 Sec. 2.3: rank r (0-based) holds (2(p - r) - 1) M_B + 2r M_W at its peak
    f = 0.4
    tl = simulate(generate("zb-h2", p, m), uniform_durations(p, 1, 1.0, 1.0, 1.0), 0.0, m, f)
    assert [tl.peak_inflight(r) for r in range(p)] == pytest.approx(
        [2 * (p - r) - 1 + 2 * r * f for r in range(p)]
    )
    # and its warm-up runs exactly the forwards that fit before the first backward arrives
    for r, ops in enumerate(generate("zb-h2", p, m)):
        assert next(i for i, op in enumerate(ops) if op[0] != F) == min(2 * (p - r) - 1, m)


def test_aligning_a_barrier_schedule_changes_nothing_for_its_first_rank():
    tl = simulate(generate("1f1b", 4, 8), uniform_durations(4, 1, 1.0, 2.0))
    assert tl.aligned().makespan_s == pytest.approx(tl.makespan_s)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 32), (4, 2)])
def test_1f1b_inflight(p, m):
    tl = simulate(generate("1f1b", p, m), uniform_durations(p, 1, 1.0, 2.0))
    assert [tl.peak_inflight(s) for s in range(p)] == [min(p - s, m) for s in range(p)]
    g = simulate(generate("gpipe", p, m), uniform_durations(p, 1, 1.0, 2.0))
    assert [g.peak_inflight(s) for s in range(p)] == [m] * p


def test_interleaved_first_stage_holds_more():
    p, m, v = 4, 8, 2
    tl = simulate(generate("interleaved", p, m, v), uniform_durations(p, v, 0.5, 1.0))
    # Narayanan et al.: p + (p-1)/v stage-equivalents = (p*v + p - 1) chunks on the first rank... as simulated
    assert tl.peak_inflight(0) == pytest.approx(2 * (p - 1) + (v - 1) * p + 1)


def test_every_operation_runs_once():
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("zb-h2", 1), ("interleaved", 3)):
        p, m = 4, 8
        orders = generate(schedule, p, m, v)
        kinds = (F, B, W) if schedule in ("zb-h1", "zb-h2") else (F, B)
        for r, ops in enumerate(orders):
            assert sorted(ops) == sorted({(k, c, j) for k in kinds for c in range(v) for j in range(m)})


def test_interleaved_needs_m_divisible_by_p():
    with pytest.raises(ScheduleError, match="divisible"):
        generate("interleaved", 4, 6, 2)


@st.composite
def pipelines(draw):
    schedule = draw(st.sampled_from(["gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved"]))
    p = draw(st.integers(1, 6))
    v = draw(st.integers(2, 3)) if schedule == "interleaved" else 1
    if schedule == "interleaved":
        p = max(p, 2)
        m = p * draw(st.integers(1, 3))
    else:
        m = draw(st.integers(1, 12))
    n = p * v
    durs = np.array(
        draw(
            st.lists(
                st.tuples(st.floats(0.1, 3), st.floats(0.1, 3), st.floats(0.0, 2)), min_size=n, max_size=n
            )
        )
    )
    if schedule not in ("zb-h1", "zb-h2"):
        durs[:, 1] += durs[:, 2]
        durs[:, 2] = 0
    p2p = np.array(draw(st.lists(st.floats(0, 0.5), min_size=n, max_size=n)))
    return schedule, p, m, v, durs, p2p


@settings(max_examples=150, deadline=None)
@given(pipelines())
def test_conservation_and_causality_on_random_pipelines(case):
    schedule, p, m, v, durs, p2p = case
    tl = simulate(generate(schedule, p, m, v), durs, p2p, m)
    total_busy = sum(tl.busy_s(s) for s in range(p))
    total_idle = sum(tl.idle_s(s) for s in range(p))
    assert total_busy + total_idle == pytest.approx(p * tl.makespan_s)
    # busy time equals the work given: every op ran exactly once with its duration
    work = m * float(durs.sum())
    assert total_busy == pytest.approx(work)
    for s in range(p):
        starts, ends = tl.start_s[s], tl.end_s[s]
        assert np.all(ends >= starts)
        assert np.all(starts[1:] >= ends[:-1] - 1e-9)  # one op at a time per stage
        assert tl.inflight[s].min() >= -1e-9
        assert tl.inflight[s][-1] == pytest.approx(0.0, abs=1e-9)


def test_interleaved_warmup_when_microbatches_equal_pp():
    # Megatron-Core 0.19.2 get_pp_rank_microbatches and torch ScheduleInterleaved1F1B
    # (_get_warmup_ops): 2 (p - r - 1) + (v - 1) p warm-up forwards, capped at m v; no "all forwards
    # first when m == p" (Megatron-LM before 2024-11 only)
    p, m, v = 8, 8, 2
    orders = generate("interleaved", p, m, v)
    for r, ops in enumerate(orders):
        warm = min(2 * (p - r - 1) + (v - 1) * p, m * v)
        first_backward = next(i for i, op in enumerate(ops) if op[0] != F)
        # the steady state opens with one more forward before its first backward
        assert first_backward == (warm + 1 if warm < m * v else m * v)
    last = simulate(orders, uniform_durations(p, v, 0.5, 1.0))
    assert last.peak_inflight(p - 1) == (v - 1) * p + 1  # not all m v chunk-micro-batches


def _asap_oracle(orders, durs, p2p, m):
    """Every operation's start by fixpoint relaxation, independent of any execution order: start =
    max(the rank's previous end, the dependency's end + transfer), iterated until nothing moves."""
    p, n = len(orders), durs.shape[0]
    where = {}
    for r, ops in enumerate(orders):
        for i, (k, c, j) in enumerate(ops):
            where[(k, c * p + r, j)] = (r, i)
    start = [[0.0] * len(o) for o in orders]

    def dep(k, vs, j):
        if k == F:
            return ((F, vs - 1, j), p2p[vs - 1]) if vs > 0 else (None, 0.0)
        if k == B:
            return ((B, vs + 1, j), p2p[vs]) if vs < n - 1 else ((F, vs, j), 0.0)
        return (B, vs, j), 0.0

    def end(r, i):
        k, c, _ = orders[r][i]
        return start[r][i] + durs[c * p + r, k]

    for _ in range(sum(len(o) for o in orders) + 1):
        moved = False
        for r, ops in enumerate(orders):
            for i, (k, c, j) in enumerate(ops):
                t = end(r, i - 1) if i else 0.0
                d, lag = dep(k, c * p + r, j)
                if d is not None:
                    t = max(t, end(*where[d]) + lag)
                if t != start[r][i]:
                    start[r][i], moved = t, True
        if not moved:
            return start
    raise AssertionError("no fixpoint")


@settings(max_examples=60, deadline=None)
@given(pipelines())
def test_every_operation_starts_as_soon_as_it_can(case):
    """The simulator's cached execution order gives what relaxing every dependency to a fixpoint
    gives (each op at max(its rank's previous end, its dependency's end + transfer)), and the cached
    and uncached paths agree exactly."""
    schedule, p, m, v, durs, p2p = case
    orders = generate(schedule, p, m, v)
    tl = simulate(orders, durs, p2p, m)
    cached = simulate(orders, durs, p2p, m, schedule_key=(schedule, p, m, v))
    oracle = _asap_oracle(orders, durs, p2p, m)
    for r in range(p):
        assert tl.start_s[r].tolist() == pytest.approx(oracle[r], abs=1e-12)
        for a, b in zip(
            (tl.start_s, tl.end_s, tl.inflight, tl.kind, tl.chunk, tl.mb),
            (cached.start_s, cached.end_s, cached.inflight, cached.kind, cached.chunk, cached.mb),
        ):
            assert np.array_equal(a[r], b[r])


def test_a_deadlocking_order_names_the_rank_and_operation():
    orders = generate("1f1b", 2, 2)
    orders[1] = [(B, 0, 0), (F, 0, 0), (F, 0, 1), (B, 0, 1)]  # rank 1 waits on its own forward
    # so rank 0's first backward, which needs rank 1's, never starts either: the first rank stuck
    with pytest.raises(ScheduleError, match=r"deadlocks: rank 0 waits forever at operation \(1, 0, 0\)"):
        simulate(orders, uniform_durations(2, 1, 1.0, 2.0), 0.0, 2)


def test_timelines_sharing_a_cached_structure_cannot_change_it():
    key = ("1f1b", 4, 8, 1)
    a = simulate(generate(*key), uniform_durations(4, 1, 1.0, 2.0), 0.0, 8, schedule_key=key)
    with pytest.raises(ValueError):
        a.kind[0][0] = 1  # shared with every later timeline of the same schedule: read-only
    b = simulate(generate(*key), uniform_durations(4, 1, 1.0, 2.0), 0.0, 8, schedule_key=key)
    assert np.array_equal(a.kind[0], b.kind[0])
