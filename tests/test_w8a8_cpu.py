"""W8A8 without a GPU: the reference math (which the GPU tests trust), argument validation before
any launch, target SM selection and kernel choice."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import qgemm
import qgemm.w8a8.plan as w8a8_mod
from qgemm import QuantizedActivations, W8A8GemmPlan, W8A8Weight, _checks, _driver, reference
from qgemm.w8a8 import heuristics
from qgemm._runtime import target_sm_for


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 1.5 + 0.3).to(dtype)


def per_element(block_major: torch.Tensor, block_size: int) -> torch.Tensor:
    """[K/bs, R] block vector -> [R, K], each block's value repeated over its elements."""
    return block_major.t().repeat_interleave(block_size, dim=1)


# --- reference quantizer ---------------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [32, 64, 128, 256])
def test_quantize_blocks_range_error_and_layout(block_size):
    x = randn(7, block_size * 3)
    q, scale, offset, qsum = reference.quantize_blocks(x, block_size)
    assert q.dtype == torch.int8 and q.shape == (7, block_size * 3)
    for t in (scale, offset, qsum):
        assert t.dtype == torch.float32 and t.shape == (3, 7) and t.is_contiguous()
    assert int(q.min()) >= -128 and int(q.max()) <= 127
    # The full int8 range is used: min maps to -128, max to 127.
    assert (q.reshape(7, 3, block_size).amin(dim=2) == -128).all()
    assert (q.reshape(7, 3, block_size).amax(dim=2) == 127).all()
    # Each element is within half a quantization step (plus float32 rounding).
    err = (reference.dequantize_blocks(q, scale, offset, block_size) - x.double()).abs()
    bound = per_element(scale, block_size).double() / 2 + 1e-6 * x.abs().max().item()
    assert (err <= bound).all()
    # qsum is the per-block sum of q, block-major.
    sums = q.int().reshape(7, 3, block_size).sum(dim=2).t()
    assert torch.equal(qsum, sums.float())


def test_quantize_blocks_constant_block_is_exact():
    """A constant block quantizes with scale 1 and offset = its value, so q is exactly 0."""
    x = randn(2, 64)
    x[1, 32:] = -0.75
    q, scale, offset, qsum = reference.quantize_blocks(x, 32)
    assert scale[1, 1] == 1.0 and offset[1, 1] == -0.75 and qsum[1, 1] == 0
    assert (q[1, 32:] == 0).all()
    assert (reference.dequantize_blocks(q, scale, offset, 32)[1, 32:] == -0.75).all()


def test_quantize_blocks_rejects_ragged_k():
    with pytest.raises(ValueError, match="block_size=32"):
        reference.quantize_blocks(randn(2, 48), 32)


# --- W8A8Weight ------------------------------------------------------------------------------------

def test_weight_from_float_round_trip():
    w = randn(16, 256, seed=1)
    qw = W8A8Weight.from_float(w, 64)
    assert (qw.n, qw.k, qw.block_size) == (16, 256, 64)
    assert qw.qweight.dtype == torch.int8 and qw.scale.shape == (4, 16)
    err = (qw.dequantize() - w.double()).abs()
    assert (err <= per_element(qw.scale, 64).double() / 2 + 1e-6 * w.abs().max().item()).all()


def test_weight_from_float_accepts_half():
    w = randn(8, 64, seed=2, dtype=torch.float16)
    assert (W8A8Weight.from_float(w, 32).dequantize() - w.double()).abs().max() < 0.05


