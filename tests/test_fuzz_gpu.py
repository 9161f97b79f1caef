"""Fuzz: random shapes and formats per family against the float64 reference of the same quantized
operands (issue 18). Not part of the default run: `pytest -m fuzz tests/test_fuzz_gpu.py`.

  QGEMM_FUZZ_CASES   cases per family (default 500)
  QGEMM_FUZZ_SEED    base seed (default 18); case i of a family draws from Random(f"{seed}:{family}:{i}"),
                     so a failure is replayed with its seed and index alone (both are in the message)

M, N and K are drawn at and around every alignment boundary (one below, at, one above a multiple of the
tile and block sizes, within each family's legal alignment), with every dtype, group and block size of
the catalog, bias or not, and the activations. Outputs are poisoned with NaN before each launch (int8
outputs: two runs into two different sentinels). Bounds are the families' GPU-test bounds, with their
reasons in those files: test_fp8_gpu.py, test_w8a8_sm90_gpu.py, test_fpaintb_gpu.py,
test_conv_fpaintb_gpu.py, test_conv_int8_gpu.py. Only kernels of the catalog are drawn (nothing is
built on demand but the catalog), so a device run needs the families' catalogs in its cache.
"""
from __future__ import annotations

import os
import random
import time

import pytest
import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.catalog import catalog
from qgemm import reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.fuzz,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

CASES = int(os.environ.get("QGEMM_FUZZ_CASES", "500"))
SEED = os.environ.get("QGEMM_FUZZ_SEED", "18")
MAX_REPORTED = 8


def _sm90() -> bool:
    return torch.cuda.get_device_capability() == (9, 0)


def around(rng: random.Random, boundaries, step: int, lo: int, hi: int) -> int:
    """A multiple of `step` in [lo, hi] at, just below or just above one of `boundaries`."""
    b = rng.choice(boundaries)
    v = b + rng.choice((-step, 0, step, 0, rng.randrange(-4, 5) * step))
    v = max(lo, min(hi, v))
    return max(lo, v - v % step)


def m_of(rng: random.Random, hi: int = 1100) -> int:
    return around(rng, (1, 2, 3, 8, 16, 17, 32, 64, 65, 127, 128, 129, 192, 256, 300, 512, 1000, 1024), 1, 1, hi)


def gen(seed: int):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


def rand(shape, seed, dtype=torch.float32, scale=1.0, mean=0.0):
    return (torch.randn(shape, generator=gen(seed), device="cuda") * scale + mean).to(dtype)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def rel(out, ref) -> float:
    out, ref = out.double(), ref.double().to(out.device)
    if torch.isnan(out).any():
        return float("inf")  # an element not written (outputs start NaN)
    return ((out - ref).norm() / ref.norm()).item()


def run_family(family: str, one_case):
    """Run CASES cases of a family; report every failure (up to MAX_REPORTED) with its replay key."""
    failures, start = [], time.monotonic()
    for i in range(CASES):
        rng = random.Random(f"{SEED}:{family}:{i}")
        try:
            problem = one_case(rng, i)
        except Exception as e:  # noqa: BLE001: a crash is a failure with its case attached
            failures.append(f"case {i} raised {type(e).__name__}: {e}")
            problem = None
        if isinstance(problem, str):
            failures.append(f"case {i}: {problem}")
        if len(failures) >= MAX_REPORTED:
            break
    elapsed = time.monotonic() - start
    print(f"fuzz {family}: {CASES} cases, seed {SEED}, {elapsed:.1f} s, {len(failures)} failed")
    assert not failures, (f"{family}: {len(failures)} failing case(s); replay with QGEMM_FUZZ_SEED={SEED} "
                          f"(case i draws from Random(f'{SEED}:{family}:{{i}}')):\n  " + "\n  ".join(failures))


# --- FP8 blockwise (sm90) -------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="needs an sm90 GPU")
def test_fuzz_fp8():
    outputs = sorted({s.output for s in catalog(90, "fp8_blockwise_gemm")})
    bounds = {"bf16": 5e-3, "f16": 2e-3}
    weights: dict = {}

    def one(rng, i):
        m = m_of(rng)
        n = around(rng, (8, 64, 128, 256, 384, 512), 8, 8, 640)
        k = around(rng, (128, 256, 512, 1024), 128, 128, 1152)
        out_name = rng.choice(outputs)
        out_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[out_name]
        x_dtype = rng.choice((torch.float32, torch.float16, torch.bfloat16))
        bias = rand(n, 3 * i + 1) if rng.random() < 0.5 else None
        key = (n, k)
        if key not in weights:
            weights.clear()
            weights[key] = qgemm.Fp8Weight.from_float(rand((n, k), 3 * i, scale=0.05))
        w = weights[key]
        plan = qgemm.Fp8GemmPlan(w, bias=bias, out_dtype=out_dtype)
        x = rand((m, k), 3 * i + 2, x_dtype, 1.5, 0.3)
        xa = qgemm.quantize_activations_fp8(x)
        out = plan.gemm(xa, nan_like((m, n), out_dtype))
        ref = reference.fp8_blockwise_gemm(xa.q, xa.scale, w.qweight, w.scale_inv, bias)
        err = rel(out, ref)
        if not err < bounds[out_name]:
            return f"M={m} N={n} K={k} x={x_dtype} out={out_dtype} bias={bias is not None}: rel err {err:.3g}"

    run_family("fp8", one)


