"""The Sm90 W8A8 kernels (W8A8Sm90Spec: per-K-block int32 products promoted into FP32 registers) on
the GPU, against float64 references of the same quantized operands.

Error bounds (||out - ref|| / ||ref||), as in test_w8a8_gpu.py:
  * FP32 output: 1e-4. Each block's int32 product is exact, and so is its conversion to float
    (|P| <= 128 * 128^2 = 2^21 < 2^24); the promotion adds a handful of float32 roundings (2^-24
    each) per block, and the running FP32 sum one per block: orders of magnitude below 1e-4 even
    with the cancellation between the asymmetric scheme's offset terms.
  * FP16 output: 1e-3 (rounding to float16 costs at most 2^-11 = 4.9e-4 relative per element);
    BF16 output: 8e-3 (2^-8 = 3.9e-3 per element).
  * symmetric activation quantization: bit-exact (the kernel performs reference.
    quantize_blocks_symmetric's float32 operations in its order).
Outputs are poisoned (NaN) before each launch, so an unwritten element fails; inputs are fresh
random numbers with a non-zero mean (the offset terms matter), never zeros.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import (W8A8Sm90Spec, w8a8_sm90_alternate, w8a8_sm90_blocks_in_flight,
                                       w8a8_sm90_schedule)
from qgemm import reference
from qgemm.w8a8 import heuristics

from gpu_util import poison_allocator, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 GPU"),
]

BOUND = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}
OUT_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
ODD_M = (1, 3, 17, 1000)


def _case(m, n, k, block_size, scheme, out_dtype, activation="none", with_bias=False, choice=None,
          x_dtype=torch.float16):
    symmetric = scheme == "symmetric"
    weight = qgemm.W8A8Weight.from_float(randn(n, k), block_size, scheme=scheme)
    bias = randn(n) if with_bias else None
    plan = qgemm.W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype)
    assert plan.launch_mode == "sm90"
    xq = qgemm.quantize_activations(randn(m, k, dtype=x_dtype), block_size, symmetric=symmetric)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    plan.gemm(xq, out=out, choice=choice)
    torch.cuda.synchronize()
    if symmetric:
        ref = reference.w8a8_gemm_symmetric(xq.q, xq.scale, weight.qweight, weight.scale, block_size, bias, activation)
    else:
        ref = reference.w8a8_gemm(xq.q, xq.scale, xq.offset, weight.qweight, weight.scale, weight.offset,
                                  block_size, bias, activation)
    return out, ref, plan, xq


def _sm90_catalog():
    return catalog(90, W8A8Sm90Spec.family)


@pytest.mark.parametrize("spec", _sm90_catalog(), ids=lambda s: s.name)
@pytest.mark.parametrize("m", ODD_M)
def test_every_catalog_kernel(spec, m):
    """Each catalog kernel, forced by choice=, on odd M, N at 16-byte output rows plus a tail tile,
    K of 3 blocks (128 K per stage: blocks of 32/64 share a stage, a block of 256 spans two)."""
    out_dtype = OUT_DTYPES[spec.output]
    n = 8 if m < 17 else 8 * 37  # the minimum N, and a tail in the kernel's N or M
    k = max(spec.block_size, 128) * 3 if spec.block_size >= 128 else spec.block_size * 5
    out, ref, _, _ = _case(m, n, k, spec.block_size, spec.scheme, out_dtype,
                           choice=heuristics.W8A8Sm90Choice(spec))
    assert rel_err(out, ref) < BOUND[out_dtype]


@pytest.mark.parametrize("scheme, block_size", [("symmetric", 128), ("asymmetric", 32), ("asymmetric", 64),
                                                ("asymmetric", 128), ("asymmetric", 256)])
@pytest.mark.parametrize("m", [1, 16, 17, 64, 65, 300, 1000])
def test_plan_choice_matches_reference(scheme, block_size, m):
    """The heuristic's kernel for each M, on a shape with several tiles in N and many K-blocks."""
    out, ref, _, _ = _case(m, 520, 2048, block_size, scheme, torch.float16)
    assert rel_err(out, ref) < BOUND[torch.float16]


@pytest.mark.parametrize("m", [72, 128])
def test_plan_choice_long_k(m):
    """65-128 rows at K >= W8A8_SM90_LONG_K, symmetric: the plan's 128 x 128 stream-K kernel (one
    token tile, K spread over the SMs, FP32 partials reduced by the scheduler) on 128 K-blocks."""
    out, ref, plan, _ = _case(m, 520, heuristics.W8A8_SM90_LONG_K, 128, "symmetric", torch.float16)
    spec = plan.choice(m).spec
    assert (spec.tile, spec.swap_ab, spec.scheduler) == ((128, 128), False, "streamk"), spec.name
    assert rel_err(out, ref) < BOUND[torch.float16]


