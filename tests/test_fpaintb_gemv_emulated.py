"""The FpA x IntB decode kernel (FpAIntBGemvSpec stream=True, templates/fpaintb_gemv.cu.j2, unchanged)
run on the CPU emulator of tests/emulator/cuda_emu.h against float64 references of the same
quantized weights: no GPU needed. The emulator computes the m16n8k16 MMA from the PTX ISA's fragment
layout and the converters from the packed layout's definition (tests/emulator/qgemm/fpaintb/), so
the kernel's fragment pairing, addresses, clamped columns and tokens, the half block past K, the
scale modes and its own zero bit patterns are checked against independent code. What it cannot
show: timing, the real lop3/prmt converters (tests/test_fpaintb_gpu.py checks those exhaustively).

Bounds as in test_fpaintb_gpu.py (FP16 2e-3, BF16 1e-2).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cutlass_gen.families.fpaintb import FpAIntBGemvSpec
from qgemm import wq_format
from qgemm._abi import QgemmLaunch, QgemmProblem
from qgemm.fpaintb import ACTIVATIONS, IntBWeight

from emulator_util import check_l2_prefetch_bytes, compile_emulated, emulated_kernels, requires_emulator

pytestmark = requires_emulator

BOUND = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class Emulated:
    def __init__(self, spec: FpAIntBGemvSpec, folder: Path):
        self.spec = spec
        self.lib = compile_emulated(spec, folder)

    def run(self, x, weight: IntBWeight, scale, bias=None, activation="none", schedule=0, slots=0, l2_prefetch=0):
        """slots > 0: split-K, as the plan asks for it (ext[2]: the CTAs that run at once). l2_prefetch:
        ext[4], bytes per CTA; every prefetch must lie inside the packed weight (emu_prefetchable)."""
        m, k = x.shape
        out = torch.full((m, weight.n), float("nan"), dtype=x.dtype)
        p = QgemmProblem()
        p.m, p.n, p.k = m, weight.n, weight.k
        p.ptr[0], p.ptr[1], p.ptr[2] = x.data_ptr(), weight.packed.data_ptr(), scale.data_ptr()
        p.ptr[3] = weight.zero.data_ptr() if weight.zero is not None else None
        p.ptr[4] = bias.data_ptr() if bias is not None else None
        p.ptr[5] = out.data_ptr()
        p.ld[0], p.ld[1], p.ld[2] = k, weight.packed.shape[1], weight.n
        p.ext[0], p.ext[1], p.ext[2], p.ext[4] = weight.group_size, ACTIVATIONS[activation], slots, l2_prefetch
        self.lib.emu_prefetchable(weight.packed.data_ptr(), weight.packed.numel())
        launch = QgemmLaunch()
        assert self.lib.qgemm_plan(ctypes.byref(p), ctypes.byref(launch)) == 0
        counters = partial = None
        if launch.workspace_bytes:
            counters = torch.zeros(launch.workspace_bytes // 4, dtype=torch.int32)
            # NaN: a partial slot read before it is written poisons the output.
            rows, cols = self.spec.tile
            partial = torch.full((launch.grid[0] * 2 * rows * cols,), float("nan"))
            p.ptr[6] = partial.data_ptr()
        self.lib.emu_schedule(schedule)
        self.lib.emu_clear_readable()
        rc = self.lib.emu_launch(ctypes.byref(p), counters.data_ptr() if counters is not None else None)
        assert rc == 0, f"emu_launch returned {rc}: {self.lib.emu_error().decode()}"
        if counters is not None:
            assert (counters == 0).all(), "the last CTA of a split tile resets its counter"
        self.last_launch = launch
        return out


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return emulated_kernels(tmp_path_factory.mktemp("qgemm-gemv-emulated"), Emulated)


def _weight(k, n, bits, group_size, zeros, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    groups = k // group_size
    u = torch.randint(0, 2 ** bits, (k, n), generator=g, dtype=torch.uint8)
    scale = (torch.rand(groups, n, generator=g) * 0.02 + 0.005).to(dtype)
    zero = torch.randint(0, 2 ** bits, (groups, n), generator=g, dtype=torch.uint8) if zeros else None
    return IntBWeight.from_int_weight(wq_format.IntWeight(u, scale, zero, bits, group_size, None))


def _check(kernel, m, n, k, group_size, zeros, bias=False, activation="none", schedule=0, seed=0, slots=0,
           l2_prefetch=0):
    dtype = DTYPES[kernel.spec.act]
    weight = _weight(k, n, kernel.spec.bits, group_size, zeros, dtype, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    out = kernel.run(x, weight, weight.scale.to(dtype).contiguous(), b, activation, schedule, slots, l2_prefetch)
    ref = x.double() @ weight.dequantize().double()
    if b is not None:
        ref = ref + b.double()
    ref = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}[activation](ref)
    result = out.double()
    assert not torch.isnan(result).any(), "NaN in output: an element was not written"
    err = ((result - ref).norm() / ref.norm()).item()
    assert err < BOUND[dtype], (kernel.spec.name, m, n, k, group_size, zeros, err)


SPECS = [
    FpAIntBGemvSpec("f16", 4, 1, 2, 2, min_warps_per_sm=16, prefetch=2, rows8=True, stream=True),
    FpAIntBGemvSpec("bf16", 4, 1, 4, 2, rows8=True, stream=True),
    FpAIntBGemvSpec("f16", 8, 1, 2, 2, stream=True),
    FpAIntBGemvSpec("bf16", 8, 1, 2, 1, prefetch=3, stream=True),
    # Codes through the shared-memory ring of bulk copies (sm90): two or three stages, so the producer
    # refills stages the consumers released; one consumer warp, and a 32-column CTA of 8-row tokens.
    FpAIntBGemvSpec("f16", 4, 1, 4, 2, rows8=True, stream=True, bulk_stages=2, arch=90),
    FpAIntBGemvSpec("bf16", 8, 1, 2, 1, stream=True, bulk_stages=3, arch=90),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("group_size, zeros", [(32, True), (64, False), (128, True), (256, False), ("channel", True),
                                               ("channel", False)])
def test_decode_kernel_matches_reference(emulated, spec, group_size, zeros):
    """N = 40 (the last CTA's columns clamped, one 16-column tile half past N), K with a half block
    past the last whole one where the group size allows (group 32/64 and per channel: K = 320),
    M = 1, 3 and 11 (two CTA rows for 8-token CTAs), every scale mode (per weight, per block with
    group 128 and 256, per column), zeros or not."""
    k = 512 if group_size == 256 else 384 if group_size == 128 else 320
    g = k if group_size == "channel" else group_size
    for i, m in enumerate((1, 3, 11)):
        _check(emulated(spec), m, 40, k, g, zeros, schedule=i % 3, seed=m)


def test_smallest_shapes_bias_activation(emulated):
    """N = 8 (one 8-column half tile, the other half clamped), K = 64 (only the half block), bias and
    the activations."""
    for spec in SPECS[:2]:
        for activation in ("none", "relu", "silu", "gelu"):
            _check(emulated(spec), 2, 8, 64, 64, True, bias=True, activation=activation)
        _check(emulated(spec), 16, 8, 128, 32, False, bias=True)


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[3], SPECS[4], SPECS[5]], ids=lambda s: s.name)
@pytest.mark.parametrize("group_size, zeros", [(32, False), (128, True), ("channel", True)])
def test_split_k(emulated, spec, group_size, zeros):
    """Split-K over CTAs (ext[2] > 0): N = 40 (three column tiles with 16-column CTAs, the last part
    past N), K = 2112 (16 whole blocks and a half one for group 32 / per channel; 2048 for group 128:
    up to 2 splits with two warps, 4 with one),
    M = 1 and 11 (two CTA rows): the CTAs of a tile add their partials in order, the last one resets
    the counter; with 1, 2, 5 and 7 CTAs at once (split counts from 1 to the block limit). The bulk
    kernels also run the emulator's schedules 3 and 4 (bulk copies land when issued, warps skewed)."""
    k = 2048 if group_size == 128 else 2112
    g = k if group_size == "channel" else group_size
    kernel = emulated(spec)
    splits = set()
    for slots in (1, 2, 5, 7):
        for m in (1, 11):
            schedule = (slots + 2) % 5 if spec.bulk_stages else slots % 3
            _check(kernel, m, 40, k, g, zeros, schedule=schedule, seed=m + slots, slots=slots)
            launch = kernel.last_launch
            tiles = -(-40 // spec.tile[1]) * -(-m // spec.tile[0])
            splits.add(launch.grid[0] // tiles if launch.workspace_bytes else 1)
    assert max(splits) > 1, splits


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_l2_prefetch_ranges(emulated, spec):
    """The L2 prefetch before the wait (ext[4], bytes per CTA): each CTA's column groups below N ask
    for their codes after the blocks the warps' ring loads first, 16-byte aligned, inside the packed
    weight (the emulator fails a prefetch outside it), at most ext[4] bytes per CTA; with ext[4] past
    the slice, exactly those codes (summed independently here, with the packed layout's 256 bytes per
    column group and 128-row block); split-K CTAs prefetch their own blocks; the output is the reference's."""
    n, k, group_size = 40, 2112, 64  # the last CTA's columns partly past N; 16 whole blocks and a half one
    kernel = emulated(spec)
    rows, cols = spec.tile
    ring = spec.warps_k * (spec.bulk_stages or spec.prefetch)  # blocks the warps (bulk: the stages) load first
    interleave = 4 if spec.bits == 4 else 2
    groups = sum(-(-min(cols, n - n0) // interleave) for n0 in range(0, n, cols))  # column groups below N
    for m in (1, 11):
        whole = -(-m // rows) * groups * max(0, k // 128 - ring) * 256
        assert whole > 0
        check_l2_prefetch_bytes(  # under one 16-byte unit per column group: none
            kernel.lib, lambda nbytes: _check(kernel, m, n, k, group_size, True, seed=m, l2_prefetch=nbytes),  # noqa: B023
            whole, 16 * cols // interleave, label=(m,))
    for slots in (2, 7):  # split-K: each CTA's own blocks past its ring (none when a split is short)
        _check(kernel, 1, n, k, group_size, True, slots=slots, l2_prefetch=1 << 20)
        assert kernel.lib.emu_prefetched() <= whole
