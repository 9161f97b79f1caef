"""conv2d kernels: int8 in and out with requantization (CUTLASS 2.x implicit GEMM, Sm90 TMA im2col)
and FpA x IntB with a quantized filter; their specs and their catalog per SM."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..spec import Slots, KernelSpec, _check_int8_tensorop, _shape
from .fpaintb import FpAIntBGemmSpec, _fpaintb_arch


# The convolutions' slots: the int8 kernels (CUTLASS 2.x and Sm90) share one layout, read by
# templates/include/qgemm/conv/slots.h; (height, width) pairs are packed as (h << 32) | w.
CONV_GEOMETRY = ("filter", "padding", "stride", "dilation")
CONV_INT8_SLOTS = Slots(ptr=("x", "w", "multiplier", "fused_bias", "border", "out"),
                        ext=("batch", "height", "width", "channels") + CONV_GEOMETRY, scalar=("clamp_lo", "clamp_hi"))


@dataclass(frozen=True)
class FpAIntBConvSpec(FpAIntBGemmSpec):
    """FP16/BF16 NHWC activations x INT4/INT8 filter [Co, R, S, C] conv2d, as an implicit GEMM on
    the FpAIntBGemmSpec mainloop: x chunks are gathered per filter tap (zero in the padding) and the
    weights carry per-block float offsets, W = q * scale + offset (signed q), one hfma2 per pair.
    The offsets take one more shared-memory row per scale row."""

    family: ClassVar[str] = "fpaintb_conv"
    template: ClassVar[str] = "fpaintb_conv.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=("x", "w", "scale", "offset", "bias", "out", "partial"), ld=("ld_x", "ld_w"),
                                 ext=("group_size", "activation_raster", "ctas", "input_hw") + CONV_GEOMETRY)

    @property
    def smem_bytes(self) -> int:
        tm, tn, tk = self.tile
        return super().smem_bytes + self.stages * (tk // 32) * tn * 2

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        return (f"qgemm_fpaintb_conv_sm{self.arch}_{self.act}_int{self.bits}"
                f"_{tm}x{tn}x{tk}_w{self.warp[0]}x{self.warp[1]}_s{self.stages}")


@dataclass(frozen=True)
class ConvInt8Spec(KernelSpec):
    """Implicit-GEMM conv2d forward: int8 NHWC activations x int8 [K, R, S, C] filters -> int32,
    requantized to int8 NHWC in the epilogue (the math is qgemm/conv/quant.py's).

    The GEMM is M = N*P*Q output pixels by N = output channels over K = R*S*C. arch 75 runs the
    Turing 8x8x16 int8 MMA with a two-stage mainloop of plain loads; arch 80 the Ampere 16x8x32
    MMA with a cp.async multistage mainloop. `alignment` is the int8 elements one global access
    of the activation and filter channels covers: in_channels must be a multiple of it, and
    out_channels of `output_alignment` (the epilogue's access width). cp.async copies 4, 8 or 16
    bytes, so arch 80 needs an alignment of 4 or more; below that the two-stage mainloop serves.

    `iterator` "optimized" is CUTLASS's kOptimized iterators: each filter tap is its own run of
    ceil(C / tile K) iterations, efficient once C fills the tile's K. "few_channels" is
    kFewChannels: K runs over the packed (r, s, c) index, so a 3-channel 7x7 input takes
    ceil(147 / 64) = 3 iterations instead of 49, at the price of per-access address arithmetic.
    """

    family: ClassVar[str] = "conv2d_int8"
    template: ClassVar[str] = "conv2d_int8.cu.j2"
    SLOTS: ClassVar[Slots] = CONV_INT8_SLOTS
    INSTRUCTIONS: ClassVar[dict] = {75: (8, 8, 16), 80: (16, 8, 32)}
    TILE_K: ClassVar[int] = 64
    ALIGNMENTS: ClassVar[tuple] = (16, 8, 4, 2, 1)
    ITERATORS: ClassVar[dict] = {"optimized": "kOptimized", "few_channels": "kFewChannels"}
    # The epilogue reads int32 accumulators from shared memory 4 at a time (one 128-bit access).
    MAX_OUTPUT_ALIGNMENT: ClassVar[int] = 4

    arch: int
    tile: tuple
    warp: tuple
    stages: int
    alignment: int
    iterator: str = "optimized"

    def __post_init__(self):
        if self.arch not in self.INSTRUCTIONS:
            raise ValueError(f"arch must be one of {sorted(self.INSTRUCTIONS)} for {self.family}, got {self.arch!r}")
        object.__setattr__(self, "tile", _shape(self.tile, "tile"))
        object.__setattr__(self, "warp", _shape(self.warp, "warp"))
        if self.tile[2] != self.TILE_K:
            raise ValueError(f"tile K must be {self.TILE_K} (64 int8 per shared-memory row), got {self.tile[2]}")
        _check_int8_tensorop(self)
        if self.alignment not in self.ALIGNMENTS:
            raise ValueError(f"alignment must be one of {self.ALIGNMENTS}, got {self.alignment!r}")
        if self.arch == 80 and self.alignment < 4:
            raise ValueError(f"alignment {self.alignment} needs arch 75 (two-stage mainloop): cp.async on sm80 "
                             f"copies 4, 8 or 16 bytes")
        if self.iterator not in self.ITERATORS:
            raise ValueError(f"iterator must be one of {tuple(self.ITERATORS)}, got {self.iterator!r}")

    @property
    def instruction(self) -> tuple[int, int, int]:
        return self.INSTRUCTIONS[self.arch]

    @property
    def output_alignment(self) -> int:
        """out_channels must be a multiple of this (int8 elements per epilogue store)."""
        return min(self.alignment, self.MAX_OUTPUT_ALIGNMENT)

    @property
    def iterator_algorithm(self) -> str:
        return self.ITERATORS[self.iterator]

    def supports_channels(self, in_channels: int, out_channels: int) -> bool:
        return in_channels % self.alignment == 0 and out_channels % self.output_alignment == 0

    @property
    def name(self) -> str:
        t, w = self.tile, self.warp
        return (f"qgemm_conv2d_int8_sm{self.arch}_s8s8_s8_{t[0]}x{t[1]}x{t[2]}_w{w[0]}x{w[1]}x{w[2]}"
                f"_s{self.stages}_a{self.alignment}{'_few' if self.iterator == 'few_channels' else ''}")


@dataclass(frozen=True)
class ConvInt8Sm90Spec(KernelSpec):
    """The int8 conv2d forward of ConvInt8Spec (same operation, same QgemmProblem slots) on Sm90:
    CUTLASS 3.x implicit GEMM with TMA im2col loads and WGMMA in a warp-specialized mainloop (one
    producer and one consumer warp group, not persistent: CUTLASS offers no persistent conv
    schedule on Sm90), the requantization as an epilogue visitor tree and a TMA store.

    `tile` is (M, N, K) in the implicit GEMM: M output pixels (64 or 128: one warp group's WGMMA
    rows, 64 at a time), N output channels, K input channels per filter tap (64 or 128 int8: the
    64- and 128-byte shared-memory swizzles). `cluster` (M, N) multicasts a tile's filters or
    activations to neighbouring CTAs. `stages` 0 lets CUTLASS fill shared memory with stages (one
    threadblock per SM). `ctas_per_sm` 2 asks for two resident threadblocks, so one's epilogue runs
    under the other's mainloop (the kernel is not persistent): registers capped at 128 per thread
    (a tile of at most 128 x 64 accumulators per warp group) and a fixed stage count whose
    buffers fit half the shared memory.
    `mainloop` "pingpong" runs only pointwise convolutions (1x1, stride 1, no padding: the implicit
    GEMM is a plain GEMM over the NHWC rows) as a CUTLASS 3.x GEMM with the persistent ping-pong
    schedule: two consumer warp groups on alternate tiles, so one's epilogue runs under the other's
    WGMMAs, which the im2col kernel cannot do and which short K loops need (K = Ci: 64 to 2048).
    TMA moves 16-byte rows, so input and output channels must be multiples of 16.
    """

    family: ClassVar[str] = "conv2d_int8_sm90"
    template: ClassVar[str] = "conv2d_int8_sm90.cu.j2"
    SLOTS: ClassVar[Slots] = CONV_INT8_SLOTS
    TILE_M: ClassVar[tuple] = (64, 128)
    TILE_N: ClassVar[tuple] = (64, 128, 256)
    TILE_K: ClassVar[tuple] = (64, 128)
    CLUSTERS: ClassVar[tuple] = ((1, 1), (2, 1), (1, 2))
    alignment: ClassVar[int] = 16      # int8 channels per 16-byte TMA row, input and output
    output_alignment: ClassVar[int] = 16
    # TMA im2col (CUTLASS's can_implement for 2-D): the box corners -pad and pad - (R - 1) * dilation
    # are signed 8-bit, the filter offsets (R - 1) * dilation unsigned 8-bit below 255, the traversal
    # stride at most 8.
    CORNER_RANGE: ClassVar[tuple] = (-128, 127)
    MAX_FILTER_SPAN: ClassVar[int] = 254
    MAX_STRIDE: ClassVar[int] = 8
    MAINLOOPS: ClassVar[tuple] = ("im2col", "pingpong")

    # Shared memory per SM for a kernel's blocks (227 KB) less room for the epilogue's buffers.
    MAINLOOP_SMEM_PER_SM: ClassVar[int] = 192 * 1024

    tile: tuple
    cluster: tuple = (1, 1)
    stages: int = 0
    ctas_per_sm: int = 1
    mainloop: str = "im2col"
    arch: int = 90

    def __post_init__(self):
        object.__setattr__(self, "tile", _shape(self.tile, "tile"))
        self._as_ints("cluster")
        if self.mainloop not in self.MAINLOOPS:
            raise ValueError(f"mainloop must be one of {self.MAINLOOPS}, got {self.mainloop!r}")
        if self.mainloop == "pingpong" and (self.ctas_per_sm != 1 or self.cluster != (1, 1)):
            raise ValueError(f"the pingpong mainloop is persistent: ctas_per_sm 1 and cluster (1, 1), got "
                             f"{self.ctas_per_sm} and {self.cluster}")
        self._require_sm90()
        for what, value, allowed in (("tile M", self.tile[0], self.TILE_M), ("tile N", self.tile[1], self.TILE_N),
                                     ("tile K", self.tile[2], self.TILE_K)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value}")
        if self.cluster not in self.CLUSTERS:
            raise ValueError(f"cluster must be one of {self.CLUSTERS}, got {self.cluster}")
        if self.stages != 0 and not 2 <= self.stages <= 8:
            raise ValueError(f"stages must be 0 (as many as fit) or in [2, 8], got {self.stages}")
        if self.ctas_per_sm not in (1, 2):
            raise ValueError(f"ctas_per_sm must be 1 or 2, got {self.ctas_per_sm!r}")
        if self.ctas_per_sm == 2:
            if self.tile[0] * self.tile[1] > 128 * 64:
                raise ValueError(f"ctas_per_sm 2 caps registers at 128 per thread: tile M x N at most 128 x 64 "
                                 f"accumulators, got {self.tile[0]} x {self.tile[1]}")
            stage_bytes = (self.tile[0] + self.tile[1]) * self.tile[2]
            if not self.stages or 2 * self.stages * stage_bytes > self.MAINLOOP_SMEM_PER_SM:
                raise ValueError(f"ctas_per_sm 2 needs a stage count whose buffers ({stage_bytes} bytes each) fit "
                                 f"twice in {self.MAINLOOP_SMEM_PER_SM} bytes, got stages={self.stages}")

    def supports_channels(self, in_channels: int, out_channels: int) -> bool:
        return in_channels % self.alignment == 0 and out_channels % self.output_alignment == 0

    @classmethod
    def supports_geometry(cls, kernel_size, stride, padding, dilation) -> bool:
        """Whether TMA im2col can walk this convolution (pairs of (height, width))."""
        lo, hi = cls.CORNER_RANGE
        spans = [(k - 1) * d for k, d in zip(kernel_size, dilation)]
        return (max(stride) <= cls.MAX_STRIDE and max(spans) <= cls.MAX_FILTER_SPAN
                and all(lo <= -p and lo <= p - span <= hi for p, span in zip(padding, spans)))

    @staticmethod
    def is_pointwise(kernel_size, stride, padding) -> bool:
        """1x1, stride 1, no padding: the convolution is a GEMM over the NHWC rows."""
        return tuple(kernel_size) == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0)

    def runs_geometry(self, kernel_size, stride, padding, dilation) -> bool:
        """Whether this kernel can run the convolution (the pingpong GEMM: pointwise ones only)."""
        if self.mainloop == "pingpong":
            return self.is_pointwise(kernel_size, stride, padding)
        return self.supports_geometry(kernel_size, stride, padding, dilation)

    @property
    def name(self) -> str:
        t, c = self.tile, self.cluster
        stages = f"_s{self.stages}" if self.stages else ""
        ctas = f"_{self.ctas_per_sm}cta" if self.ctas_per_sm > 1 else ""
        mainloop = "_pingpong" if self.mainloop == "pingpong" else ""
        return f"qgemm_conv2d_int8_sm90_s8s8_s8_{t[0]}x{t[1]}x{t[2]}_c{c[0]}x{c[1]}{stages}{ctas}{mainloop}"


# --- catalog ---------------------------------------------------------------------------------

# FpA x IntB conv2d (implicit GEMM on the same mainloop; qgemm/conv/heuristics.py fpaintb_conv_choice
# picks): per weight width the GEMM's 32/64-row tile for small images and batches, and its 128-row
# tile for the rest (the offsets' extra shared-memory rows fit both).
_FPAINTB_CONV_CONFIGS = {
    4: [((32, 128, 128), (32, 32), 3), ((128, 64, 64), (64, 32), 4)],
    8: [((64, 128, 64), (32, 64), 4), ((128, 128, 64), (64, 32), 3)],
}


def fpaintb_conv_configs(bits: int, arch: int) -> list[tuple]:
    """(tile, warp, stages) of the catalog's FpA x IntB conv kernels for a weight width and arch."""
    return [(tile, warp, 2 if arch == 75 else stages) for tile, warp, stages in _FPAINTB_CONV_CONFIGS[bits]]


def _fpaintb_conv(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBConvSpec(act, bits, tile, warp, stages, arch)
            for act in acts for bits in (4, 8) for tile, warp, stages in fpaintb_conv_configs(bits, arch)]


# Int8 conv2d (qgemm/conv/heuristics.py conv_int8_choice picks among these, its comments give the
# measurements), as (arch, tile, warp, stages, alignment, iterator): channels in multiples of 16 on
# 128 x 128 for large batches with more than 128 output channels, 128 x 64 for those with at most 128,
# 64 x 64 for small batches (256 x 128 measured slower than 128 x 128 or 128 x 64 on every ResNet-50
# layer); multiples of 4 on one 64 x 64 tile (a plan pads other input channel counts, the 3 of an RGB
# input, to heuristics.CONV_PAD_CHANNELS_TO) and, for a few input channels (at most
# heuristics.CONV_FEW_CHANNELS_MAX, measured on conv1 before it was folded), on 128 x 64 with the
# few-channels iterator and 4-byte cp.async (the optimized iterator spends a whole 64-deep K step on
# each filter tap's 4 channels); output channels that are not a multiple of 4, with any input
# channels, on the Turing two-stage mainloop with byte accesses and the few-channels iterator, which
# runs on every later SM too.
_CONV_FEW_CHANNELS = (75, (128, 64, 64), (64, 32, 64), 2, 1, "few_channels")
_CONV_CONFIGS = {
    75: [(75, (128, 128, 64), (64, 64, 64), 2, 16, "optimized"),
         (75, (128, 64, 64), (64, 32, 64), 2, 16, "optimized"),
         (75, (64, 64, 64), (32, 32, 64), 2, 16, "optimized"),
         (75, (64, 64, 64), (32, 32, 64), 2, 4, "optimized"),
         _CONV_FEW_CHANNELS],
    80: [(80, (128, 128, 64), (64, 64, 64), 3, 16, "optimized"),
         (80, (128, 64, 64), (64, 32, 64), 4, 16, "optimized"),
         (80, (64, 64, 64), (32, 32, 64), 4, 16, "optimized"),
         (80, (64, 64, 64), (32, 32, 64), 4, 4, "optimized"),
         (80, (128, 64, 64), (64, 32, 64), 3, 4, "few_channels"),
         _CONV_FEW_CHANNELS],
}


def _conv2d_int8(target_sm: int) -> list[KernelSpec]:
    return [ConvInt8Spec(*config) for config in _CONV_CONFIGS[75 if target_sm == 75 else 80]]


# Int8 conv2d on Sm90 (TMA im2col + WGMMA; channels in multiples of 16), as (tile (M, N, K), stages,
# threadblocks per SM): the Sm80 catalog's 128 x 128 and 128 x 64, a 64-row tile for small batches,
# a 128-deep K step for input channels in multiples of 128, each filling shared memory with stages;
# and two-per-SM versions of the narrow tiles (4 stages), whose epilogues overlap the other
# threadblock's mainloop: the kernel is not persistent, and ResNet-50's K loops are short (9 steps
# for a 3x3 over 64 channels); and, for pointwise convolutions only, the persistent ping-pong GEMM
# (qgemm/conv/heuristics.py conv_int8_sm90_choice says where each measured fastest).
_CONV_SM90_CONFIGS = [
    ((128, 128, 64), 0, 1, "im2col"),
    ((128, 64, 64), 0, 1, "im2col"),
    ((64, 128, 64), 0, 1, "im2col"),
    ((128, 128, 128), 0, 1, "im2col"),
    ((128, 64, 64), 4, 2, "im2col"),
    ((64, 128, 64), 4, 2, "im2col"),
    ((128, 128, 64), 0, 1, "pingpong"),
    ((128, 64, 64), 0, 1, "pingpong"),
]


def _conv2d_int8_sm90(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [ConvInt8Sm90Spec(tile, stages=stages, ctas_per_sm=ctas, mainloop=mainloop)
            for tile, stages, ctas, mainloop in _CONV_SM90_CONFIGS]


CATALOGS = {
    FpAIntBConvSpec.family: _fpaintb_conv,
    ConvInt8Spec.family: _conv2d_int8,
    ConvInt8Sm90Spec.family: _conv2d_int8_sm90,
}
