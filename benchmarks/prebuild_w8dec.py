"""Build, in parallel, what benchmarks/device_w8dec.sh runs: the fused W8A8 decode kernels of the
catalog (w8a8_gemv) and those outside it that tests/test_w8a8_gemv_gpu.py uses, the act_quant
kernels, and the Sm90 kernels of today's decode path (the benchmark's `today` column and the test
of M above the threshold). Only what the cache lacks is built.

    python benchmarks/prebuild_w8dec.py [-j 16]
"""
from __future__ import annotations

import argparse
import time

from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8GemvSpec
from qgemm.w8a8 import heuristics

SHAPES = [(4096, 4096), (12288, 4096), (8192, 28672), (28672, 8192), (2112, 7168), (7168, 2048)]


def gemv_test_specs() -> list:
    """tests/test_w8a8_gemv_gpu.py beyond the catalog (FP16 -> FP16, BF16 -> BF16)."""
    narrow, wide = heuristics.W8A8_GEMV_VARIANTS["narrow"], heuristics.W8A8_GEMV_VARIANTS["wide"]
    specs = []
    for scheme in W8A8GemvSpec.SCHEMES:
        specs += [W8A8GemvSpec("f32", scheme, "f32", **narrow), W8A8GemvSpec("f16", scheme, "bf16", **narrow),
                  W8A8GemvSpec("f16", scheme, "f32", **narrow), W8A8GemvSpec("f16", scheme, "f32", **wide)]
    return specs


def sm90_today_specs(sm_count: int = 132) -> list:
    """The Sm90 GEMMs today's decode path runs on the benchmark shapes (FP16 output), and the one of
    the test that takes M = 17 past the threshold (FP32 output)."""
    specs = {heuristics.w8a8_sm90_choice(m, n, k, 128, scheme, "f16", "clamp", sm_count).spec
             for n, k in SHAPES for m in (1, 4, 16) for scheme in ("symmetric", "asymmetric")}
    specs.add(heuristics.w8a8_sm90_choice(17, 264, 1024, 128, "symmetric", "f32", "clamp", sm_count).spec)
    return sorted(specs, key=lambda s: s.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=16)
    ap.add_argument("--no-sm90", action="store_true", help="skip today's Sm90 GEMMs (the gemv kernels only)")
    args = ap.parse_args()
    specs = set(catalog(90, "w8a8_gemv")) | set(gemv_test_specs()) | set(catalog(90, "act_quant"))
    if not args.no_sm90:
        specs |= set(sm90_today_specs())
    missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, 90) is None]
    t0 = time.time()
    build_many(missing, 90, jobs=args.j, progress=lambda line: None)
    print(f"prebuilt {len(missing)} of {len(specs)} kernels for sm90 in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
