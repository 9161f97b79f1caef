"""Reliability on the CPU (issue 18): the argument checks of qgemm._checks, every quantizer's answer to
NaN/Inf, the float64 references' NaN semantics, the stream-K buffers of captured launches, and the
kernel sources' NaN-keeping activations. The GPU halves are test_nan_gpu.py, test_concurrency_gpu.py,
test_limits_gpu.py and test_fuzz_gpu.py.
"""
from __future__ import annotations

import types

import pytest
import torch

import qgemm
from cutlass_gen.paths import templates_dir
from cutlass_gen.render import render
from cutlass_gen.families.fp8 import Fp8ActQuantSpec
from qgemm import _checks, reference
from qgemm.conv import quant as conv_quant
from qgemm.fp8 import plan as fp8
from qgemm.fpaintb import plan as fpaintb
from qgemm.w8a8 import plan as w8a8

INT32_LIMIT = 2**31 - 1

# --- _checks.finite and _checks.index_limit -------------------------------------------------------

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_finite_names_the_tensor(bad, dtype):
    t = torch.randn(5, 7).to(dtype)
    t[3, 2] = bad
    with pytest.raises(ValueError, match=r"weight\.scale holds 1 NaN/Inf value\(s\) \(first at index \(3, 2\)\)"):
        _checks.finite("weight.scale", t)


def test_finite_fp8_nan_code_and_accepts_finite():
    w = torch.randn(4, 8).to(torch.float8_e4m3fn)
    _checks.finite("weight", w)
    w.view(torch.uint8)[1, 1] = 0x7F  # e4m3fn NaN
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        _checks.finite("weight", w)
    _checks.finite("weight", torch.randn(3, 3))
    _checks.finite("codes", torch.full((3, 3), 7, dtype=torch.int8))  # integers hold no NaN


def test_index_limit():
    _checks.index_limit("x.shape[0] (M)", INT32_LIMIT)
    with pytest.raises(ValueError, match=r"x\.shape\[0\] \(M\) is 2147483648, beyond the 2147483647"):
        _checks.index_limit("x.shape[0] (M)", INT32_LIMIT + 1)
    with pytest.raises(ValueError, match=r"pixels is 11, beyond the 10 the kernel addresses \(a reason\)"):
        _checks.index_limit("pixels", 11, 10, "a reason")


# --- the references' NaN semantics -----------------------------------------------------------------

def _poisoned(m, k, bad, row, col):
    x = torch.randn(m, k)
    x[row, col] = bad
    return x


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_group_quantizer_gives_a_non_finite_group_a_nan_scale(bad, dtype):
    x = _poisoned(5, 384, bad, 2, 200)  # group 1 of row 2
    q, sx = reference.quantize_fp8_groups(x, dtype)
    assert torch.isnan(sx[1, 2])
    assert (q[2, 128:256].float() == 0).all()
    clean_q, clean_sx = reference.quantize_fp8_groups(torch.where(torch.isfinite(x), x, 0.0), dtype)
    others = torch.ones_like(sx[:, :5], dtype=torch.bool)
    others[1, 2] = False
    assert torch.equal(sx[:, :5][others], clean_sx[:, :5][others])  # the other groups are untouched
    assert torch.isfinite(sx[:, :5][others]).all()
    w_q, w_s = reference.quantize_fp8_blocks(torch.randn(256, 384), dtype)
    out = reference.fp8_blockwise_gemm(q, sx, w_q, w_s)
    assert torch.isnan(out[2]).all(), "the row holding NaN/Inf must be NaN in every output"
    assert torch.isfinite(out[[0, 1, 3, 4]]).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_w8a8_quantizers_give_a_non_finite_block_a_nan_scale(bad):
    x = _poisoned(3, 256, bad, 1, 70)  # block 1 of row 1 (block 64)
    q, scale, offset, qsum = reference.quantize_blocks(x, 64)
    assert torch.isnan(scale[1, 1]) and torch.isnan(offset[1, 1]) and (q[1, 64:128] == 0).all()
    wq, ws, wo, _ = reference.quantize_blocks(torch.randn(16, 256), 64)
    out = reference.w8a8_gemm(q, scale, offset, wq, ws, wo, 64)
    assert torch.isnan(out[1]).all() and torch.isfinite(out[[0, 2]]).all()
    q, scale = reference.quantize_blocks_symmetric(x, 64)
    assert torch.isnan(scale[1, 1]) and (q[1, 64:128] == 0).all()
    wq, wsi = reference.quantize_weight_blocks_symmetric(torch.randn(16, 256), 64)
    out = reference.w8a8_gemm_symmetric(q, scale, wq, wsi, 64)
    assert torch.isnan(out[1]).all() and torch.isfinite(out[[0, 2]]).all()


