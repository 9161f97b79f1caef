"""Default kernel catalogs: what `qgemm build --sm N` compiles for a target SM.

The runtime picks among these by shape (qgemm/heuristics.py); a kernel outside
the catalog can still be built on first use.
"""
from __future__ import annotations

from .specs import (
    SUPPORTED_TARGETS,
    ActQuantSpec,
    ConvInt8Sm90Spec,
    ConvInt8Spec,
    Fp8ActQuantSpec,
    Fp8BlockwiseGemmSpec,
    FpAIntBConvSpec,
    FpAIntBDequantSpec,
    FpAIntBGemmSpec,
    FpAIntBGemvSpec,
    FpAIntBSm90Spec,
    KernelSpec,
    W8A8GemmSpec,
    W8A8PromoteSpec,
    W8A8Sm90Spec,
)

# (tile, warp) pairs: a large tile for large M, a small one for parallelism at
# small M, and a 32-row tile for decode-sized M.
_W8A8_SM75_TILES = [
    ((128, 128, 32), (64, 64, 32)),
    ((64, 64, 32), (32, 32, 32)),
    ((32, 128, 32), (32, 64, 32)),
]
_W8A8_SM80_TILES = [
    ((128, 128, 64), (64, 64, 64), 3),
    ((64, 64, 64), (32, 32, 64), 4),
    ((32, 128, 64), (32, 32, 64), 4),
]


def _w8a8(target_sm: int) -> list[KernelSpec]:
    specs: list[KernelSpec] = []
    for output in W8A8GemmSpec.OUTPUTS:
        # Sm75 kernels stay in every catalog: they are the ones with a tile K of 32,
        # so they serve block size 32 on later SMs too.
        specs += [W8A8GemmSpec(75, tile, warp, 2, output) for tile, warp in _W8A8_SM75_TILES]
        if target_sm >= 80:
            specs += [W8A8GemmSpec(80, tile, warp, stages, output) for tile, warp, stages in _W8A8_SM80_TILES]
    return specs


# W8A8 on sm90 (each K-block's int32 product promoted into FP32 registers): what
# qgemm.heuristics.w8a8_sm90_choice picks for the symmetric block-INT8 scheme (block 128, FP16 and
# BF16 outputs) and the asymmetric one (every block size, FP16 output): swapped narrow-token tiles
# for decode-sized M, the 128 x 128 cooperative kernel beyond (stream-K when the tiles do not fill
# the GPU). Other outputs and the SiLU epilogue are built on first use.
# (tile, swap_ab, scheduler)
_W8A8_SM90_DECODE = [((128, 16), True, "persistent"), ((128, 16), True, "streamk"), ((128, 32), True, "persistent"),
                     ((128, 64), True, "persistent")]
_W8A8_SM90_LARGE = [((128, 128), False, "persistent"), ((128, 128), False, "streamk")]


def w8a8_sm90_configs(block_size: int) -> list[tuple]:
    """The (tile, swap_ab, scheduler) configurations the sm90 catalog holds for a block size (the
    heuristic chooses among these only, so a plan never builds a kernel on first use for its
    default choice): all of them for block 128, the narrow swapped and the 128 x 128 persistent
    kernel for the other block sizes."""
    if block_size == 128:
        return _W8A8_SM90_DECODE + _W8A8_SM90_LARGE
    return [_W8A8_SM90_DECODE[0], _W8A8_SM90_LARGE[0]]


