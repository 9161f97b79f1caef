"""FpA x IntB conv2d without a GPU: the filter's quantization and its implicit-GEMM operands
(bit-exact against their definitions), the im2col order the kernel gathers in (against
F.conv2d in float64), specs and catalog, the compiled host library's checks, and argument checks
before any launch."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.build import build
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render
from cutlass_gen.families.conv import FpAIntBConvSpec
from cutlass_gen.families.fpaintb import FpAIntBGemmSpec
from qgemm import _checks
from qgemm.conv import heuristics
from qgemm.conv import fpaintb as conv_mod
from qgemm._abi import HostLibrary, QgemmProblem
from qgemm.conv.int8 import _pack
from qgemm.fpaintb.pack import unpack

from conftest import requires_nvcc

SHAPES = [  # (bits, block, (Co, C, R, S))
    (4, 32, (16, 64, 3, 3)),
    (8, -1, (8, 24, 3, 3)),
    (4, 64, (8, 128, 7, 7)),
    (8, 32, (8, 32, 1, 1)),
    (4, -1, (8, 8, 3, 3)),
    (8, 256, (8, 256, 1, 1)),
]


def gemm_weight(w: qgemm.IntConvWeight) -> tuple[torch.Tensor, int]:
    """The GEMM weight [K_pad, Co] in float64, from the packed operands as the kernel reads them:
    (u - 2^(bits-1)) * scale + offset per K row's group."""
    packed, scale, offset, k_pad, group = w.gemm_operands(torch.float16)
    u = unpack(packed, w.bits, k_pad, w.out_channels)
    rows = torch.arange(k_pad) // group
    return (u.double() - (1 << (w.bits - 1))) * scale.double()[rows] + offset.double()[rows], k_pad


@pytest.mark.parametrize("bits, block, shape", SHAPES)
@pytest.mark.parametrize("symmetric", (False, True))
def test_from_float_rounds_to_nearest(bits, block, shape, symmetric):
    torch.manual_seed(0)
    weight = torch.randn(shape)
    w = qgemm.IntConvWeight.from_float(weight, bits, block, symmetric=symmetric)
    half = 1 << (bits - 1)
    assert w.q.dtype == torch.int8 and int(w.q.min()) >= -half and int(w.q.max()) <= half - 1
    blocks = 1 if block == -1 else shape[1] // block
    assert w.scale.shape == w.offset.shape == (shape[0], blocks)
    if symmetric:
        assert torch.count_nonzero(w.offset) == 0
    # Every weight within half a step (plus the FP16 rounding of scale and offset) of the original.
    error = (w.dequantize() - weight.double().permute(0, 2, 3, 1)).abs()
    block_c = shape[1] if block == -1 else block
    step = w.scale.double().repeat_interleave(block_c, dim=1)[:, None, None, :]
    assert bool((error <= 0.5 * step * (1 + 2 ** -9) + 2 ** -10 * weight.abs().max()).all())


@pytest.mark.parametrize("bits, block, shape", SHAPES)
def test_gemm_operands_match_the_filter_bit_for_bit(bits, block, shape):
    torch.manual_seed(1)
    w = qgemm.IntConvWeight.from_float(torch.randn(shape), bits, block)
    co, c, r, s = shape
    k = r * s * c
    g, k_pad = gemm_weight(w)
    assert k_pad % 64 == 0 and k <= k_pad < k + 64
    # Row (r, s, c) of the GEMM weight is filter tap (r, s), channel c: exactly the dequantized filter
    # with FP16 scales and offsets; the padded rows hold q = 0.
    assert torch.equal(g[:k], w.dequantize(torch.float16).reshape(co, k).t())
    packed, scale, offset, _, group = w.gemm_operands(torch.float16)
    assert bool((unpack(packed, bits, k_pad, co)[k:] == 1 << (bits - 1)).all())
    assert group == (k_pad if block == -1 else block) and scale.shape == (k_pad // group, co)


@pytest.mark.parametrize("bits, block, shape", SHAPES[:4])
@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 1, 1), (1, 3, 2)])
def test_implicit_gemm_order_is_the_convolution(bits, block, shape, stride, padding, dilation):
    """The kernel's gather (row (n, p, q), K = (r, s, c) with c fastest, zero outside the input)
    times the GEMM weight is F.conv2d with the dequantized filter, in float64."""
    torch.manual_seed(2)
    w = qgemm.IntConvWeight.from_float(torch.randn(shape), bits, block)
    co, c, r, s = shape
    x = torch.randn(2, 13, 15, c, dtype=torch.float64)  # NHWC
    g, _ = gemm_weight(w)
    ref = F.conv2d(x.permute(0, 3, 1, 2), w.dequantize(torch.float16).permute(0, 3, 1, 2), stride=stride,
                   padding=padding, dilation=dilation)
    cols = F.unfold(x.permute(0, 3, 1, 2), (r, s), dilation=dilation, padding=padding, stride=stride)
    n, _, pixels = cols.shape
    cols = cols.reshape(n, c, r * s, pixels).transpose(1, 2).reshape(n, r * s * c, pixels)  # c fastest
    out = torch.einsum("nkl,ko->nol", cols, g[:r * s * c]).reshape(ref.shape)
    assert torch.allclose(out, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(block_size=48), ValueError, "block_size must be one of"),
    (dict(block_size=128), ValueError, "dividing C=64"),
    (dict(bits=3), ValueError, "bits must be 4 or 8"),
])
def test_from_float_rejects(kwargs, exc, fragment):
    args = dict(weight=torch.randn(8, 64, 3, 3), bits=4, block_size=32) | kwargs
    with pytest.raises(exc, match=fragment):
        qgemm.IntConvWeight.from_float(**args)


