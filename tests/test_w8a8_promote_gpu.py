"""The Sm80/Sm75 W8A8 promote kernels (W8A8PromoteSpec: mma.sync per K-block, each block's int32
product promoted into FP32 registers) on the GPU, against float64 references of the same quantized
operands. On an sm90 GPU the plan's build target is sm90: the sm80 kernels run as sm_90a builds of
the same source (what the benchmark's "sm80 promote" column measures), and the sm75 kernels too.

Error bounds (||out - ref|| / ||ref||), as in test_w8a8_sm90_gpu.py:
  * FP32 output: 1e-4. Each block's int32 product is exact (|P| <= 256 * 128^2 = 2^22) and so is its
    conversion to float (the kernel adds it to 1.5 * 2^23 in the mantissa and subtracts that back:
    exact below 2^23); the promotion adds a handful of float32 roundings (2^-24 each) per block, the
    running FP32 sum one per block, and a stream-K fix-up one per contributing CTA: orders of
    magnitude below 1e-4 even with the cancellation between the asymmetric scheme's offset terms.
  * FP16 output: 1e-3 (rounding to float16 costs at most 2^-11 = 4.9e-4 relative per element);
    BF16 output: 8e-3 (2^-8 = 3.9e-3 per element).
Outputs are poisoned (NaN) before each launch, so an unwritten element fails; inputs are fresh
random numbers with a non-zero mean (the offset terms matter), never zeros.
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8PromoteSpec
from qgemm import reference
from qgemm.w8a8 import heuristics
from qgemm._runtime import target_sm_for

from gpu_util import randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (7, 5),
                       reason="needs an sm75 or newer GPU"),
]

BOUND = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}
OUT_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
ODD_M = (1, 3, 17, 1000)
BLOCK_SIZES = (32, 64, 128, 256)


def _target() -> int:
    return target_sm_for(torch.cuda.get_device_capability())


def _catalog_specs():
    """Every promote kernel of the sm75 and sm80 catalogs that this GPU runs (none without a GPU)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (7, 5):
        return []
    specs = catalog(75, W8A8PromoteSpec.family) + catalog(80, W8A8PromoteSpec.family)
    return [s for s in specs if s.supports_target(_target())]


def _reference(xq, weight, block_size, bias, activation):
    if weight.scheme == "symmetric":
        return reference.w8a8_gemm_symmetric(xq.q, xq.scale, weight.qweight, weight.scale, block_size, bias,
                                             activation)
    return reference.w8a8_gemm(xq.q, xq.scale, xq.offset, weight.qweight, weight.scale, weight.offset, block_size,
                               bias, activation)


def _case(m, n, k, block_size, scheme, out_dtype, activation="none", with_bias=False, choice=None,
          x_dtype=torch.float16):
    weight = qgemm.W8A8Weight.from_float(randn(n, k), block_size, scheme=scheme)
    bias = randn(n) if with_bias else None
    plan = qgemm.W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype, launch_mode="promote")
    xq = qgemm.quantize_activations(randn(m, k, dtype=x_dtype), block_size, symmetric=scheme == "symmetric")
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    plan.gemm(xq, out=out, choice=choice)
    torch.cuda.synchronize()
    return out, _reference(xq, weight, block_size, bias, activation), plan, xq


def _k(block_size: int) -> int:
    """Several blocks; with blocks of 32 an odd count, so the last 64-K tile is half past K."""
    return block_size * (5 if block_size <= 64 else 3)


@pytest.mark.parametrize("spec", _catalog_specs(), ids=lambda s: s.name)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("m", ODD_M)
def test_every_catalog_kernel(spec, block_size, m):
    """Each catalog kernel forced by choice= (one CTA per tile), odd M, N at the smallest alignment
    (12: not a multiple of 8) and with a tail tile (268 = 2 x 128 + 12)."""
    n = 12 if m < 17 else 268
    out, ref, _, _ = _case(m, n, _k(block_size), block_size, spec.scheme, OUT_DTYPES[spec.output],
                           choice=heuristics.W8A8PromoteChoice(spec))
    assert rel_err(out, ref) < BOUND[OUT_DTYPES[spec.output]]


@pytest.mark.parametrize("spec", _catalog_specs(), ids=lambda s: s.name)
@pytest.mark.parametrize("ctas_per_sm", [2, 0.05])
@pytest.mark.parametrize("block_size", [32, 256])
def test_every_catalog_kernel_stream_k(spec, ctas_per_sm, block_size):
    """Stream-K: every tile split into its K units (2 CTAs per SM: one unit each), and a few CTAs
    whose ranges cross tiles (0.05 per SM), the FP32 partials reduced by the last CTA to arrive."""
    choice = heuristics.W8A8PromoteChoice(spec, ctas_per_sm, 2)
    out, ref, _, _ = _case(37, 268, block_size * 7, block_size, spec.scheme, OUT_DTYPES[spec.output], choice=choice)
    assert rel_err(out, ref) < BOUND[OUT_DTYPES[spec.output]]


@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("m", [1, 16, 17, 64, 65, 300, 1000])
def test_plan_choice_matches_reference(scheme, block_size, m):
    """The heuristic's kernel for each M, on a shape with several tiles in N and many K-blocks."""
    out, ref, _, _ = _case(m, 520, 2048, block_size, scheme, torch.float16)
    assert rel_err(out, ref) < BOUND[torch.float16]


