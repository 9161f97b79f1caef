"""The Sm90 W8A8 family without a GPU: spec checks and names, catalog, heuristic, the plan's choice
and argument checks, and a compiled kernel's host library (plan and Params without the driver)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import requires_nvcc

import qgemm
import qgemm.w8a8.plan as w8a8_mod
from cutlass_gen.build import build
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render
from cutlass_gen.spec import spec_from_dict
from cutlass_gen.families.w8a8 import W8A8Sm90Spec, w8a8_sm90_schedule
from qgemm import _checks, reference
from qgemm.w8a8 import heuristics
from qgemm._abi import PARAMS_CAPACITY, HostLibrary, QgemmProblem

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(tile=(64, 128)), "tile M must be one of (128, 256) with the cooperative schedule"),
    (dict(tile=(256, 128)), "tile M 256 is a symmetric-scheme prefill tile without swap_ab"),
    (dict(tile=(256, 16), scheme="symmetric", swap_ab=True), "tile M 256 is a symmetric-scheme prefill tile"),
    (dict(tile=(256, 128), scheme="symmetric", alternate=True), "alternate (turns per block) needs one 64-row slice "
                                                                "per warp group (tile M 128 or 192), got 256"),
    (dict(tile=(128, 128), schedule="pingpong"), "tile M must be one of (64,) with the pingpong"),
    (dict(tile=(128, 12)), "tile N must be a multiple of 8 in [8, 128]"),
    (dict(tile=(128, 256)), "tile N must be a multiple of 8 in [8, 128]"),
    (dict(block_size=48), "block_size must be one of (32, 64, 128, 256)"),
    (dict(scheme="symmetric", block_size=64), "the symmetric (block-INT8) scheme has 128 x 128 weight blocks"),
    (dict(output="e4m3"), "output must be one of ('f16', 'bf16', 'f32')"),
    (dict(epilogue="gelu"), "epilogue must be one of ('clamp', 'silu')"),
    (dict(schedule="pingpong", tile=(64, 128), scheduler="streamk"), "no stream-K scheduler"),
    (dict(cluster=(2, 2)), "cluster must be one of"),
    (dict(arch=80), "arch must be 90"),
    (dict(swap_ab=1), "swap_ab must be a bool"),
    (dict(alternate=1), "alternate must be a bool"),
    (dict(schedule="pingpong", tile=(64, 128), alternate=True), "alternate (warp groups taking turns on one "
                                                                "tile) needs a cooperative schedule"),
    (dict(tile=(192, 128)), "tile M must be one of (128, 256) with the cooperative schedule"),
    (dict(tile=(128, 128), schedule="cooperative3"), "tile M must be one of (192,) with the cooperative3 schedule"),
    (dict(tile=(192, 128), schedule="cooperative3", scheduler="streamk"), "the cooperative3 schedule (three consumer "
                                                                          "warp groups) is a 192 x 128 prefill tile"),
    (dict(tile=(192, 128), schedule="cooperative3", swap_ab=True), "with the persistent scheduler and no swap_ab"),
    (dict(tile=(192, 64), schedule="cooperative3"), "got tile (192, 64)"),
    (dict(tile=(192, 128), schedule="cooperative3", blocks_in_flight=2), "192 leaves no registers for a second"),
    (dict(blocks_in_flight=3), "blocks_in_flight must be one of (1, 2, 4), got 3"),
    (dict(blocks_in_flight=True), "blocks_in_flight must be one of (1, 2, 4), got True"),
    (dict(blocks_in_flight=2, block_size=64), "blocks_in_flight > 1 needs one promotion per stage"),
    (dict(blocks_in_flight=2, tile=(256, 128), scheme="symmetric"), "one 64-row slice per warp group"),
    (dict(blocks_in_flight=2, alternate=True), "and no turns, got block_size=128, tile M 128, alternate=True"),
    (dict(max_stages=1), "max_stages must be an int in [2, 32], got 1"),
    (dict(operand="e5m2"), "operand must be one of ('s8', 'e4m3'), got 'e5m2'"),
    (dict(operand="e4m3"), "FP8 operands (operand='e4m3') take the symmetric scheme's scales"),
    (dict(max_stages=3, blocks_in_flight=4), "max_stages must be at least blocks_in_flight"),
])
def test_spec_rejects_invalid_configs(kwargs, fragment):
    args = dict(tile=(128, 128), block_size=128, scheme="asymmetric", output="f16")
    args.update(kwargs)
    with pytest.raises(ValueError) as exc:
        W8A8Sm90Spec(**args)
    assert fragment in str(exc.value)


def test_names_and_json_round_trip():
    spec = W8A8Sm90Spec((128, 16), 128, "symmetric", "bf16", swap_ab=True, epilogue="silu")
    assert spec.name == "qgemm_w8a8_gemm_sm90_s8s8_bf16_sym_b128_128x16x128_c1x1_cooperative_persistent_swapab_silu"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    names = [s.name for s in catalog(90, W8A8Sm90Spec.family)]
    assert len(names) == len(set(names))
    # FP8 operands: an experiment outside every catalog, named by its operands.
    fp8 = W8A8Sm90Spec((256, 128), 128, "symmetric", "f16", operand="e4m3")
    assert fp8.name == "qgemm_w8a8_gemm_sm90_e4m3e4m3_f16_sym_b128_256x128x128_c1x1_cooperative_persistent"
    assert "using ElementOperand = cutlass::float_e4m3_t;" in render(fp8).source
    assert all(s.operand == "s8" for s in catalog(90, W8A8Sm90Spec.family))


def test_alternate_kernels():
    """The asymmetric scheme's 128 x 128 kernels at block 128 take turns on the tensor cores (measured
    faster); the symmetric, other block sizes and the swapped decode tiles do not."""
    spec = W8A8Sm90Spec((128, 128), 128, "asymmetric", "f16", alternate=True)
    assert spec.name == "qgemm_w8a8_gemm_sm90_s8s8_f16_asym_b128_128x128x128_c1x1_cooperative_alt_persistent"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert "/*AlternateWarpGroups=*/true" in render(spec).source
    assert "/*AlternateWarpGroups=*/false" in render(W8A8Sm90Spec((128, 128), 128, "symmetric", "f16")).source

    def choice(m, scheme, block_size=128):
        return heuristics.w8a8_sm90_choice(m, 4096, 4096, block_size, scheme, "f16", "clamp", 132).spec

    assert choice(4096, "asymmetric").alternate and choice(256, "asymmetric").alternate
    assert not choice(4096, "symmetric").alternate and not choice(4096, "asymmetric", 64).alternate
    assert not choice(16, "asymmetric").alternate  # swapped decode tile
    alternating = {s for s in catalog(90, W8A8Sm90Spec.family) if s.alternate}
    assert {(s.scheme, s.block_size, s.tile, s.scheduler) for s in alternating} == {
        ("asymmetric", 128, (128, 128), "persistent"), ("asymmetric", 128, (128, 128), "streamk")}


def test_blocks_in_flight_kernels():
    """blocks_in_flight names the kernel and reaches the collective's template argument; 1 (the default)
    keeps the name and source of a kernel without it."""
    spec = W8A8Sm90Spec((64, 16), 128, "symmetric", "f16", "pingpong", swap_ab=True, blocks_in_flight=2)
    assert spec.name == "qgemm_w8a8_gemm_sm90_s8s8_f16_sym_b128_64x16x128_c1x1_pingpong_inflight2_persistent_swapab"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert "/*BlocksInFlight=*/2>" in render(spec).source
    one = W8A8Sm90Spec((64, 16), 128, "symmetric", "f16", "pingpong", swap_ab=True)
    assert one.name == "qgemm_w8a8_gemm_sm90_s8s8_f16_sym_b128_64x16x128_c1x1_pingpong_persistent_swapab"
    assert "/*BlocksInFlight=*/1>" in render(one).source
    assert W8A8Sm90Spec((128, 128), 256, "asymmetric", "f16", blocks_in_flight=4).blocks_in_flight == 4
    # The catalog and the plan's rules: two in flight on the swapped 64-row pingpong tiles, one elsewhere.
    for spec in catalog(90, W8A8Sm90Spec.family):
        assert spec.blocks_in_flight == (2 if spec.schedule == "pingpong" else 1), spec.name
        assert spec.max_stages == 8
    for m in (1, 16, 33, 64, 128, 4096):
        spec = heuristics.w8a8_sm90_choice(m, 4096, 4096, 128, "symmetric", "bf16", "silu", 132).spec
        assert spec.blocks_in_flight == (2 if spec.schedule == "pingpong" else 1), (m, spec.name)


def test_three_consumer_kernels():
    """The 192 x 128 tile runs three consumer warp groups on qgemm's own kernel layer (schedule
    "cooperative3"): its name says so, the schedule helper picks it for 192 rows, and its source uses
    that layer and its direct-store epilogue, never CUTLASS's GemmUniversal or TMA epilogue; the other
    kernels' sources do not include the layer."""
    spec = W8A8Sm90Spec((192, 128), 128, "symmetric", "bf16", "cooperative3", alternate=True, epilogue="silu")
    assert spec.name == "qgemm_w8a8_gemm_sm90_s8s8_bf16_sym_b128_192x128x128_c1x1_cooperative3_alt_persistent_silu"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert w8a8_sm90_schedule((192, 128)) == "cooperative3" and w8a8_sm90_schedule((128, 128)) == "cooperative"
    source = render(spec).source
    assert "qgemm::w8a8::GemmThreeConsumers<" in source and "qgemm::w8a8::DirectStoreEpilogue<" in source
    assert "KernelTmaWarpSpecializedThreeConsumers" in source and "/*AlternateWarpGroups=*/true" in source
    assert "GemmUniversal<" not in source and "CollectiveBuilder<" not in source
    assert "sm90_gemm_three_consumers.hpp" not in render(W8A8Sm90Spec((128, 128), 128, "symmetric", "f16")).source
    assert W8A8Sm90Spec((192, 128), 32, "asymmetric", "f32", "cooperative3").scheduler == "persistent"


