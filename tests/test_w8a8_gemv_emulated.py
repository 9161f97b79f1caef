"""The fused W8A8 decode kernel's own source (templates/w8a8_gemv.cu.j2 rendered, unchanged) on the
CPU emulator of tests/emulator/cuda_emu.h (every CUDA thread a fiber, the s8 MMA computed from the
PTX ISA's fragment layouts, stale shared memory): no GPU needed.

* The kernel's quantized x (its debug dump, ptr[12..13]) equals reference.quantize_blocks /
  quantize_blocks_symmetric bit for bit: the reference the act_quant kernel is held to bit for bit,
  so the fused path multiplies exactly the two-kernel path's operands.
* Its output matches the float64 reference of those operands, bounds as for the promote kernels
  (FP32 output 1e-4, FP16 1e-3, BF16 8e-3: exact int32 block products, a few FP32 roundings per
  block and per split).
* Split-K: several K splits, the last one shorter; the partial buffer starts as NaN, so a slot read
  before it is written poisons the output.
What it cannot show: timing, and races that its barrier-to-barrier scheduling happens to order.
"""
from __future__ import annotations

import ctypes
import math

import pytest
import torch

from cutlass_gen.families.w8a8 import W8A8GemvSpec
from qgemm import reference
from qgemm._abi import QgemmLaunch, QgemmProblem

from emulator_util import check_l2_prefetch_bytes, compile_emulated, emulated_kernels, requires_emulator

pytestmark = requires_emulator

BOUND = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


