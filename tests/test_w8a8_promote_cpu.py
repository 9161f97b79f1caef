"""The Sm80/Sm75 W8A8 promote family without a GPU: spec checks and names, catalog, heuristic, the
plan's mode and choice checks, rendering, and compiled kernels' host libraries (plan and Params
without the driver)."""
from __future__ import annotations

import ctypes
import json

import pytest
import torch
from conftest import requires_nvcc

import qgemm
import qgemm.w8a8.plan as w8a8_mod
from cutlass_gen.build import build
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8_PROMOTE_DECODE, W8A8_PROMOTE_LARGE, w8a8_promote_spec
from cutlass_gen.render import render
from cutlass_gen.spec import SUPPORTED_TARGETS, spec_from_dict
from cutlass_gen.families.w8a8 import W8A8PromoteSpec, W8A8Sm90Spec
from qgemm import _checks
from qgemm.w8a8 import heuristics
from qgemm._abi import PARAMS_CAPACITY, HostLibrary, QgemmProblem

FAMILY = W8A8PromoteSpec.family
LARGE = dict(arch=80, tile=(128, 128, 64), warp=(64, 32), stages=4, scheme="asymmetric", output="f16")


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(arch=90), "arch must be one of (75, 80) for w8a8_gemm_promote"),
    (dict(tile=(128, 256, 64)), "tile N must be one of (32, 64, 128)"),
    (dict(tile=(128, 128, 48)), "tile K must be one of (32, 64, 128)"),
    (dict(tile=(48, 128, 64)), "tile M must be one of (16, 32, 64, 128, 256)"),
    (dict(tile=(128, 128)), "tile is (M, N, K) and warp is (M, N)"),
    (dict(warp=(64, 24)), "warp (64, 24) must be a multiple of (16, 16)"),
    (dict(warp=(64, 64)), "needs 128 int32 and as many FP32 accumulators per thread; at most 64"),
    (dict(warp=(16, 16)), "gives 64 warps"),
    (dict(stages=3, arch=75), "stages must be one of (2,) on sm75"),
    (dict(stages=7), "stages must be one of (2, 3, 4, 5, 6) on sm80"),
    (dict(stages=6, tile=(128, 128, 128)), "bytes of shared memory; sm80 kernels may use 101376"),
    (dict(arch=75, stages=2, tile=(128, 128, 128)), "bytes of shared memory; sm75 kernels may use 65536"),
    (dict(scheme="per_tensor"), "scheme must be one of ('asymmetric', 'symmetric')"),
    (dict(output="e4m3"), "output must be one of ('f16', 'bf16', 'f32')"),
])
def test_spec_rejects_invalid_configs(kwargs, fragment):
    args = dict(LARGE)
    args.update(kwargs)
    with pytest.raises(ValueError) as exc:
        W8A8PromoteSpec(**args)
    assert fragment in str(exc.value)


def test_symmetric_tile_n_divides_the_weight_block():
    """Symmetric weights have one scale per 128 rows: every tile N of the family divides 128, so the
    kernel reads one weight scale per tile and block (the check stays for a wider future tile N)."""
    for tn in W8A8PromoteSpec.TILE_N:
        spec = W8A8PromoteSpec(80, (64, tn, 64), (16, 16) if tn == 32 else (32, 32), 4, "symmetric", "f16")
        assert W8A8PromoteSpec.WEIGHT_BLOCK_N % spec.tile[1] == 0


def test_block_size_rule():
    """Tile K and block size are powers of two: one divides the other, every block size runs."""
    for tk in W8A8PromoteSpec.TILE_K:
        for bs in W8A8PromoteSpec.BLOCK_SIZES:
            assert bs % tk == 0 or tk % bs == 0
    spec = W8A8PromoteSpec(**LARGE)
    assert all(spec.supports_block_size(bs) for bs in (32, 64, 128, 256))
    assert not spec.supports_block_size(48) and not spec.supports_block_size(512)


def test_names_json_and_smem():
    spec = W8A8PromoteSpec(**LARGE)
    assert spec.name == "qgemm_w8a8_promote_sm80_s8s8_f16_asym_128x128x64_w64x32_s4"
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    sym = W8A8PromoteSpec(75, [16, 128, 64], [16, 32], 2, "symmetric", "bf16")
    assert sym.name == "qgemm_w8a8_promote_sm75_s8s8_bf16_sym_16x128x64_w16x32_s2"
    assert isinstance(sym.tile, tuple) and sym.warps == 4 and sym.accumulators == 16
    # 4 stages of: x 128 x 64, weight 128 x 64, and the vectors of two blocks of 32 (sx, ox, sum(qx)
    # per row; sw, ow, v per column).
    assert spec.smem_bytes == 4 * (128 * 64 * 2 + 2 * 3 * 128 * 4 * 2)
    assert sym.smem_bytes == 2 * (16 * 64 + 128 * 64 + 2 * 16 * 4 + 2 * 16)


