"""Kernel choice by shape, in Python where tests reach it.

W8A8 (one K-block per threadblock): each output tile is a chain of K/block_size
folds, so the time is set by how many chains run side by side and how much work
each link does. Small M wants many narrow tiles (more chains in flight, less
padding in M); large M wants the big tile (fewer re-reads of A and B).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from cutlass_gen.catalog import catalog
from cutlass_gen.specs import Fp8BlockwiseGemmSpec, FpAIntBDequantSpec, FpAIntBGemvSpec, W8A8GemmSpec


def w8a8_tile_for(m: int, n: int, sm_count: int) -> tuple[int, int]:
    """(tile M, tile N) for an M x N output on a GPU with sm_count multiprocessors."""
    if m <= 32:
        return (32, 128)
    big_tiles = -(-m // 128) * -(-n // 128)
    if big_tiles >= 2 * sm_count:
        return (128, 128)
    return (64, 64)


@functools.lru_cache(maxsize=4096)
def w8a8_spec(m: int, n: int, block_size: int, output: str, target_sm: int, sm_count: int) -> W8A8GemmSpec:
    """The catalog's W8A8 kernel for this shape: the newest arch whose tile K divides
    block_size (Sm80's K=64 tiles can't serve block size 32), then the tile by shape."""
    tile_mn = w8a8_tile_for(m, n, sm_count)
    candidates = [
        s for s in catalog(target_sm, W8A8GemmSpec.family)
        if s.output == output and s.supports_block_size(block_size) and s.supports_target(target_sm)
    ]
    if not candidates:
        raise ValueError(f"no W8A8 kernel in the sm{target_sm} catalog for block_size={block_size}, output={output}")
    best_arch = max(s.arch for s in candidates)
    candidates = [s for s in candidates if s.arch == best_arch]
    for spec in candidates:
        if spec.tile[:2] == tile_mn:
            return spec
    return candidates[0]


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
RASTER_HEURISTIC, RASTER_ALONG_M, RASTER_ALONG_N = 0, 1, 2


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


# FpA x IntB (W4A16 / W8A16). Up to FPAINTB_GEMV_MAX_M rows the small-M tensor-core kernel reads
# every weight byte once per CTA row (16 or 32 rows), so it is bound by weight bandwidth and by
# how many loads are in flight; beyond that the weight is dequantized once into FP16/BF16 and
# cuBLAS runs the compute-bound GEMM (M = 64 on an H100: the small-M kernel 205-330 us against
# 470-530 us for dequantize + cuBLAS; M = 256: the reverse).
# The CTA shape, from sweeps on an H100 (benchmarks/bench_fpaintb.py --sweep: M = 1 and 16, four
# (K, N) shapes, n_tiles x warps_k x register cap x prefetch depth; numbers are M, K, N: time):
#   * up to 8 rows (FPAINTB_DECODE): 8-row CTAs (no registers or loads for rows that cannot
#     exist), 16 columns, 8 warps splitting K, registers capped so 16 warps fit on an SM.
#     Occupancy keeps the code loads in flight, and narrow deep CTAs give every shape enough of
#     them. Within 12% of the best configuration on all four shapes, INT4 and INT8 (1, 11008, 4096:
#     14.6 us, the best; 1, 14336, 21504: 87.6 against 85.2). Deeper prefetch (2 or 3 blocks) did
#     not help: the registers it takes cost more occupancy than it adds loads in flight.
#   * 9 to 16 rows (FPAINTB_SMALL): the 16 activation rows are re-read once per CTA, so wider CTAs
#     pay off: 32 columns, 4 warps, no register cap (16, 28672, 8192: 73.7 us against 110 for the
#     decode CTA; 16, 14336, 21504: 115.8 against 159).
#   * 17 to 64 rows: two M tiles (32 rows) and 32 columns per CTA, and the fewest warps splitting
#     K that put FPAINTB_WARPS_PER_SM warps on every SM (64, 14336, 21504: 327 us against 475 us
#     for one 64-row tile).
FPAINTB_GEMV_MAX_M = 64
FPAINTB_DECODE = dict(m_tiles=1, n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True)
FPAINTB_SMALL = dict(m_tiles=1, n_tiles=4, warps_k=4)
FPAINTB_WARPS_PER_SM = 8
FPAINTB_WARPS_K = (1, 2, 4)


@dataclass(frozen=True)
class FpAIntBChoice:
    spec: FpAIntBGemvSpec | FpAIntBDequantSpec

    @property
    def dequantize(self) -> bool:
        return isinstance(self.spec, FpAIntBDequantSpec)


def fpaintb_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    if m > FPAINTB_GEMV_MAX_M:
        return FpAIntBChoice(FpAIntBDequantSpec(act, bits, arch))
    if m <= 16:
        return FpAIntBChoice(FpAIntBGemvSpec(act, bits, arch=arch, **(FPAINTB_DECODE if m <= 8 else FPAINTB_SMALL)))
    ctas = -(-n // 32)
    warps_k = next((w for w in FPAINTB_WARPS_K if ctas * w >= FPAINTB_WARPS_PER_SM * sm_count), FPAINTB_WARPS_K[-1])
    return FpAIntBChoice(FpAIntBGemvSpec(act, bits, 2, 4, warps_k, arch=arch))
