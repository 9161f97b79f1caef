"""The Sm90 FpA x IntB kernel (FpAIntBSm90Spec) on an H100/H200 against float64 references of the same
quantized weights.

The reference is x (float64, from the very FP16/BF16 values the kernel reads) times the dequantized
weight (u - zero) * scale in float64, plus bias, then the activation (tests/test_fpaintb_gpu.py's).

Error bound (||out - ref|| / ||ref||), the same as the Sm80 kernels': 2e-3 for FP16, 1e-2 for BF16.
The kernel forms each weight as w' = q * scale + zero' in the activation type, with signed codes
q = u - 2^(bits-1) (exact) and zero' = scale * (2^(bits-1) - zero) rounded once to that type
(qgemm/fpaintb/pack.py sm90_zero). With unit roundoff eps (2^-11 FP16, 2^-8 BF16) each weight is off
by at most eps (|q scale| + |zero'| + |w|) (tests/test_fpaintb_sm90_cpu.py checks this arithmetic
element by element); with |q|, |2^(bits-1) - zero| <= 2^(bits-1) that is a few eps of |w|, random in
sign, about 1.2 eps RMS relative to the weight's RMS for random codes and zero points. FP32 WGMMA
accumulation adds far less, the output's rounding once more eps/sqrt(3) RMS: about 8e-4 (FP16) and
6e-3 (BF16) in all, under the bounds. Symmetric weights have zero' = 0 and only the rounding of
q * scale (the Sm80 kernels' error); the scale-only kernels they run form q * scale with that same
single rounding. Outputs are poisoned with NaN before each launch, so an unwritten
element fails.

Group size 32 is not a Sm90 size (the collective reads one scale row per 64-deep K tile): such
weights stay on the Sm80 kernels (test_plan_dispatch checks the fallback).
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb import FpAIntBSm90Spec, fpaintb_sm90_specs
from qgemm import wq_format
from qgemm.fpaintb import heuristics
from qgemm.fpaintb import IntBWeight

from gpu_util import assert_graph_replays, poison_allocator, randn, rel_err
from test_fpaintb_gpu import BOUND, random_weight, reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 GPU (H100/H200)"),
]

ODD_M = (1, 3, 17, 1000)
ACTS = (torch.float16, torch.bfloat16)
ACT_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16"}
ACTIVATIONS = ("none", "relu", "silu", "gelu")


def sm90_specs(dtype, bits):
    return [s for s in catalog(90, FpAIntBSm90Spec.family) if (s.act, s.bits) == (ACT_NAMES[dtype], bits)]


def run(plan, x, choice=None):
    out = torch.full((x.shape[0], plan.weight.n), float("nan"), dtype=x.dtype, device="cuda")
    result = plan(x, out, choice=choice)
    torch.cuda.synchronize()
    assert result.data_ptr() == out.data_ptr()
    return out


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
def test_every_catalog_kernel(bits, dtype):
    """Each catalog kernel at odd M (1, 3, 17: one partial token tile; 300, 1000: several), on
    N = 136 (a partial 128-row weight tile: the padded rows are computed, never stored), with group
    sizes 64 (zeros), 128 (zeros), 256 (symmetric) and K (per channel, symmetric), bias and every
    activation; stream-K kernels also with 3 split-K slices. The scale-only kernels (spec.zeros False)
    run on the symmetric weights and are refused, before any launch, for the weights with zeros; the
    128-deep K tile kernels run where K and the group size are multiples of 128 (640 in groups of 128,
    768 in groups of 256) and are refused for the others (K = 704, group 64 or per channel). The 64-deep
    kernels with zeros also run the symmetric per-channel weight (zero' = 0), as the plan runs symmetric
    weights of group 64 on them (the catalog has no 64-deep scale-only form)."""
    n = 136
    for group_size, k, zeros in ((64, 704, True), (128, 640, True), (256, 768, False), (None, 704, False)):
        g = group_size or k
        weight = random_weight(k, n, bits, g, zeros, dtype, seed=g + k)
        bias = randn(n, dtype=dtype, seed=3)
        for i, activation in enumerate(ACTIVATIONS):
            plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation=activation)
            assert plan.sm90
            for spec in sm90_specs(dtype, bits):
                if not spec.supports(k, g):
                    with pytest.raises(ValueError, match="128-deep K tiles"):
                        plan(randn(3, k, dtype=dtype, seed=1), choice=heuristics.FpAIntBSm90Choice(spec))
                    continue
                if zeros and not spec.zeros:
                    with pytest.raises(ValueError, match="scale-only"):
                        plan(randn(3, k, dtype=dtype, seed=1), choice=heuristics.FpAIntBSm90Choice(spec))
                    continue
                splits = (0, 3) if spec.scheduler == "streamk" else (0,)
                for m in ((1, 3, 17, 300, 1000) if activation == "none" else (3, 17, 300)):
                    x = randn(m, k, dtype=dtype, seed=m + i)
                    ref = reference(x, weight, bias, activation)
                    for s in splits:
                        err = rel_err(run(plan, x, heuristics.FpAIntBSm90Choice(spec, splits=s)), ref)
                        assert err < BOUND[dtype], (spec.name, g, zeros, activation, m, s, err)


@pytest.mark.parametrize("dtype", ACTS)
@pytest.mark.parametrize("bits", (4, 8))
@pytest.mark.parametrize("group_size", (32, 64, 128, 256, "channel"))
@pytest.mark.parametrize("zeros", (False, True))
def test_plan_dispatch_odd_shapes(bits, dtype, group_size, zeros):
    """The plan's own choice at the smallest legal N (8) and K (one group of 64, two of the larger
    groups), and N = 24, for odd M and the Sm90 thresholds: Sm90 exactly where
    heuristics.fpaintb_sm90_applies says so (never for group 32; for group 64 only from 17 rows, where
    the 16-token tile's 128-deep K tiles end)."""
    m0, narrow = heuristics.FPAINTB_SM90_MIN_M, heuristics.FPAINTB_SM90_NARROW_MAX_M
    shapes = [(8, 64), (24, 320)] if group_size in (32, 64) else [(8, 2 * (128 if group_size == "channel" else group_size))]
    for n, k in shapes:
        g = k if group_size == "channel" else group_size
        weight = random_weight(k, n, bits, g, zeros, dtype, seed=n + k)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype)
        for m in ODD_M + (m0, narrow):
            choice = plan.choice(m)
            sm90 = heuristics.fpaintb_sm90_applies(m, n, k, g, 90)
            assert isinstance(choice, heuristics.FpAIntBSm90Choice) == sm90, (m, g)
            if sm90:  # random zero points are almost never all at the code bias; CUTLASS's 64-deep loop
                # (group 64) comes only with zeros, which symmetric weights run with zero' = 0
                assert choice.spec.zeros == (zeros or choice.spec.tile_k == 64), (m, g, choice.spec.name)
            assert plan.sm90 == (group_size != 32)
            x = randn(m, k, dtype=dtype, seed=m)
            err = rel_err(run(plan, x), reference(x, weight))
            assert err < BOUND[dtype], (m, n, k, g, choice.spec.name, err)