@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "silu"])
def test_reference_activations_keep_nan(activation):
    out = reference.apply_activation(torch.tensor([float("nan"), -1.0, 2.0], dtype=torch.float64), activation)
    assert torch.isnan(out[0])


# --- weight quantizers refuse NaN/Inf, naming the tensor ------------------------------------------

def _with(value, shape, at=(0, 1)):
    t = torch.randn(*shape)
    t[at] = value
    return t


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weight_quantizers_refuse_non_finite(bad):
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.Fp8Weight.from_float(_with(bad, (128, 256)))
    with pytest.raises(ValueError, match="weight_scale_inv holds 1 NaN/Inf"):
        qgemm.Fp8Weight.from_deepseek(torch.randn(128, 256).to(torch.float8_e4m3fn), _with(bad, (1, 2)))
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.IntBWeight.from_float(_with(bad, (64, 128)), bits=4, group_size=64)
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.wq_format.quantize_rtn(_with(bad, (64, 128)), 8, 64)
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.IntConvWeight.from_float(_with(bad, (8, 32, 3, 3), (0, 1, 2, 2)), 4, 32)
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        conv_quant.quantize_weight(_with(bad, (8, 16, 3, 3), (0, 1, 2, 2)))


def test_fp8_deepseek_weight_nan_code_refused():
    w = torch.randn(128, 256).to(torch.float8_e4m3fn)
    w.view(torch.uint8)[5, 9] = 0xFF  # e4m3fn -NaN
    with pytest.raises(ValueError, match=r"weight holds 1 NaN/Inf value\(s\) \(first at index \(5, 9\)\)"):
        qgemm.Fp8Weight.from_deepseek(w, torch.ones(1, 2))


@pytest.mark.parametrize("scheme", ["asymmetric", "symmetric"])
def test_w8a8_weight_quantizer_refuses_non_finite(scheme):
    with pytest.raises(ValueError, match="weight holds 1 NaN/Inf"):
        qgemm.W8A8Weight.from_float(_with(float("nan"), (16, 128)), 64, scheme=scheme)


def test_w8a8_block_int8_checkpoint_refuses_non_finite_scales():
    with pytest.raises(ValueError, match="weight_scale_inv holds 1 NaN/Inf"):
        qgemm.W8A8Weight.from_block_int8(torch.zeros(128, 256, dtype=torch.int8), _with(float("inf"), (1, 2)))


def test_conv_int8_quant_refuses_non_finite_scales_and_bias():
    with pytest.raises(ValueError, match="weight_scale holds 1 NaN/Inf"):
        qgemm.ConvInt8Quant(0.1, 0, torch.tensor([1.0, float("nan")]), 0.1, 0)
    for name in ("input_scale", "output_scale"):
        args = dict(input_scale=0.1, input_zero=0, weight_scale=torch.ones(2), output_scale=0.1, output_zero=0)
        args[name] = float("inf")
        with pytest.raises(ValueError, match=f"{name} must be a positive number"):
            qgemm.ConvInt8Quant(**args)
        args[name] = float("nan")
        with pytest.raises(ValueError, match=f"{name} must be a positive number"):
            qgemm.ConvInt8Quant(**args)
    quant = qgemm.ConvInt8Quant(0.1, 3, torch.ones(4), 0.2, -1)
    w_q = torch.randint(-127, 128, (4, 3, 3, 8), dtype=torch.int8)
    with pytest.raises(ValueError, match="bias holds 1 NaN/Inf"):
        conv_quant.requant_params(w_q, torch.tensor([0.0, float("inf"), 1.0, 2.0]), quant)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_conv_int8_input_quantizer_refuses_non_finite(bad):
    """int8 holds no NaN: the int8 conv's quantizer refuses it instead of returning finite codes."""
    x = _with(bad, (2, 4, 4, 8), (1, 2, 3, 4))
    with pytest.raises(ValueError, match="x holds NaN or Inf"):
        conv_quant.quantize_input(x, 0.1, 0)
    assert conv_quant.quantize_input(torch.randn(2, 4, 4, 8), 0.1, 3).dtype == torch.int8


