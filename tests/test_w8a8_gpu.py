"""W8A8 kernels on the GPU against float64 references of the same quantized inputs.

Error bounds (||out - ref|| / ||ref||):
  * activation quantization: bit-exact. The kernel performs the IEEE float32
    operations of reference.quantize_blocks in the same order (no FMA contraction).
  * GEMM, float32 output: 1e-4. The int32 block products are exact; each block's
    dequantization is a handful of float32 roundings (2^-24 each) and the running
    sum over at most 128 blocks adds one rounding per block, so the error stays
    orders of magnitude below 1e-4 even with cancellation between the offset terms.
  * GEMM, float16 output: 1e-3. Rounding the result to float16 costs at most
    2^-11 (4.9e-4) relative per element, plus the float32 part above.
  * End to end (quantize + GEMM vs the unquantized float64 product): 3e-2. 8-bit
    asymmetric quantization of both operands over blocks of Gaussian data leaves
    about 0.7% noise per operand.
Outputs are poisoned with NaN before each launch, so an unwritten element fails.
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from qgemm import reference

from gpu_util import poison_allocator, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BLOCK_SIZES = (32, 64, 128, 256)
ODD_M = (1, 3, 17, 1000)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("m", ODD_M)
def test_quantize_activations_bit_exact(dtype, block_size, m):
    k = block_size * 3
    x = randn(m, k, dtype=dtype)
    x[0, :block_size] = 0.25  # a constant block: scale 1, q 0
    poison_allocator()
    xq = qgemm.quantize_activations(x, block_size)
    torch.cuda.synchronize()
    q, scale, offset, qsum = reference.quantize_blocks(x.cpu(), block_size)
    assert torch.equal(xq.q.cpu(), q)
    assert torch.equal(xq.scale.cpu(), scale)
    assert torch.equal(xq.offset.cpu(), offset)
    assert torch.equal(xq.qsum.cpu(), qsum)


def _gemm_case(m, n, k, block_size, out_dtype, activation="none", with_bias=False, launch_mode="chained"):
    weight = qgemm.W8A8Weight.from_float(randn(n, k), block_size)
    bias = randn(n) if with_bias else None
    plan = qgemm.W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype,
                              launch_mode=launch_mode)
    xq = qgemm.quantize_activations(randn(m, k), block_size)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    plan.gemm(xq, out=out)
    torch.cuda.synchronize()
    ref = reference.w8a8_gemm(xq.q, xq.scale, xq.offset, weight.qweight, weight.scale, weight.offset,
                              block_size, bias, activation)
    return out, ref, plan, xq


BOUND = {torch.float32: 1e-4, torch.float16: 1e-3}


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("n,blocks", [(4, 1), (4, 5), (136, 3)])
def test_gemm_matches_reference(out_dtype, block_size, m, n, blocks):
    out, ref, _, _ = _gemm_case(m, n, block_size * blocks, block_size, out_dtype)
    assert rel_err(out, ref) < BOUND[out_dtype]


@pytest.mark.parametrize("block_size", [32, 128])
@pytest.mark.parametrize("m", [17, 1000])
def test_gemm_long_chain(block_size, m):
    """128 K-blocks per output tile: the semaphore chain must keep every fold in order."""
    out, ref, _, _ = _gemm_case(m, 520, block_size * 128, block_size, torch.float32)
    assert rel_err(out, ref) < BOUND[torch.float32]


@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_gemm_bias_and_activation(activation, out_dtype):
    out, ref, _, _ = _gemm_case(33, 264, 512, 64, out_dtype, activation=activation, with_bias=True)
    assert rel_err(out, ref) < BOUND[out_dtype]
    if activation != "none":
        assert out.min().item() >= 0
    if activation == "relu6":
        assert out.max().item() <= 6


@pytest.mark.parametrize("block_size", [32, 256])
def test_per_block_launches_match_chained_bitwise(block_size):
    """The naive form runs the same folds in the same order, so results are identical."""
    out, ref, plan, xq = _gemm_case(17, 128, block_size * 6, block_size, torch.float32)
    naive = qgemm.W8A8GemmPlan(plan.weight, out_dtype=torch.float32, launch_mode="per_block")
    out2 = naive.gemm(xq)
    torch.cuda.synchronize()
    assert torch.equal(out, out2)


def test_repeated_calls_are_identical():
    """The last fold resets each tile's semaphore, so a second call starts clean."""
    out, ref, plan, xq = _gemm_case(64, 256, 2048, 128, torch.float16)
    again = plan.gemm(xq)
    torch.cuda.synchronize()
    assert torch.equal(out, again)


def test_end_to_end_against_float_product():
    m, n, k = 37, 512, 1024
    x = randn(m, k, dtype=torch.float16)
    w = randn(n, k)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128), out_dtype=torch.float16)
    out = plan(x)
    torch.cuda.synchronize()
    ref = x.double().cpu() @ w.double().cpu().t()
    assert rel_err(out, ref) < 3e-2


def test_cuda_graph_capture():
    m, n, k = 16, 256, 1024
    weight = qgemm.W8A8Weight.from_float(randn(n, k), 64)
    plan = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16)
    x = randn(m, k, dtype=torch.float16)
    eager = plan(x)  # warm up: loads the kernels outside the capture
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


def test_runs_on_a_side_stream():
    out, ref, plan, xq = _gemm_case(5, 64, 256, 64, torch.float32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        side = plan.gemm(xq)
    stream.synchronize()
    assert torch.equal(out, side)