# --- W8A8 (Sm90 kernels on sm90, the chained path elsewhere) ---------------------------------------

def test_fuzz_w8a8():
    bounds = {"f32": 1e-4, "f16": 1e-3, "bf16": 8e-3}
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    if _sm90():
        combos = sorted({(s.block_size, s.scheme, s.output, s.epilogue) for s in catalog(90, "w8a8_gemm_sm90")})
        mode = "sm90"
    else:
        combos = [(bs, "asymmetric", out, "clamp") for bs in qgemm.w8a8.BLOCK_SIZES for out in ("f32", "f16")]
        mode = "chained"

    def one(rng, i):
        bs, scheme, out_name, epilogue = rng.choice(combos)
        activation = "silu" if epilogue == "silu" else rng.choice(reference.ACTIVATIONS)
        m = m_of(rng)
        out_dtype = dtypes[out_name]
        # N: 16-byte output rows on the Sm90 kernels (TMA), N_ALIGNMENT on the chained path
        step = 16 // out_dtype.itemsize if mode == "sm90" else qgemm.w8a8.N_ALIGNMENT
        n = around(rng, (8, 16, 64, 128, 256, 512), step, step, 640)
        k = around(rng, (bs, 2 * bs, 512, 1024), bs, bs, 1280)
        bias = rand(n, 3 * i + 1) if rng.random() < 0.5 else None
        w = qgemm.W8A8Weight.from_float(rand((n, k), 3 * i, scale=0.05, mean=0.01), bs, scheme=scheme)
        plan = qgemm.W8A8GemmPlan(w, bias=bias, activation=activation, out_dtype=out_dtype, launch_mode=mode)
        x = rand((m, k), 3 * i + 2, rng.choice((torch.float32, torch.float16, torch.bfloat16)), 1.5, 0.3)
        xq = qgemm.quantize_activations(x, bs, symmetric=scheme == "symmetric")
        out = plan.gemm(xq, nan_like((m, n), out_dtype))
        if scheme == "symmetric":
            ref = reference.w8a8_gemm_symmetric(xq.q, xq.scale, w.qweight, w.scale, bs, bias, activation)
        else:
            ref = reference.w8a8_gemm(xq.q, xq.scale, xq.offset, w.qweight, w.scale, w.offset, bs, bias, activation)
        err = rel(out, ref)
        if not err < bounds[out_name]:
            return (f"M={m} N={n} K={k} block={bs} {scheme} out={out_name} act={activation} "
                    f"bias={bias is not None}: rel err {err:.3g}")

    run_family("w8a8", one)


# --- FpA x IntB GEMM --------------------------------------------------------------------------------

_ACT = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu, "relu6": lambda t: t.clamp(0, 6)}


def test_fuzz_fpaintb():
    from cutlass_gen.families.fpaintb_layout import layout
    bounds = {torch.float16: 2e-3, torch.bfloat16: 1e-2}

    def one(rng, i):
        bits = rng.choice((4, 8))
        lay = layout(bits)
        dtype = rng.choice((torch.float16, torch.bfloat16))
        k = around(rng, (64, 128, 256, 512, 1024, 2048), lay.k_alignment, lay.k_alignment, 2112)
        groups = [g for g in qgemm.fpaintb.GROUP_SIZES if k % g == 0] + [-1]
        group = rng.choice(groups)
        n = around(rng, (8, 64, 128, 256, 512), lay.n_alignment, lay.n_alignment, 640)
        m = m_of(rng, 1100)
        symmetric = rng.random() < 0.5
        activation = rng.choice(("none", "relu", "silu", "gelu"))
        bias = rand(n, 3 * i + 1, dtype) if rng.random() < 0.5 else None
        weight = qgemm.IntBWeight.from_float(rand((n, k), 3 * i, scale=0.05), bits=bits, group_size=group,
                                             symmetric=symmetric, scale_dtype=dtype)
        plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=bias, activation=activation)
        x = rand((m, k), 3 * i + 2, dtype, 1.0, 0.1)
        out = plan(x, nan_like((m, n), dtype))
        ref = x.double() @ weight.dequantize().to(x.device)
        if plan.bias is not None:
            ref = ref + plan.bias.double()
        err = rel(out, _ACT[activation](ref))
        if not err < bounds[dtype]:
            return (f"M={m} N={n} K={k} int{bits} group={group} symmetric={symmetric} {dtype} act={activation} "
                    f"bias={bias is not None} kernel={plan.choice(m).spec.name}: rel err {err:.3g}")

    run_family("fpaintb", one)


