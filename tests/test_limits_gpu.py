"""Limits (issue 18): shapes whose index arithmetic passes 2^31, M up to 2^20 rows, and out of memory.
Opt-in: `pytest -m large tests/test_limits_gpu.py` (needs about 40 GB of GPU memory; minutes).

Each large shape is either computed correctly or refused before launch with a ValueError that names
the limit (qgemm._checks.index_limit, or a kernel's `cannot run this problem`); never a launch error,
a hang or a wrong answer. Correctness is checked on sampled rows (the first, middle and last ones,
and one past 2^31 / N elements into the output) against the float64 reference of those rows' quantized
operands, within the family's bound; the output starts NaN so an unwritten row fails.
A launch whose memory cannot be allocated raises torch's OutOfMemoryError (plans allocate outputs and
workspaces through torch's caching allocator), not a CUDA launch error.
"""
from __future__ import annotations

import pytest
import torch

import qgemm
from qgemm import reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.large,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0)
                       or torch.cuda.get_device_properties(0).total_memory < 70 * 2**30,
                       reason="needs an sm80+ GPU with at least 70 GB"),
]
sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                          reason="needs an sm90 GPU")

INT32 = 2**31 - 1


@pytest.fixture(autouse=True)
def _free_memory():
    yield
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def sample_rows(m: int, n: int) -> list[int]:
    rows = {0, 1, m // 2, m - 1}
    if m * n > INT32:
        rows.add(INT32 // n + 1)  # the first row past 2^31 output elements
    return sorted(r for r in rows if r < m)


def randn(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)


def correct_or_refused(run, check):
    """run() either raises a ValueError naming a limit before launch, or returns what check() accepts."""
    try:
        out = run()
    except ValueError as e:
        message = str(e)
        assert "beyond" in message or "cannot run this problem" in message or "address at most" in message, message
        return "refused"
    torch.cuda.synchronize()
    check(out)
    return "computed"


def rel(out_rows, ref_rows) -> float:
    out_rows, ref_rows = out_rows.double().cpu(), ref_rows.double().cpu()
    assert not torch.isnan(out_rows).any(), "a sampled row was not written"
    return ((out_rows - ref_rows).norm() / ref_rows.norm()).item()


# --- FP8 ------------------------------------------------------------------------------------------

@sm90
@pytest.mark.parametrize("m, n, k", [
    (2**20, 256, 256),            # 2^20 rows
    (2**18, 8200, 128),           # M*N past 2^31 (4.3 GB of bfloat16 output)
    (2**21 + 3, 256, 1024),       # M*K past 2^31 (the FP8 activations, 2 GB)
])
def test_fp8_large(m, n, k):
    w = qgemm.Fp8Weight.from_float(randn((n, k), 1, scale=0.05))
    plan = qgemm.Fp8GemmPlan(w)
    x = randn((m, k), 2, torch.bfloat16)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

    def check(result):
        rows = sample_rows(m, n)
        xa = qgemm.quantize_activations_fp8(x[rows].contiguous())
        ref = reference.fp8_blockwise_gemm(xa.q, xa.scale, w.qweight, w.scale_inv)
        assert rel(result[rows], ref) < 5e-3
    correct_or_refused(lambda: plan(x, out), check)


# --- W8A8 -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, n, k", [(2**20, 256, 256), (2**18, 8200, 128)])
def test_w8a8_large(m, n, k):
    w = qgemm.W8A8Weight.from_float(randn((n, k), 3, scale=0.05), 128)
    plan = qgemm.W8A8GemmPlan(w)
    x = randn((m, k), 4, torch.float16)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")

    def check(result):
        rows = sample_rows(m, n)
        xq = qgemm.quantize_activations(x[rows].contiguous(), 128)
        ref = reference.w8a8_gemm(xq.q, xq.scale, xq.offset, w.qweight, w.scale, w.offset, 128)
        assert rel(result[rows], ref) < 1e-3
    correct_or_refused(lambda: plan(x, out), check)


# --- FpA x IntB -----------------------------------------------------------------------------------

@pytest.mark.parametrize("m, n, k, forced", [
    (2**20, 256, 256, None),      # 2^20 rows (dequantize then cuBLAS)
    (2**18, 8200, 64, None),      # M*N past 2^31
    (2**18, 8200, 64, "gemm"),    # the same on the tiled GEMM
    (2**21 + 5, 64, 1024, "gemm"),  # M*K past 2^31 (4 GB of float16 activations)
])
def test_fpaintb_large(m, n, k, forced):
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.fpaintb import FpAIntBGemmSpec
    from qgemm.fpaintb import heuristics
    weight = qgemm.IntBWeight.from_float(randn((n, k), 5, scale=0.05), bits=4, group_size=64)
    plan = qgemm.FpAIntBPlan(weight)
    choice = None
    if forced == "gemm":
        target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
        spec = next(s for s in catalog(target, FpAIntBGemmSpec.family) if s.act == "f16" and s.bits == 4)
        choice = heuristics.FpAIntBChoice(spec)
    x = randn((m, k), 6, torch.float16)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")

    def check(result):
        rows = sample_rows(m, n)
        ref = x[rows].double() @ weight.dequantize()
        assert rel(result[rows], ref) < 2e-3
    correct_or_refused(lambda: plan(x, out, choice=choice), check)


# --- convolutions: refused past the 32-bit offsets ------------------------------------------------

def test_int8_conv_refuses_past_32_bit_offsets():
    w_q = torch.ones((16, 3, 3, 16), dtype=torch.int8, device="cuda")
    plan = qgemm.ConvInt8Plan(w_q, qgemm.ConvInt8Quant(0.1, 0, torch.ones(16), 0.1, 0), padding=1)
    x = torch.zeros((8, 4096, 4097, 16), dtype=torch.int8, device="cuda")  # 2^31 + 524288 elements
    with pytest.raises(ValueError, match="address at most 2147483647"):
        plan(x)


def test_fpaintb_conv_refuses_past_32_bit_offsets():
    q = qgemm.IntConvWeight.from_float(torch.randn(16, 16, 1, 1), 4, -1)
    plan = qgemm.FpAIntBConvPlan(qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), 4, -1))
    x = torch.zeros((2, 8192, 8193, 16), dtype=torch.float16, device="cuda")  # 2^31 + 262144 elements, 4 GB
    with pytest.raises(ValueError, match="beyond the 2147483647"):
        plan(x)


