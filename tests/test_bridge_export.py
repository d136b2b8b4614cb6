"""Megatron-Bridge export and import (issue 54, item 6): ``planner export megatron-bridge`` writes
a ConfigContainer override; ``planner check`` reads it back as the Megatron launch its fields stand
for. Every golden case (tests/test_megatron.py CASES) and the README's main job: exported, then
checked, within 0.5% of the plan's step time (or refused at export with a one-line reason)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from planner.inputs.errors import SpecError
from planner.launch.bridge import export as bx
from planner.launch.bridge.importer import read_bridge
from planner.launch.check import check_file
from planner.plans.plan_file import plan_document, read_plan, write_plan
from planner.profiles.software import cluster_families, default_software
from tests.test_megatron import CASES

REFUSED = {}
"""Golden cases this export refuses, with the reason's words (filled in below as they are met)."""


def _verdict(path: Path, cluster=None):
    verdict = check_file(str(path), cluster)
    errors = [f.message for f in verdict.findings if f.level == "error"]
    assert not errors, f"{path.name}: {errors}"
    assert not [f for f in verdict.findings if "not interpreted" in f.message], verdict.findings
    return verdict


def _round_trip(plan_path: Path, cluster, out: Path) -> tuple[float, float]:
    inputs = read_plan(str(plan_path))
    files = bx.export_files(inputs)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    plan_s = _verdict(plan_path).metrics["step_time_s"]
    return plan_s, _verdict(out / bx.OVERRIDES_FILE, cluster).metrics["step_time_s"]


def write_case(name: str, tmp_path: Path):
    plan = CASES[name]()
    plan = replace(plan, software=default_software("megatron", cluster_families(plan.cluster)))
    path = tmp_path / "plan.yaml"
    write_plan(path, plan_document(plan, {}, None))
    return plan, path


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_case_exports_and_re_checks_at_the_plans_step_time(name, tmp_path):
    plan, path = write_case(name, tmp_path)
    try:
        plan_s, bridge_s = _round_trip(path, plan.cluster, tmp_path / "bridge")
    except SpecError as exc:
        assert name in REFUSED and REFUSED[name] in str(exc), (name, str(exc))
        assert "\n" not in str(exc)
        return
    assert name not in REFUSED
    assert bridge_s == pytest.approx(plan_s, rel=5e-3)


def test_readme_main_job_exports_and_re_checks(run_cli, tmp_path, readme_plan):
    plan, cluster, cluster_args = readme_plan
    out = tmp_path / "bridge"
    result = run_cli("export", "megatron-bridge", str(plan), "--out", str(out), "-q")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "bridge_overrides.yaml",
        "launch_torchrun.sh",
        "pretrain_bridge.py",
    ]
    text = (out / bx.OVERRIDES_FILE).read_text()
    assert "# recipe: megatron.bridge.recipes.llama:llama3_70b_pretrain_config" in text
    doc = yaml.safe_load(text)
    assert set(doc) <= {
        "model",
        "train",
        "dataset",
        "ddp",
        "optimizer",
        "dist",
        "comm_overlap",
        "mixed_precision",
    }
    plan_s = _verdict(plan).metrics["step_time_s"]
    bridge = _verdict(out / bx.OVERRIDES_FILE, cluster)
    assert bridge.metrics["step_time_s"] == pytest.approx(plan_s, rel=5e-3)
    result = run_cli("check", str(out / bx.OVERRIDES_FILE), *cluster_args)
    assert result.exit_code == 0 and result.stdout.startswith("PASS"), result.stdout + result.stderr


def _exported(tmp_path: Path, case: str = "moe_expert_parallel") -> tuple[Path, object]:
    plan, path = write_case(case, tmp_path)
    out = tmp_path / "bridge"
    out.mkdir()
    for name, text in bx.export_files(read_plan(str(path))).items():
        (out / name).write_text(text)
    return out / bx.OVERRIDES_FILE, plan


def test_import_reads_the_plans_layout_and_precision(tmp_path):
    for case in ("moe_expert_parallel", "uneven_layout", "full_recompute_fp8", "dense_gqa_interleaved"):
        (tmp_path / case).mkdir()
        path, plan = _exported(tmp_path / case, case)
        got = read_bridge(path.read_text(), str(path), plan.cluster.num_gpus).imported
        c = plan.config
        assert (got.config.tp, got.config.pp, got.config.cp, got.config.ep, got.config.vpp) == (
            c.tp,
            c.pp,
            c.cp,
            c.ep,
            c.vpp,
        ), case
        assert got.config.layers_per_stage == c.layers_per_stage, case
        assert (got.config.recompute, got.config.optimizer_sharding) == (c.recompute, c.optimizer_sharding), (
            case
        )
        assert (got.job.precision, got.job.global_batch_size) == (
            plan.job.precision,
            plan.job.global_batch_size,
        )
        if plan.job.precision == "fp8":
            assert got.job.fp8_recipe == plan.job.fp8_recipe


