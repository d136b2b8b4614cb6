"""Stage-graph simulator (groundwork for graph pipeline parallelism): chain equivalence and
invariants on random DAGs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.graph_schedule import depths, simulate_graph, topological_order
from cost_models.schedules import ScheduleError, generate, simulate


@pytest.mark.parametrize("p,m", [(1, 3), (2, 5), (4, 8), (6, 3)])
def test_chain_equals_1f1b(p, m):
    rng = np.random.default_rng(p * 10 + m)
    d = np.stack([rng.uniform(0.2, 2, p), rng.uniform(0.5, 3, p)], 1)
    lag = rng.uniform(0, 0.3, max(p - 1, 1))[: p - 1]
    g = simulate_graph(p, [(i, i + 1) for i in range(p - 1)], d, m, lag)
    c = simulate(generate("1f1b", p, m), np.column_stack([d, np.zeros(p)]), np.append(lag, 0.0), m)
    assert g.makespan_s == pytest.approx(c.makespan_s)
    for s in range(p):
        assert np.allclose(g.start_s[s], c.start_s[s]) and np.allclose(g.end_s[s], c.end_s[s])


def test_parallel_branches_run_concurrently():
    # two branches (0 -> 2, 1 -> 2): the branch stages overlap in time, unlike a chain 0 -> 1 -> 2
    d = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    branched = simulate_graph(3, [(0, 2), (1, 2)], d, 8)
    chained = simulate_graph(3, [(0, 1), (1, 2)], d, 8)
    assert branched.makespan_s < chained.makespan_s
    assert depths(3, [(0, 2), (1, 2)]) == [2, 2, 1]
    assert [branched.peak_inflight(s) for s in range(3)] == [2, 2, 1]


def test_cycles_and_bad_edges_are_rejected():
    with pytest.raises(ScheduleError, match="cycle"):
        topological_order(3, [(0, 1), (1, 2), (2, 0)])
    with pytest.raises(ScheduleError, match="distinct stages"):
        topological_order(2, [(0, 5)])


@st.composite
def dags(draw):
    n = draw(st.integers(1, 7))
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if draw(st.booleans())]
    m = draw(st.integers(1, 10))
    d = np.array(draw(st.lists(st.tuples(st.floats(0.1, 3), st.floats(0.1, 3)), min_size=n, max_size=n)))
    lags = draw(st.lists(st.floats(0, 0.5), min_size=len(edges), max_size=len(edges)))
    return n, edges, m, d, lags


@settings(max_examples=150, deadline=None)
@given(dags())
def test_graph_invariants_on_random_dags(case):
    n, edges, m, d, lags = case
    tl = simulate_graph(n, edges, d, m, lags)
    busy = sum(tl.busy_s(s) for s in range(n))
    idle = sum(tl.idle_s(s) for s in range(n))
    assert busy + idle == pytest.approx(n * tl.makespan_s)
    assert busy == pytest.approx(m * float(d.sum()))
    end = {}
    for s in range(n):
        assert np.all(tl.start_s[s][1:] >= tl.end_s[s][:-1] - 1e-9)
        assert tl.inflight[s].min() >= -1e-9 and tl.inflight[s][-1] == pytest.approx(0.0)
        for i in range(len(tl.kind[s])):
            end[(int(tl.kind[s][i]), s, int(tl.mb[s][i]))] = (tl.start_s[s][i], tl.end_s[s][i])
    for (u, v), lag in zip(edges, lags):  # causality along every edge, both directions
        for j in range(m):
            assert end[(0, v, j)][0] >= end[(0, u, j)][1] + lag - 1e-9
            assert end[(1, u, j)][0] >= end[(1, v, j)][1] + lag - 1e-9
