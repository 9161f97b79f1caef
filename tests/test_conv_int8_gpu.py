"""Int8 conv2d on the GPU against the exact integer path and the float64 definition.

Each case checks two things:
  * bit-exact against conv_quant.requantize applied to the exact integer accumulator, with the
    plan's own M, FusedBias and border correction. The accumulator is exact on both sides (int32
    on the GPU; float64 on the CPU, where every product is at most 2^14 and the sums stay far below
    2^53), and the epilogue performs requantize's float32 operations in the same order
    (templates/include/qgemm/conv/requant_visitor.h; sm90_requant.h for the Sm90 kernels), so nothing
    may differ.
  * within 1 LSB of reference.conv2d_int8 (dequantize, convolve with real-valued zero padding, bias,
    activation, requantize, all in float64) everywhere, and equal on at least 99% of the outputs.
    The integer path rounds M and FusedBias to float32 and computes in float32: where the exact
    result lies within that rounding of a .5 tie, the two round to neighbouring integers. With the
    border correction the padded outputs are exact too, so Z_I far from 0 and padding up to 3 keep
    the same bound (tests/test_conv_quant_cpu.py shows it on the CPU).
Outputs are poisoned: every case runs twice, into outputs pre-filled with two different values, and
both must equal the expected output; an element the kernel does not write keeps a sentinel in at
least one of them (int8 has no NaN to poison with).
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.conv import ConvInt8Sm90Spec
from qgemm import reference
from qgemm.conv import quant as conv_quant
from qgemm.conv.quant import ConvInt8Quant

from test_conv_quant_cpu import accumulate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

POISON = (0x55, -0x56)

# (N, H, W, Ci, Co, kernel, stride, padding, dilation)
GEOMETRIES = [
    (2, 14, 14, 64, 64, 1, 1, 0, 1),     # 1x1
    (2, 14, 13, 32, 48, 1, 2, 0, 1),     # 1x1, stride 2
    (2, 9, 11, 16, 32, 3, 1, 1, 1),      # 3x3
    (3, 15, 15, 32, 16, 3, 2, 1, 1),     # 3x3, stride 2
    (2, 12, 10, 16, 24, 3, 1, 1, 2),     # dilation 2
    (1, 17, 16, 48, 32, 3, 2, 3, 2),     # stride 2, padding 3, dilation 2
    (1, 5, 9, 16, 16, 3, 1, 3, 1),       # padding 3 on a 3x3: taps entirely in the border
    (2, 23, 23, 16, 64, 7, 2, 3, 1),     # 7x7, stride 2, padding 3
    (2, 20, 18, 3, 8, 7, 2, 3, 1),       # RGB input, stride 2: folded to 16 channels, 4x4 stride 1
    (1, 30, 30, 3, 64, 7, 2, 3, 1),      # ResNet-50's first layer (3 -> 64, 7x7 stride 2) on a smaller image
    (2, 19, 17, 3, 8, 7, 1, 3, 1),       # RGB input, stride 1: 3 channels padded to 4 (alignment 4)
    (1, 12, 11, 5, 12, 3, 1, 1, 1),      # 5 input channels, padded to 8
    (2, 10, 10, 13, 7, 3, 1, 1, 1),      # odd channel counts: alignment 1 (Co = 7: no padding)
    (1, 9, 9, 12, 20, 3, 1, 1, 1),       # channels a multiple of 4: alignment 4
    (4, 28, 28, 64, 128, 3, 1, 1, 1),    # several tiles in M and N
]


def make_case(geometry, input_zero, activation, seed):
    n, h, w, ci, co, k, s, p, d = geometry
    g = torch.Generator().manual_seed(seed)
    x_q = torch.randint(-128, 128, (n, h, w, ci), generator=g, dtype=torch.int8)
    w_q = torch.randint(-127, 128, (co, k, k, ci), generator=g, dtype=torch.int8)
    bias = torch.randn(co, generator=g) * 2
    weight_scale = torch.rand(co, generator=g) * 0.01 + 0.001
    quant = ConvInt8Quant(0.02, input_zero, weight_scale, 0.5, -7, activation)
    return x_q, w_q, bias, quant, dict(stride=(s, s), padding=(p, p), dilation=(d, d))


def expected_outputs(plan, x_q, w_q, bias, quant, conv):
    """(what the kernel must produce bit for bit, the float64 definition), both int8 NHWC on the CPU."""
    h, w = x_q.shape[1:3]
    acc = accumulate(x_q, w_q, conv["stride"], conv["padding"], conv["dilation"])
    border = conv_quant.border_correction(w_q, (h, w), conv["stride"], conv["padding"], conv["dilation"],
                                          quant.input_zero)
    exact = conv_quant.requantize(acc, plan.multiplier.cpu(), plan.fused_bias.cpu(), border, quant)
    ref = reference.conv2d_int8(x_q, w_q, bias, quant, **conv)
    return exact, ref


def run_poisoned(plan, x, out_shape, **kwargs):
    """The plan's output into two differently poisoned buffers."""
    outs = []
    for value in POISON:
        out = torch.full(out_shape, value, dtype=torch.int8, device="cuda")
        plan(x, out, **kwargs)
        outs.append(out)
    torch.cuda.synchronize()
    return [o.cpu() for o in outs]