# --- FpA x IntB conv --------------------------------------------------------------------------------

def test_fuzz_conv_fpaintb():
    from cutlass_gen.families.fpaintb_layout import layout
    bounds = {torch.float16: 2e-3, torch.bfloat16: 1e-2}

    def one(rng, i):
        bits = rng.choice((4, 8))
        dtype = rng.choice((torch.float16, torch.bfloat16))
        block = rng.choice((32, 64, 128, 256, -1))
        c = rng.choice((8, 16, 24, 32, 40, 64, 96, 128, 256)) if block == -1 else block * rng.choice((1, 2, 3))
        co = around(rng, (8, 16, 64, 128), layout(bits).n_alignment, layout(bits).n_alignment, 192)
        r = rng.choice((1, 1, 3, 3, 5, 7))
        s = r if rng.random() < 0.8 else rng.choice((1, 3))
        stride, dilation = rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 1, 2))
        padding = rng.randrange(0, max(r, s))
        nb = rng.choice((1, 1, 2, 3))
        h = rng.randrange(max(1, (r - 1) * dilation + 1 - 2 * padding), 24)
        w_ = rng.randrange(max(1, (s - 1) * dilation + 1 - 2 * padding), 24)
        activation = rng.choice(("none", "relu", "relu6", "silu", "gelu"))
        g = torch.Generator().manual_seed(3 * i)
        q = qgemm.IntConvWeight.from_float(torch.randn(co, c, r, s, generator=g) * 0.1 + 0.02, bits, block,
                                           symmetric=rng.random() < 0.5)
        weight = qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), bits, block)
        bias = rand(co, 3 * i + 1) if rng.random() < 0.5 else None
        plan = qgemm.FpAIntBConvPlan(weight, act_dtype=dtype, bias=bias, activation=activation, stride=stride,
                                     padding=padding, dilation=dilation)
        ho, wo = plan.output_hw(h, w_)
        what = (f"N={nb} H={h} W={w_} C={c} Co={co} {r}x{s} stride={stride} pad={padding} dil={dilation} "
                f"int{bits} block={block} {dtype} act={activation} bias={bias is not None}")
        if ho < 1 or wo < 1:
            return None
        x = rand((nb, h, w_, c), 3 * i + 2, dtype)
        out = plan(x, nan_like((nb, ho, wo, co), dtype))
        wd = plan.weight.dequantize(plan.act_dtype).permute(0, 3, 1, 2)
        ref = F.conv2d(x.double().permute(0, 3, 1, 2), wd.to(x.device),
                       plan.bias.double() if plan.bias is not None else None, plan.stride, plan.padding, plan.dilation)
        err = rel(out, _ACT[activation](ref).permute(0, 2, 3, 1))
        if not err < bounds[dtype]:
            return f"{what}: rel err {err:.3g}"

    run_family("conv_fpaintb", one)


# --- int8 conv ---------------------------------------------------------------------------------------

def test_fuzz_conv_int8():
    from test_conv_int8_gpu import assert_matches, expected_outputs, make_case, run_poisoned

    def one(rng, i):
        k = rng.choice((1, 1, 3, 3, 5, 7))
        stride, dilation = rng.choice((1, 1, 2)), rng.choice((1, 1, 2))
        padding = rng.randrange(0, k)
        ci = rng.choice((3, 4, 5, 8, 13, 16, 32, 48, 64, 128))
        co = rng.choice((4, 7, 8, 12, 16, 32, 64, 128))
        span = (k - 1) * dilation + 1
        top = 20 if ci * co * k * k <= 64 * 64 * 9 else 10  # the float64 CPU reference stays fast
        h = rng.randrange(max(1, span - 2 * padding), max(top, span - 2 * padding + 1))
        w = rng.randrange(max(1, span - 2 * padding), max(top, span - 2 * padding + 1))
        geometry = (rng.choice((1, 2, 3)), h, w, ci, co, k, stride, padding, dilation)
        input_zero = rng.choice((-128, -100, 0, 0, 3, 57, 127))
        activation = rng.choice(("none", "relu", "relu6"))
        x_q, w_q, bias, quant, conv = make_case(geometry, input_zero, activation, 3 * i)
        plan = qgemm.ConvInt8Plan(w_q.cuda(), quant, bias=bias.cuda(), **conv)
        exact, ref = expected_outputs(plan, x_q, w_q, bias, quant, conv)
        outs = run_poisoned(plan, x_q.cuda(), tuple(exact.shape))
        try:
            assert_matches(outs, exact, ref)
        except AssertionError as e:
            return f"geometry={geometry} Z_I={input_zero} act={activation} kernel={plan.choice(*geometry[:3]).name}: {e}"

    run_family("conv_int8", one)
