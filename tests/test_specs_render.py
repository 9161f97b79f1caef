"""Kernel specs, names, catalogs and template rendering (no nvcc, no GPU)."""
from __future__ import annotations

import json

import jinja2
import pytest

from cutlass_gen.catalog import catalog, families
from cutlass_gen.paths import templates_dir
from cutlass_gen.render import _cpp_string, _environment, render
from cutlass_gen.spec import SUPPORTED_TARGETS, spec_from_dict
from cutlass_gen.families.w8a8 import ActQuantSpec, W8A8GemmSpec, W8A8PromoteSpec


def all_catalog_specs():
    return [spec for sm in SUPPORTED_TARGETS for spec in catalog(sm)]


# --- validation -------------------------------------------------------------------------------

# (constructor args, fragment the ValueError must contain)
BAD_W8A8 = [
    pytest.param((70, (128, 128, 32), (64, 64, 32), 2, "f16"), "arch must be one of [75, 80]", id="unknown-arch"),
    pytest.param((80, (128, 128, 32), (64, 64, 32), 3, "f16"), "tile K must be one of (64,) on sm80",
                 id="tile-k-for-arch"),
    pytest.param((75, (128, 128, 128), (64, 64, 128), 2, "f16"), "tile K must be one of (32, 64) on sm75",
                 id="tile-k-sm75"),
    pytest.param((75, (128, 128, 32), (48, 64, 32), 2, "f16"), "must divide tile", id="warp-not-dividing-tile"),
    pytest.param((75, (128, 128, 32), (64, 64, 16), 2, "f16"), "equal it in K", id="warp-k-not-tile-k"),
    pytest.param((80, (64, 64, 64), (8, 64, 64), 3, "f16"), "instruction (16, 8, 32) must divide warp",
                 id="instruction-not-dividing-warp"),
    pytest.param((75, (128, 128, 32), (32, 32, 32), 2, "f16"), "gives 16 warps", id="too-many-warps"),
    pytest.param((75, (128, 128, 32), (64, 64, 32), 3, "f16"), "stages must be one of (2,) on sm75",
                 id="stages-sm75"),
    pytest.param((80, (128, 128, 64), (64, 64, 64), 2, "f16"), "stages must be one of (3, 4, 5) on sm80",
                 id="stages-sm80"),
    pytest.param((75, (128, 128, 32), (64, 64, 32), 2, "bf16"), "output must be one of ('f32', 'f16')",
                 id="bad-output"),
    pytest.param((75, (32, 32, 32), (16, 16, 32), 2, "f16"), "16-byte loads", id="tile-too-small-for-warps"),
    pytest.param((75, (128, 128), (64, 64, 32), 2, "f16"), "tile must be three positive integers",
                 id="tile-not-3d"),
    pytest.param((75, (128, 128, 32), (0, 64, 32), 2, "f16"), "warp must be three positive integers",
                 id="warp-zero"),
]


@pytest.mark.parametrize("args, message", BAD_W8A8)
def test_w8a8_spec_rejects_invalid_configs_with_helpful_message(args, message):
    """Every invalid configuration fails at construction (not in nvcc) and says why."""
    with pytest.raises(ValueError) as exc:
        W8A8GemmSpec(*args)
    assert message in str(exc.value)


def test_w8a8_spec_rejects_bad_swizzle():
    with pytest.raises(ValueError, match="swizzle must be 1, 2, 4 or 8"):
        W8A8GemmSpec(75, (128, 128, 32), (64, 64, 32), 2, "f16", swizzle=3)


def test_act_quant_spec_rejects_bad_input_and_arch():
    with pytest.raises(ValueError, match=r"input must be one of \('f32', 'f16', 'bf16'\), got 'f64'"):
        ActQuantSpec("f64")
    with pytest.raises(ValueError, match="arch must be 75 for act_quant"):
        ActQuantSpec("f32", arch=80)


def test_spec_normalizes_shapes_to_tuples():
    """Specs are dict keys in the runtime: a list-built spec must equal and hash like a tuple-built one."""
    a = W8A8GemmSpec(75, [128, 128, 32], [64, 64, 32], 2, "f16")
    b = W8A8GemmSpec(75, (128, 128, 32), (64, 64, 32), 2, "f16")
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.tile, tuple) and isinstance(a.warp, tuple)


# --- names ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, name", [
    (W8A8GemmSpec(75, (128, 128, 32), (64, 64, 32), 2, "f16"),
     "qgemm_w8a8_gemm_sm75_s8s8_f16_128x128x32_w64x64x32_s2_sw1"),
    (W8A8GemmSpec(80, (64, 64, 64), (32, 32, 64), 4, "f32", swizzle=2),
     "qgemm_w8a8_gemm_sm80_s8s8_f32_64x64x64_w32x32x64_s4_sw2"),
    (ActQuantSpec("bf16"), "qgemm_act_quant_sm75_bf16_s8"),
    (W8A8PromoteSpec(80, (128, 128, 64), (64, 32), 4, "symmetric", "bf16"),
     "qgemm_w8a8_promote_sm80_s8s8_bf16_sym_128x128x64_w64x32_s4"),
])
def test_names_are_stable(spec, name):
    """Names key the build cache, the generated/ files and the fatbin entry: they must not drift."""
    assert spec.name == name


@pytest.mark.parametrize("sm", SUPPORTED_TARGETS)
def test_catalog_names_unique(sm):
    names = [s.name for s in catalog(sm)]
    assert len(names) == len(set(names))


