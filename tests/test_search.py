"""Search against brute force, partition solvers against each other, and plan validity."""

import itertools
import json
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate, node_of_stage
from cost_models.parallel import ParallelConfig
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster
from planner.search.chain import search, sort_key
from planner.search.partition import (
    StageModel,
    brute_force_partition,
    dp_partition,
    ilp_partition,
)
from planner.search.placement_dp import placement_partition
from planner.search.shape_partition import canonical_split, full_recompute_variants
from planner.search.space import Restrictions, enumerate_shapes
from planner.search.stage_model import inflight_for, stage_model


def random_stages(rng, p, L, homogeneous):
    base = dict(
        layer_s=1.0,
        recompute_s=0.3,
        extra_s=0.0,
        static_per_layer_bytes=1.0,
        act_per_layer_bytes=0.5,
        ckpt_per_layer_bytes=0.1,
        transient_bytes=0.5,
        extra_static_bytes=0.0,
        extra_act_bytes=0.0,
        inflight=1.0,
        reserve_bytes=0.0,
        fragmentation=0.05,
        capacity_bytes=100.0,
    )
    out = []
    rec = rng.choice([0, L])
    for i in range(p):
        d = dict(base, inflight=float(p - i), capacity_bytes=rng.uniform(4, 30), recompute_layers=rec)
        if not homogeneous:
            d.update(layer_s=rng.uniform(0.5, 2), recompute_layers=rng.choice([0, L, 2]))
        if i in (0, p - 1):
            d.update(extra_s=rng.choice([0.0, 0.5, 1.3]), extra_static_bytes=rng.choice([0.0, 1.0]))
        out.append(StageModel(**d))
    return out


def test_dp_equals_brute_force_on_random_instances():
    rng = random.Random(7)
    for trial in range(400):
        p, m = rng.randint(1, 5), rng.randint(1, 9)
        L = rng.randint(p, 12)
        stages = random_stages(rng, p, L, homogeneous=trial % 2 == 0)
        a, b = dp_partition(stages, L, m), brute_force_partition(stages, L, m)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.layers == b.layers
            assert a.objective_s == pytest.approx(b.objective_s, rel=1e-9)


def _min_sum_by_rows(times, L, bound):
    """The min-sum DP's rule written out: every stage, every layer count k in increasing order,
    a later k taking a column only when smaller by more than 1e-15."""
    import numpy as np

    inf = float("inf")
    f = [0.0] + [inf] * L
    choice = []
    for t in times:
        g, arg = [inf] * (L + 1), [0] * (L + 1)
        for k in range(1, L + 1):
            if not t[k] <= bound + 1e-15 or not np.isfinite(t[k]):
                continue
            for j in range(k, L + 1):
                cand = f[j - k] + t[k]
                if cand < g[j] - 1e-15:
                    g[j], arg[j] = cand, k
        f = g
        choice.append(arg)
    if f[L] == inf:
        return inf, []
    layers, j = [], L
    for arg in reversed(choice):
        layers.append(arg[j])
        j -= arg[j]
    return f[L], layers[::-1]