def test_sm90_opt_out_and_wrong_choices():
    weight = random_weight(256, 64, 4, 128, True, torch.float16, seed=1)
    plan = qgemm.FpAIntBPlan(weight, sm90=False)
    assert not plan.sm90 and isinstance(plan.choice(1000), heuristics.FpAIntBChoice)
    x = randn(64, 256, dtype=torch.float16, seed=2)
    with pytest.raises(ValueError, match="no Sm90 path"):
        plan(x, choice=heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 64), scheduler="streamk")))
    plan = qgemm.FpAIntBPlan(weight)
    with pytest.raises(ValueError, match="does not fit this plan"):
        plan(x, choice=heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("bf16", 4, (128, 64), scheduler="streamk")))
    with pytest.raises(TypeError, match="sm90 must be a bool"):
        qgemm.FpAIntBPlan(weight, sm90=1)


def test_out_aligned_to_4_bytes_runs_the_sm80_kernels():
    """TMA stores need 16-byte aligned rows: a caller's out that is only 4-byte aligned gets the Sm80
    kernel, with the same result."""
    m, n, k = 64, 128, 512
    weight = random_weight(k, n, 4, 128, True, torch.float16, seed=3)
    plan = qgemm.FpAIntBPlan(weight)
    assert isinstance(plan.choice(m), heuristics.FpAIntBSm90Choice)
    x = randn(m, k, dtype=torch.float16, seed=4)
    buf = torch.full((m * n + 2,), float("nan"), dtype=torch.float16, device="cuda")
    out = buf[2:].view(m, n)
    assert out.data_ptr() % 16 == 4
    plan(x, out)
    torch.cuda.synchronize()
    assert rel_err(out, reference(x, weight)) < BOUND[torch.float16]
    with pytest.raises(ValueError, match="16-byte aligned"):
        plan(x, out, choice=plan.choice(m))


