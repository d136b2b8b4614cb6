"""Tile and wave quantization of GEMMs (cost_models.compute), hand-worked on an A100 (108 SMs,
256 x 128 tiles; NVIDIA's "Matrix Multiplication Background User's Guide")."""

from dataclasses import replace

import pytest

from cost_models.compute import gemm_efficiency, gemm_quantization, gemm_s, linear_s
from planner.profiles.hardware import load_gpu

A100 = load_gpu("a100-sxm4-80gb")


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


def test_gemm_time_divides_by_the_quantization():
    m, n, k = 2048, 1792, 14336
    flop = 2.0 * m * n * k
    expected = flop / (A100.peak("bf16") * gemm_efficiency(flop, A100) * (112 / 216))
    assert gemm_s(m, n, k, A100, "bf16") == pytest.approx(expected)


def test_linear_layer_prices_each_gemm_on_its_own_shape():
    # BLOOM-class QKV at tp 8, micro-batch 1: forward output 2048 x 5376 (8 x 42 = 336 tiles,
    # 4 waves), input gradient 2048 x 14336 (8 x 112 = 896 tiles, 9 waves), weight gradient
    # 14336 x 5376 (56 x 42 = 2352 tiles, 22 waves; independent of the micro-batch).
    t = linear_s(2048, 5376, 14336, A100, "fp16")
    flop = 2.0 * 2048 * 5376 * 14336
    base = flop / (A100.peak("fp16") * gemm_efficiency(flop, A100))
    assert t.forward_s == pytest.approx(base / (336 / 432))
    assert t.input_grad_s == pytest.approx(base / (896 / 972))
    assert t.weight_grad_s == pytest.approx(base / (2352 / 2376))
    # A larger micro-batch fills the last wave of the forward (32 x 42 = 1344 tiles, 12.4 -> 13
    # waves); the weight gradient's output, and so its quantization, does not change.
    assert gemm_quantization(4 * 2048, 5376, 14336, A100, "fp16") == pytest.approx(1344 / 1404)
    assert gemm_quantization(14336, 5376, 4 * 2048, A100, "fp16") == pytest.approx(2352 / 2376)
