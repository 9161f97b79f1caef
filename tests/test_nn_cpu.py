"""qgemm.nn on the CPU: each module's reference path against math written independently from the
quantized tensors, state_dict round trips (torch.save and safetensors, into freshly built modules
on the CPU and on the meta device), dtype conversions that leave the quantized buffers alone,
lazy plans dropped on move and load, and argument errors."""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn.functional as F

import qgemm
from qgemm import _checks, reference, safetensors_io, wq_format
from qgemm.conv import quant as conv_quant
from qgemm.fp8 import plan as fp8_mod
from qgemm.fpaintb import plan as fpaintb_mod
from qgemm.w8a8 import plan as w8a8_mod
from qgemm.nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, W8A8Linear


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float32):
    return (torch.randn(*shape, generator=gen(seed)) * 1.5 + 0.3).to(dtype)


def linear(k, n, bias=True, seed=0, dtype=torch.float32):
    layer = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=gen(seed)) * 0.05)
        if bias:
            layer.bias.copy_(torch.randn(n, generator=gen(seed + 1)) * 0.1)
    return layer.to(dtype)


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def cosine(a, b) -> float:
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


# --- module builders used by several tests ----------------------------------------------------------

def quant_linear(bits=4, group_size=128, symmetric=True, k=256, n=64, bias=True):
    return QuantLinear.from_float(linear(k, n, bias, dtype=torch.float16), bits, group_size, symmetric)


