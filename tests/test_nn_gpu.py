"""qgemm.nn modules on the GPU: each module's kernel path against its own reference path (the same
buffers on the CPU, float64 math from the same quantized operands), state_dict round trips through
the meta device, moves that rebuild plans, conversions that keep the quantized buffers, CUDA graphs,
two streams, and quantize_ on a small model.

Bounds (||gpu - reference|| / ||reference||), as in the families' own GPU tests:
  * QuantLinear / IntWeightConv2d: 2e-3 float16, 1e-2 bfloat16: FP32 accumulation of exact
    products of dequantized codes, then one rounding of the output (2^-11 / 2^-8 relative per element).
  * Fp8Linear: 5e-3 bfloat16, 2e-3 float16: the CPU reference quantizes x with the activation
    kernel's float32 arithmetic (reference.quantize_fp8_groups, bit-exact), so only the FP32
    promotion and the output rounding differ.
  * W8A8Linear: 1e-3 float16, 8e-3 bfloat16, 1e-4 float32 (test_w8a8_sm90_gpu.py's bounds; the
    activation quantizers are bit-exact with reference.quantize_blocks[_symmetric]).
  * QuantConv2d: int8 codes within 1 of the float64 definition (the epilogue requantizes in float32),
    and at most 1% of them off.
Outputs are poisoned (NaN) before each call; inputs are fresh random numbers with a non-zero mean.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import qgemm
from qgemm.nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, W8A8Linear

from gpu_util import capture_graph, on_two_streams, poison_allocator, randn, rel_err

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]
needs_sm90 = pytest.mark.skipif(not SM90, reason="FP8 and symmetric W8A8 kernels need an sm90 GPU")

BOUND = {
    "int": {torch.float16: 2e-3, torch.bfloat16: 1e-2},
    "fp8": {torch.bfloat16: 5e-3, torch.float16: 2e-3},
    "w8a8": {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-4},
}
ODD_M = (1, 3, 17, 1000)


def float_linear(k, n, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=g) * 0.05 + 0.01)
        if bias:
            layer.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return layer


def check_against_reference(module_gpu, x, bound, **kwargs):
    """module on the GPU vs a CPU copy's reference path on the same x."""
    poison_allocator()
    y = module_gpu(x, **kwargs)
    torch.cuda.synchronize()
    ref = copy.deepcopy(module_gpu).cpu()(x.cpu(), **kwargs)
    assert y.dtype == ref.dtype and y.shape == ref.shape
    assert rel_err(y, ref) < bound
    return y


LINEAR_CASES = {
    "int4_g128": (lambda: QuantLinear.from_float(float_linear(1024, 520), 4, 128), "int", False),
    "int4_g32_zero_silu": (lambda: QuantLinear.from_float(float_linear(512, 264), 4, 32, False, "silu"), "int", False),
    "int8_channel": (lambda: QuantLinear.from_float(float_linear(768, 256), 8, -1), "int", False),
    "fp8": (lambda: Fp8Linear.from_float(float_linear(512, 392)), "fp8", True),
    "w8a8_sym": (lambda: W8A8Linear.from_float(float_linear(512, 264), 128, "symmetric"), "w8a8", True),
    "w8a8_asym": (lambda: W8A8Linear.from_float(float_linear(512, 264), 64, "asymmetric", "relu"), "w8a8", False),
}


