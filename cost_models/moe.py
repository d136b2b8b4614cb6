"""Routed-expert (MoE) pricing terms: load imbalance and grouped-GEMM tile quantisation.

Pure functions used by :func:`cost_models.layers._decoder`'s MoE branch.

* **Load imbalance (dropless routing).** Each rank of the expert-parallel group holds ``E / ep``
  experts; the step waits on the rank that received the most routed token copies. Treating the
  ``m`` routed copies of a micro-batch as balls thrown into ``n = ep`` bins, the expected maximum
  load for ``m >> n ln n`` is ``m/n + sqrt(2 (m/n) ln n)`` (Raab & Steger, "Balls into bins -
  a simple and tight analysis", RANDOM 1998, Theorem 1), i.e. a factor
  ``1 + sqrt(2 ln n / (m/n))`` over the mean. An auxiliary-loss-balanced router is balanced in
  expectation (Fedus et al. 2021, Switch Transformer eq. 4; Megatron-Core ``moe_aux_loss_coeff``),
  so the per-micro-batch fluctuation is this multinomial one.
* **Capacity factor.** With ``moe_expert_capacity_factor = cf`` Megatron-Core drops the tokens an
  expert receives beyond ``cf`` times the mean (Megatron-Core MoE docs, "capacity factor"; Fedus et
  al. 2021 Sec. 2.2), so the busiest rank processes ``min(max load, cf)`` times the mean.
* **Grouped-GEMM tile quantisation.** A grouped GEMM computes each expert's rows in whole tiles;
  MegaBlocks (Gale et al. 2022, arXiv 2211.15841, Sec. 5.1) pads every expert's token count to a
  multiple of its 128-row block. For token counts not aligned to the tile, the expected padding is
  half a tile per expert (uniform remainder), and an expert with any tokens costs at least one tile.
"""

from __future__ import annotations

import math

GROUPED_GEMM_TILE_ROWS = 128
"""Rows per tile of a grouped GEMM (MegaBlocks' block size, Gale et al. 2022 Sec. 5.1)."""


def max_load_factor(routed_copies: float, bins: int) -> float:
    """Expected busiest-bin load over the mean, for ``routed_copies`` balls in ``bins`` bins.

    Raab & Steger 1998, Theorem 1 (heavily loaded case): ``max ~ m/n + sqrt(2 (m/n) ln n)``.
    One bin (no expert parallelism) has no imbalance across ranks: factor 1.
    """
    if bins <= 1 or routed_copies <= 0:
        return 1.0
    mean = routed_copies / bins
    return 1.0 + math.sqrt(2.0 * math.log(bins) / mean)


def routed_load_factor(routed_copies: float, ep: int, capacity_factor: float | None) -> float:
    """Load of the busiest expert-parallel rank over the balanced mean.

    Dropless routing: :func:`max_load_factor`. With a capacity factor the excess is dropped, so the
    factor is capped at ``capacity_factor`` (Fedus et al. 2021 Sec. 2.2).
    """
    f = max_load_factor(routed_copies, ep)
    if capacity_factor:
        f = min(f, capacity_factor)
    return f


def grouped_gemm_rows(tokens_per_expert: float, tile: int = GROUPED_GEMM_TILE_ROWS) -> float:
    """Rows one expert's GEMM computes: its tokens plus the expected padding of its last tile.

    At least one whole tile when the expert has tokens (MegaBlocks, arXiv 2211.15841 Sec. 5.1).
    """
    if tokens_per_expert <= 0:
        return 0.0
    return max(float(tile), tokens_per_expert + tile / 2.0)
