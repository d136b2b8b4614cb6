"""NVFP4 training (JobSpec.precision ``nvfp4``): GEMMs at the GPU's FP4:FP8 peak ratio over FP8, the
NVFP4 quantization traffic, the column-wise NVFP4 copy kept for the weight gradient, Blackwell
only, Megatron's ``--fp4-format`` / ``--fp4-recipe`` export and import, torchtitan's refusal, the
CLI, and the published NVFP4 runs of Megatron-Bridge's tables."""

from __future__ import annotations

import json
import statistics

import pytest

from cost_models.compute import (
    AMAX_READ_BYTES,
    NVFP4_CAST_BYTES,
    NVFP4_COPY_BYTES,
    fp4_speedup,
    gemm_s,
    linear_s,
    memory_bound_s,
    quantize_bytes,
)
from cost_models.constraints import resolve
from cost_models.estimate import estimate
from cost_models.parallel import ParallelConfig
from cost_models.tensors import gemm_input_bytes
from planner.calibration.cases import cases, predict_all
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.inputs.validation import require_precision
from planner.launch.megatron.export import export_files
from planner.launch.megatron.export_args import megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.plans.plan_file import PlanInputs, job_to_mapping
from planner.profiles.hardware import load_cluster, load_gpu


def test_gemms_run_at_the_fp4_to_fp8_peak_ratio():
    for name, ratio in (("b200", 2.0), ("gb200", 2.0), ("gb300", 3.0)):
        gpu = load_gpu(name)
        assert fp4_speedup(gpu) == pytest.approx(ratio)
        fp8, fp4 = gemm_s(8192, 8192, 8192, gpu, "fp8"), gemm_s(8192, 8192, 8192, gpu, "nvfp4")
        # the reduction dimension is consumed in 128-byte steps of twice as many FP4 elements
        assert fp8 / fp4 == pytest.approx(ratio, rel=0.02)


def test_quantization_bytes_and_the_kept_copy():
    """An amax read, the cast's read, and two NVFP4 copies (row-wise; column-wise after the
    Hadamard transform), each half a byte plus an E4M3 scale per 16 elements."""
    assert NVFP4_COPY_BYTES == 0.5 + 1 / 16
    assert NVFP4_CAST_BYTES == AMAX_READ_BYTES + 2 + 2 * NVFP4_COPY_BYTES == 5.125
    assert quantize_bytes("nvfp4", "delayed", behind_norm=True) == 5.125  # no norm fusion, any recipe
    gpu, (T, n, k) = load_gpu("gb200"), (8192, 14336, 4096)
    times = linear_s(T, n, k, gpu, "nvfp4", behind_norm=True)
    assert times.forward_s - gemm_s(T, n, k, gpu, "nvfp4") == pytest.approx(
        memory_bound_s(T * k * NVFP4_CAST_BYTES, gpu), rel=1e-9
    )
    assert times.weight_grad_s == gemm_s(k, n, T, gpu, "nvfp4")
    job = make_job(global_batch_size=8, seq_length=4096, precision="nvfp4")
    assert gemm_input_bytes(job) == 0.5625
    assert gemm_input_bytes(make_job(global_batch_size=8, seq_length=4096, precision="fp8")) == 1


def _llama70b(precision: str, cluster_name: str = "gb200-nvl72"):
    m, cluster = load_model("llama3-70b"), load_cluster(cluster_name, 16)
    job = make_job(global_batch_size=256, seq_length=8192, precision=precision)
    c = resolve(
        m,
        cluster,
        job,
        ParallelConfig(
            tp=2, pp=4, vpp=5, schedule="interleaved", micro_batch_size=1, optimizer_sharding="distributed"
        ),
    )
    return m, cluster, job, c


