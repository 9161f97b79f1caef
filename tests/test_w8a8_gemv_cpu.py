"""The fused W8A8 decode kernel on the CPU: its spec, catalog, rendering, heuristic, and an nvcc
build for sm_90a (registers and spills from ptxas, no local memory). Its arithmetic runs in
tests/test_w8a8_gemv_emulated.py, on the GPU in tests/test_w8a8_gemv_gpu.py."""
from __future__ import annotations

import re
import subprocess

import pytest
import torch

import qgemm

from conftest import requires_nvcc
from cutlass_gen.build import build
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render
from cutlass_gen.families.w8a8 import W8A8GemvSpec
from cutlass_gen.spec import spec_from_dict
from cutlass_gen.toolchain import toolchain
from qgemm.w8a8 import heuristics

SHAPES = [(4096, 4096), (12288, 4096), (8192, 28672), (28672, 8192), (2112, 7168), (7168, 2048)]


@pytest.mark.parametrize("kwargs, message", [
    (dict(input="f64"), "input must be one of"),
    (dict(scheme="sym"), "scheme must be one of"),
    (dict(output="e4m3"), "output must be one of"),
    (dict(warps=3), "warps must be one of"),
    (dict(n_tiles=8), "n_tiles must be one of"),
    (dict(depth=1), "depth must be one of"),
    (dict(min_ctas=0), "min_ctas must be one of"),
    (dict(arch=75), "arch must be one of"),
    (dict(max_slice_k=3072), "max_slice_k must be one of"),
    (dict(cluster=8), "cluster > 0 .* needs arch 90"),
    (dict(arch=90), "cluster > 0 .* needs arch 90"),
    (dict(cluster=3, arch=90), "cluster must be one of"),
])
def test_spec_rejects_bad_fields_naming_them(kwargs, message):
    args = dict(input="f16", scheme="asymmetric", output="f16") | kwargs
    with pytest.raises(ValueError, match=message):
        W8A8GemvSpec(**args)


