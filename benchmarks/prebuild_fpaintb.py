"""Build, in parallel, the FpA x IntB kernels outside the catalog that the GPU tests and
`bench_fpaintb.py --sweep` use (otherwise each would be built on first use, one at a time).

    python benchmarks/prebuild_fpaintb.py [-j 16]
"""
from __future__ import annotations

import argparse

from bench_fpaintb import sweep_specs
from cutlass_gen.build import build_many
from cutlass_gen.catalog import catalog
from cutlass_gen.specs import FpAIntBGemvSpec


def test_specs() -> list:
    """The extra kernels of tests/test_fpaintb_gpu.py::test_every_catalog_kernel."""
    specs = []
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
    specs = set(catalog(args.sm, "fpaintb_gemv") + catalog(args.sm, "fpaintb_dequant") + test_specs())
    specs |= {s for bits in (4, 8) for m in (1, 16, 64) for s in sweep_specs(bits, m)}
    build_many(sorted(specs, key=lambda s: s.name), args.sm, jobs=args.j, progress=lambda line: None)
    print(f"prebuilt {len(specs)} FpA x IntB kernels for sm{args.sm}")


if __name__ == "__main__":
    main()
