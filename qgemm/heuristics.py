"""Kernel choice by shape, in Python where tests reach it.

W8A8 (one K-block per threadblock): each output tile is a chain of K/block_size
folds, so the time is set by how many chains run side by side and how much work
each link does. Small M wants many narrow tiles (more chains in flight, less
padding in M); large M wants the big tile (fewer re-reads of A and B).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from cutlass_gen.catalog import catalog, fpaintb_conv_configs, fpaintb_gemm_configs, w8a8_sm90_configs
from cutlass_gen.catalog import W8A8_PROMOTE_DECODE, W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, w8a8_promote_spec
from cutlass_gen.specs import (
    ConvInt8Sm90Spec,
    ConvInt8Spec,
    Fp8BlockwiseGemmSpec,
    FpAIntBConvSpec,
    FpAIntBDequantSpec,
    FpAIntBGemmSpec,
    FpAIntBGemvSpec,
    FpAIntBSm90Spec,
    W8A8GemmSpec,
    W8A8PromoteSpec,
    W8A8Sm90Spec,
)


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
# Provisional, to be set from benchmarks/bench_w8a8.py --sweep on an H100 (the FP8 family's rules,
# whose kernels have the same structure, are the starting point):
#   * decode-sized M: swap A and B so the weight's rows fill the 128-row tile and the tokens a
#     narrow tile N (16, 32, 64): the narrowest whose (weight tiles x token tiles) fit one wave,
#     so every weight byte is read once from DRAM. Up to 16 tokens there is one token tile, and a
#     weight of fewer than W8A8_SM90_DECODE_STREAMK_TILES row tiles (N = 4096: 32) would stream
#     from only that many SMs: stream-K splits its K over the whole GPU;
#   * larger M: the 128 x 128 cooperative kernel (two consumer warp groups on one tile: while one
#     promotes its block product, the other's WGMMAs run), persistent; stream-K when the output
#     tiles do not fill the GPU once (few tiles, deep K).
W8A8_SM90_SWAP_MAX_M = 64
W8A8_SM90_SWAP_TILES_N = (16, 32, 64)
W8A8_SM90_DECODE_STREAMK_TILES = 132


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
        return W8A8Sm90Spec(tile, block_size, scheme, output, "cooperative", scheduler, swap_ab, epilogue)

    # Only the configurations the catalog builds for this block size (outputs and epilogues outside
    # the catalog are built on first use, in the same configuration as the catalog's F16 kernel).
    available = set(w8a8_sm90_configs(block_size))

    def pick(tile, swap_ab, scheduler="persistent"):
        if (tile, swap_ab, scheduler) not in available:
            scheduler = "persistent"
        return W8A8Sm90Choice(spec(tile, swap_ab, scheduler))

    weight_tiles = -(-n // 128)
    if m <= W8A8_SM90_SWAP_TILES_N[0]:
        streamk = weight_tiles < min(sm_count, W8A8_SM90_DECODE_STREAMK_TILES)
        return pick((128, 16), True, "streamk" if streamk else "persistent")
    if m <= W8A8_SM90_SWAP_MAX_M:
        swap_tiles = [t for t in W8A8_SM90_SWAP_TILES_N if ((128, t), True, "persistent") in available]
        fits = [t for t in swap_tiles if weight_tiles * -(-m // t) <= sm_count]
        return pick((128, fits[0] if fits else swap_tiles[-1]), True)
    tiles = -(-m // 128) * weight_tiles
    return pick((128, 128), False, "streamk" if tiles < sm_count else "persistent")



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


# FpA x IntB (W4A16 / W8A16). Three kinds of kernel:
#   * the small-M kernel (FpAIntBGemvSpec): codes straight from global memory into registers, every
#     weight byte read once per CTA row of 8 or 16 rows;
#   * the tiled GEMM (FpAIntBGemmSpec): x, codes, scales and zeros staged through a shared-memory
#     pipeline, stream-K over the CTAs that fit on the GPU when the output tiles alone do not fill it;
#   * dequantization into FP16/BF16, then cuBLAS.
# Measured on an H100 (benchmarks/bench_fpaintb.py --sweep, FP16, INT4 group 128 and INT8 per
# channel, (K, N) = (4096, 12288), (14336, 21504), (11008, 4096); M: time in us):
#   * M <= 16, INT4: the 16 x 128 x 128 GEMM, stream-K (M = 16: 16.6, 75.3, 18.1 against 28.6,
#     113.6, 27.1 for the small-M kernel; M = 1: 16.1 and 74.0 against 18.5 and 87.7), except at
#     M <= 8 with N <= FPAINTB_GEMV_MAX_N, where the stream-K fix-up traffic (two partial tiles per
#     CTA) is large beside so small a weight (11008 x 4096, M = 1: the small-M kernel 14.7 against 17.2).
#   * M <= 16, INT8: the 16 x 64 x 128 GEMM from 9 rows (M = 16: 25.2, 119.5, 26.5 against 31.7, 143.2,
#     33.7); the small-M kernel up to 8 rows (M = 1: 22.9 and 21.9 against 24.7 and 24.1; 121.7
#     against 116.8 on the largest shape).
#   * 17 to 64 rows: INT4 32 x 128 x 128 (M = 64: 37.7, 199.5, 36.6; the best at 37.7, 196.5, 36.6);
#     INT8 64 x 128 x 64 (45.7, 205.6, 42.3; the best at 42.9, 201.7, 41.3). The small-M kernel takes
#     68-365 us there.
#   * 65 to FPAINTB_DEQUANT_MIN_M - 1 rows: INT4 128 x 64 x 64, four warps (M = 256: 115.0, 683.3,
#     104.8; the best at 114.5, 656.0, 104.8); INT8 128 x 128 x 64, eight warps (129.0, 692.7, 106.7,
#     the best on all three). Dequantize + cuBLAS: 127-128, 732-739, 128.
#   * From FPAINTB_DEQUANT_MIN_M rows dequantize + cuBLAS (M = 4096: 4242 us against 11924 for the
#     GEMM on the largest shape; mma.sync on an H100 runs at a fraction of cuBLAS's wgmma rate).
# Stream-K: 1, 2, 3, 4 and 8 CTAs per SM measured within 2% of each other wherever the tiles do not
# fill the GPU (shared memory and registers let about 3 of these CTAs share an SM anyway); 3.
FPAINTB_GEMV_MAX_M = {4: 8, 8: 8}
FPAINTB_GEMV_MAX_N = 4096
FPAINTB_DECODE = dict(m_tiles=1, n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True)
# Tiled GEMM by M, per weight width: (most rows, tile, warp); stages from the catalog (per arch).
FPAINTB_GEMM_TILES = {
    4: [(16, (16, 128, 128), (16, 32)), (64, (32, 128, 128), (32, 32)), (None, (128, 64, 64), (64, 32))],
    8: [(16, (16, 64, 128), (16, 16)), (64, (64, 128, 64), (32, 64)), (None, (128, 128, 64), (64, 32))],
}
FPAINTB_STREAMK_CTAS_PER_SM = 3
# M tiles numbered together (ext[3]): a wave of CTAs covers this many rows of tiles, so it reads
# each column tile of W once per group instead of once per row of tiles.
FPAINTB_RASTER_GROUP = 8
# From this many rows on, dequantizing once and running cuBLAS beats the tiled GEMM: at M = 256 the
# GEMM wins (above), at M = 512 dequantize + cuBLAS takes 153, 951 and 693 us against the best
# GEMM of the sweep's 240, 1300 and 994 ((K, N) = (4096, 12288), (14336, 21504), (28672, 8192)),
# and at 4096 the GEMM loses 3x.
FPAINTB_DEQUANT_MIN_M = 512


@dataclass(frozen=True)
class FpAIntBChoice:
    """A kernel plus, for the tiled GEMM, its run-time knobs: ctas_per_sm > 0 splits the work
    stream-K over round(sm_count * min(ctas_per_sm, what fits)) CTAs (0: one CTA per output tile;
    a fraction gives fewer CTAs than SMs), and raster_group M tiles are numbered together."""

    spec: FpAIntBGemvSpec | FpAIntBGemmSpec | FpAIntBDequantSpec
    ctas_per_sm: float = 0
    raster_group: int = 1

    def __post_init__(self):
        if self.ctas_per_sm < 0 or self.raster_group < 1:
            raise ValueError(f"ctas_per_sm must be >= 0 and raster_group >= 1, got {self.ctas_per_sm} and "
                             f"{self.raster_group}")
        # (The decode variant of the small-M kernel takes ctas_per_sm too: split-K over CTAs.)
        split_k = isinstance(self.spec, FpAIntBGemvSpec) and self.spec.stream
        if not isinstance(self.spec, FpAIntBGemmSpec) and (self.raster_group != 1 or (self.ctas_per_sm and not split_k)):
            raise ValueError(f"ctas_per_sm and raster_group are knobs of the tiled GEMM, not of {self.spec.name}")

    @property
    def dequantize(self) -> bool:
        return isinstance(self.spec, FpAIntBDequantSpec)


def fpaintb_gemm_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    """The tiled GEMM for M rows: tile by M; stream-K when the output tiles do not fill the GPU."""
    tile, warp = next((t, w) for limit, t, w in FPAINTB_GEMM_TILES[bits] if limit is None or m <= limit)
    stages = next(s for t, w, s in fpaintb_gemm_configs(bits, arch) if (t, w) == (tile, warp))
    spec = FpAIntBGemmSpec(act, bits, tile, warp, stages, arch)
    tiles_m = -(-m // tile[0])
    tiles = tiles_m * -(-n // tile[1])
    streamk = FPAINTB_STREAMK_CTAS_PER_SM if tiles < FPAINTB_STREAMK_CTAS_PER_SM * sm_count else 0
    return FpAIntBChoice(spec, streamk, min(FPAINTB_RASTER_GROUP, tiles_m))


# The decode variant of the small-M kernel (FpAIntBGemvSpec stream=True: weights as the MMA's A
# operand, a predicate-free K loop; issue 16) for M <= FPAINTB_STREAM_MAX_M on sm80 and later, in place
# of the B-operand small-M kernel. Its K loop has 45-56 SASS instructions per 16 bytes of INT4 codes
# (group 128 / per channel, with and without zeros) where the B-operand kernel has ~150 (that kernel
# was issue-bound, issue 16). Measured on an H100 (bench_fpaintb.py --decode, six shapes, rotated
# weights, CUDA graphs; 2026-11-25), INT4 g128 FP16 at M = 1, in us:
#                 (K, N):  14336x21504  4096x12288  4096x22016  11008x4096  8192x28672  28672x8192
#   old path                     74.4        18.4        30.6        15.3        60.9        61.9
#   16 columns a CTA             65.7        14.2        25.0        12.0        50.4        46.7
#   32 columns a CTA             59.4        12.2        20.8        17.8        48.9        50.8
#   16 columns, split-K          78.7        14.2        24.9        11.9        50.4        46.7
#   tinygemm / cuBLAS FP16  78.4/221.1   15.9/40.1   26.3/69.2   15.1/35.8  60.9/160.7  62.9/164.1
# So INT4 takes 32-column CTAs from N = FPAINTB_STREAM_WIDE_MIN_N (384 CTAs and more: enough to fill
# 132 SMs several times; below that the wider CTA leaves SMs idle), and no split-K (never faster by
# more than 1%, 20% slower on 14336x21504, where the partial sums add traffic to a grid that was
# already full). INT8 per channel keeps 16 columns (20.6 us on 4096x12288 against 22.2; 97% of the
# INT8 floor on the largest shape). At M = 16 the 16-token CTAs lost to the 16-row tiled GEMM on
# five shapes of six (e.g. 127.6 against 75.7 us on 14336x21504: twice the activation registers
# halve the occupancy), so the decode variant stops at 8 rows and M 9-16 keep the tiled GEMM.
# Split-K stays in the kernel (FPAINTB_STREAM_CTAS_PER_SM > 0 turns it on) for grids smaller than
# these shapes.
FPAINTB_STREAM_MAX_M = 8
FPAINTB_STREAM_CTAS_PER_SM = 0
FPAINTB_STREAM_WIDE_MIN_N = 12288
FPAINTB_STREAM = {  # bits: (config up to 8 rows, config up to 16 rows)
    4: (dict(n_tiles=2, warps_k=8, prefetch=2, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12)),
    8: (dict(n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12)),
}
FPAINTB_STREAM_WIDE = dict(n_tiles=4, warps_k=4, rows8=True)  # INT4, M <= 8, N >= FPAINTB_STREAM_WIDE_MIN_N


def fpaintb_stream_choice(m: int, n: int, bits: int, act: str, arch: int) -> FpAIntBChoice:
    """The decode variant's configuration for M <= FPAINTB_STREAM_MAX_M rows (FPAINTB_STREAM)."""
    config = FPAINTB_STREAM[bits][0 if m <= 8 else 1]
    if bits == 4 and m <= 8 and n >= FPAINTB_STREAM_WIDE_MIN_N:
        config = FPAINTB_STREAM_WIDE
    return FpAIntBChoice(FpAIntBGemvSpec(act, bits, arch=arch, stream=True, **config), FPAINTB_STREAM_CTAS_PER_SM)


