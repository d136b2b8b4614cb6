"""Activation offloading to host memory (Megatron-LM ``--cpu-offloading-num-layers``): the first N
layers' activations leave the GPU except one layer in transit, the copies cost time only where the
host link is slower than the neighbouring layer's pass, the conditions Megatron-Core sets are held,
and the knob travels through plan files, the CLI and Megatron import and export."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from cost_models.constraints import resolve, violations
from cost_models.estimate import estimate, offload_terms, table_for
from cost_models.parallel import ParallelConfig
from planner.frameworks.torchtitan import TORCHTITAN
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import ConfigError, SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster


def _setup(offload: int, cluster: str = "gb200-nvl72", nodes: int = 16, **kw):
    model, spec = load_model("llama3-70b"), load_cluster(cluster, nodes)
    job = make_job(global_batch_size=64 * spec.num_gpus // 64, seq_length=8192, precision="bf16")
    base = dict(tp=1, pp=1, micro_batch_size=1, optimizer_sharding="full", offload_layers=offload)
    base.update(kw)
    c = resolve(model, spec, job, ParallelConfig(**base))
    return model, spec, job, c


def _slow_host(spec: ClusterSpec, bytes_per_s: float) -> ClusterSpec:
    """The cluster with its GPUs' host link set to ``bytes_per_s``."""
    groups = tuple(
        dataclasses.replace(g, gpu=dataclasses.replace(g.gpu, host_link_bytes_per_s=bytes_per_s))
        for g in spec.groups
    )
    return dataclasses.replace(spec, groups=groups)


def test_offloaded_layers_leave_the_gpu_but_one_in_transit():
    model, spec, job, plain = _setup(0)
    _, _, _, off = _setup(40)
    a, b = estimate(model, spec, job, plain), estimate(model, spec, job, off)
    layer = table_for(model, job, plain, spec.groups[0]).dense.activation_bytes
    ma, mb = a.stages[0].memory, b.stages[0].memory
    # Forty of eighty identical layers leave: the resident activations drop by forty layers' worth
    # (and the fragmentation share of the reserve with them), and one layer is held in transit.
    assert ma.activations_bytes - mb.activations_bytes == pytest.approx(40 * layer, rel=1e-9)
    assert mb.reserve_bytes < ma.reserve_bytes
    assert mb.transient_bytes == pytest.approx(max(ma.transient_bytes, layer))
    assert mb.peak_bytes < ma.peak_bytes


def test_a_fast_host_link_hides_the_copies_and_a_slow_one_is_paid():
    model, spec, job, c = _setup(40)
    # A link that moves a layer's activations faster than the layer computes hides every copy.
    fast = estimate(model, _slow_host(spec, 1e13), job, c)
    plain = estimate(model, spec, job, c.with_(offload_layers=0))
    assert fast.stages[0].offload_exposed_s == 0.0
    assert fast.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
    slow_spec = _slow_host(spec, 2e9)
    slow = estimate(model, slow_spec, job, c)
    node = slow_spec.groups[0]
    t = offload_terms(model, table_for(model, job, c, node), c, 0, model.num_layers, node)
    assert t.layers == 40
    assert slow.stages[0].offload_exposed_s == pytest.approx(t.forward_exposed_s + t.backward_exposed_s)
    assert t.forward_exposed_s > 0 and t.backward_exposed_s > 0
    # Each layer's copy out outlasts the next layer's forward by copy - forward.
    layer = table_for(model, job, c, node).dense
    copy = layer.activation_bytes / 2e9
    assert t.forward_exposed_s == pytest.approx(40 * (copy - layer.forward_s - layer.forward_comm_s))
    assert slow.step_time_s > fast.step_time_s


@pytest.mark.parametrize("offload", [0, 20, 40])
def test_breakdown_sums_to_the_step_time_and_names_the_offload_only_when_set(offload):
    model, spec, job, c = _setup(offload)
    est = estimate(model, _slow_host(spec, 2e9), job, c)
    parts = est.time_breakdown()
    assert math.isclose(sum(v for _, v in parts), est.step_time_s, rel_tol=1e-9)
    names = [n for n, _ in parts]
    assert ("exposed activation offload" in names) == bool(offload)
    if offload:
        assert dict(parts)["exposed activation offload"] > 0


