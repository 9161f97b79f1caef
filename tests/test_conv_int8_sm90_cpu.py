"""The Sm90 int8 conv2d (conv2d_int8_sm90: TMA im2col + WGMMA) without a GPU: spec, name, catalog and
rendering; which geometries TMA im2col takes; the kernel choice (measured on an H100);
the plan's checks of an explicit Sm90 choice; and the compiled host library (planning from the
shared conv slots, rejections before the CUDA driver is touched). The epilogue's border test is
the CUTLASS 2.x visitor's, mirrored in tests/test_conv_int8_cpu.py; the device code runs in
tests/test_conv_int8_gpu.py."""
from __future__ import annotations

import ctypes
import json
import math

import pytest
import torch
from conftest import requires_nvcc

import qgemm
from cutlass_gen.build import build_bundle
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render
from cutlass_gen.families.conv import ConvInt8Sm90Spec, ConvInt8Spec
from cutlass_gen.spec import spec_from_dict
from qgemm.conv import heuristics
from qgemm.conv import quant as conv_quant
from qgemm._abi import PARAMS_CAPACITY, HostLibrary

from test_conv_int8_cpu import conv_problem, fake_gpu, layer, x_nhwc  # noqa: F401 (fake_gpu: a fixture)

TILE_64 = ConvInt8Sm90Spec((64, 128, 64))


