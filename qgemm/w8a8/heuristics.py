"""W8A8 kernel choice by shape, in Python where tests reach it.

W8A8 (one K-block per threadblock): each output tile is a chain of K/block_size
folds, so the time is set by how many chains run side by side and how much work
each link does. Small M wants many narrow tiles (more chains in flight, less
padding in M); large M wants the big tile (fewer re-reads of A and B).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import (w8a8_sm90_alternate, w8a8_sm90_blocks_in_flight, w8a8_sm90_configs,
                                       w8a8_sm90_schedule)
from cutlass_gen.families.w8a8 import W8A8_PROMOTE_DECODE, W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, w8a8_promote_spec
from cutlass_gen.families.w8a8 import W8A8GemmSpec, W8A8GemvSpec, W8A8PromoteSpec, W8A8Sm90Spec


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


# --- W8A8 on sm90 (register promotion per K-block, W8A8Sm90Spec) -------------------------------
#
# Started from the FP8 family's rules (its kernels have the same structure); the swap range, the
# stream-K fill and the 256-row tile are set from H100 measurements (below):
#   * decode-sized M: swap A and B so the weight's rows fill the 128-row tile and the tokens a
#     narrow tile N (16, 32, 64): the narrowest whose (weight tiles x token tiles) fit one wave,
#     so every weight byte is read once from DRAM. Up to 16 tokens there is one token tile, and a
#     weight of fewer than W8A8_SM90_DECODE_SPLITK_TILES[scheme] row tiles would stream from only
#     that many SMs: split-K into W8A8_SM90_DECODE_SPLITS on the stream-K kernel spreads it; below
#     W8A8_SM90_DECODE_STREAMK_TILES[scheme] (and the SM count) CUTLASS's stream-K decomposition
#     does. Measured (bench_w8a8.py --sweep, H100, 2026-11-27, M = 1 and 16 alike, us, symmetric /
#     asymmetric):
#       N x K          row tiles  persistent    CUTLASS's stream-K  split-K 2     split-K 4
#       2112 x 7168    17         16.6 / 34.3   17.1 / 18.3         15.7 / 22.1   15.3 / 16.7
#       4096 x 4096    32         11.7 / 20.5   15.1 / 16.7         14.1 / 16.2   15.1 / 16.8
#       7168 x 2048    56         8.8 / 11.8    12.4 / 14.1         12.4 / 14.1   14.1 / 15.6
#       12288 x 4096   96         21.8 / 24.0   21.3 / 23.5         25.9 / 30.0   27.3 / 29.2
#       8192 x 28672   64         82.3 / 122.3  88.1 / 98.9
#     (before: CUTLASS's stream-K below 132 row tiles). The asymmetric scheme's heavier promotion
#     keeps it on split-K up to more tiles, and on CUTLASS's stream-K below the SM count (7168 x 2048
#     would run 2.3 us faster persistent, 8192 x 28672 24 us slower).
#     Up to W8A8_SM90_SWAP_ALWAYS_MAX_M rows a weight that fits no wave still takes a swapped tile:
#     the narrowest that holds all the rows, else the widest (H200, 2026-11-28, asymmetric M = 32:
#     28672 x 8192 128 x 64 100.6 -> 128 x 32 71.3 us, 28672 x 4096 52.9 -> 38.2); above, up to
#     W8A8_SM90_SWAP_MAX_M, it takes the 128 x 128 kernel.
#   * larger M: the 128 x 128 cooperative kernel (two consumer warp groups on one tile: while one
#     promotes its block product, the other's WGMMAs run; for the asymmetric scheme at block 128 in
#     turns, w8a8_sm90_alternate), persistent; stream-K when the output tiles fill less than
#     W8A8_SM90_STREAMK_MAX_FILL of the GPU (few tiles, deep K); the symmetric scheme's 256-row tile
#     from a wave of 128-row tiles on (_prefill_tile, below).
#
# The swapped tiles up to 128 rows and the stream-K fill were set from `bench_w8a8.py --sweep` (H100,
# 2026-11-27, rotated weights, us, symmetric / asymmetric; the rule before in brackets):
#   M = 128: 4096 x 4096  128x32 swapped 12.7 / 18.7   [128 x 128 stream-K 22.5 / 28.9]
#            2112 x 7168  128x32 swapped 18.6 / 29.8   [stream-K 26.5 / 33.4]
#            7168 x 2048  128x64 swapped 10.9 / 15.2   [stream-K 17.0 / 23.9]
#            12288 x 4096 (no swapped tile fits a wave: 128x64 32.0 / 52.4) 128 x 128 persistent
#                         27.2 / 42.6   [stream-K 26.1 / 55.7]
#   M = 256: 7168 x 2048  (112 tiles) persistent 13.0 / 22.9   [stream-K 14.1 / 30.7]
#            2112 x 7168  (34 tiles) stream-K 22.7 / 41.8 (persistent 29.7 / 69.9)
#   M = 2048, 1024 x 4096 (128 tiles): persistent 19.8 against stream-K 21.5 (diag_prefill.py).
# 17-64 rows (bench_w8a8.py --sweep, H100, 2026-11-27, us, M = 32 unless named): the asymmetric scheme
# runs faster on 32-token tiles than on 16 (4096 x 4096 18.7 against 20.5, 8192 x 28672 109.6 against
# 127.8, M = 64 4096 x 4096 18.8 against 20.3), the symmetric one as fast or faster on 16 (4096 x 4096
# 11.8 against 12.8); and fewer than W8A8_SM90_SWAP_STREAMK_CTAS CTAs take CUTLASS's stream-K
# (2112 x 7168: symmetric 16-token 15.2 against 17.4 persistent; asymmetric 32-token 20.0 against
# 29.8, M = 64 22.2 against 29.7; 4096 x 4096 at M = 64, 64 CTAs: persistent 11.6 / 18.8 against
# stream-K 12.3 / 22.8).
#
# Up to W8A8_SM90_PINGPONG_MAX_M tokens, the 64-row swapped tiles on the pingpong schedule (16 tokens
# wide up to 16 rows, 32 beyond; 33-128 rows and the asymmetric scheme's decode tile below): each
# consumer warp group takes its own weight tile, so a weight of N rows streams from N / 64 SMs instead
# of N / 128 (Llama's N = 4096 projections: 64 SMs instead of 32, where the 128-row kernel reaches
# ~2 TB/s with or without split-K; ncu at M = 1, N 4096, K 14336: DRAM 45% persistent on 32 CTAs, 53%
# split-K 4 on 132), and one warp group's promotion runs beside the other's WGMMAs. Measured with
# benchmarks/diag_w8a8_choices.py (H100, night of 2026-11-27, rotated weights, FP16 out, us, the rule
# before -> 64-row pingpong;
# M = 1, and M = 4 and 16 within 1 us of it):
#   symmetric   N x K          M = 1                 M = 32 (64 x 32 tile)
#               4096 x 4096    10.0 -> 8.4           10.2 -> 9.1
#               4096 x 14336   30.1 -> 23.8          30.4 -> 25.8
#               2112 x 7168    14.8 -> 11.1          15.0 -> 12.7
#               3072 x 8192    17.5 -> 12.7
#               1024 x 4096    11.1 -> 7.0
#               6144 x 4096    12.0 -> 10.8
#               7168 x 2048     7.5 -> 7.3            7.8 -> 7.5
#               12288 x 4096                         22.0 -> 20.9
#               14336 x 4096   22.8 -> 21.8
#               28672 x 4096   43.3 -> 42.1
#               28672 x 8192   85.2 -> 81.9          88.8 -> 86.6
#               8192 x 28672   80.9 -> 79.5          87.4 -> 81.7
#               128256 x 4096 178.7 -> 175.3
#   so the symmetric scheme takes it at every shape. The asymmetric scheme's promotion (three vectors per
#   side) makes one warp group per tile slower than two when each SM holds a long chain of K-blocks or
#   several tiles: M = 1 wins at 4096 x 4096 16.6 -> 14.4, 6144 x 4096 19.4 -> 14.8, 7168 x 2048
#   14.4 -> 8.7 (64-112 tiles of 64 rows, K <= 4096) and 8192 x 28672 98.4 -> 89.3, but loses at
#   4096 x 14336 32.7 -> 46.1, 3072 x 8192 19.2 -> 26.8, 2112 x 7168 16.7 -> 23.8, 1024 x 4096 13.3 -> 14.5
#   (few tiles, long chains), 12288 x 4096 23.3 -> 28.1, 14336 x 4096 26.1 -> 28.0, 28672 x 4096
#   49.1 -> 54.3 (more tiles than SMs). So at up to 16 tokens it takes the tile when the 64-row tiles fill
#   between W8A8_SM90_PINGPONG_ASYM_MIN_FILL and all of the SMs and K is at most
#   W8A8_SM90_PINGPONG_ASYM_MAX_K (8192 x 28672 is left on the old rule). With 32-token tiles (M 17-32)
#   it wins wherever the tiles fit the SMs: 4096 x 4096 18.7 -> 12.6, 8192 x 28672 111.3 -> 92.0,
#   2112 x 7168 20.8 -> 19.9, 7168 x 2048 10.6 -> 8.5, 4096 x 14336 37.8 -> 38.4 (a tie); more tiles
#   than SMs: 12288 x 4096 24.5 -> 26.3, 28672 x 8192 108.4 -> 103.2.
# At 33-64 rows (same tool and day, M = 48 and 64 alike, us, the rule before -> 64 x 32 / 64 x 64) both
# schemes win where the 64-row tiles times the token tiles fit one wave, and lose where they do not:
#   symmetric   4096 x 4096 (64 tiles)    11.8 -> 9.8 / 11.1     2112 x 7168 (33)   15.6 -> 12.8 / 15.6
#               4096 x 14336 (64)         31.9 -> 25.7 / 29.6    8192 x 28672 (128) 90.4 -> 91.4 / 83.4
#               7168 x 2048 (112)          8.2 -> 8.8 / 7.8      12288 x 4096 (192) 22.6 -> 22.6 / 22.8
#               28672 x 8192 (448)        89.8 -> 93.9 / 92.3
#   asymmetric  4096 x 4096 17.5 -> 13.0 / 17.8, 2112 x 7168 23.1 -> 19.8 / 29.1, 4096 x 14336
#               56.9 -> 38.8 / 56.5, 8192 x 28672 109.6 -> 145.4 / 112.1, 7168 x 2048 10.7 -> 12.9 / 10.5,
#               12288 x 4096 28.5 -> 34.6 / 34.8, 28672 x 8192 107.2 -> 151.4 / 132.0
# so the narrowest token tile of W8A8_SM90_PINGPONG_TILES_N whose tiles fit the SMs, else the 128-row
# rules below (which pick their best on the shapes where none fits). The symmetric scheme also has the
# 64-token tile, which wins where only it fits (8192 x 28672, 7168 x 2048 above); the asymmetric one
# lost everywhere but 7168 x 2048 (2%), so that scheme has no 64 x 64 kernel.
#
# On an H200 (2026-11-28, second session; benchmarks/diag_w8a8_choices.py and bench_w8a8.py --sweep,
# rotated weights, FP16 out, us, the rule before -> now):
# * Asymmetric, up to 16 rows, where the 64-row tile applies: the 32-token tile beats the 16-token one
#   (M = 1, 4 and 16 alike): 4096 x 4096 14.7 -> 12.4, 7168 x 2048 9.0 -> 7.9, 6144 x 4096 15.3 -> 13.0,
#   5120 x 4096 15.2 -> 12.9, 8192 x 2048 9.2 -> 8.4 (W8A8_SM90_PINGPONG_ASYM_DECODE_TILE_N); the symmetric
#   scheme keeps 16 (4096 x 4096 7.7 against 8.6).
# * 65-128 rows (W8A8_SM90_PINGPONG_MAX_M): the 64 x 32 tile wins wherever its tiles fit the SMs, both
#   schemes, M = 72, 96 and 128 alike: symmetric 512 x 4096 12.8 -> 8.0, 1024 x 4096 12.9 -> 8.0, 1536 x 4096
#   13.5 -> 8.5, 2048 x 8192 19.9 -> 14.9, 2112 x 7168 17.6 -> 13.3, 2560 x 4096 (M 72, 96) 11.2 -> 9.1;
#   asymmetric 1024 x 4096 16.3 -> 12.3, 2048 x 8192 33.4 -> 23.1, 2112 x 7168 29.4 -> 20.6, 2048 x 28672
#   112.8 -> 75.4. Where it does not fit (2560 x 4096 at M = 128: 160 CTAs) it loses (11.5 -> 14.5).
#   The symmetric 64 x 64 tile wins from 96 rows where its tiles fit (M = 100-128: 4096 x 4096 12.0 ->
#   10.9, 4096 x 14336 34.0 -> 30.2, 3072 x 8192 20.2 -> 18.2, 2560 x 4096 11.4 -> 10.3) but not below
#   (M = 80: 4096 x 4096 11.5 -> 12.4, 4096 x 14336 33.3 -> 37.0; M = 88 a tie):
#   W8A8_SM90_PINGPONG_WIDE_MIN_M.
# * The symmetric scheme at 17-48 rows: two or three 16-token tiles per weight tile beat one or two
#   32-token tiles where they fit the SMs (bench_w8a8.py --sweep, M = 32: 4096 x 4096 8.6 -> 8.2,
#   2112 x 7168 12.7 -> 11.1, 4096 x 14336 23.7 -> 21.5; M = 48: 2112 x 7168 12.7 -> 11.7);
#   W8A8_SM90_PINGPONG_NARROW_MAX_M (not measured with four or more 16-token tiles).
W8A8_SM90_PINGPONG_MAX_M = 128
W8A8_SM90_PINGPONG_TILES_N = {"symmetric": (16, 32, 64), "asymmetric": (32,)}
W8A8_SM90_PINGPONG_NARROW_MAX_M = 48
W8A8_SM90_PINGPONG_WIDE_MIN_M = 96
W8A8_SM90_PINGPONG_ASYM_DECODE_TILE_N = 32
W8A8_SM90_PINGPONG_ASYM_MIN_FILL = 0.45
W8A8_SM90_PINGPONG_ASYM_MAX_K = 8192
# The symmetric scheme at 65-128 rows with K of at least W8A8_SM90_LONG_K: the 128 x 128 tile under
# stream-K (one token tile, so each weight tile is read once, its K spread over the SMs) where those
# tiles fill less than W8A8_SM90_STREAMK_MAX_FILL of the GPU. Same H200 runs, M = 72, 96 and 128
# (before -> stream-K): 8192 x 28672 106.4 / 92.9 / 92.6 -> 81.4 / 77.3 / 77.5; 4096 x 28672 63.6 -> 48.0-51.1;
# 2048 x 28672 63.7 -> 42.8-43.9 (the 64 x 32 tile: 45.7); 6144 x 16384 53.7 -> 43.3-46.6; 8192 x 16384
# 56.1-63.6 -> 50.3-57.5. At K = 14336 it ties or loses (4096 x 14336 33.4 -> 34.0-36.2), and the
# asymmetric scheme gains at most 5% (6144 x 16384, 4096 x 28672) and loses on 8192 x 16384 and 8192 x 28672.
W8A8_SM90_LONG_K = 16384
W8A8_SM90_SWAP_MIN_TILE_N = {"symmetric": 16, "asymmetric": 32}
W8A8_SM90_SWAP_STREAMK_CTAS = 48
W8A8_SM90_SWAP_ALWAYS_MAX_M = 64
W8A8_SM90_SWAP_MAX_M = 128
W8A8_SM90_SWAP_TILES_N = (16, 32, 64)
W8A8_SM90_DECODE_SPLITK_TILES = {"symmetric": 24, "asymmetric": 48}
W8A8_SM90_DECODE_SPLITS = 4
W8A8_SM90_DECODE_STREAMK_TILES = {"symmetric": 0, "asymmetric": 132}
W8A8_SM90_STREAMK_MAX_FILL = 0.5


@dataclass(frozen=True)
class W8A8Sm90Choice:
    """A W8A8 Sm90 kernel plus its run-time scheduling knobs (QgemmProblem ext[1..3])."""

    spec: W8A8Sm90Spec
    raster: int = 0
    swizzle: int = 1
    splits: int = 0  # stream-K kernels only: 0 lets CUTLASS choose the decomposition


def w8a8_sm90_choice(m: int, n: int, k: int, block_size: int, scheme: str, output: str, epilogue: str,
                     sm_count: int) -> W8A8Sm90Choice:
    def spec(tile, swap_ab, scheduler="persistent"):
        return W8A8Sm90Spec(tile, block_size, scheme, output, w8a8_sm90_schedule(tile), scheduler, swap_ab, epilogue,
                            alternate=w8a8_sm90_alternate(scheme, block_size, tile, swap_ab),
                            blocks_in_flight=w8a8_sm90_blocks_in_flight(block_size, tile, swap_ab))

    # Only the configurations the catalog builds for this block size (outputs and epilogues outside
    # the catalog are built on first use, in the same configuration as the catalog's F16 kernel).
    available = set(w8a8_sm90_configs(block_size, scheme))

    def pick(tile, swap_ab, scheduler="persistent", splits=0):
        if (tile, swap_ab, scheduler) not in available:
            scheduler, splits = "persistent", 0
        return W8A8Sm90Choice(spec(tile, swap_ab, scheduler), splits=splits)

    weight_tiles = -(-n // 128)
    if (scheme == "symmetric" and W8A8_SM90_SWAP_ALWAYS_MAX_M < m <= W8A8_SM90_SWAP_MAX_M and k >= W8A8_SM90_LONG_K
            and -(-m // 128) * weight_tiles < W8A8_SM90_STREAMK_MAX_FILL * sm_count):
        return pick((128, 128), False, "streamk")
    if m <= W8A8_SM90_PINGPONG_MAX_M:
        pingpong = _pingpong_tile(m, n, k, scheme, sm_count)
        if pingpong is not None and (pingpong, True, "persistent") in available:
            return pick(pingpong, True)
    if m <= W8A8_SM90_SWAP_TILES_N[0]:
        if weight_tiles < min(sm_count, W8A8_SM90_DECODE_SPLITK_TILES[scheme]):
            return pick((128, 16), True, "streamk", W8A8_SM90_DECODE_SPLITS)
        if weight_tiles < min(sm_count, W8A8_SM90_DECODE_STREAMK_TILES[scheme]):
            return pick((128, 16), True, "streamk")
        return pick((128, 16), True)
    if m <= W8A8_SM90_SWAP_MAX_M:
        swap_tiles = [t for t in W8A8_SM90_SWAP_TILES_N if ((128, t), True, "persistent") in available]
        narrowest = W8A8_SM90_SWAP_MIN_TILE_N[scheme]
        swap_tiles = [t for t in swap_tiles if t >= narrowest] or swap_tiles[-1:]
        if m > W8A8_SM90_SWAP_ALWAYS_MAX_M:  # measured with 2 and 4 token tiles (32 and 64 wide) only
            swap_tiles = [t for t in swap_tiles if 4 * t >= m]
        fits = [t for t in swap_tiles if weight_tiles * -(-m // t) <= sm_count]
        if fits or m <= W8A8_SM90_SWAP_ALWAYS_MAX_M:
            tile = fits[0] if fits else next((t for t in swap_tiles if t >= m), swap_tiles[-1])
            few = weight_tiles * -(-m // tile) < W8A8_SM90_SWAP_STREAMK_CTAS
            return pick((128, tile), True, "streamk" if few else "persistent")
    tiles = -(-m // 128) * weight_tiles
    if ((256, 128), False, "persistent") in available and tiles >= sm_count:
        return pick(*_prefill_tile(tiles, -(-m // 256) * weight_tiles, sm_count))
    return pick((128, 128), False, "streamk" if tiles < W8A8_SM90_STREAMK_MAX_FILL * sm_count else "persistent")


def _pingpong_tile(m: int, n: int, k: int, scheme: str, sm_count: int) -> tuple | None:
    """The 64-row pingpong tile for M <= W8A8_SM90_PINGPONG_MAX_M rows, or None (measurements above).
    Up to 16 rows: 16 tokens wide for the symmetric scheme; for the asymmetric one ASYM_DECODE_TILE_N
    wide, only between ASYM_MIN_FILL and all of the SMs and K <= ASYM_MAX_K. Beyond, the narrowest of
    W8A8_SM90_PINGPONG_TILES_N[scheme] whose 64-row tiles times token tiles fit the SMs (16 tokens only
    up to NARROW_MAX_M rows, 64 beyond 64 rows only from WIDE_MIN_M rows); where none fits, 32 for the
    symmetric scheme's 17-32 rows."""
    tiles = -(-n // 64)
    if m <= 16:
        if scheme == "symmetric":
            return (64, 16)
        if (W8A8_SM90_PINGPONG_ASYM_MIN_FILL * sm_count <= tiles <= sm_count
                and k <= W8A8_SM90_PINGPONG_ASYM_MAX_K):
            return (64, W8A8_SM90_PINGPONG_ASYM_DECODE_TILE_N)
        return None
    narrow_ok = m <= W8A8_SM90_PINGPONG_NARROW_MAX_M
    wide_ok = m <= 64 or m >= W8A8_SM90_PINGPONG_WIDE_MIN_M
    widths = [t for t in W8A8_SM90_PINGPONG_TILES_N[scheme] if (t > 16 or narrow_ok) and (t < 64 or wide_ok)]
    fit = next(((64, t) for t in widths if tiles * -(-m // t) <= sm_count), None)
    if fit is None and m <= 32 and scheme == "symmetric":
        return (64, 32)  # measured faster than the 128-row tiles at every shape, fitting or not
    return fit


# The symmetric scheme's 256 x 128 tile reads 25% fewer operand bytes per MAC than 128 x 128. On an H100
# (benchmarks/diag_prefill.py --candidates, 2026-11-27, symmetric, us; M = 4096 unless named):
#
#   N x K               | 128 persistent | 128 stream-K | 256 persistent | 256 stream-K | tiles 128 / 256
#   4096 x 4096         | 139.3, 142.2   | 154.5        | 130.3, 133.4   | 135.8        | 1024 / 512
#   7168 x 2048         | 136.1, 138.6   | 144.1        | 122.9, 123.0   | 130.8        | 1792 / 896
#   28672 x 8192        | 2150, 2143     | 2199         | 1957, 1951     | 1896         | 14336 / 7168
#   8192 x 28672        | 2091           |              | 1941           |              | 2048 / 1024
#   2112 x 7168         | 146.5, 146.5   | 136.6        | 166.0, 167.8   | 132.3        | 544 / 272
#   M = 2048: 4096 x 4096 69.3 / 64.5, 64.3 (256 stream-K 67.2, 64.5); 14336 x 4096 251.8 / 229.7, 237.1
#   (stream-K 233.3, 232.7); 1024 x 4096 (128 tiles of 128 rows: stream-K 128) 19.8 / 34.1.
#
# A persistent kernel's time goes with its waves (ceil(tiles / SMs)); the 256-row tile's waves are
# each worth two of the 128-row tile's at W8A8_SM90_ROWS256_SPEEDUP (1.07-1.10x measured on whole
# waves); stream-K's time goes with the fractional waves plus up to W8A8_SM90_STREAMK_OVERHEAD for its
# fix-up (0-15% above the fractional waves in the rows above). So 2112 x 7168 (272 tiles: 2.06 waves
# of 256 rows) takes the 256-row stream-K kernel, and shapes that fill their last wave the persistent one.
W8A8_SM90_ROWS256_SPEEDUP = 1.08
W8A8_SM90_STREAMK_OVERHEAD = 0.15


def _prefill_tile(tiles128: int, tiles256: int, sm_count: int) -> tuple:
    """(tile, swap_ab, scheduler) of the symmetric scheme for an output of at least one wave of 128 x 128
    tiles: the cheapest by the wave model above."""
    per256 = 2 / W8A8_SM90_ROWS256_SPEEDUP
    costs = {((128, 128), False, "persistent"): -(-tiles128 // sm_count),
             ((256, 128), False, "persistent"): per256 * -(-tiles256 // sm_count),
             ((256, 128), False, "streamk"): per256 * tiles256 / sm_count * (1 + W8A8_SM90_STREAMK_OVERHEAD)}
    return min(costs, key=costs.get)



# --- W8A8 on Sm80/Sm75 (register promotion per K-block, W8A8PromoteSpec) ------------------------
#
# Provisional (not yet measured; to be set from benchmarks/bench_w8a8.py on the device), after the
# FpA x IntB tiled GEMM's rules, whose mainloop has the same structure:
#   * M <= W8A8_PROMOTE_DECODE_MAX_M: the 16 x 128 tile: every weight byte read once per 16 rows;
#   * M <= W8A8_PROMOTE_MIDDLE_MAX_M: 64 x 128 (four warps of 32 x 64), on arch 80 (the Sm75
#     catalog has no such kernel: the 128 x 128 tile there);
#   * beyond: 128 x 128 (eight warps of 64 x 32: int32 and FP32 accumulators fit 64 + 64 registers).
#   * stream-K over W8A8_PROMOTE_STREAMK_CTAS_PER_SM CTAs per SM (at most what fits) when there are
#     fewer than W8A8_PROMOTE_STREAMK_WAVES tiles per SM: below one wave SMs idle (a decode batch on a
#     4096-row weight: 32 tiles), and between one and two the second wave runs part-empty (the
#     128 x 128 kernel fits one CTA per SM). The splits fall on K-block boundaries; each CTA adds at
#     most two tiles of FP32 partials to the traffic.
#   * raster groups of W8A8_PROMOTE_RASTER_GROUP M tiles (CTAs running together share weight tiles).
W8A8_PROMOTE_DECODE_MAX_M = 16
W8A8_PROMOTE_MIDDLE_MAX_M = 64
W8A8_PROMOTE_STREAMK_CTAS_PER_SM = 2
W8A8_PROMOTE_STREAMK_WAVES = 2
W8A8_PROMOTE_RASTER_GROUP = 8


@dataclass(frozen=True)
class W8A8PromoteChoice:
    """A W8A8 Sm80/Sm75 kernel plus its run-time knobs: ctas_per_sm > 0 splits the work stream-K over
    round(sm_count * min(ctas_per_sm, what fits)) CTAs (0: one CTA per output tile), and raster_group
    M tiles are numbered together (QgemmProblem ext[2], ext[3])."""

    spec: W8A8PromoteSpec
    ctas_per_sm: float = 0
    raster_group: int = 1

    def __post_init__(self):
        if not isinstance(self.spec, W8A8PromoteSpec):
            raise TypeError(f"spec must be a W8A8PromoteSpec, got {type(self.spec).__name__}")
        if self.ctas_per_sm < 0 or not isinstance(self.raster_group, int) or self.raster_group < 1:
            raise ValueError(f"ctas_per_sm must be >= 0 and raster_group an int >= 1, got {self.ctas_per_sm} and "
                             f"{self.raster_group!r}")


def w8a8_promote_arch(target_sm: int) -> int:
    """The promote kernels' arch for a build target: the cp.async mainloop from sm80 on (sm90 too)."""
    return 80 if target_sm >= 80 else 75


def w8a8_promote_choice(m: int, n: int, k: int, block_size: int, scheme: str, output: str, arch: int,
                        sm_count: int) -> W8A8PromoteChoice:
    if m <= W8A8_PROMOTE_DECODE_MAX_M:
        config = W8A8_PROMOTE_DECODE
    elif m <= W8A8_PROMOTE_MIDDLE_MAX_M and arch >= 80:
        config = W8A8_PROMOTE_MIDDLE
    else:
        config = W8A8_PROMOTE_LARGE
    spec = w8a8_promote_spec(config, arch, scheme, output)
    tiles_m = -(-m // spec.tile[0])
    tiles = tiles_m * -(-n // spec.tile[1])
    streamk = W8A8_PROMOTE_STREAMK_CTAS_PER_SM if tiles < W8A8_PROMOTE_STREAMK_WAVES * sm_count else 0
    return W8A8PromoteChoice(spec, streamk, min(W8A8_PROMOTE_RASTER_GROUP, tiles_m))


# --- W8A8 decode: the fused quantize + GEMV kernel (W8A8GemvSpec) -------------------------------
#
# Provisional (not yet measured; benchmarks/device_w8dec.sh times every variant on the device, and
# these values are to be set from it):
#   * plans built with launch_mode "auto" on sm80+ run it for M <= W8A8_GEMV_MAX_M (the kernel
#     holds at most 16 rows: one m16 MMA tile);
#   * M <= W8A8_GEMV_NARROW_MAX_M: the "narrow" variant (128 columns per CTA, 3 chunks of loads
#     ahead); above, "wide" (256 columns: each CTA quantizes x for twice as many weight bytes, which
#     halves the quantization's share at 16 rows);
#   * K split so that about W8A8_GEMV_CTAS_PER_SM CTAs per SM run (column tiles x splits), and never
#     more K per CTA than its shared memory holds.
W8A8_GEMV_NARROW_MAX_M = 8
W8A8_GEMV_CTAS_PER_SM = 2
#   * on sm90 the "_cl8" variants split K inside a cluster of 8 CTAs and reduce through distributed
#     shared memory: no partial buffer, no counters to zero (one graph node per call instead of a
#     memset and the kernel), but at most 8 splits, so K / 8 must fit one CTA's shared memory.
#     W8A8_GEMV_PREFER_CLUSTER makes the heuristic take them where they fit, the narrow or the wide
#     one, whichever launches a number of CTAs (column tiles x 8) nearer the SM count. Measured on an
#     H100 (benchmarks/device_sweep.sh, 2026-11-26, M = 1, us, symmetric / asymmetric; the plan's
#     choice before, narrow with split-K over two CTAs per SM, in brackets):
#       (N, K) = (4096, 4096):  wide_cl8 (128 CTAs) 11.0 / 11.8, narrow_cl8 (256) 14.5 / 15.9  [12.2 / 12.9]
#                (2112, 7168):  narrow_cl8 (136) 10.8 / 11.1, wide_cl8 (72) 12.8 / 13.1     [12.1 / 12.5]
#                (7168, 2048):  wide_cl8 (224) 9.8 / 10.3, narrow_cl8 (448) 13.0 / 13.8     [11.5 / 11.9]
#     At M = 16 the same rule's pick was 0.6-1.3 us from today's path either way, so the fused kernel
#     still stops at W8A8_GEMV_SM90_MAX_M rows (below).
W8A8_GEMV_MAX_M = 16
W8A8_GEMV_VARIANTS = {
    "narrow": dict(warps=8, n_tiles=2, depth=4, min_ctas=2),
    "wide": dict(warps=8, n_tiles=4, depth=2, min_ctas=2),
    "deep": dict(warps=4, n_tiles=4, depth=3, min_ctas=3),
    "narrow_cl8": dict(warps=8, n_tiles=2, depth=4, min_ctas=2, cluster=8, arch=90, max_slice_k=4096,
                       max_slice_blocks=32),
    "wide_cl8": dict(warps=8, n_tiles=4, depth=2, min_ctas=2, cluster=8, arch=90, max_slice_k=4096,
                     max_slice_blocks=32),
}
W8A8_GEMV_PREFER_CLUSTER = True


@dataclass(frozen=True)
class W8A8GemvChoice:
    """A W8A8 decode kernel and its K slice (QgemmProblem ext[2]: K-blocks per CTA)."""

    spec: W8A8GemvSpec
    slice_blocks: int
    l2_prefetch: int = 0  # bytes of each CTA's weight prefetched into L2 before its wait (sm90)

    def __post_init__(self):
        if not isinstance(self.spec, W8A8GemvSpec):
            raise TypeError(f"spec must be a W8A8GemvSpec, got {type(self.spec).__name__}")
        if not isinstance(self.slice_blocks, int) or self.slice_blocks < 1:
            raise ValueError(f"slice_blocks must be an int >= 1, got {self.slice_blocks!r}")
        if not isinstance(self.l2_prefetch, int) or not 0 <= self.l2_prefetch <= 1 << 20:
            raise ValueError(f"l2_prefetch must be an int in [0, {1 << 20}] (bytes), got {self.l2_prefetch!r}")


# Measured on an H100 (device_w8dec.sh, 2026-11-25; six shapes, rotated weights, CUDA graphs; us,
# symmetric, "today" = act_quant + the Sm90 swap-AB WGMMA kernel):
#             (N, K):  4096x4096  12288x4096  8192x28672  28672x8192  2112x7168  7168x2048
#   M = 1   fused          12.1        30.2        97.7        98.3       12.1       11.7
#           today          17.0        24.9        90.0        84.8       18.8       14.3
#   M = 4   fused          12.8        34.7       113.3       111.9       13.0       12.5
#           today          16.4        25.1        91.1        85.6       18.9       14.9
#   M = 16  fused          21.5        35.7       144.6       139.5       25.4       18.0
#           today          16.8        24.0        91.3        86.2       20.8       14.5
# (asymmetric alike). The fused kernel saves the second launch and the activation round trip, which
# is what small layers pay for, but streams the weight more slowly than the WGMMA kernel (ncu at
# M = 1 on 2112x7168: DRAM 34% busy, 22% achieved occupancy at 116 registers, no eligible warp 78% of
# cycles: too few loads in flight); with 16 rows it also quantizes x once per column tile. So on sm90
# it takes M <= W8A8_GEMV_SM90_MAX_M rows of weights up to W8A8_GEMV_SM90_MAX_WEIGHT elements (the
# three small shapes, 15-17 M elements, won by 1.2-1.6x; the large ones, 50-235 M, lost). Below sm90
# the other path is act_quant + the 2.x promote kernel, not measured against it: M <= W8A8_GEMV_MAX_M.
W8A8_GEMV_SM90_MAX_M = 4
W8A8_GEMV_SM90_MAX_WEIGHT = 32 << 20


def w8a8_gemv_applies(m: int, target_sm: int, n: int = 0, k: int = 0) -> bool:
    """Whether plan(x) with M rows runs the fused decode kernel (an [N, K] weight; 0: size unknown)."""
    if target_sm >= 90:
        return 1 <= m <= W8A8_GEMV_SM90_MAX_M and n * k <= W8A8_GEMV_SM90_MAX_WEIGHT
    return target_sm >= 80 and 1 <= m <= W8A8_GEMV_MAX_M


def w8a8_gemv_slice_blocks(spec, n: int, k: int, block_size: int, sm_count: int,
                           ctas_per_sm: float = W8A8_GEMV_CTAS_PER_SM) -> int:
    """K-blocks per CTA: enough K splits for about ctas_per_sm CTAs per SM, within the CTA's shared
    memory, with no empty split."""
    blocks = k // block_size
    most = spec.max_slice_blocks_for(block_size)
    tiles = -(-n // spec.tile_n)
    wanted = -(-round(ctas_per_sm * sm_count) // tiles)
    splits = max(-(-blocks // most), min(blocks, wanted))
    return -(-blocks // splits)


def w8a8_gemv_cluster_slice_blocks(spec, k: int, block_size: int) -> int | None:
    """K-blocks per CTA of a cluster variant (the K in spec.cluster slices), None where a slice would
    not fit the CTA's shared memory."""
    slice_blocks = -(-(k // block_size) // spec.cluster)
    return slice_blocks if slice_blocks <= spec.max_slice_blocks_for(block_size) else None


def w8a8_gemv_cluster_choice(n: int, k: int, block_size: int, input: str, scheme: str, output: str,
                             sm_count: int) -> W8A8GemvChoice | None:
    """The sm90 cluster variant whose CTA count (column tiles x cluster) is nearest sm_count by ratio,
    the wider on a tie; None where K fits neither's 8 slices."""
    best = None
    for variant in ("wide_cl8", "narrow_cl8"):
        spec = W8A8GemvSpec(input, scheme, output, **W8A8_GEMV_VARIANTS[variant])
        slice_blocks = w8a8_gemv_cluster_slice_blocks(spec, k, block_size)
        if slice_blocks is None:
            continue
        ctas = -(-n // spec.tile_n) * spec.cluster
        distance = abs(math.log(ctas / sm_count))
        if best is None or distance < best[0]:
            best = (distance, W8A8GemvChoice(spec, slice_blocks))
    return best[1] if best else None


def w8a8_gemv_choice(m: int, n: int, k: int, block_size: int, input: str, scheme: str, output: str, sm_count: int,
                     variant: str | None = None, ctas_per_sm: float = W8A8_GEMV_CTAS_PER_SM,
                     target_sm: int = 80) -> W8A8GemvChoice:
    """The decode kernel for M rows and its K slice. `variant` (a W8A8_GEMV_VARIANTS key) forces one;
    a cluster variant raises ValueError where K does not fit its 8 slices or the target is below sm90."""
    choice = _w8a8_gemv_choice(m, n, k, block_size, input, scheme, output, sm_count, variant, ctas_per_sm, target_sm)
    return dataclasses.replace(choice, l2_prefetch=W8A8_GEMV_L2_PREFETCH[scheme])


# Bytes of each CTA's weight the fused decode kernel prefetches into L2 before it waits for the previous
# kernel (W8A8GemvChoice.l2_prefetch; sm90 builds; after the chunks the ring loads first). H100
# (2026-11-27), bench_w8a8.py --decode --m 1, the three shapes the fused kernel takes (4096x4096,
# 2112x7168, 7168x2048), us, none / 4 / 8 / 16 KB, two runs:
#   symmetric   10.7 / 10.3 / 10.5 / 10.1,  10.6 / 10.5 / 10.3 / 10.1,  9.3 / 9.2 / 9.2 / 9.0
#   asymmetric  11.7 / 12.0 / 11.8 / 11.6,  11.2 / 11.3 / 11.1 / 11.5,  9.9 / 10.3 / 10.3 / 10.2
# 2-5% on the symmetric kernel in that benchmark (each call follows another, which lets it start
# early), none on the asymmetric one (it also stages three column vectors per block). In a model most
# calls follow a kernel that does not let them start early, and there the FpA x IntB decode kernel
# lost 4% with 16 KB and nothing with 4 KB (FPAINTB_STREAM_L2_PREFETCH). The W8A8 model was not
# measured both ways, so the prefetch stays off here; the knob is W8A8GemvChoice.l2_prefetch.
W8A8_GEMV_L2_PREFETCH = {"symmetric": 0, "asymmetric": 0}


def _w8a8_gemv_choice(m, n, k, block_size, input, scheme, output, sm_count, variant, ctas_per_sm,
                      target_sm) -> W8A8GemvChoice:
    chosen = variant
    if variant is None:
        variant = "narrow" if m <= W8A8_GEMV_NARROW_MAX_M else "wide"
    if variant not in W8A8_GEMV_VARIANTS:
        raise ValueError(f"variant must be one of {tuple(W8A8_GEMV_VARIANTS)}, got {variant!r}")
    if chosen is None and W8A8_GEMV_PREFER_CLUSTER and target_sm >= 90:
        clustered = w8a8_gemv_cluster_choice(n, k, block_size, input, scheme, output, sm_count)
        if clustered is not None:
            return clustered
    spec = W8A8GemvSpec(input, scheme, output, **W8A8_GEMV_VARIANTS[variant])
    if spec.cluster:
        if target_sm < 90:
            raise ValueError(f"variant {variant!r} needs an sm90 GPU (thread block clusters), target is sm{target_sm}")
        slice_blocks = w8a8_gemv_cluster_slice_blocks(spec, k, block_size)
        if slice_blocks is None:
            raise ValueError(f"variant {variant!r}: K={k} in {spec.cluster} slices does not fit a CTA's shared memory "
                             f"(at most {spec.max_slice_blocks_for(block_size)} blocks of {block_size})")
        return W8A8GemvChoice(spec, slice_blocks)
    return W8A8GemvChoice(spec, w8a8_gemv_slice_blocks(spec, n, k, block_size, sm_count, ctas_per_sm))