def test_weight_scale_per_tile():
    """Symmetric weights have one scale per 128 rows: a weight tile extent dividing 128 reads one."""
    assert W8A8Sm90Spec((128, 128), 128, "symmetric", "f16").weight_scale_per_tile
    assert W8A8Sm90Spec((128, 16), 128, "symmetric", "f16", swap_ab=True).weight_scale_per_tile
    assert not W8A8Sm90Spec((128, 96), 128, "symmetric", "f16").weight_scale_per_tile
    assert not W8A8Sm90Spec((128, 128), 128, "asymmetric", "f16").weight_scale_per_tile


def test_catalog_is_sm90_only_and_covers_the_heuristic():
    assert catalog(80, W8A8Sm90Spec.family) == [] and catalog(75, W8A8Sm90Spec.family) == []
    specs = set(catalog(90, W8A8Sm90Spec.family))
    # Every block size: a choice outside the catalog is built on first use (a minute of nvcc in
    # the middle of a model's first forward; on the H100 it stalled the GPU test run).
    cases = [(128, "symmetric", "f16"), (128, "symmetric", "bf16")]
    cases += [(bs, "asymmetric", "f16") for bs in (32, 64, 128, 256)]
    for block_size, scheme, output in cases:
        for m in (1, 16, 17, 33, 64, 65, 256, 4096, 16384):
            for n, k in ((8, 1024), (520, 2048), (4096, 4096), (2112, 7168), (28672, 8192)):
                choice = heuristics.w8a8_sm90_choice(m, n, k, block_size, scheme, output, "clamp", 132)
                assert choice.spec in specs, (block_size, m, n, choice.spec.name)


