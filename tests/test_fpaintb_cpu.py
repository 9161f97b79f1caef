"""FpA x IntB without a GPU: the packed layout bit for bit, specs, catalog, heuristic, rendering,
the compiled host library's planning, and argument checks before any launch."""
from __future__ import annotations

import pytest
import torch

import qgemm
from cutlass_gen.build import build
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb_layout import LAYOUTS, layout
from cutlass_gen.render import render
from cutlass_gen.families.fpaintb import FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec
from qgemm import _checks, wq_format
from qgemm.fpaintb import heuristics
from qgemm.fpaintb import plan as fpaintb_mod
from qgemm._abi import HostLibrary, QgemmProblem
from qgemm.fpaintb.pack import pack, unpack

from conftest import requires_nvcc


# --- the packed layout ---------------------------------------------------------------------------

def pack_by_definition(u: torch.Tensor, bits: int) -> torch.Tensor:
    """The layout spelled out element by element from cutlass_gen/families/fpaintb_layout.py's docstring
    (slow; an independent check of the vectorized packer)."""
    lay = layout(bits)
    k, n = u.shape
    out = torch.zeros(lay.packed_shape(k, n), dtype=torch.uint8)
    tile_bytes = lay.tile_rows * bits // 8
    for col in range(n):
        for stored_row in range(k):
            base = stored_row - stored_row % lay.permute_rows
            logical_row = base + lay.row_permutation[stored_row % lay.permute_rows]      # 1. row permutation
            code = int(u[logical_row, col])
            word, position = divmod(stored_row, lay.codes_per_word)                      # 2. column-major words
            slot = lay.word_order.index(position)                                        # 4. converter order
            bit = word * 32 + slot * bits                                                # bit offset in the column
            byte_in_column, shift = divmod(bit, 8)
            tile, byte_in_tile = divmod(byte_in_column, tile_bytes)                      # 3. interleave
            line_offset = tile * lay.line_bytes + (col % lay.interleave) * tile_bytes + byte_in_tile
            out[col // lay.interleave, line_offset] |= code << shift
    return out


@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("k, n", [(64, 8), (128, 16), (192, 24)])
def test_pack_matches_the_layout_definition_bit_for_bit(bits, k, n):
    g = torch.Generator().manual_seed(k + n + bits)
    u = torch.randint(0, 2 ** bits, (k, n), generator=g, dtype=torch.uint8)
    packed = pack(u, bits)
    assert torch.equal(packed, pack_by_definition(u, bits))
    assert torch.equal(unpack(packed, bits, k, n), u)


def test_pack_known_bytes():
    # int4, column 0, rows 0..7 hold codes 1..8: the first word of column 0 holds the stored rows
    # 0..7 = logical rows 0, 1, 8, 9, 16, 17, 24, 25 in nibble order e0 e2 e4 e6 e1 e3 e5 e7.
    u = torch.zeros(64, 8, dtype=torch.uint8)
    for r, code in zip((0, 1, 8, 9, 16, 17, 24, 25), (1, 2, 3, 4, 5, 6, 7, 8)):
        u[r, 0] = code
    word = pack(u, 4)[0, :4]
    value = int.from_bytes(bytes(word.tolist()), "little")
    nibbles = [(value >> (4 * i)) & 0xF for i in range(8)]
    assert nibbles == [1, 3, 5, 7, 2, 4, 6, 8]
    # int8: the first word of column 0 holds logical rows 0, 1, 8, 9 as bytes e0 e2 e1 e3.
    u = torch.zeros(64, 8, dtype=torch.uint8)
    for r, code in zip((0, 1, 8, 9), (10, 20, 30, 40)):
        u[r, 0] = code
    assert pack(u, 8)[0, :4].tolist() == [10, 30, 20, 40]


def test_layout_facts():
    for bits, lay in LAYOUTS.items():
        assert lay.line_bytes == 128
        assert sorted(lay.row_permutation) == list(range(lay.permute_rows))
        assert sorted(lay.word_order) == list(range(lay.codes_per_word))
    with pytest.raises(ValueError, match="bits must be one of"):
        layout(3)


@pytest.mark.parametrize("k, n, fragment", [
    (96, 8, "K must be a positive multiple of 64"),
    (64, 12, "N must be a positive multiple of 8"),
])
def test_pack_rejects_unaligned(k, n, fragment):
    with pytest.raises(ValueError, match=fragment):
        pack(torch.zeros(k, n, dtype=torch.uint8), 4)
    with pytest.raises(TypeError, match="u must be a 2-D uint8 tensor"):
        pack(torch.zeros(64, 8, dtype=torch.int8), 4)


def test_weight_dequantize_round_trip():
    """IntBWeight keeps the logical weight: unpacked codes, scales and zeros give it back."""
    g = torch.Generator().manual_seed(3)
    u = torch.randint(0, 16, (256, 16), generator=g, dtype=torch.uint8)
    scale = torch.rand(2, 16, generator=g).half() + 0.1
    zero = torch.randint(0, 16, (2, 16), generator=g, dtype=torch.uint8)
    logical = wq_format.IntWeight(u, scale, zero, 4, 128, None)
    packed = qgemm.IntBWeight.from_int_weight(logical)
    assert torch.equal(packed.codes(), u)
    assert torch.equal(packed.dequantize(), logical.dequantize())


# --- specs, catalog, heuristic, rendering --------------------------------------------------------

@pytest.mark.parametrize("kwargs, fragment", [
    (dict(act="f32", bits=4), "act must be one of"),
    (dict(act="f16", bits=2), "bits must be one of"),
    (dict(act="bf16", bits=4, arch=75), "act bf16 needs arch 80"),
    (dict(act="f16", bits=4, m_tiles=4, n_tiles=4), "m_tiles \\* n_tiles must be at most 8"),
    (dict(act="f16", bits=4, warps_k=3), "warps_k must be"),
    (dict(act="f16", bits=4, min_warps_per_sm=10), "min_warps_per_sm must be"),
    (dict(act="f16", bits=4, m_tiles=2, stream=True), "stream needs m_tiles 1"),
    (dict(act="f16", bits=4, n_tiles=1, stream=True), "an even n_tiles"),
    (dict(act="f16", bits=4, stream=True, bulk_stages=4), "bulk_stages > 0 needs arch 90"),
    (dict(act="f16", bits=4, stream=True, arch=90), "arch 90 needs bulk_stages > 0"),
    (dict(act="f16", bits=4, arch=90, bulk_stages=4), "needs stream=True"),
    (dict(act="f16", bits=4, stream=True, arch=90, bulk_stages=5), "bulk_stages must be 2, 3, 4, 6 or 8"),
    (dict(act="f16", bits=8, n_tiles=4, warps_k=8, stream=True, arch=90, bulk_stages=4), "exceeds 98304 bytes"),
])
def test_gemv_spec_rejects(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        FpAIntBGemvSpec(**kwargs)


def test_bulk_configs_are_sm90_sweep_only():
    """The bulk-copy decode configurations: arch 90, in the sweep list for sm90 only, never in a catalog,
    their stage bytes a 128-row block of the CTA's columns per consumer warp, within the shared-memory cap."""
    from cutlass_gen.families.fpaintb import fpaintb_stream_configs
    for bits in (4, 8):
        assert not any(c.get("bulk_stages") for c in fpaintb_stream_configs(bits, sweep=True, target_sm=80))
        bulk = [FpAIntBGemvSpec("f16", bits, **c) for c in fpaintb_stream_configs(bits, sweep=True, target_sm=90)
                if c.get("bulk_stages")]
        assert bulk and all(s.arch == 90 and s.stream and f"_b{s.bulk_stages}_s" in s.name for s in bulk)
        for s in bulk:
            assert s.bulk_stage_bytes == s.warps_k * (8 * s.n_tiles) * 128 * bits // 8
            assert s.bulk_stages * s.bulk_stage_bytes <= FpAIntBGemvSpec.BULK_SMEM_LIMIT
    for sm in (75, 80, 90):
        assert not any(getattr(s, "bulk_stages", 0) for s in catalog(sm, FpAIntBGemvSpec.family))


GEMM = dict(act="f16", bits=4, tile=(64, 128, 64), warp=(32, 64), stages=4)


@pytest.mark.parametrize("change, fragment", [
    (dict(tile=(48, 128, 64)), "tile M must be one of"),
    (dict(tile=(64, 96, 64)), "tile N must be one of"),
    (dict(tile=(64, 128, 512)), "tile K must be one of"),
    (dict(tile=(64, 128)), r"tile is \(M, N, K\)"),
    (dict(warp=(24, 64)), "must be a multiple of"),
    (dict(warp=(32, 48)), "must be a multiple of"),
    (dict(tile=(128, 128, 64), warp=(16, 32)), "gives 32 warps"),
    (dict(warp=(64, 64), tile=(128, 128, 64)), "at most 64"),
    (dict(stages=7), "stages must be one of"),
    (dict(stages=4, arch=75), r"stages must be one of \(2,\) on sm75"),
    (dict(act="bf16", arch=75, stages=2), "act bf16 needs arch 80"),
    (dict(bits=8, tile=(32, 128, 128), warp=(32, 32), stages=4), "bytes of shared memory"),
])
def test_gemm_spec_rejects(change, fragment):
    with pytest.raises(ValueError, match=fragment):
        FpAIntBGemmSpec(**{**GEMM, **change})


def test_gemm_spec_shared_memory():
    # int4, 16 x 128 x 128, 4 stages: x 16 * 128 * 2, codes 32 column groups of (128 * 4 / 2 + 16)
    # bytes, 4 scale rows of 128 FP16 and 4 zero rows of 128 bytes per stage.
    spec = FpAIntBGemmSpec("f16", 4, (16, 128, 128), (16, 32), 4)
    assert spec.smem_bytes == 4 * (16 * 128 * 2 + 32 * (256 + 16) + 4 * 128 * 2 + 4 * 128)
    assert spec.warps == 4


def test_names_and_catalog():
    assert FpAIntBGemvSpec("bf16", 4, 2, 4, 4).name == "qgemm_fpaintb_gemv_sm80_bf16_int4_m32_n32_wk4"
    assert (FpAIntBGemvSpec("f16", 8, 1, 2, 8, min_warps_per_sm=16, rows8=True, stream=True).name
            == "qgemm_fpaintb_gemv_sm80_f16_int8_m16_n16_wk8_o16_r8_s")
    assert FpAIntBDequantSpec("f16", 8, 75).name == "qgemm_fpaintb_dequant_sm75_f16_int8"
    assert FpAIntBGemmSpec(**GEMM).name == "qgemm_fpaintb_gemm_sm80_f16_int4_64x128x64_w32x64_s4"
    sm75 = catalog(75, "fpaintb_gemv") + catalog(75, "fpaintb_gemm")
    assert sm75 and all(s.arch == 75 and s.act == "f16" for s in sm75)
    assert all(s.stages == 2 for s in catalog(75, "fpaintb_gemm"))
    for sm in (80, 90):
        specs = catalog(sm, "fpaintb_gemv") + catalog(sm, "fpaintb_gemm") + catalog(sm, "fpaintb_dequant")
        assert {s.act for s in specs} == {"f16", "bf16"} and all(s.arch == 80 for s in specs)
        assert {s.bits for s in catalog(sm, "fpaintb_gemm")} == {4, 8}


SHAPES = [(14336, 21504), (4096, 12288), (4096, 22016), (11008, 4096), (8192, 28672), (28672, 8192),
          (64, 8), (320, 24)]


def test_heuristic_choices_are_in_the_catalog():
    """No shape the heuristic can see compiles at run time; the kind of kernel goes by M."""
    for sm, arch, acts in ((75, 75, ("f16",)), (80, 80, ("f16", "bf16")), (90, 80, ("f16", "bf16"))):
        built = set(catalog(sm))
        for k, n in SHAPES:
            for m in (1, 2, 8, 9, 16, 17, 33, 64, 65, 256, 511, 512, 4096):
                for bits in (4, 8):
                    for act in acts:
                        choice = heuristics.fpaintb_choice(m, n, k, bits, act, arch, 132)
                        assert choice.spec in built, (sm, m, n, k, bits, act, choice.spec.name)
                        if m >= heuristics.FPAINTB_DEQUANT_MIN_M:
                            assert choice.dequantize
                        elif arch >= 80 and m <= heuristics.FPAINTB_STREAM_MAX_M:
                            # the decode variant, 8-token CTAs up to 8 rows
                            assert isinstance(choice.spec, FpAIntBGemvSpec) and choice.spec.stream, (m, n, bits)
                            assert choice.spec.rows8 == (m <= 8), (m, n, bits)
                        elif m <= 8 and (bits == 8 or n <= heuristics.FPAINTB_GEMV_MAX_N):
                            assert isinstance(choice.spec, FpAIntBGemvSpec), (m, n, bits)
                        else:
                            assert isinstance(choice.spec, FpAIntBGemmSpec), (m, n, bits)


def test_heuristic_tiles():
    """The sweep's choices (qgemm/fpaintb/heuristics.py) on an H100's 132 SMs."""
    decode = heuristics.fpaintb_choice(1, 4096, 11008, 4, "f16", 80, 132).spec
    assert (decode.stream, decode.rows8, decode.n_tiles, decode.warps_k, decode.min_warps_per_sm) == (True, True, 2, 8, 16)
    # measured (heuristics.FPAINTB_STREAM_*): 32-column CTAs for INT4 from N = 12288, and the tiled
    # GEMM from 9 rows
    wide = heuristics.fpaintb_choice(1, 21504, 14336, 4, "f16", 80, 132)
    assert (wide.spec.stream, wide.spec.n_tiles, wide.ctas_per_sm) == (True, 4, 0)
    assert heuristics.fpaintb_choice(1, 21504, 14336, 8, "f16", 80, 132).spec.n_tiles == 2
    assert isinstance(heuristics.fpaintb_choice(16, 4096, 11008, 8, "bf16", 80, 132).spec, FpAIntBGemmSpec)
    # Turing keeps the B-operand small-M kernel up to 8 rows
    sm75 = heuristics.fpaintb_choice(1, 4096, 11008, 4, "f16", 75, 132).spec
    assert (sm75.stream, sm75.n_tiles, sm75.warps_k) == (False, 2, 8)

    def gemm(m, k, n, bits=4):  # the tiled GEMM's table (from 17 rows the heuristic's choice)
        c = heuristics.fpaintb_gemm_choice(m, n, k, bits, "f16", 80, 132)
        return c.spec.tile, c.spec.warp, c.spec.stages, c.ctas_per_sm, c.raster_group
    streamk = heuristics.FPAINTB_STREAMK_CTAS_PER_SM
    assert gemm(1, 14336, 21504) == ((16, 128, 128), (16, 32), 4, streamk, 1)   # INT4 decode: GEMM beyond N 4096
    assert gemm(16, 11008, 4096) == ((16, 128, 128), (16, 32), 4, streamk, 1)
    assert gemm(16, 11008, 4096, 8) == ((16, 64, 128), (16, 16), 4, streamk, 1)
    assert gemm(64, 14336, 21504) == ((32, 128, 128), (32, 32), 3, streamk, 2)  # 2 x 168 tiles < 3 x 132
    assert gemm(64, 14336, 21504, 8) == ((64, 128, 64), (32, 64), 4, streamk, 1)
    assert gemm(256, 14336, 21504) == ((128, 64, 64), (64, 32), 4, 0, 2)        # 2 x 336 tiles fill the GPU
    assert gemm(500, 4096, 4096, 8) == ((128, 128, 64), (64, 32), 3, streamk, 4)
    assert heuristics.fpaintb_choice(512, 4096, 4096, 4, "f16", 80, 132).dequantize
    # Turing: the same tiles in two stages.
    assert heuristics.fpaintb_choice(16, 4096, 4096, 4, "f16", 75, 40).spec.stages == 2


def test_choice_knobs_belong_to_the_tiled_gemm():
    gemv = FpAIntBGemvSpec("f16", 4)
    with pytest.raises(ValueError, match="knobs of the tiled GEMM"):
        heuristics.FpAIntBChoice(gemv, ctas_per_sm=2)
    with pytest.raises(ValueError, match="ctas_per_sm must be >= 0"):
        heuristics.FpAIntBChoice(FpAIntBGemmSpec(**GEMM), ctas_per_sm=-1)


def test_templates_render_the_layout():
    """Every FpA x IntB template takes the packed layout's numbers from fpaintb_layout.py."""
    for bits in (4, 8):
        lay = layout(bits)
        expected = (f"qgemm::fpaintb::PackedLayout<{lay.bits}, {lay.interleave}, {lay.tile_rows}, "
                    f"{lay.line_bytes}>")
        for spec in (FpAIntBGemvSpec("f16", bits), FpAIntBDequantSpec("bf16", bits),
                     FpAIntBGemmSpec("f16", bits, (64, 128, 64), (32, 64), 4)):
            source = render(spec).source
            assert expected in source, spec.name
            assert f"{type(spec).__name__}(" in source.split("\n", 6)[4]  # the header names the spec


# --- the compiled host library -------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemv_library(tmp_path_factory):
    return HostLibrary(str(build(FpAIntBGemvSpec("f16", 4, 2, 4, 4), 80, tmp_path_factory.mktemp("qgemm-cache")).so_path))


def gemv_problem(m, n, k, group_size=128, ld_w=None):
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ld[0], p.ld[1], p.ld[2] = k, ld_w if ld_w is not None else k * 2, n
    p.ext[0], p.ext[1] = group_size, 0
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_gemv_plans_grid_and_shared_memory(gemv_library):
    status, launch = gemv_library.plan(gemv_problem(40, 4096, 4096))
    assert status == 0, gemv_library.status_string(status)
    assert tuple(launch.grid) == (4096 // 32, 2, 1) and launch.block[0] == 128
    assert launch.smem_bytes == 4 * 2 * 4 * 4 * 32 * 4


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("problem, why", [
    (gemv_problem(1, 4096, 4096, group_size=96), "group size not a multiple of 32"),
    (gemv_problem(1, 4096, 4096, group_size=1024 + 512), "group size not dividing K"),
    (gemv_problem(1, 4100, 4096), "N not a multiple of 8"),
    (gemv_problem(1, 4096, 4000), "K not a multiple of 64"),
    (gemv_problem(1, 4096, 4096, ld_w=4096), "packed row length wrong for int4"),
    (gemv_problem(0, 4096, 4096), "empty M"),
])
def test_gemv_plan_rejects(gemv_library, problem, why):
    status, _ = gemv_library.plan(problem)
    assert status != 0, why


@pytest.fixture(scope="module")
def gemm_library(kernel_cache):
    # a catalog kernel: CI's `qgemm build` has it in the run's cache already
    return HostLibrary(str(build(FpAIntBGemmSpec("f16", 4, (16, 128, 128), (16, 32), 4), 80, kernel_cache).so_path))


def gemm_problem(m, n, k, group_size=128, ctas=0, raster=1, ld_w=None):
    p = gemv_problem(m, n, k, group_size, ld_w)
    p.ext[2], p.ext[3] = ctas, raster
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_gemm_plans_work_split_and_workspace(gemm_library):
    spec = FpAIntBGemmSpec("f16", 4, (16, 128, 128), (16, 32), 4)
    # One CTA per output tile: 2 x 32 tiles, no tile shared, no workspace.
    status, launch = gemm_library.plan(gemm_problem(20, 4096, 11008))
    assert status == 0, gemm_library.status_string(status)
    assert tuple(launch.grid) == (2 * 32, 1, 1) and launch.block[0] == 32 * spec.warps
    assert launch.smem_bytes == spec.smem_bytes and launch.workspace_bytes == 0
    # Stream-K over 528 CTAs: 64 tiles x 86 K tiles = 5504 iterations, ceil(5504 / 528) = 11 per
    # CTA, so ceil(5504 / 11) = 501 CTAs; 11 does not divide 86: tiles are shared, one counter each.
    status, launch = gemm_library.plan(gemm_problem(20, 4096, 11008, ctas=528))
    assert status == 0 and tuple(launch.grid) == (501, 1, 1) and launch.workspace_bytes == 64 * 4
    # 86 iterations per CTA (ctas=64): one whole tile each, nothing shared.
    status, launch = gemm_library.plan(gemm_problem(20, 4096, 11008, ctas=64))
    assert status == 0 and tuple(launch.grid) == (64, 1, 1) and launch.workspace_bytes == 0
    # Fewer CTAs than tiles: each takes 172 iterations (two whole tiles).
    status, launch = gemm_library.plan(gemm_problem(20, 4096, 11008, ctas=32))
    assert status == 0 and tuple(launch.grid) == (32, 1, 1) and launch.workspace_bytes == 0


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("problem, why", [
    (gemm_problem(1, 4096, 4096, group_size=96), "group size not a multiple of 32"),
    (gemm_problem(1, 4096, 4096 * 3, group_size=192), "group size above the tile K, neither a multiple of it nor K"),
    (gemm_problem(1, 4100, 4096), "N not a multiple of 8"),
    (gemm_problem(1, 4096, 4000), "K not a multiple of 64"),
    (gemm_problem(1, 4096, 4096, ld_w=4096), "packed row length wrong for int4"),
    (gemm_problem(1, 4096, 4096, ctas=-1), "negative CTA count"),
    (gemm_problem(1, 4096, 4096, raster=0), "no raster group"),
])
def test_gemm_plan_rejects(gemm_library, problem, why):
    status, _ = gemm_library.plan(problem)
    assert status != 0, why


@requires_nvcc
@pytest.mark.nvcc
def test_gemm_make_params_needs_buffers_when_tiles_are_shared(gemm_library):
    import ctypes

    from qgemm._abi import PARAMS_CAPACITY
    buf = ctypes.create_string_buffer(PARAMS_CAPACITY)
    counters = ctypes.create_string_buffer(256)
    p = gemm_problem(1, 512, 4096, ctas=16)  # 4 tiles x 32 K tiles over 16 CTAs: 8 iterations each
    assert gemm_library.make_params_fn(ctypes.byref(p), ctypes.addressof(counters), buf, PARAMS_CAPACITY) != 0
    p.ptr[6] = 0x1000  # any non-null partial buffer (make_params only records it)
    assert gemm_library.make_params_fn(ctypes.byref(p), None, buf, PARAMS_CAPACITY) != 0
    assert gemm_library.make_params_fn(ctypes.byref(p), ctypes.addressof(counters), buf, PARAMS_CAPACITY) == 0
    p = gemm_problem(1, 512, 4096)  # one CTA per tile: neither buffer needed
    assert gemm_library.make_params_fn(ctypes.byref(p), None, buf, PARAMS_CAPACITY) == 0


# --- argument checks (before any launch) ---------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors pretend to live on a GPU of a chosen SM, to reach the checks past the device."""
    def use(capability=(9, 0)):
        monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(fpaintb_mod, "sm_count", lambda device: 132)
    return use


def int_weight(k=256, n=16, bits=4, group_size=128, zeros=False):
    return qgemm.IntBWeight.from_float(torch.randn(n, k), bits, group_size, symmetric=not zeros)


def test_plan_needs_cuda_weights():
    with pytest.raises(ValueError, match="weight.packed must be on a CUDA device"):
        qgemm.FpAIntBPlan(int_weight())
    with pytest.raises(TypeError, match="weight must be a qgemm.IntBWeight, got Tensor"):
        qgemm.FpAIntBPlan(torch.zeros(8, 128))


def test_bf16_on_sm75_is_refused(fake_gpu):
    fake_gpu((7, 5))
    with pytest.raises(ValueError, match="act_dtype bfloat16 needs sm80 or later .* sm75"):
        qgemm.FpAIntBPlan(int_weight(), act_dtype=torch.bfloat16)
    qgemm.FpAIntBPlan(int_weight(), act_dtype=torch.float16)  # FP16 is fine on Turing
    fake_gpu((7, 0))
    with pytest.raises(ValueError, match="needs sm75 or later"):
        qgemm.FpAIntBPlan(int_weight())


def test_from_float_rejects(fake_gpu):
    with pytest.raises(ValueError, match="group_size 128 must divide K=192|K must be a positive multiple of 64"):
        qgemm.IntBWeight.from_float(torch.randn(16, 200), 4, 128)
    with pytest.raises(ValueError, match="group_size 128 must divide K=192"):
        qgemm.IntBWeight.from_float(torch.randn(16, 192), 4, 128)
    with pytest.raises(ValueError, match="group_size must be one of"):
        qgemm.IntBWeight.from_float(torch.randn(16, 192), 4, 96)
    with pytest.raises(ValueError, match="N must be a positive multiple of 8"):
        qgemm.IntBWeight.from_float(torch.randn(12, 256), 4, 128)


def _replace(w, **changes):
    import dataclasses
    return dataclasses.replace(w, **changes)


@pytest.mark.parametrize("change, exc, fragment", [
    (lambda w: _replace(w, packed=w.packed[:, :-16].contiguous()), ValueError, "weight.packed must have shape"),
    (lambda w: _replace(w, scale=w.scale[:1]), ValueError, "weight.scale must have shape (2, 16)"),
    (lambda w: _replace(w, scale=w.scale.float()), TypeError, "weight.scale must have dtype float16, bfloat16"),
    (lambda w: _replace(w, zero=torch.zeros(2, 8, dtype=torch.uint8)), ValueError, "weight.zero must have shape"),
    (lambda w: _replace(w, group_size=96), ValueError, "group_size must be one of"),
])
def test_plan_rejects_bad_weights(fake_gpu, change, exc, fragment):
    fake_gpu()
    with pytest.raises(exc) as e:
        qgemm.FpAIntBPlan(change(int_weight()))
    assert fragment in str(e.value)


def test_plan_rejects_bad_options_and_inputs(fake_gpu):
    fake_gpu()
    w = int_weight()
    with pytest.raises(TypeError, match="act_dtype must be one of"):
        qgemm.FpAIntBPlan(w, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="activation must be one of"):
        qgemm.FpAIntBPlan(w, activation="tanh")
    with pytest.raises(ValueError, match=r"bias must have shape \(16,\)"):
        qgemm.FpAIntBPlan(w, bias=torch.zeros(15))
    plan = qgemm.FpAIntBPlan(w)
    with pytest.raises(ValueError, match=r"x must have shape \(M >= 1, 256\), got \(2, 128\)"):
        plan(torch.zeros(2, 128, dtype=torch.float16))
    with pytest.raises(TypeError, match="x must have dtype float16; got bfloat16"):
        plan(torch.zeros(2, 256, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="x must be contiguous"):
        plan(torch.zeros(256, 2, dtype=torch.float16).t())
    with pytest.raises(ValueError, match=r"out must have shape \(2, 16\)"):
        plan(torch.zeros(2, 256, dtype=torch.float16), torch.empty(2, 8, dtype=torch.float16))


def test_from_signed_packs_biased_codes():
    q = torch.randint(-128, 128, (16, 256), dtype=torch.int8)
    w = qgemm.IntBWeight.from_signed(q, torch.ones(16, dtype=torch.half))
    assert torch.equal(w.codes().to(torch.int16) - 128, q.t().to(torch.int16))
    assert torch.equal(w.dequantize(), q.t().double())


def test_plan_rejects_misaligned_and_mistyped_tensors(fake_gpu):
    fake_gpu()
    w = int_weight()
    plan = qgemm.FpAIntBPlan(w)
    x = torch.zeros(2 * 256 + 1, dtype=torch.float16)[1:].view(2, 256)  # 2-byte offset
    with pytest.raises(ValueError, match="x must start at a 16-byte aligned address \\(16-byte loads\\), got offset 2"):
        plan(x)
    good = torch.zeros(2, 256, dtype=torch.float16)
    with pytest.raises(TypeError, match="out must have dtype float16; got float32"):
        plan(good, torch.empty(2, 16))
    odd_out = torch.zeros(2 * 16 + 1, dtype=torch.float16)[1:].view(2, 16)
    with pytest.raises(ValueError, match="out must start at a 4-byte aligned address \\(paired stores\\)"):
        plan(good, odd_out)
    with pytest.raises(ValueError, match="does not fit this plan"):
        plan(good, choice=heuristics.FpAIntBChoice(FpAIntBGemvSpec("bf16", 4)))
    packed = torch.zeros(w.packed.numel() + 1, dtype=torch.uint8)[1:].view(w.packed.shape)
    with pytest.raises(ValueError, match="weight.packed must start at a 16-byte aligned address"):
        qgemm.FpAIntBPlan(_replace(w, packed=packed))
    with pytest.raises(ValueError, match=r"weight.perm must have shape \(256,\)"):
        qgemm.FpAIntBPlan(_replace(w, perm=torch.arange(128)))
    with pytest.raises(TypeError, match="weight.packed must have dtype uint8; got int8"):
        qgemm.FpAIntBPlan(_replace(w, packed=w.packed.view(torch.int8)))


def test_weight_constructors_reject():
    with pytest.raises(TypeError, match="w must be a qgemm.wq_format.IntWeight, got Tensor"):
        qgemm.IntBWeight.from_int_weight(torch.zeros(64, 8))
    logical = wq_format.IntWeight(torch.zeros(64, 8, dtype=torch.uint8), torch.ones(1, 8, dtype=torch.float16),
                                  None, 4, 64)
    with pytest.raises(TypeError, match="IntWeight.scale must have dtype float16, bfloat16; got float32"):
        qgemm.IntBWeight.from_int_weight(_replace(logical, scale=torch.ones(1, 8)))  # IntWeight checks it
    with pytest.raises(ValueError, match="bits must be one of"):
        qgemm.IntBWeight.from_float(torch.randn(8, 64), bits=3)
    with pytest.raises(TypeError, match="weight must have dtype"):
        qgemm.IntBWeight.from_float(torch.zeros(8, 64, dtype=torch.int32))


def test_one_shot_and_module_reject(fake_gpu):
    fake_gpu()
    with pytest.raises(TypeError, match="x must have dtype float16, bfloat16; got float32"):
        qgemm.fpaintb_linear(torch.zeros(2, 256), int_weight())
    layer = qgemm.nn.QuantLinear.from_weight(int_weight())
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 256\), got \(2, 128\)"):
        layer(torch.zeros(2, 128, dtype=torch.float16))
    with pytest.raises(TypeError, match="x must be float16 or bfloat16, got torch.float32"):
        layer(torch.zeros(2, 256))
    with pytest.raises(TypeError, match="linear must be a torch.nn.Linear, got Conv2d"):
        qgemm.nn.QuantLinear.from_float(torch.nn.Conv2d(1, 1, 1))
    with pytest.raises(TypeError, match="weight must be a qgemm.IntBWeight, got Tensor"):
        qgemm.nn.QuantLinear.from_weight(torch.zeros(8, 8))


# --- the decode variant's host plan (split-K geometry) --------------------------------------------

@pytest.fixture(scope="module")
def stream_library(kernel_cache):
    spec = FpAIntBGemvSpec("f16", 4, 1, 2, 8, min_warps_per_sm=16, prefetch=2, rows8=True, stream=True)  # in the catalog
    return HostLibrary(str(build(spec, 80, kernel_cache).so_path))


@pytest.mark.parametrize("m, n, k, slots, grid, workspace", [
    (1, 21504, 14336, 0, (1344, 1), 0),            # no split asked: one CTA per 16-column tile
    (1, 21504, 14336, 264, (2 * 1344, 1), 1344 * 4),  # 5.1 waves -> 2 splits (10.2 waves, 93% full)
    (1, 4096, 11008, 264, (256, 1), 0),            # 256 tiles fill 97% of one wave: no split
    (16, 4096, 11008, 264, (256, 2), 0),           # two 8-token rows, 1.9 waves: 97%
    (1, 40, 8192, 264, (3 * 2, 1), 3 * 4),         # 3 tiles: at most 64 / (4 * 8) = 2 splits
    (1, 21504, 4096, 264, (1344, 1), 0),           # 32 blocks: too few to split over 8 warps
])
@requires_nvcc
@pytest.mark.nvcc
def test_stream_plan_split_k(stream_library, m, n, k, slots, grid, workspace):
    p = gemv_problem(m, n, k)
    p.ext[2] = slots
    status, launch = stream_library.plan(p)
    assert status == 0, stream_library.status_string(status)
    assert (launch.grid[0], launch.grid[1], launch.grid[2]) == (*grid, 1)
    assert launch.workspace_bytes == workspace
    assert launch.block[0] == 256