def fpaintb_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    if m >= FPAINTB_DEQUANT_MIN_M:
        return FpAIntBChoice(FpAIntBDequantSpec(act, bits, arch))
    if arch >= 80 and m <= FPAINTB_STREAM_MAX_M:
        return fpaintb_stream_choice(m, n, bits, act, arch)
    if m <= FPAINTB_GEMV_MAX_M[bits] and (bits == 8 or n <= FPAINTB_GEMV_MAX_N):
        return FpAIntBChoice(FpAIntBGemvSpec(act, bits, arch=arch, **FPAINTB_DECODE))
    return fpaintb_gemm_choice(m, n, k, bits, act, arch, sm_count)


# FpA x IntB on Sm90 (FpAIntBSm90Spec: CUTLASS's mixed-input WGMMA collective, the weight as WGMMA's
# A and the tokens on the kernel's N). Measured on an H100 (bench_fpaintb.py, INT4 group 128, FP16,
# rotated weights, six shapes; geomean against cuBLAS FP16, the Sm80 path in brackets): M 64 1.73x
# (0.97x), M 256 0.89x (0.39x), M 4096 0.72x (0.91x: dequantize + cuBLAS beat the Sm90 kernel on
# all six shapes, e.g. N 12288, K 4096: 700 against 1100 us). Hence dequantize + cuBLAS from
# FPAINTB_SM90_DEQUANT_MIN_M = 1024 rows, where the two are estimated even on the largest weight
# (dequantizing costs one pass over the weight, ~200 us for 8192 x 28672; the Sm90 kernel runs at
# ~0.73x cuBLAS's rate). The tile table is still the starting point (not swept):
#   * below FPAINTB_SM90_MIN_M rows the Sm80 kernels above stay (issue 16: qgemm's small-M kernels
#     measured 2.35x / 1.71x cuBLAS FP16 at M = 1 / 16; CUTLASS publishes 2.0-2.2x for its mixed-input
#     kernel there), from it the Sm90 kernel (qgemm measured 0.72x cuBLAS at M = 64 and 0.35x at 256,
#     CUTLASS's stock mixed-input example 0.94-1.02x at 256);
#   * token tile by M: 64 wide up to 64 rows (one token tile: the weight is read once), 128 wide up
#     to FPAINTB_SM90_WIDE_MIN_M, both stream-K (CUTLASS's heuristic decomposition: whole waves run
#     data-parallel, only the tiles short of a wave split their K), and 128 x 256 persistent for large
#     batches, where the tiles fill the GPU many times;
#   * dequantize + cuBLAS from FPAINTB_SM90_DEQUANT_MIN_M rows (above);
#   * group size 32 (below the kernel's 64-deep K tile; the collective reads one scale row per K
#     tile) stays on the Sm80 kernels.
FPAINTB_SM90_MIN_M = 32
FPAINTB_SM90_WIDE_MIN_M = 1024
FPAINTB_SM90_DEQUANT_MIN_M = 1024
# (most rows, tile (weight rows, tokens), schedule, scheduler), the first that fits M.
FPAINTB_SM90_TILES = [
    (64, (128, 64), "cooperative", "streamk"),
    (FPAINTB_SM90_WIDE_MIN_M - 1, (128, 128), "cooperative", "streamk"),
    (None, (128, 256), "cooperative", "persistent"),
]