@pytest.mark.parametrize("m", (12, 64))
@pytest.mark.parametrize("zeros", (False, True))
def test_nan_and_inf_in_activations_reach_the_output(zeros, m):
    """As in an unquantized GEMM: a NaN or Inf in a row of x makes that row's outputs NaN or +-Inf
    (every weight is non-zero here), other rows stay finite; through the scale-only kernel (symmetric)
    and the one with zeros, on the 16-token tile (12 rows) and the 64-token one."""
    n, k = 128, 512
    g = torch.Generator().manual_seed(5)
    u = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    zero = 7 if zeros else 8
    u[u == zero] = 9  # no zero weight: (u - zero) * scale
    scale = (torch.rand(k // 128, n, generator=g) * 0.02 + 0.005).half()
    zero_points = torch.full((k // 128, n), zero, dtype=torch.uint8) if zeros else None
    weight = IntBWeight.from_int_weight(wq_format.IntWeight(u, scale, zero_points, 4, 128, None)).to("cuda")
    plan = qgemm.FpAIntBPlan(weight)
    x = randn(m, k, dtype=torch.float16, seed=6)
    x[3, 10] = float("nan")
    x[7, 20] = float("inf")
    out = run(plan, x)
    choice = plan.choice(m)
    assert isinstance(choice, heuristics.FpAIntBSm90Choice) and choice.spec.zeros == zeros
    assert out[3].isnan().all() and (out[7].isinf() | out[7].isnan()).all()
    finite = [i for i in range(m) if i not in (3, 7)]
    assert out[finite].isfinite().all()


def test_act_order_and_awq_on_the_sm90_kernel():
    k, n, gs, m = 512, 64, 128, 48
    g = torch.Generator().manual_seed(11)
    u = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // gs, n, generator=g) * 0.02 + 0.005).half()
    zeros = torch.randint(1, 16, (k // gs, n), generator=g, dtype=torch.uint8)
    g_idx = torch.randperm(k, generator=g) // gs
    x = randn(m, k, dtype=torch.float16, seed=4)
    qweight, qzeros, _, _ = wq_format.pack_gptq(wq_format.IntWeight(u, scales, zeros, 4, gs, None))
    layer = qgemm.nn.QuantLinear.from_gptq(qweight.cuda(), qzeros.cuda(), scales.cuda(), g_idx.cuda())
    expected_w = wq_format.from_gptq(qweight, qzeros, scales, g_idx).dequantize()
    assert rel_err(layer(x), x.double().cpu() @ expected_w) < BOUND[torch.float16]
    aq, az, _ = wq_format.pack_awq(wq_format.IntWeight(u, scales, zeros, 4, gs, None))
    layer = qgemm.nn.QuantLinear.from_awq(aq.cuda(), az.cuda(), scales.cuda())
    expected_w = wq_format.from_awq(aq, az, scales).dequantize()
    assert rel_err(layer(x), x.double().cpu() @ expected_w) < BOUND[torch.float16]
    plan = qgemm.FpAIntBPlan(IntBWeight.from_awq(aq, az, scales).to("cuda"))
    assert isinstance(plan.choice(m), heuristics.FpAIntBSm90Choice)
    # A symmetric GPTQ checkpoint stores every zero at the code bias (8): zero' = 0, so the plan takes
    # the scale-only kernel, act-order included.
    sym = torch.full_like(zeros, 8)
    qweight, qzeros, _, _ = wq_format.pack_gptq(wq_format.IntWeight(u, scales, sym, 4, gs, None))
    layer = qgemm.nn.QuantLinear.from_gptq(qweight.cuda(), qzeros.cuda(), scales.cuda(), g_idx.cuda())
    expected_w = wq_format.from_gptq(qweight, qzeros, scales, g_idx).dequantize()
    assert rel_err(layer(x), x.double().cpu() @ expected_w) < BOUND[torch.float16]
    plan = qgemm.FpAIntBPlan(IntBWeight.from_gptq(qweight, qzeros, scales, g_idx).to("cuda"))
    assert not plan.choice(m).spec.zeros


def assert_two_streams(plan, choice, inputs, expected, rounds=10):
    """Two streams calling the plan at once, each on its own input and output, `rounds` times over: each
    output must be the bits that input gave alone (no plan-owned state shared between calls in flight)."""
    streams = [torch.cuda.Stream() for _ in inputs]
    outs = [torch.full_like(e, float("nan")) for e in expected]
    torch.cuda.synchronize()
    for _ in range(rounds):
        for stream, xi, oi in zip(streams, inputs, outs):
            with torch.cuda.stream(stream):
                plan(xi, oi, choice=choice)
    torch.cuda.synchronize()
    for o, e in zip(outs, expected):
        assert torch.equal(o, e), choice.spec.name


@pytest.mark.parametrize("m, tile, scheduler, splits, zeros, mainloop", [
    (200, (128, 128), "streamk", 0, True, "cutlass"),      # CUTLASS's heuristic decomposition
    (24, (128, 32), "streamk", 4, True, "cutlass"),        # the heuristic's explicit split: 8 output tiles on 132 SMs
    (200, (128, 256), "persistent", 0, True, "cutlass"),
    (200, (128, 128), "streamk", 0, False, "cutlass"),     # the scale-only kernels, symmetric weights
    (24, (128, 32), "streamk", 4, False, "cutlass"),
    (1100, (128, 128), "streamk", 0, True, "ahead"),       # qgemm's consumer loop, 128-deep K tiles:
    (200, (128, 64), "streamk", 4, True, "ahead"),         # (few 128-token tiles at 200 rows: the 64-token one)
    (24, (128, 32), "streamk", 4, False, "ahead"),         # the plan's kernels for this weight
    (12, (128, 16), "streamk", 4, True, "ahead"),          # 9-16 rows: the 16-token tile, 8 tiles split 4 ways
])
def test_cuda_graph_and_two_streams(m, tile, scheduler, splits, zeros, mainloop):
    """Replay under a CUDA graph (the stream-K workspace's flags are zeroed inside the graph) gives the eager
    bits (CUTLASS's deterministic stream-K reduction, split-K slices included), and two streams running the
    plan at once on different inputs each get their own result."""
    n, k = 1024, 4096
    weight = random_weight(k, n, 4, 128, zeros, torch.float16, seed=8)
    plan = qgemm.FpAIntBPlan(weight, bias=randn(n, dtype=torch.float16, seed=1), activation="silu")
    ahead = heuristics.FPAINTB_SM90_AHEAD if mainloop == "ahead" else {}
    choice = heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, tile, scheduler=scheduler, zeros=zeros, **ahead),
                                          splits=splits)
    if splits:
        assert plan.choice(m).splits == splits
    if mainloop == "ahead":
        assert plan.choice(m) == choice
    x = randn(m, k, dtype=torch.float16, seed=5)
    first = run(plan, x, choice)
    assert rel_err(first, reference(x, weight, plan.bias, "silu")) < BOUND[torch.float16]
    for _ in range(5):
        assert torch.equal(run(plan, x, choice), first)
    assert_graph_replays(lambda o: plan(x, o, choice=choice), torch.full_like(first, float("nan")), first, replays=3)
    x2 = randn(m, k, dtype=torch.float16, seed=6)
    assert_two_streams(plan, choice, (x, x2), (first, run(plan, x2, choice)))


@pytest.mark.parametrize("dtype, bits, zeros", [(torch.float16, 4, True), (torch.float16, 4, False),
                                               (torch.bfloat16, 4, True), (torch.float16, 8, False),
                                               (torch.bfloat16, 8, True)])
def test_two_ctas_per_sm(dtype, bits, zeros):
    """The catalog's two-CTA kernels (the 16-token tile; setmaxnreg 24 / 104, a persistent grid of two CTAs
    per SM, half the shared memory) against the float64 reference: 1000 rows (8 weight tiles, the last
    partial) and 4096 x 22016 (172 tiles: the plan's own pick, checked), M from 1 to 16 (odd ones
    included), group 128, bias and SiLU, CUTLASS's stream-K decomposition, 4 split-K slices and forced
    stream-K (the plan's pick for K above 8192); the same bits call after call, and under forced stream-K
    also under CUDA-graph replay and from two streams at once on different inputs. Same bound as every
    kernel here (the arithmetic is the one-CTA kernel's)."""
    spec = next(s for s in sm90_specs(dtype, bits) if s.ctas_per_sm == 2 and s.zeros == zeros)
    for n, k in ((1000, 640), (22016, 4096)):
        weight = random_weight(k, n, bits, 128, zeros, dtype, seed=n)
        bias = randn(n, dtype=dtype, seed=7)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation="silu")
        if n > 132 * 128 and torch.cuda.get_device_properties(0).multi_processor_count <= 132:
            assert plan.choice(16) == heuristics.FpAIntBSm90Choice(spec)
        for m in (1, 3, 9, 15, 16):
            x = randn(m, k, dtype=dtype, seed=m + n)
            ref = reference(x, weight, bias, "silu")
            for splits, decomposition in ((0, heuristics.DECOMPOSITION_HEURISTIC), (4, heuristics.DECOMPOSITION_HEURISTIC),
                                          (0, heuristics.DECOMPOSITION_STREAM_K)):
                choice = heuristics.FpAIntBSm90Choice(spec, splits=splits, decomposition=decomposition)
                first = run(plan, x, choice)
                assert rel_err(first, ref) < BOUND[dtype], (spec.name, n, m, splits, decomposition)
                assert torch.equal(run(plan, x, choice), first), (spec.name, n, m, splits, decomposition)
        choice = heuristics.FpAIntBSm90Choice(spec, decomposition=heuristics.DECOMPOSITION_STREAM_K)
        x, x2 = randn(13, k, dtype=dtype, seed=1), randn(13, k, dtype=dtype, seed=2)
        first, second = run(plan, x, choice), run(plan, x2, choice)
        assert_graph_replays(lambda o: plan(x, o, choice=choice), torch.full_like(first, float("nan")), first,
                             replays=2)
        assert_two_streams(plan, choice, (x, x2), (first, second))


@pytest.mark.parametrize("m, tile, ctas_per_sm, splits", [
    (16, (128, 16), 1, 0), (16, (128, 16), 2, 0), (13, (128, 16), 2, 4),   # one and two CTAs per SM, 4 slices
    (64, (128, 64), 1, 2), (300, (128, 128), 1, 0),                       # stream-K fix-up between CTAs
])
def test_programmatic_launch_chain(m, tile, ctas_per_sm, splits):
    """The Sm90 kernels are launched with programmatic stream serialization (built with
    CUTLASS_ENABLE_GDC_FOR_SM90): their CTAs may start while the previous kernel finishes, and their
    producers wait for it before any load. A chain where each call reads the previous call's output (eager,
    with torch kernels between every other pair of links, and captured in a CUDA graph) must equal the same
    chain with the GPU synchronized after every call: a missing wait would read a half-written input, and a
    stream-K slice would meet flags the previous call's workspace zeroing had not yet cleared."""
    from gpu_util import check_dependent_chain
    from qgemm import _runtime
    n = k = 1024
    plans = [qgemm.FpAIntBPlan(random_weight(k, n, 4, 128, i % 2 == 0, torch.float16, seed=50 + i)) for i in range(3)]
    spec = FpAIntBSm90Spec("f16", 4, tile, scheduler="streamk", ctas_per_sm=ctas_per_sm, **heuristics.FPAINTB_SM90_AHEAD)
    assert spec.programmatic_launch
    assert _runtime.get_kernel(spec, 90).programmatic_launch == _runtime.PROGRAMMATIC_LAUNCH
    choice = heuristics.FpAIntBSm90Choice(spec, splits=splits)
    check_dependent_chain(lambda i, y: plans[i % 3](y, choice=choice), randn(m, k, dtype=torch.float16, seed=7))


@pytest.mark.parametrize("bits", (4, 8))
def test_sm90_packing_on_the_gpu_matches_the_cpu(bits):
    from qgemm.fpaintb.pack import pack_sm90, unpack_sm90
    g = torch.Generator().manual_seed(bits)
    u = torch.randint(0, 2 ** bits, (1024, 520), generator=g, dtype=torch.uint8)
    on_gpu = pack_sm90(u.cuda(), bits)
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), pack_sm90(u, bits))
    assert torch.equal(unpack_sm90(on_gpu, bits, 1024, 520).cpu(), u)


@pytest.mark.parametrize("splits", (0, 2, 4))
def test_stream_k_workspace_from_poisoned_memory(splits):
    """The plan zeroes only the flags at the end of CUTLASS's stream-K workspace: a workspace carved
    from memory full of NaN bytes (non-zero flags, garbage partials) must still give the right result,
    call after call (each call's workspace reuses the previous one's memory)."""
    m, n, k = 256, 4096, 4096
    weight = random_weight(k, n, 4, 128, True, torch.float16, seed=9)
    plan = qgemm.FpAIntBPlan(weight)
    choice = heuristics.FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 128), scheduler="streamk"), splits=splits)
    x = randn(m, k, dtype=torch.float16, seed=10)
    ref = reference(x, weight)
    first = None
    for _ in range(3):
        poison_allocator()
        out = run(plan, x, choice)
        assert rel_err(out, ref) < BOUND[torch.float16], splits
        first = out if first is None else first
        assert torch.equal(out, first)