def assert_matches(outs, exact, ref):
    for out in outs:
        assert torch.equal(out, exact), f"{(out != exact).sum().item()} outputs differ from the integer path"
    diff = (outs[0].int() - ref.int()).abs()
    assert diff.max().item() <= 1, "more than 1 LSB from the float64 definition"
    assert (diff == 0).float().mean().item() >= 0.99


def check_case(geometry, input_zero, activation, seed, choice=None):
    x_q, w_q, bias, quant, conv = make_case(geometry, input_zero, activation, seed)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    exact, ref = expected_outputs(plan, x_q, w_q, bias, quant, conv)
    outs = run_poisoned(plan, x_q.cuda(), tuple(exact.shape), choice=choice)
    assert_matches(outs, exact, ref)
    return plan


@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
@pytest.mark.parametrize("input_zero", [-100, 0, 57])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "n{}_{}x{}_c{}_k{}_f{}_s{}_p{}_d{}".format(*g))
def test_conv_matches_integer_path_and_reference(geometry, input_zero, activation):
    check_case(geometry, input_zero, activation, seed=sum(geometry) + input_zero)


def _catalog_kernels():
    cap = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    target = qgemm._runtime.target_sm_for(cap) or 90
    return catalog(target, "conv2d_int8")  # the Sm90 family has its own test below


# Per alignment, a case with tails everywhere: M not a multiple of any tile, output channels past
# the 128-wide tiles, input channels not filling the last 64-wide K step.
CATALOG_CASES = {
    16: (2, 20, 19, 80, 144, 3, 2, 1, 1),
    4: (2, 13, 12, 20, 12, 3, 1, 2, 2),
    1: (2, 11, 10, 5, 7, 5, 2, 2, 1),
}


@pytest.mark.parametrize("spec", _catalog_kernels(), ids=lambda s: s.name)
def test_every_catalog_kernel(spec):
    """Each catalog kernel, chosen explicitly (the heuristic only picks some of them at these sizes)."""
    check_case(CATALOG_CASES[spec.alignment], 57, "relu6", seed=spec.tile[0] + spec.alignment, choice=spec)


# The Sm90 kernels (conv2d_int8_sm90: TMA im2col, WGMMA, the requantization as an epilogue visitor
# tree), chosen explicitly (the heuristic picks them only for deep GEMMs: the test after). Channel
# counts are multiples of 16 (TMA); M = 1, 3, 17 and 1000 among the shapes; the 128-deep K step gets
# input channels that fill it and ones that do not.
SM90_GEOMETRIES = [
    (1, 1, 1, 16, 16, 1, 1, 0, 1),       # M = 1
    (1, 1, 3, 32, 16, 1, 1, 0, 1),       # M = 3
    (1, 17, 1, 16, 32, 1, 1, 0, 1),      # M = 17
    (1, 40, 25, 16, 16, 1, 1, 0, 1),     # M = 1000
    (2, 14, 13, 32, 48, 1, 2, 0, 1),     # 1x1, stride 2
    (2, 9, 11, 16, 32, 3, 1, 1, 1),      # 3x3
    (3, 15, 15, 32, 16, 3, 2, 1, 1),     # 3x3, stride 2
    (1, 17, 16, 48, 32, 3, 2, 3, 2),     # stride 2, padding 3, dilation 2
    (1, 5, 9, 16, 16, 3, 1, 3, 1),       # padding 3 on a 3x3: taps entirely in the border
    (2, 23, 23, 16, 64, 7, 2, 3, 1),     # 7x7, stride 2, padding 3
    (2, 20, 19, 80, 144, 3, 2, 1, 1),    # tails: M, N past the tiles, C not filling a K step
    (2, 7, 9, 256, 144, 3, 1, 1, 1),     # C = 256: two 128-deep K steps per tap
    (4, 28, 28, 64, 128, 3, 1, 1, 1),    # several tiles in M and N
    # Pointwise (the ping-pong GEMM kernels run these only; the four M = 1 ... 1000 above too):
    (2, 20, 19, 80, 144, 1, 1, 0, 1),    # tails: M, N past the tiles, C not filling a K step
    (2, 7, 9, 256, 48, 1, 1, 0, 1),      # C = 256: four K steps
    (16, 28, 28, 64, 256, 1, 1, 0, 1),   # more tiles than SMs: the persistent kernels loop
]


