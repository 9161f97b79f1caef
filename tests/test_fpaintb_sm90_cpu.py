"""The Sm90 FpA x IntB family without a GPU: spec checks and names, render, catalog, heuristic, the
Sm90 weight layout (Python against CuTe's own layout, compiled on the host), the packer's round trip
and zero' arithmetic against the float64 reference, and a compiled kernel's host library (plan and
Params without the driver)."""
from __future__ import annotations

import ctypes
import json
import subprocess

import pytest
import torch
from conftest import requires_nvcc

from cutlass_gen.build import build, find_artifact
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb import FPAINTB_SM90_SWEEP_CONFIGS, fpaintb_sm90_specs
from cutlass_gen.families.fpaintb_layout import sm90_layout
from cutlass_gen.paths import extensions_include_dir
from cutlass_gen.render import render
from cutlass_gen.families.fpaintb import FpAIntBSm90Spec
from cutlass_gen.spec import spec_from_dict
from qgemm import wq_format
from qgemm.fpaintb import heuristics
from qgemm.fpaintb import pack as fpaintb_pack
from qgemm._abi import PARAMS_CAPACITY, HostLibrary, QgemmProblem

FAMILY = FpAIntBSm90Spec.family


# --- spec ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, fragment", [
    (dict(tile=(64, 128)), "tile M (weight rows) must be 128 with the cooperative schedule"),
    (dict(tile=(128, 64), schedule="pingpong"), "tile M (weight rows) must be 64 with the pingpong"),
    (dict(tile=(128, 24)), "tile N must be one of (16, 32, 64, 128, 256)"),
    (dict(tile=(64, 256), schedule="pingpong"), "at most 128 with the pingpong schedule"),
    (dict(tile=(64, 64), schedule="pingpong", scheduler="streamk"), "no stream-K scheduler"),
    (dict(act="f32"), "act must be one of ('f16', 'bf16')"),
    (dict(bits=2), "bits must be one of (4, 8)"),
    (dict(arch=80), "arch must be 90"),
    (dict(scheduler="splitk"), "scheduler must be one of ('persistent', 'streamk')"),
    (dict(tile=(128,)), "tile is a (weight rows, tokens) pair"),
    (dict(cluster=(1, 2)), "cluster must be one of ((1, 1), (2, 1), (4, 1))"),
    (dict(tile_k=96), "tile_k must be one of (64, 128)"),
    (dict(mainloop="pipelined"), "mainloop must be one of ('cutlass', 'ahead'), got 'pipelined'"),
    (dict(ctas_per_sm=3), "ctas_per_sm must be 1 or 2, got 3"),
    (dict(tile=(128, 64), ctas_per_sm=2), "at most 32 tokens per tile"),
    (dict(tile=(64, 16), schedule="pingpong", ctas_per_sm=2), "ctas_per_sm 2 takes the cooperative schedule"),
    (dict(tile=(128, 16), cluster=(2, 1), ctas_per_sm=2), "without a cluster"),
])
def test_spec_rejects_invalid_configs(kwargs, fragment):
    args = dict(act="f16", bits=4, tile=(128, 128))
    args.update(kwargs)
    with pytest.raises(ValueError) as exc:
        FpAIntBSm90Spec(**args)
    assert fragment in str(exc.value)


def test_spec_name_and_round_trip():
    spec = FpAIntBSm90Spec("bf16", 8, (128, 64), "cooperative", "streamk")
    assert spec.name == "qgemm_fpaintb_gemm_sm90_bf16_int8_128x64x64_c1x1_cooperative_streamk"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert spec.supports_target(90) and not spec.supports_target(80)
    # a cluster along the weight rows: named, rendered into the kernel's ClusterShape
    clustered = FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk", (2, 1))
    assert clustered.name == "qgemm_fpaintb_gemm_sm90_f16_int4_128x128x64_c2x1_cooperative_streamk"
    assert spec_from_dict(json.loads(clustered.to_json())) == clustered
    assert "using ClusterShape = Shape<_2, _1, _1>;" in render(clustered).source
    assert "using ClusterShape = Shape<_1, _1, _1>;" in render(spec).source


def test_tile_k_128():
    """128-deep K tiles: named and rendered; they take K and group sizes in multiples of 128 (or one
    group per column) and refuse group 64."""
    spec = FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk", tile_k=128)
    assert spec.name == "qgemm_fpaintb_gemm_sm90_f16_int4_128x128x128_c1x1_cooperative_streamk"
    assert "using TileShape = Shape<_128, _128, _128>;" in render(spec).source
    assert spec.supports(4096, 128) and spec.supports(4096, 4096) and spec.supports(384, 384)
    assert not spec.supports(4096, 64) and not spec.supports(4160, 4160)
    assert FpAIntBSm90Spec("f16", 4, (128, 128)).supports(4096, 64)