def test_min_sum_dp_keeps_its_tie_rule_on_float_noise():
    """The vectorised min-sum DP (a matrix per stage, the row scan only where near-ties exist)
    returns the same value and layers as the rule written out, on random, integer, linear and
    noisy-linear stage times (ties exact and within float noise) and every kind of bound."""
    import numpy as np

    from planner.search.partition import INF, min_sum

    rng = random.Random(11)
    checked = 0
    for trial in range(600):
        p = rng.randint(1, 6)
        L = rng.randint(p, 24)
        kind = trial % 4
        times = []
        for _ in range(p):
            cap = rng.randint(1, L)
            if kind == 0:
                base = [rng.random() * k + rng.random() for k in range(L + 1)]
            elif kind == 1:
                base = [float(rng.randint(0, 3) + k) for k in range(L + 1)]
            elif kind == 2:
                base = [0.1 * k + rng.choice([0.0, 0.3]) for k in range(L + 1)]
            else:
                a = 0.1 * (1 + rng.random() * 1e-15)
                base = [a * k + 0.01 * (k % 3 == 0) for k in range(L + 1)]
            times.append(np.array([base[k] if 1 <= k <= cap else INF for k in range(L + 1)]))
        finite = np.unique(np.concatenate([t[np.isfinite(t)] for t in times]))
        for bound in [INF, *finite[:: max(1, len(finite) // 4)]]:
            value, layers = min_sum(times, L, bound)
            ref_value, ref_layers = _min_sum_by_rows(times, L, bound)
            assert layers == ref_layers and (value == ref_value or value == ref_value == INF)
            checked += 1
    assert checked > 2000


def test_ilp_agrees_with_dp_on_homogeneous_instances():
    rng = random.Random(11)
    for _ in range(25):
        p, m = rng.randint(2, 4), rng.randint(1, 8)
        L = rng.randint(p, 10)
        stages = random_stages(rng, p, L, homogeneous=True)
        a = dp_partition(stages, L, m)
        ilp = ilp_partition([[s] for s in stages], [p], L, m)
        assert (a is None) == (ilp is None)
        if a is not None:
            assert ilp.objective_s == pytest.approx(a.objective_s, rel=1e-6)


def test_ilp_places_node_groups_optimally():
    # Two GPU types: the ILP's assignment and partition equal the best over every assignment.
    rng = random.Random(3)
    for _ in range(15):
        p, m = 4, rng.randint(2, 8)
        L = rng.randint(p, 10)
        slots = [2, 2]
        options = []
        for i in range(p):
            row = []
            for g, speed in enumerate((1.0, 0.6)):
                row.append(
                    StageModel(
                        layer_s=speed,
                        recompute_s=0.0,
                        extra_s=0.4 * speed if i in (0, p - 1) else 0.0,
                        static_per_layer_bytes=1.0,
                        act_per_layer_bytes=0.3,
                        ckpt_per_layer_bytes=0.1,
                        transient_bytes=0.3,
                        extra_static_bytes=0.0,
                        extra_act_bytes=0.0,
                        inflight=float(p - i),
                        reserve_bytes=0.0,
                        fragmentation=0.0,
                        capacity_bytes=rng.uniform(5, 20) * (1 + g),
                    )
                )
            options.append(row)
        best = None
        for assign in set(itertools.permutations([0, 0, 1, 1])):
            part = brute_force_partition([options[i][g] for i, g in enumerate(assign)], L, m)
            if part and (best is None or part.objective_s < best):
                best = part.objective_s
        ilp = ilp_partition(options, slots, L, m)
        assert (best is None) == (ilp is None)
        if ilp is not None:
            assert ilp.objective_s == pytest.approx(best, rel=1e-6)
            assert sorted(ilp.stage_groups) == [0, 0, 1, 1]


def test_placement_dp_equals_brute_force_over_every_placement():
    # One to three node groups, partial recompute included: the placement DP's optimum equals the
    # best brute-force partition over every assignment of stage positions to groups.
    rng = random.Random(5)
    solved = 0
    for _ in range(250):
        G = rng.choice([1, 2, 3])
        p, m = rng.randint(G, 5), rng.randint(1, 9)
        L = rng.randint(p, 11)
        slots = [1] * G
        for _ in range(p - G):
            slots[rng.randrange(G)] += 1
        rows = [random_stages(rng, p, L, homogeneous=False) for _ in range(G)]
        options = [[rows[g][i] for g in range(G)] for i in range(p)]
        labels = [g for g in range(G) for _ in range(slots[g])]
        best = None
        for assign in sorted(set(itertools.permutations(labels))):
            part = brute_force_partition([options[i][g] for i, g in enumerate(assign)], L, m)
            if part and (best is None or part.objective_s < best):
                best = part.objective_s
        got = placement_partition(options, slots, L, m)
        assert (best is None) == (got is None)
        if got is not None:
            solved += 1
            assert got.objective_s == pytest.approx(best, rel=1e-9)
            assert sorted(got.stage_groups) == labels and sum(got.layers) == L
            assert got == placement_partition(options, slots, L, m)  # deterministic
    assert solved > 200


def test_placement_dp_agrees_with_the_ilp():
    rng = random.Random(13)
    for _ in range(10):
        p, m = 4, rng.randint(1, 8)
        L = rng.randint(p, 10)
        rows = [random_stages(rng, p, L, homogeneous=True) for _ in range(2)]
        rows[1] = [replace(s, layer_s=0.6 * s.layer_s, recompute_s=0.6 * s.recompute_s) for s in rows[1]]
        options = [[rows[g][i] for g in range(2)] for i in range(p)]
        a, b = placement_partition(options, [2, 2], L, m), ilp_partition(options, [2, 2], L, m)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.objective_s == pytest.approx(b.objective_s, rel=1e-6)


def tiny_model(layers=8, moe=False):
    kw = dict(
        name="tiny",
        num_layers=layers,
        hidden_size=2048,
        ffn_hidden_size=5632,
        num_attention_heads=16,
        num_query_groups=4,
        kv_channels=128,
        vocab_size=32000,
        max_position_embeddings=4096,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
        add_bias_linear=False,
    )
    if moe:
        kw.update(num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=2816)
    return ModelSpec(**kw)


def brute_force(model, cluster, job, r):
    """Every shape x every recompute variant x every partition; the best plan that fits."""
    best = None
    for shape in enumerate_shapes(model, cluster, job, r):
        for c in full_recompute_variants(model, shape):
            if c.pp > 1 and c.vpp == 1 and r.uneven_partitions:
                inflight = inflight_for(model, job, c, cluster.groups[0])
                stages = [
                    stage_model(model, job, c, node_of_stage(cluster, c, i), i, inflight[i])
                    for i in range(c.pp)
                ]
                part = brute_force_partition(stages, model.num_layers, c.num_microbatches(job))
                if part is None:
                    continue
                c = c.with_(layers_per_stage=canonical_split(part.layers))
            elif model.num_layers % (c.pp * c.vpp):
                continue
            if violations(model, cluster, job, c):
                continue
            est = estimate(model, cluster, job, resolve(model, cluster, job, c))
            if est.fits and (best is None or (est.step_time_s, sort_key(c)) < (best[0], sort_key(best[1]))):
                best = (est.step_time_s, est.config)
    return best


CASES = [
    (dict(layers=8), "dgx-h100", 2, 32, 4096, Restrictions(max_micro_batch_size=4)),
    (dict(layers=10), "dgx-a100", 1, 16, 2048, Restrictions(max_micro_batch_size=2)),
    (dict(layers=7), "dgx-h100", 1, 8, 8192, Restrictions(max_micro_batch_size=2, tp=(1, 2, 4))),
    (dict(layers=6, moe=True), "dgx-h100", 1, 16, 4096, Restrictions(max_micro_batch_size=2)),
    (dict(layers=9), "aws-p4d", 2, 16, 2048, Restrictions(max_micro_batch_size=2, cp=(1,))),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_search_returns_the_brute_force_best(case):
    spec, template, nodes, gbs, seq, r = CASES[case]
    model = tiny_model(**spec)
    cluster = load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    oracle = brute_force(model, cluster, job, r)
    result = search(model, cluster, job, r, top_k=3)
    assert oracle is not None and result.plans
    top = result.plans[0]
    assert top.estimate.step_time_s == pytest.approx(oracle[0], rel=1e-9)
    assert top.config == oracle[1]
    # pruning actually happened, and the exhaustive mode agrees
    exhaustive = search(model, cluster, job, r, top_k=3, exhaustive=True)
    assert exhaustive.plans[0].config == top.config
    assert result.shapes_evaluated <= exhaustive.shapes_evaluated


def test_search_finds_uneven_partitions_when_they_win():
    model = tiny_model(layers=9)
    cluster = load_cluster("dgx-h100", 1)
    job = make_job(global_batch_size=32, seq_length=4096)
    result = search(
        model, cluster, job, Restrictions(tp=(2,), pp=(4,), cp=(1,), max_micro_batch_size=1), top_k=1
    )
    layers = result.plans[0].config.layers_per_stage
    assert sum(layers) == 9 and len(set(layers)) > 1


def test_heterogeneous_search_places_stages(a100_h100_cluster):
    cluster = a100_h100_cluster
    model = load_model("llama2-13b")
    job = make_job(global_batch_size=64, seq_length=4096)
    result = search(
        model, cluster, job, Restrictions(pp=(2, 4), tp=(8,), cp=(1,), max_micro_batch_size=2), top_k=3
    )
    top = result.plans[0]
    assert top.estimate.fits and sorted({s.gpu for s in top.estimate.stages}) == [
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
    ]
    # the faster GPUs get more layers
    by_gpu = {}
    for s in top.estimate.stages:
        by_gpu.setdefault(s.gpu, []).append(sum(s.layers))
    assert max(by_gpu["h100-sxm5-80gb"]) >= max(by_gpu["a100-sxm4-80gb"])


@settings(max_examples=12, deadline=None)
@given(
    layers=st.integers(4, 12),
    hidden=st.sampled_from([1024, 2048, 4096]),
    template=st.sampled_from(["dgx-h100", "dgx-a100-40gb", "aws-p5"]),
    nodes=st.sampled_from([1, 2]),
    gbs=st.sampled_from([8, 16, 32]),
    seq=st.sampled_from([2048, 4096]),
)
def test_every_returned_plan_is_valid_and_fits(layers, hidden, template, nodes, gbs, seq):
    model = replace(
        tiny_model(layers=layers), hidden_size=hidden, ffn_hidden_size=hidden * 3, kv_channels=hidden // 16
    )
    cluster = load_cluster(template, nodes)
    job = make_job(global_batch_size=gbs, seq_length=seq)
    result = search(model, cluster, job, Restrictions(max_micro_batch_size=2), top_k=4)
    times = [p.estimate.step_time_s for p in result.plans]
    assert times == sorted(times)
    for plan in result.plans:
        assert violations(model, plan.cluster, job, plan.config) == []
        again = estimate(model, plan.cluster, job, plan.config)
        assert again.fits and again.step_time_s == plan.estimate.step_time_s


def test_nothing_fits_says_why(run_cli):
    res = run_cli("search", "-m", "llama3.1-405b", "-c", "dgx-h100", "-n", "1", "-b", "8", "-s", "8192")
    assert res.exit_code == 3
    assert "nothing fits" in res.stderr and "needs at least" in res.stderr and "Traceback" not in res.stderr


def test_search_cli_json_and_plan_round_trip(run_cli, tmp_path):
    out = tmp_path / "plan.yaml"
    res = run_cli(
        "search",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "2",
        "-b",
        "64",
        "-s",
        "4096",
        "--top",
        "3",
        "--out",
        str(out),
        "--json",
        "--explain",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    plans = data["plans"]
    assert 1 <= len(plans) <= 3
    for key in (
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "vpp",
        "micro_batch_size",
        "recompute",
        "schedule",
        "layers_per_stage",
        "step_time_s",
        "tokens_per_s_per_gpu",
        "mfu",
        "peak_memory_bytes",
    ):
        assert key in plans[0]
    assert data["explain"]
    again = run_cli("estimate", "--plan", str(out), "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(plans[0]["step_time_s"], rel=1e-12)
    assert run_cli("bubbles", "--plan", str(out), "--json").exit_code == 0
    assert run_cli("timeline", "--plan", str(out)).exit_code == 0
    bad = run_cli("estimate", "--plan", str(out), "--tp", "2")
    assert bad.exit_code == 2
    # same inputs, same bytes
    assert (
        run_cli(
            "search",
            "-m",
            "llama3-8b",
            "-c",
            "dgx-h100",
            "-n",
            "2",
            "-b",
            "64",
            "-s",
            "4096",
            "--top",
            "3",
            "--json",
        ).stdout
        == run_cli(
            "search",
            "-m",
            "llama3-8b",
            "-c",
            "dgx-h100",
            "-n",
            "2",
            "-b",
            "64",
            "-s",
            "4096",
            "--top",
            "3",
            "--json",
        ).stdout
    )


def test_restrictions_are_respected(run_cli):
    res = run_cli(
        "search",
        "-m",
        "llama3-8b",
        "-c",
        "dgx-h100",
        "-n",
        "2",
        "-b",
        "64",
        "-s",
        "4096",
        "--tp",
        "2",
        "--pp",
        "2,4",
        "--schedule",
        "1f1b",
        "--no-recompute",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    for p in json.loads(res.stdout)["plans"]:
        assert p["tp"] == 2 and p["pp"] in (2, 4) and p["schedule"] == "1f1b" and p["recompute"] == "none"
    assert (
        run_cli(
            "search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096", "--tp", "x"
        ).exit_code
        == 2
    )


def test_gpt3_175b_beats_or_matches_the_expert_configuration():
    # Narayanan et al. 2021: tp 8, pp 8, interleaved, on 1024 A100s with gbs 1536, seq 2048.
    model = load_model("gpt3-175b")
    cluster = load_cluster("dgx-a100", 128)
    job = make_job(global_batch_size=1536, seq_length=2048)
    expert = resolve(
        model,
        cluster,
        job,
        ParallelConfig(
            tp=8, pp=8, vpp=2, schedule="interleaved", micro_batch_size=1, optimizer_sharding="distributed"
        ),
    )
    expert_est = estimate(model, cluster, job, expert)
    assert expert_est.fits
    result = search(model, cluster, job, top_k=1)
    assert result.plans[0].estimate.tokens_per_s >= expert_est.tokens_per_s


@pytest.mark.parametrize("layers,gbs,nodes", [(8, 16, (1, 1)), (12, 32, (2, 1)), (10, 8, (1, 2))])
def test_heterogeneous_pruning_never_loses_the_best(tmp_path, layers, gbs, nodes):
    # The heterogeneous bounds (integer water-filling, two-group placement) prune; without pruning
    # the same partition solver must find nothing better.
    path = tmp_path / "mixed.yaml"
    path.write_text(
        f"schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-a100\n    num_nodes: {nodes[0]}\n"
        f"  - template: dgx-h100\n    num_nodes: {nodes[1]}\n"
    )
    cluster = load_cluster(str(path))
    model = tiny_model(layers=layers)
    job = make_job(global_batch_size=gbs, seq_length=4096)
    r = Restrictions(max_micro_batch_size=2, cp=(1, 2))
    pruned = search(model, cluster, job, r, top_k=2)
    full = search(model, cluster, job, r, top_k=2, exhaustive=True)
    assert pruned.plans[0].estimate.step_time_s == pytest.approx(
        full.plans[0].estimate.step_time_s, rel=1e-12
    )
    assert pruned.plans[0].config == full.plans[0].config
    assert pruned.shapes_evaluated < full.shapes_evaluated


@pytest.mark.parametrize(
    "groups,layers,gbs",
    [
        ((("dgx-a100", 2), ("dgx-h100", 1)), 12, 32),
        ((("dgx-a100", 1), ("dgx-h100", 1), ("dgx-h200", 1)), 10, 16),
        ((("dgx-h100", 1), ("dgx-a100-40gb", 2)), 9, 16),
    ],
)
def test_partition_bound_never_exceeds_the_simulation(tmp_path, groups, layers, gbs):
    # On mixed GPU types each shape's key is finally the path bound of the partition it will be
    # simulated with: in an exhaustive search every simulated shape's key is at most its step time,
    # and the pruned search returns the same ranking.
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "schema_version: 1\nkind: cluster\ngroups:\n"
        + "".join(f"  - template: {t}\n    num_nodes: {n}\n" for t, n in groups)
    )
    cluster = load_cluster(str(path))
    model = tiny_model(layers=layers)
    job = make_job(global_batch_size=gbs, seq_length=4096)
    r = Restrictions(max_micro_batch_size=2)
    full = search(model, cluster, job, r, top_k=3, exhaustive=True)
    simulated = [o for o in full.outcomes if o.step_time_s]
    assert len(simulated) > 10
    for o in simulated:
        assert o.bound_s <= o.step_time_s * (1 + 1e-9), o.config
    pruned = search(model, cluster, job, r, top_k=3)
    assert [p.config for p in pruned.plans] == [p.config for p in full.plans]
    assert pruned.shapes_evaluated < full.shapes_evaluated