@pytest.mark.parametrize("case", list(LINEAR_CASES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", ODD_M)
def test_linear_modules_match_reference(case, dtype, m):
    make, family, sm90_only = LINEAR_CASES[case]
    if sm90_only and not SM90:
        pytest.skip("sm90 kernels")
    if case == "w8a8_asym" and not SM90 and dtype == torch.bfloat16:
        pytest.skip("the chained reference path (pre-sm90) has no bfloat16 output")
    module = make().cuda()
    x = randn(m, module.in_features, dtype=dtype, seed=m)
    check_against_reference(module, x, BOUND[family][dtype])


def test_conv_modules_match_reference():
    conv = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1).cuda()
    layer = QuantConv2d.from_float(conv, 0.02, -5, 0.05, 3, "relu").cuda()
    x_q = torch.randint(-128, 128, (2, 17, 15, 32), dtype=torch.int8, device="cuda")
    poison_allocator()
    y = layer(x_q)
    ref = copy.deepcopy(layer).cpu()(x_q.cpu())
    diff = (y.cpu().int() - ref.int()).abs()
    assert int(diff.max()) <= 1 and diff.float().mean().item() < 0.01
    drop_in = QuantConv2d.from_float(conv, 0.02, -5, 0.05, 3, layout="nchw", float_output=True)
    x = randn(2, 32, 17, 15) * 0.3
    assert drop_in(x).dtype == torch.float32 and drop_in(x).shape == (2, 64, 9, 8)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        module = IntWeightConv2d.from_float(torch.nn.Conv2d(64, 32, 3, padding=2, dilation=2), 4, 32, activation="relu")
        module = module.cuda()
        x = randn(2, 64, 12, 10, dtype=dtype, seed=3)
        check_against_reference(module, x, BOUND["int"].get(dtype, 2e-3))


@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_state_dict_round_trip_through_meta(case):
    make, family, sm90_only = LINEAR_CASES[case]
    if sm90_only and not SM90:
        pytest.skip("sm90 kernels")
    module = make().cuda()
    x = randn(5, module.in_features, dtype=torch.float16, seed=7)
    expected = module(x)
    with torch.device("meta"):
        fresh = type(module)(module.in_features, module.out_features, module.bias is not None,
                             **_config(module))
    fresh.load_state_dict(module.state_dict(), assign=True)
    assert fresh.device.type == "cuda" and torch.equal(fresh(x), expected)
    with torch.device("meta"):
        moved = type(module)(module.in_features, module.out_features, module.bias is not None, **_config(module))
    moved.load_state_dict({k: v.cpu() for k, v in module.state_dict().items()}, assign=True)
    assert moved.device.type == "cpu"
    assert torch.equal(moved.cuda()(x), expected)   # plan made on the first CUDA forward


def _config(module):
    if isinstance(module, QuantLinear):
        return dict(bits=module.bits, group_size=module.group_size, zero_point=module.qzeros is not None,
                    activation=module.activation, scale_dtype=module.scales.dtype, bias_dtype=module.bias.dtype)
    if isinstance(module, W8A8Linear):
        return dict(block_size=module.block_size, scheme=module.scheme, activation=module.activation)
    return {}


def test_moves_rebuild_plans_and_conversions_keep_buffers():
    module = QuantLinear.from_float(float_linear(512, 256), 4, 128).cuda()
    x = randn(3, 512, dtype=torch.float16)
    y = module(x)
    assert len(module._plans) == 1
    module.cpu()
    assert module._plans == {} and module.qweight.device.type == "cpu"
    module.cuda()
    assert torch.equal(module(x), y)
    if SM90:
        fp8 = Fp8Linear.from_float(float_linear(512, 256)).cuda()
        y = fp8(x.bfloat16())
        fp8.half()
        assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.weight_scale_inv.dtype == torch.float32
        y16 = fp8(x.bfloat16())
        assert y16.dtype == torch.bfloat16 and rel_err(y16, y) < 5e-3  # the bias went through float16


def test_cuda_graph_and_two_streams():
    module = QuantLinear.from_float(float_linear(1024, 512), 4, 128).cuda()
    x = randn(8, 1024, dtype=torch.float16, seed=11)
    expected = module(x)
    static_x = x.clone()
    graph, static_y = capture_graph(module, static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, expected)
    other = randn(8, 1024, dtype=torch.float16, seed=12)
    y1, y2 = on_two_streams(module, x, other)
    assert torch.equal(y1, expected) and torch.equal(y2, module(other))


def test_quantize_model_on_gpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 1024),
                                torch.nn.Linear(1024, 30)).cuda().half()
    x = randn(4, 1024, dtype=torch.float16, seed=2)
    with torch.no_grad():
        expected = model(x)
    configs = [(qgemm.Int4WeightOnlyConfig(), 0.98), (qgemm.Int8WeightOnlyConfig(), 0.999)]
    if SM90:
        configs += [(qgemm.W8A8BlockConfig(), 0.99), (qgemm.Fp8BlockwiseConfig(), 0.99)]
    for config, min_cos in configs:
        quantized = copy.deepcopy(model)
        report = qgemm.quantize_(quantized, config)
        assert report.replaced == ["0", "2"] and list(report.skipped) == ["3"]
        y = quantized(x)
        cos = F.cosine_similarity(y.double().flatten(), expected.double().flatten(), dim=0).item()
        assert cos > min_cos, (config, cos)
        reference = copy.deepcopy(quantized).cpu()(x.cpu())
        assert rel_err(y, reference) < 1e-2, config


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_fullgraph(mode):
    """Each module is one qgemm::module_forward op under torch.compile (qgemm/nn/_ops.py): inductor,
    fullgraph, and CUDA graphs with mode="reduce-overhead"; outputs equal eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 1024)).cuda().half()
    configs = [qgemm.Int4WeightOnlyConfig(), qgemm.Int8WeightOnlyConfig()]
    if SM90:
        configs += [qgemm.W8A8BlockConfig(), qgemm.Fp8BlockwiseConfig()]
    for config in configs:
        quantized = copy.deepcopy(model)
        qgemm.quantize_(quantized, config)
        torch._dynamo.reset()
        compiled = torch.compile(quantized, fullgraph=True, mode=mode)
        for m in (1, 16, 1):
            x = randn(m, 1024, dtype=torch.float16, seed=m)
            for _ in range(3):  # warm-up, recording, replay under reduce-overhead
                y = compiled(x)  # the first call makes the plan, inside the warm-up (outside_graph_pools)
            assert torch.equal(y, quantized(x)), (config, m)
    conv = IntWeightConv2d.from_float(torch.nn.Conv2d(64, 32, 3, padding=1), 4, 32).cuda()
    x = randn(2, 64, 12, 10, dtype=torch.float16, seed=3)
    torch._dynamo.reset()
    compiled = torch.compile(conv, fullgraph=True, mode=mode)
    for _ in range(3):
        y = compiled(x)
    assert torch.equal(y, conv(x))
