"""FpA x IntB kernel choice by shape, in Python where tests reach it."""
from __future__ import annotations

from dataclasses import dataclass

from cutlass_gen.families.fpaintb import fpaintb_gemm_configs
from cutlass_gen.families.fpaintb import FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec, FpAIntBSm90Spec

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
    l2_prefetch: int = 0  # decode variant: bytes of each CTA's codes prefetched into L2 before its wait

    def __post_init__(self):
        if self.ctas_per_sm < 0 or self.raster_group < 1:
            raise ValueError(f"ctas_per_sm must be >= 0 and raster_group >= 1, got {self.ctas_per_sm} and "
                             f"{self.raster_group}")
        # (The decode variant of the small-M kernel takes ctas_per_sm too: split-K over CTAs.)
        split_k = isinstance(self.spec, FpAIntBGemvSpec) and self.spec.stream
        if not isinstance(self.l2_prefetch, int) or not 0 <= self.l2_prefetch <= 1 << 20 or (self.l2_prefetch and not split_k):
            raise ValueError(f"l2_prefetch is 0 to {1 << 20} bytes, and only for the decode variant "
                             f"(FpAIntBGemvSpec stream=True), got {self.l2_prefetch!r} for {self.spec.name}")
        if not isinstance(self.spec, FpAIntBGemmSpec) and (self.raster_group != 1 or (self.ctas_per_sm and not split_k)):
            raise ValueError(f"ctas_per_sm and raster_group are knobs of the tiled GEMM, not of {self.spec.name}")

    @property
    def dequantize(self) -> bool:
        return isinstance(self.spec, FpAIntBDequantSpec)


def fpaintb_gemm_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    """The tiled GEMM for M rows: tile by M; stream-K when the output tiles do not fill the GPU."""
    tile, warp = next((t, w) for limit, t, w in FPAINTB_GEMM_TILES[bits] if limit is None or m <= limit)
    stages = next(s for t, w, s in fpaintb_gemm_configs(bits, arch) if (t, w) == (tile, warp))
    return tiled_choice(FpAIntBGemmSpec(act, bits, tile, warp, stages, arch), m, n, sm_count)