@pytest.mark.parametrize("m, n, tile, swap_ab, scheduler", [
    (1, 4096, (64, 16), True, "persistent"),     # up to 32 rows: the 64-row pingpong tiles, any N
    (16, 2112, (64, 16), True, "persistent"),
    (16, 28672, (64, 16), True, "persistent"),
    (17, 28672, (64, 32), True, "persistent"),
    (32, 2112, (64, 16), True, "persistent"),     # 33 pingpong tiles x 2 token tiles of 16 fit 132 SMs
    (32, 4224, (64, 16), True, "persistent"),     # 66 x 2 of 16 fit, but not at 4352 (68 x 2): 32 wide
    (32, 4352, (64, 32), True, "persistent"),
    (64, 4096, (64, 32), True, "persistent"),     # 64 pingpong tiles x 2 token tiles fit 132 SMs
    (64, 8192, (64, 64), True, "persistent"),     # 128 pingpong tiles x 2 do not fit, x 1 do (symmetric)
    (64, 12288, (128, 64), True, "persistent"),   # no pingpong tile fits: 96 weight tiles x 1 token tile
    (33, 28672, (128, 64), True, "persistent"),   # 224 weight tiles: none fits one wave
    (65, 4096, (128, 32), True, "persistent"),    # 32 weight tiles x 3 token tiles fit 132 SMs
    (128, 4096, (64, 64), True, "persistent"),    # from 96 rows: 64 pingpong tiles x 2 token tiles of 64
    (128, 7168, (128, 64), True, "persistent"),   # 56 x 2 (56 x 4 do not)
    (128, 12288, (128, 128), False, "persistent"),  # no swapped tile fits: 96 tiles, more than half the GPU
    (256, 2112, (128, 128), False, "streamk"),    # 2 x 17 = 34 tiles: a quarter of the GPU
    (1024, 1024, (128, 128), False, "streamk"),   # 8 x 8 = 64 tiles, under half the GPU
    (1024, 1280, (128, 128), False, "persistent"),  # 8 x 10 = 80 tiles
    (4096, 4096, (256, 128), False, "persistent"),  # 16 x 32 tiles of 256 rows: 4 waves against 8 of 128
    (4096, 2112, (256, 128), False, "streamk"),   # 272 tiles of 256 rows: 2.06 waves, stream-K's fractional ones
    (300, 28672, (128, 128), False, "persistent"),  # 672 tiles of 128 rows (6 waves) against 448 of 256 (4)
])
def test_heuristic(m, n, tile, swap_ab, scheduler):
    choice = heuristics.w8a8_sm90_choice(m, n, 4096, 128, "symmetric", "f16", "clamp", 132)
    assert choice.spec.schedule == ("pingpong" if tile[0] == 64 else "cooperative")
    assert (choice.spec.tile, choice.spec.swap_ab, choice.spec.scheduler) == (tile, swap_ab, scheduler)