def test_weight_from_quantized_sums_and_transposes():
    """from_quantized takes [N, K/bs] scale/offset (checkpoint layout) and stores them block-major."""
    g = torch.Generator().manual_seed(3)
    n, k, bs = 8, 128, 32
    qweight = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, k // bs, generator=g) + 0.01
    offset = torch.randn(n, k // bs, generator=g)
    qw = W8A8Weight.from_quantized(qweight, scale, offset, bs)
    assert torch.equal(qw.scale, scale.t()) and qw.scale.is_contiguous()
    assert torch.equal(qw.offset, offset.t()) and qw.offset.is_contiguous()
    expected_sums = qweight.int().reshape(n, k // bs, bs).sum(dim=2).t().float()
    assert torch.equal(qw.qsum, expected_sums)
    expected = qweight.double() * scale.double().repeat_interleave(bs, 1) + offset.double().repeat_interleave(bs, 1)
    assert torch.allclose(qw.dequantize(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("make, exc, fragment", [
    (lambda: W8A8Weight.from_float(randn(8, 96), 48), ValueError, "block_size must be one of"),
    (lambda: W8A8Weight.from_float(randn(8, 96), 64), ValueError, "weight.shape[1] (K) must be a multiple of 64"),
    (lambda: W8A8Weight.from_float(randn(6, 64), 32), ValueError, "weight.shape[0] (N) must be a multiple of 4"),
    (lambda: W8A8Weight.from_float(randn(8, 64).int(), 32), TypeError, "weight must have dtype"),
    (lambda: W8A8Weight.from_float(randn(8, 64)[None], 32), ValueError, "weight must be 2-D"),
    (lambda: W8A8Weight.from_quantized(torch.zeros(8, 64, dtype=torch.int32), torch.ones(8, 2), torch.zeros(8, 2), 32),
     TypeError, "qweight must have dtype int8"),
    (lambda: W8A8Weight.from_quantized(torch.zeros(8, 64, dtype=torch.int8), torch.ones(2, 8), torch.zeros(8, 2), 32),
     ValueError, "scale must have shape (8, 2)"),
    (lambda: W8A8Weight.from_quantized(torch.zeros(8, 64, dtype=torch.int8), torch.ones(8, 2), torch.zeros(8, 1), 32),
     ValueError, "offset must have shape (8, 2)"),
])
def test_weight_rejects_bad_inputs(make, exc, fragment):
    """Errors name the argument and what was wrong with it."""
    with pytest.raises(exc) as info:
        make()
    assert fragment in str(info.value)


# --- GEMM reference and the epilogue formula --------------------------------------------------------

def quantized_operands(m, n, k, bs):
    a_q, a_s, a_o, a_sum = reference.quantize_blocks(randn(m, k, seed=4), bs)
    b_q, b_s, b_o, b_sum = reference.quantize_blocks(randn(n, k, seed=5), bs)
    return (a_q, a_s, a_o, a_sum), (b_q, b_s, b_o, b_sum)


def test_reference_gemm_is_float64_product_of_dequantized_operands():
    (a_q, a_s, a_o, _), (b_q, b_s, b_o, _) = quantized_operands(5, 12, 128, 32)
    bias = randn(12, seed=6)
    ref = reference.w8a8_gemm(a_q, a_s, a_o, b_q, b_s, b_o, 32, bias=bias)
    a = reference.dequantize_blocks(a_q, a_s, a_o, 32)
    b = reference.dequantize_blocks(b_q, b_s, b_o, 32)
    assert ref.dtype == torch.float64
    assert torch.allclose(ref, a @ b.t() + bias.double(), rtol=1e-12, atol=1e-12)
    relu6 = reference.w8a8_gemm(a_q, a_s, a_o, b_q, b_s, b_o, 32, bias=bias, activation="relu6")
    assert torch.equal(relu6, ref.clamp(0, 6))


@pytest.mark.parametrize("bs", [32, 128])
def test_block_sum_epilogue_formula(bs):
    """The kernel's epilogue (qgemm/w8a8/plan.py docstring, block_dequant_visitor.h) computes, per K-block i,
      s_A s_B (A_q B_q^T)_i + s_A o_B sumA_i + o_A (s_B sumB_i + bs o_B)
    from integer block products and sums; summed over blocks it must equal the dequantized product."""
    m, n, k = 6, 8, bs * 4
    (a_q, a_s, a_o, a_sum), (b_q, b_s, b_o, b_sum) = quantized_operands(m, n, k, bs)
    bias = randn(n, seed=7)
    out = torch.zeros(m, n, dtype=torch.float64)
    for i in range(k // bs):
        cols = slice(i * bs, (i + 1) * bs)
        acc = a_q[:, cols].long() @ b_q[:, cols].long().t()  # exact int product, as the tensor cores
        sa, oa, suma = (t[i].double()[:, None] for t in (a_s, a_o, a_sum))
        sb, ob, sumb = (t[i].double()[None, :] for t in (b_s, b_o, b_sum))
        out += sa * sb * acc.double() + sa * ob * suma + oa * (sb * sumb + bs * ob)
    out += bias.double()
    ref = reference.w8a8_gemm(a_q, a_s, a_o, b_q, b_s, b_o, bs, bias=bias)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-9


def test_clamp_bounds():
    assert reference.clamp_bounds("none") == (float("-inf"), float("inf"))
    assert reference.clamp_bounds("relu") == (0.0, float("inf"))
    assert reference.clamp_bounds("relu6") == (0.0, 6.0)
    with pytest.raises(ValueError, match="activation must be one of"):
        reference.clamp_bounds("gelu")


# --- validation before launch (CPU tensors) ----------------------------------------------------------

@pytest.fixture
def cpu_weight():
    return W8A8Weight.from_float(randn(64, 256, seed=8), 64)


@pytest.mark.parametrize("x, exc, fragment", [
    (randn(4, 128), ValueError, "x must be on a CUDA device"),
    ([[1.0] * 64], TypeError, "x must be a torch.Tensor"),
    (torch.zeros(4, 64, dtype=torch.int32), TypeError, "x must have dtype"),
    (randn(2, 4, 64), ValueError, "x must be 2-D"),
    # Device is checked before K: a CPU tensor with a ragged K reports the device.
    (randn(4, 100), ValueError, "x must be on a CUDA device"),
])
def test_quantize_activations_validation(x, exc, fragment):
    with pytest.raises(exc) as info:
        qgemm.quantize_activations(x, 64)
    assert fragment in str(info.value)


def test_quantize_activations_rejects_block_size():
    with pytest.raises(ValueError, match="block_size must be one of"):
        qgemm.quantize_activations(randn(4, 96), 48)
    with pytest.raises(ValueError, match="block_size must be one of"):
        qgemm.quantize_activations(randn(4, 128), 64.0)


def test_plan_rejects_cpu_weight_and_non_weight(cpu_weight):
    with pytest.raises(ValueError, match=r"weight\.qweight must be on a CUDA device"):
        W8A8GemmPlan(cpu_weight)
    with pytest.raises(TypeError, match="weight must be a qgemm.W8A8Weight, got Tensor"):
        W8A8GemmPlan(cpu_weight.qweight)
    with pytest.raises(ValueError, match="CUDA"):
        qgemm.w8a8_linear(randn(2, 256), cpu_weight)


@pytest.fixture
def fake_sm90(monkeypatch):
    """Pretend CPU tensors are on an sm90 GPU with 132 SMs, to reach the checks after the device check."""
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(_checks, "target_sm", lambda *args, **kwargs: 90)
    monkeypatch.setattr(w8a8_mod, "sm_count", lambda device: 132)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(activation="gelu"), ValueError, "activation must be one of ('none', 'relu', 'relu6', 'silu'), got 'gelu'"),
    (dict(out_dtype=torch.int32), TypeError, "out_dtype must be one of"),
    (dict(launch_mode="x"), ValueError, "launch_mode must be one of ('auto', 'sm90', 'promote', 'chained', 'per_block')"),
    (dict(out_dtype=torch.bfloat16, launch_mode="chained"), TypeError,
     "out_dtype must be torch.float32 or torch.float16 with launch_mode='chained'"),
    (dict(activation="silu", launch_mode="per_block"), ValueError,
     "activation must be one of ('none', 'relu', 'relu6') with launch_mode='per_block'"),
    (dict(bias=torch.zeros(63)), ValueError, "bias must have shape (64,)"),
    (dict(bias=torch.zeros(64, dtype=torch.int64)), TypeError, "bias must have dtype"),
])
def test_plan_rejects_bad_options(fake_sm90, cpu_weight, kwargs, exc, fragment):
    with pytest.raises(exc) as info:
        W8A8GemmPlan(cpu_weight, **kwargs)
    assert fragment in str(info.value)


def test_plan_rejects_weight_vectors_in_checkpoint_layout(fake_sm90, cpu_weight):
    """scale given as [N, K/bs] instead of block-major [K/bs, N] must be caught, naming the field."""
    bad = W8A8Weight(cpu_weight.qweight, cpu_weight.scale.t().contiguous(), cpu_weight.offset, cpu_weight.qsum, 64)
    with pytest.raises(ValueError, match=r"weight\.scale must have shape \(4, 64\)"):
        W8A8GemmPlan(bad)


def test_plan_checks_calls(fake_sm90, cpu_weight):
    """With a valid plan, each call checks x / xq / out before quantizing or launching."""
    plan = W8A8GemmPlan(cpu_weight, bias=torch.zeros(64), activation="relu")
    assert plan.target_sm == 90 and plan.clamp == (0.0, float("inf"))
    with pytest.raises(ValueError, match=r"x must have shape \(M >= 1, 256\), got \(3, 128\)"):
        plan(randn(3, 128))
    with pytest.raises(ValueError, match=r"x must have shape \(M >= 1, 256\)"):
        plan(randn(0, 256))
    with pytest.raises(ValueError, match="x must be contiguous"):
        plan(randn(256, 3).t())
    with pytest.raises(TypeError, match="xq must be a qgemm.QuantizedActivations"):
        plan.gemm(randn(3, 256))

    xq32 = QuantizedActivations(*reference.quantize_blocks(randn(3, 256), 32), block_size=32)
    with pytest.raises(ValueError, match="xq.block_size must equal the weight's block_size=64, got 32"):
        plan.gemm(xq32)
    xq_short = QuantizedActivations(*reference.quantize_blocks(randn(3, 128), 64), block_size=64)
    with pytest.raises(ValueError, match=r"xq\.q must have shape"):
        plan.gemm(xq_short)
    xq = QuantizedActivations(*reference.quantize_blocks(randn(3, 256), 64), block_size=64)
    with pytest.raises(TypeError, match="out must have dtype float16"):
        plan.gemm(xq, out=torch.empty(3, 64))
    with pytest.raises(ValueError, match=r"out must have shape \(3, 64\)"):
        plan.gemm(xq, out=torch.empty(3, 32, dtype=torch.float16))


def test_quantize_activations_checks_k_after_device(fake_sm90):
    with pytest.raises(ValueError, match=r"x.shape\[1\] \(K\) must be a multiple of 64"):
        qgemm.quantize_activations(randn(4, 100), 64)
    with pytest.raises(ValueError, match="at least one row"):
        qgemm.quantize_activations(randn(0, 128), 64)


def test_plan_picks_kernel_by_shape(fake_sm90, cpu_weight):
    """Block size 64 on sm90: the Sm90 kernels, swapped with a 16-token tile for decode-sized M and
    the 128 x 128 tile beyond (persistent: the catalog has stream-K kernels for block 128 only, and
    the heuristic never picks a kernel outside it); the chained reference path keeps the
    Ampere kernels, with the 32x128 tile for decode-sized M."""
    plan = W8A8GemmPlan(cpu_weight, out_dtype=torch.float32)
    assert plan.launch_mode == "sm90"
    spec = plan.kernel_spec(1)
    assert (spec.family, spec.tile, spec.swap_ab, spec.block_size, spec.output) == \
        ("w8a8_gemm_sm90", (128, 16), True, 64, "f32")
    spec = plan.kernel_spec(100)
    assert (spec.tile, spec.swap_ab, spec.scheduler) == ((128, 128), False, "persistent")
    chained = W8A8GemmPlan(cpu_weight, out_dtype=torch.float32, launch_mode="chained")
    spec = chained.kernel_spec(1)
    assert (spec.arch, spec.tile[:2], spec.output) == (80, (32, 128), "f32")
    assert chained.kernel_spec(1) is spec  # cached per M


# --- target SM ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("capability, target", [
    ((7, 0), None), ((7, 2), None), ((6, 1), None),
    ((7, 5), 75), ((8, 0), 80), ((8, 6), 80), ((8, 9), 80),
    ((9, 0), 90), ((10, 0), 80), ((12, 0), 80),
])
def test_target_sm_for(capability, target):
    """sm_90a code runs only on sm90; every other sm8x and newer GPU runs the sm80 build."""
    assert target_sm_for(capability) == target


