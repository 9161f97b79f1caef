"""FpA x IntB kernels on the GPU against float64 references of the same quantized weights.

The reference is x (float64, from the very FP16/BF16 values the kernel reads) times the
dequantized weight (u - zero) * scale in float64, plus bias, then the activation.

Error bounds (||out - ref|| / ||ref||):
  * converters (dequantization kernel with scale 1 or 2^-3): bit-exact. (u - zero) is a small
    integer, exact in FP16 and BF16, and a power-of-two scale multiplies exactly.
  * GEMM, float16: 2e-3. The kernels form each weight as (u - zero) * scale rounded once to
    float16 (relative error <= 2^-11, random in sign) before FP32-accumulated tensor-core MMAs,
    and round the output once to float16 (<= 2^-11 relative). Together about 2^-11 * 1.2 RMS
    (6e-4); 2e-3 leaves 3x headroom. Stream-K adds the CTAs' FP32 partial sums in FP32, and
    the tiled GEMM with one M tile per warp scales each K tile's exact-integer sum in FP32 instead
    of rounding each weight: both only lower the error.
  * GEMM, bfloat16: 1e-2. The same two roundings at 2^-9 each: about 2.3e-3 RMS; 4x headroom.
  * The dequantize-then-cuBLAS path rounds the same two places, so it has the same bounds.
Outputs are poisoned with NaN before each launch, so an unwritten element fails.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.families.fpaintb import FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec
from qgemm import wq_format
from qgemm.fpaintb import heuristics
from qgemm.fpaintb import IntBWeight

from gpu_util import assert_graph_replays, check_dependent_chain, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

ODD_M = (1, 3, 17, 1000)
BOUND = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
ACTS = (torch.float16, torch.bfloat16)


def random_weight(k, n, bits, group_size, zeros: bool, dtype, seed=0) -> IntBWeight:
    """Random codes, positive scales (never zero) and optional zero points."""
    g = torch.Generator().manual_seed(seed)
    groups = k // group_size
    u = torch.randint(0, 2 ** bits, (k, n), generator=g, dtype=torch.uint8)
    scale = (torch.rand(groups, n, generator=g) * 0.02 + 0.005).to(dtype)
    zero = torch.randint(0, 2 ** bits, (groups, n), generator=g, dtype=torch.uint8) if zeros else None
    w = wq_format.IntWeight(u, scale, zero, bits, group_size, None)
    return IntBWeight.from_int_weight(w).to("cuda")


def reference(x, weight: IntBWeight, bias=None, activation="none"):
    out = x.double() @ weight.dequantize()
    if bias is not None:
        out = out + bias.double()
    return {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}[activation](out)


def run(plan, x, choice=None):
    out = torch.full((x.shape[0], plan.weight.n), float("nan"), dtype=x.dtype, device="cuda")
    result = plan(x, out, choice=choice)
    torch.cuda.synchronize()
    assert result.data_ptr() == out.data_ptr()
    return out


# ---- converters: every code, exactly ---------------------------------------------------------

@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("zeros", (False, True))
def test_converters_exhaustive(bits, dtype, zeros):
    k, n = 512, 64
    codes = 2 ** bits
    kk, nn_ = torch.meshgrid(torch.arange(k), torch.arange(n), indexing="ij")
    u = ((kk + 3 * nn_) % codes).to(torch.uint8)        # every code in every column
    groups = k // 32
    zero = (torch.arange(groups * n).reshape(groups, n) % codes).to(torch.uint8) if zeros else None
    for scale_value in (1.0, 0.125):
        scale = torch.full((groups, n), scale_value, dtype=dtype)
        weight = IntBWeight.from_int_weight(wq_format.IntWeight(u, scale, zero, bits, 32, None)).to("cuda")
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype)
        dense = plan.dequantize()
        expected = weight.dequantize().t().to(dtype)
        assert torch.equal(dense.cpu(), expected.cpu()), f"int{bits} -> {dtype}: converter is not exact"
    assert set(u.unique().tolist()) == set(range(codes))


# ---- GEMM: every kernel, dtype, width and group size, odd shapes -----------------------------

def _shapes(group_size):
    # N = 8 and K = 64 are the smallest legal sizes; K = 320 ends on half a 128-row block.
    if group_size in (32, 64):
        return [(8, 64 if group_size == 64 else 64), (24, 320)]
    return [(8, 2 * group_size), (136, 3 * group_size)]


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("group_size", (32, 64, 128, 256, "channel"))
@pytest.mark.parametrize("zeros", (False, True))
def test_gemm_odd_shapes(bits, dtype, group_size, zeros):
    shapes = _shapes(128) if group_size == "channel" else _shapes(group_size)
    for n, k in shapes:
        g = k if group_size == "channel" else group_size
        weight = random_weight(k, n, bits, g, zeros, dtype, seed=n + k)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype)
        for m in ODD_M:
            x = randn(m, k, dtype=dtype, seed=m)
            err = rel_err(run(plan, x), reference(x, weight))
            assert err < BOUND[dtype], (m, n, k, g, plan.choice(m).spec.name, err)


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
def test_every_catalog_kernel(bits, dtype):
    """Each small-M kernel of the catalog, plus Sm75's two-step MMA (FP16), other warp counts,
    deeper prefetch and 8-row CTAs, at M = 1, 17, 64 and 100 (several CTAs along M), with group
    size 64 (scales on the weights) and 128 (scales on each block's sum)."""
    from cutlass_gen.catalog import catalog
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    specs = [s for s in catalog(target, FpAIntBGemvSpec.family) if s.act == act and s.bits == bits]
    if dtype == torch.float16:
        specs += [FpAIntBGemvSpec("f16", bits, 1, 2, 4, arch=75), FpAIntBGemvSpec("f16", bits, 2, 1, 2, arch=75)]
    specs += [FpAIntBGemvSpec(act, bits, 1, 1, w) for w in (1, 2, 8)]
    specs += [FpAIntBGemvSpec(act, bits, 1, 2, 8, min_warps_per_sm=16, prefetch=pf, rows8=r8)
              for pf, r8 in ((2, True), (3, True), (2, False))]
    n = 72  # 9 column tiles
    for group_size, k in ((64, 704), (128, 640)):  # 704: K ends on half a 128-row block
        weight = random_weight(k, n, bits, group_size, True, dtype, seed=7)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=randn(n, dtype=dtype, seed=3))
        for spec in specs:
            for m in (1, 17, 64, 100):
                x = randn(m, k, dtype=dtype, seed=m)
                err = rel_err(run(plan, x, heuristics.FpAIntBChoice(spec)), reference(x, weight, plan.bias))
                assert err < BOUND[dtype], (spec.name, group_size, m, err)