# --- spec -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(tile=(96, 128, 64)), "tile M must be one of (64, 128)"),
    (dict(tile=(128, 96, 64)), "tile N must be one of (64, 128, 256)"),
    (dict(tile=(128, 128, 32)), "tile K must be one of (64, 128)"),
    (dict(tile=(128, 128)), "tile must be three positive integers"),
    (dict(tile=(128, 128, 64), cluster=(2, 2)), "cluster must be one of"),
    (dict(tile=(128, 128, 64), stages=1), "stages must be 0"),
    (dict(tile=(128, 128, 64), arch=80), "arch must be 90"),
    (dict(tile=(128, 128, 64), ctas_per_sm=3), "ctas_per_sm must be 1 or 2"),
    (dict(tile=(128, 128, 64), stages=4, ctas_per_sm=2), "tile M x N at most 128 x 64"),
    (dict(tile=(128, 64, 64), ctas_per_sm=2), "needs a stage count"),
    (dict(tile=(128, 64, 128), stages=5, ctas_per_sm=2), "needs a stage count"),
    (dict(tile=(128, 64, 64), mainloop="cooperative"), "mainloop must be one of ('im2col', 'pingpong')"),
    (dict(tile=(128, 64, 64), stages=4, ctas_per_sm=2, mainloop="pingpong"), "the pingpong mainloop is persistent"),
    (dict(tile=(128, 64, 64), cluster=(2, 1), mainloop="pingpong"), "the pingpong mainloop is persistent"),
])
def test_spec_rejects_invalid_configs(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ConvInt8Sm90Spec(**kwargs)


def test_names_json_and_channels():
    spec = ConvInt8Sm90Spec((128, 64, 128), cluster=(2, 1), stages=4)
    assert spec.name == "qgemm_conv2d_int8_sm90_s8s8_s8_128x64x128_c2x1_s4"
    assert ConvInt8Sm90Spec((64, 128, 64), stages=4, ctas_per_sm=2).name.endswith("_64x128x64_c1x1_s4_2cta")
    assert TILE_64.name == "qgemm_conv2d_int8_sm90_s8s8_s8_64x128x64_c1x1"
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec.supports_target(90) and not spec.supports_target(80)
    assert spec.supports_channels(16, 48) and spec.supports_channels(2048, 16)
    assert not spec.supports_channels(8, 16) and not spec.supports_channels(16, 20)


def test_catalog_is_sm90_only():
    assert catalog(75, "conv2d_int8_sm90") == [] and catalog(80, "conv2d_int8_sm90") == []
    specs = catalog(90, "conv2d_int8_sm90")
    assert specs and all(isinstance(s, ConvInt8Sm90Spec) for s in specs)
    assert len({s.name for s in specs}) == len(specs)


def test_render():
    src = render(TILE_64).source
    assert f"kernel: {TILE_64.name}" in src and "spec:   ConvInt8Sm90Spec(" in src
    assert "using TileShape = Shape<_64, _128, Shape<_64>>;" in src
    assert '#include "qgemm/conv/slots.h"' in src and "qgemm::conv::Sm90Requantize<TileShape>" in src
    assert "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90" in src
    assert "StageCountAutoCarveout" in src
    assert "StageCount<4>" in render(ConvInt8Sm90Spec((64, 128, 64), stages=4)).source
    assert "kMinBlocksPerSm = 1;" in src
    assert "kMinBlocksPerSm = 2;" in render(ConvInt8Sm90Spec((64, 128, 64), stages=4, ctas_per_sm=2)).source
    assert "KernelTmaWarpSpecializedPingpong" not in src


PINGPONG = ConvInt8Sm90Spec((128, 64, 64), mainloop="pingpong")


def test_pingpong_gemm_kernel():
    """The pointwise kernels: a CUTLASS 3.x GEMM (persistent ping-pong) over the NHWC rows, the same
    epilogue tree; named apart, and only for 1x1, stride 1, no padding."""
    assert PINGPONG.name == "qgemm_conv2d_int8_sm90_s8s8_s8_128x64x64_c1x1_pingpong"
    assert spec_from_dict(PINGPONG.to_dict()) == PINGPONG and PINGPONG in catalog(90, "conv2d_int8_sm90")
    src = render(PINGPONG).source
    assert "cutlass::gemm::KernelTmaWarpSpecializedPingpong" in src and "cutlass::gemm::PersistentScheduler" in src
    assert "using TileShape = Shape<_128, _64, _64>;" in src and "qgemm::conv::Sm90Requantize<TileShape>" in src
    assert "KernelImplicitTmaWarpSpecializedSm90" not in src and "collective::CollectiveConv" not in src
    assert PINGPONG.runs_geometry((1, 1), (1, 1), (0, 0), (2, 2))
    for geometry in [((3, 3), (1, 1), (1, 1)), ((1, 1), (2, 2), (0, 0)), ((1, 1), (1, 1), (1, 0))]:
        assert not PINGPONG.runs_geometry(*geometry, (1, 1))
        assert TILE_64.runs_geometry(*geometry, (1, 1))


# --- the geometry TMA im2col takes ------------------------------------------------------------------

RESNET50 = [  # (kernel, stride, padding) of every ResNet-50 convolution after the first
    (1, 1, 0), (3, 1, 1), (3, 2, 1), (1, 2, 0),
]


@pytest.mark.parametrize("kernel, stride, padding", RESNET50 + [(7, 2, 3), (3, 1, 3)])
def test_geometry_of_common_convolutions_fits(kernel, stride, padding):
    assert ConvInt8Sm90Spec.supports_geometry((kernel, kernel), (stride, stride), (padding, padding), (1, 1))


@pytest.mark.parametrize("kernel, stride, padding, dilation, why", [
    ((3, 3), (9, 1), (1, 1), (1, 1), "stride past TMA's element strides (8)"),
    ((3, 3), (1, 1), (129, 1), (1, 1), "lower corner -129"),
    ((3, 3), (1, 1), (0, 0), (128, 1), "filter offset 256"),
    ((3, 3), (1, 1), (0, 0), (100, 1), "upper corner -200"),
    ((1, 1), (1, 1), (128, 0), (1, 1), "upper corner 128"),
])
def test_geometry_past_tma_im2col_limits(kernel, stride, padding, dilation, why):
    assert not ConvInt8Sm90Spec.supports_geometry(kernel, stride, padding, dilation), why


# --- choice ------------------------------------------------------------------------------------------

# ResNet-50 (input size, Ci, Co, kernel, stride) -> the kernel the measured rule takes at batch 64
# and batch 1 on an H100 (heuristics.py gives the times): "s90 MxNxK/ctas" or "s80".
RESNET50_SM90 = [
    ((56, 64, 64, 1, 1), "s90 128x64x64/2", "s80"),
    ((56, 64, 64, 3, 1), "s90 128x64x64/2", "s80"),
    ((56, 64, 256, 1, 1), "s90 128x128x64/1 pingpong", "s80"),  # pointwise: the ping-pong GEMM
    ((56, 256, 64, 1, 1), "s90 128x64x64/2", "s80"),
    ((56, 256, 128, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((56, 128, 128, 3, 2), "s90 128x128x128/1", "s90 128x64x64/1"),
    ((28, 128, 512, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((56, 256, 512, 1, 2), "s80", "s80"),                       # K = 256 < Co: downsample
    ((28, 512, 128, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((28, 128, 128, 3, 1), "s90 128x128x128/1", "s90 128x64x64/1"),
    ((28, 512, 256, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((28, 256, 256, 3, 2), "s90 128x128x128/1", "s90 128x64x64/1"),
    ((14, 256, 1024, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((28, 512, 1024, 1, 2), "s80", "s80"),
    ((14, 1024, 256, 1, 1), "s90 128x128x64/1 pingpong", "s90 128x64x64/1"),
    ((14, 256, 256, 3, 1), "s90 128x128x128/1", "s90 128x64x64/1"),
    ((14, 1024, 512, 1, 1), "s90 128x128x64/1 pingpong", "s90 128x64x64/1"),
    ((14, 512, 512, 3, 2), "s90 128x128x128/1", "s90 128x64x64/1"),
    ((7, 512, 2048, 1, 1), "s90 128x128x64/1 pingpong", "s80"),
    ((14, 1024, 2048, 1, 2), "s80", "s90 128x64x64/1"),         # batch 1: K = 1024 deep enough
    ((7, 2048, 512, 1, 1), "s90 128x128x64/1 pingpong", "s90 128x64x64/1"),
    ((7, 512, 512, 3, 1), "s90 128x128x128/1", "s90 128x64x64/1"),
]


def _short(spec) -> str:
    if isinstance(spec, ConvInt8Sm90Spec):
        pingpong = " pingpong" if spec.mainloop == "pingpong" else ""
        return f"s90 {'x'.join(map(str, spec.tile))}/{spec.ctas_per_sm}{pingpong}"
    return f"s{spec.arch}"


@pytest.mark.parametrize("layer, batch64, batch1", RESNET50_SM90)
def test_sm90_choice_on_resnet50(layer, batch64, batch1):
    """The Sm90 kernels on deep GEMMs, the Sm80 ones on wide and shallow ones (heuristics.py): at
    batch 64 where K >= Co (two 128 x 64 per SM for Co = 64, 128 x 128 x 128 for Ci and Co multiples
    of 128) and on every pointwise layer with Co > 64 (the ping-pong GEMM), at batch 1 where K >=
    CONV_SM90_MIN_K."""
    assert heuristics.CONV_PREFER_SM90 is True
    size, ci, co, k, stride = layer
    ho, wo = conv_quant.output_hw((size, size), (k, k), (stride, stride), (k // 2, k // 2), (1, 1))
    for batch, expected in ((64, batch64), (1, batch1)):
        spec = heuristics.conv_int8_choice(batch * ho * wo, ci, co, 90, 132, sm90_fits=True, taps=k * k,
                                           pointwise=k == 1 and stride == 1)
        assert _short(spec) == expected, (layer, batch)
        assert spec.supports_channels(ci, co) and spec in catalog(90, spec.family)
    # Without the flag (geometry TMA cannot walk, or a plan told to) the Sm80 rule, as before.
    assert heuristics.conv_int8_choice(64 * ho * wo, ci, co, 90, 132, taps=k * k).arch == 80


@pytest.mark.parametrize("m, ci, co, taps", [
    (64 * 56 * 56, 64, 128, 9),     # Co > 64, Ci not a multiple of 128: not measured
    (64 * 56 * 56, 256, 192, 1),    # Co not a multiple of 128
    (56 * 56, 64, 64, 9),           # small M, K = 576 < CONV_SM90_MIN_K
    (64 * 112 * 112, 16, 64, 16),   # conv1 folded: 16 channels fill a quarter of each tap's K tile
    (112 * 112, 16, 64, 16),
])
def test_sm90_choice_keeps_the_sm80_kernels_where_unmeasured_or_slower(m, ci, co, taps):
    assert heuristics.conv_int8_sm90_choice(m, ci, co, 90, 132, taps) is None
    assert heuristics.conv_int8_choice(m, ci, co, 90, 132, sm90_fits=True, taps=taps).arch == 80


def test_sm90_preference_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(heuristics, "CONV_PREFER_SM90", False)
    assert heuristics.conv_int8_choice(64 * 28 * 28, 128, 128, 90, 132, sm90_fits=True, taps=9).arch == 80


def test_sm90_choice_falls_back():
    # Channels not multiples of 16, an sm80 target, or a geometry TMA cannot walk: the Sm80 kernels.
    for args, fits in [((4096, 24, 64, 90, 132), True), ((4096, 64, 64, 80, 108), True),
                       ((4096, 64, 64, 90, 132), False)]:
        assert isinstance(heuristics.conv_int8_choice(*args, sm90_fits=fits, taps=49), ConvInt8Spec)
    assert heuristics.conv_int8_sm90_choice(4096, 24, 64, 90, 132, taps=49) is None


def test_plan_runs_an_explicit_sm90_choice(fake_gpu):
    kernels = fake_gpu((9, 0))
    w_q, quant, bias = layer(co=32, ci=16, k=3)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, padding=1)
    assert plan.sm90_fits
    out = plan(x_nhwc(2, 9, 7, 16), choice=TILE_64)
    assert out.shape == (2, 9, 7, 32)
    (p,) = kernels[TILE_64].problems  # the same slots as the Sm80 kernels
    assert (p.m, p.n, p.k) == (2 * 9 * 7, 32, 9 * 16) and p.ptr[4] is not None


@pytest.mark.parametrize("capability, make, fragment", [
    ((8, 0), lambda: layer(co=32, ci=16), "needs sm90 or later; this plan runs on sm80"),
    ((9, 0), lambda: layer(co=32, ci=8), "needs in_channels a multiple of 16 and out_channels a multiple of 16"),
    ((9, 0), lambda: layer(co=20, ci=16), "needs in_channels a multiple of 16 and out_channels a multiple of 16"),
])
def test_plan_rejects_an_sm90_choice_that_does_not_fit(fake_gpu, capability, make, fragment):
    fake_gpu(capability)
    w_q, quant, bias = make()
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, padding=1)
    with pytest.raises(ValueError, match=fragment):
        plan(x_nhwc(2, 9, 7, w_q.shape[3]), choice=TILE_64)


def test_plan_rejects_a_pingpong_choice_for_a_convolution_that_is_not_pointwise(fake_gpu):
    fake_gpu()
    w_q, quant, bias = layer(co=32, ci=16, k=3)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, padding=1)
    assert not plan.pointwise
    with pytest.raises(ValueError, match=r"runs pointwise convolutions only .* kernel \(3, 3\), stride \(1, 1\), "
                                         r"padding \(1, 1\)"):
        plan(x_nhwc(2, 9, 7, 16), choice=PINGPONG)
    w_q, quant, bias = layer(co=32, ci=16, k=1)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias)
    assert plan.pointwise and isinstance(plan(x_nhwc(2, 9, 7, 16), choice=PINGPONG), torch.Tensor)


def test_plan_rejects_an_sm90_choice_past_tma_limits(fake_gpu):
    fake_gpu((9, 0))
    w_q, quant, bias = layer(co=32, ci=16)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, stride=(9, 1), padding=1)
    assert not plan.sm90_fits
    with pytest.raises(ValueError, match=r"TMA im2col\) cannot run kernel \(3, 3\), stride \(9, 1\)"):
        plan(x_nhwc(2, 19, 7, 16), choice=TILE_64)


def test_plan_checks_x_and_out_alignment_for_an_sm90_choice(fake_gpu):
    fake_gpu((9, 0))
    w_q, quant, bias = layer(co=32, ci=16)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, padding=1)
    x = torch.empty(2 * 9 * 7 * 16 + 8, dtype=torch.int8)[8:].view(2, 9, 7, 16)
    with pytest.raises(ValueError, match="x .*16-byte"):
        plan(x, choice=TILE_64)
    # An output 4-byte aligned serves the Sm80 kernels, not TMA's 16-byte stores.
    out = torch.empty(2 * 9 * 7 * 32 + 4, dtype=torch.int8)[4:].view(2, 9, 7, 32)
    with pytest.raises(ValueError, match="out .*16-byte"):
        plan(x_nhwc(2, 9, 7, 16), out, choice=TILE_64)


# --- the compiled kernel's host library -------------------------------------------------------------

TWO_PER_SM = next(s for s in catalog(90, "conv2d_int8_sm90") if s.ctas_per_sm == 2 and s.tile[0] == 128)


@pytest.fixture(scope="module")
def sm90_kernels(kernel_cache):
    """The three Sm90 kernels this module compiles, built once as one bundle (one nvcc, ~2 min): each
    test below also checks that a bundle's host library serves its own kernel."""
    return {a.name: a for a in build_bundle([TILE_64, PINGPONG, TWO_PER_SM], 90, kernel_cache)}


def host_library(kernels, spec) -> HostLibrary:
    art = kernels[spec.name]
    host = HostLibrary(str(art.so_path))
    assert host.entry_name == spec.name and spec_from_dict(json.loads(host.spec_json)) == spec
    return host


@pytest.fixture(scope="module")
def sm90_host(sm90_kernels):
    """The 64 x 128 Sm90 kernel's host library."""
    return host_library(sm90_kernels, TILE_64)


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("geometry", [
    (2, 9, 7, 16, 32, (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, 17, 16, 48, 16, (3, 5), (2, 1), (3, 0), (2, 1)),
    (3, 23, 23, 16, 144, (7, 7), (2, 2), (3, 3), (1, 1)),
    (64, 56, 56, 64, 256, (1, 1), (1, 1), (0, 0), (1, 1)),
])
def test_host_library_plans_from_the_shared_slots(sm90_host, geometry):
    """The Sm90 kernel reads the problem the Sm80 kernels read (conv_problem): CUTLASS's own output
    extent must equal PyTorch's (else the problem is refused), and the grid is one threadblock per
    64 x 128 tile of the implicit GEMM, with a producer and a consumer warp group each."""
    n, h, w, c, k, kernel, stride, padding, dilation = geometry
    problem = conv_problem(n, h, w, c, k, kernel, stride, padding, dilation)
    status, launch = sm90_host.plan(problem)
    assert status == 0, sm90_host.status_string(status)
    assert launch.grid[0] * launch.grid[1] * launch.grid[2] == math.ceil(problem.m / 64) * math.ceil(k / 128)
    assert tuple(launch.block) == (256, 1, 1) and tuple(launch.cluster) == (1, 1, 1)
    assert 64 * 1024 < launch.smem_bytes <= 227 * 1024 and launch.workspace_bytes == 0
    assert 0 < launch.params_bytes <= PARAMS_CAPACITY
    wrong = conv_problem(n, h, w, c, k, kernel, stride, padding, dilation, m=problem.m + 1)
    assert sm90_host.plan(wrong)[0] == 101


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("change, status", [
    (lambda p: setattr(p, "n", 24), "Error Invalid Problem"),                                  # K % 16
    (lambda p: p.ext.__setitem__(3, 24) or setattr(p, "k", 216), "Error Invalid Problem"),    # C % 16
    (lambda p: p.ext.__setitem__(5, (129 << 32) | 1) or setattr(p, "m", 2 * 265 * 7),
     "Error Invalid Problem"),                                                                 # padding 129
    (lambda p: p.ext.__setitem__(6, 0), "problem not supported by this kernel"),               # stride 0
    (lambda p: p.scalar.__setitem__(0, 0.5), "problem not supported by this kernel"),          # fractional clamp
])
def test_host_library_rejects(sm90_host, change, status):
    problem = conv_problem(2, 9, 7, 16, 32, (3, 3), padding=(1, 1))
    change(problem)
    code, _ = sm90_host.plan(problem)
    assert code != 0 and sm90_host.status_string(code) == status


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_make_params_rejects_before_touching_the_driver(sm90_host):
    """Null and misaligned tensors are refused before the TMA descriptors are encoded (which needs
    the CUDA driver; this machine has none, so a problem that got that far would fail differently)."""
    buf = ctypes.create_string_buffer(PARAMS_CAPACITY)
    problem = conv_problem(2, 9, 7, 16, 32, (3, 3), padding=(1, 1))

    def make(**pointers):
        for slot, value in pointers.items():
            problem.ptr[int(slot[1:])] = value
        return sm90_host.make_params_fn(ctypes.byref(problem), None, ctypes.addressof(buf), PARAMS_CAPACITY)

    misaligned = "Error Misaligned Operand"
    assert make() == 101  # no tensors
    assert sm90_host.status_string(make(p0=0x1008, p1=0x2000, p2=0x3000, p3=0x4000, p5=0x5000)) == misaligned  # x
    assert sm90_host.status_string(make(p0=0x1000, p5=0x5004)) == misaligned   # out not 16-byte aligned
    assert sm90_host.status_string(make(p5=0x5000, p4=0x6002)) == misaligned   # border not 4-byte aligned


@requires_nvcc
@pytest.mark.nvcc
def test_pingpong_host_library_plans_pointwise_problems_only(sm90_kernels):
    """The ping-pong GEMM plans from the same slots: a persistent grid (at most one threadblock per
    SM, three warp groups each), and BAD_PROBLEM for a filter, a stride, padding or no SM count."""
    host = host_library(sm90_kernels, PINGPONG)
    problem = conv_problem(64, 56, 56, 64, 256, (1, 1))
    problem.sm_count = 132
    status, launch = host.plan(problem)
    assert status == 0, host.status_string(status)
    assert 0 < launch.grid[0] * launch.grid[1] * launch.grid[2] <= 132
    assert tuple(launch.block) == (384, 1, 1) and tuple(launch.cluster) == (1, 1, 1)
    assert 0 < launch.params_bytes <= PARAMS_CAPACITY
    for other in [conv_problem(2, 9, 7, 16, 32, (3, 3), padding=(1, 1)), conv_problem(2, 9, 7, 16, 32, (1, 1), (2, 2)),
                  conv_problem(2, 9, 7, 16, 32, (1, 1), padding=(1, 0)), conv_problem(2, 9, 7, 16, 32, (1, 1))]:
        other.sm_count = 132 if other.ext[4] != problem.ext[4] or other.ext[5] or other.ext[6] != problem.ext[6] else 0
        assert host.plan(other)[0] == 101


@requires_nvcc
@pytest.mark.nvcc
def test_two_per_sm_kernels_fit_twice(sm90_kernels):
    """A catalog kernel asking for two threadblocks per SM gets them: its shared memory fits twice in
    the 227 KB an H100 SM gives one kernel's blocks (the registers are capped by __launch_bounds__)."""
    assert [s for s in catalog(90, "conv2d_int8_sm90") if s.ctas_per_sm == 2 and s.tile[0] == 128] == [TWO_PER_SM]
    host = host_library(sm90_kernels, TWO_PER_SM)
    status, launch = host.plan(conv_problem(64, 56, 56, 64, 64, (3, 3), padding=(1, 1)))
    assert status == 0, host.status_string(status)
    assert 2 * launch.smem_bytes <= 227 * 1024


def test_plan_falls_back_to_sm80_for_an_out_not_aligned_for_tma(fake_gpu):
    """The plan's own Sm90 choice needs 16-byte aligned stores; a caller's `out` aligned to 4 bytes
    only gets the Sm80 kernel the heuristic would take without the Sm90 ones, not an error."""
    kernels = fake_gpu()
    w_q, quant, bias = layer(co=64, ci=128, k=3)
    plan = qgemm.ConvInt8Plan(w_q, quant, bias=bias, padding=1)
    x = x_nhwc(1, 9, 11, 128)
    assert isinstance(plan.choice(1, 9, 11), ConvInt8Sm90Spec)  # small M, K = 1152
    plan(x)
    out = torch.empty(9 * 11 * 64 + 4, dtype=torch.int8)[4:].view(1, 9, 11, 64)
    plan(x, out)
    sm80 = plan.choice(1, 9, 11, sm90=False)
    assert sm80.arch == 80 and [s for s in kernels if kernels[s].problems] == [plan.choice(1, 9, 11), sm80]
    assert kernels[sm80].problems[0].ptr[5] == out.data_ptr()
