"""Plans called directly under torch.compile(fullgraph=True) on the GPU, with inductor and with CUDA
graphs (mode="reduce-overhead"), and under torch.export: plan(x) and plan(x, out) are the custom ops
qgemm::plan_forward / plan_forward_out (qgemm/_plan_ops.py), whose real implementation is the eager
call, so compiled outputs equal eager ones bit for bit (the kernels are deterministic, stream-K
included). One plan per family: FpA x IntB INT4 g128 FP16, W8A8 (asymmetric, any sm80+ GPU), FP8
(sm90), and the FpA x IntB conv2d in both layouts. The CPU tests (routing, fake implementations,
errors, handles) are tests/test_plan_compile_cpu.py."""
from __future__ import annotations

import pytest
import torch

import qgemm

from gpu_util import randn

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]
K, N = 1024, 512
ROWS = (1, 17, 300)


def weight(seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(N, K, generator=g, device="cuda") * 0.05 + 0.01


def gemm_plan(name):
    """(plan, activation dtype)."""
    bias = randn(N, dtype=torch.float32, seed=7) * 0.1
    if name == "fpaintb_int4_g128":
        w = qgemm.IntBWeight.from_float(weight(), 4, 128)
        return qgemm.FpAIntBPlan(w, act_dtype=torch.float16, bias=bias.half()), torch.float16
    if name == "w8a8":
        return qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(weight(), 128), bias=bias), torch.float16
    if not SM90:
        pytest.skip("FP8 kernels need an sm90 GPU")
    plan = qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(weight()), bias=bias, out_dtype=torch.bfloat16)
    return plan, torch.bfloat16


class Call(torch.nn.Module):
    def __init__(self, plan, **kwargs):
        super().__init__()
        self.plan, self.kwargs = plan, kwargs

    def forward(self, x):
        return self.plan(x, **self.kwargs)


def check(plan, inputs, **kwargs):
    """plan(x, **kwargs) compiled (inductor; CUDA graphs) and exported equals eager, bit for bit; and
    the out= form compiled writes out."""
    expected = [plan(x, **kwargs) for x in inputs]
    for mode in (None, "reduce-overhead"):
        torch._dynamo.reset()
        compiled = torch.compile(lambda x: plan(x, **kwargs), fullgraph=True, mode=mode)
        for x, e in zip(inputs, expected):
            for _ in range(3):  # warm-up, recording, replay under reduce-overhead
                y = compiled(x)
            assert torch.equal(y, e) and y.stride() == e.stride(), (mode, tuple(x.shape))
    torch._dynamo.reset()

    compiled = torch.compile(lambda x, out: plan(x, out, **kwargs), fullgraph=True)
    for x, e in zip(inputs, expected):
        out = torch.full_like(e, float("nan"))
        compiled(x, out)
        assert torch.equal(out, e), tuple(x.shape)
    exported = torch.export.export(Call(plan, **kwargs), (inputs[0],))
    assert "qgemm.plan_forward.default" in str(exported.graph)
    assert torch.equal(exported.module()(inputs[0]), expected[0])


@pytest.mark.parametrize("name", ["fpaintb_int4_g128", "w8a8", "fp8"])
def test_gemm_plans(name):
    plan, dtype = gemm_plan(name)
    check(plan, [randn(m, K, dtype=dtype, seed=m) for m in ROWS])


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_conv_plan(layout):
    conv = torch.nn.Conv2d(64, 32, 3, padding=1)
    plan = qgemm.FpAIntBConvPlan(qgemm.IntConvWeight.from_float(conv.weight.cuda(), 4, 32), padding=1,
                                 bias=conv.bias.cuda())
    shapes = [(1, 14, 14, 64), (3, 9, 7, 64)]
    inputs = [randn(*s, dtype=torch.float16, seed=i) for i, s in enumerate(shapes)]
    if layout == "nchw":
        inputs = [x.permute(0, 3, 1, 2) for x in inputs]  # channels_last views: no transposing copy
    check(plan, inputs, layout=layout)