# --- index limits reached before any launch --------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors pretend to be on an sm90 GPU; get_kernel must never be reached."""
    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was requested: the check did not come before the launch")

    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for module in (fp8, fpaintb, w8a8):
        monkeypatch.setattr(module, "sm_count", lambda device: 132)
        monkeypatch.setattr(module, "get_kernel", no_kernel)


def _rows(m, k, dtype):
    return torch.empty((m, k), dtype=dtype, device="meta")


def test_fp8_rejects_m_past_int32(fake_gpu):
    plan = qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(torch.randn(128, 256)))
    with pytest.raises(ValueError, match=r"x\.shape\[0\] \(M\) is 2147483648, beyond the 2147483647"):
        plan(_rows(2**31, 256, torch.bfloat16))
    with pytest.raises(ValueError, match=r"x\.shape\[0\] \(M\) is 2147483648"):
        qgemm.quantize_activations_fp8(_rows(2**31, 256, torch.bfloat16))
    # the scales' element count: K / 128 x M rounded up to 4
    with pytest.raises(ValueError, match=r"activation scales for M=1073741825, K=256 .* is 2147483656"):
        qgemm.quantize_activations_fp8(_rows(2**30 + 1, 256, torch.bfloat16))


def test_fpaintb_rejects_m_past_int32(fake_gpu):
    w = qgemm.IntBWeight.from_float(torch.randn(64, 128), bits=4, group_size=64)
    plan = qgemm.FpAIntBPlan(w)
    with pytest.raises(ValueError, match=r"x\.shape\[0\] \(M\) is 2147483648"):
        plan(_rows(2**31, 128, torch.float16))


def test_w8a8_rejects_m_past_int32(fake_gpu):
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(torch.randn(16, 128), 64), launch_mode="chained")
    with pytest.raises(ValueError, match=r"x\.shape\[0\] \(M\) is 2147483648"):
        plan(_rows(2**31, 128, torch.float16))


# --- stream-K counters: per launch, eagerly and under capture ---------------------------------------

def _launch(workspace_bytes=64, ctas=4):
    return types.SimpleNamespace(workspace_bytes=workspace_bytes, grid=(ctas, 1, 1))


def test_stream_k_counters_are_per_launch():
    """Two graphs captured on one stream must not share counters (issue 18's hang), and an eager call
    must leave no tensor behind (torch.compile's CUDA-graph trees refuse a warm-up call that keeps an
    allocation of their pool alive)."""
    buffers = fpaintb.StreamKBuffers(torch.device("cpu"))
    p1, c1 = buffers.get(_launch(), (16, 8), stream=1)
    p2, c2 = buffers.get(_launch(), (16, 8), stream=1)
    assert c1 != c2
    assert vars(buffers) == {"device": torch.device("cpu")}, "a call must keep nothing in the buffers object"
    for partial, counters in ((p1, c1), (p2, c2)):
        assert partial.numel() == 4 * 2 * 16 * 8
        storage = partial.untyped_storage()  # the view keeps the counters behind it alive
        assert counters == partial.data_ptr() + partial.numel() * 4  # right behind the partial tiles
        assert storage.nbytes() >= partial.numel() * 4 + 64
        tail = torch.empty(0, dtype=torch.float32).set_(storage, partial.numel(), (16,))
        assert (tail == 0).all(), "counters start zeroed"
    assert buffers.get(_launch(workspace_bytes=0), (16, 8), 1) == (None, 0)


