"""The fused W8A8 decode kernel (W8A8GemvSpec: each CTA quantizes its K slice of x, then streams
the int8 weight; M <= 16) on the GPU, against float64 references of the same quantized operands.

* Quantized operands: the kernel's debug dump of its quantized x (codes, scales, offsets, sums)
  equals the act_quant kernel's (qgemm.quantize_activations) bit for bit, so the reference below,
  built from act_quant's output, is the reference of exactly the kernel's operands.
* Bounds (||out - ref|| / ||ref||), as in test_w8a8_sm90_gpu.py: FP32 output 1e-4 (exact int32
  block products, |P| <= 2^22, converted exactly; a few FP32 roundings per block and per K split),
  FP16 1e-3 (2^-11 per element), BF16 8e-3 (2^-8 per element).
Outputs are poisoned (NaN) before each launch; inputs are fresh random numbers with a non-zero mean.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from qgemm import reference
from qgemm.w8a8 import heuristics

from gpu_util import check_dependent_chain, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8,
                       reason="needs an sm80+ GPU"),
]

BOUND = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
SCHEMES = ("asymmetric", "symmetric")


def _plan(n, k, block_size, scheme, out_dtype, activation="none", with_bias=False):
    weight = qgemm.W8A8Weight.from_float(randn(n, k), block_size, scheme=scheme)
    bias = randn(n) if with_bias else None
    plan = qgemm.W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype)
    assert plan._gemv is not None, "launch_mode 'auto' on sm80+ routes decode to the fused kernel"
    return plan, weight, bias


def _reference(plan, weight, bias, x, activation):
    xq = qgemm.quantize_activations(x, weight.block_size, symmetric=weight.scheme == "symmetric")
    if weight.scheme == "symmetric":
        ref = reference.w8a8_gemm_symmetric(xq.q, xq.scale, weight.qweight, weight.scale, weight.block_size, bias,
                                            activation)
    else:
        ref = reference.w8a8_gemm(xq.q, xq.scale, xq.offset, weight.qweight, weight.scale, weight.offset,
                                  weight.block_size, bias, activation)
    return xq, ref


def _run(plan, x, choice=None, dump=False):
    """The plan's fused kernel on x into a poisoned output; with dump, also its quantized x."""
    m, k = x.shape
    out = torch.full((m, plan.weight.n), float("nan"), dtype=plan.out_dtype, device="cuda")
    d = None
    if dump:
        d = (torch.full((m, k), 99, dtype=torch.int8, device="cuda"),
             torch.full((3, k // plan.weight.block_size, m), float("inf"), device="cuda"))
    plan._call_gemv(x, out, m, choice=choice, dump=d)
    torch.cuda.synchronize()
    return out, d


def _skip_unless_target(variant=None, spec=None):
    """Cluster variants (arch 90) need an sm90 GPU."""
    arch = spec.arch if spec is not None else heuristics.W8A8_GEMV_VARIANTS[variant].get("arch", 80)
    if arch >= 90 and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread block clusters need an sm90 GPU")


def _check(m, n, k, block_size, scheme, out_dtype, x_dtype=torch.float16, activation="none", with_bias=False,
           variant=None, slice_blocks=None):
    """variant / slice_blocks: force the kernel variant and the K-blocks per CTA (else the heuristic's)."""
    plan, weight, bias = _plan(n, k, block_size, scheme, out_dtype, activation, with_bias)
    x = randn(m, k, dtype=x_dtype)
    choice = None
    if variant is not None:
        choice = plan._gemv.choice(m, x_dtype, variant=variant)
        if slice_blocks is not None:
            choice = heuristics.W8A8GemvChoice(choice.spec, slice_blocks)
    out, dump = _run(plan, x, choice, dump=True)
    xq, ref = _reference(plan, weight, bias, x, activation)
    torch.cuda.synchronize()
    assert torch.equal(dump[0], xq.q), "the fused kernel's codes are act_quant's"
    vectors = (xq.scale,) if scheme == "symmetric" else (xq.scale, xq.offset, xq.qsum)
    for got, want in zip(dump[1], vectors):
        assert torch.equal(got, want), "the fused kernel's scales (offsets, sums) are act_quant's"
    assert rel_err(out, ref) < BOUND[out_dtype]
    return plan


@pytest.mark.parametrize("variant", list(heuristics.W8A8_GEMV_VARIANTS))
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("block_size", [32, 64, 128, 256])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_every_variant_block_size_and_m(variant, scheme, block_size, m):
    """N at the smallest alignment with a tail tile (N = 4 mod 8, not a multiple of the CTA's columns),
    K of 5 blocks split over CTAs (blocks of 32: an odd count, a slice ends half-way through a
    64-K chunk; cluster variants: 3 slices in a cluster of 8, so 5 CTAs add zeros)."""
    _skip_unless_target(variant)
    _check(m, 260, block_size * 5, block_size, scheme, torch.float16, variant=variant, slice_blocks=2)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("block_size", [32, 128, 256])
def test_k_at_one_block_and_n_at_four(scheme, block_size):
    """K = one block (one split, no partials) and N = 4 (one 4-column vector, one tile)."""
    plan = _check(1, 4, block_size, block_size, scheme, torch.float32, x_dtype=torch.float32)
    assert plan._gemv.choice(1, torch.float32).slice_blocks == 1


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("nk", [(2112, 7168), (4096, 4096), (7168, 2048)])
def test_benchmark_shapes(scheme, m, nk):
    """The heuristic's choice on benchmark shapes (many splits, last-CTA reductions)."""
    _check(m, *nk, 128, scheme, torch.float16)


@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "silu"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_bias_activation_outputs(scheme, out_dtype, activation):
    _check(5, 132, 512, 64, scheme, out_dtype, activation=activation, with_bias=True)


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_input_dtypes_end_to_end(scheme, x_dtype):
    """plan(x) itself (the public path) for each input dtype, output in the input's dtype."""
    n, k, m = 196, 1024, 7
    plan, weight, bias = _plan(n, k, 128, scheme, x_dtype, "none", True)
    x = randn(m, k, dtype=x_dtype)
    out = plan(x)
    _, ref = _reference(plan, weight, bias, x, "none")
    assert rel_err(out, ref) < BOUND[x_dtype]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
def test_non_finite_activation_reaches_its_row(scheme, bad, activation):
    """A NaN or Inf in x makes its block's scale NaN: that row's outputs are NaN (also through the
    ReLU/ReLU6 clamps, which keep NaN), the other rows stay finite."""
    m, n, k = 5, 260, 1024
    plan, _, _ = _plan(n, k, 128, scheme, torch.float16, activation)
    x = randn(m, k, dtype=torch.float16)
    x[2, 700] = bad
    out = plan(x)
    torch.cuda.synchronize()
    assert torch.isnan(out[2]).all()
    assert torch.isfinite(out[[0, 1, 3, 4]]).all()


@pytest.mark.parametrize("variant", list(heuristics.W8A8_GEMV_VARIANTS))
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_non_finite_activation_reaches_its_row_in_every_variant(scheme, bad, variant):
    """The same through each variant forced, the cluster ones (a reduction through distributed shared
    memory) included: on sm90 plan(x) runs those for M <= 4, which the test above (M = 5) does not
    reach. The output starts at zero, so a NaN row is the kernel's."""
    _skip_unless_target(variant)
    m, n, k = 3, 260, 1024
    plan, _, _ = _plan(n, k, 128, scheme, torch.float16, "none")
    x = randn(m, k, dtype=torch.float16)
    x[1, 700] = bad
    out = torch.zeros((m, n), dtype=plan.out_dtype, device="cuda")
    plan._call_gemv(x, out, m, choice=plan._gemv.choice(m, x.dtype, variant=variant))
    torch.cuda.synchronize()
    assert torch.isnan(out[1]).all()
    assert torch.isfinite(out[[0, 2]]).all()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cuda_graph_and_two_streams(scheme):
    """Captured in a graph (one split and a split-K launch), replayed with new inputs; the same plan
    on two streams at once (split-K: each call's own partials and counters), each result equal to
    the eager call's."""
    for n, k in ((64, 128), (1024, 4096)):
        plan, _, _ = _plan(n, k, 128, scheme, torch.float16)
        for m in (1, 16):
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
            graph.replay()  # a second replay: the counters were zeroed inside the graph again
            torch.cuda.synchronize()
            assert torch.equal(captured, plan(x))

    xs = [randn(16, k, dtype=torch.float16) for _ in range(2)]
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
        assert torch.equal(o, expected[i % 2]), "deterministic split-K: bit-equal results"


@pytest.mark.parametrize("variant", ["narrow_cl8", "wide_cl8"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_cluster_variants_graph_and_streams(variant, scheme):
    """The cluster split-K kernels on a benchmark shape, in a CUDA graph and on two streams: one
    kernel node per call, bit-equal results."""
    _skip_unless_target(variant)
    m = 1 if variant.startswith("narrow") else 16
    plan = _check(m, 2112, 7168, 128, scheme, torch.float16, variant=variant)
    x = randn(m, 7168, dtype=torch.float16)
    choice = plan._gemv.choice(m, x.dtype, variant=variant)
    eager, _ = _run(plan, x, choice)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    out = torch.empty_like(eager)
    with torch.cuda.stream(stream):
        plan._call_gemv(x, out, m, choice=choice)  # warm-up on the capture stream
        with torch.cuda.graph(graph, stream=stream):
            plan._call_gemv(x, out, m, choice=choice)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    xs = [randn(m, 7168, dtype=torch.float16) for _ in range(2)]
    expected = [_run(plan, x, choice)[0] for x in xs]
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for _ in range(10):
        for s, x in zip(streams, xs):
            with torch.cuda.stream(s):
                outs.append(plan._call_gemv(x, None, m, choice=choice))
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        assert torch.equal(o, expected[i % 2])


@pytest.mark.parametrize("variant", list(heuristics.W8A8_GEMV_VARIANTS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_l2_prefetch_changes_nothing(scheme, variant):
    """L2 prefetch before the wait (W8A8GemvChoice.l2_prefetch; sm90 builds) moves bytes into L2 and
    nothing else: the output equals the same choice's without it, bit for bit, in every variant,
    at N = 4 (the CTA's columns past N not prefetched), with split-K slices and block 32, for byte
    counts below one 16-byte unit per column (no prefetch), a few rows and past the slice (clamped).
    The choice without prefetch is checked against the float64 reference by _check."""
    _skip_unless_target(variant)
    for m, n, k, block_size in ((1, 4, 256, 32), (3, 264, 7168, 128), (16, 2112, 7168, 128)):
        plan = _check(m, n, k, block_size, scheme, torch.float16, variant=variant)
        x = randn(m, k, dtype=torch.float16)
        base = dataclasses.replace(plan._gemv.choice(m, x.dtype, variant=variant), l2_prefetch=0)
        expected, _ = _run(plan, x, base)
        for nbytes in (16, 8192, 1 << 20):
            choice = dataclasses.replace(base, l2_prefetch=nbytes)
            assert torch.equal(_run(plan, x, choice)[0], expected), (variant, m, n, k, nbytes)


@pytest.mark.parametrize("l2_prefetch", (0, 16384))
@pytest.mark.parametrize("variant", [None, "narrow_cl8"])
def test_programmatic_launch_chain(variant, l2_prefetch):
    """On sm90 the fused kernel is launched with programmatic stream serialization: its CTAs may start
    while the previous kernel finishes and wait for it before any load. A chain where each call reads
    the previous call's output (torch kernels between every other pair of links; eager and replayed
    from a CUDA graph) must equal the same chain with the GPU synchronized after every call."""
    from qgemm import _runtime
    if variant is not None:
        _skip_unless_target(variant)
    n = k = 2048
    # Weights of order 1 / K keep each link's output of the order of its input (x's mean is not zero).
    plans = [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(randn(n, k) / k, 128, scheme="symmetric"),
                                out_dtype=torch.float16) for _ in range(3)]
    x = randn(1, k, dtype=torch.float16)
    choice = dataclasses.replace(plans[0]._gemv.choice(1, x.dtype, variant=variant), l2_prefetch=l2_prefetch)
    if torch.cuda.get_device_capability() == (9, 0):
        assert _runtime.get_kernel(choice.spec, 90).programmatic_launch == _runtime.PROGRAMMATIC_LAUNCH
    check_dependent_chain(lambda i, y: plans[i % 3]._call_gemv(y, None, 1, choice=choice), x)


def test_deterministic_across_calls():
    plan, _, _ = _plan(2112, 7168, 128, "asymmetric", torch.float32)
    x = randn(16, 7168, dtype=torch.float16)
    first = plan(x)
    for _ in range(5):
        assert torch.equal(plan(x), first)


def test_m_above_threshold_takes_the_gemm():
    """M > W8A8_GEMV_MAX_M runs the GEMM path; both agree with the reference."""
    plan, weight, _ = _plan(264, 1024, 128, "symmetric", torch.float32)
    m = heuristics.W8A8_GEMV_MAX_M + 1
    x = randn(m, 1024, dtype=torch.float16)
    out = plan(x)
    _, ref = _reference(plan, weight, None, x, "none")
    assert rel_err(out, ref) < BOUND[torch.float32]


def test_forced_launch_modes_skip_the_fused_kernel():
    weight = qgemm.W8A8Weight.from_float(randn(128, 256), 128)
    assert qgemm.W8A8GemmPlan(weight, launch_mode="promote")._gemv is None


@pytest.mark.parametrize("spec", catalog(90, "w8a8_gemv"), ids=lambda s: s.name)
def test_catalog_kernels_load(spec):
    """Every catalog kernel runs one problem (forced by choice)."""
    _skip_unless_target(spec=spec)
    plan, weight, bias = _plan(260, 512, 128, spec.scheme, DTYPES[spec.output])
    x = randn(3, 512, dtype=DTYPES[spec.input])
    choice = heuristics.W8A8GemvChoice(spec, 2)
    out, _ = _run(plan, x, choice)
    _, ref = _reference(plan, weight, bias, x, "none")
    assert rel_err(out, ref) < BOUND[DTYPES[spec.output]]