def test_ahead_mainloop_spec():
    """mainloop="ahead": qgemm's consumer loop, named and rendered as a TileAheadMainloop over the
    collective CUTLASS's builder makes; "cutlass" (the default) uses that collective as built."""
    spec = FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk", zeros=False, tile_k=128, mainloop="ahead")
    assert spec.name == "qgemm_fpaintb_gemm_sm90_f16_int4_128x128x128_c1x1_cooperative_streamk_scaleonly_ahead"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert "using CollectiveMainloop = qgemm::fpaintb::TileAheadMainloop<StockMainloop>;" in render(spec).source
    stock = render(FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk")).source
    assert "using CollectiveMainloop = StockMainloop;" in stock and "TileAheadMainloop<" not in stock


def test_two_ctas_per_sm_spec():
    """ctas_per_sm=2: named, bundled only with other two-CTA kernels (its setmaxnreg specializations would
    change every kernel of a bundle), rendered with the register split, launch bounds, stage carveout and
    grid for two CTAs; a one-CTA kernel renders none of them."""
    spec = FpAIntBSm90Spec("f16", 4, (128, 16), "cooperative", "streamk", zeros=False, tile_k=128,
                           mainloop="ahead", ctas_per_sm=2)
    assert spec.name == "qgemm_fpaintb_gemm_sm90_f16_int4_128x16x128_c1x1_cooperative_streamk_scaleonly_ahead_2cta"
    assert spec_from_dict(json.loads(spec.to_json())) == spec and spec.bundles
    assert spec.bundle_key == "fpaintb_gemm_sm90.cu.j2 ctas_per_sm=2"
    pieces = ("template <> CUTLASS_DEVICE void warpgroup_reg_alloc<232>() { asm volatile(\"setmaxnreg.inc.sync.aligned.u32 104;",
              "template <> CUTLASS_DEVICE void warpgroup_reg_dealloc<40>() { asm volatile(\"setmaxnreg.dec.sync.aligned.u32 24;",
              "static int const kMinBlocksPerSm = 2;", "SharedStorage)) + 117 * 1024>",
              "args.hw_info.sm_count = p.sm_count * kMinBlocksPerSm;")
    src = render(spec).source
    for piece in pieces:
        assert piece in src, piece
    one = FpAIntBSm90Spec("f16", 4, (128, 16), "cooperative", "streamk", zeros=False, tile_k=128, mainloop="ahead")
    assert one.bundles and one.bundle_key == "fpaintb_gemm_sm90.cu.j2"
    src = render(one).source
    assert "args.hw_info.sm_count = p.sm_count;" in src and "sm90_mainloop.hpp\"\n\n// A named namespace" in src
    for piece in pieces:
        assert piece not in src, piece


def test_every_kernel_is_built_for_programmatic_launch():
    """CUTLASS's kernel waits for the previous kernel (griddepcontrol.wait) only with CUTLASS_GDC_ENABLED,
    defined before its headers; the spec then asks for programmatic launch."""
    for spec in catalog(90, FAMILY) + fpaintb_sm90_specs("f16", 4, sweep=True):
        src = render(spec).source
        assert spec.programmatic_launch
        assert src.index("#define CUTLASS_GDC_ENABLED") < src.index("#include \"cutlass/cutlass.h\"")
        assert "qgemm::pdl::let_next_grid_start();" in src


def test_scale_only_spec():
    """zeros=False: CUTLASS's scale-only mode (w = q * scale) for symmetric weights, named and rendered
    without the zero' operand; zeros must be a bool."""
    spec = FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk", zeros=False)
    assert spec.name == "qgemm_fpaintb_gemm_sm90_f16_int4_128x128x64_c1x1_cooperative_streamk_scaleonly"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    src = render(spec).source
    assert "using MainloopOperandA = cute::tuple<ElementQ, ElementScale>;" in src
    assert "ptr_Z" not in src and "p.ptr[3]" not in src
    with_zeros = render(FpAIntBSm90Spec("f16", 4, (128, 128), "cooperative", "streamk")).source
    assert "using MainloopOperandA = cute::tuple<ElementQ, ElementScale, ElementScale>;" in with_zeros
    assert "args.mainloop.ptr_Z" in with_zeros and "p.ptr[3] &&" in with_zeros
    with pytest.raises(TypeError, match="zeros must be a bool"):
        FpAIntBSm90Spec("f16", 4, (128, 128), zeros=1)


@pytest.mark.parametrize("group_size, k, ok", [(64, 4096, True), (128, 4096, True), (256, 4096, True),
                                               (4096, 4096, True), (192, 384, True), (32, 4096, False),
                                               (96, 192, False)])
def test_group_sizes(group_size, k, ok):
    """The collective reads one scale row per 64-deep K tile: groups of whole tiles, or one per column."""
    assert FpAIntBSm90Spec.supports_group_size(group_size, k) == ok


def test_render_names_the_pieces():
    src = render(FpAIntBSm90Spec("f16", 4, (128, 64), "cooperative", "streamk")).source
    for piece in ("tuple<ElementQ, ElementScale, ElementScale>", "cutlass::int4b_t",
                  "KernelTmaWarpSpecializedCooperative", "cutlass::gemm::StreamKScheduler",
                  "LinCombPerRowBiasEltAct", "qgemm::fpaintb::RuntimeActivation",
                  "reordered_weight_layout<ElementAct, kBits>", "Shape<_128, _64, _64>",
                  "constexpr int kRowPadding = 128", "args.problem_shape = {n, m, k, 1}",
                  "QGEMM_EXPORT_KERNEL(qgemm_fpaintb_gemm_sm90_f16_int4_128x64x64_c1x1_cooperative_streamk"):
        assert piece in src, piece
    src = render(FpAIntBSm90Spec("bf16", 8, (64, 128), "pingpong", "persistent")).source
    for piece in ("cutlass::bfloat16_t", "int8_t", "KernelTmaWarpSpecializedPingpong", "PersistentScheduler"):
        assert piece in src, piece
    assert "StreamKScheduler" not in src


def test_catalog_is_small_and_sm90_only():
    specs = catalog(90, FAMILY)
    # Three tiles on 64-deep K tiles with CUTLASS's loop (with zeros only) and on 128-deep ones with
    # qgemm's (with zeros and scale-only), and the 16-token tile only on 128-deep ones, per activation type
    # and width; each kernel costs half a minute or more of CI build time. The 16-token tile also with two
    # CTAs per SM.
    assert len(specs) <= 52
    assert {s.tile_k for s in specs if s.tile == (128, 16)} == {128}
    assert {s.tile for s in specs if s.ctas_per_sm == 2} == {(128, 16)}
    assert sum(s.ctas_per_sm == 2 for s in specs) == 8
    assert {s.bundle_key for s in specs if s.ctas_per_sm == 2} == {"fpaintb_gemm_sm90.cu.j2 ctas_per_sm=2"}
    assert {(s.act, s.bits) for s in specs} == {("f16", 4), ("f16", 8), ("bf16", 4), ("bf16", 8)}
    assert all(s.zeros for s in specs if s.tile_k == 64)
    assert sum(not s.zeros for s in specs if s.tile_k == 128) == sum(s.tile_k == 128 for s in specs) // 2
    assert {(s.tile_k, s.mainloop) for s in specs} == {(64, "cutlass"), (128, "ahead")}
    assert catalog(80, FAMILY) == [] and catalog(75, FAMILY) == []
    sweep = fpaintb_sm90_specs("f16", 4, sweep=True)
    assert len(sweep) == len(specs) // 4 + len(FPAINTB_SM90_SWEEP_CONFIGS)
    assert len({s.name for s in sweep}) == len(sweep)


# --- heuristic -------------------------------------------------------------------------------------

def test_heuristic_picks_catalog_kernels_over_all_m():
    names = {s.name for s in catalog(90, FAMILY)}
    for act in ("f16", "bf16"):
        for bits in (4, 8):
            for m in (heuristics.FPAINTB_SM90_MIN_M, 33, 64, 65, 256, 1000, 1023, 1024, 4096, 16384):
                for zeros in (True, False):
                    choice = heuristics.fpaintb_sm90_choice(m, 12288, 4096, bits, act, 132, zeros=zeros)
                    assert choice.spec.name in names, (m, choice.spec.name)
                    assert (choice.spec.act, choice.spec.bits, choice.spec.zeros) == (act, bits, zeros)


def test_heuristic_takes_the_ahead_loop_where_k_tiles_of_128_fit():
    """qgemm's consumer loop on 128-deep K tiles where K and the group size (or per channel) are
    multiples of 128; CUTLASS's loop on 64-deep tiles for group 64 and K an odd multiple of 64, with
    zeros for symmetric weights too (the catalog has no scale-only form of it; zero' = 0)."""
    def spec(k, group_size, zeros=True):
        return heuristics.fpaintb_sm90_choice(300, 4096, k, 4, "f16", 132, zeros=zeros, group_size=group_size).spec
    for k, g in ((4096, 128), (4096, 256), (4096, None), (4096, 4096), (11008, 128)):
        for zeros in (True, False):
            s = spec(k, g, zeros)
            assert (s.tile_k, s.mainloop, s.zeros) == (128, "ahead", zeros), (k, g)
            assert s.supports(k, g or k)
    for k, g in ((4096, 64), (704, None), (704, 64), (64, 64)):
        for zeros in (True, False):
            s = spec(k, g, zeros)
            assert (s.tile_k, s.mainloop, s.zeros) == (64, "cutlass", True), (k, g)
            assert s.supports(k, g or k)


def test_heuristic_tile_by_m():
    def tile(m):  # (N = 12288: 96 weight tiles, enough that the few-tiles rule never applies)
        return heuristics.fpaintb_sm90_choice(m, 12288, 4096, 4, "f16", 132).spec.tile
    assert tile(heuristics.FPAINTB_SM90_MIN_M) == tile(heuristics.FPAINTB_SM90_NARROW_MAX_M) == (128, 16)
    assert tile(heuristics.FPAINTB_SM90_NARROW_MAX_M + 1) == tile(32) == (128, 32)
    assert tile(33) == tile(64) == (128, 64)
    assert tile(65) == tile(heuristics.FPAINTB_SM90_DEQUANT_MIN_M - 1) == (128, 128)


def test_heuristic_few_tiles_take_the_64_token_tile():
    """Where the 128-token tiles would fill at most half the GPU, the 64-token tile, with the split rule
    applied to its own tiles: the sweep's 4096 x 4096 at M = 128 (32 tiles: 128 x 64 with 2 slices), at
    M = 200 (64 tiles: 128 x 64, 128 tiles of it, no split); 6144 columns at M = 200 (96) keep 128 x 128."""
    def pick(m, n, sm_count=132):
        c = heuristics.fpaintb_sm90_choice(m, n, 4096, 4, "f16", sm_count, zeros=False, group_size=128)
        return c.spec.tile, c.splits
    assert pick(128, 4096) == ((128, 64), 2)
    assert pick(80, 2048) == ((128, 64), 4)
    assert pick(128, 6144) == ((128, 64), 0)      # 48 tiles
    assert pick(200, 4096) == ((128, 64), 0)      # 64 tiles of 128 x 128: at half the GPU
    assert pick(200, 6144) == ((128, 128), 0)     # 96
    assert pick(128, 12288) == ((128, 128), 0)
    assert pick(1000, 4096) == ((128, 128), 0)
    assert pick(128, 4096, sm_count=60) == ((128, 128), 0)   # a smaller GPU: 32 tiles fill more than half
    assert pick(48, 1024)[0] == (128, 64) and pick(24, 1024)[0] == (128, 32)   # narrower tiles unchanged


def test_heuristic_few_tiles_keep_the_128_token_tile_for_long_k():
    """The few-tiles rule gives way where each split-K slice of the 128-token tile would still run
    FPAINTB_SM90_FEW_TILES_SLICE_K (6144) or more of K: the sweep's 28672 x 8192 (2 slices of 14336) and
    28672 x 4096 (4 of 7168) keep 128 x 128 at M = 80 and 128; 11008 x 8192 (5504 a slice) and
    16384 x 4096 (4096) take 128 x 64."""
    def pick(m, n, k):
        c = heuristics.fpaintb_sm90_choice(m, n, k, 4, "f16", 132, zeros=False, group_size=128)
        return c.spec.tile, c.splits
    assert heuristics.FPAINTB_SM90_FEW_TILES_SLICE_K == 6144
    assert pick(128, 8192, 28672) == pick(80, 8192, 28672) == ((128, 128), 2)
    assert pick(128, 4096, 28672) == ((128, 128), 4)
    assert pick(128, 7168, 16384) == ((128, 128), 2)
    assert pick(128, 8192, 12288) == ((128, 128), 2)      # exactly 6144 a slice
    assert pick(128, 8192, 12160) == ((128, 64), 0)
    assert pick(128, 8192, 11008) == ((128, 64), 0)
    assert pick(128, 4096, 16384) == ((128, 64), 2)
    assert pick(200, 4096, 14336) == ((128, 128), 2)      # two token tiles: 64 tiles, 2 slices of 7168


def test_heuristic_two_ctas_per_sm_for_many_16_token_tiles():
    """The 16-token tile runs two CTAs per SM where its 128-row tiles outnumber the SMs, with CUTLASS's
    decomposition up to K = FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K (8192) and forced stream-K beyond: the
    sweep's 4096 x 22016 (172 tiles), 8192 x 28672 and 4096 x 28672 (224), then 14336 x 21504 (168),
    12288 x 24576 and 16384 x 28672 at 9-16 rows; not 4096 x 12288 or 28672 x 12288 (96 tiles), nor at 17 rows."""
    def pick(m, n, k, sm_count=132, zeros=False):
        c = heuristics.fpaintb_sm90_choice(m, n, k, 4, "f16", sm_count, zeros=zeros, group_size=128)
        return c.spec.ctas_per_sm, c.spec.tile, c.splits, c.decomposition
    assert heuristics.FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K == 8192
    heuristic, stream_k = heuristics.DECOMPOSITION_HEURISTIC, heuristics.DECOMPOSITION_STREAM_K
    for m in (heuristics.FPAINTB_SM90_MIN_M, 12, heuristics.FPAINTB_SM90_NARROW_MAX_M):
        assert pick(m, 22016, 4096) == pick(m, 28672, 8192) == pick(m, 28672, 4096) == (2, (128, 16), 0, heuristic)
        assert pick(m, 28672, 4096, zeros=True) == (2, (128, 16), 0, heuristic)
        assert pick(m, 21504, 14336) == pick(m, 24576, 12288) == pick(m, 28672, 16384) == (2, (128, 16), 0, stream_k)
    assert pick(16, 28672, 8320)[::3] == (2, stream_k)             # the first K past 8192
    assert pick(16, 12288, 4096)[0] == pick(16, 12288, 28672)[0] == pick(16, 8192, 28672)[0] == 1
    assert pick(16, 12288, 28672)[3] == pick(16, 8192, 28672)[3] == heuristic   # one CTA keeps CUTLASS's
    assert pick(16, 132 * 128, 4096)[0] == 1 and pick(16, 133 * 128, 4096)[0] == 2   # tiles = SMs, one more
    assert pick(16, 28672, 4096, sm_count=224)[0] == 1        # a larger GPU
    assert pick(17, 28672, 4096)[:2] == (1, (128, 32)) and pick(17, 21504, 14336)[3] == heuristic


def test_heuristic_splits_only_where_the_tiles_leave_half_the_gpu_idle():
    """Explicit stream-K splits, sm_count // tiles capped at FPAINTB_SM90_MAX_SPLITS, only where the
    output tiles fill less than half the SMs (the sweep's 4 splits at 32 tiles, 2 at 64); otherwise 0,
    CUTLASS's own decomposition."""
    def splits(m, n, sm_count=132):
        return heuristics.fpaintb_sm90_choice(m, n, 11008, 4, "f16", sm_count).splits
    assert splits(24, 4096) == 4          # 32 tiles of 128 weight rows x 32 tokens
    assert splits(24, 8192) == 2          # 64 tiles
    assert splits(24, 12288) == 0         # 96 tiles: more than half of 132 SMs
    assert splits(48, 4096) == 4 and splits(48, 8192) == 2   # the 64-token tile alike
    # (100 rows on 2048 columns: 16 tiles of 128 x 128 give way to 32 of 128 x 64, split 4 ways; so the
    # 128-token tile itself never splits, the condition being the same)
    assert splits(100, 2048) == 4 and splits(100, 8192) == 0
    assert splits(24, 8) == heuristics.FPAINTB_SM90_MAX_SPLITS   # one tile: capped
    assert splits(1000, 4096) == 0        # 256 tiles
    assert splits(24, 8192, sm_count=78) == 0   # a smaller GPU: 64 tiles fill more than half


def test_sm90_applies():
    applies = heuristics.fpaintb_sm90_applies
    m0 = heuristics.FPAINTB_SM90_MIN_M
    assert applies(m0, 4096, 4096, 128, 90)
    assert not applies(m0 - 1, 4096, 4096, 128, 90)   # small M stays on the Sm80 kernels
    assert not applies(m0, 4096, 4096, 128, 80)       # sm80 GPUs
    assert not applies(m0, 4096, 4096, 32, 90)        # group 32: below the 64-deep K tile
    assert applies(m0, 4096, 4096, 4096, 90)          # per output channel
    assert applies(m0, 8, 128, 128, 90)               # the smallest weight in 128-deep K tiles, from 9 rows
    assert applies(heuristics.FPAINTB_SM90_NARROW_MAX_M + 1, 8, 64, 64, 90)  # the smallest legal one, from 17
    assert not applies(m0, 12, 4096, 128, 90)         # N not a multiple of 8
    # Up to FPAINTB_SM90_NARROW_MAX_M rows only the 16-token tile with qgemm's loop, on 128-deep K tiles:
    # group 64, and K an odd multiple of 64 per channel, run the Sm80 kernels there and the Sm90 kernel above.
    narrow = heuristics.FPAINTB_SM90_NARROW_MAX_M
    for g, k in ((64, 4096), (704, 704), (64, 64)):
        assert not applies(m0, 8, k, g, 90) and not applies(narrow, 8, k, g, 90), (g, k)
        assert applies(narrow + 1, 8, k, g, 90), (g, k)
    for g, k in ((128, 4096), (256, 4096), (4096, 4096), (128, 128)):
        assert applies(m0, 8, k, g, 90) and applies(narrow, 8, k, g, 90), (g, k)


def test_choice_checks_knobs():
    spec = FpAIntBSm90Spec("f16", 4, (128, 256))
    with pytest.raises(ValueError, match="above 1 only on a stream-K kernel"):
        heuristics.FpAIntBSm90Choice(spec, splits=4)
    with pytest.raises(ValueError, match="swizzle 1, 2, 4 or 8"):
        heuristics.FpAIntBSm90Choice(spec, swizzle=3)
    with pytest.raises(TypeError, match="FpAIntBSm90Spec"):
        heuristics.FpAIntBSm90Choice(object())
    streamk = FpAIntBSm90Spec("f16", 4, (128, 64), scheduler="streamk")
    for d in (heuristics.DECOMPOSITION_DATA_PARALLEL, heuristics.DECOMPOSITION_STREAM_K):
        heuristics.FpAIntBSm90Choice(streamk, decomposition=d)
        with pytest.raises(ValueError, match="only on a stream-K kernel without split-K slices"):
            heuristics.FpAIntBSm90Choice(spec, decomposition=d)           # a persistent kernel
        with pytest.raises(ValueError, match="only on a stream-K kernel without split-K slices"):
            heuristics.FpAIntBSm90Choice(streamk, splits=2, decomposition=d)
    with pytest.raises(ValueError, match="decomposition must be 0 .heuristic., 1 .data-parallel. or 2 .stream-K."):
        heuristics.FpAIntBSm90Choice(streamk, decomposition=3)


def test_decomposition_reaches_its_slot_and_label():
    """ext[5] of the Sm90 kernel's problem carries the choice's decomposition; the bench label names it."""
    from qgemm.bench.fpaintb import label
    spec = FpAIntBSm90Spec("f16", 4, (128, 64), scheduler="streamk", **heuristics.FPAINTB_SM90_AHEAD)
    assert FpAIntBSm90Spec.SLOTS.where("decomposition") == ("ext", 5)
    assert [label(heuristics.FpAIntBSm90Choice(spec, decomposition=d)) for d in (0, 1, 2)] == [
        "s90128x64k128ahsk0", "s90128x64k128ahdp", "s90128x64k128ahskall"]
    assert label(heuristics.FpAIntBSm90Choice(spec, splits=2)) == "s90128x64k128ahsk2"


# --- layout and packing ----------------------------------------------------------------------------

@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("k, n", [(64, 8), (128, 136), (320, 256)])
def test_pack_sm90_round_trip_and_offsets(bits, k, n):
    lay = sm90_layout(bits)
    u = torch.randint(0, 2 ** bits, (k, n), dtype=torch.uint8, generator=torch.Generator().manual_seed(k + n))
    packed = fpaintb_pack.pack_sm90(u, bits)
    assert tuple(packed.shape) == lay.packed_shape(k, n) == (-(-n // 128) * 128 * k * bits // 8,)
    assert torch.equal(fpaintb_pack.unpack_sm90(packed, bits, k, n), u)
    codes = torch.stack((packed & 0xF, packed >> 4), -1).reshape(-1) if bits == 4 else packed
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(k), indexing="ij")
    offsets = torch.tensor([lay.offset(r, c, n) for r, c in zip(rows.flatten().tolist(), cols.flatten().tolist())])
    assert torch.equal(codes[offsets], (u.t() ^ lay.code_bias).flatten())  # signed two's complement codes
    padded = torch.ones(codes.numel(), dtype=torch.bool)
    padded[offsets] = False
    assert not codes[padded].any()  # padded rows hold zero codes


def test_pack_sm90_rejects_bad_input():
    with pytest.raises(TypeError, match="2-D uint8 tensor of codes"):
        fpaintb_pack.pack_sm90(torch.zeros(64, 8), 4)
    with pytest.raises(ValueError, match="K must be a positive multiple of 64"):
        fpaintb_pack.pack_sm90(torch.zeros(32, 8, dtype=torch.uint8), 4)
    with pytest.raises(ValueError, match="N must be a positive multiple of 8"):
        fpaintb_pack.pack_sm90(torch.zeros(64, 12, dtype=torch.uint8), 4)
    with pytest.raises(ValueError, match="bits must be one of"):
        fpaintb_pack.pack_sm90(torch.zeros(64, 8, dtype=torch.uint8), 3)


_LAYOUT_DUMP = r"""
#include <cstdio>
#include "cutlass/cutlass.h"
#include "qgemm/fpaintb/sm90_layout.hpp"
template <class T, int Bits> void dump(int rows, int k) {
  auto full = qgemm::fpaintb::reordered_weight_layout<T, Bits>(rows, k);
  for (int m = 0; m < rows; ++m) for (int c = 0; c < k; ++c) printf("%d\n", int(full(m, c, 0)));
}
int main() { dump<cutlass::half_t, 4>(128, 64); dump<cutlass::half_t, 8>(128, 64);
             dump<cutlass::bfloat16_t, 4>(256, 128); dump<cutlass::bfloat16_t, 8>(256, 128); }
"""


@requires_nvcc
@pytest.mark.nvcc
def test_python_layout_is_cutes_layout(tmp_path):
    """The one layout definition (Sm90WeightLayout) equals what the kernel's CuTe code builds: a host
    program prints reordered_weight_layout's offsets for FP16 and BF16 MMAs, both widths."""
    from cutlass_gen.toolchain import cutlass_include_dirs, find_nvcc
    src = tmp_path / "dump.cu"
    src.write_text(_LAYOUT_DUMP)
    exe = tmp_path / "dump"
    includes = [f"-I{extensions_include_dir()}"] + [f"-I{d}" for d in cutlass_include_dirs()]
    subprocess.run([str(find_nvcc()), "-std=c++17", "-arch=sm_90a", *includes, str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    expected = []
    for bits, rows, k in ((4, 128, 64), (8, 128, 64), (4, 256, 128), (8, 256, 128)):
        lay = sm90_layout(bits)
        expected += [lay.offset(r, c, rows) for r in range(rows) for c in range(k)]
    assert got == expected


def _emulated_kernel_weight(u, scale, zero, bits, group_size, dtype):
    """The weight as the kernel forms it: q * scale + zero' in `dtype`, one rounding per operation
    (the collective's half/bfloat16 arithmetic; an FMA would round once, closer still)."""
    q = (u.to(torch.int16) - 2 ** (bits - 1)).to(dtype)
    zp = fpaintb_pack.sm90_zero(scale, zero, bits, dtype)
    s = scale.to(dtype).repeat_interleave(group_size, 0)
    z = zp.repeat_interleave(group_size, 0)
    return (q.float() * s.float()).to(dtype).float().add(z.float()).to(dtype).double()


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("zeros", (False, True))
def test_sm90_zero_and_kernel_arithmetic_against_float64(bits, dtype, zeros):
    """zero' = scale * (2**(bits-1) - zero) makes q * scale + zero' the weight (u - zero) * scale. Per
    element the kernel's weight differs from the float64 one by its roundings in `dtype` (unit
    roundoff eps = 2^-11 FP16, 2^-8 BF16): |q s - fl(q s)| <= eps |q s|, |zero' - fl(zero')| <= eps
    |zero'| and the sum's rounding eps |w|, so |w_kernel - w| <= eps (|q s| + |zero'| + |w|) + eps^2
    terms. Symmetric weights have zero' = 0 exactly and a power-of-two-free q s rounded once."""
    k, n, g = 256, 64, 64
    gen = torch.Generator().manual_seed(bits + (2 if zeros else 0))
    u = torch.randint(0, 2 ** bits, (k, n), dtype=torch.uint8, generator=gen)
    scale = (torch.rand(k // g, n, generator=gen) * 0.02 + 0.005).to(dtype)
    zero = torch.randint(0, 2 ** bits, (k // g, n), dtype=torch.uint8, generator=gen) if zeros else None
    exact = wq_format.IntWeight(u, scale, zero, bits, g, None).dequantize()
    got = _emulated_kernel_weight(u, scale, zero, bits, g, dtype)
    eps = 2.0 ** -11 if dtype == torch.float16 else 2.0 ** -8
    q = u.double() - 2 ** (bits - 1)
    s = scale.double().repeat_interleave(g, 0)
    zp = fpaintb_pack.sm90_zero(scale, zero, bits, dtype).double().repeat_interleave(g, 0)
    bound = eps * ((q * s).abs() + zp.abs() + exact.abs()) * (1 + 2 * eps)
    assert ((got - exact).abs() <= bound).all()
    if not zeros:
        assert not zp.any()
        assert ((got - exact).abs() <= eps * exact.abs()).all()


# --- the compiled host library (no driver needed) ------------------------------------------------------

HOST_SPEC = FpAIntBSm90Spec("f16", 4, (128, 64), "cooperative", "streamk")


@pytest.fixture(scope="module")
def host(kernel_cache):
    # The catalog build in QGEMM_CACHE_DIR serves when it is there; else one compile (minutes, -j 1).
    artifact = find_artifact(HOST_SPEC, 90) or build(HOST_SPEC, 90, kernel_cache)
    return HostLibrary(str(artifact.so_path))


def _problem(m, n, k, group_size=128):
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ext[0], p.ext[1], p.ext[2], p.ext[3], p.ext[4] = group_size, 0, 0, 1, 0
    p.ld[0], p.ld[2] = k, n
    p.sm_count = 132
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_plans(host):
    assert spec_from_dict(json.loads(host.spec_json)) == HOST_SPEC
    status, launch = host.plan(_problem(64, 4096, 4096))
    assert status == 0, host.status_string(status)
    assert launch.grid[0] * launch.grid[1] * launch.grid[2] <= 132   # persistent
    assert launch.block[0] == 384                                      # producer + two consumer warp groups
    assert launch.workspace_bytes > 0                                  # 32 tiles on 132 SMs: stream-K splits
    assert 100 * 1024 < launch.smem_bytes <= 227 * 1024
    assert launch.params_bytes <= PARAMS_CAPACITY
    status, _ = host.plan(_problem(1, 8, 64, 64))                      # smallest legal problem
    assert status == 0, host.status_string(status)


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("change", [
    lambda p: setattr(p, "k", 96),                       # not a multiple of the 64-deep K tile
    lambda p: setattr(p, "n", 12),                       # not a multiple of 8
    lambda p: p.ext.__setitem__(0, 32),                  # group below the K tile
    lambda p: p.ext.__setitem__(0, 192),                 # group not dividing K
    lambda p: p.ext.__setitem__(1, 4),                   # activation code
    lambda p: p.ext.__setitem__(3, 3),                   # swizzle
    lambda p: setattr(p, "m", 0),
    lambda p: setattr(p, "sm_count", 0),
])
def test_host_library_rejects(host, change):
    p = _problem(256, 256, 512)
    change(p)
    status, _ = host.plan(p)
    assert host.status_string(status) == "problem not supported by this kernel"


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_make_params_rejects_null_operands_before_the_driver(host):
    p = _problem(256, 256, 512)
    slots = (0, 1, 2, 3, 5)
    for slot in slots:
        p.ptr[slot] = 0x1000 * (slot + 1)
    params = ctypes.create_string_buffer(PARAMS_CAPACITY)
    for slot in slots:
        saved = p.ptr[slot]
        p.ptr[slot] = None
        status = host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY)
        assert host.status_string(status) == "problem not supported by this kernel", slot
        p.ptr[slot] = saved


# --- the plan's Sm90 path (CPU tensors posing as an sm90 GPU's) -----------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    import qgemm.fpaintb.plan as fpaintb_mod
    from qgemm import _checks

    def use(capability=(9, 0)):
        monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(fpaintb_mod, "sm_count", lambda device: 132)
    return use


def _weight(k=256, n=24, bits=4, group_size=128, zeros=True):
    import qgemm
    return qgemm.IntBWeight.from_float(torch.randn(n, k, generator=torch.Generator().manual_seed(n)), bits,
                                       group_size, symmetric=not zeros)


@pytest.mark.parametrize("bits", (4, 8))
def test_plan_sm90_path_and_its_operands(fake_gpu, bits):
    import qgemm
    fake_gpu()
    w = _weight(bits=bits)
    plan = qgemm.FpAIntBPlan(w, bias=torch.randn(24), activation="gelu")
    assert plan.sm90
    m0 = heuristics.FPAINTB_SM90_MIN_M
    assert isinstance(plan.choice(m0), heuristics.FpAIntBSm90Choice)
    assert isinstance(plan.choice(m0 - 1), heuristics.FpAIntBChoice)
    # The second copy holds the same codes; zero' turns q * scale + zero' into (u - zero) * scale.
    assert torch.equal(fpaintb_pack.unpack_sm90(plan._sm90_packed, bits, w.k, w.n), w.codes())
    assert torch.equal(plan._sm90_zero, fpaintb_pack.sm90_zero(w.scale, w.zero, bits, torch.float16))
    p = plan._sm90_problem
    assert (p.n, p.k, p.ext[0], p.ext[1], p.sm_count) == (24, 256, 128, 3, 132)
    assert p.ptr[1] == plan._sm90_packed.data_ptr() and p.ptr[3] == plan._sm90_zero.data_ptr()
    assert p.ptr[4] == plan._sm90_bias.data_ptr() and p.ptr[4] % 16 == 0


def test_plan_without_sm90_path(fake_gpu):
    import qgemm
    fake_gpu()
    assert not qgemm.FpAIntBPlan(_weight(), sm90=False).sm90
    assert not qgemm.FpAIntBPlan(_weight(group_size=32)).sm90        # group 32: the Sm80 kernels
    assert qgemm.FpAIntBPlan(_weight(group_size=-1)).sm90            # per output channel
    plan = qgemm.FpAIntBPlan(_weight(group_size=32))
    assert isinstance(plan.choice(4096), heuristics.FpAIntBChoice)
    fake_gpu((8, 0))
    assert not qgemm.FpAIntBPlan(_weight()).sm90                     # an sm80 GPU
    fake_gpu()
    with pytest.raises(TypeError, match="sm90 must be a bool, got int"):
        qgemm.FpAIntBPlan(_weight(), sm90=1)


def test_plan_rejects_sm90_choices_it_cannot_run(fake_gpu):
    import qgemm
    fake_gpu()
    x = torch.zeros(64, 256, dtype=torch.float16)
    plan = qgemm.FpAIntBPlan(_weight(), sm90=False)
    choice = heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 64), scheduler="streamk"))
    with pytest.raises(ValueError, match="is a Sm90 kernel; this plan has no Sm90 path"):
        plan(x, choice=choice)
    plan = qgemm.FpAIntBPlan(_weight(bits=8))
    with pytest.raises(ValueError, match=r"does not fit this plan \(act f16, int8\)"):
        plan(x, choice=choice)
    with pytest.raises(TypeError, match="choice must be a qgemm.heuristics.FpAIntBChoice or FpAIntBSm90Choice"):
        plan(x, choice="128x64")


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("spec", catalog(90, FAMILY), ids=lambda s: s.name)
def test_every_built_catalog_kernel_plans(spec):
    """Each catalog kernel already in QGEMM_CACHE_DIR (none is built here: a minute or more each) plans
    decode-to-prefill shapes within the GPU's limits: persistent grids, shared memory within 227 KB,
    Params within the launch ABI's buffer; stream-K kernels ask for a workspace only where tiles split.
    The group size and K are the smallest each kernel takes: multiples of its K tile (64 or 128 deep)."""
    artifact = find_artifact(spec, 90)
    if artifact is None:
        pytest.skip(f"{spec.name} is not in the kernel cache (qgemm build --sm 90 --family {FAMILY})")
    host = HostLibrary(str(artifact.so_path))
    assert spec_from_dict(json.loads(host.spec_json)) == spec
    for m, n, k, g in ((1, 8, 64, 64), (17, 136, 704, 64), (64, 4096, 4096, 128), (1000, 12288, 4096, 4096),
                       (4096, 28672, 8192, 256)):
        g = -(-g // spec.tile_k) * spec.tile_k
        k = -(-k // g) * g
        status, launch = host.plan(_problem(m, n, k, g))
        assert status == 0, (m, n, k, g, host.status_string(status))
        assert launch.grid[0] * launch.grid[1] * launch.grid[2] <= 132 * spec.ctas_per_sm  # the persistent grid
        assert launch.block[0] == 384 and launch.smem_bytes <= 227 * 1024 // spec.ctas_per_sm
        assert launch.params_bytes <= PARAMS_CAPACITY
        if spec.scheduler == "persistent":
            assert launch.workspace_bytes == 0


def test_streamk_flag_bound_covers_every_tile():
    """The plan zeroes only the workspace's tail of flags (qgemm.fpaintb.sm90_streamk_flag_bytes): at
    least one 32-bit flag per consumer warp group (two) for every output tile, on the grid rounded up
    to the largest swizzle, plus the 128-byte rounding."""
    from qgemm.fpaintb import sm90_streamk_flag_bytes
    for spec in catalog(90, FAMILY):
        for m, n in ((1, 8), (17, 136), (64, 4096), (1000, 12288), (4096, 28672)):
            tiles = -(-n // spec.tile[0]) * -(-m // spec.tile[1])
            assert sm90_streamk_flag_bytes(m, n, spec) >= tiles * 2 * 4 + 128


# --- the plan's Sm90 choice, made on the CPU (CPU tensors posing as an sm90 GPU's; nothing launched) ---

@pytest.fixture
def sm90_plan(monkeypatch):
    """FpAIntBPlan(weight) on CPU tensors, as on an sm90 GPU with 132 SMs."""
    from qgemm import _checks
    from qgemm.fpaintb import plan as plan_mod
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(plan_mod, "sm_count", lambda device: 132)

    def make(zero, group_size=128, k=512, n=64):
        g = torch.Generator().manual_seed(group_size)
        u = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
        scale = (torch.rand(k // group_size, n, generator=g) * 0.02 + 0.005).half()
        zeros = None if zero is None else torch.full((k // group_size, n), zero, dtype=torch.uint8)
        weight = plan_mod.IntBWeight.from_int_weight(wq_format.IntWeight(u, scale, zeros, 4, group_size, None))
        return plan_mod.FpAIntBPlan(weight)
    return make


def test_plan_takes_scale_only_where_zero_prime_is_zero(sm90_plan):
    """Symmetric weights, and zero points all at the code bias (8: a symmetric GPTQ checkpoint), take
    the scale-only kernels; any other zero point the kernels with zeros."""
    for zero, scale_only in ((None, True), (8, True), (7, False)):
        plan = sm90_plan(zero)
        for m in (heuristics.FPAINTB_SM90_MIN_M, 64, 1000):
            spec = plan.choice(m).spec
            assert spec.family == FAMILY and spec.zeros != scale_only, (zero, m, spec.name)
    # group 64 runs CUTLASS's 64-deep loop, whose catalog form has zeros: symmetric weights pass zero' = 0
    plan = sm90_plan(None, group_size=64)
    for m in (heuristics.FPAINTB_SM90_NARROW_MAX_M + 1, 64, 1000):
        spec = plan.choice(m).spec
        assert (spec.tile_k, spec.zeros) == (64, True) and spec in catalog(90, FAMILY), (m, spec.name)
    assert not plan._sm90_zero.any()


def test_plan_refuses_forced_sm90_choices_that_do_not_fit(sm90_plan):
    """Before any launch, with a ValueError naming the kernel: a scale-only kernel for a weight with
    zero points; a 128-deep K tile for group 64."""
    x = torch.randn(17, 512, generator=torch.Generator().manual_seed(0)).half()
    scale_only = heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 32), scheduler="streamk", zeros=False))
    with pytest.raises(ValueError, match="scale-only kernel .* this weight has zero points"):
        sm90_plan(7)(x, choice=scale_only)
    deep = heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 32), scheduler="streamk", tile_k=128))
    with pytest.raises(ValueError, match=r"128-deep K tiles: K \(512\) and the group size \(64\) must be multiples"):
        sm90_plan(None, group_size=64)(x, choice=deep)
