"""FpA x IntB conv2d on the GPU against a float64 reference of the same quantized filter.

The reference is F.conv2d in float64 of x (the very FP16/BF16 values the kernel reads; zero
padding is the real 0) with the dequantized filter q * scale + offset, scale and offset rounded to
the activation type as the kernel reads them, plus the bias (rounded likewise), then the
activation.

Error bound (||out - ref|| / ||ref||): float16 2e-3, bfloat16 1e-2, as the FpA x IntB GEMM's
(tests/test_fpaintb_gpu.py) and for the same reasons: each weight q * scale + offset is formed by
one fused multiply-add, rounded once to the activation type (relative error <= 2^-11 FP16, 2^-8
BF16, random in sign), the products are accumulated in FP32 (stream-K adds FP32 partial sums), and
the output is rounded once: about 6e-4 RMS for FP16 and 2.3e-3 for BF16, 3-4x below the bounds.
Outputs are poisoned with NaN before each launch, so an unwritten element fails.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.conv import FpAIntBConvSpec
from qgemm.conv import heuristics

from gpu_util import randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

BOUND = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
ACTS = (torch.float16, torch.bfloat16)
_ACT = {"none": lambda t: t, "relu": F.relu, "relu6": lambda t: t.clamp(0, 6), "silu": F.silu, "gelu": F.gelu}


def weight(co, c, r, s, bits, block, symmetric=False, seed=0) -> qgemm.IntConvWeight:
    """A filter quantized from random floats (codes, scales and offsets all non-trivial)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(co, c, r, s, generator=g) * 0.1 + 0.02
    q = qgemm.IntConvWeight.from_float(w, bits, block, symmetric=symmetric)
    return qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), bits, block)


def reference(x_nhwc, plan: qgemm.FpAIntBConvPlan):
    w = plan.weight.dequantize(plan.act_dtype).permute(0, 3, 1, 2)
    bias = plan.bias.double() if plan.bias is not None else None
    out = F.conv2d(x_nhwc.to(plan.act_dtype).double().permute(0, 3, 1, 2), w, bias, plan.stride, plan.padding,
                   plan.dilation)
    return _ACT[plan.activation](out).permute(0, 2, 3, 1)


def run(plan, x, choice=None):
    n, h, w, _ = x.shape
    ho, wo = plan.output_hw(h, w)
    out = torch.full((n, ho, wo, plan.out_channels), float("nan"), dtype=x.dtype, device="cuda")
    result = plan(x, out, choice=choice)
    torch.cuda.synchronize()
    assert result.data_ptr() == out.data_ptr()
    return out


def _specs(dtype, bits):
    """Every conv kernel of the catalog for this type and width, plus the arch-75 ones for FP16."""
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    specs = [s for s in catalog(target, FpAIntBConvSpec.family) if s.act == act and s.bits == bits]
    if dtype == torch.float16:
        specs += [s for s in catalog(75, FpAIntBConvSpec.family) if s.bits == bits]
    return specs


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
def test_every_kernel_stream_k_and_raster(bits, dtype):
    """Each catalog kernel, one CTA per output tile and stream-K (0.1 and 4 CTAs per SM), raster
    groups 1 and 3, on Co = 136 (a partial column tile), a 3x3 filter with padding 1 over C = 96
    (K = 864: a partial 64-row layout tile padded with zero codes), block 32 (several groups per K
    tile) and per output channel, M = 1, 17 and 450 (several M tiles)."""
    for block in (32, -1):
        plan = qgemm.FpAIntBConvPlan(weight(136, 96, 3, 3, bits, block, seed=bits), act_dtype=dtype,
                                     bias=randn(136, dtype=dtype, seed=3), padding=1)
        for spec in _specs(dtype, bits):
            for n, h, w in ((1, 1, 1), (1, 1, 17), (2, 15, 15)):
                x = randn(n, h, w, 96, dtype=dtype, seed=h * w)
                ref = reference(x, plan)
                for ctas_per_sm, raster in ((0, 1), (0.1, 3), (4, 1)):
                    err = rel_err(run(plan, x, heuristics.FpAIntBChoice(spec, ctas_per_sm, raster)), ref)
                    assert err < BOUND[dtype], (spec.name, block, (n, h, w), ctas_per_sm, raster, err)