def test_swapped_tiles_17_to_128_rows_by_scheme():
    """17-128 rows where no 64-row pingpong tile applies (test_pingpong_tiles_up_to_128_rows): the
    128-row swapped tiles, at most 4 token tiles above 64 rows, the narrowest whose tiles fit one
    wave. (Fewer than W8A8_SM90_SWAP_STREAMK_CTAS CTAs would run CUTLASS's stream-K, but at block 128
    the pingpong tiles fit wherever the 128-row ones are that few: a plan reaches the swapped
    stream-K kernels only by choice=, and the asymmetric decode's split-K, test_decode_split_k_by_scheme.)"""
    def pick(m, n, scheme):
        spec = heuristics.w8a8_sm90_choice(m, n, 7168, 128, scheme, "f16", "clamp", 132).spec
        assert spec.swap_ab and spec.schedule == "cooperative"
        return spec.tile[1], spec.scheduler

    assert pick(80, 4096, "symmetric") == (32, "persistent")   # 32 x 3 = 96 (pingpong: 64 x 3 = 192 do not fit)
    assert pick(80, 4096, "asymmetric") == (32, "persistent")
    assert pick(48, 12288, "symmetric") == (64, "persistent")  # 96 x 1: no 64-row tile fits (192)
    assert pick(48, 8192, "asymmetric") == (32, "persistent")  # 64 x 2 = 128 (64-row: 128 x 2 do not fit)
    assert pick(32, 12288, "asymmetric") == (32, "persistent")  # 192 pingpong tiles: more than the SMs
    # No tile fits one wave: the narrowest that holds all the rows, else the widest.
    assert pick(32, 28672, "asymmetric") == (32, "persistent")
    assert pick(48, 28672, "asymmetric") == (64, "persistent")
    assert pick(48, 28672, "symmetric") == (64, "persistent")
    assert {(s.tile, s.scheduler) for s in catalog(90, W8A8Sm90Spec.family) if s.swap_ab and s.block_size == 128
            and s.scheduler == "streamk"} == {((128, 16), "streamk"), ((128, 32), "streamk")}


def test_decode_split_k_by_scheme():
    """Up to 16 rows, where the 64-row pingpong tile does not apply (the asymmetric scheme outside its
    range, block sizes other than 128): split-K into W8A8_SM90_DECODE_SPLITS on the stream-K kernel
    below W8A8_SM90_DECODE_SPLITK_TILES weight row tiles; then CUTLASS's stream-K below the SM count;
    block sizes without a stream-K kernel stay persistent, without splits."""
    def choice(n, k, block_size=128):
        return heuristics.w8a8_sm90_choice(16, n, k, block_size, "asymmetric", "f16", "clamp", 132)

    split = ("streamk", heuristics.W8A8_SM90_DECODE_SPLITS)
    for n, k, expected in ((2112, 4096, split), (4096, 14336, split), (8192, 14336, ("streamk", 0)),
                           (28672, 4096, ("persistent", 0))):
        c = choice(n, k)
        assert c.spec.tile == (128, 16) and (c.spec.scheduler, c.splits) == expected, (n, k)
    c = choice(2112, 4096, 64)
    assert (c.spec.tile, c.spec.scheduler, c.splits) == ((128, 16), "persistent", 0)
    tiles = heuristics.W8A8_SM90_DECODE_SPLITK_TILES
    assert tiles["symmetric"] <= tiles["asymmetric"]


