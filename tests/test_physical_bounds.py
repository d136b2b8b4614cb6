"""One rule for physical quantities, zero and empty values (issue 55), and a regression test for
every traceback and every "nonsense accepted" reproducer of that issue.

The rule (planner.inputs.validation.check_number / check_flag): every positive physical field
and flag is finite and between a lower and an upper bound a real system could have, applied by
key name for files, flags, profiles and plan sections alike; zero, negative zero and empty values
are errors, never "not given".
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import pytest
import yaml

from planner.inputs.errors import SpecError, UsageError
from planner.inputs.validation import LIMITS, MINIMA, check_flag, check_number, printable
from tests.test_reliability import (
    CALIBRATE_DATA,
    EST,
    GPU_YAML,
    SMALL_JOB,
    cluster_with,
    gpu_file,
    one_line_error,
    write,
)

ROOT = Path(__file__).resolve().parent.parent
EST_M = [*EST, "-m", "gpt-1.7b"]


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    """A small two-stage plan file (the seed of the plan and goodput cases)."""
    import contextlib
    import io

    from planner.cli import main

    path = tmp_path_factory.mktemp("bounds") / "plan.yaml"
    args = ["search", "-m", "gpt-1.7b", *SMALL_JOB, "--pp", "2", "--top", "1", "--out", str(path), "-q"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(args) == 0
    return path


# ------------------------------------------------------------------------------------------------
# The rule itself


def test_every_lower_bound_has_an_upper_bound_and_a_reason():
    for key, (low, why) in MINIMA.items():
        assert key in LIMITS, key
        assert 0 < low < LIMITS[key][0], key
        assert why, key


@pytest.mark.parametrize(
    "value, fragment",
    [
        (0.0, "must be positive"),
        (-0.0, "must be positive"),
        (5e-324, "below the smallest allowed, 10"),
        (float("nan"), "finite"),
        (1e308, "above the largest allowed"),
        (10**400, "a 401-digit integer is above"),
    ],
)
def test_check_number_bounds_a_bandwidth_both_ways(value, fragment):
    with pytest.raises(SpecError, match=fragment):
        check_number(value, "gpu.yaml", "hbm_bandwidth_gb_per_s", positive=True)
    assert check_number(3350.0, "gpu.yaml", "hbm_bandwidth_gb_per_s", positive=True) == 3350.0


def test_zero_stays_allowed_where_it_means_none():
    """A peak of 0 is "no such tensor core" (the V100 files write ``bf16: 0``); a tiny one is not."""
    assert check_number(0, "gpu.yaml", "peak_tflops.bf16") == 0
    with pytest.raises(SpecError, match="below the smallest allowed, 0.1"):
        check_number(1e-300, "gpu.yaml", "peak_tflops.bf16")


def test_check_flag_is_a_usage_error_naming_the_flag():
    assert check_flag(None, "--tp", "tp", integer=True) is None
    for value in (0, -0, -1):
        with pytest.raises(UsageError, match="^--tp: must be positive"):
            check_flag(value, "--tp", "tp", integer=True)
    with pytest.raises(UsageError, match="^--top: 1000000000 is above the largest allowed, 100"):
        check_flag(10**9, "--top", "top", integer=True)
    with pytest.raises(UsageError, match="^--jobs: must be positive"):
        check_flag(0, "--jobs", "jobs", integer=True)


def test_printable_escapes_control_characters_only():
    assert printable("plan\nfile\x1b[31m\u202e.yaml") == "plan\\nfile\\x1b[31m\\u202e.yaml"
    assert printable("modèle 名前 a b") == "modèle 名前 a b"


# ------------------------------------------------------------------------------------------------
# Files: GPU, cluster, profile, plan sections


@pytest.mark.parametrize(
    "edit, fragment",
    [
        ({"peak_tflops__bf16": 1e-300}, "'peak_tflops.bf16': 1e-300 is below the smallest allowed"),
        ({"memory_gib": 1e-300}, "'memory_gib': 1e-300 is below the smallest allowed"),
        ({"hbm_bandwidth_gb_per_s": 5e-324}, "'hbm_bandwidth_gb_per_s': 4.94066e-324 is below"),
        ({"sm_count": 2**63}, "'sm_count': a 19-digit integer is above the largest allowed"),
        ({"efficiency__gemm_efficiency_max": 1e-300}, "'efficiency.gemm_efficiency_max': 1e-300 is below"),
        ({"tdp_w": 1e300}, "'tdp_w': 1e+300 is above"),
        ({"gemm_tile": [256, 2**40]}, "'gemm_tile[1]'"),
    ],
)
def test_gpu_file_quantities_are_bounded_both_ways(run_cli, tmp_path, edit, fragment):
    """Issue 55: a GPU peak of 1e-300 TFLOP/s priced a step at 7.5e302 s (exit 0); an sm_count of
    2**63 divided by zero."""
    cluster = cluster_with(tmp_path, gpu_file(tmp_path, **edit))
    res = run_cli("estimate", "-m", "gpt-1.7b", "-c", str(cluster), "-b", "8", "-s", "1024", "--tp", "2")
    one_line_error(res, 1, fragment)


@pytest.mark.parametrize(
    "key, value",
    [("intra_node_bandwidth_gb_per_s", 5e-324), ("inter_node_bandwidth_gb_per_s", 1e-300)],
)
def test_cluster_bandwidths_are_bounded_below(run_cli, tmp_path, key, value):
    doc = {
        "schema_version": 1,
        "kind": "cluster",
        "groups": [{"template": "dgx-h100", "num_nodes": 2, key: value}],
    }
    cluster = write(tmp_path, "cluster.yaml", doc)
    one_line_error(
        run_cli("estimate", "-m", "gpt-1.7b", "-c", str(cluster), "-b", "16", "-s", "1024"), 1, key
    )


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    import contextlib
    import io

    from planner.cli import main

    path = tmp_path_factory.mktemp("profile") / "profile.yaml"
    run = f"{CALIBRATE_DATA / 'megatron_llama3_8b.log'},{CALIBRATE_DATA / 'megatron_llama3_8b.args.txt'}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["calibrate", run, "-c", "dgx-h100", "-n", "4", "--out", str(path), "-q"]) == 0
    return path


@pytest.mark.parametrize("value", [5e-324, 1e-320])
@pytest.mark.parametrize("command", ["estimate", "timeline"])
def test_profile_bandwidth_of_a_denormal_is_refused(run_cli, tmp_path, profile, value, command):
    """Issue 55: a profile bandwidth of 5e-324 raised ZeroDivisionError in estimate and timeline,
    1e-320 an OverflowError."""
    doc = yaml.safe_load(profile.read_text())
    doc["parameters"]["nvlink_bus_bandwidth_gb_per_s"]["value"] = value
    bad = write(tmp_path, "profile.yaml", doc)
    res = run_cli(command, "-m", "gpt-1.7b", *SMALL_JOB, "--tp", "8", "--profile", str(bad))
    one_line_error(res, 1, "'parameters.nvlink_bus_bandwidth_gb_per_s.value'", "below the smallest allowed")


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda f: f["errors"]["before"].update(median=float("nan")), "'fit.errors.before.median'"),
        (lambda f: f["errors"]["after"].update(mean=float("inf")), "'fit.errors.after.mean'"),
        (lambda f: f.update(extra=1), "unknown key 'fit.extra'"),
        (lambda f: f["runs"][0].update(run_id=3), "'fit.runs[0].run_id'"),
    ],
)
def test_profile_fit_section_is_read_as_strictly_as_the_parameters(
    run_cli, tmp_path, profile, edit, fragment
):
    """Issue 55: a profile's ``fit`` section accepted NaN, infinity and unknown keys."""
    doc = yaml.safe_load(profile.read_text())
    edit(doc["fit"])
    bad = tmp_path / "profile.yaml"
    bad.write_text(yaml.safe_dump(doc).replace(".nan", ".nan").replace(".inf", ".inf"))
    res = run_cli("estimate", "-m", "gpt-1.7b", *SMALL_JOB, "--profile", str(bad))
    one_line_error(res, 1, fragment)