def _weight(**changes):
    base = dict(q=torch.zeros(8, 3, 3, 32, dtype=torch.int8), scale=torch.ones(8, 1), offset=torch.zeros(8, 1),
                bits=4, block_size=32)
    return qgemm.IntConvWeight(**(base | changes))


@pytest.mark.parametrize("changes, exc, fragment", [
    (dict(q=torch.zeros(8, 3, 3, 12, dtype=torch.int8)), ValueError, "C (q.shape[3]) must be a multiple of 8"),
    (dict(q=torch.zeros(12, 3, 3, 32, dtype=torch.int8), scale=torch.ones(12, 1), offset=torch.zeros(12, 1)),
     ValueError, "Co (q.shape[0]) must be a multiple of 8"),
    (dict(q=torch.zeros(8, 3, 3, 32, dtype=torch.int16)), TypeError, "q must have dtype int8"),
    (dict(q=torch.full((8, 3, 3, 32), 9, dtype=torch.int8)), ValueError, "outside [-8, 7]"),
    (dict(scale=torch.ones(8, 2)), ValueError, "scale must have shape (8, 1)"),
    (dict(offset=torch.zeros(1, 8)), ValueError, "offset must have shape (8, 1)"),
    (dict(block_size=16), ValueError, "block_size must be one of"),
    (dict(q=torch.zeros(8, 3, 3, 48, dtype=torch.int8)), ValueError, "must divide the input channels C=48"),
    (dict(bits=2), ValueError, "bits must be 4 or 8"),
])
def test_weight_rejects(changes, exc, fragment):
    with pytest.raises(exc) as e:
        _weight(**changes)
    assert fragment in str(e.value)


# --- specs, catalog, heuristic ---------------------------------------------------------------------

