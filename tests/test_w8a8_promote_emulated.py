"""The W8A8 promote kernels' own source (the rendered template and promote_gemm.h, unchanged) run on
the CPU emulator of tests/emulator/cuda_emu.h, against float64 references of the same quantized
operands: no GPU needed. The emulator gives every CUDA thread a fiber, computes ldmatrix and the
s8 MMAs from the PTX ISA's fragment layouts (tests/emulator/qgemm/w8a8/promote_mma.h), lands
cp.async copies only when their group is waited for, fills shared memory with stale bytes, and
checks that cp.async reads only the operands. What it cannot show: timing, and races between
warps that its barrier-to-barrier scheduling happens to order.

Bounds as in test_w8a8_promote_gpu.py (FP32 output 1e-4, FP16 1e-3, BF16 8e-3): the int32 block
products are exact, the promotion adds a few float32 roundings per block.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from cutlass_gen.families.w8a8 import W8A8PromoteSpec
from qgemm import reference
from qgemm._abi import QgemmLaunch, QgemmProblem

from emulator_util import compile_emulated, emulated_kernels, requires_emulator

BOUND = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}
OUT_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}

pytestmark = requires_emulator


class Emulated:
    """One kernel compiled for the emulator: plan and launch on CPU tensors."""

    def __init__(self, spec: W8A8PromoteSpec, folder: Path):
        self.spec = spec
        self.lib = compile_emulated(spec, folder)

    def run(self, m, n, k, block_size, xq, wq, vectors, bias, out, activation="none", ctas=0, raster=1, schedule=0):
        """vectors: slot -> float32 tensor (2 sx, 3 ox, 4 sum(qx), 5 sw, 6 ow, 11 v); schedule: the
        emulator's (0 lockstep warps, 1 and 2 skewed: each warp alone up to its next barrier, 3 and 4
        skewed with cp.async copies landing when issued, not when waited for)."""
        p = QgemmProblem()
        p.m, p.n, p.k = m, n, k
        p.ext[0], p.ext[1], p.ext[2], p.ext[3] = block_size, int(activation == "silu"), ctas, raster
        lo, hi = (0.0, 0.0) if activation == "silu" else reference.clamp_bounds(activation)
        p.scalar[0], p.scalar[1] = lo, hi
        p.ld[0] = p.ld[1] = k
        p.ld[3] = n
        p.ptr[0], p.ptr[1], p.ptr[10] = xq.data_ptr(), wq.data_ptr(), out.data_ptr()
        keep = [xq, wq, *vectors.values()]
        for slot, t in vectors.items():
            p.ptr[slot] = t.data_ptr()
        if bias is not None:
            p.ptr[8] = bias.data_ptr()
        launch = QgemmLaunch()
        status = self.lib.qgemm_plan(ctypes.byref(p), ctypes.byref(launch))
        assert status == 0, status
        counters = None
        if launch.workspace_bytes:
            counters = torch.zeros(launch.workspace_bytes // 4, dtype=torch.int32)
            # NaN: a partial slot read before it is written poisons the output.
            partial = torch.full((launch.grid[0] * 2 * self.spec.tile[0] * self.spec.tile[1],), float("nan"))
            p.ptr[9] = partial.data_ptr()
            keep.append(partial)
        self.lib.emu_schedule(schedule)
        self.lib.emu_clear_readable()
        for t in keep:
            self.lib.emu_readable(t.data_ptr(), t.numel() * t.element_size())
        rc = self.lib.emu_launch(ctypes.byref(p), counters.data_ptr() if counters is not None else None)
        assert rc == 0, f"emu_launch returned {rc}: {self.lib.emu_error().decode()}"
        if counters is not None:
            assert (counters == 0).all(), "the last CTA of a split tile resets its counter"
        return launch


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return emulated_kernels(tmp_path_factory.mktemp("qgemm-emulated"), Emulated)


def _operands(m, n, k, block_size, scheme, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 1.5 + 0.3
    w = torch.randn(n, k, generator=g) * 1.5 + 0.3
    if scheme == "symmetric":
        xq, sx = reference.quantize_blocks_symmetric(x, block_size)
        wq, sw = reference.quantize_weight_blocks_symmetric(w, block_size)
        return xq, wq, {2: sx, 5: sw}, (sx, sw)
    xq, sx, ox, qx = reference.quantize_blocks(x, block_size)
    wq, sw, ow, qw = reference.quantize_blocks(w, block_size)
    v = (sw * qw + block_size * ow).contiguous()
    return xq, wq, {2: sx, 3: ox, 4: qx, 5: sw, 6: ow, 11: v}, (sx, ox, sw, ow)


def _check(kernel, m, n, k, block_size, activation="none", with_bias=False, ctas=0, raster=1, seed=0, schedule=0):
    spec = kernel.spec
    xq, wq, vectors, refv = _operands(m, n, k, block_size, spec.scheme, seed)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)) if with_bias else None
    out_dtype = OUT_DTYPES[spec.output]
    out = torch.full((m, n), float("nan"), dtype=out_dtype)
    launch = kernel.run(m, n, k, block_size, xq, wq, vectors, bias, out, activation, ctas, raster, schedule)
    if spec.scheme == "symmetric":
        ref = reference.w8a8_gemm_symmetric(xq, refv[0], wq, refv[1], block_size, bias, activation)
    else:
        ref = reference.w8a8_gemm(xq, refv[0], refv[1], wq, refv[2], refv[3], block_size, bias, activation)
    result = out.double()
    assert not torch.isnan(result).any(), "NaN in output: an element was not written"
    err = ((result - ref).norm() / ref.norm()).item()
    assert err < BOUND[out_dtype], err
    return launch


SPECS = [
    W8A8PromoteSpec(80, (128, 128, 64), (64, 32), 4, "asymmetric", "f16"),
    W8A8PromoteSpec(80, (128, 128, 64), (64, 32), 4, "symmetric", "bf16"),
    W8A8PromoteSpec(80, (16, 128, 64), (16, 32), 4, "asymmetric", "f32"),
    W8A8PromoteSpec(80, (64, 128, 64), (32, 64), 3, "symmetric", "f32"),
    W8A8PromoteSpec(80, (32, 64, 128), (16, 32), 3, "asymmetric", "f32"),   # tile K 128
    W8A8PromoteSpec(80, (64, 32, 32), (32, 16), 2, "symmetric", "f32"),     # tile K 32, two stages
    W8A8PromoteSpec(75, (128, 128, 64), (64, 32), 2, "asymmetric", "f16"),
    W8A8PromoteSpec(75, (16, 128, 64), (16, 32), 2, "symmetric", "f32"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("block_size", [32, 64, 128, 256])
def test_kernel_matches_reference(emulated, spec, block_size):
    """Odd M, N at the smallest alignment with a tail tile (N = 4 mod 8), several blocks (blocks of
    32: an odd count, so a 64- or 128-K tile runs past K); four of the emulator's schedules in turn."""
    m = 19 if spec.tile[0] <= 32 else 37
    n = spec.tile[1] + 12
    k = block_size * (5 if block_size <= 64 else 3)
    _check(emulated(spec), m, n, k, block_size, schedule=(0, 1, 3, 4)[(32, 64, 128, 256).index(block_size)])