def test_recorded_predictions_and_budget_are_ignored_and_regenerated(run_cli, tmp_path, plan):
    """Issue 55: ``report`` on a plan whose recorded ``bubble_fill_budget`` was edited raised a
    TypeError. Predictions and the budget are outputs: re-computed on read (docs/reliability.md),
    so an edited or NaN one changes nothing."""
    doc = yaml.safe_load(plan.read_text())
    edited = copy.deepcopy(doc)
    edited["bubble_fill_budget"]["per_stage"][0]["idle_s"] = "x"
    edited["bubble_fill_budget"]["iteration_time_s"] = float("nan")
    edited["predictions"]["step_time_s"] = float("inf")
    bad = write(tmp_path, "edited.yaml", edited)
    good = write(tmp_path, "plan.yaml", doc)
    pages = {}
    for name, path in (("good", good), ("bad", bad)):
        res = run_cli("report", str(path), "--html", str(tmp_path / f"{name}.html"), "--json")
        assert res.exit_code == 0, res.stderr
        pages[name] = (tmp_path / f"{name}.html").read_text().replace(path.name, "PLAN")
        assert json.loads(res.stdout)["sections"][-1] == "budget"
    assert pages["good"] == pages["bad"]
    est = [run_cli("estimate", "--plan", str(p), "--json").stdout for p in (good, bad)]
    assert est[0] == est[1] and json.loads(est[0])["step_time_s"] > 0