@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_deep_k(scheme):
    """K = 7168 (56 blocks of 128): the FP32 running sum over many promotions."""
    out, ref, _, _ = _case(300, 264, 7168, 128, scheme, torch.float32)
    assert rel_err(out, ref) < BOUND[torch.float32]


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "silu"])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
@pytest.mark.parametrize("m", [5, 17, 33, 80])
def test_bias_activation_outputs(m, scheme, activation, out_dtype):
    """The plan's own choice at M = 5 (the symmetric scheme's 64 x 16 pingpong tile, the asymmetric
    scheme's split-K on the 128 x 16 stream-K kernel), 17, 33 and 80 (64 x 32 pingpong for both: 5
    weight tiles x 2 or 3 token tiles fit the SMs); at M = 80 also the 128 x 32 swapped stream-K
    kernel (3 x 3 CTAs), forced by choice=, which the plan's rules no longer reach at block 128 (a
    swapped tile that few CTAs fill is always beaten by a pingpong tile that fits)."""
    out, ref, plan, xq = _case(m, 264, 512, 128, scheme, out_dtype, activation=activation, with_bias=True)
    spec = plan.choice(m).spec
    if m in (17, 33, 80) or (m == 5 and scheme == "symmetric"):
        assert spec.schedule == "pingpong"
    else:
        assert spec.swap_ab and spec.scheduler == "streamk"
    assert rel_err(out, ref) < BOUND[out_dtype]
    if m == 80:
        streamk = dataclasses.replace(spec, tile=(128, 32), schedule="cooperative", scheduler="streamk",
                                      alternate=w8a8_sm90_alternate(scheme, 128, (128, 32), True),
                                      blocks_in_flight=w8a8_sm90_blocks_in_flight(128, (128, 32), True))
        out = torch.full_like(out, float("nan"))
        plan.gemm(xq, out=out, choice=heuristics.W8A8Sm90Choice(streamk))
        torch.cuda.synchronize()
        assert rel_err(out, ref) < BOUND[out_dtype]
    if activation in ("relu", "relu6"):
        assert out.min().item() >= 0
    if activation == "relu6":
        assert out.max().item() <= 6


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "relu6", "silu"])
def test_bias_activation_pingpong_64_tokens(activation, out_dtype):
    """The symmetric scheme's 64 x 64 pingpong tile as the plan chooses it: M = 48 on N = 4344 (68
    weight tiles of 64 rows; two 32-token tiles each would be 136 CTAs, more than the SMs, one 64-token
    tile fits), with bias, over every output and both epilogues (clamp for none/relu6, SiLU). N ends
    in a partial weight tile (4344 = 67 x 64 + 56) and M in a partial token tile."""
    out, ref, plan, _ = _case(48, 4344, 512, 128, "symmetric", out_dtype, activation=activation, with_bias=True)
    spec = plan.choice(48).spec
    assert (spec.tile, spec.swap_ab, spec.schedule) == ((64, 64), True, "pingpong"), spec.name
    assert rel_err(out, ref) < BOUND[out_dtype]
    if activation == "relu6":
        assert 0 <= out.min().item() and out.max().item() <= 6


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_input_dtypes_end_to_end(scheme, x_dtype):
    """FP32/FP16/BF16 activations through plan(x): quantization + GEMM against the unquantized
    float64 product (8-bit quantization of both operands: ~1% noise on Gaussian data)."""
    m, n, k = 37, 512, 1024
    x = randn(m, k, dtype=x_dtype)
    w = randn(n, k)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16)
    out = plan(x)
    torch.cuda.synchronize()
    ref = x.double().cpu() @ w.double().cpu().t()
    assert rel_err(out, ref) < 3e-2


@pytest.mark.parametrize("splits", [0, 3])
@pytest.mark.parametrize("scheme, alternate, tile_m", [("symmetric", False, 128), ("asymmetric", False, 128),
                                                       ("asymmetric", True, 128), ("symmetric", False, 256)])