def tiled_choice(spec, m: int, n: int, sm_count: int) -> FpAIntBChoice:
    """A tiled kernel's scheduling for an m x n output (the GEMM's and the conv's implicit GEMM's):
    stream-K when the output tiles do not fill the GPU FPAINTB_STREAMK_CTAS_PER_SM times, raster
    groups of up to FPAINTB_RASTER_GROUP row tiles."""
    tiles_m = -(-m // spec.tile[0])
    tiles = tiles_m * -(-n // spec.tile[1])
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
# Wider 16-token CTAs (bench_fpaintb.py --decode --m 16 and benchmarks/diag_decode16.py on an H100,
# 2026-11-27; us at M = 9 / 16, the 16-row tiled GEMM against CTAs of 32 columns x 8 warps, each call
# after another qgemm call): 4096 x 1024 12.2 / 12.2 against 6.9 / 7.5; 4096 x 4096 15.4 / 15.4 against
# 8.2 / 8.9; 11008 x 4096 22.1 / 21.9 against 15.0 / 18.1; 14336 x 4096 24.8 / 24.9 against 17.1 / 18.6;
# 28672 x 8192 63.0 / 63.3 against 57.7 / 62.7; with more column CTAs (4096 x 12288 and up) they lost
# 10-37%. A plan rule taking them where N / 32 <= the SM count (or twice that from K = 8192) made the
# compiled Llama-3-8B W4A16 model (8 layers, packed, batch 16) slower, not faster: 7913 tok/s against
# 8102 and 8090 with the rule off (one run each way, off-on-off). It is not that those benchmarks call
# qgemm back to back (the programmatically launched decode variant starting during the previous
# call's tail): after a torch kernel (diag_decode16.py --between, same day) the 32 x 8 CTAs kept their
# lead (4096 x 4096 8.6 / 9.2 against 15.6 / 15.7; 14336 x 4096 17.5 / 19.4 against 24.9 / 25.3). The
# model's loss has another cause, not yet found. So M 9-16 stay on the tiled GEMM.
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
# Bytes of each CTA's codes the decode variant prefetches into L2 before it waits for the previous
# kernel (FpAIntBChoice.l2_prefetch; sm90 builds; the prefetch starts after the blocks the warps load
# first). Measured on an H100 (2026-11-27), INT4 g128 / INT8 per channel at M = 1:
#   bench_fpaintb.py --decode --plan-only, the six shapes above and Llama-3-8B's four, geomean vs
#   cuBLAS FP16: none 3.09-3.11x / 1.93-1.94x, 4 KB 3.22x / 1.99x, 8 KB 3.24x / 2.03x, 16 KB
#   3.20x / 2.07x. There each call follows another decode call, which lets it start early, so the
#   prefetch runs while that call finishes.
#   bench_model.py, Llama-3-8B W4A16 decode at batch 1 (compiled; most qgemm calls follow an
#   Inductor kernel, which does not let them start early, so the prefetch races their own loads):
#   none 290.2 / 290.9, 4 KB 291.7 / 291.7, 16 KB 278.3 tok/s.
# 4 KB keeps most of the first gain and costs the model nothing.
FPAINTB_STREAM_L2_PREFETCH = 4096


def fpaintb_stream_choice(m: int, n: int, bits: int, act: str, arch: int) -> FpAIntBChoice:
    """The decode variant's configuration for M <= FPAINTB_STREAM_MAX_M rows (FPAINTB_STREAM)."""
    config = FPAINTB_STREAM[bits][0 if m <= 8 else 1]
    if bits == 4 and m <= 8 and n >= FPAINTB_STREAM_WIDE_MIN_N:
        config = FPAINTB_STREAM_WIDE
    return FpAIntBChoice(FpAIntBGemvSpec(act, bits, arch=arch, stream=True, **config), FPAINTB_STREAM_CTAS_PER_SM,
                         l2_prefetch=FPAINTB_STREAM_L2_PREFETCH)


def fpaintb_choice(m: int, n: int, k: int, bits: int, act: str, arch: int, sm_count: int) -> FpAIntBChoice:
    if m >= FPAINTB_DEQUANT_MIN_M:
        return FpAIntBChoice(FpAIntBDequantSpec(act, bits, arch))
    if arch >= 80 and m <= FPAINTB_STREAM_MAX_M:
        return fpaintb_stream_choice(m, n, bits, act, arch)
    if m <= FPAINTB_GEMV_MAX_M[bits] and (bits == 8 or n <= FPAINTB_GEMV_MAX_N):
        return FpAIntBChoice(FpAIntBGemvSpec(act, bits, arch=arch, **FPAINTB_DECODE))
    return fpaintb_gemm_choice(m, n, k, bits, act, arch, sm_count)


# FpA x IntB on Sm90 (FpAIntBSm90Spec: CUTLASS's mixed-input WGMMA collective, the weight as WGMMA's
# A and the tokens on the kernel's N). Set from the tile sweep of 2026-11-26 (benchmarks/device_sweep.sh:
# bench_fpaintb.py --sweep sm90 on an H100, INT4 group 128 and INT8 per channel, FP16, rotated weights,
# CUDA graphs, the six shapes (K, N) = (14336, 21504), (4096, 12288), (4096, 22016), (11008, 4096),
# (8192, 28672), (28672, 8192); us in that order):
#   * M = 16: the Sm80 kernels stay (75.8, 19.4, 31.7, 21.6, 63.3, 64.3; the best Sm90 tile, 128 x 16,
#     85.3, 21.1, 34.7, 21.0, 70.9, 63.6; with qgemm's consumer loop it wins, FPAINTB_SM90_NARROW_MAX_M
#     below). From M = 17 the Sm90 kernel: at M = 24
#     its 128 x 32 tile beat the Sm80 32-row GEMM on all six (92.7, 22.5, 37.9, 22.5, 74.7, 67.8 against
#     102.4, 25.8, 38.8, 28.8, 84.0, 83.3), at M = 32 likewise (91.0, 22.7, 37.8, 22.8, 75.4, 68.0
#     against the 128 x 64 tile's 104.4, 27.1, 44.8, 28.9, 89.5, 82.7);
#   * token tile by M: 32 wide up to 32 rows, 64 up to 64, 128 beyond (the best or within noise of it at
#     M = 64, 128, 256 and 512; the 64 x 128 ping-pong and 128 x 256 tiles won single shapes by 3-13%),
#     all stream-K;
#   * stream-K splits (ext[4]): CUTLASS's heuristic decomposition leaves SMs idle when the output tiles
#     fill less than half the GPU; there an explicit split of sm_count // tiles (at most
#     FPAINTB_SM90_MAX_SPLITS, the most swept) won: M = 24, N = 4096 (32 tiles) 22.5 with 4 splits
#     against 23.6; N = 8192 (64 tiles) 67.8 with 2 against 69.4; M = 32 alike (22.8 and 68.0 against
#     28.9 and 82.7 for the heuristic's 128 x 64); more tiles: the heuristic's own (0) was best;
#   * dequantize + cuBLAS from FPAINTB_SM90_DEQUANT_MIN_M rows: at M = 1024 the Sm90 kernel won on
#     all five shapes the sweep reached (128 x 128 persistent: 192.2, 356.7, 155.7, 881.2 against
#     229.1, 417.7, 198.9, 1091.8; 128 x 256: 1097 against 1414 on the first; the 128 x 128 stream-K
#     kernel the plan runs: 0.82x cuBLAS FP16 geomean over the six against 0.67x in the final run);
#     at 2048 dequantize + cuBLAS was as fast or 4-8% faster on every shape (Sm90 stream-K 2305, 416,
#     734, 344, 1854, 1733 against 2307, 386, 704, 318, 1723, 1720), at 4096 faster on all six
#     (4239, 750, 1277, 630, 3150, 3169 against 4807, 921, 1557, 725, 3760, 3658);
#   * group size 32 (below the kernel's 64-deep K tile; the collective reads one scale row per K
#     tile) stays on the Sm80 kernels.
# The persistent 128 x 128 kernel ran 4-7% faster than the stream-K one at M = 2048; it stays in the
# sweep list, out of the catalog (each Sm90 kernel adds one to two minutes to CI's build). With qgemm's loop
# on 128-deep K tiles it did not win (benchmarks/device_decomp.sh, H100, 2026-11-27, the six shapes and
# Llama-3-8B's four, persistent / stream-K time): geomean 1.014 at M = 1024 (0.96-1.10), 0.997 at 2048
# (0.95-1.04).
# Scale-only kernels (FpAIntBSm90Spec zeros=False) for weights whose zero' is 0 everywhere (symmetric):
# same tiles, no zero' operand. benchmarks/device_scaleonly.sh, H100 2026-11-27, the six shapes, INT4 g128
# FP16, the plan's tile with and without zeros in one run (sk0): geomean speed-up 1.078x at M = 32
# (1.047-1.128), 1.016x at 128, 1.025x at 256 (0.947-1.066), 1.030x at 1024 (0.999-1.079).
# With qgemm's consumer loop on 128-deep K tiles (FPAINTB_SM90_AHEAD, below) the 128 x 128 kernel beat
# dequantize + cuBLAS at M = 2048 on five shapes of six (benchmarks/device_ahead.sh, H100 2026-11-27:
# 2009, 355, 679, 324, 1658, 1503 us against 2302, 378, 687, 317, 1722, 1737; 0.905x cuBLAS FP16 geomean
# against 0.851x), where CUTLASS's loop on 64-deep tiles had lost by 0-8%. At 4096 that loop lost by 12-19%
# (above) and qgemm's gained 5-9% over it from M = 256 to 2048, so the crossing lies near 3000 rows
# (not measured between 2048 and 4096): FPAINTB_SM90_DEQUANT_MIN_M = 3072.
# 9 to 16 rows (FPAINTB_SM90_NARROW_MAX_M): the 16-token tile with qgemm's consumer loop on 128-deep K
# tiles, adopted from benchmarks/device_tokens.sh (H100, 2026-11-27, the six shapes, FP16, geomean against
# cuBLAS FP16 at M = 16; M = 9 within 1%): INT4 g128 scale-only 2.44x with CUTLASS's stream-K
# decomposition against 2.28x for the Sm80 16-row GEMM (faster on five shapes; on the sixth, 4096 x 22016,
# 31.3 against 30.9 us), with zeros 2.39x; INT8 per channel 1.67x against 1.49x. The split rule below holds for
# this tile too: 4 splits at N = 4096 (32 tiles; 18.9 against 20.7 us at 11008 x 4096), 2 at N = 8192
# (53.3 against 57.1 at 28672 x 8192), none from N = 12288 (2 and 4 splits lost 10-35% there). With it,
# INT4 g128 at M = 16: 2.50x. The catalog holds the 16-token tile only with qgemm's loop, so weights
# whose K or group size is not a multiple of 128 keep the Sm80 kernels below 17 rows.
FPAINTB_SM90_MIN_M = 9
FPAINTB_SM90_NARROW_MAX_M = 16
FPAINTB_SM90_DEQUANT_MIN_M = 3072
FPAINTB_SM90_MAX_SPLITS = 4
# (most rows, tile (weight rows, tokens), schedule, scheduler), the first that fits M.
FPAINTB_SM90_TILES = [
    (FPAINTB_SM90_NARROW_MAX_M, (128, 16), "cooperative", "streamk"),
    (32, (128, 32), "cooperative", "streamk"),
    (64, (128, 64), "cooperative", "streamk"),
    (None, (128, 128), "cooperative", "streamk"),
]


# qgemm's consumer loop (FpAIntBSm90Spec mainloop="ahead", templates/include/qgemm/fpaintb/sm90_mainloop.hpp:
# a whole K tile converted while the previous tile's WGMMAs run) on 128-deep K tiles, for weights whose K
# and group size allow them; the others keep CUTLASS's loop on 64-deep tiles. Measured with
# benchmarks/device_ahead.sh on an H100 (2026-11-27; INT4 g128 FP16 scale-only, the six shapes, geomean
# against cuBLAS FP16, each line one run):
#   * 128 x 128 tile: CUTLASS's loop (64-deep) 1.37x at M = 128, 0.90x at 256, 0.83x at 1024; CUTLASS's
#     loop 128-deep 1.33x, 0.87x, 0.81x; qgemm's loop 64-deep 1.36x, 0.86x, 0.81x; qgemm's loop 128-deep
#     1.44x, 0.95x, 0.90x. Only both together gain: the 128-deep tile gives the loop eight WGMMAs (1024
#     tensor-pipe cycles for the two warp groups) to hide the next tile's conversion behind. ncu at
#     M = 1024 (14336 x 21504): tensor pipe 88.5% of active cycles, where CUTLASS's loop had 80.4% and
#     cuBLAS has 97.1%.
#   * every tile, 64-deep CUTLASS loop against 128-deep qgemm loop: 128 x 32 at M = 32 2.18x / 2.47x,
#     128 x 64 at M = 64 1.81x / 2.04x, 128 x 128 at M = 128 1.38x / 1.41x, at 256 0.88x / 0.93x, at
#     1024 0.82x / 0.88x, at 2048 0.86x / 0.91x; qgemm's loop was faster on 33 of the 36 (shape, M) pairs
#     in each tile's own M range, and 1-2% slower on the other three.
#   * the 128-deep 128 x 16 tile with qgemm's loop at M = 16: 2.44x against 2.26x for the Sm80 16-row
#     GEMM the plan runs (faster on all six shapes; sweep timing with CUTLASS's stream-K decomposition).
#     Adopted for 9-16 rows after its own run (FPAINTB_SM90_NARROW_MAX_M above).
FPAINTB_SM90_AHEAD = dict(tile_k=128, mainloop="ahead")


RASTER_HEURISTIC = 0  # ext[2] of the Sm90 kernel: CUTLASS's raster heuristic
# ext[5] of a stream-K Sm90 kernel without split-K slices: how CUTLASS's stream-K scheduler divides the work
DECOMPOSITION_HEURISTIC = 0  # CUTLASS's: whole tiles unless the last wave is less than half full
DECOMPOSITION_DATA_PARALLEL = 1  # one CTA per output tile
DECOMPOSITION_STREAM_K = 2  # every SM takes an equal share of all tiles' K iterations
# The plans keep CUTLASS's heuristic (but for the two-CTA kernel on long K: FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K
# below). benchmarks/device_decomp.sh (H100, 2026-11-27, INT4 g128 scale-only,
# the plan's 128-deep tile by M, the six shapes and Llama-3-8B's four, us) timed both forced modes against
# it: forced stream-K was slower on geomean at every M (1.032x the heuristic's time at M = 16, 1.029x at 32,
# 1.017x at 64, 1.014x at 128, 1.013x at 256, 1.088x at 1024) and more than 3% faster on only 3 of the 60
# (shape, M) pairs (M = 256, 8192 x 28672: 202.2 against 230.8), with no pattern a rule could follow; even
# where the whole tiles leave SMs idle it lost (M = 16, 4096 x 12288, 96 tiles on 132 SMs: 20.8 against 17.2,
# the partial tiles' fix-up costing more than the idle SMs). Forced data-parallel was never faster by more
# than 3% (1.10-1.27x slower on geomean up to M = 256: it drops the stream-K the heuristic takes for a
# part-filled last wave). bench_fpaintb.py --sweep-decomposition times them.


@dataclass(frozen=True)
class FpAIntBSm90Choice:
    """A Sm90 FpA x IntB kernel plus its run-time scheduling knobs (QgemmProblem ext[2..5]):
    raster order (0 CUTLASS's heuristic, 1 along M, 2 along N of the kernel's own M, N), max swizzle (1, 2, 4, 8) and, for stream-K kernels, split-K slices
    (0: none) or else the decomposition (ext[5]: DECOMPOSITION_HEURISTIC, _DATA_PARALLEL or _STREAM_K)."""

    spec: FpAIntBSm90Spec
    raster: int = RASTER_HEURISTIC
    swizzle: int = 1
    splits: int = 0
    decomposition: int = DECOMPOSITION_HEURISTIC

    def __post_init__(self):
        if not isinstance(self.spec, FpAIntBSm90Spec):
            raise TypeError(f"spec must be a FpAIntBSm90Spec, got {type(self.spec).__name__}")
        if self.raster not in (0, 1, 2) or self.swizzle not in (1, 2, 4, 8):  # ext[2]: heuristic, along M, along N
            raise ValueError(f"raster must be 0, 1 or 2 and swizzle 1, 2, 4 or 8, got {self.raster} and {self.swizzle}")
        if not 0 <= self.splits <= 64 or (self.splits > 1 and self.spec.scheduler != "streamk"):
            raise ValueError(f"splits must be in [0, 64], and above 1 only on a stream-K kernel, got {self.splits} "
                             f"for {self.spec.name}")
        if self.decomposition not in (DECOMPOSITION_HEURISTIC, DECOMPOSITION_DATA_PARALLEL, DECOMPOSITION_STREAM_K) or (
                self.decomposition != DECOMPOSITION_HEURISTIC and (self.splits > 1 or self.spec.scheduler != "streamk")):
            raise ValueError(f"decomposition must be 0 (heuristic), 1 (data-parallel) or 2 (stream-K), and other than 0 "
                             f"only on a stream-K kernel without split-K slices, got {self.decomposition} with "
                             f"{self.splits} slices for {self.spec.name}")

    @property
    def dequantize(self) -> bool:
        return False


def fpaintb_sm90_applies(m: int, n: int, k: int, group_size: int, target_sm: int) -> bool:
    """Whether M rows of this weight run the Sm90 kernel (FpAIntBPlan with sm90=True)."""
    if target_sm != 90 or m < FPAINTB_SM90_MIN_M:
        return False
    if FPAINTB_SM90_DEQUANT_MIN_M is not None and m >= FPAINTB_SM90_DEQUANT_MIN_M:
        return False
    # up to FPAINTB_SM90_NARROW_MAX_M rows only qgemm's loop on 128-deep K tiles (the catalog's 16-token tile)
    tile_k = FPAINTB_SM90_AHEAD["tile_k"] if m <= FPAINTB_SM90_NARROW_MAX_M else FpAIntBSm90Spec.TILE_K
    return n % 8 == 0 and k % tile_k == 0 and FpAIntBSm90Spec.supports_group_size(group_size, k, tile_k)


def _sm90_tiles(m: int, n: int, tile: tuple) -> int:
    """Output tiles of the Sm90 kernel (its M the weight's N, its N the tokens)."""
    return -(-n // tile[0]) * -(-m // tile[1])


def fpaintb_sm90_splits(m: int, n: int, tile: tuple, sm_count: int) -> int:
    """Stream-K split-K slices (ext[4]) for M rows of an N-column weight: sm_count // tiles (at most
    FPAINTB_SM90_MAX_SPLITS) where the output tiles fill less than half the GPU, else 0 (CUTLASS's
    heuristic decomposition)."""
    tiles = _sm90_tiles(m, n, tile)
    return min(FPAINTB_SM90_MAX_SPLITS, sm_count // tiles) if 2 * tiles <= sm_count else 0


# Few output tiles: where the 128-token tiles would fill at most half the GPU, the 64-token tile instead
# (twice the tiles; the split rule then runs on those). Measured on an H100 (benchmarks/bench_fpaintb.py
# --sweep sm90 --sweep-match '^s90128x(64|128)k128soahsk[024]$', 2026-11-27, INT4 g128 scale-only, us,
# 128 x 128 as the plan ran it / 128 x 64 with the split rule's slices):
#   M = 80 and 128: 4096 x 2048 25.5 / 18.1, 24.5 / 17.9; 4096 x 4096 26.0 / 18.9, 25.7 / 19.1;
#     11008 x 4096 34.9 / 30.2, 35.3 / 30.3; 14336 x 4096 38.4 / 35.5, 41.2 / 35.7; 4096 x 6144 (48 tiles)
#     26.3 / 20.9, 25.3 / 21.1; in another run 11008 x 4096 at M = 128 35.6 / 29.6;
#   M = 200 (two token tiles): 4096 x 2048 25.8 / 18.1; 4096 x 4096 26.0 / 22.5; 11008 x 4096 43.6 / 44.8
#     and 14336 x 4096 54.3 / 55.7 (2.6% slower); M = 256, 11008 x 4096 46.7 / 45.6;
#   with more tiles the 128-token tile won (4096 x 6144 at M = 200: 28.3 / 35.4; 4096 x 12288 at M = 128:
#     30.5 / 36.3).
# ncu of the 128 x 128 kernel at M = 128, 4096 x 4096 (4 slices): SMs active 54% of the elapsed cycles,
# 0.17 instructions issued per scheduler a cycle, barrier and long-scoreboard stalls (the slices' fix-up).
# The plan with this rule, same day: 4096 x 4096 18.8 / 21.6 us at M = 128 / 200 (cuBLAS FP16 15.4 / 18.0),
# 11008 x 4096 31.4 / 44.7 (39.4 / 45.6), 4096 x 6144 21.9 at M = 128 (21.8).
FPAINTB_SM90_FEW_TILES_TOKENS = 64
# ... unless K is long: where each of the 128-token tile's split-K slices (the split rule's, below) still runs
# FPAINTB_SM90_FEW_TILES_SLICE_K or more of K, the 128-token tile stays. The 64-token tile converts every
# weight tile twice, once per token tile, and with long K that costs more than the slices' fix-up and the
# idle SMs. benchmarks/device_decomp.sh (H100, 2026-11-27, INT4 g128 scale-only, us, the plan's 128 x 64 /
# 128 x 128 with the split rule's slices, M = 80 and 128; K x N, and K per slice of the 128-token tile):
#   K per slice >= 7168: 28672 x 8192 111.8 / 98.1, 114.6 / 105.2; 28672 x 4096 (4 slices) 63.8 / 57.7,
#     63.8 / 60.3; 16384 x 7168 64.8 / 57.9, 65.3 / 63.3; 20480 x 8192 79.0 / 74.3, 83.0 / 80.6;
#     24576 x 6144 93.2 / 78.3, 93.5 / 84.9; 14336 x 8192 57.8 / 54.2, 59.5 / 57.6; 18432 x 7168
#     74.8 / 63.2, 72.3 / 69.9;
#   K per slice 5504 (a tie): 11008 x 8192 47.0 / 45.6, 47.3 / 48.6;
#   K per slice <= 4096: 8192 x 8192 36.9 / 39.1, 37.0 / 40.1; 16384 x 4096 41.0 / 42.5, 41.9 / 44.0;
#     11008 x 4096 31.1 / 35.1, 31.0 / 36.8; 4096 x 8192 22.3 / 26.4, 22.2 / 26.2; and the shapes above.
FPAINTB_SM90_FEW_TILES_SLICE_K = 6144

# Two CTAs per SM (FpAIntBSm90Spec.ctas_per_sm) for the 16-token tile where its 128-row tiles outnumber the
# SMs; from K above FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K with forced stream-K (ext[5]). One 384-thread CTA
# leaves each scheduler 2.3 warps, and its consumer loop waits on fixed-latency dependencies; a second CTA
# overlaps one tile's pipeline fill and epilogue with the other's steady state. ncu at M = 16, 8192 x 28672
# (224 tiles): 70.8 -> 62.6 us, issue slots 46% -> 54% busy, DRAM 52% -> 59% of peak, active warps per
# scheduler 2.3 -> 3.8. With whole tiles, SMs holding two tiles' CTAs finish after those holding one; long
# K amortizes stream-K's fix-up, which then evens the SMs out. benchmarks/device_decomp.sh (H100,
# 2026-11-27, M = 16, INT4 g128 scale-only, us; one CTA at its best of CUTLASS's decomposition, 2 and 4
# slices and forced stream-K / two CTAs with CUTLASS's decomposition / two CTAs under forced stream-K;
# K x N and its 128-row tiles):
#   more tiles than SMs, K <= 8192: 4096 x 22016 (172) 31.0 / 26.3 / 30.3; 8192 x 28672 (224) 57.0 / 50.3 /
#     55.1; 4096 x 28672 (224) 31.3 / 27.6 / 35.1;
#   more tiles than SMs, K > 8192: 10240 x 21504 (168) 57.8 / 58.4 / 52.5; 14336 x 21504 (168) 74.4 / 79.8 /
#     68.0; 12288 x 24576 (192) 71.3 / 69.4 / 67.0; 16384 x 28672 (224) 105.0 / 94.0 / 97.3;
#   fewer tiles than SMs (one CTA kept; no rule covers the scattered wins): 96 tiles: 4096 x 12288 15.7 / 20.5,
#     14336 x 12288 47.6 / 45.6, 28672 x 12288 79.6 / 76.2; 128 tiles: 12288 x 16384 42.8 / 44.4 (2 slices),
#     16384 x 16384 55.3 / 56.1, 28672 x 16384 94.1 / 93.0; 64 tiles (4 slices for two CTAs): 16384 x 8192
#     34.5 / 33.7, 14336 x 8192 31.2 / 31.5, 28672 x 8192 55.4 / 52.3; 48 and 32 tiles: two CTAs 5-26% slower
#     (4096 x 6144, 4096 x 4096, 11008 x 4096, 14336 x 4096, 20480 x 4096).
# M = 9 and 12 measured as M = 16 (first run, before programmatic launch; these are the later runs). The
# 32-token tile with two CTAs gained at most 2% at M = 24-32 (4096 x 28672) and lost elsewhere
# (8192 x 28672: 59.9 against 58.2): not in the catalog.
FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K = 8192


def fpaintb_sm90_choice(m: int, n: int, k: int, bits: int, act: str, sm_count: int,
                        zeros: bool = True, group_size: int | None = None) -> FpAIntBSm90Choice:
    """The catalog's Sm90 FpA x IntB kernel for M rows and its split (the table above). Where K and the
    group size (None: per channel) are multiples of 128 the kernel is qgemm's consumer loop on 128-deep K
    tiles (FPAINTB_SM90_AHEAD), and zeros=False (the weight's zero' is 0 everywhere: symmetric weights)
    takes its scale-only form; else CUTLASS's loop on 64-deep ones, with zeros whatever the weight. A
    128-token tile whose tiles would fill at most half the GPU gives way to the 64-token tile
    (FPAINTB_SM90_FEW_TILES_TOKENS) unless its split-K slices would each run FPAINTB_SM90_FEW_TILES_SLICE_K
    or more of K. The 16-token tile runs two CTAs per SM where its tiles outnumber the SMs, under forced
    stream-K where K is above FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K."""
    tile, schedule, scheduler = next((t, sc, sd) for limit, t, sc, sd in FPAINTB_SM90_TILES
                                     if limit is None or m <= limit)
    if tile[1] == 128 and 2 * _sm90_tiles(m, n, tile) <= sm_count:
        # few tiles (the split rule slices these 2 to 4 ways): the 64-token tile, unless K is long
        if k < FPAINTB_SM90_FEW_TILES_SLICE_K * fpaintb_sm90_splits(m, n, tile, sm_count):
            tile = (tile[0], FPAINTB_SM90_FEW_TILES_TOKENS)
    splits = fpaintb_sm90_splits(m, n, tile, sm_count) if scheduler == "streamk" else 0
    two_ctas = tile[1] == 16 and not splits and -(-n // tile[0]) > sm_count
    spec = FpAIntBSm90Spec(act, bits, tile, schedule, scheduler, zeros=zeros, ctas_per_sm=2 if two_ctas else 1,
                           **FPAINTB_SM90_AHEAD)
    if not spec.supports(k, group_size or k):
        # CUTLASS's loop on 64-deep K tiles: the catalog has it only with zeros, which symmetric weights
        # run with zero' = 0 (cutlass_gen/families/fpaintb.py FPAINTB_SM90_VARIANTS)
        spec = FpAIntBSm90Spec(act, bits, tile, schedule, scheduler, zeros=True)
    long_k = spec.ctas_per_sm == 2 and k > FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K
    return FpAIntBSm90Choice(spec, splits=splits,
                             decomposition=DECOMPOSITION_STREAM_K if long_k else DECOMPOSITION_HEURISTIC)