@pytest.mark.parametrize(
    "alternative, fragment",
    [
        ({"tp": 2, "step_time_s": float("nan")}, "'predictions.alternatives[0].step_time_s'"),
        ({"tp": 0}, "'predictions.alternatives[0].tp': must be positive"),
        ({"schedule": "fast"}, "'predictions.alternatives[0].schedule'"),
        ({"tp": 2, "colour": "red"}, "unknown key 'predictions.alternatives[0].colour'"),
    ],
)
def test_recorded_alternatives_are_checked_as_inputs(run_cli, tmp_path, plan, alternative, fragment):
    doc = yaml.safe_load(plan.read_text())
    doc["predictions"]["alternatives"] = [alternative]
    bad = write(tmp_path, "plan.yaml", doc)
    one_line_error(run_cli("report", str(bad), "--html", str(tmp_path / "r.html")), 1, fragment)


def test_recorded_alternatives_are_shown(run_cli, tmp_path, plan):
    doc = yaml.safe_load(plan.read_text())
    doc["predictions"]["alternatives"] = [{"tp": 4, "pp": 2, "step_time_s": 0.5}]
    page = tmp_path / "r.html"
    assert run_cli("report", str(write(tmp_path, "plan.yaml", doc)), "--html", str(page)).exit_code == 0
    assert "alternatives-table" in page.read_text()


# ------------------------------------------------------------------------------------------------
# Command-line flags: zero, negative zero, empty values, counts


