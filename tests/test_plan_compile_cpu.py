"""Plans called directly under torch.compile(fullgraph=True) and torch.export on the CPU: plan(x) and
plan(x, out) are the custom ops qgemm::plan_forward / plan_forward_out (qgemm/_plan_ops.py), whose
fake implementations are the plans' _fake_call.

Real plans of every family are made on CPU tensors posing as an sm90 GPU's (as tests/test_nn_cpu.py
makes them), by qgemm.nn modules. A plan cannot launch here, so its eager call (what the ops' real
implementation runs) is replaced by its module's reference path, the same quantized math; while
traced, the class's own __call__ runs, so its routing is what is tested. torch.library.opcheck then
holds each _fake_call to the real output's shape, dtype and strides. The GPU run is
tests/test_plan_compile_gpu.py."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import qgemm
from qgemm import _checks, _plan_ops
from qgemm.conv import fpaintb as conv_fpaintb_mod
from qgemm.conv import int8 as conv_int8_mod
from qgemm.fp8 import plan as fp8_mod
from qgemm.fpaintb import plan as fpaintb_mod
from qgemm.nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, W8A8Linear
from qgemm.w8a8 import plan as w8a8_mod

PLAN_CLASSES = (qgemm.FpAIntBPlan, qgemm.W8A8GemmPlan, qgemm.Fp8GemmPlan, qgemm.ConvInt8Plan, qgemm.FpAIntBConvPlan)


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors pose as an sm90 GPU's, so plans can be made (never launched); each plan class's
    eager call runs its module's reference path instead (REFERENCES, by handle), and while traced
    the class's own __call__ (its routing to the ops)."""
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for mod in (fpaintb_mod, fp8_mod, w8a8_mod, conv_int8_mod, conv_fpaintb_mod):
        monkeypatch.setattr(mod, "sm_count", lambda device: 132)
    for cls in PLAN_CLASSES:
        ROUTING_CALLS[cls] = cls.__call__
        monkeypatch.setattr(cls, "__call__", _by_reference(cls.__call__))
    yield
    REFERENCES.clear()


REFERENCES: dict = {}  # plan handle -> reference(x, layout)
ROUTING_CALLS: dict = {}  # plan class -> its own __call__


def _by_reference(routing_call):
    def __call__(self, x, out=None, **kwargs):
        if torch.compiler.is_compiling() and _plan_ops.tracing():
            return routing_call(self, x, out, **kwargs)
        y = REFERENCES[self._qgemm_handle](x, kwargs.get("layout", ""))
        if out is None:
            return y
        out.copy_(y)
        return out
    return __call__


def plans():
    """name -> (plan, x, layout): one per family and layout, with the module whose reference path
    stands in for the kernels registered in REFERENCES."""
    lin = torch.nn.Linear(256, 64)
    conv = torch.nn.Conv2d(16, 8, 3, stride=2, padding=1)
    fconv = torch.nn.Conv2d(32, 16, 3, padding=1)
    x16 = torch.randn(5, 256, generator=gen(1)).half()
    cases = {
        "fpaintb": (QuantLinear.from_float(lin.half(), 4, 128), x16, "", (torch.float16,)),
        "w8a8": (W8A8Linear.from_float(torch.nn.Linear(256, 64), 128, "symmetric"), x16, "", (torch.float16,)),
        "fp8": (Fp8Linear.from_float(torch.nn.Linear(256, 64)), torch.randn(5, 256, generator=gen(2)).bfloat16(), "",
                (torch.bfloat16,)),
        "conv_int8_nhwc": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5),
                           torch.randint(-128, 128, (2, 9, 9, 16), generator=gen(3), dtype=torch.int8), "nhwc", ()),
        "conv_int8_nchw": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5),
                           torch.randint(-128, 128, (2, 16, 9, 9), generator=gen(4), dtype=torch.int8), "nchw", ()),
        "conv_int4_nhwc": (IntWeightConv2d.from_float(fconv, 4, 32), torch.randn(2, 7, 6, 32, generator=gen(5)).half(),
                           "nhwc", (torch.float16,)),
        "conv_int4_nchw": (IntWeightConv2d.from_float(fconv, 4, 32), torch.randn(2, 32, 7, 6, generator=gen(6)).half(),
                           "nchw", (torch.float16,)),
    }
    out = {}
    for name, (module, x, layout, key) in cases.items():
        plan = module.plan(*key)
        if layout:
            REFERENCES[plan._qgemm_handle] = lambda x, layout, m=module: m._reference_forward(x, layout=layout)
        else:
            REFERENCES[plan._qgemm_handle] = lambda x, layout, m=module: m._reference_forward(x)
        out[name] = (plan, x, layout)
    return out


