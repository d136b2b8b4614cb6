"""planner calibrate: parsing of the frameworks' logs and nccl-tests output, synthetic recovery,
held-out improvement, profiles (strict read, apply, plan files), CLI errors."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from planner import api
from planner.calibration.cases import DEFAULT_RUNS
from planner.calibration.user.fit import RunResult, fit, predict_run
from planner.calibration.user.sources import (
    base_cluster,
    parse_megatron_log,
    parse_nccl_tests,
    parse_torchtitan_log,
    read_runs_yaml,
    read_sources,
)
from planner.cli.app import main
from planner.inputs.errors import SpecError
from planner.profiles.calibrated import apply_profile, read_profile
from planner.profiles.hardware import load_cluster
from planner.profiles.params import apply_values, values_of

sys.path.insert(0, str(Path(__file__).parent))
from calibrate_synthetic import GPU, LAYOUTS, TRUE_SCALE, true_values, write_synthetic  # noqa: E402

DATA = Path(__file__).parent / "data" / "calibrate"
MEGATRON = f"{DATA / 'megatron_llama3_8b.log'},{DATA / 'megatron_llama3_8b.args.txt'}"
TITAN = f"{DATA / 'torchtitan_llama3_8b.log'},{DATA / 'torchtitan_llama3_8b.toml'}"


def run_cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------------------------------
# Parsing


def test_megatron_log_fixture():
    f = parse_megatron_log((DATA / "megatron_llama3_8b.log").read_text(), "x.log")
    assert f.world_size == 32
    assert f.intervals == 9  # the first logged interval (start-up) is dropped
    assert f.step_time_s == pytest.approx(3.912, rel=0.01)
    assert f.global_batch_size == (128, 5)
    assert f.peak_memory_bytes == pytest.approx(41234.5 * 2**20)
    assert f.memory_metric == "max allocated"


def test_megatron_run_from_log_and_args():
    s = read_sources([MEGATRON], "dgx-h100", None)
    (run,) = s.runs
    assert run.cluster.num_gpus == 32  # from 'using world size: 32'
    assert (run.config.tp, run.config.pp, run.config.dp) == (2, 2, 8)
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(128 * 8192 / (3.912 * 32), rel=0.01)


def test_torchtitan_log_fixture():
    f = parse_torchtitan_log((DATA / "torchtitan_llama3_8b.log").read_text(), "t.log")
    # steps 10..40 logged; step 1 (warm-up) and the first interval after it are dropped
    assert f.tokens_per_s_per_gpu == pytest.approx(statistics.median([6241, 6249, 6236]))
    assert f.peak_memory_bytes == pytest.approx(57.88 * 2**30)
    s = read_sources([TITAN], "dgx-h100", 1)
    assert s.runs[0].cluster.num_gpus == 8 and s.runs[0].config.dp == 8


def test_nccl_tests_fixture():
    rows = parse_nccl_tests((DATA / "all_reduce_perf_2x8.txt").read_text(), "all_reduce_perf_2x8.txt")
    assert len(rows) == 12
    assert {(p.collective, p.num_ranks, p.ranks_per_host) for p in rows} == {("all_reduce", 16, 8)}
    last = rows[-1]
    assert last.size_bytes == 4294967296 and last.time_s == pytest.approx(24899.38e-6)
    assert last.origin.endswith(":37")
    gather = parse_nccl_tests((DATA / "all_gather_perf_1x8.txt").read_text(), "g.txt")
    assert {(p.collective, p.num_ranks, p.ranks_per_host) for p in gather} == {("all_gather", 8, 8)}


def test_runs_yaml_keeps_the_clusters_gpu_with_lines():
    runs, skipped = read_runs_yaml(DEFAULT_RUNS, "dgx-h100", base_cluster("dgx-h100"))
    assert runs and all(r.cluster.groups[0].gpu.name == "h100-sxm5-80gb" for r in runs)
    assert any("not on the cluster's h100-sxm5-80gb" in why for _, why in skipped)
    text = DEFAULT_RUNS.read_text().splitlines()
    for r in runs[:5]:
        line = int(r.origin.rsplit(":", 1)[1])
        assert text[line - 1].strip() == f"- id: {r.run_id}"


# ------------------------------------------------------------------------------------------------
# Bad inputs: one line naming file and line, exit 1


def _bad(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "name, text, where",
    [
        (
            "train.log",
            " [2025-08-01 07:19:37] iteration        1/    5000 | consumed samples: 128 | elapsed time per iteration (ms): 19138.8 |\n"
            " [2025-08-01 07:19:50] iteration        2/    5000 | consumed samples: 256 | elapsed time per iteration (ms): fast |\n",
            "train.log:2:",
        ),
        (
            "train.log",
            " iteration        1/    5000 | elapsed time per iteration (ms): 9.0 |\n"
            "[Rank 0] (after 1 iterations) memory (MB) | allocated: lots\n",
            "train.log:2:",
        ),
    ],
)
def test_bad_megatron_log_names_file_and_line(tmp_path, capsys, name, text, where):
    log = _bad(tmp_path, name, text)
    rc, out, err = run_cli(
        ["calibrate", f"{log},{DATA / 'megatron_llama3_8b.args.txt'}", "-c", "dgx-h100", "-n", "4"], capsys
    )
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and where in err and "Traceback" not in err


def test_bad_nccl_row_names_file_and_line(tmp_path, capsys):
    lines = (DATA / "all_reduce_perf_2x8.txt").read_text().splitlines()
    i = next(k for k, s in enumerate(lines) if s.strip().startswith("1048576"))
    lines[i] = "     1048576        524288  bfloat16     sum      -1    n/a   12.40   23.25      0"
    bad = _bad(tmp_path, "all_reduce_perf.txt", "\n".join(lines))
    rc, _, err = run_cli(["calibrate", str(bad), "-c", "dgx-h100"], capsys)
    assert rc == 1 and err.count("\n") == 1 and f"all_reduce_perf.txt:{i + 1}:" in err


def test_log_without_launch_file_and_unknown_file(tmp_path, capsys):
    rc, _, err = run_cli(["calibrate", str(DATA / "megatron_llama3_8b.log"), "-c", "dgx-h100"], capsys)
    assert rc == 1 and "needs its launch script or arguments file" in err
    junk = _bad(tmp_path, "notes.txt", "hello\n")
    rc, _, err = run_cli(["calibrate", str(junk), "-c", "dgx-h100"], capsys)
    assert rc == 1 and "notes.txt" in err and err.count("\n") == 1


def test_log_of_another_launch_is_refused(tmp_path, capsys):
    args = (
        (DATA / "megatron_llama3_8b.args.txt")
        .read_text()
        .replace("--global-batch-size 128", "--global-batch-size 256")
    )
    other = _bad(tmp_path, "args.txt", args)
    rc, _, err = run_cli(
        ["calibrate", f"{DATA / 'megatron_llama3_8b.log'},{other}", "-c", "dgx-h100"], capsys
    )
    assert rc == 1 and "megatron_llama3_8b.log:5: global batch size 128 in the log, 256" in err


# ------------------------------------------------------------------------------------------------
# The fit


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synthetic")
    args = write_synthetic(tmp)
    return args, read_sources(args, "dgx-h100", None)


def test_synthetic_cluster_recovered_within_5_percent(synthetic):
    _, s = synthetic
    report = fit(list(s.runs), list(s.nccl), base_cluster("dgx-h100"))
    truth = true_values()
    by = {p.name: p for p in report.params}
    for name in TRUE_SCALE:
        assert by[name].fitted, (name, by[name].note)
        assert by[name].value == pytest.approx(truth[name], rel=0.05), name
        assert by[name].uncertainty > 0
    # The overlap factor barely moves these runs: the report keeps the prior and says why.
    assert not by["comm_overlap_slowdown"].fitted
    assert "narrow it only" in by["comm_overlap_slowdown"].note
    errors = [RunResult.error(r.after, r.measured) for r in report.runs]
    before = [RunResult.error(r.before, r.measured) for r in report.runs]
    assert statistics.median(errors) < 0.02 < statistics.median(before)


def test_calibrating_on_a_subset_lowers_the_error_on_the_rest(synthetic):
    _, s = synthetic
    train, test = list(s.runs[0::2]), list(s.runs[1::2])
    report = fit(train, list(s.nccl), base_cluster("dgx-h100"))
    prior = values_of(base_cluster("dgx-h100"), GPU)
    e_before = [
        abs(predict_run(r, GPU, prior).tokens_per_s_per_gpu / r.measured_tokens_per_s_per_gpu - 1)
        for r in test
    ]
    e_after = [
        abs(predict_run(r, GPU, report.values).tokens_per_s_per_gpu / r.measured_tokens_per_s_per_gpu - 1)
        for r in test
    ]
    assert statistics.median(e_after) < 0.5 * statistics.median(e_before)
    assert max(e_after) < 0.05


def test_too_few_runs_keep_the_priors(synthetic):
    _, s = synthetic
    report = fit([s.runs[0]], [], base_cluster("dgx-h100"))
    kept = {p.name for p in report.params if not p.fitted}
    assert {"nvlink_latency_us", "network_latency_us", "network_bus_bandwidth_gb_per_s"} <= kept
    for p in report.params:
        if not p.fitted:
            assert p.value == p.prior and "narrow it only" in p.note


# ------------------------------------------------------------------------------------------------
# CLI, profiles, plan files


@pytest.fixture(scope="module")
def profile_file(synthetic, tmp_path_factory):
    args, _ = synthetic
    out = tmp_path_factory.mktemp("profile") / "profile.yaml"
    assert main(["calibrate", *args, "-c", "dgx-h100", "--out", str(out), "--json"]) == 0
    return out


def test_calibrate_json_and_profile(profile_file, synthetic, capsys):
    args, _ = synthetic
    rc, out, err = run_cli(["calibrate", *args[:4], "-c", "dgx-h100", "--json"], capsys)
    assert rc == 0
    data = json.loads(out)
    assert data["gpu"] == GPU and len(data["parameters"]) == 8
    assert set(data["errors"]) == {"before", "after", "leave_one_run_out"}
    assert all("leave_one_out_error" in r and "origin" in r for r in data["runs"])
    p = read_profile(profile_file)
    assert p.gpu == GPU and p.values["gemm_efficiency_max"] == pytest.approx(
        true_values()["gemm_efficiency_max"], rel=0.05
    )
    assert len(p.fit["runs"]) == len(LAYOUTS)
    rc, out, _ = run_cli(["calibrate", *args[:4], "-c", "dgx-h100"], capsys)
    assert rc == 0 and "Calibrated parameters" in out and "leave-one-run-out" in out


def test_profile_is_idempotent_and_checked_against_the_gpu(profile_file):
    p = read_profile(profile_file)
    once = apply_profile(load_cluster("dgx-h100", 2), p)
    assert apply_profile(once, p) == once
    assert values_of(once, GPU) == pytest.approx(p.values)
    with pytest.raises(
        SpecError, match="the profile is for h100-sxm5-80gb; cluster dgx-a100 has a100-sxm4-80gb"
    ):
        apply_profile(load_cluster("dgx-a100", 1), p)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("kind: profile", "kind: plan"), "'plan' is not allowed"),
        (lambda t: t.replace("schema_version: 1", "schema_version: 9", 1), "schema_version 9"),
        (
            lambda t: t.replace("  hbm_efficiency:\n    value:", "  hbm_efficiency:\n    valu:"),
            "hbm_efficiency",
        ),
        (lambda t: t + "colour: blue\n", "unknown key 'colour'"),
    ],
)
def test_profile_read_strictly(profile_file, tmp_path, capsys, edit, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(profile_file.read_text()))
    rc, _, err = run_cli(
        [
            "estimate",
            "-m",
            "llama3-8b",
            "-c",
            "dgx-h100",
            "-n",
            "1",
            "-b",
            "8",
            "-s",
            "4096",
            "--profile",
            str(bad),
        ],
        capsys,
    )
    assert rc == 1 and message in err and "bad.yaml" in err and err.count("\n") == 1


def test_profile_fraction_above_one_is_refused(profile_file, tmp_path):
    text = profile_file.read_text()
    start = text.index("attention_efficiency:\n    value: ")
    end = text.index("\n", start + len("attention_efficiency:\n    value: "))
    bad = tmp_path / "bad.yaml"
    bad.write_text(text[:start] + "attention_efficiency:\n    value: 1.5" + text[end:])
    with pytest.raises(SpecError, match="parameters.attention_efficiency.value"):
        read_profile(bad)


def test_estimate_search_check_timeline_bubbles_take_the_profile(profile_file, tmp_path, capsys):
    base = ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    _, out, _ = run_cli(["estimate", *base, "--tp", "2", "--json"], capsys)
    plain = json.loads(out)["tokens_per_s_per_gpu"]
    _, out, _ = run_cli(["estimate", *base, "--tp", "2", "--profile", str(profile_file), "--json"], capsys)
    calibrated = json.loads(out)["tokens_per_s_per_gpu"]
    p = read_profile(profile_file)
    problem = api.load_problem("llama3-8b", "dgx-h100", 2, 64, 4096)
    from cost_models.parallel import ParallelConfig

    expect = api.estimate_config(
        api.Problem(problem.model, apply_values(problem.cluster, GPU, p.values), problem.job),
        ParallelConfig(
            tp=2,
            pp=1,
            cp=1,
            ep=1,
            vpp=1,
            micro_batch_size=1,
            recompute="none",
            sequence_parallel=True,
            optimizer_sharding="distributed",
            schedule="1f1b",
        ),
    )
    assert calibrated == pytest.approx(expect.tokens_per_s_per_gpu, rel=1e-3) and calibrated != plain
    plan = tmp_path / "plan.yaml"
    rc, out, _ = run_cli(
        ["search", *base, "--top", "1", "--profile", str(profile_file), "--out", str(plan), "--json"], capsys
    )
    assert rc == 0
    recorded = json.loads(out)["plans"][0]["tokens_per_s_per_gpu"]
    assert "\nprofile:\n" in plan.read_text()
    # A plan read back re-applies its profile: the same prediction without --profile.
    rc, out, _ = run_cli(["estimate", "--plan", str(plan), "--json"], capsys)
    assert json.loads(out)["tokens_per_s_per_gpu"] == pytest.approx(recorded, rel=1e-3)
    for cmd in (["timeline", "--plan", str(plan), "--json"], ["bubbles", "--plan", str(plan), "--json"]):
        rc, out, _ = run_cli([*cmd, "--profile", str(profile_file)], capsys)
        assert rc == 0 and json.loads(out)
    rc, out, _ = run_cli(
        ["check", str(plan), "-c", "dgx-h100", "-n", "2", "--profile", str(profile_file), "--json"], capsys
    )
    assert rc == 0 and json.loads(out)["passed"]


@pytest.mark.slow  # the whole calibration set read and split twice (15 s of CPU; docs/ci.md)
def test_holdout_split_is_deterministic():
    sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
    from calibrate_holdout import split

    _, a, b = split(DEFAULT_RUNS, "dgx-h100")
    _, a2, b2 = split(DEFAULT_RUNS, "dgx-h100")
    assert a == a2 and b == b2 and not set(a) & set(b) and abs(len(a) - len(b)) <= 1