@pytest.mark.parametrize("spec", SPECS[:3] + SPECS[6:7], ids=lambda s: s.name)
@pytest.mark.parametrize("ctas, schedule", [(5, 3), (12, 2)])
def test_stream_k(emulated, spec, ctas, schedule):
    """Work split over a few CTAs whose ranges cross tiles and K blocks (split at block boundaries),
    partials reduced by the last CTA to arrive; skewed warps (a CTA's next segment must not refill
    a stage another warp still reads)."""
    m, n, block_size = 37, 268, 64
    k = block_size * 7
    launch = _check(emulated(spec), m, n, k, block_size, ctas=ctas, raster=2, schedule=schedule)
    assert launch.workspace_bytes > 0  # the tiles are split


@pytest.mark.parametrize("activation", ["relu", "relu6", "silu"])
def test_bias_and_activations(emulated, activation):
    _check(emulated(SPECS[2]), 5, 140, 256, 128, activation=activation, with_bias=True)


def test_one_row(emulated):
    """M = 1 on the decode tile, N = 4 (one 4-column vector copy of a 128-column tile), alone and
    split stream-K (the partials of rows past M are skipped)."""
    _check(emulated(SPECS[2]), 1, 4, 512, 128)
    _check(emulated(SPECS[7]), 1, 4, 96, 32)
    _check(emulated(SPECS[2]), 1, 260, 1024, 128, ctas=7, schedule=4)
    _check(emulated(SPECS[7]), 3, 260, 512, 64, ctas=5, schedule=1)