def test_stream_k(scheme, alternate, tile_m, splits):
    """Stream-K (heuristic decomposition, and split-K into 3): K ranges of a tile on several CTAs,
    each starting at a K-block boundary, their FP32 partials reduced by the scheduler; with the warp
    groups in turns too (their named barriers count the units of each CTA's own K range), and with
    the 256-row tile (two slices per warp group; M = 300: a partial second row tile)."""
    spec = W8A8Sm90Spec((tile_m, 128), 128, scheme, "f16", "cooperative", "streamk", alternate=alternate)
    out, ref, _, _ = _case(200 if tile_m == 128 else 300, 256, 128 * 21, 128, scheme, torch.float16,
                           choice=heuristics.W8A8Sm90Choice(spec, splits=splits))
    assert rel_err(out, ref) < BOUND[torch.float16]


@pytest.mark.parametrize("k_blocks", [1, 2, 3, 5, 56])
@pytest.mark.parametrize("scheme, tile_n, m", [("symmetric", 16, 1), ("symmetric", 16, 17), ("symmetric", 32, 33),
                                               ("asymmetric", 16, 1), ("asymmetric", 32, 3), ("asymmetric", 32, 33)])
def test_blocks_in_flight_equal_one_at_a_time(scheme, tile_n, m, k_blocks):
    """The catalog's pingpong tiles keep two blocks in flight per warp group; they promote the same
    int32 products in the same order as the kernel that takes one block at a time, so the outputs are
    equal bit for bit. K = 1, 3 and 5 blocks leave an odd block to the one-at-a-time tail of the loop,
    1 block runs only that tail; M = 17 and 33 give the pingpong warp groups two or three token tiles."""
    spec = W8A8Sm90Spec((64, tile_n), 128, scheme, "f16", "pingpong", "persistent", True, blocks_in_flight=2)
    assert spec in _sm90_catalog(), spec.name
    out, ref, plan, xq = _case(m, 264, 128 * k_blocks, 128, scheme, torch.float16, choice=heuristics.W8A8Sm90Choice(spec))
    assert rel_err(out, ref) < BOUND[torch.float16]
    one = dataclasses.replace(spec, blocks_in_flight=1)
    out_one = torch.full_like(out, float("nan"))
    plan.gemm(xq, out=out_one, choice=heuristics.W8A8Sm90Choice(one))
    torch.cuda.synchronize()
    assert torch.equal(out, out_one)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", ODD_M)
def test_quantize_symmetric_bit_exact(dtype, m):
    k = 128 * 3
    x = randn(m, k, dtype=dtype)
    x[0, :128] = 0.0  # an all-zero block: amax floored at 1e-10, q = 0
    poison_allocator()
    xq = qgemm.quantize_activations(x, 128, symmetric=True)
    torch.cuda.synchronize()
    q, scale = reference.quantize_blocks_symmetric(x.cpu(), 128)
    assert xq.offset is None and xq.qsum is None
    assert torch.equal(xq.q.cpu(), q)
    assert torch.equal(xq.scale.cpu(), scale)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_non_finite_activation_reaches_its_row(scheme, bad):
    """A NaN or Inf in x makes its block's scale NaN: that row's outputs are NaN, the other rows
    stay finite (an unquantized GEMM would give that row NaN/Inf too)."""
    m, n, k = 5, 64, 512
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k), 128, scheme=scheme),
                              out_dtype=torch.float16)
    x = randn(m, k, dtype=torch.float16)
    x[2, 300] = bad
    out = plan(x)
    torch.cuda.synchronize()
    assert torch.isnan(out[2]).all()
    assert torch.isfinite(out[[0, 1, 3, 4]]).all()