@pytest.mark.parametrize(
    "args, fragment",
    [
        ([*EST_M, "--ep", "0"], "--ep: must be positive"),
        ([*EST_M, "--pp", "0"], "--pp: must be positive"),
        ([*EST_M, "--pp", "-0"], "--pp: must be positive"),
        ([*EST_M, "--micro-batch-size", "0"], "--micro-batch-size: must be positive"),
        ([*EST_M, "--vpp", "0"], "--vpp: must be positive"),
        ([*EST_M, "--tp", "99999999999999999999"], "--tp: a 20-digit integer is above"),
        ([*EST_M, "--framework", ""], "--framework: an empty value"),
        ([*EST_M, "--recompute", ""], "--recompute: an empty value"),
        ([*EST_M, "--framework="], "--framework: an empty value"),
        ([*EST_M, "--recompute", " "], "--recompute: an empty value"),
        (["sweep", "-m", "gpt-1.7b", "-c", "dgx-h100,,", "-n", "1", "-b", "16", "-s", "1024"], "empty item"),
        (["sweep", "-m", "gpt-1.7b", "-c", "dgx-h100", "-n", "1,,2", "-b", "16", "-s", "1024"], "empty item"),
        (["export", "megatron", "{plan}", "--out", ""], "--out: an empty value"),
        (["timeline", "{plan}", "--width", "0"], "--width: must be positive"),
        (["timeline", "{plan}", "--width", "100000000"], "--width: 100000000 is above the largest allowed"),
        (["bubbles", "{plan}", "--max-slowdown", "1e300"], "--max-slowdown: 1e+300 is above"),
        (["whatif", "{plan}", "--fail-gpus", "99999999999"], "--fail-gpus: 99999999999 is above"),
        (["search", "-m", "gpt-1.7b", *SMALL_JOB, "--top", "1000000000"], "--top: 1000000000 is above"),
        (["search", "-m", "gpt-1.7b", *SMALL_JOB, "--top", "0"], "--top: must be positive"),
        (["search", "-m", "gpt-1.7b", *SMALL_JOB, "--max-tp", "0"], "--max-tp: must be positive"),
        (
            ["search", "-m", "gpt-1.7b", *SMALL_JOB, "--headroom-gib", "1e300"],
            "--headroom-gib: 1e+300 is above",
        ),
        (["check", "{plan}", "--headroom-gib", "1e6"], "--headroom-gib: 1000000.0 is above"),
        (
            ["search", "-m", "gpt-1.7b", *SMALL_JOB, "--tokens", "1T", "--gpu-hour-price", "1e308"],
            "--gpu-hour-price: 1e+308 is above",
        ),
        (
            ["sweep", "-m", "gpt-1.7b", "-c", "dgx-h100", "-n", "1", "-b", "16", "-s", "1024", "--jobs", "0"],
            "--jobs: must be positive",
        ),
    ],
)
def test_zero_negative_zero_and_empty_values_are_errors(run_cli, plan, args, fragment):
    """Issue 55: ``--ep 0``, ``--pp 0`` and ``-0`` were taken as "not given"; ``--framework ''``,
    ``--recompute ''``, ``sweep -c dgx-h100,,`` and ``export --out ''`` fell back to defaults;
    ``timeline --width 0`` and ``sweep --jobs 0`` were accepted; ``search --top 1000000000`` hung."""
    res = run_cli(*[a.replace("{plan}", str(plan)) for a in args])
    one_line_error(res, 2, fragment)


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--storage-read-gbps", "1e-300", "below the smallest allowed, 0.01"),
        ("--restart-s", "1e308", "above the largest allowed, 1e+06"),
        ("--gpu-failure-rate", "1e308", "above the largest allowed, 0.01"),
        ("--storage-write-gbps", "1e308", "above the largest allowed, 100000"),
        ("--run-days", "-0", "must be positive"),
        ("--repair-hours", "0", "must be positive"),
        ("--spares", "-1", "must not be negative"),
        ("--checkpoint-interval-s", "nan", "finite"),
    ],
)
def test_goodput_flags_are_bounded(run_cli, plan, flag, value, fragment):
    """Issue 55: ``goodput --storage-read-gbps 1e-300``, ``--restart-s 1e308`` and
    ``--gpu-failure-rate 1e308`` raised OverflowError, ``--storage-write-gbps 1e308``
    ZeroDivisionError."""
    one_line_error(run_cli("goodput", str(plan), flag, value, "--json"), 2, flag, fragment)