def test_target_sm_rejects_old_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    with pytest.raises(ValueError) as info:
        _checks.target_sm(torch.device("cuda:0"), 75, "qgemm W8A8")
    assert "sm75" in str(info.value) and "sm70" in str(info.value)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert _checks.target_sm(torch.device("cuda:0"), 75, "qgemm W8A8") == 90


# --- kernel choice -----------------------------------------------------------------------------------

def test_heuristics_block_size_32_uses_turing_kernels_on_sm90():
    spec = heuristics.w8a8_spec(256, 4096, 32, "f16", 90, 132)
    assert spec.arch == 75 and spec.tile[2] == 32 and spec.supports_block_size(32)


@pytest.mark.parametrize("block_size", [64, 128, 256])
def test_heuristics_prefers_newest_arch(block_size):
    assert heuristics.w8a8_spec(256, 4096, block_size, "f16", 90, 132).arch == 80
    assert heuristics.w8a8_spec(256, 4096, block_size, "f16", 75, 40).arch == 75


@pytest.mark.parametrize("m, n, tile", [
    (1, 4096, (32, 128)),
    (32, 4096, (32, 128)),
    (4096, 4096, (128, 128)),
    (256, 256, (64, 64)),
])
@pytest.mark.parametrize("output", ["f16", "f32"])
def test_heuristics_tile_by_shape(m, n, tile, output):
    spec = heuristics.w8a8_spec(m, n, 128, output, 90, 132)
    assert spec.tile[:2] == tile and spec.output == output