def call(plan, x, layout, out=None):
    return plan(x, out, layout=layout) if layout else plan(x, out)


class Wrap(torch.nn.Module):
    def __init__(self, plan, layout):
        super().__init__()
        self.plan, self.layout = plan, layout

    def forward(self, x):
        return call(self.plan, x, self.layout).float() * 2


NAMES = ["fpaintb", "w8a8", "fp8", "conv_int8_nhwc", "conv_int8_nchw", "conv_int4_nhwc", "conv_int4_nchw"]


@pytest.mark.parametrize("name", NAMES)
def test_fake_matches_real(fake_gpu, name):
    plan, x, layout = plans()[name]
    eager = call(plan, x, layout)
    real = torch.ops.qgemm.plan_forward(x, plan._qgemm_handle, layout)
    assert torch.equal(real, eager) and real.stride() == eager.stride()
    fake = plan._fake_call(x, None, layout)
    assert (fake.shape, fake.dtype, fake.stride()) == (eager.shape, eager.dtype, eager.stride())
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_static")
    torch.library.opcheck(torch.ops.qgemm.plan_forward.default, (x, plan._qgemm_handle, layout), test_utils=checks)
    out = torch.empty_like(eager)
    torch.library.opcheck(torch.ops.qgemm.plan_forward_out.default, (x, out, plan._qgemm_handle, layout),
                          test_utils=checks)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", NAMES)
def test_compiled_plan_call_equals_eager(fake_gpu, name, backend):
    plan, x, layout = plans()[name]
    eager = call(plan, x, layout).float() * 2
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: call(plan, x, layout).float() * 2, backend=backend, fullgraph=True)
    assert torch.equal(compiled(x), eager)

    def into(x, out):
        y = call(plan, x, layout, out)
        return y, y.float().sum()

    out, expected = torch.zeros_like(call(plan, x, layout)), call(plan, x, layout)
    y, total = torch.compile(into, backend=backend, fullgraph=True)(x, out)
    assert torch.equal(out, expected) and torch.equal(y, expected) and total == expected.float().sum()


@pytest.mark.parametrize("name", ["fpaintb", "w8a8", "fp8"])
def test_dynamic_rows(fake_gpu, name):
    plan, x, _ = plans()[name]
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: plan(x) + 1, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (1, 3, 17):
        xm = torch.randn(m, 256, generator=gen(m)).to(x.dtype)
        assert torch.equal(compiled(xm), plan(xm) + 1)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_export(fake_gpu, name, strict):
    plan, x, layout = plans()[name]
    model = Wrap(plan, layout)
    exported = torch.export.export(model, (x,), strict=strict)
    ops = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.qgemm.plan_forward.default) == 1
    assert torch.equal(exported.module()(x), model(x))


def test_export_out_variant(fake_gpu):
    plan, x, _ = plans()["w8a8"]

    class Into(torch.nn.Module):
        def forward(self, x, out):
            plan(x, out)
            return out + 1

    out = torch.zeros(5, 64, dtype=torch.float16)
    exported = torch.export.export(Into(), (x, out))
    assert "qgemm.plan_forward_out.default" in str(exported.graph)
    out2 = torch.zeros_like(out)
    assert torch.equal(exported.module()(x, out2), plan(x) + 1) and torch.equal(out2, plan(x))