DECOMPOSITIONS = (heuristics.DECOMPOSITION_DATA_PARALLEL, heuristics.DECOMPOSITION_STREAM_K)


@pytest.mark.parametrize("decomposition", DECOMPOSITIONS, ids=("data_parallel", "stream_k"))
@pytest.mark.parametrize("m, tile, zeros, dtype", [
    (12, (128, 16), False, torch.float16),
    (17, (128, 32), True, torch.bfloat16),
    (50, (128, 64), False, torch.bfloat16),
    (300, (128, 128), True, torch.float16),
    (1000, (128, 128), False, torch.float16),
])
def test_forced_decompositions(m, tile, zeros, dtype, decomposition):
    """The catalog's 128-deep stream-K kernels forced data-parallel or stream-K (ext[5]). n = 1000 gives 8
    weight-row tiles (the last one partial) and K = 4224 33 K tiles, so forced stream-K shares each output
    tile's K iterations among several CTAs, at K-tile boundaries that are not the tile's halves. Same
    bound as every kernel here; the result is the same bits call after call, from a poisoned stream-K
    workspace, and under CUDA-graph replay."""
    n, k = 1000, 4224
    weight = random_weight(k, n, 4, 128, zeros, dtype, seed=21)
    plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=randn(n, dtype=dtype, seed=2), activation="relu")
    spec = FpAIntBSm90Spec(ACT_NAMES[dtype], 4, tile, scheduler="streamk", zeros=zeros, **heuristics.FPAINTB_SM90_AHEAD)
    choice = heuristics.FpAIntBSm90Choice(spec, decomposition=decomposition)
    x = randn(m, k, dtype=dtype, seed=22)
    ref = reference(x, weight, plan.bias, "relu")
    first = None
    for _ in range(3):
        poison_allocator()
        out = run(plan, x, choice)
        assert rel_err(out, ref) < BOUND[dtype], (m, tile, decomposition)
        first = out if first is None else first
        assert torch.equal(out, first)
    assert_graph_replays(lambda o: plan(x, o, choice=choice), torch.full_like(first, float("nan")), first, replays=2)