def test_goodput_at_the_bounds_is_finite_and_quick(run_cli, plan):
    """At the extremes the flags allow the goodput is a finite number in [0, 1], computed quickly:
    Daly's useful fraction in logarithms once exp() would overflow, the availability's Poisson
    sum over O(sqrt(mu)) terms."""
    started = time.process_time()
    res = run_cli("goodput", str(plan), "--gpu-failure-rate", "0.01", "--repair-hours", "8760",
                  "--restart-s", "1e6", "--storage-read-gbps", "0.01", "--storage-write-gbps", "0.01",
                  "--run-days", "3650", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert time.process_time() - started < 30
    best = json.loads(res.stdout)["best"]
    assert 0 <= best["useful_fraction"] <= 1 and 0 <= best["availability"] <= 1


def test_daly_fraction_and_availability_never_overflow():
    from planner.resilience import goodput as gp

    assert gp.useful_fraction(3600.0, 10.0, 1e6, 1.0) == 0.0  # exp(1e6) would overflow
    assert gp.useful_fraction(600.0, 60.0, 300.0, 1e15) == pytest.approx(600.0 / 660.0, rel=1e-6)
    fm = gp.FailureModel(gpu_failure_rate_per_h=0.01, repair_h=8760.0, run_days=3650.0)
    started = time.process_time()
    share = gp.availability(100_000, 8, 10, 100_000, 1, fm)
    assert time.process_time() - started < 10 and math.isfinite(share) and 0 <= share <= 1


# ------------------------------------------------------------------------------------------------
# planner calibrate: runs files, logs, --nodes


@pytest.mark.parametrize("nodes", ["-1", "0", str(2**63)])
def test_calibrate_nodes_is_bounded_even_when_the_log_gives_the_world_size(run_cli, nodes):
    run = f"{CALIBRATE_DATA / 'megatron_llama3_8b.log'},{CALIBRATE_DATA / 'megatron_llama3_8b.args.txt'}"
    one_line_error(run_cli("calibrate", run, "-c", "dgx-h100", "-n", nodes), 2, "--nodes")


def test_megatron_log_with_a_40_digit_peak_is_refused(run_cli, tmp_path):
    """Issue 55: a Megatron log's 40-digit ``max allocated`` was echoed as 1.05e46 bytes."""
    log = (CALIBRATE_DATA / "megatron_llama3_8b.log").read_text()
    line = next(s for s in log.splitlines() if "max allocated" in s)
    head, _, tail = line.partition("max allocated: ")
    edited = line.replace(f"max allocated: {tail.split()[0]}", "max allocated: " + "1" * 40)
    bad = write(tmp_path, "train.log", log.replace(line, edited))
    run = f"{bad},{CALIBRATE_DATA / 'megatron_llama3_8b.args.txt'}"
    one_line_error(run_cli("calibrate", run, "-c", "dgx-h100", "-n", "4"), 1, "train.log:", "max allocated")


@pytest.mark.parametrize(
    "section, key",
    [("model", "num_attention_heads"), ("model", "hidden_size"), ("hardware", "total_gpus")],
)
def test_calibrate_runs_file_with_a_null_field_names_it(run_cli, tmp_path, section, key):
    """Issue 55: a runs file whose record left a field null ended in ``TypeError: unsupported
    operand type(s) for //: 'int' and 'NoneType'``; now the error names the run and the key."""
    from planner.inputs.documents import YAML_LOADER

    data = yaml.load((ROOT / "tests" / "data" / "published_runs.yaml").read_text(), Loader=YAML_LOADER)
    run = copy.deepcopy(next(r for r in data["runs"] if r["id"] == "megatronlm_readme_h100_1.7B"))
    run[section][key] = None
    doc = {k: v for k, v in data.items() if k != "runs"} | {"runs": [run]}
    res = run_cli("calibrate", str(write(tmp_path, "runs.yaml", doc)), "-c", "dgx-h100", "-n", "1")
    one_line_error(res, 1, f"key '{section}.{key}'", "megatronlm_readme_h100_1.7B")
    assert "TypeError" not in res.stderr


# ------------------------------------------------------------------------------------------------
# stderr: one line, control characters escaped, no numpy warnings


def test_names_with_control_characters_are_escaped(run_cli):
    res = run_cli("models", "show", "evil\nname\x1b[2J.yaml")
    one_line_error(res, 1, "evil\\nname\\x1b[2J.yaml")


def test_notes_echo_paths_on_one_line(run_cli, tmp_path, plan):
    target = tmp_path / "two\nlines.svg"
    res = run_cli("timeline", str(plan), "--svg", str(target))
    assert res.exit_code == 0 and target.exists()
    assert res.stderr == f"wrote {tmp_path}/two\\nlines.svg\n"


def test_numpy_warnings_never_reach_stderr_ahead_of_the_error(monkeypatch, capsys):
    """Issue 55: a numpy RuntimeWarning was printed ahead of the one-line error."""
    import importlib

    import numpy as np

    from planner.inputs.errors import SpecError as Spec

    app_module = importlib.import_module("planner.cli.app")

    def failing(args, standalone_mode):
        np.array([1e308]) * 10  # overflow: a RuntimeWarning without errstate
        np.array([0.0]) / 0.0  # invalid value
        raise Spec("bad input")

    monkeypatch.setattr(app_module, "app", failing)
    assert app_module.main(["estimate"]) == 1
    assert capsys.readouterr().err == "error: bad input\n"


def test_gpu_file_cited_bounds_accept_every_shipped_profile(run_cli):
    """The bounds never refuse a real input: every shipped GPU, template and model preset loads."""
    from planner.inputs.graph_model import graph_preset_names, load_graph_model
    from planner.inputs.models import load_model, model_preset_names
    from planner.profiles.hardware import cluster_template_names, gpu_names, load_cluster, load_gpu

    for name in gpu_names():
        load_gpu(name)
    for name in cluster_template_names():
        load_cluster(name, 2)
    for name in model_preset_names(include_graph=False):
        load_model(name)
    for name in graph_preset_names():
        load_graph_model(name)
    assert yaml.safe_load(GPU_YAML.read_text())["sm_count"] <= LIMITS["sm_count"][0]


@pytest.mark.parametrize("theta", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_hf_rope_theta_infinity_is_a_spec_error(run_cli, tmp_path, theta):
    """Found by the issue-55 fuzz run: ``rope_theta: Infinity`` in a HF config.json raised
    OverflowError (``int(inf)``)."""
    config = json.loads((ROOT / "tests" / "data" / "hf" / "deepseek-v3" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config).replace('"rope_theta": 10000', f'"rope_theta": {theta}'))
    assert theta in path.read_text()
    one_line_error(run_cli("models", "show", str(path)), 1, "'rope_theta'")


def test_a_failing_estimate_prints_its_error_alone(run_cli):
    """Found by the issue-55 fuzz run: estimate printed its software note ('no efficiencies for
    a100') ahead of the error of a configuration that cannot run. The note now comes with the
    result, so a failing command's stderr is one line."""
    cluster = str(ROOT / "examples" / "cluster-a100-h100.yaml")
    job = ["-m", "gpt-1.7b", "-s", "1024", "-c", cluster, "--framework", "megatron"]
    one_line_error(run_cli("estimate", *job, "-b", "16"), 1, "not divisible")
    ok = run_cli("estimate", *job, "-b", "128", "--json")
    assert ok.exit_code == 0 and ok.stderr.startswith("note: software profile")


def test_an_infeasible_search_prints_its_error_alone(run_cli):
    cluster = str(ROOT / "examples" / "cluster-a100-h100.yaml")
    res = run_cli("search", "-m", "gpt-1t", "-b", "8", "-s", "1024", "-c", cluster)
    one_line_error(res, 3, "nothing fits")