def _w8a8_sm90(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []

    def spec(config, block_size, scheme, output):
        tile, swap_ab, scheduler = config
        return W8A8Sm90Spec(tile, block_size, scheme, output, "cooperative", scheduler, swap_ab)

    specs = [spec(c, 128, "symmetric", output) for output in ("f16", "bf16")
             for c in _W8A8_SM90_DECODE + _W8A8_SM90_LARGE]
    specs += [spec(c, 128, "asymmetric", "f16") for c in _W8A8_SM90_DECODE + _W8A8_SM90_LARGE]
    specs += [spec(c, block_size, "asymmetric", "f16") for block_size in (32, 64, 256)
              for c in w8a8_sm90_configs(block_size)]
    return specs


def _act_quant(target_sm: int) -> list[KernelSpec]:
    return [ActQuantSpec(dtype, symmetric=symmetric) for symmetric in (False, True) for dtype in ActQuantSpec.INPUTS]


# FP8 blockwise (sm90 only). Decode-sized M runs swapped (the weight's N on the kernel's M,
# tokens on a narrow tile N) so a batch of 16 tokens is not padded to 64 rows; prefill-sized M
# runs unswapped on 64- and 128-row tiles. All persistent: stream-K measured slower on every
# benchmark shape (qgemm/heuristics.py), and the spec still offers it.
# (tile, cluster, schedule, scheduler, swap_ab)
_FP8_CONFIGS = [
    ((128, 16), (1, 1), "cooperative", "persistent", True),
    ((128, 32), (1, 1), "cooperative", "persistent", True),
    ((128, 64), (1, 1), "cooperative", "persistent", True),
    ((64, 128), (1, 1), "pingpong", "persistent", False),
    ((128, 128), (1, 2), "cooperative", "persistent", False),
]


def _fp8_gemm(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [
        Fp8BlockwiseGemmSpec(tile, cluster, schedule, swap_ab, output, scheduler=scheduler)
        for output in Fp8BlockwiseGemmSpec.OUTPUTS
        for tile, cluster, schedule, scheduler, swap_ab in _FP8_CONFIGS
    ]


def _fp8_act_quant(target_sm: int) -> list[KernelSpec]:
    return [Fp8ActQuantSpec(dtype) for dtype in Fp8ActQuantSpec.INPUTS] if target_sm >= 90 else []


# FpA x IntB small-M kernel: the decode configuration qgemm/heuristics.py fpaintb_choice picks (up to
# 8 rows), for each activation type and weight width (Sm75: FP16 only). Larger M runs the tiled GEMM.
_FPAINTB_GEMV_CONFIGS = [dict(m_tiles=1, n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True)]


def _fpaintb_arch(target_sm: int) -> tuple[int, tuple]:
    return (75, ("f16",)) if target_sm == 75 else (80, ("f16", "bf16"))


# The decode variant (FpAIntBGemvSpec stream=True, issue 16), sm80 and later: the configurations
# heuristics.FPAINTB_STREAM picks (8-token CTAs up to 8 rows, 16-token ones up to 16), plus alternatives
# for benchmarks/bench_fpaintb.py --decode to time against them (wider CTAs; fewer blocks in flight).
_FPAINTB_STREAM_CONFIGS = {
    4: [dict(n_tiles=2, warps_k=8, prefetch=2, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12),
        dict(n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=4, warps_k=4, rows8=True)],
    8: [dict(n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12),
        dict(n_tiles=4, warps_k=4, rows8=True)],
}


def fpaintb_stream_configs(bits: int) -> list[dict]:
    return [dict(c, stream=True) for c in _FPAINTB_STREAM_CONFIGS[bits]]


def _fpaintb_gemv(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    specs = [FpAIntBGemvSpec(act, bits, arch=arch, **config)
             for act in acts for bits in (4, 8) for config in _FPAINTB_GEMV_CONFIGS]
    if arch >= 80:
        specs += [FpAIntBGemvSpec(act, bits, arch=arch, **config)
                  for act in acts for bits in (4, 8) for config in fpaintb_stream_configs(bits)]
    return specs


# FpA x IntB tiled GEMM: the (tile, warp, stages) qgemm/heuristics.py fpaintb_choice picks, per
# weight width: 16-row tiles for decode batches, 32 or 64 rows up to 64, 128 rows up to 512 (INT4
# 128 x 64 with four warps, INT8 128 x 128 with eight). Turing: the same shapes in two stages,
# within its 64 KB of shared memory.
_FPAINTB_GEMM_CONFIGS = {
    4: [((16, 128, 128), (16, 32), 4), ((32, 128, 128), (32, 32), 3), ((128, 64, 64), (64, 32), 4)],
    8: [((16, 64, 128), (16, 16), 4), ((64, 128, 64), (32, 64), 4), ((128, 128, 64), (64, 32), 3)],
}


def fpaintb_gemm_configs(bits: int, arch: int) -> list[tuple]:
    """(tile, warp, stages) of the catalog's tiled GEMMs for a weight width and arch."""
    return [(tile, warp, 2 if arch == 75 else stages) for tile, warp, stages in _FPAINTB_GEMM_CONFIGS[bits]]


def _fpaintb_gemm(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBGemmSpec(act, bits, tile, warp, stages, arch)
            for act in acts for bits in (4, 8) for tile, warp, stages in fpaintb_gemm_configs(bits, arch)]


# FpA x IntB conv2d (implicit GEMM on the same mainloop; qgemm/heuristics.py fpaintb_conv_choice
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


def _fpaintb_dequant(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBDequantSpec(act, bits, arch) for act in acts for bits in (4, 8)]


# FpA x IntB on Sm90 (CUTLASS's mixed-input WGMMA collective; the weight is WGMMA's A, tokens on the
# kernel's N): what qgemm/heuristics.py fpaintb_sm90_choice picks, for FP16 and BF16 and INT4 and INT8,
# as (tile (weight rows, tokens), schedule, scheduler): a 64-token tile for batches up to 64 and a
# 128-token one up to FPAINTB_SM90_WIDE_MIN_M, both stream-K (CUTLASS's heuristic decomposition runs
# whole waves data-parallel and splits only what does not fill the GPU), and 128 x 256 persistent for
# large batches. Every kernel costs about a minute of CI build time, so the catalog stays at these 12;
# FPAINTB_SM90_SWEEP_CONFIGS adds the narrower and ping-pong tiles for benchmarks/bench_fpaintb.py
# --sweep (built on first use, or with `qgemm build` on a spec list), not in the CI build.
FPAINTB_SM90_CONFIGS = [
    ((128, 64), "cooperative", "streamk"),
    ((128, 128), "cooperative", "streamk"),
    ((128, 256), "cooperative", "persistent"),
]
FPAINTB_SM90_SWEEP_CONFIGS = [
    ((128, 16), "cooperative", "streamk"),
    ((128, 32), "cooperative", "streamk"),
    ((128, 64), "cooperative", "persistent"),
    ((128, 128), "cooperative", "persistent"),
    ((128, 256), "cooperative", "streamk"),
    ((64, 64), "pingpong", "persistent"),
    ((64, 128), "pingpong", "persistent"),
]


def fpaintb_sm90_specs(act: str, bits: int, sweep: bool = False) -> list[FpAIntBSm90Spec]:
    """The catalog's Sm90 FpA x IntB kernels for one activation type and weight width (with
    sweep, also the benchmark-only configurations)."""
    configs = FPAINTB_SM90_CONFIGS + (FPAINTB_SM90_SWEEP_CONFIGS if sweep else [])
    return [FpAIntBSm90Spec(act, bits, tile, schedule, scheduler) for tile, schedule, scheduler in configs]


def _fpaintb_gemm_sm90(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [spec for act in ("f16", "bf16") for bits in (4, 8) for spec in fpaintb_sm90_specs(act, bits)]


# Int8 conv2d (qgemm/heuristics.py conv_int8_choice picks among these, its comments give the
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
# (qgemm/heuristics.py conv_int8_sm90_choice says where each measured fastest).
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



# W8A8 per-K-block GEMM promoting each block's int32 product in registers, Sm80/Sm75
# (qgemm.heuristics.w8a8_promote_choice picks): a 128 x 128 tile of eight 64 x 32 warps for large M,
# 64 x 128 of four 32 x 64 warps for middle M, and 16 x 128 of four 16 x 32 warps for decode-sized M
# (stream-K when the tiles do not fill the GPU), both schemes with FP16 output, and the symmetric
# (block-INT8) scheme's BF16 output at both ends. Turing (64 KB of shared memory, two stages): the
# large and decode tiles with FP16 output. Other outputs are built on first use. The sm90 catalog
# holds the sm80 kernels (built for sm_90a): what a plan runs on an H100 when the Sm90 kernels
# cannot take the output alignment, and the benchmark's "sm80 promote" column.
# (tile, warp, sm80 stages)
W8A8_PROMOTE_LARGE = ((128, 128, 64), (64, 32), 4)
W8A8_PROMOTE_MIDDLE = ((64, 128, 64), (32, 64), 4)
W8A8_PROMOTE_DECODE = ((16, 128, 64), (16, 32), 4)


def w8a8_promote_spec(config: tuple, arch: int, scheme: str, output: str) -> W8A8PromoteSpec:
    """The kernel of a (tile, warp, stages) configuration above for an arch (two stages on 75)."""
    tile, warp, stages = config
    return W8A8PromoteSpec(arch, tile, warp, 2 if arch == 75 else stages, scheme, output)


def _w8a8_promote(target_sm: int) -> list[KernelSpec]:
    if target_sm == 75:
        return [w8a8_promote_spec(c, 75, scheme, "f16") for scheme in ("symmetric", "asymmetric")
                for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_DECODE)]
    configs = [(c, scheme, "f16") for scheme in ("symmetric", "asymmetric")
               for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, W8A8_PROMOTE_DECODE)]
    configs += [(c, "symmetric", "bf16") for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_DECODE)]
    return [w8a8_promote_spec(c, 80, scheme, output) for c, scheme, output in configs]

_FAMILY_CATALOGS = {
    W8A8GemmSpec.family: _w8a8,
    W8A8Sm90Spec.family: _w8a8_sm90,
    ActQuantSpec.family: _act_quant,
    Fp8BlockwiseGemmSpec.family: _fp8_gemm,
    Fp8ActQuantSpec.family: _fp8_act_quant,
    FpAIntBGemvSpec.family: _fpaintb_gemv,
    FpAIntBGemmSpec.family: _fpaintb_gemm,
    FpAIntBDequantSpec.family: _fpaintb_dequant,
    FpAIntBConvSpec.family: _fpaintb_conv,
    FpAIntBSm90Spec.family: _fpaintb_gemm_sm90,
    ConvInt8Spec.family: _conv2d_int8,
    ConvInt8Sm90Spec.family: _conv2d_int8_sm90,
    W8A8PromoteSpec.family: _w8a8_promote,
}


def families() -> list[str]:
    return sorted(_FAMILY_CATALOGS)


def catalog(target_sm: int, family: str | None = None) -> list[KernelSpec]:
    """The kernels built by default for `target_sm`, optionally one family's only."""
    if target_sm not in SUPPORTED_TARGETS:
        raise ValueError(f"sm must be one of {SUPPORTED_TARGETS}, got {target_sm!r}")
    if family is not None and family not in _FAMILY_CATALOGS:
        raise ValueError(f"family must be one of {families()}, got {family!r}")
    names = [family] if family else families()
    return [spec for f in names for spec in _FAMILY_CATALOGS[f](target_sm)]


# W8A8 decode (M <= 16) fused with the activation quantization (W8A8GemvSpec), sm80 and later: the
# variants qgemm.heuristics.W8A8_GEMV_VARIANTS names, both schemes, FP16 -> FP16 and BF16 -> BF16.
# Other input/output pairs are built on first use.
# sm90 adds the cluster split-K variants (8 CTAs, reduction through distributed shared memory).
W8A8_GEMV_CONFIGS = (dict(warps=8, n_tiles=2, depth=4, min_ctas=2), dict(warps=8, n_tiles=4, depth=2, min_ctas=2),
                     dict(warps=4, n_tiles=4, depth=3, min_ctas=3))
W8A8_GEMV_SM90_CONFIGS = (
    dict(warps=8, n_tiles=2, depth=4, min_ctas=2, cluster=8, arch=90, max_slice_k=4096, max_slice_blocks=32),
    dict(warps=8, n_tiles=4, depth=2, min_ctas=2, cluster=8, arch=90, max_slice_k=4096, max_slice_blocks=32))


def _w8a8_gemv(target_sm: int) -> list[KernelSpec]:
    from .specs import W8A8GemvSpec
    if target_sm < 80:
        return []
    configs = W8A8_GEMV_CONFIGS + (W8A8_GEMV_SM90_CONFIGS if target_sm >= 90 else ())
    return [W8A8GemvSpec(dtype, scheme, dtype, **config) for scheme in W8A8GemvSpec.SCHEMES
            for dtype in ("f16", "bf16") for config in configs]


_FAMILY_CATALOGS["w8a8_gemv"] = _w8a8_gemv
