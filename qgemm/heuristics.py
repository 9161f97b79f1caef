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
from cutlass_gen.specs import Fp8BlockwiseGemmSpec, W8A8GemmSpec


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
# Measured on an H100 (benchmarks/bench_fp8.py --sweep, kernel time under CUDA graphs; the
# table is in the README). Decode-sized M (<= 128) is bound by reading the weight once:
#   * a weight of fewer than FP8_FEW_WEIGHT_ROWS rows has too few 128-row tiles to occupy the
#     GPU unswapped; swapping A and B puts those rows on the kernel's M and the tokens on a
#     narrow tile N (16 up to M = 64, else 64), which multiplies the CTAs by M / tile N.
#     (N = 2112: 13.8 us against 19.1 us for the unswapped ping-pong kernel at M = 64.)
#   * otherwise the unswapped 64 x 128 ping-pong kernel: a 64-row tile fits M = 64 exactly and
#     N / 128 tiles already cover the SMs (N = 24576, K = 1536: 13.6 us against 23.8 us swapped).
# Stream-K splits of K measured slower than the plain decomposition on every benchmark shape (the
# FP32 partials' round trip costs more than the extra CTAs win), so the swapped kernels run with
# CUTLASS's own stream-K heuristic (splits = 0).
# Prefill-sized M is compute bound: the 128 x 128 cooperative kernel with a 1 x 2 cluster (the
# activation tile multicast to two CTAs) when the tiles fill the GPU twice, ping-pong below that.

FP8_FEW_WEIGHT_ROWS = 4096


@dataclass(frozen=True)
class Fp8Choice:
    """A catalog kernel plus its run-time scheduling knobs (QgemmProblem ext[0..2])."""

    spec: Fp8BlockwiseGemmSpec
    raster: int = 0  # 0 heuristic, 1 along M, 2 along N
    swizzle: int = 1
    splits: int = 0  # stream-K kernels: 0 lets CUTLASS choose the decomposition


def fp8_choice(m: int, n: int, k: int, output: str, sm_count: int) -> Fp8Choice:
    if m <= 128:
        if n < FP8_FEW_WEIGHT_ROWS:
            tile_n = 16 if m <= 64 else 64
            spec = Fp8BlockwiseGemmSpec((128, tile_n), (1, 1), "cooperative", True, output, scheduler="streamk")
        else:
            spec = Fp8BlockwiseGemmSpec((64, 128), (1, 1), "pingpong", False, output)
        return Fp8Choice(spec)
    big_tiles = -(-m // 128) * -(-n // 128)
    if big_tiles >= 2 * sm_count:
        spec = Fp8BlockwiseGemmSpec((128, 128), (1, 2), "cooperative", False, output)
    else:
        spec = Fp8BlockwiseGemmSpec((64, 128), (1, 1), "pingpong", False, output)
    return Fp8Choice(spec)