def test_handles_are_weak():
    """The registry keeps no plan alive, and a freed plan's handle names no plan."""
    class Stub:
        pass

    stub = Stub()
    handle = _plan_ops.register(stub)
    assert _plan_ops.plan_of(handle) is stub
    ref = weakref.ref(stub)
    del stub
    gc.collect()
    assert ref() is None and handle not in _plan_ops._PLANS
    with pytest.raises(RuntimeError, match=f"no live plan has handle '{handle}'"):
        _plan_ops.plan_of(handle)
    with pytest.raises(RuntimeError, match=f"no live plan has handle '{handle}'"):
        torch.ops.qgemm.plan_forward(torch.zeros(1, 8), handle, "")


def test_dead_plan_in_a_compiled_graph(fake_gpu):
    plan, x, _ = plans()["w8a8"]
    handle = plan._qgemm_handle
    model = Wrap(plan, "")
    exported = torch.export.export(model, (x,)).module()
    assert torch.equal(exported(x), model(x))
    ref = weakref.ref(plan)
    REFERENCES.clear()  # the modules (each holding its plan)
    del plan, model
    gc.collect()
    assert ref() is None
    with pytest.raises(RuntimeError, match=f"no live plan has handle '{handle}'"):
        exported(x)


def test_each_plan_has_a_distinct_handle(fake_gpu):
    handles = [plan._qgemm_handle for plan, _, _ in plans().values()]
    assert len(set(handles)) == len(handles)
    for plan, _, _ in plans().values():
        assert _plan_ops.plan_of(plan._qgemm_handle) is plan


@pytest.mark.parametrize("name, bad, fragment", [
    ("fpaintb", lambda x: x.float(), "x must have dtype float16; got float32"),
    ("fpaintb", lambda x: x[:, :128].contiguous(), "x must have shape (M >= 1, 256), got (5, 128)"),
    ("w8a8", lambda x: x.t(), "x must be contiguous (row-major)"),
    ("w8a8", lambda x: x.to(torch.int8), "x must have dtype float32, float16, bfloat16; got int8"),
    ("fp8", lambda x: x[None], "x must be 2-D"),
    ("conv_int8_nhwc", lambda x: x.float(), "x must have dtype int8; got float32"),
    ("conv_int8_nhwc", lambda x: x[..., :8].contiguous(), "x must have shape (N >= 1, H >= 1, W >= 1, 16) (NHWC)"),
    ("conv_int8_nchw", lambda x: x[:, :, 0], "x must be 4-D"),
    ("conv_int4_nchw", lambda x: x[:, :16], "x must have shape (N, 32, H, W) with layout 'nchw'"),
    ("conv_int4_nhwc", lambda x: x.bfloat16(), "x must have dtype float16, float32; got bfloat16"),
])
def test_bad_input_raises_while_tracing(fake_gpu, name, bad, fragment):
    """The eager call's checks run in the fake implementation: torch.export raises the error itself,
    torch.compile Dynamo's error carrying its message."""
    plan, x, layout = plans()[name]
    xb = bad(x)
    with pytest.raises((TypeError, ValueError)) as e:
        torch.export.export(Wrap(plan, layout), (xb,))
    assert fragment in str(e.value)
    torch._dynamo.reset()
    with pytest.raises(Exception) as e:
        torch.compile(Wrap(plan, layout), backend="aot_eager", fullgraph=True)(xb)
    assert fragment in str(e.value)


@pytest.mark.parametrize("name, make_out, fragment", [
    ("w8a8", lambda: torch.zeros(5, 32, dtype=torch.float16), "out must have shape (5, 64), got (5, 32)"),
    ("fp8", lambda: torch.zeros(5, 64, dtype=torch.float16), "out must have dtype bfloat16; got float16"),
    ("conv_int8_nchw", lambda: torch.zeros(2, 8, 5, 5, dtype=torch.int8),
     "out must be NHWC in memory (channels_last with layout 'nchw')"),
])
def test_bad_out_raises_while_tracing(fake_gpu, name, make_out, fragment):
    plan, x, layout = plans()[name]

    class Into(torch.nn.Module):
        def forward(self, x, out):
            return call(plan, x, layout, out)

    with pytest.raises((TypeError, ValueError)) as e:
        torch.export.export(Into(), (x, make_out()))
    assert fragment in str(e.value)