def test_heuristics_rejects_unserved_output():
    with pytest.raises(ValueError, match="no W8A8 kernel"):
        heuristics.w8a8_spec(16, 64, 64, "bf16", 80, 108)


# --- no GPU --------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_driver_raises_no_gpu_error():
    with pytest.raises(qgemm.NoGpuError, match="driver"):
        _driver.driver()


def test_get_kernel_without_artifact_or_nvcc(monkeypatch):
    """No prebuilt kernel and no nvcc: KernelUnavailableError that says how to build it."""
    from cutlass_gen.families.w8a8 import ActQuantSpec
    from cutlass_gen.toolchain import ToolchainError
    from qgemm import _runtime

    def no_nvcc(*args, **kwargs):
        raise ToolchainError("nvcc not found")

    monkeypatch.setattr(_runtime, "_kernels", {})
    monkeypatch.setattr(_runtime, "find_artifact", lambda spec, target: None)
    monkeypatch.setattr(_runtime, "build", no_nvcc)
    with pytest.raises(qgemm.KernelUnavailableError, match=r"qgemm build --sm 80"):
        _runtime.get_kernel(ActQuantSpec("f32"), 80)


def test_import_qgemm_without_gpu():
    """Importing qgemm needs no GPU or driver (a fresh interpreter with no visible devices)."""
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", "import qgemm; print(qgemm.__version__)"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == qgemm.__version__