def test_catalog():
    sm75, sm80, sm90 = (catalog(sm, FAMILY) for sm in (75, 80, 90))
    assert 0 < len(sm75) <= 4 and 0 < len(sm80) <= 8
    assert {s.arch for s in sm75} == {75} and {s.arch for s in sm80} == {80}
    assert sm90 == sm80  # the sm80 kernels, built for sm_90a: the "Sm80 column" on an H100
    for sm in SUPPORTED_TARGETS:
        specs = catalog(sm, FAMILY)
        assert len({s.name for s in specs}) == len(specs)
        assert all(s.supports_target(sm) for s in specs)
    assert {s.scheme for s in sm80} == {"symmetric", "asymmetric"}


@pytest.mark.parametrize("arch, schemes_outputs", [
    (80, [("symmetric", "f16"), ("asymmetric", "f16"), ("symmetric", "bf16")]),
    (75, [("symmetric", "f16"), ("asymmetric", "f16")]),
])
def test_catalog_covers_the_heuristic(arch, schemes_outputs):
    specs = set(catalog(arch, FAMILY))
    for scheme, output in schemes_outputs:
        for m in (1, 3, 16, 17, 64, 65, 1000, 4096):
            for n, k in ((4096, 4096), (2112, 7168), (28672, 8192), (12, 256)):
                choice = heuristics.w8a8_promote_choice(m, n, k, 128, scheme, output, arch, 132)
                if output == "bf16" and choice.spec.tile[0] == 64:
                    continue  # the middle tile's BF16 kernel is built on first use
                assert choice.spec in specs, (m, n, choice.spec.name)


@pytest.mark.parametrize("m, n, arch, tile, ctas_per_sm, raster_group", [
    (1, 4096, 80, (16, 128, 64), 2, 1),        # 32 tiles for 132 SMs: stream-K
    (16, 28672, 80, (16, 128, 64), 2, 1),      # 224 tiles: a part-empty second wave
    (16, 36864, 80, (16, 128, 64), 0, 1),      # 288 tiles: two waves or more
    (17, 4096, 80, (64, 128, 64), 2, 1),
    (64, 36864, 80, (64, 128, 64), 0, 1),
    (65, 4096, 80, (128, 128, 64), 2, 1),
    (256, 16384, 80, (128, 128, 64), 2, 2),    # 256 tiles
    (4096, 4096, 80, (128, 128, 64), 0, 8),
    (17, 4096, 75, (128, 128, 64), 2, 1),      # no middle tile on Turing
    (1, 4096, 75, (16, 128, 64), 2, 1),
])
def test_heuristic(m, n, arch, tile, ctas_per_sm, raster_group):
    choice = heuristics.w8a8_promote_choice(m, n, 4096, 128, "symmetric", "f16", arch, 132)
    assert (choice.spec.arch, choice.spec.tile, choice.ctas_per_sm, choice.raster_group) == \
        (arch, tile, ctas_per_sm, raster_group)
    assert choice.spec.stages == (2 if arch == 75 else 4)


def test_choice_checks():
    spec = W8A8PromoteSpec(**LARGE)
    with pytest.raises(TypeError, match="spec must be a W8A8PromoteSpec"):
        heuristics.W8A8PromoteChoice(W8A8Sm90Spec((128, 128), 128, "symmetric", "f16"))
    with pytest.raises(ValueError, match="ctas_per_sm must be >= 0"):
        heuristics.W8A8PromoteChoice(spec, -1)
    with pytest.raises(ValueError, match="raster_group an int >= 1"):
        heuristics.W8A8PromoteChoice(spec, 0, 0)
    assert heuristics.w8a8_promote_arch(75) == 75 and heuristics.w8a8_promote_arch(90) == 80


def test_render_names_the_slots():
    for spec, ctype in ((W8A8PromoteSpec(**LARGE), "__half"),
                        (W8A8PromoteSpec(75, (16, 128, 64), (16, 32), 2, "symmetric", "bf16"), "__nv_bfloat16")):
        source = render(spec).source
        assert source.startswith(f"// Generated by qgemm (cutlass_gen) from templates/{spec.template}.")
        assert '#include "qgemm/w8a8/promote_gemm.h"' in source
        assert f"using Out = {ctype};" in source
        assert f"static constexpr int kArch = {spec.arch};" in source
        assert f"static_assert(Gemm::kSmemBytes == {spec.smem_bytes}," in source
        assert ("ptr[11]        v float" in source) == (spec.scheme == "asymmetric")
        assert f"QGEMM_EXPORT_KERNEL({spec.name}, qgemm_kernel::Adapter, " in source
        assert "{{" not in source and "{%" not in source