class Emulated:
    def __init__(self, spec: W8A8GemvSpec, folder):
        self.spec = spec
        self.lib = compile_emulated(spec, folder)

    def run(self, x, wq, vectors, bias, out, block_size, slice_blocks, activation="none", schedule=0, dump=None,
            l2_prefetch=0):
        """l2_prefetch: ext[3], bytes per CTA; every prefetch must lie inside wq (emu_prefetchable)."""
        m, k = x.shape
        n = wq.shape[0]
        p = QgemmProblem()
        p.m, p.n, p.k = m, n, k
        p.ext[0], p.ext[1], p.ext[2], p.ext[3] = block_size, int(activation == "silu"), slice_blocks, l2_prefetch
        self.lib.emu_prefetchable(wq.data_ptr(), wq.numel())
        p.scalar[0], p.scalar[1] = (0.0, 0.0) if activation == "silu" else reference.clamp_bounds(activation)
        p.ld[0] = p.ld[1] = k
        p.ld[3] = n
        p.ptr[0], p.ptr[1], p.ptr[10] = x.data_ptr(), wq.data_ptr(), out.data_ptr()
        for slot, t in vectors.items():
            p.ptr[slot] = t.data_ptr()
        if bias is not None:
            p.ptr[8] = bias.data_ptr()
        if dump is not None:
            p.ptr[12], p.ptr[13] = dump[0].data_ptr(), dump[1].data_ptr()
        launch = QgemmLaunch()
        assert self.lib.qgemm_plan(ctypes.byref(p), ctypes.byref(launch)) == 0
        counters = partial = None
        if launch.workspace_bytes:
            counters = torch.zeros(launch.workspace_bytes // 4, dtype=torch.int32)
            partial = torch.full((launch.grid[1] * m * n,), float("nan"))
            p.ptr[9] = partial.data_ptr()
        self.lib.emu_schedule(schedule)
        self.lib.emu_clear_readable()
        rc = self.lib.emu_launch(ctypes.byref(p), counters.data_ptr() if counters is not None else None)
        assert rc == 0, f"emu_launch returned {rc}: {self.lib.emu_error().decode()}"
        return launch


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return emulated_kernels(tmp_path_factory.mktemp("qgemm-gemv-emulated"), Emulated)


def _weights(n, k, block_size, scheme, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 1.5 + 0.3
    if scheme == "symmetric":
        wq, sw = reference.quantize_weight_blocks_symmetric(w, block_size)
        return wq, {5: sw}, (sw,)
    wq, sw, ow, qw = reference.quantize_blocks(w, block_size)
    v = (sw * qw + block_size * ow).contiguous()
    return wq, {5: sw, 6: ow, 11: v}, (sw, ow)


def _check(kernel, m, n, k, block_size, slice_blocks, activation="none", with_bias=False, seed=0, schedule=0,
           nan_row=None, l2_prefetch=0):
    spec = kernel.spec
    g = torch.Generator().manual_seed(seed + 7)
    x = (torch.randn(m, k, generator=g) * 1.5 + 0.3).to(DTYPES[spec.input])
    if nan_row is not None:
        x[nan_row, k // 2] = float("nan")
    wq, vectors, wv = _weights(n, k, block_size, spec.scheme, seed)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)) if with_bias else None
    out_dtype = DTYPES[spec.output]
    out = torch.full((m, n), float("nan"), dtype=out_dtype)
    dump = (torch.full((m, k), 99, dtype=torch.int8), torch.full((3, k // block_size, m), float("inf")))
    launch = kernel.run(x, wq, vectors, bias, out, block_size, slice_blocks, activation, schedule, dump, l2_prefetch)
    # The kernel's operands are the reference quantization's, bit for bit.
    if spec.scheme == "symmetric":
        xq, sx = reference.quantize_blocks_symmetric(x, block_size)
        assert torch.equal(dump[0], xq)
        assert torch.equal(dump[1][0], sx) or torch.allclose(dump[1][0], sx, rtol=0, atol=0, equal_nan=True)
        ref = reference.w8a8_gemm_symmetric(xq, sx, wq, wv[0], block_size, bias, activation)
    else:
        xq, sx, ox, qx = reference.quantize_blocks(x, block_size)
        assert torch.equal(dump[0], xq)
        for got, want in zip(dump[1], (sx, ox, qx)):
            assert torch.allclose(got, want, rtol=0, atol=0, equal_nan=True)
        ref = reference.w8a8_gemm(xq, sx, ox, wq, wv[0], wv[1], block_size, bias, activation)
    result = out.double()
    rows = [r for r in range(m) if r != nan_row]
    if nan_row is not None:
        assert torch.isnan(result[nan_row]).all(), "NaN in x must reach every output of its row"
    result, ref = result[rows], ref[rows]
    assert not torch.isnan(result).any(), "NaN in output: an element was not written"
    err = ((result - ref).norm() / ref.norm()).item()
    assert err < BOUND[out_dtype], err
    return launch


SMALL = dict(warps=2, n_tiles=1, depth=2, min_ctas=1)   # 16 columns per CTA: quick to emulate
SPECS = [
    W8A8GemvSpec("f32", "asymmetric", "f32", **SMALL),
    W8A8GemvSpec("f16", "symmetric", "f32", **SMALL),
    W8A8GemvSpec("bf16", "asymmetric", "bf16", warps=2, n_tiles=2, depth=3),
    W8A8GemvSpec("f16", "symmetric", "f16", warps=2, n_tiles=4, depth=4),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("block_size", [32, 64, 128, 256])
def test_kernel_matches_reference(emulated, spec, block_size):
    """M = 3 and 16 (rows g + 8 in use), N at the smallest alignment with a tail tile (N = 4 mod 8),
    K split into slices of 2 blocks with a shorter last one (blocks of 32: an odd count, so a slice
    ends half-way through a 64-K chunk)."""
    n = spec.tile_n + 4
    k = block_size * 5
    for m, schedule in ((3, 0), (16, 1)):
        launch = _check(emulated(spec), m, n, k, block_size, slice_blocks=2, schedule=schedule, seed=block_size + m)
        assert launch.grid[1] == 3 and launch.workspace_bytes > 0


@pytest.mark.parametrize("block_size", [32, 128])
def test_one_slice_and_one_row(emulated, block_size):
    """M = 1, one K split (no partials), N = 4; and the whole K in one slice."""
    spec = SPECS[0]
    launch = _check(emulated(spec), 1, 4, block_size, block_size, slice_blocks=1)
    assert launch.grid[1] == 1 and launch.workspace_bytes == 0
    _check(emulated(spec), 1, 36, block_size * 3, block_size, slice_blocks=3, schedule=2)


@pytest.mark.parametrize("activation", ["relu", "relu6", "silu"])
def test_bias_and_activations(emulated, activation):
    _check(emulated(SPECS[0]), 5, 20, 256, 64, slice_blocks=2, activation=activation, with_bias=True)
    _check(emulated(SPECS[3]), 9, 68, 256, 128, slice_blocks=1, activation=activation, with_bias=True)


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: s.name)
def test_nan_reaches_its_row(emulated, spec):
    _check(emulated(spec), 4, 20, 256, 64, slice_blocks=2, nan_row=2)


def test_plan_bounds():
    """The plan rejects what the kernel cannot hold (16 rows, the slice's shared memory)."""
    spec = W8A8GemvSpec("f16", "asymmetric", "f16")
    assert spec.max_slice_blocks_for(256) == 8 and spec.max_slice_blocks_for(32) == 16
    assert math.isclose(spec.smem_bytes, spec.slice_smem_bytes(16, 128))


def test_many_splits(emulated):
    """More K splits than one batch of the last CTA's reduction (8): 11 and 17 slices."""
    launch = _check(emulated(SPECS[0]), 2, 20, 32 * 11, 32, slice_blocks=1)
    assert launch.grid[1] == 11
    launch = _check(emulated(SPECS[1]), 9, 20, 64 * 17, 64, slice_blocks=1, schedule=2)
    assert launch.grid[1] == 17


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[3]], ids=lambda s: s.name)
@pytest.mark.parametrize("block_size", [32, 128])
def test_l2_prefetch_ranges(emulated, spec, block_size):
    """The L2 prefetch before the wait (ext[3], bytes per CTA): each CTA's column c < N asks for the
    part of its K slice after the chunks its ring loads first, 16-byte aligned, inside the weight
    (the emulator fails a prefetch outside it), at most ext[3] bytes per CTA; with ext[3] past the
    slice, exactly those parts (summed independently here); and the output is the reference's."""
    n, m = spec.tile_n + 4, 3  # the last CTA's columns partly past N
    k = block_size * 5
    kernel = emulated(spec)
    skip = (spec.depth - 1) * 64  # the K the ring loads first
    for slice_blocks in (1, 2, 5):
        slices = [min(slice_blocks, 5 - b0) * block_size for b0 in range(0, 5, slice_blocks)]
        whole = sum(max(0, kk - skip) // 16 * 16 for kk in slices) * n  # every valid column, every slice
        assert whole > 0 or slice_blocks * block_size <= skip
        check_l2_prefetch_bytes(  # under one 16-byte unit per column: none
            kernel.lib,
            lambda nbytes: _check(kernel, m, n, k, block_size, slice_blocks, l2_prefetch=nbytes, seed=slice_blocks),  # noqa: B023
            whole, 16 * spec.tile_n, sizes=(0, 16, 1024, 1 << 20), label=(slice_blocks,))
