"""FP8 blockwise kernel choice by shape (sm90), in Python where tests reach it."""
from __future__ import annotations

from dataclasses import dataclass

from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec

# --- FP8 blockwise (sm90) ----------------------------------------------------------------------
#
# Measured on an H100 (benchmarks/bench_fp8.py --sweep and benchmarks/diag_fp8.py, kernel time
# under CUDA graphs; tables in the README). Decode-sized M (<= 128) is bound by reading the
# weight once:
#   * swapping A and B puts the weight's rows on the kernel's 128-row tile M and the tokens on a
#     narrow tile N. With M <= 16 there is one token tile, so the weight is read exactly once
#     whatever N is: always the swapped 128 x 16 kernel (N = 24576, K = 1536, M = 1: 11.2 us
#     against 16.9 us for the 64 x 128 ping-pong kernel).
#   * above 16 tokens each weight tile is read once per token tile. That stays cheap (from L2)
#     while every (weight tile, token tile) pair gets its own SM: take the narrowest token tile
#     (16, 32, 64) for which ceil(N / 128) * ceil(M / tile N) <= SMs (N = 4096, K = 7168,
#     M = 64: 128 x 16, 12.6 us against 18.4 us ping-pong);
#   * when no tile fits in one wave, the unswapped 64 x 128 ping-pong kernel: a 64-row tile fits
#     M = 64 exactly and N / 128 tiles cover the SMs (N = 24576, M = 64: 12.4 us against 13.1
#     us for the widest swapped tile).
# Prefill-sized M is compute bound: the 128 x 128 cooperative kernel with a 1 x 2 cluster (the
# activation tile multicast to two CTAs) when the tiles fill the GPU twice, ping-pong below that,
# and ping-pong also when K is at most FP8_SHORT_K: with so few K blocks the epilogue is a large
# share of each tile, and ping-pong overlaps one warpgroup's epilogue with the other's mainloop
# (M = 4096, N = 32768, K = 512: 187 us against 200 to 215 us cooperative, over three runs).
# A narrow weight (N < FP8_NARROW_WEIGHT) rasterizes along M, so CTAs running together share
# weight tiles in L2 (M = 4096, N = 2112, K = 7168: 118 us against 139 us with CUTLASS's choice);
# elsewhere CUTLASS's raster heuristic was as fast as any fixed order.

FP8_SWAP_TILES_N = (16, 32, 64)
FP8_NARROW_WEIGHT = 4096
FP8_SHORT_K = 512
RASTER_HEURISTIC, RASTER_ALONG_M = 0, 1  # ext[0] of the FP8 kernels; 2 (along N) is never chosen


@dataclass(frozen=True)
class Fp8Choice:
    """A catalog kernel plus its run-time scheduling knobs (QgemmProblem ext[0..2])."""

    spec: Fp8BlockwiseGemmSpec
    raster: int = RASTER_HEURISTIC
    swizzle: int = 1
    splits: int = 0  # stream-K kernels only: 0 lets CUTLASS choose the decomposition


def _swapped(tile_n: int, output: str) -> Fp8BlockwiseGemmSpec:
    return Fp8BlockwiseGemmSpec((128, tile_n), (1, 1), "cooperative", True, output)


def fp8_choice(m: int, n: int, k: int, output: str, sm_count: int) -> Fp8Choice:
    weight_tiles = -(-n // 128)
    if m <= 16:
        return Fp8Choice(_swapped(16, output))
    if m <= 128:
        for tile_n in FP8_SWAP_TILES_N:
            if weight_tiles * -(-m // tile_n) <= sm_count:
                return Fp8Choice(_swapped(tile_n, output))
        return Fp8Choice(Fp8BlockwiseGemmSpec((64, 128), (1, 1), "pingpong", False, output))
    raster = RASTER_ALONG_M if n < FP8_NARROW_WEIGHT else RASTER_HEURISTIC
    if -(-m // 128) * weight_tiles >= 2 * sm_count and k > FP8_SHORT_K:
        return Fp8Choice(Fp8BlockwiseGemmSpec((128, 128), (1, 2), "cooperative", False, output), raster)
    return Fp8Choice(Fp8BlockwiseGemmSpec((64, 128), (1, 1), "pingpong", False, output), raster)