def test_choice_is_refused_while_compiling(fake_gpu):
    plan, x, _ = plans()["fpaintb"]
    choice = plan.choice(5)
    torch._dynamo.reset()
    with pytest.raises(Exception) as e:
        torch.compile(lambda x: plan(x, choice=choice), backend="eager", fullgraph=True)(x)
    assert "choice= selects a kernel in eager calls only" in str(e.value)
    conv, xc, _ = plans()["conv_int8_nhwc"]

    class Tuned(torch.nn.Module):
        def forward(self, x):
            return conv(x, choice=conv.choice(2, 9, 9))

    with pytest.raises(ValueError, match="choice= selects a kernel in eager calls only"):
        torch.export.export(Tuned(), (xc,))


def test_quantizers_are_eager_only():
    x = torch.randn(4, 256)

    class Quantize(torch.nn.Module):
        def forward(self, x):
            return qgemm.quantize_activations(x, 128).q

    class QuantizeFp8(torch.nn.Module):
        def forward(self, x):
            return qgemm.quantize_activations_fp8(x).q

    for model, name in ((Quantize(), "qgemm.quantize_activations"), (QuantizeFp8(), "qgemm.quantize_activations_fp8")):
        with pytest.raises(RuntimeError, match=f"{name} runs in eager calls only"):
            torch.export.export(model, (x,))


def test_every_plan_has_its_fake():
    """Each plan class defines its own _fake_call (the compile ops' fake implementation), and its
    __call__ keeps its own signature (the routing is written into it, not wrapped around it)."""
    import inspect
    assert list(inspect.signature(qgemm.FpAIntBPlan.__call__).parameters) == ["self", "x", "out", "choice"]
    for cls in PLAN_CLASSES:
        assert "_fake_call" in cls.__dict__ and not hasattr(cls.__call__, "__wrapped__"), cls


def test_plans_as_arguments(fake_gpu):
    """One compiled function over several plans (recompiled per plan: the handle is a constant, never
    made dynamic as an int would be once a second plan passes)."""
    cases = plans()
    torch._dynamo.reset()
    fn = torch.compile(lambda plan, x: plan(x) + 1, backend="aot_eager", fullgraph=True)
    for name in ("fpaintb", "w8a8", "fp8"):
        plan, x, _ = cases[name]
        assert torch.equal(fn(plan, x), plan(x) + 1)
    dynamic = torch.compile(lambda plan, x: plan(x) + 1, backend="aot_eager", fullgraph=True, dynamic=True)
    for name in ("w8a8", "fpaintb"):
        plan, x, _ = cases[name]
        assert torch.equal(dynamic(plan, x[:3]), plan(x[:3]) + 1)


def test_real_calls_while_compiling_run_eagerly(fake_gpu, monkeypatch):
    """Inductor runs an op's real implementation while compiling when it folds constants (freezing=True
    and a plan applied to a parameter). A plan called then is not being traced: it must run eagerly,
    not route back into its op (which would recurse without end); the quantizers likewise. Here the
    eager path shows itself by its argument error (x of a wrong dtype)."""
    monkeypatch.setattr(_plan_ops, "call", lambda *args, **kwargs: pytest.fail("routed to the op"))
    with torch.compiler._compile_session_context():
        assert torch.compiler.is_compiling() and not _plan_ops.tracing()
        for name in ("fpaintb", "w8a8", "fp8", "conv_int8_nhwc", "conv_int4_nhwc"):
            plan, x, layout = plans()[name]
            bad = x.to(torch.float64)
            with pytest.raises(TypeError, match="x must have dtype"):
                ROUTING_CALLS[type(plan)](plan, bad, **({"layout": layout} if layout else {}))
        for quantize in (lambda x: qgemm.quantize_activations(x, 128), qgemm.quantize_activations_fp8):
            with pytest.raises(TypeError, match="x must have dtype"):
                quantize(torch.zeros(4, 256, dtype=torch.float64))
    plan, x, _ = plans()["w8a8"]  # and through the op, as inductor calls it
    with torch.compiler._compile_session_context():
        assert torch.equal(torch.ops.qgemm.plan_forward(x, plan._qgemm_handle, ""), plan(x))