def _sm90_cases():
    """(kernel, geometry) for every geometry each Sm90 catalog kernel can run."""
    for spec in catalog(90, "conv2d_int8_sm90"):
        for g in SM90_GEOMETRIES:
            if spec.runs_geometry((g[5], g[5]), (g[6], g[6]), (g[7], g[7]), (g[8], g[8])):
                yield pytest.param(spec, g, id=f"{spec.name}-" + "n{}_{}x{}_c{}_k{}_f{}_s{}_p{}_d{}".format(*g))


def _requires_sm90():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the Sm90 kernels need an sm90 GPU")


@pytest.mark.parametrize("input_zero, activation", [(-100, "none"), (57, "relu6"), (0, "relu")])
@pytest.mark.parametrize("spec, geometry", list(_sm90_cases()))
def test_sm90_kernels(spec, geometry, input_zero, activation):
    _requires_sm90()
    check_case(geometry, input_zero, activation, seed=sum(geometry) + spec.tile[1], choice=spec)


@pytest.mark.parametrize("input_zero, activation", [(-100, "relu"), (57, "none")])
@pytest.mark.parametrize("geometry", [
    (1, 9, 11, 128, 64, 3, 1, 1, 1),     # small M, K = 1152: one 128 x 64 per SM
    (3, 56, 56, 64, 64, 3, 1, 1, 1),     # M = 9408 fills half a wave of 128-row tiles: two 128 x 64 per SM
    (2, 66, 66, 128, 128, 3, 1, 1, 1),   # M = 8712, Ci and Co multiples of 128: 128 x 128 x 128
    (16, 28, 28, 64, 256, 1, 1, 0, 1),   # pointwise, Co > 64: the ping-pong GEMM
], ids=lambda g: "n{}_{}x{}_c{}_k{}_f{}_s{}_p{}_d{}".format(*g))
def test_heuristic_runs_sm90_kernels_on_deep_gemms(geometry, input_zero, activation):
    """Where heuristics.conv_int8_sm90_choice takes an Sm90 kernel (on a GPU of at least 100 SMs,
    like the H100 it was measured on), the plan's own choice runs it, exactly."""
    _requires_sm90()
    if torch.cuda.get_device_properties(0).multi_processor_count < 100:
        pytest.skip("the rule's wave sizes are set for 132 SMs")
    plan = check_case(geometry, input_zero, activation, seed=sum(geometry))
    assert isinstance(plan.choice(*geometry[:3]), ConvInt8Sm90Spec)