def test_names_identify_specs_across_catalogs():
    """One name never stands for two different specs, whichever catalog it comes from."""
    by_name = {}
    for spec in all_catalog_specs():
        assert by_name.setdefault(spec.name, spec) == spec


@pytest.mark.parametrize("spec", sorted(set(all_catalog_specs()), key=lambda s: s.name), ids=lambda s: s.name)
def test_spec_dict_and_json_round_trip(spec):
    """spec_from_dict rebuilds the spec from to_dict() and from the JSON embedded in kernels."""
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec_from_dict(json.loads(spec.to_json())) == spec
    assert spec.to_dict()["family"] == spec.family


def test_spec_from_dict_rejects_unknown_family():
    with pytest.raises(ValueError, match="family must be one of"):
        spec_from_dict({"family": "conv2d", "arch": 75})
    with pytest.raises(ValueError, match="family must be one of"):
        spec_from_dict({"input": "f32"})


# --- catalog -------------------------------------------------------------------------------------

def test_catalog_rejects_unsupported_sm_and_family():
    with pytest.raises(ValueError, match=r"sm must be one of \(75, 80, 90\), got 70"):
        catalog(70)
    with pytest.raises(ValueError, match="family must be one of"):
        catalog(75, "conv2d")


@pytest.mark.parametrize("sm", SUPPORTED_TARGETS)
def test_catalog_specs_support_their_target(sm):
    specs = catalog(sm)
    assert specs
    assert all(s.supports_target(sm) for s in specs)
    sm90_only = {"fp8_blockwise_gemm", "fp8_act_quant", "conv2d_int8_sm90", "w8a8_gemm_sm90", "fpaintb_gemm_sm90"}  # wgmma/TMA kernels, the FP8 quantizer
    expected = set(families()) if sm == 90 else set(families()) - sm90_only
    if sm < 80:
        expected -= {"w8a8_gemv"}  # mma.sync m16n8k32: sm80 and later
    assert {s.family for s in specs} == expected


def test_promote_catalog_per_target():
    """w8a8_gemm_promote: Turing kernels for sm75; the sm80 ones for sm80 and, built for sm_90a, sm90."""
    assert {s.arch for s in catalog(75, "w8a8_gemm_promote")} == {75}
    assert {s.arch for s in catalog(80, "w8a8_gemm_promote")} == {80}
    assert catalog(90, "w8a8_gemm_promote") == catalog(80, "w8a8_gemm_promote")


def test_catalog_family_filter_and_arch_mix():
    """sm75 gets only Turing GEMMs; sm80/sm90 keep the sm75 ones (tile K 32 serves block size 32)."""
    assert all(s.family == "act_quant" for s in catalog(75, "act_quant"))
    assert {s.arch for s in catalog(75, "w8a8_gemm")} == {75}
    for sm in (80, 90):
        gemms = catalog(sm, "w8a8_gemm")
        assert {s.arch for s in gemms} == {75, 80}
        assert any(s.supports_block_size(32) for s in gemms)


# --- rendering -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    W8A8GemmSpec(75, (128, 128, 32), (64, 64, 32), 2, "f16"),
    W8A8GemmSpec(80, (64, 64, 64), (32, 32, 64), 4, "f32", swizzle=2),
    ActQuantSpec("f16"),
    W8A8PromoteSpec(75, (16, 128, 64), (16, 32), 2, "asymmetric", "f32"),
], ids=lambda s: s.name)
def test_render_output(spec):
    """The source names its template and spec, exports the kernel under its name, and is fully expanded."""
    source = render(spec).source
    assert source.startswith(f"// Generated by qgemm (cutlass_gen) from templates/{spec.template}.")
    assert f"// kernel: {spec.name}\n" in source
    assert f"// spec:   {spec!r}\n" in source
    assert f"QGEMM_EXPORT_KERNEL({spec.name}, qgemm_kernel::Adapter, {json.dumps(spec.to_json())})" in source
    assert "{{" not in source and "{%" not in source and "{#" not in source
    assert render(spec).filename == f"{spec.name}.cu"


def test_render_substitutes_spec_fields():
    """The C++ gets the spec's shapes, arch, stages, swizzle and output type."""
    spec = W8A8GemmSpec(80, (64, 64, 64), (32, 32, 64), 4, "f32", swizzle=2)
    source = render(spec).source
    assert "GemmShape<64, 64, 64>;" in source
    assert "GemmShape<32, 32, 64>;" in source
    assert "GemmShape<16, 8, 32>;" in source
    assert "cutlass::arch::Sm80," in source
    assert "GemmIdentityThreadblockSwizzle<2>" in source
    assert "    4, /*SplitKSerial=*/true" in source
    assert "using ElementOutput = float;" in source
    assert "using ElementInput = cutlass::bfloat16_t;" in render(ActQuantSpec("bf16")).source


def test_strict_undefined_fails_loudly():
    """A template naming a missing variable or spec field must raise, not emit empty C++."""
    env = _environment(str(templates_dir()))
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ nope }}").render()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ spec.no_such_field }}").render(spec=ActQuantSpec("f32"))


def test_cpp_string_filter():
    assert _cpp_string('a "b"\\') == '"a \\"b\\"\\\\"'
    with pytest.raises(ValueError, match="ASCII"):
        _cpp_string("caf\u00e9")