@dataclass(frozen=True)
class FpAIntBSm90Choice:
    """A Sm90 FpA x IntB kernel plus its run-time scheduling knobs (QgemmProblem ext[2..4]):
    raster order (0 CUTLASS's heuristic, 1 along M, 2 along N of the kernel's own M, N), max swizzle (1, 2, 4, 8) and, for stream-K kernels, split-K slices
    (0: CUTLASS's heuristic decomposition)."""

    spec: FpAIntBSm90Spec
    raster: int = RASTER_HEURISTIC
    swizzle: int = 1
    splits: int = 0

    def __post_init__(self):
        if not isinstance(self.spec, FpAIntBSm90Spec):
            raise TypeError(f"spec must be a FpAIntBSm90Spec, got {type(self.spec).__name__}")
        if self.raster not in (0, 1, 2) or self.swizzle not in (1, 2, 4, 8):  # ext[2]: heuristic, along M, along N
            raise ValueError(f"raster must be 0, 1 or 2 and swizzle 1, 2, 4 or 8, got {self.raster} and {self.swizzle}")
        if not 0 <= self.splits <= 64 or (self.splits > 1 and self.spec.scheduler != "streamk"):
            raise ValueError(f"splits must be in [0, 64], and above 1 only on a stream-K kernel, got {self.splits} "
                             f"for {self.spec.name}")

    @property
    def dequantize(self) -> bool:
        return False