# --- out of memory ---------------------------------------------------------------------------------

def _hog_all_but(spare_bytes: int):
    """Take every byte of the GPU's free memory but spare_bytes (torch tensors, freed by the caller)."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    hogs = []
    size = max(free - spare_bytes, 0)
    while size > 2**20:
        try:
            hogs.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            free, _ = torch.cuda.mem_get_info()
            size = max(free - spare_bytes, 0)
        except torch.cuda.OutOfMemoryError:
            size //= 2
    return hogs


def _families():
    cases = []
    weight = qgemm.IntBWeight.from_float(randn((4096, 4096), 7, scale=0.05), bits=4, group_size=128)
    plan = qgemm.FpAIntBPlan(weight)
    cases.append(("fpaintb", plan, randn((4096, 4096), 8, torch.float16)))
    if torch.cuda.get_device_capability() == (9, 0):
        fp8 = qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(randn((4096, 4096), 9, scale=0.05)))
        cases.append(("fp8", fp8, randn((4096, 4096), 10, torch.bfloat16)))
    return cases


def test_out_of_memory_is_torchs_error():
    for name, plan, x in _families():
        plan(x)  # kernels loaded, per-shape state made
        torch.cuda.synchronize()
        hogs = _hog_all_but(1 << 20)  # less than one output (32 MB)
        try:
            with pytest.raises(torch.cuda.OutOfMemoryError):
                plan(x)
        finally:
            del hogs
            torch.cuda.empty_cache()
        assert plan(x).shape[0] == x.shape[0], name  # and the plan still works afterwards