# Decode-variant configurations the tests run besides the catalog's (benchmarks/device_gemv.sh builds
# them up front): one warp, the deepest ring, the widest CTA, 16-token CTAs with 8 warps.
STREAM_EXTRA = [dict(m_tiles=1, n_tiles=2, warps_k=1, rows8=True), dict(m_tiles=1, n_tiles=2, warps_k=8, prefetch=3, rows8=True),
                dict(m_tiles=1, n_tiles=8, warps_k=2, rows8=True), dict(m_tiles=1, n_tiles=2, warps_k=8)]


def stream_test_specs(act, bits, target):
    """The decode variant (FpAIntBGemvSpec stream=True): every catalog configuration plus STREAM_EXTRA, and
    on sm90 every bulk-copy configuration the benchmark sweeps."""
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.fpaintb import fpaintb_stream_configs
    specs = [s for s in catalog(target, FpAIntBGemvSpec.family) if s.act == act and s.bits == bits and s.stream]
    extra = [FpAIntBGemvSpec(act, bits, stream=True, **c) for c in STREAM_EXTRA]
    extra += [FpAIntBGemvSpec(act, bits, **c) for c in fpaintb_stream_configs(bits, sweep=True, target_sm=target)
              if c.get("bulk_stages")]
    return specs + [s for s in extra if s not in specs]