@pytest.mark.parametrize("scheme, m, n, k, tile_n", [
    # The symmetric scheme: at every shape up to 32 rows (measured faster on 13 shapes, benchmarks above).
    ("symmetric", 1, 8, 128, 16), ("symmetric", 1, 4096, 14336, 16), ("symmetric", 16, 128256, 4096, 16),
    ("symmetric", 32, 2112, 7168, 16),       # 33 tiles x 2 of 16 fit
    ("symmetric", 32, 28672, 8192, 32),      # nothing fits: 32 at 17-32 rows anyway
    ("symmetric", 48, 2112, 7168, 16),       # 33 x 3 of 16 fit
    ("symmetric", 64, 2112, 7168, 32),       # 16 wide only up to W8A8_SM90_PINGPONG_NARROW_MAX_M rows
    # ... 33-64 rows: 32 tokens where the tiles fit the SMs.
    ("symmetric", 33, 4096, 4096, 32),       # 64 tiles x 2
    # ... and 64 tokens where only those fit (the symmetric scheme alone has that tile).
    ("symmetric", 64, 8192, 28672, 64),      # 128 x 2 do not fit, 128 x 1 do
    ("symmetric", 48, 7168, 2048, 64),       # 112 x 1
    ("symmetric", 48, 12288, 4096, None),    # 192 x 1 do not
    # 65-128 rows: 32 tokens where the tiles fit the SMs, symmetric 64 from 96 rows.
    ("symmetric", 65, 1024, 4096, 32), ("symmetric", 128, 2112, 7168, 32), ("symmetric", 96, 2560, 4096, 32),
    ("symmetric", 128, 2560, 4096, 64),      # 40 x 4 do not fit, 40 x 2 do
    ("symmetric", 80, 4096, 4096, None),     # 64 x 3 do not fit, and 80 rows are below WIDE_MIN_M
    ("symmetric", 96, 4096, 4096, 64), ("symmetric", 128, 4096, 14336, 64),
    ("symmetric", 129, 1024, 4096, None),    # beyond W8A8_SM90_PINGPONG_MAX_M
    # The asymmetric scheme up to 16 rows: 64-row tiles (32 tokens wide) between 0.45 and 1 x the SMs,
    # K <= 8192.
    ("asymmetric", 1, 4096, 4096, 32), ("asymmetric", 16, 7168, 2048, 32),
    ("asymmetric", 1, 4096, 14336, None),    # long chains of K-blocks per SM
    ("asymmetric", 1, 3072, 8192, None),     # 48 tiles: too few
    ("asymmetric", 1, 12288, 4096, None),    # 192 tiles: more than the SMs
    # ... and 17-64 rows: 32 tokens wherever the tiles fit the SMs.
    ("asymmetric", 17, 2112, 7168, 32), ("asymmetric", 32, 8192, 28672, 32), ("asymmetric", 64, 4096, 14336, 32),
    ("asymmetric", 32, 12288, 4096, None), ("asymmetric", 33, 8192, 28672, None),
    ("asymmetric", 48, 7168, 2048, None),    # 112 x 2 do not fit, and there is no asymmetric 64 x 64 tile
    ("asymmetric", 128, 2112, 7168, 32), ("asymmetric", 96, 2560, 4096, 32),
    ("asymmetric", 128, 2560, 4096, None), ("asymmetric", 128, 4096, 4096, None),
])
def test_pingpong_tiles_up_to_128_rows(scheme, m, n, k, tile_n):
    """Up to W8A8_SM90_PINGPONG_MAX_M rows, the 64-row swapped tiles on the pingpong schedule, by
    heuristics._pingpong_tile (tile_n None: the 128-row rules); never for block sizes the catalog
    builds them not for (the heuristic picks catalog kernels only)."""
    spec = heuristics.w8a8_sm90_choice(m, n, k, 128, scheme, "f16", "clamp", 132).spec
    if tile_n is None:
        assert spec.schedule == "cooperative", spec.name
    else:
        assert (spec.tile, spec.swap_ab, spec.schedule, spec.scheduler) == ((64, tile_n), True, "pingpong",
                                                                            "persistent"), spec.name
    for block_size in (32, 64, 256):
        if scheme == "asymmetric":
            spec = heuristics.w8a8_sm90_choice(m, n, 4096, block_size, scheme, "f16", "clamp", 132).spec
            assert spec.schedule == "cooperative"