CLUSTER_CASES = [(torch.float16, 4), (torch.bfloat16, 8)]


@pytest.mark.parametrize("dtype, bits", CLUSTER_CASES)
def test_cluster_kernels(dtype, bits):
    """Kernels with clusters along the weight rows (FpAIntBSm90Spec.cluster: the token tile multicast
    to 2 or 4 CTAs), all of them from the sweep list (the catalog has none): a weight of 136 rows (two 128-row tiles, so a
    4-CTA cluster has two CTAs wholly past the padded rows) and of 392 (four tiles, the last partial),
    odd M, group 128 with zeros, bias and SiLU, stream-K with the heuristic decomposition and 3 slices."""
    specs = [s for s in fpaintb_sm90_specs(ACT_NAMES[dtype], bits, sweep=True) if s.cluster != (1, 1)]
    assert specs
    k = 640
    for n in (136, 392):
        weight = random_weight(k, n, bits, 128, True, dtype, seed=n)
        bias = randn(n, dtype=dtype, seed=4)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation="silu")
        for m in (3, 17, 300):
            x = randn(m, k, dtype=dtype, seed=m + n)
            ref = reference(x, weight, bias, "silu")
            for spec in specs:
                for s in ((0, 3) if spec.scheduler == "streamk" else (0,)):
                    err = rel_err(run(plan, x, heuristics.FpAIntBSm90Choice(spec, splits=s)), ref)
                    assert err < BOUND[dtype], (spec.name, n, m, s, err)