@pytest.mark.parametrize(
    "changes, reason",
    [
        (dict(pp=2, optimizer_sharding="distributed"), "pp must be 1"),
        (dict(recompute="selective"), "without activation recompute"),
        (dict(offload_layers=80), "fewer than num_layers (80)"),
        (dict(offload_layers=-1), "must be >= 0"),
    ],
)
def test_megatron_cores_conditions_are_held(changes, reason):
    model, spec = load_model("llama3-70b"), load_cluster("gb200-nvl72", 16)
    job = make_job(global_batch_size=64, seq_length=8192)
    c = ParallelConfig(tp=1, pp=1, micro_batch_size=1, optimizer_sharding="full", offload_layers=40)
    c = c.with_(**changes)
    c = c.with_(dp=spec.num_gpus // (c.tp * c.pp * c.cp))
    assert any(reason in v for v in violations(model, spec, job, c))


def test_a_gpu_without_a_host_link_is_refused_with_the_file_key():
    model, spec = load_model("llama3-70b"), load_cluster("gb200-nvl72", 16)
    spec = _slow_host(spec, 0.0)
    job = make_job(global_batch_size=64, seq_length=8192)
    with pytest.raises(ConfigError, match="host_link_gb_per_s"):
        resolve(model, spec, job, ParallelConfig(tp=1, pp=1, optimizer_sharding="full", offload_layers=4))


def test_megatron_export_and_import_carry_the_layers():
    from planner.plans.plan_file import PlanInputs

    model, spec, job, c = _setup(40)
    inputs = PlanInputs(model=model, cluster=spec, job=job, config=c)
    args = dict(megatron_args(inputs))
    assert args["--cpu-offloading-num-layers"] == "40"
    flat = " ".join(f if v is None else f"{f} {v}" for f, v in megatron_args(inputs))
    back = parse_megatron(flat, "args.txt", spec.num_gpus)
    assert back.config.offload_layers == 40 and "--cpu-offloading-num-layers" not in back.unknown
    assert "--cpu-offloading-num-layers" not in dict(
        megatron_args(dataclasses.replace(inputs, config=c.with_(offload_layers=0)))
    )


def test_torchtitan_has_no_offloading_and_cuda_graphs_need_the_full_iteration():
    from planner.frameworks.megatron import MEGATRON

    model, spec, job, c = _setup(40)
    assert any("no activation offloading" in v for v in TORCHTITAN.violations(model, spec, job, c))
    assert MEGATRON.violations(model, spec, job, c) == []
    graphs = dataclasses.replace(job, cuda_graph_scope=("attn",))
    assert any("full iteration" in v for v in MEGATRON.violations(model, spec, graphs, c))
    whole = dataclasses.replace(job, cuda_graph_scope=("full_iteration",))
    assert MEGATRON.violations(model, spec, whole, c) == []


def test_cli_estimate_and_plan_file_carry_the_knob(run_cli):
    args = (
        "estimate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "16", "-b", "64", "-s", "8192",
        "--optimizer-sharding", "full", "--framework", "megatron", "--json",
    )  # fmt: skip
    plain = json.loads(run_cli(*args).stdout)
    res = run_cli(*args, "--offload-layers", "40")
    assert res.exit_code == 0, res.stderr
    off = json.loads(res.stdout)
    assert off["config"]["offload_layers"] == 40 and "offload_layers" not in plain["config"]
    assert "offload_exposed_s" in off["time"] and "offload_exposed_s" not in plain["time"]
    assert off["peak_memory_bytes"] < plain["peak_memory_bytes"]
    bad = run_cli(*args, "--offload-layers", "40", "--pp", "2", "--optimizer-sharding", "distributed")
    assert bad.exit_code != 0 and "pp must be 1" in bad.stderr and "Traceback" not in bad.stderr

    from planner.plans.plan_file import config_from_mapping, config_to_mapping

    _, _, _, c = _setup(40)
    mapping = config_to_mapping(c)
    assert mapping["offload_layers"] == 40
    back = config_from_mapping(mapping, "plan.yaml")
    assert back.offload_layers == 40 and config_to_mapping(back) == mapping
    # Without offloading a plan file has no such key (plans written before it read the same).
    assert "offload_layers" not in config_to_mapping(c.with_(offload_layers=0))


def test_nvidias_recipes_that_offload_are_priced_with_it():
    """Megatron-Bridge 25.11's Llama 3 70B FP8 recipes on GB200 and GB300 offload 40 and 20 layers
    (cpu_offloading_num_layers in their base configs, cited in the records): the calibration reads
    the count, and the prediction keeps only the other layers' activations on the GPU."""
    from planner.calibration.cases import cases

    by = {c.run_id: c for c in cases()}
    for rid, layers in (
        ("mbridge2511_gb200_fp8cs_llama3_70b_64gpu", 40),
        ("mbridge2511_gb300_fp8cs_llama3_70b_64gpu", 20),
    ):
        case = by[rid]
        assert case.config.offload_layers == layers
        node = case.cluster.groups[0]
        layer = table_for(case.model, case.job, case.config, node).dense.activation_bytes
        kept = estimate(case.model, case.cluster, case.job, case.config.with_(offload_layers=0))
        off = estimate(case.model, case.cluster, case.job, case.config)
        drop = kept.stages[0].memory.activations_bytes - off.stages[0].memory.activations_bytes
        assert drop == pytest.approx(layers * layer, rel=1e-9)


# ------------------------------------------------------------------------------------------------
# The search (planner search --offload-layers)

SEARCH = ["search", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "16", "-b", "64", "-s", "8192", "--pp", "1"]  # fmt: skip


def test_the_search_offloads_only_when_asked(run_cli, tmp_path):
    """Without --offload-layers no plan offloads (planner does not know the hosts' memory); with
    it, offloading is priced beside recompute and wins here, on Grace's NVLink-C2C; the plan file
    carries the count, re-estimates to its recorded step time and exports Megatron's flag."""
    plain = json.loads(run_cli(*SEARCH, "--top", "3", "--json").stdout)
    assert all(not p.get("offload_layers") for p in plain["plans"])
    plan = tmp_path / "plan.yaml"
    asked = run_cli(*SEARCH, "--top", "3", "--offload-layers", "0,40,79", "--json", "--out", str(plan), "-q")
    assert asked.exit_code == 0, asked.stderr
    best = json.loads(asked.stdout)["plans"][0]
    assert best["offload_layers"] in (40, 79) and best["recompute"] == "none"
    assert best["step_time_s"] < plain["plans"][0]["step_time_s"]
    again = json.loads(run_cli("estimate", "--plan", str(plan), "--json").stdout)
    assert again["config"]["offload_layers"] == best["offload_layers"]
    assert again["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-3)
    out = tmp_path / "launch"
    assert run_cli("export", "megatron", str(plan), "--out", str(out), "-q").exit_code == 0
    args = (out / "megatron_args.txt").read_text().split()
    assert args[args.index("--cpu-offloading-num-layers") + 1] == str(best["offload_layers"])


def test_offload_counts_restrict_the_search_and_are_checked(run_cli):
    only = json.loads(run_cli(*SEARCH, "--top", "2", "--offload-layers", "40", "--json").stdout)
    assert only["plans"] and all(p["offload_layers"] == 40 and p["pp"] == 1 for p in only["plans"])
    bad = run_cli(*SEARCH, "--offload-layers", "x")
    assert bad.exit_code == 2 and "--offload-layers" in bad.stderr and "Traceback" not in bad.stderr
    titan = run_cli(*SEARCH, "--offload-layers", "40", "--framework", "torchtitan")
    assert titan.exit_code == 2 and "no activation offloading" in titan.stderr
    assert run_cli(*SEARCH, "--offload-layers", "0", "--framework", "torchtitan", "--top", "1").exit_code == 0


def test_the_stage_model_prices_offloading_as_the_estimate_does():
    """The partition's stage model (what the search's memory check reads) subtracts the offloaded
    layers' activations and holds one in transit, as the estimate does; its time adds the copies'
    exposed time per micro-batch."""
    from planner.search.stage_model import stage_model

    model, spec, job, plain = _setup(0, cluster="dgx-h100", nodes=8)
    _, _, _, off = _setup(60, cluster="dgx-h100", nodes=8)
    node = spec.groups[0]
    a, b = stage_model(model, job, plain, node, 0, 1.0), stage_model(model, job, off, node, 0, 1.0)
    terms = offload_terms(model, table_for(model, job, off, node), off, 0, model.num_layers, node)
    L = model.num_layers
    assert terms.forward_exposed_s + terms.backward_exposed_s > 0  # PCIe: some copies exposed
    assert b.time(L) - a.time(L) == pytest.approx(terms.forward_exposed_s + terms.backward_exposed_s)
    saved = (a.memory(L) - b.memory(L)) / (1 + a.fragmentation)
    assert saved == pytest.approx(terms.resident_bytes_saved - terms.transit_bytes, rel=1e-9)
    # The estimate holds the transit inside the larger of its transients (the loss's logits too),
    # which the stage model does not price: the stage model's saving is never the larger one, so
    # its memory check admits no offloading plan the estimate then refuses for it.
    ea, eb = estimate(model, spec, job, plain), estimate(model, spec, job, off)
    estimated = ea.stages[0].memory.peak_bytes - eb.stages[0].memory.peak_bytes
    assert a.memory(L) - b.memory(L) <= estimated <= terms.resident_bytes_saved * (1 + a.fragmentation)


def test_offloading_only_where_no_shape_can_offload_says_so(run_cli):
    """--offload-layers without 0 keeps only offloading plans; with pp 2 forced there are none, and
    the error says why instead of blaming memory (exit 3)."""
    r = run_cli(*SEARCH[:-2], "--pp", "2", "--offload-layers", "40")
    assert r.exit_code == 3 and r.stdout == ""
    assert "--offload-layers 40 without 0" in r.stderr and "pp 1" in r.stderr and "add 0" in r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------
# Host memory (cluster files' host_memory_gb)


def _with_host(spec: ClusterSpec, gb: float) -> ClusterSpec:
    """The cluster with ``gb`` GB of system memory per node (0: unknown)."""
    return dataclasses.replace(
        spec, groups=tuple(dataclasses.replace(g, host_memory_bytes=gb * 1e9) for g in spec.groups)
    )


def test_templates_state_their_host_memory_and_cluster_files_round_trip_it():
    from planner.profiles.hardware import cluster_from_mapping, cluster_to_mapping

    assert load_cluster("dgx-h100", 1).groups[0].host_memory_bytes == 2048e9
    assert load_cluster("gb200-nvl72", 1).groups[0].host_memory_bytes == 960e9
    spec = load_cluster("dgx-h100", 2)
    mapping = cluster_to_mapping(spec)
    assert mapping["groups"][0]["host_memory_gb"] == 2048
    assert cluster_from_mapping(mapping, "round trip") == spec
    # A file without the key (or a template without a datasheet figure) leaves it unknown, and
    # writes no key back.
    del mapping["groups"][0]["host_memory_gb"]
    unknown = cluster_from_mapping(mapping, "old.yaml")
    assert unknown.groups[0].host_memory_bytes == 0.0
    assert "host_memory_gb" not in cluster_to_mapping(unknown)["groups"][0]
    bad = dict(mapping, groups=[dict(mapping["groups"][0], host_memory_gb=-1)])
    with pytest.raises(SpecError, match="host_memory_gb"):
        cluster_from_mapping(bad, "bad.yaml")


def test_offloaded_activations_must_fit_the_nodes_host_memory():
    """The offloaded layers' activations of the micro-batch in flight (pp 1) sit in host memory;
    each GPU gets 80% of its node's system memory over the node's GPUs. Llama 3 70B on GB200 trays
    (960 GB for 4 GPUs: 192 GB each) holds 79 offloaded layers at sequence 8,192; a tray with half
    the memory does not, and a node of unknown memory is not checked."""
    from cost_models.memory import HOST_MEMORY_USABLE_FRACTION

    model, spec, job, c = _setup(79)
    node = spec.groups[0]
    terms = offload_terms(model, table_for(model, job, c, node), c, 0, model.num_layers, node)
    est = estimate(model, spec, job, c)
    s = est.stages[0]
    assert s.host_bytes == pytest.approx(terms.resident_bytes_saved, rel=1e-12)
    assert s.host_share_bytes == pytest.approx(960e9 * HOST_MEMORY_USABLE_FRACTION / 4)
    assert est.host_fits and est.fits and est.host_shortfall == ""
    small = estimate(model, _with_host(spec, 480), job, c)
    assert not small.host_fits and not small.fits
    assert small.stages[0].memory.fits  # the GPU memory is the same; only the host overflows
    assert "stage 0 offloads" in small.host_shortfall and "host_memory_gb" in small.host_shortfall
    assert estimate(model, _with_host(spec, 0), job, c).host_fits
    # Without offloading nothing is parked, whatever the host.
    plain = estimate(model, _with_host(spec, 1), job, c.with_(offload_layers=0))
    assert plain.stages[0].host_bytes == 0.0 and plain.host_fits


def test_the_search_keeps_offloading_within_host_memory(run_cli, tmp_path):
    """On 2 TB DGX H100 nodes, Llama 3.1 405B offloading 125 of its 126 layers (tp 1, cp 1, FSDP
    over 2,048 GPUs) would park ~570 GB per GPU: the search no longer proposes it (nothing else
    fits the GPUs here, exit 3), and says why."""
    args = (
        "search", "-m", "llama3.1-405b", "-c", "dgx-h100", "-n", "256", "-b", "2048", "-s", "8192",
        "--tp", "1", "--pp", "1", "--cp", "1", "--offload-layers", "20,125", "--json", "--top", "3",
    )  # fmt: skip
    res = run_cli(*args)
    assert res.exit_code == 3 and res.stdout == "", res.stdout
    assert "1 offloading plan fits the GPUs but not the host memory" in res.stderr
    assert "offloads 527.8 GiB of activations per GPU" in res.stderr and "Traceback" not in res.stderr
    # The same search on hosts with enough memory does offload 125 layers.
    big = tmp_path / "big-hosts.yaml"
    big.write_text(
        "schema_version: 1\nkind: cluster\nname: big-hosts\ngroups:\n"
        "  - template: dgx-h100\n    num_nodes: 256\n    host_memory_gb: 8192\n"
    )
    roomy = run_cli(*[a if a != "dgx-h100" else str(big) for a in args if a not in ("-n", "256")])
    assert roomy.exit_code == 0, roomy.stderr
    assert any(p["offload_layers"] == 125 for p in json.loads(roomy.stdout)["plans"])


def test_estimate_and_check_report_the_host_memory(run_cli, tmp_path):
    args = (
        "estimate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "16", "-b", "64", "-s", "8192",
        "--optimizer-sharding", "full", "--offload-layers", "79",
    )  # fmt: skip
    ok = json.loads(run_cli(*args, "--json").stdout)
    host = ok["memory"]["host"]
    assert host["fits"] and host["per_stage"][0]["offloaded_bytes_per_gpu"] > 0
    assert ok["cluster"]["groups"][0]["host_memory_bytes"] == 960e9
    plain = json.loads(run_cli(*args[:-2], "--json").stdout)
    assert "host" not in plain["memory"]  # only plans that offload carry the section
    small = tmp_path / "small-trays.yaml"
    small.write_text(
        "schema_version: 1\nkind: cluster\nname: small-trays\ngroups:\n"
        "  - template: gb200-nvl72\n    num_nodes: 16\n    host_memory_gb: 480\n"
    )
    over = run_cli(*[a if a != "gb200-nvl72" else str(small) for a in args if a not in ("-n", "16")])
    assert over.exit_code == 0
    assert "does not fit in host memory: stage 0 offloads" in over.stderr
    assert "NO: stage 0 offloads" in over.stdout
    # A Megatron launch that offloads 79 layers, checked against those trays: an error naming the flag.
    plan, out = tmp_path / "plan.yaml", tmp_path / "launch"
    searched = run_cli(*SEARCH, "--top", "1", "--offload-layers", "79", "--out", str(plan), "-q")
    assert searched.exit_code == 0, searched.stderr
    assert run_cli("export", "megatron", str(plan), "--out", str(out), "-q").exit_code == 0
    launch = str(out / "megatron_args.txt")
    assert run_cli("check", launch, "-c", "gb200-nvl72", "-n", "16", "--json").exit_code == 0
    checked = run_cli("check", launch, "-c", str(small), "--json")
    assert checked.exit_code != 0, checked.stdout
    findings = json.loads(checked.stdout)["configs"][0]["findings"]
    hit = [f for f in findings if f["level"] == "error" and "host memory" in f["message"]]
    assert hit and "--cpu-offloading-num-layers" in hit[0]["flags"]


def test_every_cluster_file_key_is_documented_and_host_memory_listed(run_cli):
    """docs/clusters.md has a row for every node key a cluster file may set; `planner hardware list`
    shows each template's host memory ('-' where the template states none)."""
    from pathlib import Path

    from planner.profiles.hardware import NODE_KEYS

    doc = (Path(__file__).parents[1] / "docs" / "clusters.md").read_text()
    missing = [k for k in (*NODE_KEYS, "template", "num_nodes") if f"| `{k}` |" not in doc]
    assert not missing, missing
    res = run_cli("hardware", "list")
    assert res.exit_code == 0 and "host memory GB" in res.stdout
    row = next(line for line in res.stdout.splitlines() if line.startswith("│ dgx-h100 "))
    assert row.rstrip(" │").endswith("2048")
    b300 = next(line for line in res.stdout.splitlines() if line.startswith("│ dgx-b300 "))
    assert b300.rstrip(" │").endswith("-")
