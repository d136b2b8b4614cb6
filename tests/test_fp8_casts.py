"""FP8 quantization traffic (cost_models.compute.fp8_cast_bytes): each FP8 linear quantizes its input
in forward and its output gradient in backward, memory-bound, at its recipe's bytes; under delayed
scaling inputs behind a fused norm pay only the transposed copy; 16-bit linears pay nothing; the
share falls as layers grow."""

from __future__ import annotations

import pytest

from cost_models.compute import (
    FP8_CAST_BYTES,
    NORM_FUSED_CAST_BYTES,
    LinearTimes,
    fp8_cast_bytes,
    gemm_s,
    linear_s,
    memory_bound_s,
)
from cost_models.moe import grouped_linear_s
from planner.profiles.hardware import load_gpu


@pytest.fixture(scope="module")
def h100():
    return load_gpu("h100-sxm5-80gb")


def test_fp8_linear_pays_its_input_and_output_gradient_casts(h100):
    T, n, k = 8192, 14336, 4096
    times = linear_s(T, n, k, h100, "fp8", recipe="delayed")
    gemms = LinearTimes(
        gemm_s(T, n, k, h100, "fp8"), gemm_s(T, k, n, h100, "fp8"), gemm_s(k, n, T, h100, "fp8")
    )
    assert FP8_CAST_BYTES == 4.0  # read 2, write the row-wise and the transposed FP8 copies
    assert times.forward_s - gemms.forward_s == pytest.approx(memory_bound_s(T * k * 4.0, h100), rel=1e-12)
    assert times.input_grad_s - gemms.input_grad_s == pytest.approx(
        memory_bound_s(T * n * 4.0, h100), rel=1e-12
    )
    assert times.weight_grad_s == gemms.weight_grad_s  # the wgrad reuses both transposed copies


def test_a_norm_fused_input_pays_only_the_transpose(h100):
    T, n, k = 8192, 6144, 4096
    full = linear_s(T, n, k, h100, "fp8", recipe="delayed")
    fused = linear_s(T, n, k, h100, "fp8", recipe="delayed", behind_norm=True)
    assert NORM_FUSED_CAST_BYTES == 2.0
    assert full.forward_s - fused.forward_s == pytest.approx(memory_bound_s(T * k * 2.0, h100), rel=1e-9)
    assert full.input_grad_s == fused.input_grad_s


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_sixteen_bit_linears_pay_no_cast(h100, precision):
    T, n, k = 4096, 4096, 4096
    assert linear_s(T, n, k, h100, precision) == LinearTimes(
        gemm_s(T, n, k, h100, precision), gemm_s(T, k, n, h100, precision), gemm_s(k, n, T, h100, precision)
    )


def test_grouped_expert_linears_quantize_every_expert(h100):
    rows, experts, n, k = 512, 8, 1536, 4096
    fp8 = grouped_linear_s(rows, experts, n, k, h100, "fp8", "delayed")
    g = h100.efficiency.grouped_gemm_efficiency
    assert fp8.forward_s - gemm_s(rows * experts, n, k, h100, "fp8") / g == pytest.approx(
        memory_bound_s(rows * experts * k * 4.0, h100), rel=1e-9
    )
    assert fp8.input_grad_s - gemm_s(rows * experts, k, n, h100, "fp8") / g == pytest.approx(
        memory_bound_s(rows * experts * n * 4.0, h100), rel=1e-9
    )


def test_the_cast_share_falls_as_the_layer_grows(h100):
    """Casts move O(T (k + n)) bytes against the GEMMs' O(T k n) FLOPs: a 4K-wide layer pays a larger
    share than an 18K-wide one."""
    shares = []
    for h in (4096, 8192, 18432):
        fp8 = linear_s(8192, 4 * h, h, h100, "fp8")
        bare = gemm_s(8192, 4 * h, h, h100, "fp8")
        shares.append((fp8.forward_s - bare) / bare)
    assert shares[0] > shares[1] > shares[2] > 0


def test_graph_cross_attention_quantizes_its_projections_as_chain_linears_do():
    from cost_models.compute import fp8_cast_s
    from cost_models.graph_units import cross_attention
    from cost_models.parallel import ParallelConfig
    from planner.inputs.graph_model import load_graph_model
    from planner.inputs.jobs import make_job
    from planner.profiles.hardware import load_cluster

    g = load_graph_model("t5-11b")
    (block,) = [b for b in g.blocks if b.cross_attention_from]
    source = g.cross_source(block)
    node = load_cluster("dgx-h100", 1).groups[0]
    c = ParallelConfig(tp=2, micro_batch_size=1)
    bf16, fp8 = (
        cross_attention(block, source, make_job(global_batch_size=8, seq_length=512, precision=p), c, node)
        for p in ("bf16", "fp8")
    )
    m, src = block.transformer, source.transformer
    T, T_enc = block.tokens(512), source.tokens(512)
    h, q, h_enc = m.hidden_size, m.query_projection_size, src.hidden_size
    kv_local = max(m.kv_projection_size / 2, m.kv_channels)
    gemm_gain = bf16.backward_weight_s - fp8.backward_weight_s  # the wgrad GEMMs pay no cast
    assert gemm_gain > 0
    per_element = fp8_cast_bytes("tensorwise")  # the job's default recipe
    assert bf16.forward_s - fp8.forward_s == pytest.approx(
        gemm_gain - fp8_cast_s(T * h + T_enc * h_enc + T * q / 2, node.gpu, per_element), rel=1e-9
    )
    assert bf16.backward_input_s - fp8.backward_input_s == pytest.approx(
        gemm_gain - fp8_cast_s(T * q / 2 + T_enc * 2 * kv_local + T * h, node.gpu, per_element), rel=1e-9
    )