@pytest.mark.parametrize("zeros", (False, True))
def test_k128_and_wide_sweep_kernels(zeros):
    """The sweep list's 128-deep K tiles and its 128 x 256 scale-only tile (FP16 INT4; none in the
    catalog) on weights they take: K = 640 in groups of 128 and per channel, 136 rows, odd M, bias and
    SiLU, stream-K with the heuristic decomposition and 3 slices; a scale-only kernel only where the
    weight is symmetric, and a 128-deep one refused, before any launch, for group 64."""
    specs = [s for s in fpaintb_sm90_specs("f16", 4, sweep=True)
             if s.cluster == (1, 1) and s.mainloop == "cutlass" and (s.tile_k == 128 or not s.zeros and s.tile[1] == 256)]
    assert len(specs) == 3
    k, n = 640, 136
    for g in (128, k):
        weight = random_weight(k, n, 4, g, zeros, torch.float16, seed=g)
        bias = randn(n, dtype=torch.float16, seed=4)
        plan = qgemm.FpAIntBPlan(weight, bias=bias, activation="silu")
        for m in (3, 17, 300):
            x = randn(m, k, dtype=torch.float16, seed=m)
            ref = reference(x, weight, bias, "silu")
            for spec in specs:
                if zeros and not spec.zeros:
                    continue
                for s in (0, 3):
                    err = rel_err(run(plan, x, heuristics.FpAIntBSm90Choice(spec, splits=s)), ref)
                    assert err < BOUND[torch.float16], (spec.name, g, m, s, err)
    plan = qgemm.FpAIntBPlan(random_weight(k, n, 4, 64, zeros, torch.float16, seed=1))
    with pytest.raises(ValueError, match="128-deep K tiles"):
        plan(randn(3, k, dtype=torch.float16, seed=1), choice=heuristics.FpAIntBSm90Choice(specs[0]))


