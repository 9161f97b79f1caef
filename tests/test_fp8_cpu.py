"""FP8 blockwise family without a GPU: specs, catalog, heuristic, reference math, argument checks,
and the compiled host library's plan (which must not need the CUDA driver)."""
from __future__ import annotations

import ctypes
import json

import pytest
import torch
from conftest import requires_nvcc

import qgemm
import qgemm.fp8.plan as fp8_mod
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render
from cutlass_gen.families.fp8 import Fp8ActQuantSpec, Fp8BlockwiseGemmSpec
from cutlass_gen.spec import spec_from_dict
from qgemm import _checks, reference
from qgemm.fp8 import heuristics
from qgemm._abi import PARAMS_CAPACITY, HostLibrary, QgemmProblem

SWAP16 = Fp8BlockwiseGemmSpec((128, 16), (1, 1), "cooperative", True, "bf16", scheduler="streamk")


# --- specs and catalog ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, fragment", [
    (dict(tile=(64, 128), schedule="cooperative"), "tile M must be one of (128, 256) with the cooperative"),
    (dict(tile=(128, 128), schedule="pingpong"), "tile M must be one of (64,) with the pingpong"),
    (dict(tile=(128, 12)), "tile N must be a multiple of 8 in [8, 256]"),
    (dict(tile=(128, 64), swap_ab=False), "the tile's weight dimension (N = 64) must be a multiple of the 128"),
    (dict(schedule="pingpong", tile=(64, 128), swap_ab=False, scheduler="streamk"), "no stream-K scheduler"),
    (dict(cluster=(2, 2)), "cluster must be (1, 1), (2, 1) or (1, 2)"),
    (dict(output="f32"), "output must be one of ('bf16', 'f16')"),
    (dict(act="int8"), "act must be one of ('e4m3', 'e5m2')"),
    (dict(arch=80), "arch must be 90"),
    (dict(tile=(128,)), "tile and cluster are (M, N) pairs"),
])
def test_fp8_spec_rejects_invalid_configs(kwargs, fragment):
    args = dict(tile=(128, 16), cluster=(1, 1), schedule="cooperative", swap_ab=True, output="bf16")
    args.update(kwargs)
    with pytest.raises(ValueError) as exc:
        Fp8BlockwiseGemmSpec(**args)
    assert fragment in str(exc.value)


def test_fp8_spec_name_and_json_round_trip():
    assert SWAP16.name == "qgemm_fp8_blockwise_gemm_sm90_e4m3e4m3_bf16_128x16x128_c1x1_cooperative_streamk_swapab"
    assert spec_from_dict(json.loads(SWAP16.to_json())) == SWAP16
    assert Fp8ActQuantSpec("bf16").name == "qgemm_fp8_act_quant_sm90_bf16_e4m3"
    with pytest.raises(ValueError, match="output must be one of"):
        Fp8ActQuantSpec("bf16", "int8")


def test_fp8_catalog_is_sm90_only():
    for sm in (75, 80):
        assert not catalog(sm, Fp8BlockwiseGemmSpec.family) and not catalog(sm, Fp8ActQuantSpec.family)
    specs = catalog(90, Fp8BlockwiseGemmSpec.family)
    assert {s.output for s in specs} == {"bf16", "f16"}
    assert len({s.name for s in specs}) == len(specs)


def test_fp8_templates_render_both_operand_orders():
    swapped = render(SWAP16).source
    plain = render(Fp8BlockwiseGemmSpec((128, 128), (1, 2), "cooperative", False, "f16")).source
    assert "using LayoutD = cutlass::layout::ColumnMajor;" in swapped and "LinCombPerRowBias" in swapped
    assert "using LayoutD = cutlass::layout::RowMajor;" in plain and "LinCombPerColBias" in plain
    assert "StreamKScheduler" in swapped and "PersistentScheduler" in plain
    assert f"// kernel: {SWAP16.name}" in swapped
    quant = render(Fp8ActQuantSpec("f16", "e5m2")).source
    assert "__NV_E5M2" in quant and "57344.f" in quant


@pytest.mark.parametrize("m, n, expected", [
    (1, 24576, (128, 16)),     # one token tile: the weight is read once whatever N
    (16, 32768, (128, 16)),
    (64, 4096, (128, 16)),     # 32 weight tiles x 4 token tiles = 128 <= 132 SMs
    (64, 7168, (128, 32)),     # 56 x 4 > 132, 56 x 2 fits
    (128, 7168, (128, 64)),
    (128, 2112, (128, 32)),    # 17 x 8 = 136 > 132
    (64, 24576, "pingpong"),   # 192 weight tiles: no swapped tile fits one wave
    (128, 32768, "pingpong"),
])
def test_fp8_heuristic_decode(m, n, expected):
    choice = heuristics.fp8_choice(m, n, 7168, "bf16", 132)
    if expected == "pingpong":
        assert not choice.spec.swap_ab and choice.spec.schedule == "pingpong" and choice.spec.tile == (64, 128)
    else:
        assert choice.spec.swap_ab and choice.spec.tile == expected and choice.spec.scheduler == "persistent"


