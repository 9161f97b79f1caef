"""Convolution kernel choice by shape (int8 and FpA x IntB conv2d), in Python where tests reach it."""
from __future__ import annotations

from cutlass_gen.catalog import catalog
from cutlass_gen.families.conv import fpaintb_conv_configs
from cutlass_gen.families.conv import ConvInt8Sm90Spec, ConvInt8Spec, FpAIntBConvSpec

from ..fpaintb.heuristics import FPAINTB_STREAMK_CTAS_PER_SM  # noqa: F401 (the conv's stream-K threshold too)
from ..fpaintb.heuristics import FpAIntBChoice, tiled_choice


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
    return tiled_choice(FpAIntBConvSpec(act, bits, tile, warp, stages, arch), m, n, sm_count)


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


# Stride folding (qgemm/conv/fold.py): a strided convolution whose input channels only the 4-byte
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