@pytest.mark.parametrize("out_name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("activation", ["none", "relu6", "silu"])
def test_256_row_tile(activation, out_name):
    """The symmetric scheme's 256 x 128 tile (each warp group runs and promotes two 64-row slices per
    block): M with a partial last row tile (1000 = 3 x 256 + 232), N with a partial column tile, bias
    and activation, every output, K of 19 blocks. Besides the float64 bound, its output equals the
    128 x 128 kernel's bit for bit: each element gets the same promotions in the same order, so a
    slice run against the wrong rows or vectors cannot hide in rounding."""
    out_dtype = OUT_DTYPES[out_name]
    epilogue = "silu" if activation == "silu" else "clamp"
    big, small = (W8A8Sm90Spec(tile, 128, "symmetric", out_name, epilogue=epilogue) for tile in ((256, 128), (128, 128)))
    out, ref, plan, xq = _case(1000, 8 * 37, 128 * 19, 128, "symmetric", out_dtype, activation=activation,
                               with_bias=True, choice=heuristics.W8A8Sm90Choice(big))
    assert rel_err(out, ref) < BOUND[out_dtype]
    assert torch.equal(out, plan.gemm(xq, choice=heuristics.W8A8Sm90Choice(small)))


THREE_CONSUMER_CASES = [  # (scheme, block_size, output, activation, alternate)
    ("symmetric", 128, "f16", "none", True), ("symmetric", 128, "f16", "relu6", False),
    ("symmetric", 128, "bf16", "silu", True), ("symmetric", 128, "f32", "relu", True),
    ("asymmetric", 128, "f16", "none", True), ("asymmetric", 32, "f16", "relu6", True),
]


@pytest.mark.parametrize("k_blocks", [1, 3, 19])
@pytest.mark.parametrize("m, n", [(1, 8), (3, 8), (17, 8 * 37), (1000, 8 * 37)])
@pytest.mark.parametrize("scheme, block_size, out_name, activation, alternate", THREE_CONSUMER_CASES)
def test_three_consumer_tile(scheme, block_size, out_name, activation, alternate, m, n, k_blocks):
    """The 192 x 128 tile of three consumer warp groups (schedule "cooperative3": qgemm's kernel layer and
    its direct-store epilogue), in turns (two issue while one promotes: units in a ring of per-warp-group
    barriers) and free: odd M (1000 = 5 x 192 + 40: a partial row tile; M < 64 leaves two warp groups only
    padding rows), N at its minimum (8) and with a partial column tile, 1, 3 and 19 K-blocks (fewer units
    than the ring's depth, and many), bias, activations and every output. Besides the float64 bound its
    output equals the 128 x 128 cooperative kernel's bit for bit: the same int32 products promoted in the
    same order and the same epilogue arithmetic, so a warp group on the wrong rows, a stage released early
    or a store to the wrong place cannot hide in rounding."""
    out_dtype = OUT_DTYPES[out_name]
    epilogue = "silu" if activation == "silu" else "clamp"
    three = W8A8Sm90Spec((192, 128), block_size, scheme, out_name, "cooperative3", epilogue=epilogue,
                         alternate=alternate)
    two = W8A8Sm90Spec((128, 128), block_size, scheme, out_name, epilogue=epilogue)
    k = max(block_size, 128) * k_blocks if block_size >= 128 else block_size * (4 * k_blocks + 1)
    out, ref, plan, xq = _case(m, n, k, block_size, scheme, out_dtype, activation=activation, with_bias=m != 3,
                               choice=heuristics.W8A8Sm90Choice(three))
    assert rel_err(out, ref) < BOUND[out_dtype]
    assert torch.equal(out, plan.gemm(xq, choice=heuristics.W8A8Sm90Choice(two)))


def test_three_consumer_tile_graph_and_two_streams():
    """The three-consumer kernel captured in a CUDA graph and replayed with new inputs, and on two streams
    at once: each result equal to the 128 x 128 kernel's eager result."""
    spec = W8A8Sm90Spec((192, 128), 128, "symmetric", "f16", "cooperative3", alternate=True)
    choice = heuristics.W8A8Sm90Choice(spec)
    m, n, k = 700, 392, 1024
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k), 128, scheme="symmetric"),
                              out_dtype=torch.float16)
    xs = [qgemm.quantize_activations(randn(m, k, dtype=torch.float16), 128, symmetric=True) for _ in range(2)]
    expected = [plan.gemm(xq, choice=heuristics.W8A8Sm90Choice(dataclasses.replace(
        spec, tile=(128, 128), schedule="cooperative", alternate=False))) for xq in xs]
    static = qgemm.quantize_activations(randn(m, k, dtype=torch.float16), 128, symmetric=True)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    plan.gemm(static, out=out, choice=choice)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            plan.gemm(static, out=out, choice=choice)
    for i, xq in enumerate(xs):
        static.q.copy_(xq.q)
        static.scale.copy_(xq.scale)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected[i])
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for _ in range(10):
        for s, xq in zip(streams, xs):
            with torch.cuda.stream(s):
                outs.append(plan.gemm(xq, choice=choice))
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        assert torch.equal(o, expected[i % 2])


@pytest.mark.parametrize("scheme, n, ms", [("symmetric", 384, (4, 200)), ("asymmetric", 384, (4, 200)),
                                           ("symmetric", 2048, (2048,))])