def test_sm90_kernel_in_a_cuda_graph_and_on_a_side_stream():
    _requires_sm90()
    spec = catalog(90, "conv2d_int8_sm90")[0]
    x_q, w_q, bias, quant, conv = make_case(SM90_GEOMETRIES[9], 57, "relu6", seed=10)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    x = x_q.cuda()
    eager = plan(x, choice=spec)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        side = plan(x, choice=spec)
        with torch.cuda.graph(graph, stream=stream):
            captured = plan(x, choice=spec)
    stream.synchronize()
    assert torch.equal(side, eager)
    x.copy_(torch.randint(-128, 128, x.shape, dtype=torch.int8, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, plan(x, choice=spec))
    assert not torch.equal(captured, eager)


def test_padded_input_channels():
    """Ci = 3 (7x7, stride 2, padding 3, odd H and W): the plan folds the stride into 16 channels
    (conv_fold.StrideFold) for an aligned kernel; with Z_I far from 0 the folded path (default choice
    and, on the same folded tensors, the few-channels kernel) and the NCHW input (the fold doubling
    as the transposing copy) all match the unfolded definition."""
    geometry = (2, 33, 31, 3, 16, 7, 2, 3, 1)
    plan = check_case(geometry, -100, "relu", seed=8)
    assert plan.padded_channels % 4 == 0 and plan.padded_channels > 3
    assert plan.choice(2, 33, 31).alignment >= 4
    few = [s for s in _catalog_kernels() if s.alignment == 1]
    assert few
    check_case(geometry, -100, "relu", seed=8, choice=few[0])
    x_q, w_q, bias, quant, conv = make_case(geometry, -100, "relu", seed=9)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    exact, ref = expected_outputs(plan, x_q, w_q, bias, quant, conv)
    nchw = plan(x_q.cuda().permute(0, 3, 1, 2).contiguous(), layout="nchw")
    assert_matches([nchw.permute(0, 2, 3, 1).cpu()], exact, ref)


def test_nchw_input_and_output():
    """layout='nchw': a contiguous NCHW input is copied to NHWC, a channels_last one is used as is; the
    result is a channels_last view with the NHWC call's values."""
    x_q, w_q, bias, quant, conv = make_case(GEOMETRIES[3], 57, "relu", seed=1)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    x = x_q.cuda()
    nhwc = plan(x)
    nchw = plan(x.permute(0, 3, 1, 2).contiguous(), layout="nchw")
    channels_last = plan(x.permute(0, 3, 1, 2), layout="nchw")  # NHWC memory: no copy
    out = torch.empty_like(nchw, memory_format=torch.channels_last)
    into = plan(x.permute(0, 3, 1, 2), out, layout="nchw")
    torch.cuda.synchronize()
    for y in (nchw, channels_last, into):
        assert y.shape == (x.shape[0], w_q.shape[0], *nhwc.shape[1:3])
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(y.permute(0, 2, 3, 1), nhwc)
    assert into.data_ptr() == out.data_ptr()


def test_batches_and_shapes_through_one_plan():
    """One plan serves several input shapes (kernel and border correction cached per shape)."""
    _, w_q, bias, quant, conv = make_case(GEOMETRIES[2], -100, "none", seed=2)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    g = torch.Generator().manual_seed(3)
    for n, h, w in [(1, 9, 11), (5, 9, 11), (2, 16, 7), (1, 9, 11)]:
        x_q = torch.randint(-128, 128, (n, h, w, w_q.shape[3]), generator=g, dtype=torch.int8)
        exact, ref = expected_outputs(plan, x_q, w_q, bias, quant, conv)
        assert_matches(run_poisoned(plan, x_q.cuda(), tuple(exact.shape)), exact, ref)


def test_quant_conv2d_end_to_end():
    """QuantConv2d from a float nn.Conv2d and calibration scales: a float input is quantized with the
    input scale and zero point, the output requantized; it equals the plan on the quantized input,
    and its dequantized values follow the float convolution within the quantization noise (8-bit
    activations, weights and outputs: a few percent of the output norm)."""
    torch.manual_seed(4)
    conv = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=True).cuda()
    x = torch.rand(2, 32, 17, 17, device="cuda") * 3 - 0.5     # asymmetric range: Z_I far from 0
    with torch.no_grad():
        y_float = torch.relu(conv(x))
    lo, hi = x.min().item(), x.max().item()
    input_scale = (hi - lo) / 255
    input_zero = -128 - round(lo / input_scale)  # lo maps to -128
    output_scale = y_float.max().item() / 255   # [0, max] onto [-128, 127]
    layer = qgemm.nn.QuantConv2d.from_float(conv, input_scale, input_zero, output_scale, -128, "relu")
    x_nchw = x.contiguous(memory_format=torch.channels_last)
    y = layer(x_nchw, layout="nchw")
    x_q = conv_quant.quantize_input(x_nchw, input_scale, input_zero)
    assert torch.equal(y, layer(x_q, layout="nchw"))
    assert y.dtype == torch.int8 and y.shape == y_float.shape
    err = ((layer.dequantize(y).double() - y_float.double()).norm() / y_float.double().norm()).item()
    assert err < 0.05


def test_cuda_graph_capture():
    x_q, w_q, bias, quant, conv = make_case(GEOMETRIES[7], 57, "relu6", seed=5)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    x = x_q.cuda()
    eager = plan(x)  # warm up: loads the kernel and computes the border correction outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            captured = plan(x)
    x.copy_(torch.randint(-128, 128, x.shape, dtype=torch.int8, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, plan(x))
    assert not torch.equal(captured, eager)


def test_runs_on_a_side_stream():
    x_q, w_q, bias, quant, conv = make_case(GEOMETRIES[2], 57, "none", seed=6)
    plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
    x = x_q.cuda()
    default = plan(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        side = plan(x)
    stream.synchronize()
    assert torch.equal(default, side)


def test_one_shot_function():
    x_q, w_q, bias, quant, conv = make_case(GEOMETRIES[0], -100, "relu", seed=7)
    out = qgemm.conv2d_int8(x_q.cuda(), w_q.cuda(), quant, bias.cuda(), **conv)
    torch.cuda.synchronize()
    ref = reference.conv2d_int8(x_q, w_q, bias, quant, **conv)
    assert (out.cpu().int() - ref.int()).abs().max().item() <= 1