def test_fp8_heuristic_large_m_and_catalog_coverage():
    big = heuristics.fp8_choice(4096, 7168, 2048, "bf16", 132)
    assert not big.spec.swap_ab and big.spec.tile == (128, 128) and big.spec.cluster == (1, 2)
    assert big.raster == 0
    assert heuristics.fp8_choice(4096, 2112, 7168, "bf16", 132).raster == 1  # narrow weight: along M
    short_k = heuristics.fp8_choice(4096, 32768, 512, "bf16", 132).spec  # epilogue-heavy: ping-pong
    assert short_k.schedule == "pingpong" and short_k.tile == (64, 128)
    mid = heuristics.fp8_choice(256, 2112, 7168, "bf16", 132).spec
    assert mid.schedule == "pingpong" and mid.tile == (64, 128)
    # Every choice comes from the catalog, so no shape compiles at run time.
    names = {s.name for s in catalog(90, Fp8BlockwiseGemmSpec.family)}
    for m in (1, 3, 16, 17, 33, 64, 100, 128, 129, 500, 1000, 4096, 16384):
        for n in (8, 2112, 4096, 7168, 32768):
            for output in ("bf16", "f16"):
                assert heuristics.fp8_choice(m, n, 7168, output, 132).spec.name in names


# --- reference math --------------------------------------------------------------------------------

