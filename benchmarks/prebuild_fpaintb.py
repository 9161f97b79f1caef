"""Build, in parallel, the FpA x IntB kernels of the catalog and those outside it that the GPU
tests use (otherwise each would be built on first use, one at a time). `bench_fpaintb.py --sweep`
builds its own.

    python benchmarks/prebuild_fpaintb.py [-j 16]
"""
from __future__ import annotations

import argparse

from cutlass_gen.build import build_many
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec


def test_specs() -> list:
    """The extra kernels of tests/test_fpaintb_gpu.py and tests/test_conv_fpaintb_gpu.py: small-M
    variants and the arch-75 GEMMs and convolutions."""
    specs = list(catalog(75, "fpaintb_gemm")) + list(catalog(75, "fpaintb_conv"))
    for bits in (4, 8):
        specs += [FpAIntBGemvSpec("f16", bits, 1, 2, 4, arch=75), FpAIntBGemvSpec("f16", bits, 2, 1, 2, arch=75)]
        for act in ("f16", "bf16"):
            specs += [FpAIntBGemvSpec(act, bits, 1, 1, w) for w in (1, 2, 8)]
            specs += [FpAIntBGemvSpec(act, bits, 1, 2, 8, min_warps_per_sm=16, prefetch=pf, rows8=r8)
                      for pf, r8 in ((2, True), (3, True), (2, False))]
    return specs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=16)
    ap.add_argument("--sm", type=int, default=90)
    args = ap.parse_args()
    families = ("fpaintb_gemv", "fpaintb_gemm", "fpaintb_dequant", "fpaintb_conv")
    specs = {s for f in families for s in catalog(args.sm, f)} | set(test_specs())
    build_many(sorted(specs, key=lambda s: s.name), args.sm, jobs=args.j, progress=lambda line: None)
    print(f"prebuilt {len(specs)} FpA x IntB kernels for sm{args.sm}")


if __name__ == "__main__":
    main()