@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_deep_k(scheme):
    """K = 7168 (56 blocks of 128): the FP32 running sum over many promotions."""
    out, ref, _, _ = _case(300, 264, 7168, 128, scheme, torch.float32)
    assert rel_err(out, ref) < BOUND[torch.float32]


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "silu"])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_bias_activation_outputs(scheme, activation, out_dtype):
    out, ref, _, _ = _case(33, 264, 512, 128, scheme, out_dtype, activation=activation, with_bias=True)
    assert rel_err(out, ref) < BOUND[out_dtype]
    if activation in ("relu", "relu6"):
        assert out.min().item() >= 0
    if activation == "relu6":
        assert out.max().item() <= 6


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_input_dtypes_end_to_end(scheme, x_dtype):
    """FP32/FP16/BF16 activations through plan(x): quantization + GEMM against the unquantized
    float64 product (8-bit quantization of both operands: ~1% noise on Gaussian data)."""
    m, n, k = 37, 516, 1024
    x = randn(m, k, dtype=x_dtype)
    w = randn(n, k)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16,
                              launch_mode="promote")
    out = plan(x)
    torch.cuda.synchronize()
    ref = x.double().cpu() @ w.double().cpu().t()
    assert rel_err(out, ref) < 3e-2


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_non_finite_activation_reaches_its_row(scheme, bad):
    """A NaN or Inf in x makes its block's scale NaN: that row's outputs are NaN (the clamp keeps
    NaN), the other rows stay finite."""
    m, n, k = 5, 64, 512
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k), 128, scheme=scheme),
                              out_dtype=torch.float16, launch_mode="promote")
    x = randn(m, k, dtype=torch.float16)
    x[2, 300] = bad
    out = plan(x)
    torch.cuda.synchronize()
    assert torch.isnan(out[2]).all()
    assert torch.isfinite(out[[0, 1, 3, 4]]).all()


@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_cuda_graph_and_two_streams(scheme):
    """Captured in a graph (stream-K at every M here: the tiles do not fill the GPU), replayed with
    new inputs; the same plan on two streams at once, each result equal to the eager call's (the
    partial buffers and tile counters are per call)."""
    n, k = 384, 1024
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k), 128, scheme=scheme),
                              out_dtype=torch.float16, launch_mode="promote")
    for m in (4, 200):
        assert plan.promote_choice(m).ctas_per_sm > 0
        x = randn(m, k, dtype=torch.float16)
        eager = plan(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                captured = plan(x)
        x.copy_(randn(m, k, dtype=torch.float16))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, plan(x))
        assert not torch.equal(captured, eager)

    xs = [randn(200, k, dtype=torch.float16) for _ in range(2)]
    expected = [plan(x) for x in xs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for _ in range(20):
        for s, x in zip(streams, xs):
            with torch.cuda.stream(s):
                outs.append(plan(x))
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        assert torch.equal(o, expected[i % 2])


def test_chained_reference_path_agrees():
    """The reference path (launch_mode='chained') and the promote kernel compute the same GEMM."""
    m, n, k = 77, 268, 1024
    weight = qgemm.W8A8Weight.from_float(randn(n, k), 64)
    xq = qgemm.quantize_activations(randn(m, k), 64)
    promote = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float32, launch_mode="promote").gemm(xq)
    chained = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float32, launch_mode="chained").gemm(xq)
    torch.cuda.synchronize()
    assert rel_err(promote, chained.double()) < 1e-5


def test_auto_mode():
    """"auto" runs the promote kernels below sm90, and on sm90 where N is not a multiple of 16 bytes
    of output (12 FP16)."""
    weight = qgemm.W8A8Weight.from_float(randn(12, 256), 128, scheme="symmetric")
    plan = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16)
    assert plan.launch_mode == "promote"
    wide = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(256, 256), 128), out_dtype=torch.float16)
    assert wide.launch_mode == ("sm90" if _target() >= 90 else "promote")
    xq = qgemm.quantize_activations(randn(3, 256), 128, symmetric=True)
    out = plan.gemm(xq)
    torch.cuda.synchronize()
    assert rel_err(out, _reference(xq, weight, 128, None, "none")) < BOUND[torch.float16]


def test_block_int8_checkpoint():
    """A DeepSeek-style block-INT8 pair (int8 weight, weight_scale_inv [ceil(N/128), K/128]) with N
    not a multiple of 128: the last row block is partial."""
    n, k, m = 200, 512, 9
    w = randn(n, k)
    q, scale_inv = reference.quantize_weight_blocks_symmetric(w, 128)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_block_int8(q, scale_inv), out_dtype=torch.bfloat16,
                              launch_mode="promote")
    xq = qgemm.quantize_activations(randn(m, k, dtype=torch.bfloat16), 128, symmetric=True)
    out = plan.gemm(xq)
    torch.cuda.synchronize()
    ref = reference.w8a8_gemm_symmetric(xq.q, xq.scale, q, scale_inv, 128)
    assert rel_err(out, ref) < BOUND[torch.bfloat16]
