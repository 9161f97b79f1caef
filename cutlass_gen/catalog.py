"""Default kernel catalogs: what `qgemm build --sm N` compiles for a target SM.

The runtime picks among these by shape (qgemm/heuristics.py); a kernel outside
the catalog can still be built on first use.
"""
from __future__ import annotations

from .specs import (
    SUPPORTED_TARGETS,
    ActQuantSpec,
    Fp8ActQuantSpec,
    Fp8BlockwiseGemmSpec,
    FpAIntBDequantSpec,
    FpAIntBGemvSpec,
    KernelSpec,
    W8A8GemmSpec,
)

# (tile, warp) pairs: a large tile for large M, a small one for parallelism at
# small M, and a 32-row tile for decode-sized M.
_W8A8_SM75_TILES = [
    ((128, 128, 32), (64, 64, 32)),
    ((64, 64, 32), (32, 32, 32)),
    ((32, 128, 32), (32, 64, 32)),
]
_W8A8_SM80_TILES = [
    ((128, 128, 64), (64, 64, 64), 3),
    ((64, 64, 64), (32, 32, 64), 4),
    ((32, 128, 64), (32, 32, 64), 4),
]


def _w8a8(target_sm: int) -> list[KernelSpec]:
    specs: list[KernelSpec] = []
    for output in W8A8GemmSpec.OUTPUTS:
        # Sm75 kernels stay in every catalog: they are the ones with a tile K of 32,
        # so they serve block size 32 on later SMs too.
        specs += [W8A8GemmSpec(75, tile, warp, 2, output) for tile, warp in _W8A8_SM75_TILES]
        if target_sm >= 80:
            specs += [W8A8GemmSpec(80, tile, warp, stages, output) for tile, warp, stages in _W8A8_SM80_TILES]
    return specs


def _act_quant(target_sm: int) -> list[KernelSpec]:
    return [ActQuantSpec(dtype) for dtype in ActQuantSpec.INPUTS]


# FP8 blockwise (sm90 only). Decode-sized M runs swapped (the weight's N on the kernel's M,
# tokens on a narrow tile N) so a batch of 16 tokens is not padded to 64 rows; prefill-sized M
# runs unswapped on 64- and 128-row tiles. All persistent: stream-K measured slower on every
# benchmark shape (qgemm/heuristics.py), and the spec still offers it.
# (tile, cluster, schedule, scheduler, swap_ab)
_FP8_CONFIGS = [
    ((128, 16), (1, 1), "cooperative", "persistent", True),
    ((128, 32), (1, 1), "cooperative", "persistent", True),
    ((128, 64), (1, 1), "cooperative", "persistent", True),
    ((64, 128), (1, 1), "pingpong", "persistent", False),
    ((128, 128), (1, 2), "cooperative", "persistent", False),
]


def _fp8_gemm(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [
        Fp8BlockwiseGemmSpec(tile, cluster, schedule, swap_ab, output, scheduler=scheduler)
        for output in Fp8BlockwiseGemmSpec.OUTPUTS
        for tile, cluster, schedule, scheduler, swap_ab in _FP8_CONFIGS
    ]


def _fp8_act_quant(target_sm: int) -> list[KernelSpec]:
    return [Fp8ActQuantSpec(dtype) for dtype in Fp8ActQuantSpec.INPUTS] if target_sm >= 90 else []


# FpA x IntB: every small-M configuration qgemm/heuristics.py fpaintb_choice can pick, as
# FpAIntBGemvSpec keyword arguments, for each activation type and weight width (Sm75: FP16 only).
_FPAINTB_GEMV_CONFIGS = [
    dict(m_tiles=1, n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),   # decode, up to 8 rows
    dict(m_tiles=1, n_tiles=4, warps_k=4),                                    # 9 to 16 rows
] + [dict(m_tiles=2, n_tiles=4, warps_k=warps_k) for warps_k in (1, 2, 4)]   # 17 to 64 rows


def _fpaintb_arch(target_sm: int) -> tuple[int, tuple]:
    return (75, ("f16",)) if target_sm == 75 else (80, ("f16", "bf16"))


def _fpaintb_gemv(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBGemvSpec(act, bits, arch=arch, **config)
            for act in acts for bits in (4, 8) for config in _FPAINTB_GEMV_CONFIGS]


def _fpaintb_dequant(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBDequantSpec(act, bits, arch) for act in acts for bits in (4, 8)]


_FAMILY_CATALOGS = {
    W8A8GemmSpec.family: _w8a8,
    ActQuantSpec.family: _act_quant,
    Fp8BlockwiseGemmSpec.family: _fp8_gemm,
    Fp8ActQuantSpec.family: _fp8_act_quant,
    FpAIntBGemvSpec.family: _fpaintb_gemv,
    FpAIntBDequantSpec.family: _fpaintb_dequant,
}


def families() -> list[str]:
    return sorted(_FAMILY_CATALOGS)


def catalog(target_sm: int, family: str | None = None) -> list[KernelSpec]:
    """The kernels built by default for `target_sm`, optionally one family's only."""
    if target_sm not in SUPPORTED_TARGETS:
        raise ValueError(f"sm must be one of {SUPPORTED_TARGETS}, got {target_sm!r}")
    if family is not None and family not in _FAMILY_CATALOGS:
        raise ValueError(f"family must be one of {families()}, got {family!r}")
    names = [family] if family else families()
    return [spec for f in names for spec in _FAMILY_CATALOGS[f](target_sm)]