@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("kernel, stride, padding, dilation", [
    (1, 1, 0, 1), (1, 2, 0, 1), (3, 1, 1, 1), (3, 2, 1, 1), (3, 1, 3, 2), (3, 2, 0, 2), (7, 2, 3, 1), (7, 1, 3, 2),
])
def test_geometry(bits, kernel, stride, padding, dilation):
    """Stride 1/2, padding 0/1/3, dilation 1/2, 1x1/3x3/7x7 filters, at the smallest legal channel
    counts (C = 8 with one scale per output channel, Co = 8), odd input sizes; the heuristic's
    kernel."""
    for c, block in ((8, -1), (32, 32)):
        plan = qgemm.FpAIntBConvPlan(weight(8, c, kernel, kernel, bits, block, seed=kernel), stride=stride,
                                     padding=padding, dilation=dilation, bias=randn(8, dtype=torch.float16, seed=1))
        x = randn(3, 17, 13, c, dtype=torch.float16, seed=c)
        err = rel_err(run(plan, x), reference(x, plan))
        assert err < BOUND[torch.float16], (c, block, err)


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("block", (32, 64, 128, 256, -1))
@pytest.mark.parametrize("m", (1, 3, 17, 1000))
def test_block_sizes_and_odd_m(m, block, bits, dtype):
    """Every block size on C = 256 (block 256: one block per tap), asymmetric and symmetric, at
    M = N P Q = 1, 3, 17 and 1000 output pixels."""
    n, h, w = {1: (1, 1, 1), 3: (3, 1, 1), 17: (1, 1, 17), 1000: (10, 10, 10)}[m]
    for symmetric in (False, True):
        plan = qgemm.FpAIntBConvPlan(weight(24, 256, 3, 3, bits, block, symmetric, seed=m), act_dtype=dtype,
                                     padding=1)
        x = randn(n, h, w, 256, dtype=dtype, seed=m)
        err = rel_err(run(plan, x), reference(x, plan))
        assert err < BOUND[dtype], (symmetric, err)


@pytest.mark.parametrize("activation", ("none", "relu", "relu6", "silu", "gelu"))
def test_bias_and_activations(activation):
    plan = qgemm.FpAIntBConvPlan(weight(64, 64, 3, 3, 4, 64, seed=5), bias=randn(64, dtype=torch.float32, seed=2),
                                 activation=activation, padding=1)
    x = randn(4, 9, 9, 64, dtype=torch.float16, seed=6)
    err = rel_err(run(plan, x), reference(x, plan))
    assert err < BOUND[torch.float16], err


def test_float32_input_and_nchw():
    """FP32 x (converted to FP16 for the kernel, the output back to FP32), NCHW in and out, both
    channels_last and plain contiguous, with and without out=."""
    plan = qgemm.FpAIntBConvPlan(weight(32, 64, 3, 3, 8, 32, seed=9), padding=1, stride=2, activation="relu6")
    x = randn(2, 11, 11, 64, dtype=torch.float32, seed=9)
    ref = reference(x, plan)  # (the reference rounds x to FP16 as the plan does)
    y = plan(x)
    assert y.dtype == torch.float32 and y.shape == ref.shape
    assert rel_err(y, ref) < BOUND[torch.float16]
    x_nchw = x.permute(0, 3, 1, 2)  # a channels_last NCHW view: used as is
    for xin in (x_nchw, x_nchw.contiguous(), x_nchw.half()):
        y = plan(xin, layout="nchw")
        assert y.dtype == xin.dtype and y.shape == (2, 32, 6, 6)
        assert rel_err(y.permute(0, 2, 3, 1), ref) < BOUND[torch.float16]
        out = torch.full((2, 32, 6, 6), float("nan"), dtype=xin.dtype, device="cuda").to(
            memory_format=torch.channels_last)
        assert plan(xin, out, layout="nchw").data_ptr() == out.data_ptr()
        assert rel_err(out.permute(0, 2, 3, 1), ref) < BOUND[torch.float16]
    one_shot = qgemm.conv2d_fpaintb(x, plan.weight, stride=2, padding=1, activation="relu6")
    assert rel_err(one_shot, ref) < BOUND[torch.float16]


def test_stream_k_is_deterministic():
    """Shared tiles are summed in CTA order: the same bits launch after launch."""
    plan = qgemm.FpAIntBConvPlan(weight(256, 256, 3, 3, 4, 128, seed=4), padding=1)
    x = randn(1, 7, 7, 256, dtype=torch.float16, seed=4)
    choice = heuristics.fpaintb_conv_choice(49, 256, 2304, 4, "f16", 80, torch.cuda.get_device_properties(0)
                                            .multi_processor_count)
    assert choice.ctas_per_sm > 0
    first = run(plan, x, choice)
    assert rel_err(first, reference(x, plan)) < BOUND[torch.float16]
    for _ in range(10):
        assert torch.equal(run(plan, x, choice), first)


def test_module_in_place_of_nn_conv2d():
    """qgemm.nn.IntWeightConv2d from an nn.Conv2d, NCHW float32 in and out as the layer it replaces."""
    conv = torch.nn.Conv2d(64, 32, 3, stride=1, padding=2, dilation=2).cuda()
    layer = qgemm.nn.IntWeightConv2d.from_float(conv, bits=4, block_size=32, activation="relu")
    x = randn(2, 64, 12, 10, dtype=torch.float32, seed=12)
    y = layer(x)
    assert y.shape == (2, 32, 12, 10) and y.dtype == torch.float32
    assert rel_err(y.permute(0, 2, 3, 1), reference(x.permute(0, 2, 3, 1), layer.plan(torch.float16))) < BOUND[torch.float16]
