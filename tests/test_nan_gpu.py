"""NaN and Inf in activations, every family on the GPU (issue 18; README "NaN and Inf").

What each family must do, and what the float64 reference of the same operands says:
  * quantized activations (FP8 blockwise, W8A8 both schemes): the quantizer gives a block holding
    NaN/Inf a NaN scale and codes 0, so that row's outputs are all NaN (an unquantized GEMM gives NaN
    or +-Inf there: both non-finite); every other row is finite and within its family's bound.
  * FP16/BF16 activations (FpA x IntB GEMM and conv): the tensor cores propagate NaN/Inf as IEEE
    arithmetic does, so the pattern of NaN, +Inf and -Inf in the output equals the float64
    reference's (x.double() times the dequantized weight), activation included (ReLU keeps NaN, as
    torch.relu does).
  * int8 conv: int8 holds no NaN; the input quantizer refuses a non-finite x with ValueError.
Outputs start as a finite sentinel (not NaN: a NaN output is the expected answer here), and every
element must have been overwritten.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import qgemm
from qgemm import reference
from qgemm.fpaintb import heuristics

from gpu_util import randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

SENTINEL = 12345.0
BADS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}
sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                          reason="needs an sm90 GPU")


def sentinel(shape, dtype):
    return torch.full(shape, SENTINEL, dtype=dtype, device="cuda")


def poison_rows(x, rows, bad, block=128):
    """x with `bad` at one element of each row in `rows` (a different K block per row)."""
    x = x.clone()
    for i, r in enumerate(rows):
        x[r, (i * block + 7) % x.shape[1]] = bad
    return x


def assert_rows(out, ref, bad_rows, bound):
    """Rows in bad_rows all NaN; the others finite, written, and within bound of ref."""
    out = out.double().cpu()
    assert not (out == SENTINEL).any(), "an output element was not written"
    for r in range(out.shape[0]):
        if r in bad_rows:
            assert torch.isnan(out[r]).all(), f"row {r} holds NaN/Inf input but has finite outputs"
        else:
            assert torch.isfinite(out[r]).all(), f"row {r} has no NaN/Inf input but non-finite outputs"
    good = [r for r in range(out.shape[0]) if r not in bad_rows]
    if good:
        assert rel_err(out[good], ref.double().cpu()[good]) < bound


def assert_same_pattern(out, ref):
    """Same NaN, +Inf and -Inf positions as the float64 reference, finite elsewhere."""
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not (out == SENTINEL).any(), "an output element was not written"
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), \
        f"NaN at {int(torch.isnan(out).sum())} outputs, reference {int(torch.isnan(ref).sum())}"
    assert torch.equal(torch.isposinf(out), torch.isposinf(ref))
    assert torch.equal(torch.isneginf(out), torch.isneginf(ref))


# --- FP8 blockwise (sm90) -------------------------------------------------------------------------

@sm90
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("act", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_activation_quantizer(bad, dtype, act):
    x = poison_rows(randn(17, 384, dtype=dtype, seed=1), [0, 5, 16], BADS[bad])
    xa = qgemm.quantize_activations_fp8(x, act)
    q, sx = reference.quantize_fp8_groups(x, act)
    assert torch.equal(xa.q.view(torch.uint8), q.view(torch.uint8))
    assert torch.allclose(xa.scale[:, :17], sx[:, :17], rtol=0, atol=0, equal_nan=True)  # bit-exact, NaN at NaN
    assert int(torch.isnan(xa.scale[:, :17]).sum()) == 3


@sm90
@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("m", [1, 3, 17, 1000])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_fp8_gemm_row_goes_nan(bad, m, out_dtype):
    w = qgemm.Fp8Weight.from_float(randn(264, 512, seed=2) * 0.05)
    bias = randn(264, seed=3)
    plan = qgemm.Fp8GemmPlan(w, bias=bias, out_dtype=out_dtype)
    rows = sorted({0, m // 2, m - 1})
    x = poison_rows(randn(m, 512, dtype=torch.bfloat16, seed=m), rows, BADS[bad])
    out = sentinel((m, 264), out_dtype)
    plan(x, out)
    torch.cuda.synchronize()
    xa = qgemm.quantize_activations_fp8(x)
    ref = reference.fp8_blockwise_gemm(xa.q, xa.scale, w.qweight, w.scale_inv, bias)
    assert_rows(out, ref, set(rows), 5e-3)


@sm90
def test_fp8_weight_quantizer_refuses_nan_on_gpu():
    w = randn(128, 256, seed=4)
    w[7, 9] = float("nan")
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.Fp8Weight.from_float(w)


# --- W8A8 (both schemes; Sm90 kernels, the Sm80/Sm75 promote kernels, the chained reference path) -----

def _w8a8_cases():
    cases = [("asymmetric", "chained", torch.float16), ("asymmetric", "promote", torch.float16),
             ("symmetric", "promote", torch.bfloat16)]
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        cases += [("asymmetric", "sm90", torch.float16), ("symmetric", "sm90", torch.bfloat16)]
    return cases


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("scheme, mode, out_dtype", _w8a8_cases())
@pytest.mark.parametrize("m", [1, 17, 300])
def test_w8a8_row_goes_nan(bad, activation, scheme, mode, out_dtype, m):
    bs = 128
    w = qgemm.W8A8Weight.from_float(randn(256, 512, seed=5) * 0.05, bs, scheme=scheme)
    plan = qgemm.W8A8GemmPlan(w, activation=activation, out_dtype=out_dtype, launch_mode=mode)
    rows = sorted({0, m - 1})
    x = poison_rows(randn(m, 512, dtype=torch.float16, seed=m), rows, BADS[bad])
    out = sentinel((m, 256), out_dtype)
    plan(x, out)
    torch.cuda.synchronize()
    if scheme == "symmetric":
        q, s = reference.quantize_blocks_symmetric(x.cpu(), bs)
        ref = reference.w8a8_gemm_symmetric(q, s, w.qweight, w.scale, bs, activation=activation)
    else:
        q, s, o, _ = reference.quantize_blocks(x.cpu(), bs)
        ref = reference.w8a8_gemm(q, s, o, w.qweight, w.scale, w.offset, bs, activation=activation)
    assert_rows(out, ref, set(rows), 1e-2)


# --- FpA x IntB GEMM: every kernel kind ----------------------------------------------------------

def _fpaintb_choices(dtype, bits):
    """One choice per kernel kind: the GEMV, the tiled GEMM with one CTA per tile and with stream-K,
    and dequantize-then-cuBLAS."""
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.fpaintb import FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    act = qgemm.fpaintb.ACT_DTYPES[dtype]

    def first(family):
        return next(s for s in catalog(target, family) if s.act == act and s.bits == bits)
    gemm = first(FpAIntBGemmSpec.family)
    return {"gemv": heuristics.FpAIntBChoice(first(FpAIntBGemvSpec.family)),
            "gemm": heuristics.FpAIntBChoice(gemm),
            "stream_k": heuristics.FpAIntBChoice(gemm, 2),
            "dequantize": heuristics.FpAIntBChoice(FpAIntBDequantSpec(act, bits, 80))}


def _fpaintb_reference(x, weight, bias, activation):
    out = x.double().cpu() @ weight.dequantize().cpu()
    if bias is not None:
        out = out + bias.double().cpu()
    return {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}[activation](out)


@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu"])
@pytest.mark.parametrize("kind", ["gemv", "gemm", "stream_k", "dequantize"])
@pytest.mark.parametrize("dtype, bits", [(torch.float16, 4), (torch.bfloat16, 8)])
def test_fpaintb_follows_ieee(bad, activation, kind, dtype, bits):
    k, n = 512, 264
    weight = qgemm.IntBWeight.from_float(randn(n, k, seed=6) * 0.05, bits=bits, group_size=128,
                                         symmetric=False).to("cuda")
    bias = randn(n, dtype=dtype, seed=7)
    plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation=activation)
    m = 3 if kind == "gemv" else 70
    x = poison_rows(randn(m, k, dtype=dtype, seed=8), [0, m - 1], BADS[bad])
    out = sentinel((m, n), dtype)
    plan(x, out, choice=_fpaintb_choices(dtype, bits)[kind])
    torch.cuda.synchronize()
    ref = _fpaintb_reference(x, weight, plan.bias, activation)
    assert_same_pattern(out, ref)
    if bad == "nan":
        assert torch.isnan(out[0]).all() and torch.isnan(out[m - 1]).all()


# --- FpA x IntB conv ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", BADS)
@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
@pytest.mark.parametrize("stream_k", [False, True])
def test_fpaintb_conv_follows_ieee(bad, activation, stream_k):
    g = torch.Generator().manual_seed(9)
    q = qgemm.IntConvWeight.from_float(torch.randn(16, 32, 3, 3, generator=g) * 0.1 + 0.02, 4, 32)
    weight = qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), 4, 32)
    plan = qgemm.FpAIntBConvPlan(weight, activation=activation, padding=1)
    x = randn(2, 9, 11, 32, dtype=torch.float16, seed=10)
    x[0, 0, 0, 3] = BADS[bad]      # a corner pixel: its outputs read padding too
    x[1, 4, 5, 31] = BADS[bad]     # an inner pixel
    choice = None
    if stream_k:
        spec = plan.choice(2, 9, 11).spec
        choice = heuristics.FpAIntBChoice(spec, 2)
    out = sentinel((2, 9, 11, 16), torch.float16)
    plan(x, out, choice=choice)
    torch.cuda.synchronize()
    w = plan.weight.dequantize(plan.act_dtype).permute(0, 3, 1, 2)
    ref = F.conv2d(x.double().cpu().permute(0, 3, 1, 2), w.cpu(), None, plan.stride, plan.padding, plan.dilation)
    ref = {"none": lambda t: t, "relu": F.relu, "relu6": lambda t: t.clamp(0, 6)}[activation](ref)  # keep NaN
    ref = ref.permute(0, 2, 3, 1)
    assert_same_pattern(out, ref)
    if bad == "nan":
        assert torch.isnan(out[1, 3:6, 4:7]).all()  # every output whose 3x3 window holds the pixel


# --- int8 conv: refused at quantization ------------------------------------------------------------

@pytest.mark.parametrize("bad", BADS)
def test_int8_conv_input_quantizer_refuses(bad):
    conv = torch.nn.Conv2d(16, 8, 3, padding=1).cuda()
    layer = qgemm.nn.QuantConv2d.from_float(conv, 0.05, 0, 0.1, 0)
    x = torch.randn(2, 6, 6, 16, device="cuda")
    x[1, 2, 3, 4] = BADS[bad]
    with pytest.raises(ValueError, match="x holds NaN or Inf"):
        layer(x)
    x[1, 2, 3, 4] = 0.0
    assert layer(x).dtype == torch.int8