def test_cuda_graph_and_two_streams(scheme, n, ms):
    """Captured in a graph (decode M, a stream-K M, and M = 2048 on N = 2048, where the symmetric plan
    takes the 256 x 128 tile: 8 x 16 tiles, one wave on an H100), replayed with new inputs; the same
    plan on two streams at once (the last M), each result equal to the eager call's."""
    k = 1024
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k), 128, scheme=scheme),
                              out_dtype=torch.float16)
    if n == 2048 and torch.cuda.get_device_properties(0).multi_processor_count >= 128:
        assert plan.choice(2048).spec.tile == (256, 128)
    for m in ms:
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

    xs = [randn(ms[-1], k, dtype=torch.float16) for _ in range(2)]
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


@pytest.mark.parametrize("scheme, m, tile, swap_ab, scheduler, splits", [
    ("symmetric", 16, (128, 16), True, "streamk", 4),      # the decode split-K: partials between CTAs
    ("symmetric", 16, (64, 16), True, "persistent", 0),    # pingpong: a warp group per tile
    ("asymmetric", 32, (64, 32), True, "persistent", 0),
    ("asymmetric", 16, (128, 16), True, "persistent", 0),
    ("asymmetric", 64, (128, 32), True, "streamk", 0),
    ("symmetric", 300, (128, 128), False, "persistent", 0),
    ("asymmetric", 300, (128, 128), False, "streamk", 0),  # warp groups in turns, stream-K fix-up
    ("symmetric", 300, (256, 128), False, "streamk", 3),
    ("symmetric", 300, (192, 128), False, "persistent", 0),  # three consumer warp groups, qgemm's kernel layer
])
def test_programmatic_launch_chain(scheme, m, tile, swap_ab, scheduler, splits):
    """The Sm90 kernels are launched with programmatic stream serialization after act_quant, which lets
    them start early: their TMA and vector warps wait for it before any load. A chain where each link
    quantizes the previous link's output and multiplies it (eager, with torch kernels between every
    other pair of links, and captured in a CUDA graph) must equal the same chain with the GPU
    synchronized after every call: a missing wait would read half-written codes or scales."""
    from gpu_util import check_dependent_chain
    from qgemm import _runtime
    n = k = 1024
    symmetric = scheme == "symmetric"
    # Weights scaled so that two links in a row stay well inside FP16.
    plans = [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k, seed=60 + i) * 0.02, 128, scheme=scheme),
                                out_dtype=torch.float16) for i in range(3)]
    spec = W8A8Sm90Spec(tile, 128, scheme, "f16", w8a8_sm90_schedule(tile), scheduler, swap_ab,
                        alternate=w8a8_sm90_alternate(scheme, 128, tile, swap_ab),
                        blocks_in_flight=w8a8_sm90_blocks_in_flight(128, tile, swap_ab))
    assert spec.programmatic_launch
    assert _runtime.get_kernel(spec, 90).programmatic_launch == _runtime.PROGRAMMATIC_LAUNCH
    choice = heuristics.W8A8Sm90Choice(spec, splits=splits)

    def link(i, y):
        return plans[i % 3].gemm(qgemm.quantize_activations(y, 128, symmetric=symmetric), choice=choice)

    check_dependent_chain(link, randn(m, k, dtype=torch.float16, seed=7))


def test_chained_reference_path_agrees():
    """The reference path (launch_mode='chained') and the Sm90 kernel compute the same GEMM."""
    m, n, k = 77, 264, 1024
    weight = qgemm.W8A8Weight.from_float(randn(n, k), 64)
    xq = qgemm.quantize_activations(randn(m, k), 64)
    sm90 = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float32).gemm(xq)
    chained = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float32, launch_mode="chained").gemm(xq)
    torch.cuda.synchronize()
    assert rel_err(sm90, chained.double()) < 1e-5


def test_block_int8_checkpoint():
    """A DeepSeek-style block-INT8 pair (int8 weight, weight_scale_inv [ceil(N/128), K/128]) with N
    not a multiple of 128: the last row block is partial."""
    n, k, m = 200, 512, 9
    w = randn(n, k)
    q, scale_inv = reference.quantize_weight_blocks_symmetric(w, 128)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_block_int8(q, scale_inv), out_dtype=torch.bfloat16)
    xq = qgemm.quantize_activations(randn(m, k, dtype=torch.bfloat16), 128, symmetric=True)
    out = plan.gemm(xq)
    torch.cuda.synchronize()
    ref = reference.w8a8_gemm_symmetric(xq.q, xq.scale, q, scale_inv, 128)
    assert rel_err(out, ref) < BOUND[torch.bfloat16]