def fpaintb_sm90_applies(m: int, n: int, k: int, group_size: int, target_sm: int) -> bool:
    """Whether M rows of this weight run the Sm90 kernel (FpAIntBPlan with sm90=True)."""
    if target_sm != 90 or m < FPAINTB_SM90_MIN_M:
        return False
    if FPAINTB_SM90_DEQUANT_MIN_M is not None and m >= FPAINTB_SM90_DEQUANT_MIN_M:
        return False
    return n % 8 == 0 and k % FpAIntBSm90Spec.TILE_K == 0 and FpAIntBSm90Spec.supports_group_size(group_size, k)


def fpaintb_sm90_choice(m: int, n: int, k: int, bits: int, act: str, sm_count: int) -> FpAIntBSm90Choice:
    """The catalog's Sm90 FpA x IntB kernel for M rows (the table above)."""
    tile, schedule, scheduler = next((t, sc, sd) for limit, t, sc, sd in FPAINTB_SM90_TILES
                                     if limit is None or m <= limit)
    return FpAIntBSm90Choice(FpAIntBSm90Spec(act, bits, tile, schedule, scheduler))


# FpA x IntB conv2d: the implicit GEMM of M = N*P*Q output pixels by Co channels, K = R*S*C, on the
# same mainloop and with the same knobs. Tile by M as the GEMM's middle and large rows
# (FPAINTB_CONV_SMALL_M: the GEMM's limit for its 32/64-row tiles, which a batch-1 late-stage
# layer (M = 49 to 196) meets; above, the 128-row tile), stream-K when the tiles do not fill the
# GPU three times over, raster groups of FPAINTB_RASTER_GROUP. Not tuned on convolutions yet.
FPAINTB_CONV_SMALL_M = 64


