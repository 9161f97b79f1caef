"""FP8 blockwise kernels (sm90) on the GPU against float64 references of the same quantized inputs.

Error bounds (||out - ref|| / ||ref||, ref in float64 from the very FP8 values and scales the
kernel read):
  * activation quantization: bit-exact. The kernel performs reference.quantize_fp8_groups's
    float32 operations (amax, one IEEE division for the scale, one per element, clamp, round to
    nearest even into FP8) with no contraction.
  * GEMM, bfloat16 output: 5e-3. Rounding to bfloat16 costs at most 2^-9 (2.0e-3) relative per
    element. The FP8 products are exact; Hopper's FP8 tensor cores add them with a reduced
    (about 14-bit) alignment inside each 128-K block, which CUTLASS's promotion to FP32 after
    every block keeps local: measured well under 1e-3 relative on the shapes below.
  * GEMM, float16 output: 2e-3. float16 rounding is 2^-12 (2.4e-4) relative; the rest as above.
  * End to end (quantize + GEMM vs the unquantized float64 product): 6e-2. E4M3 keeps 3 mantissa
    bits, so each operand's rounding is up to 2^-4 relative and about 2.6% RMS; two operands give
    about 3.7% (measured on the CPU reference with these distributions).
Outputs are poisoned with NaN before each launch, so an unwritten element fails.
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
from qgemm import reference
from qgemm.fp8 import heuristics

from gpu_util import poison_allocator, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 GPU"),
]

ODD_M = (1, 3, 17, 1000)
BOUND = {torch.bfloat16: 5e-3, torch.float16: 2e-3}
END_TO_END_BOUND = 6e-2
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


# The stream-K scheduler is in no catalog kernel (the heuristic never picks it); it is tested
# here, built on first use, with CUTLASS's decomposition and with split-K.
STREAMK = ((128, 64), (1, 1), "cooperative", "streamk", True)


def catalog_configs():
    seen = []
    for spec in catalog(90, Fp8BlockwiseGemmSpec.family):
        key = (spec.tile, spec.cluster, spec.schedule, spec.scheduler, spec.swap_ab)
        if key not in seen:
            seen.append(key)
    return seen + [STREAMK]


def make_weight(n, k, seed=1):
    # Weight-like magnitudes, with one 128 x 128 block scaled up to exercise distinct block scales.
    w = randn(n, k, seed=seed) * 0.05
    w[: min(n, 128), :128] *= 8
    return qgemm.Fp8Weight.from_float(w)


def reference_out(xa, weight, bias=None):
    return reference.fp8_blockwise_gemm(xa.q, xa.scale, weight.qweight, weight.scale_inv, bias)


@pytest.mark.parametrize("out", FP8)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", ODD_M)
def test_quantize_activations_bit_exact(dtype, m, out):
    x = randn(m, 384, dtype=dtype)
    x[0, :128] = 0  # an all-zero group: scale eps / fp8_max, q 0
    x[-1, 128:256] *= 1000
    xa = qgemm.quantize_activations_fp8(x, out)
    q, sx = reference.quantize_fp8_groups(x, out)
    assert xa.q.dtype == out and xa.scale.shape == (3, reference.fp8_scale_pitch(m))
    assert torch.equal(xa.q.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(xa.scale[:, :m], sx[:, :m])
    assert torch.isfinite(xa.scale).all()


def test_from_row_scales_matches_kernel_layout():
    x = randn(5, 256, dtype=torch.bfloat16)
    xa = qgemm.quantize_activations_fp8(x)
    wrapped = qgemm.Fp8Activations.from_row_scales(xa.q, xa.scale[:, :5].t().contiguous())
    assert torch.equal(wrapped.scale[:, :5], xa.scale[:, :5])
    assert wrapped.scale.shape == xa.scale.shape


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("config", catalog_configs(), ids=lambda c: "{}x{}_c{}x{}_{}_{}{}".format(
    *c[0], *c[1], c[2], c[3], "_swapab" if c[4] else ""))
@pytest.mark.parametrize("n, k", [(8, 128), (136, 384)])
def test_every_catalog_kernel_matches_reference(config, m, out_dtype, n, k):
    """Each catalog kernel, forced past the heuristic, at the smallest legal N (8) and K (128)
    and at a partial weight-scale block (N = 136), for every odd M."""
    tile, cluster, schedule, scheduler, swap_ab = config
    spec = Fp8BlockwiseGemmSpec(tile, cluster, schedule, swap_ab, qgemm.fp8.OUTPUT_DTYPES[out_dtype],
                                scheduler=scheduler)
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight, out_dtype=out_dtype)
    xa = qgemm.quantize_activations_fp8(randn(m, k, dtype=torch.bfloat16))
    poison_allocator()
    out = plan.gemm(xa, choice=heuristics.Fp8Choice(spec))
    assert out.dtype == out_dtype and out.shape == (m, n)
    assert rel_err(out, reference_out(xa, weight)) < BOUND[out_dtype]


@pytest.mark.parametrize("m", (1, 64, 128, 129, 4096))
@pytest.mark.parametrize("n, k", [(2112, 7168), (7168, 2048), (4096, 7168)])
def test_heuristic_choice_on_deepseek_shapes(m, n, k):
    """The plan's own kernel choice on the benchmark's DeepSeek-V3 shapes (N = 2112 is not a
    multiple of 128: a partial weight-scale block)."""
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight)
    x = randn(m, k, dtype=torch.bfloat16)
    xa = qgemm.quantize_activations_fp8(x)
    poison_allocator()
    out = plan.gemm(xa)
    assert rel_err(out, reference_out(xa, weight)) < BOUND[torch.bfloat16]


@pytest.mark.parametrize("m", (3, 200))
def test_bias_and_end_to_end(m):
    n, k = 264, 512
    w = randn(n, k, seed=3) * 0.05
    bias = randn(n, seed=4)
    weight = qgemm.Fp8Weight.from_float(w)
    plan = qgemm.Fp8GemmPlan(weight, bias=bias)
    x = randn(m, k, dtype=torch.bfloat16)
    poison_allocator()
    out = plan(x)
    xa = qgemm.quantize_activations_fp8(x)
    assert rel_err(out, reference_out(xa, weight, bias)) < BOUND[torch.bfloat16]
    exact = x.double() @ w.double().t() + bias.double()
    assert rel_err(out, exact) < END_TO_END_BOUND


@pytest.mark.parametrize("splits", (0, 3))
@pytest.mark.parametrize("m", (1, 17, 1000))
def test_streamk_split_k(m, splits):
    n, k = 264, 128 * 7
    tile, cluster, schedule, scheduler, swap_ab = STREAMK
    spec = Fp8BlockwiseGemmSpec(tile, cluster, schedule, swap_ab, "bf16", scheduler=scheduler)
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight)
    xa = qgemm.quantize_activations_fp8(randn(m, k, dtype=torch.bfloat16))
    for _ in range(2):  # the second call sees a fresh zeroed workspace again
        poison_allocator()
        out = plan.gemm(xa, choice=heuristics.Fp8Choice(spec, splits=splits))
        assert rel_err(out, reference_out(xa, weight)) < BOUND[torch.bfloat16]


def test_e5m2_weight():
    n, k, m = 136, 256, 3
    weight = qgemm.Fp8Weight.from_float(randn(n, k, seed=5) * 0.05, torch.float8_e5m2)
    plan = qgemm.Fp8GemmPlan(weight)
    xa = qgemm.quantize_activations_fp8(randn(m, k, dtype=torch.bfloat16))
    poison_allocator()
    out = plan.gemm(xa)
    assert plan.choice(m).spec.weight == "e5m2"
    assert rel_err(out, reference_out(xa, weight)) < BOUND[torch.bfloat16]


def test_e5m2_activations():
    n, k, m = 256, 384, 17
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight, act_dtype=torch.float8_e5m2, out_dtype=torch.float16)
    xa = qgemm.quantize_activations_fp8(randn(m, k, dtype=torch.float16), torch.float8_e5m2)
    poison_allocator()
    out = plan.gemm(xa)
    assert plan.choice(m).spec.act == "e5m2"
    assert rel_err(out, reference_out(xa, weight)) < BOUND[torch.float16]


def test_fp8_linear_module_from_float_and_deepseek():
    linear = torch.nn.Linear(512, 392, bias=True).cuda()
    module = qgemm.nn.Fp8Linear.from_float(linear)
    x = randn(2, 5, 512, dtype=torch.bfloat16)
    y = module(x)
    assert y.shape == (2, 5, 392) and y.dtype == torch.bfloat16
    exact = x.double() @ linear.weight.double().t() + linear.bias.double()
    assert rel_err(y, exact) < END_TO_END_BOUND
    again = qgemm.nn.Fp8Linear.from_deepseek(module.weight, module.weight_scale_inv, linear.bias)
    assert torch.equal(again(x), y)


def test_repeated_calls_and_cuda_graph():
    n, k, m = 1024, 1024, 16
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight)
    x = randn(m, k, dtype=torch.bfloat16)
    first = plan(x)
    for _ in range(3):
        assert torch.equal(plan(x), first)  # stream-K's workspace is fresh and zeroed each call
    static_out = torch.empty_like(first)
    plan(x, out=static_out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan(x, out=static_out)
    static_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, first)


def test_side_stream():
    n, k, m = 512, 768, 40
    weight = make_weight(n, k)
    plan = qgemm.Fp8GemmPlan(weight)
    x = randn(m, k, dtype=torch.bfloat16)
    expected = plan(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = plan(x)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, expected)
