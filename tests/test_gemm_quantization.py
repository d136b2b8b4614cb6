"""Tile and wave quantization of GEMMs (cost_models.compute), hand-worked on an A100 (108 SMs,
256 x 128 tiles; NVIDIA's "Matrix Multiplication Background User's Guide")."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.compute import batched_gemm_s, gemm_efficiency, gemm_quantization, gemm_s, linear_s
from planner.profiles.hardware import load_gpu

A100 = load_gpu("a100-sxm4-80gb")
H100 = load_gpu("h100-sxm5-80gb")


def test_a100_profile_carries_its_sm_count_and_tile():
    assert A100.sm_count == 108 and A100.gemm_tile == (256, 128)


def test_aligned_full_waves_lose_nothing():
    # 27648 x 512 outputs: 108 x 4 = 432 tiles of 256 x 128, exactly 4 waves of 108; K 4096 = 64 x 64.
    assert gemm_quantization(27648, 512, 4096, A100, "bf16") == pytest.approx(1.0)


def test_wave_tail_costs_a_whole_wave():
    # 2048 x 1792: 8 x 14 = 112 tiles -> 2 waves (216 tile slots) for 112 tiles' work.
    assert gemm_quantization(2048, 1792, 14336, A100, "bf16") == pytest.approx(112 / 216)
    # One tile more than a wave (109) is as slow as two full waves.
    assert gemm_quantization(109 * 256, 128, 4096, A100, "bf16") == pytest.approx(109 / 216)


def test_misaligned_dimensions_are_padded_to_the_tile_and_the_k_step():
    # N = 1800 (hidden 14400 / tp 8) is padded to 15 columns of 128 (1920) with 256-row tiles, or to
    # 8 columns of 256 (2048) with 128-row tiles; the better orientation counts.
    m, n, k = 4096, 1800, 4096
    q_a = m * n * k / (((16 * 15 + 107) // 108) * 108 * 256 * 128 * 4096)  # 256-row tiles: 240 tiles, 3 waves
    q_b = m * n * k / (((32 * 8 + 107) // 108) * 108 * 128 * 256 * 4096)  # 128-row tiles: 256 tiles, 3 waves
    assert gemm_quantization(m, n, k, A100, "bf16") == pytest.approx(max(q_a, q_b))
    # K = 150 (a head dimension) is read in whole 64-element (128-byte) steps: 192 elements.
    assert gemm_quantization(27648, 512, 150, A100, "bf16") == pytest.approx(150 / 192)
    # FP8 elements are one byte: the step is 128 elements.
    assert gemm_quantization(27648, 512, 150, A100, "fp8") == pytest.approx(150 / 256)


def test_grouped_gemm_shares_waves():
    # 4 experts of 256 x 128 outputs: 4 tiles in one wave, as one GEMM of 4 tiles.
    one = gemm_quantization(256, 128, 4096, A100, "bf16")
    assert one == pytest.approx(1 / 108)
    assert gemm_quantization(256, 128, 4096, A100, "bf16", count=4) == pytest.approx(4 / 108)


def test_unknown_sm_count_means_no_quantization():
    gpu = replace(A100, sm_count=0)
    assert gemm_quantization(2048, 1792, 14336, gpu, "bf16") == 1.0


def test_gemm_time_is_the_size_curve_of_the_issued_work():
    # 112 tiles in two waves of 108: the GPU issues 216 / 112 times the useful FLOPs, and the size
    # curve's fixed cost is paid once, not scaled by the quantization.
    m, n, k = 2048, 1792, 14336
    flop = 2.0 * m * n * k
    issued = flop * 216 / 112
    e = A100.efficiency
    expected = (issued + e.gemm_half_efficiency_flop) / (A100.peak("bf16") * e.gemm_efficiency_max)
    assert gemm_s(m, n, k, A100, "bf16") == pytest.approx(expected)
    assert expected == pytest.approx(issued / (A100.peak("bf16") * gemm_efficiency(issued, A100)))


def test_filling_the_last_wave_costs_nothing_more():
    # 109 to 216 tiles of 256 x 128 all run in two waves on 108 SMs: the same time.
    part = gemm_s(109 * 256, 128, 4096, A100, "bf16")
    full = gemm_s(216 * 256, 128, 4096, A100, "bf16")
    assert full == pytest.approx(part)
    assert gemm_s(217 * 256, 128, 4096, A100, "bf16") > full


_DIM = st.integers(min_value=1, max_value=40_000)


@settings(max_examples=300, deadline=None)
@given(
    m=_DIM,
    n=_DIM,
    k=_DIM,
    grow=st.integers(min_value=1, max_value=5_000),
    axis=st.sampled_from("mnk"),
    gpu=st.sampled_from([A100, H100]),
    precision=st.sampled_from(["bf16", "fp8"]),
)
def test_gemm_time_never_falls_as_a_dimension_grows(m, n, k, grow, axis, gpu, precision):
    dims = {"m": m, "n": n, "k": k}
    bigger = dict(dims, **{axis: dims[axis] + grow})
    assert gemm_s(**bigger, gpu=gpu, precision=precision) >= gemm_s(**dims, gpu=gpu, precision=precision) * (
        1 - 1e-12
    )
    b_small = batched_gemm_s(m, n, k, 4, gpu, "bf16", 0.0)
    b_big = batched_gemm_s(bigger["m"], bigger["n"], bigger["k"], 4, gpu, "bf16", 0.0)
    assert b_big >= b_small * (1 - 1e-12)


def test_linear_layer_prices_each_gemm_on_its_own_shape():
    # BLOOM-class QKV at tp 8, micro-batch 1: forward output 2048 x 5376 (8 x 42 = 336 tiles,
    # 4 waves), input gradient 2048 x 14336 (8 x 112 = 896 tiles, 9 waves), weight gradient
    # 14336 x 5376 (56 x 42 = 2352 tiles, 22 waves; independent of the micro-batch).
    t = linear_s(2048, 5376, 14336, A100, "fp16")
    flop = 2.0 * 2048 * 5376 * 14336

    def issued(q):
        return flop / q / (A100.peak("fp16") * gemm_efficiency(flop / q, A100))

    assert t.forward_s == pytest.approx(issued(336 / 432))
    assert t.input_grad_s == pytest.approx(issued(896 / 972))
    assert t.weight_grad_s == pytest.approx(issued(2352 / 2376))
    # A larger micro-batch fills the last wave of the forward (32 x 42 = 1344 tiles, 12.4 -> 13
    # waves); the weight gradient's output, and so its quantization, does not change.
    assert gemm_quantization(4 * 2048, 5376, 14336, A100, "fp16") == pytest.approx(1344 / 1404)
    assert gemm_quantization(14336, 5376, 4 * 2048, A100, "fp16") == pytest.approx(2352 / 2376)