def test_spec_names_shared_memory_and_catalog():
    spec = FpAIntBConvSpec("f16", 4, (128, 64, 64), (64, 32), 4)
    assert spec.name == "qgemm_fpaintb_conv_sm80_f16_int4_128x64x64_w64x32_s4"
    gemm = FpAIntBGemmSpec("f16", 4, (128, 64, 64), (64, 32), 4)
    assert spec.smem_bytes == gemm.smem_bytes + 4 * (64 // 32) * 64 * 2  # one offset per scale, every stage
    for sm, count in ((75, 4), (80, 8), (90, 8)):
        specs = catalog(sm, "fpaintb_conv")
        assert len(specs) == count and len({s.name for s in specs}) == count
        assert all(s.arch == (75 if sm == 75 else 80) for s in specs)
    source = render(spec).source
    assert "kIm2col = true, kOffset = true" in source and "FpAIntBConvSpec" in source


@pytest.mark.parametrize("m", (1, 49, 64, 65, 3136, 200704))
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("sm", (75, 80, 90))
def test_heuristic_choices_are_in_the_catalog(m, bits, sm):
    arch = 75 if sm == 75 else 80
    choice = heuristics.fpaintb_conv_choice(m, 256, 2304, bits, "f16", arch, 132)
    assert choice.spec in catalog(sm, "fpaintb_conv")
    assert choice.spec.tile[0] == ((32 if bits == 4 else 64) if m <= heuristics.FPAINTB_CONV_SMALL_M else 128)
    tiles = -(-m // choice.spec.tile[0]) * -(-256 // choice.spec.tile[1])
    assert (choice.ctas_per_sm > 0) == (tiles < heuristics.FPAINTB_STREAMK_CTAS_PER_SM * 132)


# --- the compiled host library -------------------------------------------------------------------

@pytest.fixture(scope="module")
def conv_library(kernel_cache):
    # a catalog kernel: CI's `qgemm build` has it in the run's cache already
    return HostLibrary(str(build(FpAIntBConvSpec("f16", 4, (128, 64, 64), (64, 32), 4), 80, kernel_cache).so_path))


def conv_problem(n=2, h=14, w=14, c=64, co=128, r=3, s=3, pad=1, stride=1, dil=1, group=32, k=None, m=None,
                 ld_w=None, activation=0, ctas=0):
    p = QgemmProblem()
    out_h = (h + 2 * pad - dil * (r - 1) - 1) // max(stride, 1) + 1
    out_w = (w + 2 * pad - dil * (s - 1) - 1) // max(stride, 1) + 1
    k_pad = k if k is not None else -(-r * s * c // 64) * 64
    p.m, p.n, p.k = m if m is not None else n * out_h * out_w, co, k_pad
    p.ld[0], p.ld[1] = c, ld_w if ld_w is not None else k_pad * 2
    p.ext[0], p.ext[1], p.ext[2] = group, _pack((activation, 1)), ctas
    p.ext[3], p.ext[4], p.ext[5] = _pack((h, w)), _pack((r, s)), _pack((pad, pad))
    p.ext[6], p.ext[7] = _pack((stride, stride)), _pack((dil, dil))
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_conv_plans_tiles(conv_library):
    spec = FpAIntBConvSpec("f16", 4, (128, 64, 64), (64, 32), 4)
    status, launch = conv_library.plan(conv_problem())  # M = 2 * 14 * 14 = 392: 4 x 2 tiles
    assert status == 0, conv_library.status_string(status)
    assert tuple(launch.grid) == (8, 1, 1) and launch.smem_bytes == spec.smem_bytes
    status, launch = conv_library.plan(conv_problem(c=8, r=7, s=7, pad=3, stride=2, group=448))  # K 392 -> 448
    assert status == 0, conv_library.status_string(status)


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("problem, why", [
    (conv_problem(c=60), "C not a multiple of 8"),
    (conv_problem(k=576 + 64), "K padded past the next 64 rows"),
    (conv_problem(k=512), "K below R S C"),
    (conv_problem(m=391), "M not N P Q"),
    (conv_problem(co=132), "Co not a multiple of 8"),
    (conv_problem(group=96), "group size not a multiple of 32"),
    (conv_problem(h=1, w=1, pad=0), "filter larger than the input"),
    (conv_problem(ld_w=576), "packed row length wrong for int4"),
    (conv_problem(activation=5), "unknown activation"),
    (conv_problem(stride=0), "stride 0"),
    (conv_problem(n=1 << 16, h=256, w=256, c=64), "input past 2^31 elements"),
])
def test_conv_plan_rejects(conv_library, problem, why):
    status, _ = conv_library.plan(problem)
    assert status != 0, why


# --- argument checks (before any launch) ---------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors pretend to live on a GPU of a chosen SM, to reach the checks past the device."""
    def use(capability=(9, 0)):
        monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(conv_mod, "sm_count", lambda device: 132)
    return use


def test_plan_needs_cuda_weights():
    w = qgemm.IntConvWeight.from_float(torch.randn(8, 32, 3, 3), 4, 32)
    with pytest.raises(ValueError, match="weight.q must be on a CUDA device"):
        qgemm.FpAIntBConvPlan(w)


def test_plan_rejects_bad_options_and_inputs(fake_gpu):
    fake_gpu()
    w = qgemm.IntConvWeight.from_float(torch.randn(16, 32, 3, 3), 4, 32)
    with pytest.raises(TypeError, match="weight must be a qgemm.IntConvWeight"):
        qgemm.FpAIntBConvPlan(torch.zeros(16, 3, 3, 32))
    with pytest.raises(TypeError, match="act_dtype must be one of"):
        qgemm.FpAIntBConvPlan(w, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="activation must be one of"):
        qgemm.FpAIntBConvPlan(w, activation="tanh")
    with pytest.raises(ValueError, match=r"bias must have shape \(16,\)"):
        qgemm.FpAIntBConvPlan(w, bias=torch.zeros(15))
    with pytest.raises(ValueError, match="stride must be at least 1"):
        qgemm.FpAIntBConvPlan(w, stride=0)
    with pytest.raises(TypeError, match="padding must be an int or a pair"):
        qgemm.FpAIntBConvPlan(w, padding="same")
    plan = qgemm.FpAIntBConvPlan(w, padding=1)
    with pytest.raises(ValueError, match=r"x must have shape \(N >= 1, H >= 1, W >= 1, 32\)"):
        plan(torch.zeros(1, 8, 8, 16, dtype=torch.float16))
    with pytest.raises(TypeError, match="x must have dtype"):
        plan(torch.zeros(1, 8, 8, 32, dtype=torch.int8))
    with pytest.raises(ValueError, match="x must be contiguous"):
        plan(torch.zeros(1, 32, 8, 8, dtype=torch.float16).permute(0, 2, 3, 1)[:, :, :4])
    with pytest.raises(ValueError, match="layout must be one of"):
        plan(torch.zeros(1, 8, 8, 32, dtype=torch.float16), layout="chwn")
    with pytest.raises(ValueError, match=r"x must have shape \(N, 32, H, W\) with layout 'nchw'"):
        plan(torch.zeros(1, 8, 8, 32, dtype=torch.float16), layout="nchw")
    with pytest.raises(ValueError, match="smaller than the filter"):
        qgemm.FpAIntBConvPlan(w)(torch.zeros(1, 2, 2, 32, dtype=torch.float16))


def test_bf16_on_sm75_is_refused(fake_gpu):
    fake_gpu((7, 5))
    w = qgemm.IntConvWeight.from_float(torch.randn(8, 32, 3, 3), 4, 32)
    with pytest.raises(ValueError, match="act_dtype bfloat16 needs sm80"):
        qgemm.FpAIntBConvPlan(w, act_dtype=torch.bfloat16)


def test_module_from_float(fake_gpu):
    fake_gpu()
    conv = torch.nn.Conv2d(32, 16, 3, stride=2, padding=1)
    layer = qgemm.nn.IntWeightConv2d.from_float(conv, bits=8, block_size=-1, activation="relu6")
    assert (layer.in_channels, layer.out_channels, layer.bits) == (32, 16, 8)
    assert layer.weight.shape == (16, 3, 3, 32) and layer.bias.dtype == torch.float32
    plan = layer.plan(torch.float16)  # made on demand (forward makes it on the first CUDA input)
    assert plan.stride == (2, 2) and plan.padding == (1, 1) and plan.activation == "relu6"
    assert plan.bias.dtype == torch.float16
    assert "int8, block_size=-1, activation=relu6" in repr(layer)


@pytest.mark.parametrize("make, kwargs, exc, fragment", [
    (lambda: torch.nn.Linear(4, 4), {}, TypeError, "conv must be a torch.nn.Conv2d, got Linear"),
    (lambda: torch.nn.Conv2d(32, 16, 3, groups=2), {}, ValueError, "conv.groups must be 1"),
    (lambda: torch.nn.Conv2d(32, 16, 3, padding="same"), {}, ValueError, "conv.padding must be sizes"),
    (lambda: torch.nn.Conv2d(32, 16, 3), {"activation": "tanh"}, ValueError, "activation must be one of"),
    (lambda: torch.nn.Conv2d(30, 16, 3), {"block_size": -1}, ValueError, "C (q.shape[3]) must be a multiple of 8"),
])
def test_module_rejects(fake_gpu, make, kwargs, exc, fragment):
    fake_gpu()
    with pytest.raises(exc) as e:
        qgemm.nn.IntWeightConv2d.from_float(make(), **kwargs)
    assert fragment in str(e.value)


def test_plan_rejects_bad_outputs_and_one_shot_inputs(fake_gpu):
    """out= is checked against the shape, dtype and memory layout of the result before any launch
    (the kernel choice is stubbed: it would need the GPU); conv2d_fpaintb takes float x only."""
    fake_gpu()
    w = qgemm.IntConvWeight.from_float(torch.randn(16, 32, 3, 3), 4, 32)
    plan = qgemm.FpAIntBConvPlan(w, padding=1)
    plan._prepare = lambda n, h, w, choice: conv_mod._Call(None, None, None, 0, (n, *plan.output_hw(h, w), 16))
    x = torch.zeros(1, 8, 8, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"out must have shape \(1, 8, 8, 16\)"):
        plan(x, torch.empty(1, 8, 8, 8, dtype=torch.float16))
    with pytest.raises(TypeError, match="out must have dtype float16"):
        plan(x, torch.empty(1, 8, 8, 16, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"out must have shape \(1, 16, 8, 8\)"):
        plan(x.permute(0, 3, 1, 2), torch.empty(1, 8, 8, 16, dtype=torch.float16), layout="nchw")
    with pytest.raises(ValueError, match="out must be NHWC in memory"):
        plan(x.permute(0, 3, 1, 2), torch.empty(1, 16, 8, 8, dtype=torch.float16), layout="nchw")
    with pytest.raises(TypeError, match="x must have dtype"):
        qgemm.conv2d_fpaintb(torch.zeros(1, 8, 8, 32, dtype=torch.int8), w)