def seed_loop_reference(a, b, a_s, b_s):
    """The blog's torch loop (seeds/002): per (K block i, N block j), C[:, j] += (A_i B_ji^T) * As[:, i] * Bs[j, i]."""
    m, k = a.shape
    n = b.shape[0]
    c = torch.zeros(m, n, dtype=torch.float64)
    for i in range(-(-k // 128)):
        for j in range(-(-n // 128)):
            ks, ns = slice(i * 128, (i + 1) * 128), slice(j * 128, (j + 1) * 128)
            c[:, ns] += (a[:, ks].double() @ b[ns, ks].double().t()) * a_s[:, i:i + 1].double() * float(b_s[j, i])
    return c


def test_reference_gemm_equals_the_blockwise_loop():
    torch.manual_seed(0)
    x, w = torch.randn(5, 384) * 2, torch.randn(200, 384) * 0.1
    xq, sx = reference.quantize_fp8_groups(x)
    wq, sw = reference.quantize_fp8_blocks(w)
    ref = reference.fp8_blockwise_gemm(xq, sx, wq, sw)
    loop = seed_loop_reference(xq.float(), wq.float(), sx[:, :5].t(), sw)
    assert torch.allclose(ref, loop, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, fmax", [(torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0)])
def test_quantize_fp8_groups_layout_and_error(dtype, fmax):
    torch.manual_seed(1)
    x = torch.randn(6, 256, dtype=torch.bfloat16)
    x[2, :128] = 0
    q, sx = reference.quantize_fp8_groups(x, dtype)
    assert q.dtype == dtype and sx.shape == (2, 8)  # pitch: 6 rounded up to 4
    assert torch.equal(sx[:, 6:], torch.zeros(2, 2))
    assert sx[0, 2] == reference.FP8_EPS / fmax and not q[2, :128].float().any()
    # Each group's largest element maps to fp8_max exactly; everything else is within rounding.
    assert q.float().abs().amax().item() == fmax
    err = (reference.dequantize_fp8_groups(q, sx) - x.double()).abs()
    mantissa_bits = 3 if dtype == torch.float8_e4m3fn else 2
    assert (err <= x.double().abs() * 2.0 ** -(mantissa_bits + 1) + 1e-30).all()


def test_quantize_fp8_blocks_partial_edges():
    w = torch.randn(200, 300)
    q, s = reference.quantize_fp8_blocks(w)
    assert q.shape == (200, 300) and s.shape == (2, 3)
    assert s[1, 2] == w[128:, 256:].abs().max() / 448.0
    assert ((reference.dequantize_fp8_blocks(q, s) - w.double()).norm() / w.norm()) < 4e-2


def test_from_row_scales_builds_m_major_layout():
    q = torch.zeros(5, 256, dtype=torch.float8_e4m3fn)
    scale = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    xa = qgemm.Fp8Activations.from_row_scales(q, scale)
    assert xa.scale.shape == (2, 8) and torch.equal(xa.scale[:, :5], scale.t())
    with pytest.raises(ValueError, match=r"scale must have shape \(5, 2\)"):
        qgemm.Fp8Activations.from_row_scales(q, scale.t())


# --- argument checks (before any launch) -------------------------------------------------------------

@pytest.fixture
def fake_sm90(monkeypatch):
    """CPU tensors pretend to live on an sm90 GPU with 132 SMs, to reach the checks past the device."""
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(fp8_mod, "sm_count", lambda device: 132)


def fp8_weight(n=256, k=256):
    return qgemm.Fp8Weight.from_float(torch.randn(n, k))


def test_plan_rejects_other_gpus(monkeypatch):
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match="needs an sm90 GPU .* is sm80"):
        qgemm.Fp8GemmPlan(fp8_weight())


def test_plan_needs_cuda_weights():
    with pytest.raises(ValueError, match="weight.qweight must be on a CUDA device"):
        qgemm.Fp8GemmPlan(fp8_weight())
    with pytest.raises(TypeError, match="weight must be a qgemm.Fp8Weight, got Tensor"):
        qgemm.Fp8GemmPlan(torch.zeros(8, 128))


@pytest.mark.parametrize("make, exc, fragment", [
    (lambda: qgemm.Fp8Weight(torch.zeros(12, 128, dtype=torch.float8_e4m3fn), torch.ones(1, 1)), ValueError,
     "weight.qweight.shape[0] (N) must be a multiple of 8 (16-byte TMA rows of the output), got 12"),
    (lambda: qgemm.Fp8Weight(torch.zeros(8, 192, dtype=torch.float8_e4m3fn), torch.ones(1, 1)), ValueError,
     "weight.qweight.shape[1] (K) must be a positive multiple of 128"),
    (lambda: qgemm.Fp8Weight(torch.zeros(8, 256, dtype=torch.float8_e4m3fn), torch.ones(1, 1)), ValueError,
     "weight.scale_inv must have shape (1, 2), got (1, 1)"),
    (lambda: qgemm.Fp8Weight(torch.zeros(8, 128, dtype=torch.int8), torch.ones(1, 1)), TypeError,
     "weight.qweight must have dtype float8_e4m3fn, float8_e5m2; got int8"),
])
def test_plan_rejects_bad_weights(fake_sm90, make, exc, fragment):
    with pytest.raises(exc) as e:
        qgemm.Fp8GemmPlan(make())
    assert fragment in str(e.value)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(bias=torch.zeros(255)), ValueError, "bias must have shape (256,)"),
    (dict(out_dtype=torch.float32), TypeError, "out_dtype must be one of"),
    (dict(act_dtype=torch.int8), TypeError, "act_dtype must be one of"),
])
def test_plan_rejects_bad_options(fake_sm90, kwargs, exc, fragment):
    with pytest.raises(exc) as e:
        qgemm.Fp8GemmPlan(fp8_weight(), **kwargs)
    assert fragment in str(e.value)


def test_plan_rejects_e5m2_by_e5m2(fake_sm90):
    w = qgemm.Fp8Weight.from_float(torch.randn(8, 128), torch.float8_e5m2)
    with pytest.raises(TypeError, match="cannot both be float8_e5m2"):
        qgemm.Fp8GemmPlan(w, act_dtype=torch.float8_e5m2)


def good_activations(m=3, k=256):
    q, sx = reference.quantize_fp8_groups(torch.randn(m, k))
    return qgemm.Fp8Activations(q, sx)


@pytest.mark.parametrize("make, exc, fragment", [
    (lambda: "x", TypeError, "xa must be a qgemm.Fp8Activations, got str"),
    (lambda: qgemm.Fp8Activations(torch.zeros(3, 256, dtype=torch.float8_e5m2), torch.ones(2, 4)), TypeError,
     "xa.q must have dtype float8_e4m3fn; got float8_e5m2"),
    (lambda: good_activations(k=384), ValueError, "xa.q must have shape (M >= 1, 256), got (3, 384)"),
    (lambda: qgemm.Fp8Activations(good_activations().q, torch.ones(2, 3)), ValueError,
     "xa.scale must have shape (2, P) with P >= M=3 and a multiple of 4"),
    (lambda: qgemm.Fp8Activations(good_activations().q, torch.ones(2, 8)[:, ::2]), ValueError,
     "xa.scale must be contiguous"),
])
def test_gemm_rejects_bad_activations(fake_sm90, make, exc, fragment):
    plan = qgemm.Fp8GemmPlan(fp8_weight())
    with pytest.raises(exc) as e:
        plan.gemm(make())
    assert fragment in str(e.value)


def test_gemm_rejects_bad_out(fake_sm90):
    plan = qgemm.Fp8GemmPlan(fp8_weight())
    with pytest.raises(ValueError, match=r"out must have shape \(3, 256\)"):
        plan.gemm(good_activations(), out=torch.empty(3, 128, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out must have dtype bfloat16"):
        plan.gemm(good_activations(), out=torch.empty(3, 256, dtype=torch.float16))


def test_call_and_quantize_reject_bad_x(fake_sm90):
    plan = qgemm.Fp8GemmPlan(fp8_weight())
    with pytest.raises(ValueError, match=r"x must have shape \(M >= 1, 256\), got \(2, 128\)"):
        plan(torch.randn(2, 128))
    with pytest.raises(TypeError, match="x must have dtype float32, float16, bfloat16; got int32"):
        plan(torch.zeros(2, 256, dtype=torch.int32))
    with pytest.raises(ValueError, match="x must be contiguous"):
        qgemm.quantize_activations_fp8(torch.randn(256, 4).t())
    with pytest.raises(ValueError, match="x.shape\\[1\\] \\(K\\) must be a positive multiple of 128 \\(the scale block\\), got 200"):
        qgemm.quantize_activations_fp8(torch.randn(2, 200))
    with pytest.raises(ValueError, match="x must start at a 16-byte aligned address"):
        qgemm.quantize_activations_fp8(torch.randn(2 * 256 + 1)[1:].view(2, 256))
    with pytest.raises(TypeError, match="dtype must be one of"):
        qgemm.quantize_activations_fp8(torch.randn(2, 256), torch.int8)


def test_from_deepseek_checks_scale_shape():
    w = torch.zeros(2112, 256, dtype=torch.float8_e4m3fn)
    ok = qgemm.Fp8Weight.from_deepseek(w, torch.ones(17, 2, dtype=torch.bfloat16))
    assert ok.scale_inv.dtype == torch.float32
    with pytest.raises(ValueError, match=r"weight_scale_inv must have shape \(17, 2\), got \(16, 2\)"):
        qgemm.Fp8Weight.from_deepseek(w, torch.ones(16, 2))


def test_fp8_linear_module_checks_input_shape(fake_sm90):
    module = qgemm.nn.Fp8Linear.from_weight(fp8_weight(256, 256))
    assert "in_features=256, out_features=256" in repr(module)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 256\), got \(2, 128\)"):
        module(torch.randn(2, 128))
    with pytest.raises(TypeError, match="linear must be a torch.nn.Linear"):
        qgemm.nn.Fp8Linear.from_float(torch.nn.Conv1d(2, 2, 1))


# --- the compiled kernel's host library plans on the CPU ------------------------------------------------

@pytest.fixture(scope="module")
def swap16_library(kernel_cache):
    from cutlass_gen.build import build

    return HostLibrary(str(build(SWAP16, 90, kernel_cache).so_path))


def fp8_problem(m, n, k, pitch=None, splits=0):
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ld[0], p.ld[1], p.ld[2], p.ld[3] = k, k, pitch or reference.fp8_scale_pitch(m), n
    p.ext[0], p.ext[1], p.ext[2] = 0, 1, splits
    p.sm_count = 132
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_fp8_gemm_compiles_and_plans_without_a_driver(swap16_library):
    """plan() builds only the tile scheduler's parameters (no TMA descriptors, which need the CUDA
    driver): a persistent grid of at most one CTA per SM, a 384-thread block, the stream-K workspace."""
    host = swap16_library
    assert spec_from_dict(json.loads(host.spec_json)) == SWAP16
    status, launch = host.plan(fp8_problem(16, 4096, 7168))
    assert status == 0, host.status_string(status)
    assert launch.block[0] == 384 and tuple(launch.cluster) == (1, 1, 1)
    assert 0 < launch.grid[0] * launch.grid[1] * launch.grid[2] <= 132
    assert 100 * 1024 < launch.smem_bytes <= 227 * 1024
    assert 0 < launch.params_bytes <= PARAMS_CAPACITY
    status, split = host.plan(fp8_problem(16, 4096, 7168, splits=4))
    assert status == 0 and split.workspace_bytes > 0


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("problem, why", [
    (fp8_problem(16, 4096, 7000), "K not a multiple of 128"),
    (fp8_problem(3, 4096, 256, pitch=3), "scale pitch not a multiple of 4"),
    (fp8_problem(16, 4100, 256), "N rows not 16-byte aligned"),
    (fp8_problem(0, 4096, 256), "empty M"),
])
def test_fp8_gemm_plan_rejects(swap16_library, problem, why):
    status, _ = swap16_library.plan(problem)
    assert status != 0, why
    assert swap16_library.status_string(status)


@requires_nvcc
@pytest.mark.nvcc
def test_fp8_gemm_make_params_rejects_before_touching_the_driver(swap16_library):
    buf = ctypes.create_string_buffer(PARAMS_CAPACITY)
    bad = fp8_problem(16, 4096, 7000)
    assert swap16_library.make_params_fn(ctypes.byref(bad), None, ctypes.addressof(buf), PARAMS_CAPACITY) != 0