# --- the kernels' sources keep NaN -------------------------------------------------------------------

def test_fpaintb_activations_keep_nan_in_source():
    source = (templates_dir() / "include" / "qgemm" / "fpaintb" / "mma.h").read_text()
    assert "case kRelu: return relu_keep_nan(v);" in source
    assert "case kRelu6: return v != v ? v :" in source
    assert "fmaxf(v, 0.f);" not in source.split("case kRelu:")[1].split("\n")[0]


def _emulate_relu_keep_nan(v: float) -> float:
    """templates/include/qgemm/fpaintb/mma.h relu_keep_nan, line by line."""
    return v if v > 0.0 else (v if v != v else 0.0)


@pytest.mark.parametrize("v", [float("nan"), -1.0, 0.0, 3.0, float("inf"), float("-inf")])
def test_relu_keep_nan_matches_torch(v):
    expected = torch.relu(torch.tensor(v)).item()
    got = _emulate_relu_keep_nan(v)
    assert (got != got and expected != expected) or got == expected


@pytest.mark.parametrize("input", Fp8ActQuantSpec.INPUTS)
def test_fp8_act_quant_source_marks_non_finite_groups(input):
    source = render(Fp8ActQuantSpec(input)).source
    assert "finite = __all_sync(lanes, finite);" in source
    assert "float scale = finite ? __fdiv_rn(amax, kFp8Max) : NAN;" in source


class _FakeStream:
    synchronized = 0

    def synchronize(self):
        _FakeStream.synchronized += 1


def _fake_cuda(monkeypatch, capturing=False):
    import contextlib
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream())


def test_plans_are_made_on_a_helper_thread(monkeypatch):
    """outside_graph_pools: make() runs on another thread (whose allocations cudagraph trees do not
    send to their pool), its stream synchronized before it returns; its result and its errors reach
    the caller unchanged. While the caller captures a graph, make() runs in place (no sync allowed)."""
    import threading

    from qgemm._runtime import outside_graph_pools
    _fake_cuda(monkeypatch)
    caller = threading.get_ident()
    before = _FakeStream.synchronized
    assert outside_graph_pools(lambda: threading.get_ident(), torch.device("cuda", 0)) != caller
    assert _FakeStream.synchronized == before + 1

    def fails():
        raise ValueError("x must be contiguous")
    with pytest.raises(ValueError, match="x must be contiguous"):
        outside_graph_pools(fails, torch.device("cuda"))
    assert outside_graph_pools(lambda: threading.get_ident(), None) == caller  # quantizers: no device
    assert outside_graph_pools(lambda: threading.get_ident(), torch.device("cpu")) == caller
    _fake_cuda(monkeypatch, capturing=True)
    assert outside_graph_pools(lambda: threading.get_ident(), torch.device("cuda", 0)) == caller


def test_context_is_made_current_once_per_thread_and_device(monkeypatch):
    """Kernel.launch calls _driver.ensure_context_on_thread: the driver check (cuCtxGetCurrent) runs
    on a thread's first launch on each device, not on every launch (the warm call's host time)."""
    import threading

    from qgemm import _driver
    calls = []
    monkeypatch.setattr(_driver, "ensure_context", lambda device: calls.append((threading.get_ident(), device)))
    monkeypatch.setattr(_driver, "_thread_state", threading.local())
    for _ in range(3):
        _driver.ensure_context_on_thread(0)
    _driver.ensure_context_on_thread(1)
    helper = threading.Thread(target=lambda: [_driver.ensure_context_on_thread(0) for _ in range(2)])
    helper.start()
    helper.join()
    me = threading.get_ident()
    assert [d for t, d in calls if t == me] == [0, 1]
    assert [d for t, d in calls if t != me] == [0]