def test_256_row_tile_by_waves():
    """The symmetric scheme's prefill tile by the wave model of heuristics._prefill_tile (the
    measurements are beside it): 256 x 128 persistent where its last wave is nearly full (the issue's
    shapes at M = 4096, Llama-3-8B's at M = 2048), 256 x 128 stream-K where it is nearly empty
    (2112 x 7168), 128 x 128 where 256 rows would pad M too much or the 128-row tiles do not fill the
    GPU (persistent from half of it); never 256 rows for the asymmetric scheme (its kernel would spill)."""
    def pick(m, n, k, scheme="symmetric", sm_count=132):
        spec = heuristics.w8a8_sm90_choice(m, n, k, 128, scheme, "f16", "clamp", sm_count).spec
        return spec.tile, spec.scheduler

    for n, k in ((4096, 4096), (12288, 4096), (8192, 28672), (28672, 8192), (7168, 2048)):
        assert pick(4096, n, k) == ((256, 128), "persistent")
        assert pick(4096, n, k, "asymmetric") == ((128, 128), "persistent")
    assert pick(4096, 2112, 7168) == ((256, 128), "streamk")
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        assert pick(2048, n, k) == ((256, 128), "persistent")
    assert pick(2048, 1024, 4096) == ((128, 128), "persistent")  # 128 tiles of 128 rows, 64 of 256
    # The waves move with the SM count: M = N = 2048 is one wave of 256-row tiles on 132 SMs; on 114,
    # two against three of 128 rows, but stream-K's 1.12 waves win.
    assert pick(2048, 2048, 1024) == ((256, 128), "persistent")
    assert pick(2048, 2048, 1024, sm_count=114) == ((256, 128), "streamk")
    assert all(s.scheme == "symmetric" for s in catalog(90, W8A8Sm90Spec.family) if s.tile == (256, 128))


def test_every_kernel_is_built_for_programmatic_launch():
    """CUTLASS's kernel waits for the previous kernel (griddepcontrol.wait) in its TMA warp only with
    CUTLASS_GDC_ENABLED, defined before its headers; the collective's vector warp waits itself (CUTLASS's
    cooperative kernel does not wait there). The spec then asks for programmatic launch, and act_quant,
    the kernel before it in plan(x), lets it start."""
    promote = (ROOT / "templates/include/qgemm/w8a8/sm90_block_promote.hpp").read_text()
    aux = promote[promote.index("CUTLASS_DEVICE void load_auxiliary("):]
    assert aux.index("qgemm::pdl::wait_for_previous_grid();") < aux.index("cp_async_float(")
    for spec in catalog(90, W8A8Sm90Spec.family):
        src = render(spec).source
        assert spec.programmatic_launch
        assert src.index("#define CUTLASS_GDC_ENABLED") < src.index("#include \"cutlass/cutlass.h\"")
        assert "qgemm::pdl::let_next_grid_start();" in src
    for spec in catalog(90, "act_quant"):
        assert "qgemm::pdl::let_next_grid_start();" in render(spec).source and not spec.programmatic_launch


def test_render_names_the_slots():
    for spec in (W8A8Sm90Spec((128, 128), 64, "asymmetric", "f32"),
                 W8A8Sm90Spec((128, 32), 128, "symmetric", "bf16", swap_ab=True, epilogue="silu")):
        source = render(spec).source
        assert "qgemm/w8a8/sm90_block_promote.hpp" in source
        assert f"constexpr int kBlockSize = {spec.block_size};" in source
        assert ("SiLu" in source) == (spec.epilogue == "silu")
        assert ("ColumnMajor" in source) == spec.swap_ab


# --- the plan without a GPU --------------------------------------------------------------------------

@pytest.fixture
def fake_sm90(monkeypatch):
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(_checks, "target_sm", lambda *args, **kwargs: 90)
    monkeypatch.setattr(w8a8_mod, "sm_count", lambda device: 132)


def _weight(scheme="symmetric", n=256, k=512, block_size=128):
    return qgemm.W8A8Weight.from_float(torch.randn(n, k), block_size, scheme=scheme)


def test_symmetric_weight_layout():
    w = _weight(n=300)
    assert w.scheme == "symmetric" and w.offset is None and w.qsum is None
    assert w.scale.shape == (3, 4) and w.qweight.dtype == torch.int8
    assert w.qweight.abs().max() <= 127
    assert (w.dequantize() - w.dequantize()).abs().max() == 0