def _stream_specs(act, bits):
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    specs = stream_test_specs(act, bits, target)
    assert any(s.stream for s in specs), "the catalog has the decode variant"
    return specs


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("group_size", (32, 64, 128, 256, "channel"))
@pytest.mark.parametrize("zeros", (False, True))
def test_decode_variant(bits, dtype, group_size, zeros):
    """The decode variant at M = 1, 3, 8, 9, 16 (and 37: several CTA rows), N = 8 (one half tile: the
    other 8 columns clamped) and 40 (the last CTA part past N), K at its minimum for the group (64 for
    group 32/64 and per channel: only the half block past K), K ending on a half block (320) and
    several blocks per warp (1408 or 4 groups), every scale mode (per weight: 32/64, per block:
    128/256, per column), zeros or not, with a bias."""
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    specs = _stream_specs(act, bits)
    if group_size == "channel":
        ks = (64, 320, 1408)
    elif group_size in (32, 64):
        ks = (64, 320, 1408)
    else:
        ks = (group_size, 4 * group_size)
    for n in (8, 40):
        for k in ks:
            g = k if group_size == "channel" else group_size
            weight = random_weight(k, n, bits, g, zeros, dtype, seed=n + k)
            plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=randn(n, dtype=dtype, seed=n))
            for m in (1, 3, 8, 9, 16, 37):
                x = randn(m, k, dtype=dtype, seed=m + k)
                ref = reference(x, weight, plan.bias)
                if m <= heuristics.FPAINTB_STREAM_MAX_M:
                    assert plan.choice(m).spec.stream, plan.choice(m)
                for spec in specs:
                    err = rel_err(run(plan, x, heuristics.FpAIntBChoice(spec)), ref)
                    assert err < BOUND[dtype], (spec.name, m, n, k, g, zeros, err)


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
def test_decode_variant_split_k(bits, dtype):
    """Split-K over CTAs (ctas_per_sm > 0, chosen explicitly: the plan's own decode choice does not
    split, heuristics.FPAINTB_STREAM_CTAS_PER_SM = 0, but the kernel keeps the mode): few output tiles
    (N = 40 and 264) and a long K (8192, 64 blocks; 8320 ends on a half block) split over several CTAs
    each; 7 CTAs at once (0.05 per SM) or all that fit. The last CTA of a tile adds the partials in
    split order: the same bits launch after launch and under graph replay on a side stream."""
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    specs = _stream_specs(act, bits)
    for n, k, group_size, zeros in ((40, 8192, 128, True), (264, 8320, 64, False), (40, 8320, "channel", True)):
        g = k if group_size == "channel" else group_size
        weight = random_weight(k, n, bits, g, zeros, dtype, seed=n + k)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=randn(n, dtype=dtype, seed=n))
        for m in (1, 3, 9, 16):
            x = randn(m, k, dtype=dtype, seed=m + k)
            ref = reference(x, weight, plan.bias)
            if m <= heuristics.FPAINTB_STREAM_MAX_M:
                planned = plan.choice(m)
                assert planned.spec.stream and planned.ctas_per_sm == heuristics.FPAINTB_STREAM_CTAS_PER_SM, planned
            for spec in specs:
                for ctas_per_sm in (0.05, 8):
                    choice = heuristics.FpAIntBChoice(spec, ctas_per_sm)
                    first = run(plan, x, choice)
                    err = rel_err(first, ref)
                    assert err < BOUND[dtype], (spec.name, m, n, k, g, ctas_per_sm, err)
                    assert torch.equal(run(plan, x, choice), first), (spec.name, m, "not deterministic")
    spec = specs[0]
    choice = heuristics.FpAIntBChoice(spec, 8)
    x = randn(1, k, dtype=dtype, seed=1)
    first = run(plan, x, choice)
    out = torch.full_like(first, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan(x, out, choice=choice)
        for _ in range(3):
            out.fill_(float("nan"))
            graph.replay()
    side.synchronize()
    assert torch.equal(out, first)


def test_decode_variant_graph_two_streams_and_nan():
    """The plan's decode choices (the decode variant up to FPAINTB_STREAM_MAX_M rows, the 16-row tiled
    GEMM at M = 16) under CUDA-graph replay and on two streams at once (no state between launches),
    and a NaN in x reaching its row of the output (as an unquantized GEMM's), not others."""
    n, k = 264, 2048
    weight = random_weight(k, n, 4, 128, True, torch.float16, seed=12)
    plan = qgemm.FpAIntBPlan(weight)
    for m in (1, heuristics.FPAINTB_STREAM_MAX_M, 16):
        assert getattr(plan.choice(m).spec, "stream", False) == (m <= heuristics.FPAINTB_STREAM_MAX_M), plan.choice(m)
        x = randn(m, k, dtype=torch.float16, seed=m)
        ref = reference(x, weight)
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        plan(x, out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan(x, out)
        for _ in range(3):
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert rel_err(out, ref) < BOUND[torch.float16]
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        xs = [x, randn(m, k, dtype=torch.float16, seed=m + 100)]
        outs = [torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda") for _ in streams]
        torch.cuda.synchronize()
        for _ in range(10):
            for s, xi, oi in zip(streams, xs, outs):
                with torch.cuda.stream(s):
                    plan(xi, oi)
        torch.cuda.synchronize()
        for xi, oi in zip(xs, outs):
            assert rel_err(oi, reference(xi, weight)) < BOUND[torch.float16]
        xn = x.clone()
        xn[0, 5] = float("nan")
        y = plan(xn)
        torch.cuda.synchronize()
        assert torch.isnan(y[0]).all()
        if m > 1:
            assert not torch.isnan(y[1:]).any()


@pytest.mark.parametrize("bits", (4, 8))
def test_decode_variant_l2_prefetch(bits):
    """L2 prefetch before the wait (FpAIntBChoice.l2_prefetch; sm90 builds) moves bytes into L2 and
    nothing else, so the output must equal the same choice's without it, bit for bit: at N = 8 (the
    CTA's other column groups past N are not prefetched), N = 40 (the last CTA part past N), K ending
    on a half block, split-K (each split prefetches its own blocks), and byte counts below one 16-byte
    unit per column group (no prefetch), around one block and beyond the CTA's whole slice (clamped).
    The choice without prefetch is compared with the float64 reference (test_decode_variant's bound)."""
    for n, k, group_size in ((8, 320, 64), (40, 8320, 128), (264, 4096, 128)):
        weight = random_weight(k, n, bits, group_size if bits == 4 else k, True, torch.float16, seed=n + k)
        plan = qgemm.FpAIntBPlan(weight, bias=randn(n, dtype=torch.float16, seed=n))
        for m in (1, 3, 8):
            x = randn(m, k, dtype=torch.float16, seed=m + k)
            base = plan.choice(m)
            assert base.spec.stream, base
            for ctas_per_sm in (0, 8):
                plain = heuristics.FpAIntBChoice(base.spec, ctas_per_sm)
                expected = run(plan, x, plain)
                err = rel_err(expected, reference(x, weight, plan.bias))
                assert err < BOUND[torch.float16], (base.spec.name, m, n, k, ctas_per_sm, err)
                for nbytes in (16, 4096, 1 << 20):
                    choice = heuristics.FpAIntBChoice(base.spec, ctas_per_sm, l2_prefetch=nbytes)
                    assert torch.equal(run(plan, x, choice), expected), (base.spec.name, m, n, k, ctas_per_sm, nbytes)


@pytest.mark.parametrize("l2_prefetch", (0, 16384))
@pytest.mark.parametrize("m", (1, 8))
def test_decode_variant_programmatic_launch_chain(m, l2_prefetch):
    """On sm90 the decode variant is launched with programmatic stream serialization: its CTAs may
    start while the previous kernel finishes, and wait for it before reading anything. A chain where
    each call reads the previous call's output (eager, with torch kernels between every other pair of
    links, and captured in a CUDA graph) must equal the same chain with the GPU synchronized after every call:
    a missing wait would read a half-written input."""
    from qgemm import _runtime
    n = k = 1024
    plans = [qgemm.FpAIntBPlan(random_weight(k, n, 4, 128, i % 2 == 0, torch.float16, seed=40 + i)) for i in range(3)]
    choice = dataclasses.replace(plans[0].choice(m), l2_prefetch=l2_prefetch)
    assert choice.spec.stream
    if torch.cuda.get_device_capability() == (9, 0):
        assert _runtime.get_kernel(choice.spec, 90).programmatic_launch == _runtime.PROGRAMMATIC_LAUNCH
    x = randn(m, k, dtype=torch.float16, seed=7)
    check_dependent_chain(lambda i, y: plans[i % 3](y, choice=choice), x)


def _gemm_specs(dtype, bits):
    """Every tiled GEMM of the catalog for this type and width, plus the arch-75 (two-stage,
    m16n8k8) ones for FP16."""
    from cutlass_gen.catalog import catalog
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    specs = [s for s in catalog(target, FpAIntBGemmSpec.family) if s.act == act and s.bits == bits]
    if dtype == torch.float16:
        specs += [s for s in catalog(75, FpAIntBGemmSpec.family) if s.bits == bits]
    return specs


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
def test_every_gemm_kernel_stream_k_and_raster(bits, dtype):
    """Each tiled GEMM, one CTA per output tile and stream-K over 0.1, 1 and 4 CTAs per SM (from
    a CTA covering several whole tiles and parts of two, to every K tile of a tile in its own
    CTA), raster groups 1 and 3, on N = 136 (a partial N tile) and K = 704 (a partial 128-row K
    tile), at M = 1, 17, 64 and 300 (several M tiles). Group size 32 puts two or four groups in
    one K tile (scales on the weights), 64 one group in one or two K tiles, K one per column (the
    tile's sum is scaled when the warp has one M tile)."""
    n, k = 136, 704
    for group_size, zeros in ((32, True), (64, False), (k, True)):
        weight = random_weight(k, n, bits, group_size, zeros, dtype, seed=group_size)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=randn(n, dtype=dtype, seed=3))
        for spec in _gemm_specs(dtype, bits):
            for m in (1, 17, 64, 300):
                x = randn(m, k, dtype=dtype, seed=m)
                ref = reference(x, weight, plan.bias)
                for ctas_per_sm, raster in ((0, 1), (0.1, 3), (1, 1), (4, 3)):
                    choice = heuristics.FpAIntBChoice(spec, ctas_per_sm, raster)
                    err = rel_err(run(plan, x, choice), ref)
                    assert err < BOUND[dtype], (spec.name, group_size, m, ctas_per_sm, raster, err)


def test_stream_k_is_deterministic_and_graph_safe():
    """The last CTA of a shared tile adds the contributions in CTA order: the same input gives the
    same bits whichever CTA finishes last, launch after launch, and under CUDA-graph replay (the
    tile counters must come back to zero after every launch), also on a side stream."""
    n, k = 512, 4096
    weight = random_weight(k, n, 4, 128, True, torch.float16, seed=8)
    plan = qgemm.FpAIntBPlan(weight)
    spec = FpAIntBGemmSpec("f16", 4, (16, 128, 128), (16, 32), 4)
    choice = heuristics.FpAIntBChoice(spec, 2)
    x = randn(5, k, dtype=torch.float16, seed=5)
    first = run(plan, x, choice)
    assert rel_err(first, reference(x, weight)) < BOUND[torch.float16]
    for _ in range(20):
        assert torch.equal(run(plan, x, choice), first)
    assert_graph_replays(lambda o: plan(x, o, choice=choice), torch.full_like(first, float("nan")), first, replays=5)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = plan(x, choice=choice)
    side.synchronize()
    assert torch.equal(y, first)


@pytest.mark.parametrize("activation", ("relu", "silu", "gelu"))
def test_bias_and_activation(activation):
    n, k = 264, 1024
    # The small-M kernel's epilogue, the tiled GEMM's (on sm90: the Sm90 kernel's, from 17 rows), and
    # dequantize + cuBLAS (2500: past both the Sm80 path's threshold and the Sm90 kernel's).
    for m in (1, 17, 200, 2500):
        weight = random_weight(k, n, 4, 128, False, torch.float16, seed=1)
        bias = randn(n, dtype=torch.float16, seed=2)
        plan = qgemm.FpAIntBPlan(weight, bias=bias, activation=activation)
        x = randn(m, k, dtype=torch.float16, seed=m)
        err = rel_err(run(plan, x), reference(x, weight, bias, activation))
        assert err < BOUND[torch.float16], (m, activation, err)


def test_dequantize_path_and_forced_choices():
    n, k = 128, 512
    weight = random_weight(k, n, 4, 128, True, torch.bfloat16, seed=5)
    plan = qgemm.FpAIntBPlan(weight, act_dtype=torch.bfloat16)
    dequant = heuristics.FpAIntBChoice(FpAIntBDequantSpec("bf16", 4))
    gemv = heuristics.FpAIntBChoice(FpAIntBGemvSpec("bf16", 4, 2, 4, 2))
    gemm = heuristics.FpAIntBChoice(FpAIntBGemmSpec("bf16", 4, (128, 128, 64), (64, 32), 3), ctas_per_sm=1)
    for m in (1, 1000):
        x = randn(m, k, dtype=torch.bfloat16, seed=m)
        ref = reference(x, weight)
        for choice in (dequant, gemv, gemm):
            assert rel_err(run(plan, x, choice), ref) < BOUND[torch.bfloat16], (m, choice.spec.name)


# ---- checkpoints and the module ---------------------------------------------------------------

def test_gptq_act_order_and_awq_on_gpu():
    k, n, gs = 512, 64, 128
    g = torch.Generator().manual_seed(11)
    u = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // gs, n, generator=g) * 0.02 + 0.005).half()
    zeros = torch.randint(1, 16, (k // gs, n), generator=g, dtype=torch.uint8)
    g_idx = torch.randperm(k, generator=g) // gs
    qweight, qzeros, _, _ = wq_format.pack_gptq(wq_format.IntWeight(u, scales, zeros, 4, gs, None))
    layer = qgemm.nn.QuantLinear.from_gptq(qweight.cuda(), qzeros.cuda(), scales.cuda(), g_idx.cuda())
    expected_w = wq_format.from_gptq(qweight, qzeros, scales, g_idx).dequantize()
    x = randn(5, k, dtype=torch.float16, seed=4)
    assert rel_err(layer(x), x.double().cpu() @ expected_w) < BOUND[torch.float16]

    aq, az, _ = wq_format.pack_awq(wq_format.IntWeight(u, scales, zeros, 4, gs, None))
    layer = qgemm.nn.QuantLinear.from_awq(aq.cuda(), az.cuda(), scales.cuda())
    expected_w = wq_format.from_awq(aq, az, scales).dequantize()
    assert rel_err(layer(x), x.double().cpu() @ expected_w) < BOUND[torch.float16]


@pytest.mark.parametrize("bits,group_size", ((4, 128), (8, -1)))
def test_quant_linear_from_float(bits, group_size):
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 512).cuda().half()
    layer = qgemm.nn.QuantLinear.from_float(linear, bits=bits, group_size=group_size)
    x = randn(2, 3, 1024, dtype=torch.float16, seed=9)
    y = layer(x)
    assert y.shape == (2, 3, 512) and y.dtype == torch.float16
    ref = x.double() @ layer.dequantize().cuda() + linear.bias.double()
    assert rel_err(y, ref) < BOUND[torch.float16]
    # and close to the unquantized layer: RTN error only (int4 g128: a few percent)
    assert rel_err(y, linear(x).double()) < (0.1 if bits == 4 else 0.01)


def test_graph_capture_and_side_stream():
    n, k = 256, 1024
    weight = random_weight(k, n, 4, 128, False, torch.float16, seed=2)
    plan = qgemm.FpAIntBPlan(weight)
    x = randn(1, k, dtype=torch.float16, seed=1)
    out = torch.full((1, n), float("nan"), dtype=torch.float16, device="cuda")
    plan(x, out)  # warm: loads the kernel
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan(x, out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, reference(x, weight)) < BOUND[torch.float16]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = plan(x)
    side.synchronize()
    assert rel_err(y, reference(x, weight)) < BOUND[torch.float16]


@pytest.mark.parametrize("bits", (4, 8))
def test_packing_on_the_gpu_matches_the_cpu(bits):
    """Large checkpoints are packed where they are: the torch packer gives the same bytes on the GPU."""
    from qgemm.fpaintb.pack import pack, unpack
    g = torch.Generator().manual_seed(bits)
    u = torch.randint(0, 2 ** bits, (4096, 1024), generator=g, dtype=torch.uint8)
    on_gpu = pack(u.cuda(), bits)
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), pack(u, bits))
    assert torch.equal(unpack(on_gpu, bits, 4096, 1024).cpu(), u)