def test_nvfp4_trains_faster_than_fp8_and_keeps_less():
    """Same layout: NVFP4 is faster than FP8 but by less than the 2x its GEMMs gain (attention,
    norms, communication and the quantization stay), and its saved linear inputs are smaller."""
    fp8, nv = (estimate(*_llama70b(p)) for p in ("fp8", "nvfp4"))
    assert 1.1 < fp8.step_time_s / nv.step_time_s < 2.0
    assert nv.worst_stage.memory.activations_bytes < fp8.worst_stage.memory.activations_bytes


def test_nvfp4_needs_fp4_tensor_cores():
    job = make_job(global_batch_size=8, seq_length=4096, precision="nvfp4")
    with pytest.raises(SpecError, match="no FP4 tensor cores for --precision nvfp4"):
        require_precision(load_cluster("dgx-h100", 1), job, "cli")
    require_precision(load_cluster("dgx-b200", 1), job, "cli")


def test_plan_file_round_trip_and_no_fp8_recipe():
    job = make_job(global_batch_size=8, seq_length=4096, precision="nvfp4")
    assert job_from_mapping(job_to_mapping(job), "plan.yaml") == job
    with pytest.raises(SpecError, match="needs precision fp8"):
        make_job(global_batch_size=8, seq_length=4096, precision="nvfp4", fp8_recipe="mxfp8")


def test_megatron_export_and_import_round_trip():
    m, cluster, job, c = _llama70b("nvfp4")
    plan = PlanInputs(m, cluster, job, c)
    args = dict(megatron_args(plan))
    assert (args["--fp4-format"], args["--fp4-recipe"]) == ("e2m1", "nvfp4")
    assert "--bf16" in args and "--fp8-format" not in args
    parsed = parse_megatron(export_files(plan, "torchrun")["megatron_args.txt"], "args.txt", cluster.num_gpus)
    assert parsed.unknown == ()
    assert parsed.job.precision == "nvfp4"
    assert estimate(m, cluster, parsed.job, c).step_time_s == pytest.approx(
        estimate(m, cluster, job, c).step_time_s, rel=1e-12
    )


def test_megatron_import_refuses_an_fp4_it_cannot_price():
    base = (
        "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 32 "
        "--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 128256 --fp4-format e2m1"
    )
    assert parse_megatron(base, "args.txt", 8).job.precision == "nvfp4"  # nvfp4: the default recipe
    with pytest.raises(SpecError, match="--fp4-recipe custom: planner prices FP4 as NVFP4"):
        parse_megatron(base + " --fp4-recipe custom", "args.txt", 8)


def test_torchtitan_has_no_nvfp4():
    m, cluster, job, c = _llama70b("nvfp4")
    reasons = list(get_framework("torchtitan").violations(m, cluster, job, c))
    assert any("no nvfp4 training" in r for r in reasons)
    assert not list(get_framework("megatron").violations(m, cluster, job, c))


def test_cli_estimate_nvfp4(run_cli):
    out = run_cli(
        *"estimate -m llama3-70b -c gb200-nvl72 -n 16 --global-batch-size 256 --seq-len 8192 "
        "--tp 2 --pp 4 --vpp 5 --precision nvfp4 --json".split()
    )
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["job"]["precision"] == "nvfp4"
    bad = run_cli(
        *"estimate -m llama3-8b -c dgx-h100 -n 1 --global-batch-size 8 --seq-len 4096 --precision nvfp4".split()
    )
    assert bad.exit_code == 1 and "FP4 tensor cores" in bad.stderr


def test_published_nvfp4_runs_are_predicted_within_their_documented_error():
    """The six NVFP4 rows of Megatron-Bridge's 26.04.01 and 26.06 tables (Llama 3 70B, Llama 3.1
    405B on GB200 and GB300), which no fitted value has seen: within 7% each (docs/calibration.md,
    "NVFP4")."""
    runs = [c for c in cases() if c.job is not None and c.job.precision == "nvfp4"]
    assert len(runs) == 6
    errors = [r.predicted / r.case.measured_tokens_per_s_per_gpu - 1 for r in predict_all(runs)]
    assert max(abs(e) for e in errors) < 0.07
    assert abs(statistics.median(errors)) < 0.04