def test_from_block_int8_checks():
    q = torch.randint(-127, 128, (256, 512), dtype=torch.int8)
    with pytest.raises(ValueError, match=r"weight_scale_inv must have shape \(2, 4\)"):
        qgemm.W8A8Weight.from_block_int8(q, torch.ones(2, 3))
    with pytest.raises(TypeError, match="weight must have dtype int8"):
        qgemm.W8A8Weight.from_block_int8(q.float(), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"weight.shape\[1\] \(K\) must be a multiple of 128"):
        qgemm.W8A8Weight.from_block_int8(q[:, :200], torch.ones(2, 2))
    w = qgemm.W8A8Weight.from_block_int8(q, torch.ones(2, 4, dtype=torch.bfloat16))
    assert w.scale.dtype == torch.float32 and w.block_size == 128


def test_from_float_rejects_bad_scheme():
    with pytest.raises(ValueError, match="scheme must be one of"):
        qgemm.W8A8Weight.from_float(torch.randn(8, 128), 128, scheme="per_tensor")
    with pytest.raises(ValueError, match="block_size must be one of"):
        qgemm.W8A8Weight.from_float(torch.randn(8, 128), 100, scheme="symmetric")


def test_plan_modes(fake_sm90):
    plan = qgemm.W8A8GemmPlan(_weight())
    assert plan.launch_mode == "sm90" and plan.scheme == "symmetric"
    # N a multiple of 4 but not of 8: FP16 rows are not 16 bytes; both schemes fall back to the
    # Sm80 promote kernels.
    w = _weight("asymmetric", n=12)
    assert qgemm.W8A8GemmPlan(w).launch_mode == "promote"
    assert qgemm.W8A8GemmPlan(_weight(n=12)).launch_mode == "promote"
    assert qgemm.W8A8GemmPlan(w, out_dtype=torch.float32).launch_mode == "sm90"
    with pytest.raises(ValueError, match=r"weight.shape\[0\] \(N\) must be a multiple of 8"):
        qgemm.W8A8GemmPlan(w, launch_mode="sm90")
    with pytest.raises(ValueError, match="weight.scheme must be 'asymmetric' with launch_mode='chained'"):
        qgemm.W8A8GemmPlan(_weight(n=12), launch_mode="chained")
    with pytest.raises(ValueError, match="weight.scheme must be 'asymmetric' with launch_mode='per_block'"):
        qgemm.W8A8GemmPlan(_weight(), launch_mode="per_block")


def test_plan_rejects_mismatched_activations(fake_sm90):
    plan = qgemm.W8A8GemmPlan(_weight())
    xq = w8a8_mod.QuantizedActivations(torch.zeros(4, 512, dtype=torch.int8), torch.ones(4, 4),
                                       torch.zeros(4, 4), torch.zeros(4, 4), 128)
    with pytest.raises(ValueError, match="xq.scheme must be the weight's scheme 'symmetric', got 'asymmetric'"):
        plan.gemm(xq)
    xq = w8a8_mod.QuantizedActivations(torch.zeros(4, 512, dtype=torch.int8), torch.ones(3, 4), None, None, 128)
    with pytest.raises(ValueError, match=r"xq.scale must have shape \(4, 4\)"):
        plan.gemm(xq)


def test_plan_rejects_a_choice_of_another_configuration(fake_sm90):
    plan = qgemm.W8A8GemmPlan(_weight(), out_dtype=torch.bfloat16)
    wrong = heuristics.W8A8Sm90Choice(W8A8Sm90Spec((128, 128), 128, "symmetric", "f16"))
    xq = w8a8_mod.QuantizedActivations(torch.zeros(4, 512, dtype=torch.int8), torch.ones(4, 4), None, None, 128)
    with pytest.raises(ValueError, match=r"choice.spec must have \(block_size, scheme, output, epilogue, operand\)"):
        plan.gemm(xq, choice=wrong)
    # FP8 operands would read the int8 codes as FP8: refused before any launch.
    fp8 = heuristics.W8A8Sm90Choice(W8A8Sm90Spec((128, 128), 128, "symmetric", "bf16", operand="e4m3"))
    with pytest.raises(ValueError, match=r"got \(128, 'symmetric', 'bf16', 'clamp', 'e4m3'\)"):
        plan.gemm(xq, choice=fp8)
    with pytest.raises(TypeError, match="choice must be a qgemm.heuristics.W8A8Sm90Choice"):
        plan.gemm(xq, choice="128x128")