# --- the plan without a GPU --------------------------------------------------------------------------

def _fake_target(monkeypatch, target):
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(_checks, "target_sm", lambda *args, **kwargs: target)
    monkeypatch.setattr(w8a8_mod, "sm_count", lambda device: 132)


def _weight(scheme="symmetric", n=256, k=512, block_size=128):
    return qgemm.W8A8Weight.from_float(torch.randn(n, k), block_size, scheme=scheme)


@pytest.mark.parametrize("target, arch", [(80, 80), (75, 75)])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
def test_plan_promotes_below_sm90(monkeypatch, target, arch, scheme):
    """Below sm90, "auto" runs the promote kernels for both schemes, every output and activation."""
    _fake_target(monkeypatch, target)
    for out_dtype in (torch.float16, torch.bfloat16, torch.float32):
        plan = qgemm.W8A8GemmPlan(_weight(scheme, block_size=64), activation="silu", out_dtype=out_dtype)
        assert plan.launch_mode == "promote"
        spec = plan.kernel_spec(5)
        assert (spec.family, spec.arch, spec.scheme, spec.tile[0]) == (FAMILY, arch, scheme, 16)
        assert spec.output == {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[out_dtype]
    plan = qgemm.W8A8GemmPlan(_weight(scheme, block_size=64), out_dtype=torch.float16, launch_mode="chained") \
        if scheme == "asymmetric" else None
    if plan is not None:
        assert plan.kernel_spec(5).family == "w8a8_gemm"  # the reference path stays reachable


def test_plan_on_sm90_promotes_only_misaligned_n(monkeypatch):
    _fake_target(monkeypatch, 90)
    assert qgemm.W8A8GemmPlan(_weight(n=256)).launch_mode == "sm90"
    plan = qgemm.W8A8GemmPlan(_weight(n=12))  # 12 FP16: 24-byte rows
    assert plan.launch_mode == "promote" and plan.kernel_spec(4096).arch == 80
    forced = qgemm.W8A8GemmPlan(_weight(n=256), launch_mode="promote")
    assert forced.kernel_spec(1).family == FAMILY
    # The asymmetric weight's v = sw sum(qw) + bs ow is made once, for the promote kernels too.
    w = _weight("asymmetric", n=12)
    plan = qgemm.W8A8GemmPlan(w)
    assert plan._weight_v is not None
    torch.testing.assert_close(plan._weight_v, w.scale * w.qsum + 128 * w.offset)


def test_plan_rejects_a_foreign_choice(monkeypatch):
    _fake_target(monkeypatch, 80)
    plan = qgemm.W8A8GemmPlan(_weight(), out_dtype=torch.bfloat16)
    xq = w8a8_mod.QuantizedActivations(torch.zeros(4, 512, dtype=torch.int8), torch.ones(4, 4), None, None, 128)
    with pytest.raises(TypeError, match="choice must be a qgemm.heuristics.W8A8PromoteChoice"):
        plan.gemm(xq, choice=heuristics.W8A8Sm90Choice(W8A8Sm90Spec((128, 128), 128, "symmetric", "bf16")))
    wrong = heuristics.W8A8PromoteChoice(w8a8_promote_spec(W8A8_PROMOTE_LARGE, 80, "symmetric", "f16"))
    with pytest.raises(ValueError, match=r"choice.spec must have \(scheme, output\) = \('symmetric', 'bf16'\)"):
        plan.gemm(xq, choice=wrong)
    _fake_target(monkeypatch, 75)
    plan = qgemm.W8A8GemmPlan(_weight(), out_dtype=torch.float16)
    newer = heuristics.W8A8PromoteChoice(w8a8_promote_spec(W8A8_PROMOTE_DECODE, 80, "symmetric", "f16"))
    with pytest.raises(ValueError, match="an arch of at most 75 for this plan, got .* on sm80"):
        plan.gemm(xq, choice=newer)


# --- compiled host libraries (no driver needed) --------------------------------------------------------

COMPILED = [W8A8PromoteSpec(80, (16, 128, 64), (16, 32), 4, "asymmetric", "f16"),
            W8A8PromoteSpec(75, (16, 128, 64), (16, 32), 2, "symmetric", "f16")]


@pytest.fixture(scope="module")
def hosts(kernel_cache):
    # catalog kernels of sm80 and sm75: CI's `qgemm build` has them in the run's cache already
    return {spec.arch: HostLibrary(str(build(spec, spec.arch, kernel_cache).so_path)) for spec in COMPILED}


def _problem(m, n, k, block_size=128, ctas=0):
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ext[0], p.ext[1], p.ext[2], p.ext[3] = block_size, 0, ctas, 1
    p.ld[0] = p.ld[1] = k
    p.ld[3] = n
    return p


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", [80, 75])
def test_host_library_plans(hosts, arch):
    host = hosts[arch]
    spec = next(s for s in COMPILED if s.arch == arch)
    assert spec_from_dict(json.loads(host.spec_json)) == spec
    # One CTA per output tile: 1 x 32 tiles, no workspace.
    status, launch = host.plan(_problem(3, 4096, 4096))
    assert status == 0, host.status_string(status)
    assert (launch.grid[0], launch.block[0], launch.workspace_bytes) == (32, 128, 0)
    assert launch.smem_bytes == spec.smem_bytes and launch.params_bytes <= PARAMS_CAPACITY
    # Stream-K over 100 CTAs: 32 tiles x 32 units of 128 K = 1024 iterations, 11 per CTA (94 CTAs
    # cover them); tiles are split, so the 32 tile counters are needed.
    status, launch = host.plan(_problem(3, 4096, 4096, ctas=100))
    assert status == 0 and launch.grid[0] == 94 and launch.workspace_bytes == 32 * 4
    # Blocks of 256 are units of 256 K: 16 per tile; 16 per CTA splits no tile.
    status, launch = host.plan(_problem(3, 4096, 4096, block_size=256, ctas=32))
    assert status == 0 and launch.grid[0] == 32 and launch.workspace_bytes == 0


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("change", [
    lambda p: setattr(p, "k", 96 + 128),           # not a multiple of the block size
    lambda p: p.ext.__setitem__(0, 48),            # not a block size
    lambda p: p.ext.__setitem__(0, 512),
    lambda p: setattr(p, "n", 258),                # N not a multiple of 4
    lambda p: p.ext.__setitem__(1, 2),             # no such activation
    lambda p: p.ld.__setitem__(0, 520),            # x rows not 16-byte aligned
    lambda p: setattr(p, "m", 0),
])
def test_host_library_rejects(hosts, change):
    for host in hosts.values():
        p = _problem(17, 256, 512)
        change(p)
        status, _ = host.plan(p)
        assert host.status_string(status) == "problem not supported by this kernel"


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_make_params_needs_every_pointer(hosts):
    """Operands and vectors of the scheme, and the partial buffer and counters of a split launch."""
    params = ctypes.create_string_buffer(PARAMS_CAPACITY)
    for spec in COMPILED:
        host = hosts[spec.arch]
        slots = (0, 1, 2, 5, 10) + ((3, 4, 6, 11) if spec.scheme == "asymmetric" else ())
        p = _problem(17, 256, 512)
        for slot in slots:
            p.ptr[slot] = 0x1000 * (slot + 1)
        assert host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY) == 0
        for slot in slots:
            saved, p.ptr[slot] = p.ptr[slot], None
            status = host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY)
            assert host.status_string(status) == "problem not supported by this kernel", slot
            p.ptr[slot] = saved
        p.ext[2] = 6  # 4 tiles x 4 units over 6 CTAs (3 iterations each): split tiles
        assert host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY) != 0
        p.ptr[9] = 0x9000
        assert host.make_params_fn(ctypes.byref(p), None, params, PARAMS_CAPACITY) != 0  # no counters
        assert host.make_params_fn(ctypes.byref(p), 0xA000, params, PARAMS_CAPACITY) == 0


def test_plan_rejects_misaligned_operands(monkeypatch):
    """cp.async copies 16 bytes: a contiguous view that starts off a 16-byte boundary is named before
    anything launches."""
    _fake_target(monkeypatch, 80)
    n, k = 256, 512
    base = torch.zeros(n * k + 8, dtype=torch.int8)
    shifted = base[8:].view(n, k)
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_block_int8(shifted, torch.ones(2, 4)))
    xq = w8a8_mod.QuantizedActivations(torch.zeros(4, k, dtype=torch.int8), torch.ones(4, 4), None, None, 128)
    with pytest.raises(ValueError, match="weight.qweight must start at a 16-byte aligned address"):
        plan.gemm(xq)
    plan = qgemm.W8A8GemmPlan(_weight())
    x_base = torch.zeros(4 * k + 4, dtype=torch.int8)
    xq = w8a8_mod.QuantizedActivations(x_base[4:].view(4, k), torch.ones(4, 4), None, None, 128)
    with pytest.raises(ValueError, match="xq.q must start at a 16-byte aligned address"):
        plan.gemm(xq)