def fpaintb_conv_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    """The FpA x IntB conv kernel for an implicit GEMM of m x n (x k)."""
    small, large = fpaintb_conv_configs(bits, arch)
    tile, warp, stages = small if m <= FPAINTB_CONV_SMALL_M else large
    spec = FpAIntBConvSpec(act, bits, tile, warp, stages, arch)
    tiles_m = -(-m // tile[0])
    tiles = tiles_m * -(-n // tile[1])
    streamk = FPAINTB_STREAMK_CTAS_PER_SM if tiles < FPAINTB_STREAMK_CTAS_PER_SM * sm_count else 0
    return FpAIntBChoice(spec, streamk, min(FPAINTB_RASTER_GROUP, tiles_m))


# --- Int8 conv2d (implicit GEMM with requantization) ---------------------------------------------
#
# M = N*P*Q output pixels, N = output channels. Measured on an H100 (benchmarks/bench_conv.py
# --sweep, the ResNet-50 convolutions, every catalog kernel timed; us at batch 64):
#   * alignment: the widest access the channel counts allow (16 elements, else 4, with out_channels
#     a multiple of 4 for the epilogue). Input channels that are not a multiple of 4 (the 3 of an
#     RGB input) are padded by the plan (conv_int8_padded_channels); out_channels not a multiple of
#     4 leaves only the byte-access few-channels kernel.
#   * arch: the newest the target runs (the Sm80 cp.async mainloop on sm80 and sm90).
#   * tile: lean tiles only, those whose padding (rows past M, channels past N) costs at most
#     CONV_MAX_PADDING times the leanest tile's. When M is large, tile N by output channels: 64 up
#     to CONV_NARROW_MAX_CHANNELS, else 128, the largest such tile (128 rows). Co = 64, M = 200704:
#     128x64 against 64x64 and 128x128: 20.5 / 22.2 / 39.0 (1x1), 49.9 / 54.3 / 75.9 (3x3). Co =
#     128: 128x64 40.6 against 128x128 44.7 (3x3 stride 2, M = 50176), 39.8 against 44.2 (3x3);
#     the one loss is the 1x1 with K = 256 at M = 200704 (59.3 against 54.9). Co >= 256 from M =
#     12544: 128x128 the fastest or within 7% (1x1 expand 42.5 against 128x64 43.7, stride-2
#     downsample 50.4 against 55.6, 1x1 reduce 34.0 against 40.3), and the fastest on every layer
#     of the last stage (M = 3136, Co = 512 and 2048: 34.1 against 39.4 for 128x64, 17.3 against
#     19.4, 33.9 against 38.5), even where its 100 threadblocks (Co = 512) leave SMs idle. The
#     256x128 tile was never the fastest (Co = 256, M = 200704, K = 64: 83.0 against 75.4 and 77.8
#     for 128x64 and 128x128) and left the catalog.
#     "M is large" means that tile has at least CONV_MIN_WAVE * sm_count threadblocks: at batch 1
#     (M = 3136 and below) it never does, and the tile with the most threadblocks (64x64) was the
#     fastest on every layer; 128x128 for Co = 256 at M = 3136 would have 50.
CONV_MAX_PADDING = 1.125
CONV_NARROW_MAX_CHANNELS = 128
CONV_MIN_WAVE = 0.5
# Input channels that are not a multiple of 4 are zero-padded to a multiple of this (weights at
# plan time, the input on each call) so an aligned kernel applies; the few-channels kernel it
# replaces took 2014 us on ResNet-50's first convolution at batch 64 (Ci = 3, 7x7 stride 2;
# cuDNN FP16: 159 us); padded to 4, the alignment-4 64 x 64 kernel takes 1226 us (each of the 49
# taps is a whole 64-deep K step for 4 channels). Still to be measured: 16 (the 16-byte kernels
# and their larger tiles, the same waste per tap, four times the input copy's bytes).
CONV_PAD_CHANNELS_TO = 4
# Up to this many input channels (after padding), K runs over the packed (r, s, c) index (the
# few-channels iterator) where the catalog has such a kernel at the chosen alignment: with the
# optimized iterator each filter tap takes a whole 64-deep K step. Measured on conv1 (Ci padded to
# 4, 7x7 stride 2): the Sm80 alignment-4 few-channels 128 x 64 kernel 544 us against 1233 us for
# the 64 x 64 alignment-4 one at batch 64, 24.9 against 33.8 at batch 1. (At 16 channels the
# alignment-16 kernels apply and the few-channels kernel, alignment 4, is not among the fitting.)
CONV_FEW_CHANNELS_MAX = 16
_CONV_MIN_ALIGNMENT = 4  # the narrowest access of the aligned kernels (Sm80 cp.async: 4 bytes)


# Stride folding (qgemm/conv_fold.py): a strided convolution whose input channels only the 4-byte
# kernels read runs as a stride-1 one over stride_h * stride_w times the channels, rounded up to
# CONV_FOLD_CHANNELS_TO, when that is at most CONV_FOLD_MAX_CHANNELS: the 16-byte kernels then
# read it. ResNet-50's conv1 (3 channels, 7x7 stride 2) becomes 16 channels, 4x4 stride 1.
CONV_FOLD_CHANNELS_TO = 16
CONV_FOLD_MAX_CHANNELS = 16


def conv_int8_folds(in_channels: int, out_channels: int, stride, dilation) -> bool:
    """Whether a plan folds the stride into channels (conv_fold.StrideFold)."""
    folded = stride[0] * stride[1] * in_channels
    return (max(stride) > 1 and tuple(dilation) == (1, 1) and in_channels % CONV_FOLD_CHANNELS_TO != 0
            and folded <= CONV_FOLD_MAX_CHANNELS and out_channels % _CONV_MIN_ALIGNMENT == 0)


def conv_int8_padded_channels(in_channels: int, out_channels: int) -> int:
    """The input channel count a plan runs its kernel with: in_channels rounded up to a multiple of
    CONV_PAD_CHANNELS_TO when no aligned kernel reads it as it is. Unchanged when out_channels is not
    a multiple of 4: the few-channels kernel runs anyway, and it reads any channel count."""
    if in_channels % _CONV_MIN_ALIGNMENT == 0 or out_channels % _CONV_MIN_ALIGNMENT:
        return in_channels
    return -(-in_channels // CONV_PAD_CHANNELS_TO) * CONV_PAD_CHANNELS_TO


# Sm90 (conv2d_int8_sm90: TMA im2col + WGMMA, CUTLASS 3.x) where the channels (multiples of 16) and
# the geometry (ConvInt8Sm90Spec.supports_geometry) allow, and where it measured faster: on deep
# GEMMs. Its kernels are not persistent, so a tile's epilogue (requantization, border term) is not
# hidden behind a next tile's mainloop; with few K steps per tile it shows. Measured on an H100
# (bench_conv.py --sweep, ResNet-50 with Z_I = -128, us; the reduction K = R*S*Ci):
#   * large M (the 128-row tile fills CONV_MIN_WAVE waves, batch 64), K >= Co:
#       Co <= 64: 128 x 64 x 64 two per SM (one's epilogue beside the other's mainloop): 1x1 64->64
#         18.2 against the Sm80 128 x 64's 19.2, 3x3 64->64 45.0 against 46.7, 1x1 256->64 31.8
#         against 35.6 (one per SM: 29.6, 58.9, 46.0).
#       Ci a multiple of 128 and Co of 128: 128 x 128 x 128: 3x3 128->128 29.7 against 37.0,
#         256->256 24.5 against 29.6, 512->512 18.8 against 30.3 (stride 2: 29.7/38.4, 23.9/29.9,
#         19.5/30.3); 1x1 512->128 16.9 against 21.5, 1024->256 13.4 against 15.8, 2048->512 10.8
#         against 16.3, 1024->512 21.9 against 24.7; even 256->128 56.2 against 56.6 and 512->256
#         32.5 against 31.9 (the one loss).
#       Otherwise (Co > 64 with Ci not a multiple of 128: not measured) the Sm80 kernels.
#     K < Co (the 1x1 expand and stride-2 downsample layers: 1 to 8 K steps per tile), the Sm80
#       kernels: 1x1 64->256 67.8 against the best Sm90 74.4, 128->512 39.0 against 38.0 (64 x 128
#       two per SM) and 46.6 (128 x 128 x 128), 256->1024 23.5 against 25.7, 512->1024 stride 2
#       30.3 against 31.2.
#   * pointwise convolutions (1x1, stride 1, no padding) with large M and Co > 64: the persistent
#     ping-pong GEMM, 128 x 128 x 64, whatever K (its epilogue under the other warp group's
#     WGMMAs): 1x1 64->256 62.9 against the Sm80 128 x 128's 69.2, 128->512 32.5 against 38.8,
#     256->1024 20.0 against 23.5, 512->2048 18.1 against 20.5, 256->128 40.6 against 57.3 (128 x
#     128 x 128), 512->256 23.1 against 32.4, 1024->512 17.1 against 21.8, 512->128 15.9 against
#     17.1, 1024->256 13.3 against 13.6; the one loss 2048->512, 10.9 against 9.8. Co <= 64 keeps
#     the two-per-SM 128 x 64 (1x1 64->64 18.3 against 19.6 on the 128 x 64 ping-pong). At batch 1
#     the ping-pong kernels lost everywhere (by 0.3 to 2 us).
#   * never for fewer than 64 input channels: TMA im2col loads a tile K of channels per filter tap,
#     the rest zeros (conv1 folded to 16 channels, 4x4: 719 us on two 128 x 64 per SM against 256
#     on the Sm80 128 x 64 at batch 64; 21.7 against 15.3 at batch 1).
#   * small M (batch 1, M <= 3136): 128 x 64 x 64 one per SM where K >= CONV_SM90_MIN_K: 3x3
#     128->128 6.9 against the Sm80 64 x 64's 7.4, 256->256 9.3 against 10.4, 512->512 14.3
#     against 16.7, 1x1 2048->512 7.9 against 8.8, 1024->256 5.6 against 5.7; below it the Sm80
#     64 x 64 by up to 0.3 us (1x1 512->128 4.4 against 4.6, 3x3 64->64 6.2 both).
CONV_PREFER_SM90 = True
CONV_SM90_MIN_K = 1024


def conv_int8_choice(m: int, in_channels: int, out_channels: int, target_sm: int, sm_count: int,
                     sm90_fits: bool = False, taps: int = 1, pointwise: bool = False) -> ConvInt8Spec | ConvInt8Sm90Spec:
    """The catalog's int8 conv kernel for an implicit GEMM of M = N*P*Q rows by out_channels
    (in_channels as the kernel reads them: a plan passes its padded count). sm90_fits: the
    convolution's geometry suits TMA im2col (ConvInt8Sm90Spec.supports_geometry); taps: the filter's
    R*S (the GEMM's K is taps * in_channels); pointwise: 1x1, stride 1, no padding (a plain GEMM)."""
    if CONV_PREFER_SM90 and sm90_fits:
        sm90 = conv_int8_sm90_choice(m, in_channels, out_channels, target_sm, sm_count, taps, pointwise)
        if sm90 is not None:
            return sm90
    fitting = [s for s in catalog(target_sm, ConvInt8Spec.family) if s.supports_channels(in_channels, out_channels)]
    alignment = max(s.alignment for s in fitting)  # the alignment-1 kernel fits any channel count
    arch = max(s.arch for s in fitting if s.alignment == alignment)
    fitting = [s for s in fitting if (s.alignment, s.arch) == (alignment, arch)]
    few = [s for s in fitting if s.iterator == "few_channels"]
    if few and in_channels <= CONV_FEW_CHANNELS_MAX:
        return few[0]
    return _conv_tile(m, out_channels, sm_count, [s for s in fitting if s.iterator != "few_channels"] or fitting)


def conv_int8_sm90_choice(m: int, in_channels: int, out_channels: int, target_sm: int, sm_count: int,
                          taps: int = 1, pointwise: bool = False) -> ConvInt8Sm90Spec | None:
    """The Sm90 catalog kernel the rule above takes for this implicit GEMM, or None where the Sm80
    kernels measured faster or none applies (target below sm90, channels not multiples of 16).
    The geometry is the caller's to check (pointwise: the ping-pong GEMM kernels may run it)."""
    fitting = [s for s in catalog(target_sm, ConvInt8Sm90Spec.family) if s.supports_channels(in_channels, out_channels)]

    def kernel(tile, ctas_per_sm, mainloop="im2col"):
        found = [s for s in fitting if (s.tile, s.ctas_per_sm, s.mainloop) == (tile, ctas_per_sm, mainloop)]
        return found[0] if found else None

    k = taps * in_channels
    if in_channels < 64:
        return None
    tile_n = 64 if out_channels <= 64 else 128
    if -(-m // 128) * -(-out_channels // tile_n) < CONV_MIN_WAVE * sm_count:  # small M
        return kernel((128, 64, 64), 1) if k >= CONV_SM90_MIN_K else None
    if out_channels <= 64:
        return kernel((128, 64, 64), 2) if k >= out_channels else None
    if pointwise:
        return kernel((128, 128, 64), 1, "pingpong")
    if k < out_channels:
        return None
    if in_channels % 128 == 0 and out_channels % 128 == 0:
        return kernel((128, 128, 128), 1)
    return None


def _conv_tile(m: int, out_channels: int, sm_count: int, fitting: list):
    """The tile rule of the comments above, among kernels that all fit."""
    def ctas(s) -> int:
        return -(-m // s.tile[0]) * -(-out_channels // s.tile[1])

    def padding(s) -> float:
        return ctas(s) * s.tile[0] * s.tile[1] / (m * out_channels)

    leanest = min(padding(s) for s in fitting)
    lean = [s for s in fitting if padding(s) <= CONV_MAX_PADDING * leanest]
    tile_n = 64 if out_channels <= CONV_NARROW_MAX_CHANNELS else 128
    large = [s for s in lean if s.tile[1] == tile_n and ctas(s) >= CONV_MIN_WAVE * sm_count]
    if large:
        return max(large, key=lambda s: s.tile[0] * s.tile[1])
    return max(lean, key=ctas)


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
#     W8A8_GEMV_PREFER_CLUSTER (off until measured) makes the heuristic take them where they fit.
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
W8A8_GEMV_PREFER_CLUSTER = False


@dataclass(frozen=True)
class W8A8GemvChoice:
    """A W8A8 decode kernel and its K slice (QgemmProblem ext[2]: K-blocks per CTA)."""

    spec: "W8A8GemvSpec"
    slice_blocks: int

    def __post_init__(self):
        from cutlass_gen.specs import W8A8GemvSpec
        if not isinstance(self.spec, W8A8GemvSpec):
            raise TypeError(f"spec must be a W8A8GemvSpec, got {type(self.spec).__name__}")
        if not isinstance(self.slice_blocks, int) or self.slice_blocks < 1:
            raise ValueError(f"slice_blocks must be an int >= 1, got {self.slice_blocks!r}")


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


def w8a8_gemv_choice(m: int, n: int, k: int, block_size: int, input: str, scheme: str, output: str, sm_count: int,
                     variant: str | None = None, ctas_per_sm: float = W8A8_GEMV_CTAS_PER_SM,
                     target_sm: int = 80) -> W8A8GemvChoice:
    """The decode kernel for M rows and its K slice. `variant` (a W8A8_GEMV_VARIANTS key) forces one;
    a cluster variant raises ValueError where K does not fit its 8 slices or the target is below sm90."""
    from cutlass_gen.specs import W8A8GemvSpec
    chosen = variant
    if variant is None:
        variant = "narrow" if m <= W8A8_GEMV_NARROW_MAX_M else "wide"
    if variant not in W8A8_GEMV_VARIANTS:
        raise ValueError(f"variant must be one of {tuple(W8A8_GEMV_VARIANTS)}, got {variant!r}")
    if chosen is None and W8A8_GEMV_PREFER_CLUSTER and target_sm >= 90:
        spec = W8A8GemvSpec(input, scheme, output, **W8A8_GEMV_VARIANTS[variant + "_cl8"])
        slice_blocks = w8a8_gemv_cluster_slice_blocks(spec, k, block_size)
        if slice_blocks is not None:
            return W8A8GemvChoice(spec, slice_blocks)
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