def test_an_edited_field_changes_the_estimate(tmp_path):
    path, plan = _exported(tmp_path)
    before = _verdict(path, plan.cluster).metrics["step_time_s"]
    doc = yaml.safe_load(path.read_text())
    doc["mixed_precision"] = "bf16_with_fp8_current_scaling_mixed"
    for key in ("overlap_grad_reduce", "overlap_param_gather"):
        doc["ddp"][key] = doc["comm_overlap"][key] = False
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert _verdict(path, plan.cluster).metrics["step_time_s"] != pytest.approx(before, rel=1e-3)


def test_unknown_keys_are_reported_not_interpreted(tmp_path):
    path, plan = _exported(tmp_path)
    text = path.read_text().replace("model:\n", "model:\n  moe_router_dtype: fp32\n", 1)
    text = text.replace("train:\n", "train:\n  train_iters: 100\n", 1)
    path.write_text(text)
    verdict = check_file(str(path), plan.cluster)
    warned = [f for f in verdict.findings if "not interpreted" in f.message]
    assert [f.flags for f in warned] == [("model.moe_router_dtype",)]
    assert warned[0].line == 5  # the line of the key: three header comments, model:, then it
    assert verdict.passed


@pytest.mark.parametrize(
    "edit, words",
    [
        (
            ("tensor_model_parallel_size: 2", "tensor_model_parallel_size: two"),
            "model.tensor_model_parallel_size: expected an integer",
        ),
        (("mixed_precision: bf16_mixed", "mixed_precision: int8_mixed"), "mixed_precision 'int8_mixed'"),
        (("activation_func: silu", "activation_func: relu"), "model.activation_func 'relu'"),
        (
            ("sequence_parallel: true", "sequence_parallel: 1"),
            "model.sequence_parallel: expected true or false",
        ),
    ],
)
def test_a_value_planner_cannot_interpret_is_one_error_line(tmp_path, edit, words):
    path, plan = _exported(tmp_path)
    path.write_text(path.read_text().replace(*edit))
    verdict = check_file(str(path), plan.cluster)
    errors = [f.message for f in verdict.findings if f.level == "error"]
    assert len(errors) == 1 and words in errors[0] and "\n" not in errors[0], errors
    assert not verdict.passed


def test_megatron_errors_name_the_bridge_key(tmp_path):
    path, plan = _exported(tmp_path)
    path.write_text(
        path.read_text().replace("pipeline_model_parallel_size: 2", "pipeline_model_parallel_size: 3")
    )
    verdict = check_file(str(path), plan.cluster)
    assert not verdict.passed
    assert not any("--" in f.message for f in verdict.findings if f.level == "error" and f.check == "parse")


def test_refusals_are_one_line(tmp_path):
    plan, _ = write_case("moe_expert_parallel", tmp_path)
    inputs = read_plan(str(tmp_path / "plan.yaml"))
    bf16_grads = replace(inputs, job=replace(inputs.job, grad_dtype="bf16"))
    with pytest.raises(SpecError, match="ddp.grad_reduce_in_fp32") as exc:
        bx.export_files(bf16_grads)
    assert "\n" not in str(exc.value)


def test_export_cli_refuses_a_graph_plan(run_cli, tmp_path):
    plan = tmp_path / "graph.yaml"
    job = ["-m", "mmt-4tower-4b", "-c", "dgx-h100", "-n", "1", "-b", "256", "-s", "4096"]
    result = run_cli("search", *job, "--top", "1", "--out", str(plan), "-q")
    assert result.exit_code == 0, result.stdout + result.stderr
    result = run_cli("export", "megatron-bridge", str(plan), "--out", str(tmp_path / "b"))
    assert result.exit_code == 1
    assert "graph plan" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_validation_script_without_megatron_bridge_says_so_and_exits_2():
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("megatron") is not None:
        pytest.skip("megatron is importable here: the script validates instead")
    script = Path(__file__).parent.parent / "scripts" / "validate_bridge_exports.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stdout.strip().splitlines() == [
        "megatron-bridge is not installed (pip install megatron-bridge): nothing validated"
    ]