def test_long_k_stream_k_65_to_128_rows():
    """The symmetric scheme at 65-128 rows with K >= W8A8_SM90_LONG_K: the 128 x 128 tile under
    stream-K where those tiles fill less than half the GPU; not up to 64 rows, not below that K, not
    for the asymmetric scheme, not where the tiles fill half the GPU."""
    def spec(m, n, k, scheme="symmetric"):
        return heuristics.w8a8_sm90_choice(m, n, k, 128, scheme, "f16", "clamp", 132).spec

    for m, n, k in ((72, 8192, 28672), (128, 8192, 28672), (96, 2048, 28672), (65, 6144, 16384)):
        s = spec(m, n, k)
        assert (s.tile, s.swap_ab, s.schedule, s.scheduler) == ((128, 128), False, "cooperative", "streamk"), (m, n, k)
    assert spec(64, 8192, 28672).tile == (64, 64)          # up to 64 rows: the pingpong tiles
    assert spec(128, 4096, 14336).tile == (64, 64)         # K below W8A8_SM90_LONG_K
    assert spec(128, 8192, 28672, "asymmetric").tile == (128, 64)
    assert spec(128, 16384, 16384).scheduler == "persistent"  # 128 tiles of 128 rows: half the GPU


def test_quantize_symmetric_reference():
    x = torch.randn(5, 256) * 3
    q, scale = reference.quantize_blocks_symmetric(x, 128)
    assert scale.shape == (2, 5) and q.abs().max() <= 127
    deq = reference.dequantize_blocks_symmetric(q, scale, 128)
    assert (deq - x.double()).abs().max() <= scale.max() / 2 + 1e-6
    x[1, 3] = float("nan")
    x[3, 200] = float("inf")
    q, scale = reference.quantize_blocks_symmetric(x, 128)
    assert torch.isnan(scale[0, 1]) and torch.isnan(scale[1, 3]) and torch.isfinite(scale[1, 1])
    assert (q[1, :128] == 0).all() and (q[3, 128:] == 0).all()


# --- the compiled host library (no driver needed) ------------------------------------------------------

ASYM64 = W8A8Sm90Spec((128, 128), 64, "asymmetric", "f16")


@pytest.fixture(scope="module")
def asym_host(kernel_cache):
    return HostLibrary(str(build(ASYM64, 90, kernel_cache).so_path))


def _problem(m, n, k, block_size=64):
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ext[0], p.ext[1], p.ext[2], p.ext[3] = block_size, 0, 1, 0
    p.ld[0] = p.ld[1] = k
    p.ld[3] = n
    p.sm_count = 132
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_plans(asym_host):
    assert spec_from_dict(json.loads(asym_host.spec_json)) == ASYM64
    status, launch = asym_host.plan(_problem(4096, 4096, 4096))
    assert status == 0, asym_host.status_string(status)
    # Persistent: one CTA per SM at most; 384 threads (a producer and two consumer warp groups).
    assert launch.grid[0] * launch.grid[1] * launch.grid[2] <= 132
    assert launch.block[0] == 384 and launch.workspace_bytes == 0
    assert 100 * 1024 < launch.smem_bytes <= 227 * 1024
    assert launch.params_bytes <= PARAMS_CAPACITY


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("change", [
    lambda p: setattr(p, "k", 96),                       # not a multiple of the block size
    lambda p: p.ext.__setitem__(0, 128),                 # another block size than the kernel's
    lambda p: p.ext.__setitem__(2, 3),                   # swizzle
    lambda p: setattr(p, "m", 0),
    lambda p: setattr(p, "sm_count", 0),
])
def test_host_library_rejects(asym_host, change):
    p = _problem(256, 256, 512)
    change(p)
    status, _ = asym_host.plan(p)
    assert asym_host.status_string(status) == "problem not supported by this kernel"


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_make_params_rejects_null_vectors_before_the_driver(asym_host):
    """Every operand and vector pointer is checked before any TMA descriptor is encoded."""
    import ctypes
    p = _problem(256, 256, 512)
    for slot in (0, 1, 2, 3, 4, 5, 6, 10, 11):
        p.ptr[slot] = 0x1000 * (slot + 1)
    params = ctypes.create_string_buffer(PARAMS_CAPACITY)
    for slot in (0, 1, 2, 3, 4, 5, 6, 10, 11):
        saved = p.ptr[slot]
        p.ptr[slot] = None
        status = asym_host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY)
        assert asym_host.status_string(status) == "problem not supported by this kernel", slot
        p.ptr[slot] = saved
