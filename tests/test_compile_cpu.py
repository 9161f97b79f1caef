"""qgemm modules under torch.compile(fullgraph=True) and torch.export on the CPU: each module is one
opaque qgemm::module_forward op (qgemm/nn/_ops.py) whose fake implementation must agree with the
real one (torch.library.opcheck: shapes, dtypes, strides), and compiled outputs equal eager ones.
The "aot_eager" backend traces exactly what inductor would receive without needing a C++ toolchain;
the GPU run (tests/test_nn_gpu.py) uses the default backend and CUDA graphs."""
from __future__ import annotations

import copy
import gc

import pytest
import torch

import qgemm
from qgemm.nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, W8A8Linear
from qgemm.nn import _ops


def gen(seed):
    return torch.Generator().manual_seed(seed)


def cases():
    lin = torch.nn.Linear(256, 64)
    conv = torch.nn.Conv2d(16, 8, 3, stride=2, padding=1)
    fconv = torch.nn.Conv2d(32, 16, 3, padding=1)
    x16 = torch.randn(2, 3, 256, generator=gen(1)).half()
    return {
        "int4": (QuantLinear.from_float(lin.half(), 4, 64), x16, {}),
        "fp8": (Fp8Linear.from_float(torch.nn.Linear(256, 64)), torch.randn(5, 256, generator=gen(2)), {}),
        "w8a8": (W8A8Linear.from_float(torch.nn.Linear(256, 64), 128, "symmetric"), x16, {}),
        "conv_int8_nhwc": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5), torch.randn(2, 9, 9, 16, generator=gen(3)),
                           {}),
        "conv_int8_nchw_float": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5, layout="nchw", float_output=True),
                                 torch.randn(2, 16, 9, 9, generator=gen(4)), {}),
        "conv_int4_nchw": (IntWeightConv2d.from_float(fconv, 4, 32), torch.randn(2, 32, 7, 6, generator=gen(5)), {}),
        "conv_int4_nhwc": (IntWeightConv2d.from_float(fconv, 4, 32), torch.randn(2, 7, 6, 32, generator=gen(5)),
                           {"layout": "nhwc"}),
    }


class Wrap(torch.nn.Module):
    def __init__(self, module, kwargs):
        super().__init__()
        self.inner, self.kwargs = module, kwargs

    def forward(self, x):
        return self.inner(x, **self.kwargs) * 2


@pytest.mark.parametrize("name", list(cases()))
def test_fake_matches_real_and_compiles(name):
    module, x, kwargs = cases()[name]
    layout = kwargs.get("layout") or getattr(module, "layout", "") if module._takes_layout else ""
    torch.library.opcheck(torch.ops.qgemm.module_forward.default, (x, module._qgemm_handle, layout),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
    eager = module(x, **kwargs)
    real = torch.ops.qgemm.module_forward(x, module._qgemm_handle, layout)
    assert torch.equal(real, eager) and real.stride() == eager.stride()
    model = Wrap(module, kwargs)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), eager * 2)


def test_export_and_model_compile():
    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64)).half()
    qgemm.quantize_(model, qgemm.Int4WeightOnlyConfig(group_size=64))
    x = torch.randn(3, 256, generator=gen(6)).half()
    eager = model(x)
    exported = torch.export.export(model, (x,))
    ops = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.qgemm.module_forward.default) == 2
    assert torch.equal(exported.module()(x), eager)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (1, 3, 17):
        xm = torch.randn(m, 256, generator=gen(m)).half()
        assert torch.equal(compiled(xm), model(xm))


def test_handles_are_per_module_and_weak():
    module, x, _ = cases()["int4"]
    clone = copy.deepcopy(module)
    assert clone._qgemm_handle != module._qgemm_handle
    assert _ops._module(clone._qgemm_handle) is clone
    handle = clone._qgemm_handle
    del clone
    gc.collect()
    with pytest.raises(RuntimeError, match=f"no live module has handle {handle}"):
        _ops._module(handle)
