"""MXFP4 training (JobSpec.precision ``mxfp4``, the OCP Microscaling FP4 format): GEMMs at the GPU's
FP4:FP8 peak ratio as NVFP4, its own quantization traffic (E8M0 scales per 32, no per-tensor amax),
the GPUs that run it (Blackwell, AMD MI355X; NVFP4 is not AMD's), the frameworks that do not (every
exporter: only ``--framework any`` plans it) and the calibration records' precision text."""

from __future__ import annotations

import json

import pytest

from cost_models.compute import (
    MXFP4_CAST_BYTES,
    MXFP4_COPY_BYTES,
    NVFP4_CAST_BYTES,
    fp4_speedup,
    gemm_s,
    linear_s,
    memory_bound_s,
    quantize_bytes,
)
from cost_models.tensors import gemm_input_bytes
from planner.calibration.cases import _precision_of
from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.validation import require_precision
from planner.profiles.hardware import load_cluster, load_gpu


def test_mxfp4_gemms_run_at_the_fp4_peak_on_blackwell_and_mi355x():
    for name, ratio in (("b200", 2.0), ("gb300", 3.0), ("mi355x", 2.0)):
        gpu = load_gpu(name)
        assert fp4_speedup(gpu) == pytest.approx(ratio, rel=1e-4)
        mx, nv = gemm_s(8192, 8192, 8192, gpu, "mxfp4"), gemm_s(8192, 8192, 8192, gpu, "fp8")
        assert nv / mx == pytest.approx(ratio, rel=0.02)
    # the MI355X's FP4 peak is twice its FP8 one (AMD's data sheet: 10.1 PFLOP/s MXFP4)
    mi = load_gpu("mi355x")
    assert mi.peak("fp4") == pytest.approx(2 * mi.peak("fp8"), rel=1e-4)


def test_mxfp4_quantization_bytes_and_the_kept_copy():
    """The cast's read and two MXFP4 copies of half a byte plus an E8M0 scale per 32 elements: no
    amax pass, so less traffic than NVFP4's."""
    assert MXFP4_COPY_BYTES == 0.5 + 1 / 32
    assert MXFP4_CAST_BYTES == 2 + 2 * MXFP4_COPY_BYTES == 3.0625 < NVFP4_CAST_BYTES
    assert quantize_bytes("mxfp4", "tensorwise", behind_norm=True) == 3.0625
    gpu, (T, n, k) = load_gpu("mi355x"), (16384, 14336, 4096)
    times = linear_s(T, n, k, gpu, "mxfp4", behind_norm=True)
    assert times.forward_s - gemm_s(T, n, k, gpu, "mxfp4") == pytest.approx(
        memory_bound_s(T * k * MXFP4_CAST_BYTES, gpu), rel=1e-9
    )
    assert gemm_input_bytes(make_job(global_batch_size=8, seq_length=4096, precision="mxfp4")) == 0.53125


@pytest.mark.parametrize(
    "template, precision, error",
    [
        ("mi355x-node", "mxfp4", None),
        ("dgx-b200", "mxfp4", None),
        ("mi300x-node", "mxfp4", "no FP4 tensor cores for --precision mxfp4"),
        ("dgx-h100", "mxfp4", "no FP4 tensor cores for --precision mxfp4"),
        ("mi355x-node", "nvfp4", "its FP4 is MXFP4 (--precision mxfp4)"),
        ("dgx-b200", "nvfp4", None),
    ],
)
def test_which_gpus_run_mxfp4_and_nvfp4(template, precision, error):
    cluster = load_cluster(template, 1)
    job = make_job(global_batch_size=8, seq_length=4096, precision=precision)
    if error is None:
        require_precision(cluster, job, "--precision")
    else:
        with pytest.raises(SpecError, match=error.replace("(", r"\(").replace(")", r"\)")):
            require_precision(cluster, job, "--precision")


def test_only_the_framework_neutral_search_plans_mxfp4(run_cli, tmp_path):
    """No framework planner exports to has an MXFP4 flag: search under the default framework refuses
    it by name, --framework any plans it, and exporting that plan to Megatron-LM is refused."""
    job = "-m llama3-8b -c mi355x-node -n 1 -b 32 -s 8192 --precision mxfp4".split()
    refused = run_cli("search", *job)
    assert refused.exit_code == 1 and "has no mxfp4 training" in refused.stderr
    plan = tmp_path / "plan.yaml"
    out = json.loads(run_cli("search", *job, "--framework", "any", "--json", "--out", str(plan)).stdout)
    best = out["plans"][0]
    assert out["job"]["precision"] == "mxfp4" and best["tokens_per_s_per_gpu"] > 0
    fp8 = json.loads(run_cli("search", *job[:-1], "fp8", "--framework", "any", "--json").stdout)["plans"][0]
    assert best["tokens_per_s_per_gpu"] > fp8["tokens_per_s_per_gpu"]
    export = run_cli("export", "megatron", str(plan), "--out", str(tmp_path / "exp"))
    assert export.exit_code == 1 and "has no mxfp4 training" in (export.stderr + export.stdout)
    assert not (tmp_path / "exp").exists()


def test_calibration_records_name_mxfp4():
    assert _precision_of("mxfp4 (ocp mx e2m1, e8m0 scales per 32)") == "mxfp4"
    assert _precision_of("nvfp4 (nvfp4 gemms)") == "nvfp4"
    assert _precision_of("fp8 (e4m3)") == "fp8"