def ahead_specs(dtype, bits):
    """The sweep list's kernels with qgemm's consumer loop (mainloop="ahead"), for one type and width."""
    return [s for s in fpaintb_sm90_specs(ACT_NAMES[dtype], bits, sweep=True) if s.mainloop == "ahead"]


@pytest.mark.parametrize("dtype,bits", ((torch.float16, 4), (torch.float16, 8), (torch.bfloat16, 4)))
def test_tile_ahead_mainloop(dtype, bits):
    """qgemm's consumer loop (templates/include/qgemm/fpaintb/sm90_mainloop.hpp) against the float64
    reference, as test_every_catalog_kernel runs the catalog: N = 136, group sizes 64 and 128 with
    zeros, 256 and per channel symmetric (a 128-deep K tile only where it divides the groups), K from
    one K tile (odd tile counts exercise the loop's exit after the odd buffer) to 12, odd M, bias
    and SiLU, stream-K with the heuristic decomposition and 3 slices (a slice may hold a single K
    tile; the persistent kernel without). Scale-only kernels run only on the symmetric weights. FP16 INT4
    takes every ahead kernel of the sweep list, INT8 and BF16 the 128 x 64 tile with and without zeros."""
    n = 136
    specs = ahead_specs(dtype, bits)
    if (dtype, bits) != (torch.float16, 4):  # the other types and widths on one tile, both ways
        specs = [s for s in specs if s.tile == (128, 64)]
    assert len(specs) >= 2
    for group_size, k, zeros in ((64, 704, True), (128, 640, True), (256, 768, False), (None, 704, False),
                                 (None, 64, False), (128, 128, True)):
        g = group_size or k
        weight = random_weight(k, n, bits, g, zeros, dtype, seed=g + k)
        bias = randn(n, dtype=dtype, seed=3)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation="silu")
        for spec in specs:
            if (zeros and not spec.zeros) or not spec.supports(k, g):
                continue
            for m in (1, 3, 17, 300):
                x = randn(m, k, dtype=dtype, seed=m)
                ref = reference(x, weight, bias, "silu")
                for splits in (0, 3) if spec.scheduler == "streamk" else (0,):  # (split-K: stream-K only)
                    err = rel_err(run(plan, x, heuristics.FpAIntBSm90Choice(spec, splits=splits)), ref)
                    assert err < BOUND[dtype], (spec.name, g, zeros, m, splits, err)