def gptq_act_order(k=256, n=64, g=64, seed=3):
    gen_ = gen(seed)
    u = torch.randint(0, 16, (k, n), generator=gen_, dtype=torch.uint8)
    scales = (torch.rand(k // g, n, generator=gen_) * 0.02 + 0.005).half()
    zeros = torch.randint(1, 16, (k // g, n), generator=gen_, dtype=torch.uint8)
    g_idx = (torch.randperm(k, generator=gen_) // g).to(torch.int32)
    qweight, qzeros, _, _ = wq_format.pack_gptq(IntWeightOrig(u, scales, zeros, g))
    return qweight, qzeros, scales, g_idx, u, zeros


def IntWeightOrig(u, scales, zeros, g):
    return wq_format.IntWeight(u, scales, zeros, 4, g, None)


def modules():
    """One of each module, built from float layers (CPU), with the input each takes."""
    conv = torch.nn.Conv2d(16, 8, 3, stride=2, padding=1)
    fconv = torch.nn.Conv2d(32, 16, 3, padding=1)
    return {
        "int4": (quant_linear(4, 128, True), randn(3, 256, seed=1, dtype=torch.float16)),
        "int4_zero": (quant_linear(4, 64, False), randn(3, 256, seed=1, dtype=torch.bfloat16)),
        "int8": (quant_linear(8, -1, True), randn(2, 5, 256, seed=1, dtype=torch.float16)),
        "gptq_act_order": (QuantLinear.from_gptq(*gptq_act_order()[:4]), randn(4, 256, seed=2, dtype=torch.float16)),
        "fp8": (Fp8Linear.from_float(linear(256, 64)), randn(3, 256, seed=1)),
        "w8a8_sym": (W8A8Linear.from_float(linear(256, 64), 128, "symmetric"), randn(3, 256, seed=1)),
        "w8a8_asym": (W8A8Linear.from_float(linear(256, 64), 64, "asymmetric"), randn(3, 256, seed=1)),
        "conv_int8": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5, "relu"), randn(2, 9, 9, 16, seed=1)),
        "conv_int8_float": (QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5, layout="nchw", float_output=True),
                            randn(2, 16, 9, 9, seed=1)),
        "conv_int4": (IntWeightConv2d.from_float(fconv, 4, 32), randn(2, 32, 7, 6, seed=1)),
    }


def fresh_like(module):
    """The same module type and configuration built by its constructor, zero-filled."""
    if isinstance(module, QuantLinear):
        return QuantLinear(module.in_features, module.out_features, module.bias is not None, bits=module.bits,
                           group_size=module.group_size, zero_point=module.qzeros is not None,
                           act_order=module.g_idx is not None, scale_dtype=module.scales.dtype,
                           bias_dtype=None if module.bias is None else module.bias.dtype)
    if isinstance(module, Fp8Linear):
        return Fp8Linear(module.in_features, module.out_features, module.bias is not None)
    if isinstance(module, W8A8Linear):
        return W8A8Linear(module.in_features, module.out_features, module.bias is not None,
                          block_size=module.block_size, scheme=module.scheme, activation=module.activation)
    if isinstance(module, QuantConv2d):
        return QuantConv2d(module.in_channels, module.out_channels, module.kernel_size, module.stride, module.padding,
                           module.dilation, module.bias is not None, activation=module.activation,
                           layout=module.layout, float_output=module.float_output)
    return IntWeightConv2d(module.in_channels, module.out_channels, module.kernel_size, module.stride, module.padding,
                           module.dilation, module.bias is not None, bits=module.bits, block_size=module.block_size,
                           activation=module.activation)


# --- reference paths against independent math -----------------------------------------------------------

@pytest.mark.parametrize("bits,group_size,symmetric", [(4, 128, True), (4, 32, False), (8, -1, True), (8, 64, False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_quant_linear_reference(bits, group_size, symmetric, dtype):
    """QuantLinear on the CPU == x @ (RTN-dequantized W)^T + b in float64, rounded once to x's dtype
    (scales in the weight's dtype are exact in float16 weights; in bfloat16 the kernel reads them
    in x's dtype, which the reference does too)."""
    lin = linear(256, 72, dtype=dtype)
    module = QuantLinear.from_float(lin, bits, group_size, symmetric)
    logical = wq_format.quantize_rtn(lin.weight.detach(), bits, group_size, symmetric)
    assert torch.equal(module.int_weight().codes(), logical.u)
    assert torch.equal(module.scales, logical.scale)
    x = randn(2, 3, 256, seed=5, dtype=dtype)
    expected = x.double() @ logical.dequantize() + lin.bias.detach().double()
    y = module(x)
    assert y.shape == (2, 3, 72) and y.dtype == dtype
    assert torch.equal(y, expected.to(dtype))
    # RTN error only, against the float layer
    assert rel(y, lin(x)) < (0.15 if bits == 4 else 0.01)


def test_quant_linear_act_order_reference():
    """GPTQ act-order: the module keeps GPTQ's g_idx and computes with the group of each input feature."""
    qweight, qzeros, scales, g_idx, u, zeros = gptq_act_order()
    module = QuantLinear.from_gptq(qweight, qzeros, scales, g_idx)
    assert torch.equal(module.g_idx, g_idx)
    # w[k, n] = (u[k, n] - zero[g_idx[k], n]) * scale[g_idx[k], n], straight from the definition
    gi = g_idx.long()
    w = (u.double() - zeros.double()[gi]) * scales.double()[gi]
    x = randn(5, 256, seed=9, dtype=torch.float16)
    assert torch.equal(module(x), (x.double() @ w).half())


@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu"])
def test_quant_linear_activation(activation):
    module = QuantLinear.from_float(linear(256, 64, dtype=torch.float16), 4, 128, activation=activation)
    x = randn(3, 256, seed=4, dtype=torch.float16)
    pre = x.double() @ module.dequantize() + module.bias.double()
    act = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}[activation]
    assert torch.equal(module(x), act(pre).half())


def test_fp8_linear_reference():
    lin = linear(384, 136)
    module = Fp8Linear.from_float(lin)
    assert module.weight.dtype == torch.float8_e4m3fn and module.weight_scale_inv.shape == (2, 3)
    x = randn(7, 384, seed=2, dtype=torch.bfloat16)
    y = module(x)
    assert y.dtype == torch.bfloat16 and y.shape == (7, 136)
    # from the definitions: x and W each dequantized from their FP8 blocks
    q, sx = reference.quantize_fp8_groups(x)
    xd = q.double() * sx[:, :7].t().double().repeat_interleave(128, dim=1)
    wd = module.weight.double() * module.weight_scale_inv.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:136]
    assert torch.equal(y, (xd @ wd.t() + lin.bias.detach().double()).bfloat16())
    assert rel(y, lin(x.float())) < 0.06
    assert module(x.float()).dtype == torch.bfloat16 and module(x.half()).dtype == torch.float16


@pytest.mark.parametrize("scheme,block_size", [("symmetric", 128), ("asymmetric", 64), ("asymmetric", 32)])
def test_w8a8_linear_reference(scheme, block_size):
    lin = linear(256, 48)
    module = W8A8Linear.from_float(lin, block_size, scheme, activation="relu")
    x = randn(5, 256, seed=3)
    y = module(x)
    exact = F.relu(lin(x)).double()
    assert y.dtype == torch.float32 and rel(y, exact) < 0.02
    weight = qgemm.W8A8Weight.from_float(lin.weight.detach(), block_size, scheme=scheme)
    assert torch.equal(module.weight, weight.qweight) and torch.equal(module.dequantize(), weight.dequantize())
    assert module(x.half()).dtype == torch.float16


def test_w8a8_linear_from_block_int8():
    lin = linear(256, 136)
    q, scale_inv = reference.quantize_weight_blocks_symmetric(lin.weight.detach(), 128)
    module = W8A8Linear.from_block_int8(q, scale_inv.bfloat16(), lin.bias.detach())
    assert module.weight_scale_inv.dtype == torch.float32
    x = randn(3, 256, seed=6)
    assert rel(module(x), lin(x)) < 0.02


def test_quant_conv2d_reference_and_layouts():
    conv = torch.nn.Conv2d(16, 8, 3, stride=2, padding=1)
    with torch.no_grad():  # seeded, as linear() is: the default init draws from the global RNG,
        # whose state depends on which tests ran before (after seven other test files it drew a
        # layer whose drop-in error was 0.12; 20 seeded draws gave 0.038-0.046)
        conv.weight.copy_(torch.rand(8, 16, 3, 3, generator=gen(3)) * (2 / 12) - 1 / 12)
        conv.bias.copy_(torch.rand(8, generator=gen(4)) * (2 / 12) - 1 / 12)
    module = QuantConv2d.from_float(conv, 0.05, -3, 0.1, 5, "relu")
    x_q = torch.randint(-128, 128, (2, 9, 9, 16), generator=gen(1), dtype=torch.int8)
    y = module(x_q)
    w_q, scale = conv_quant.quantize_weight(conv.weight)
    quant = qgemm.ConvInt8Quant(0.05, -3, scale, 0.1, 5, "relu")
    assert torch.equal(y, reference.conv2d_int8(x_q, w_q, conv.bias.detach(), quant, (2, 2), (1, 1)))
    assert torch.equal(module(x_q.permute(0, 3, 1, 2), layout="nchw"), y.permute(0, 3, 1, 2))
    x = randn(2, 16, 9, 9, seed=2) * 0.5
    drop_in = QuantConv2d.from_float(conv, 0.02, 0, 0.05, -100, layout="nchw", float_output=True)
    out = drop_in(x)
    assert out.dtype == torch.float32 and out.shape == (2, 8, 5, 5)
    assert rel(out, conv(x)) < 0.05


@pytest.mark.parametrize("bits,block_size,activation", [(4, 32, "none"), (8, -1, "relu6"), (4, 16 * 2, "silu")])
def test_int_weight_conv2d_reference(bits, block_size, activation):
    conv = torch.nn.Conv2d(32, 16, 3, stride=1, padding=2, dilation=2)
    module = IntWeightConv2d.from_float(conv, bits, block_size, activation=activation)
    x = randn(2, 32, 8, 7, seed=3)
    weight = qgemm.IntConvWeight.from_float(conv.weight, bits, block_size)
    w = weight.dequantize(torch.float16).permute(0, 3, 1, 2)
    pre = F.conv2d(x.half().double(), w, conv.bias.detach().half().double(), 1, 2, 2)
    act = {"none": lambda t: t, "relu6": lambda t: t.clamp(0, 6), "silu": F.silu}[activation]
    y = module(x)
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, act(pre).float())
    assert torch.equal(module(x.permute(0, 2, 3, 1).contiguous(), layout="nhwc"), y.permute(0, 2, 3, 1))


# --- state_dict -------------------------------------------------------------------------------------------

EXPECTED_KEYS = {
    "int4": {"qweight", "scales", "bias"},
    "int4_zero": {"qweight", "scales", "qzeros", "bias"},
    "gptq_act_order": {"qweight", "scales", "qzeros", "g_idx"},
    "fp8": {"weight", "weight_scale_inv", "bias"},
    "w8a8_sym": {"weight", "weight_scale_inv", "bias"},
    "w8a8_asym": {"weight", "weight_scale", "weight_offset", "bias"},
    "conv_int8": {"weight", "weight_scale", "bias", "input_scale", "input_zero", "output_scale", "output_zero"},
    "conv_int4": {"weight", "weight_scale", "weight_offset", "bias"},
}


@pytest.mark.parametrize("name", list(modules()))
def test_state_dict_round_trip(name, tmp_path):
    """Saved (torch.save and safetensors) and loaded into a fresh module built by the constructor
    (CPU, and meta with assign=True): the same buffers and bit-identical outputs."""
    module, x = modules()[name]
    state = module.state_dict()
    if name in EXPECTED_KEYS:
        assert set(state) == EXPECTED_KEYS[name]
    expected = module(x)

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = fresh_like(module)
    assert not torch.equal(fresh(x), expected)
    fresh.load_state_dict(torch.load(buffer))
    assert torch.equal(fresh(x), expected)

    safetensors_io.save_file(state, tmp_path / "m.safetensors")
    with torch.device("meta"):
        meta = fresh_like(module)
    assert meta.device.type == "meta"
    with pytest.raises(RuntimeError, match="is on the meta device"):
        meta(x)
    meta.load_state_dict(safetensors_io.load_file(tmp_path / "m.safetensors"), assign=True)
    assert torch.equal(meta(x), expected)

    with torch.device("meta"):
        empty = fresh_like(module)
    empty.to_empty(device="cpu")
    empty.load_state_dict(state)
    assert torch.equal(empty(x), expected)


def test_load_state_dict_rejects_other_shapes():
    module = quant_linear(4, 128)
    other = QuantLinear(256, 64, bits=4, group_size=64)
    with pytest.raises(RuntimeError, match="size mismatch for scales"):
        other.load_state_dict(module.state_dict())
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "qzeros"'):
        QuantLinear(256, 64, bits=4, group_size=128, zero_point=True).load_state_dict(module.state_dict())


# --- dtype conversions and moves ---------------------------------------------------------------------------

@pytest.mark.parametrize("convert, act", [(lambda m: m.half(), torch.float16), (lambda m: m.bfloat16(), torch.bfloat16),
                                          (lambda m: m.to(torch.float16), torch.float16),
                                          (lambda m: m.float(), None), (lambda m: m.double(), None),
                                          (lambda m: m.to("cpu"), None)])
def test_conversions_keep_quantized_dtypes(convert, act):
    for name, (module, x) in modules().items():
        before = {k: v.dtype for k, v in module.state_dict().items()}
        values = {k: v.clone() for k, v in module.state_dict().items() if k != "bias"}
        assert convert(module) is module
        after = module.state_dict()
        for key, dtype in before.items():
            if key == "bias" and act is not None and not isinstance(module, QuantConv2d):
                assert after[key].dtype == act, (name, key)     # the bias follows, as an nn.Linear's would
            elif key == "bias" and act is None and not isinstance(module, QuantConv2d):
                assert after[key].dtype in (dtype, torch.float32), (name, key)
            else:
                assert after[key].dtype == dtype, (name, key)  # codes, scales, zero points, calibration
        for key, value in values.items():
            assert torch.equal(after[key], value), (name, key)
        if act is not None:
            assert module.act_dtype == act


def test_half_model_runs_in_half():
    """A model converted with .half() keeps its quantized layer intact and runs in float16."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    qgemm.quantize_(model, qgemm.Int4WeightOnlyConfig(group_size=64))
    codes = model[0].qweight.clone()
    model.half()
    assert torch.equal(model[0].qweight, codes) and model[0].scales.dtype == torch.float16
    y = model(randn(2, 256, dtype=torch.float16))
    assert y.dtype == torch.float16
    fp8 = Fp8Linear.from_float(linear(256, 64)).bfloat16()
    assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.weight_scale_inv.dtype == torch.float32
    assert fp8(randn(2, 256)).dtype == torch.bfloat16  # float32 input: the converted dtype
    conv = IntWeightConv2d.from_float(torch.nn.Conv2d(32, 16, 1)).bfloat16()
    assert conv._act_dtype(randn(1, 32, 2, 2)) == torch.bfloat16


# --- lazy plans -----------------------------------------------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors pretend to live on an sm90 GPU, so plans can be made (never launched)."""
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for mod in (fpaintb_mod, fp8_mod, w8a8_mod):
        monkeypatch.setattr(mod, "sm_count", lambda device: 132)


def test_plans_are_lazy_and_dropped_on_move_and_load(fake_gpu):
    module, x = modules()["int4"]
    module(x)  # the reference path makes no plan
    assert module._plans == {}
    plan = module.plan(torch.float16)
    assert isinstance(plan, qgemm.FpAIntBPlan) and plan.weight.packed is module.qweight
    assert module.plan(torch.float16) is plan and module.plan(torch.bfloat16) is not plan
    clone = copy.deepcopy(module)  # plans (locks, pointers) are not copied
    assert clone._plans == {} and len(module._plans) == 2 and torch.equal(clone.qweight, module.qweight)
    restored = pickle.loads(pickle.dumps(module))
    assert restored._plans == {} and torch.equal(restored(x), module(x))
    module.to("cpu")
    assert module._plans == {}
    module.plan(torch.float16)
    module.load_state_dict(module.state_dict())
    assert module._plans == {}
    for name in ("fp8", "w8a8_sym", "w8a8_asym"):
        module, _ = modules()[name]
        plan = module.plan(torch.bfloat16)
        assert plan.weight.qweight is module.weight
        module.half()
        assert module._plans == {}


def test_conv_plans(fake_gpu, monkeypatch):
    from qgemm.conv import int8 as conv_mod
    monkeypatch.setattr(conv_mod, "sm_count", lambda device: 132)
    module, _ = modules()["conv_int8"]
    plan = module.plan()
    assert isinstance(plan, qgemm.ConvInt8Plan) and plan.stride == (2, 2) and plan.quant.input_zero == -3
    module.set_calibration(0.5, 1, 0.25, -2)
    assert module._plans == {} and module.plan().quant.output_zero == -2


# --- argument errors --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, exc, fragment", [
    (lambda: QuantLinear(256, 64, bits=3), ValueError, "bits must be 4 or 8, got 3"),
    (lambda: QuantLinear(200, 64), ValueError, "K must be a positive multiple of 64"),
    (lambda: QuantLinear(256, 60), ValueError, "N must be a positive multiple of 8"),
    (lambda: QuantLinear(256, 64, group_size=96), ValueError, "group_size must be one of (32, 64, 128, 256)"),
    (lambda: QuantLinear(256, 64, activation="tanh"), ValueError, "activation must be one of"),
    (lambda: QuantLinear(256, 64, scale_dtype=torch.float32), TypeError, "scale_dtype must be one of"),
    (lambda: Fp8Linear(200, 64), ValueError, "in_features (K) must be a positive multiple of 128"),
    (lambda: Fp8Linear(256, 60), ValueError, "out_features (N) must be a positive multiple of 8"),
    (lambda: Fp8Linear(256, 64, out_dtype=torch.float32), TypeError, "out_dtype must be torch.bfloat16"),
    (lambda: W8A8Linear(256, 64, block_size=48), ValueError, "block_size must be one of"),
    (lambda: W8A8Linear(256, 64, scheme="per_tensor"), ValueError, "scheme must be one of"),
    (lambda: W8A8Linear(256, 36, scheme="symmetric"), ValueError, "multiple of 8 for the symmetric scheme"),
    (lambda: QuantConv2d(16, 8, 3, input_zero=300), ValueError, "input_zero must be an int in"),
    (lambda: QuantConv2d(16, 8, 3, layout="nchwc"), ValueError, "layout must be one of"),
    (lambda: IntWeightConv2d(30, 16, 3), ValueError, "in_channels (C) must be a multiple of 8"),
    (lambda: IntWeightConv2d(32, 16, 3, block_size=48), ValueError, "block_size must be one of"),
])
def test_constructors_reject(make, exc, fragment):
    with pytest.raises(exc) as e:
        make()
    assert fragment in str(e.value)


def test_forward_rejects():
    module, _ = modules()["int4"]
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 256\), got \(2, 128\)"):
        module(torch.zeros(2, 128, dtype=torch.float16))
    with pytest.raises(TypeError, match="x must be float16 or bfloat16, got torch.float32"):
        module(torch.zeros(2, 256))
    with pytest.raises(TypeError, match="weight must be a qgemm.IntBWeight, got Tensor"):
        QuantLinear.from_weight(torch.zeros(8, 8))
    with pytest.raises(TypeError, match="linear must be a torch.nn.Linear, got Conv2d"):
        W8A8Linear.from_float(torch.nn.Conv2d(1, 1, 1))
    conv, _ = modules()["conv_int4"]
    with pytest.raises(ValueError, match="x must have 32 channels"):
        conv(torch.zeros(1, 16, 4, 4))