def test_spec_name_round_trip_and_geometry():
    spec = W8A8GemvSpec("bf16", "symmetric", "f32", warps=4, n_tiles=4, depth=3, min_ctas=3)
    assert spec.name == "qgemm_w8a8_gemv_sm80_bf16_s8_f32_sym_w4n4d3c3_k2048b16"
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec.tile_n == 128 and spec.supports_target(80) and spec.supports_target(90) and not spec.supports_target(75)
    # x codes 16 rows x (slice + 64), row vectors and column vectors per block.
    assert spec.slice_smem_bytes(2, 128) == 16 * 320 + 2 * 16 * 4 + 2 * (128 // 4) * 4
    asym = W8A8GemvSpec("f16", "asymmetric", "f16", warps=4, n_tiles=4)
    assert asym.slice_smem_bytes(2, 128) == 16 * 320 + 2 * 3 * 16 * 4 + 2 * 3 * 128 * 4


def test_catalog_sm80_and_sm90_not_sm75():
    specs = catalog(90, "w8a8_gemv")
    sm80 = catalog(80, "w8a8_gemv")
    assert catalog(75, "w8a8_gemv") == []
    assert set(sm80) < set(specs) and all(s.cluster for s in set(specs) - set(sm80))
    assert all(s.arch == 80 and not s.cluster for s in sm80)
    assert {s.scheme for s in specs} == {"asymmetric", "symmetric"}
    assert {(s.input, s.output) for s in specs} == {("f16", "f16"), ("bf16", "bf16")}
    # Every variant the heuristic can name is built (the cluster ones for sm90).
    for target, names in ((80, {s.name for s in sm80}), (90, {s.name for s in specs})):
        for variant, config in heuristics.W8A8_GEMV_VARIANTS.items():
            if config.get("cluster") and target < 90:
                with pytest.raises(ValueError, match="needs an sm90 GPU"):
                    heuristics.w8a8_gemv_choice(1, 4096, 4096, 128, "f16", "symmetric", "f16", 132, variant=variant,
                                                target_sm=target)
                continue
            for scheme in ("asymmetric", "symmetric"):
                c = heuristics.w8a8_gemv_choice(1, 4096, 4096, 128, "f16", scheme, "f16", 132, variant=variant,
                                                target_sm=target)
                assert c.spec.name in names


def test_cluster_variants_split_k_in_eight():
    """A cluster variant takes K in at most 8 slices that fit a CTA; the heuristic takes one when
    W8A8_GEMV_PREFER_CLUSTER says so (the default, by measurement), on sm90, and where K fits: the
    narrow or the wide one, whichever launches a CTA count nearer the SM count."""
    def choice(n, k, **kw):
        return heuristics.w8a8_gemv_choice(1, n, k, 128, "f16", "symmetric", "f16", 132, **kw)
    c = choice(2112, 7168, variant="narrow_cl8", target_sm=90)
    assert c.spec.cluster == 8 and c.slice_blocks == 7
    with pytest.raises(ValueError, match="does not fit"):
        choice(64, 8 * 33 * 128, variant="narrow_cl8", target_sm=90)
    assert heuristics.W8A8_GEMV_PREFER_CLUSTER
    # The sweep's three small layers: 17 narrow tiles x 8 = 136 CTAs; 16 wide x 8 = 128; 28 wide x 8 = 224
    # (against 56 narrow x 8 = 448).
    assert choice(2112, 7168, target_sm=90).spec == W8A8GemvSpec(
        "f16", "symmetric", "f16", **heuristics.W8A8_GEMV_VARIANTS["narrow_cl8"])
    for n, k, slice_blocks in ((4096, 4096, 4), (7168, 2048, 2)):
        c = choice(n, k, target_sm=90)
        assert c.spec == W8A8GemvSpec("f16", "symmetric", "f16", **heuristics.W8A8_GEMV_VARIANTS["wide_cl8"])
        assert c.slice_blocks == slice_blocks
    assert not choice(2112, 7168, target_sm=80).spec.cluster
    assert not choice(64, 8 * 33 * 128, target_sm=90).spec.cluster   # K does not fit 8 slices
    heuristics.W8A8_GEMV_PREFER_CLUSTER = False
    try:
        assert not choice(2112, 7168, target_sm=90).spec.cluster
    finally:
        heuristics.W8A8_GEMV_PREFER_CLUSTER = True


def test_render_fills_the_template():
    spec = W8A8GemvSpec("f16", "asymmetric", "bf16")
    source = render(spec).source
    assert spec.name in source and "{{" not in source and "{%" not in source
    assert "using Out = __nv_bfloat16;" in source and "constexpr bool kAsymmetric = true;" in source
    sym = render(W8A8GemvSpec("f32", "symmetric", "f16")).source
    assert "constexpr bool kAsymmetric = false;" in sym and "weight_scale_inv" in sym


def test_heuristic_routes_decode_by_data():
    assert heuristics.w8a8_gemv_applies(1, 90) and heuristics.w8a8_gemv_applies(heuristics.W8A8_GEMV_MAX_M, 80)
    assert not heuristics.w8a8_gemv_applies(heuristics.W8A8_GEMV_MAX_M + 1, 90)
    assert not heuristics.w8a8_gemv_applies(1, 75)
    # sm90, measured (heuristics.W8A8_GEMV_SM90_*): small weights at M <= 4; large ones and M > 4 keep
    # act_quant + the WGMMA kernel
    assert heuristics.w8a8_gemv_applies(1, 90, 2112, 7168) and heuristics.w8a8_gemv_applies(4, 90, 4096, 4096)
    assert not heuristics.w8a8_gemv_applies(1, 90, 12288, 4096)
    assert not heuristics.w8a8_gemv_applies(5, 90, 4096, 4096)
    assert heuristics.w8a8_gemv_applies(16, 80, 28672, 8192)
    assert heuristics.W8A8_GEMV_MAX_M <= W8A8GemvSpec.MAX_M


@pytest.mark.parametrize("block_size", [32, 64, 128, 256])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_slices_fit_and_cover_k(m, block_size):
    """On the benchmark shapes (and K at one block): every slice fits the CTA's shared memory, no
    split is empty, and the grid is about W8A8_GEMV_CTAS_PER_SM CTAs per SM or more."""
    for n, k in SHAPES + [(4, block_size), (36, 3 * block_size)]:
        for scheme in ("asymmetric", "symmetric"):
            c = heuristics.w8a8_gemv_choice(m, n, k, block_size, "f16", scheme, "f16", 132)
            blocks = k // block_size
            assert 1 <= c.slice_blocks <= c.spec.max_slice_blocks_for(block_size)
            splits = -(-blocks // c.slice_blocks)
            assert (splits - 1) * c.slice_blocks < blocks  # the last split has a block
            if blocks >= 64:
                assert -(-n // c.spec.tile_n) * splits >= heuristics.W8A8_GEMV_CTAS_PER_SM * 132 * 0.8


def test_choice_checks_its_arguments():
    with pytest.raises(ValueError, match="variant must be one of"):
        heuristics.w8a8_gemv_choice(1, 64, 128, 128, "f16", "symmetric", "f16", 132, variant="fast")
    with pytest.raises(TypeError, match="spec must be a W8A8GemvSpec"):
        heuristics.W8A8GemvChoice("spec", 1)
    spec = W8A8GemvSpec("f16", "symmetric", "f16")
    with pytest.raises(ValueError, match="slice_blocks must be an int >= 1"):
        heuristics.W8A8GemvChoice(spec, 0)


@requires_nvcc
@pytest.mark.nvcc
def test_builds_for_sm90(kernel_cache):
    """One catalog variant through the build driver (sm_90a; in CI, where `qgemm build --sm 90` built it
    into the run's cache, the artifact that build left)."""
    art = build(W8A8GemvSpec("f16", "symmetric", "f16", warps=8, n_tiles=4, depth=2, min_ctas=2), 90, kernel_cache)
    assert art.fatbin_path.is_file() and art.so_path.is_file()


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("config", [dict(warps=8, n_tiles=2, depth=4, min_ctas=2), dict(warps=8, n_tiles=4, depth=2, min_ctas=2),
                                    heuristics.W8A8_GEMV_VARIANTS["narrow_cl8"]],
                         ids=lambda c: "w{warps}n{n_tiles}d{depth}c{min_ctas}".format(**c) + ("_cl" if c.get("cluster") else ""))
def test_ptxas_no_spills(config, tmp_path):
    """ptxas -v on the device code for sm_90a (asymmetric: the most registers): no spill, no stack,
    and the register cap of min_ctas CTAs per SM holds."""
    spec = W8A8GemvSpec("f16", "asymmetric", "f16", **config)
    source = tmp_path / "k.cu"
    source.write_text(render(spec).source)
    tc = toolchain()
    includes = [f for f in tc.flags(90) if f.startswith("-I")]
    result = subprocess.run([str(tc.nvcc), "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                             "-arch=sm_90a", "-cubin", "-Xptxas", "-v", *includes, "-o", str(tmp_path / "k.cubin"),
                             str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log, log
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert registers * 32 * spec.warps * spec.min_ctas <= 65536, registers


def test_prebuild_names_the_kernels_plan_x_runs(monkeypatch):
    """qgemm.prebuild of an auto plan on sm90 collects the fused decode kernel where plan(x) takes it
    (small weight, M <= 4) and act_quant + the Sm90 GEMM elsewhere."""
    from qgemm import _checks
    from qgemm.w8a8 import plan as w8a8_plan
    from qgemm.prebuild import _plan_specs
    monkeypatch.setattr(_checks, "cuda_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(w8a8_plan, "sm_count", lambda device: 132)
    weight = qgemm.W8A8Weight.from_float(torch.randn(2112, 1024), 128, scheme="symmetric")
    plan = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16)
    specs = _plan_specs(plan, (1, 4, 16))
    families = [s.family for s in specs]
    assert families == ["w8a8_gemv", "w8a8_gemv", "act_quant", "w8a8_gemm_sm90"], families
    assert specs[0].input == specs[0].output == "f16" and specs[2].symmetric
