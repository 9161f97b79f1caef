"""Build, in parallel, every W8A8 promote kernel tests/test_w8a8_promote_gpu.py runs on this GPU (the
sm75 and sm80 catalogs, and the outputs the heuristic's tiles take beyond them, built on first use
otherwise: one at a time, inside the test's time), plus the activation quantizers and the chained
reference kernels the tests compare against.

    python benchmarks/prebuild_w8a8_promote.py [--sm 90] [-j 16]
"""
from __future__ import annotations

import argparse

from cutlass_gen.build import build_many
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8_PROMOTE_DECODE, W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, w8a8_promote_spec
from cutlass_gen.families.w8a8 import ActQuantSpec, W8A8PromoteSpec
from qgemm.w8a8.heuristics import w8a8_spec


def specs_for(target_sm: int) -> list:
    specs = catalog(75, W8A8PromoteSpec.family) + (catalog(80, W8A8PromoteSpec.family) if target_sm >= 80 else [])
    arch = 80 if target_sm >= 80 else 75
    specs += [w8a8_promote_spec(config, arch, scheme, output)
              for config in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, W8A8_PROMOTE_DECODE)
              for scheme in W8A8PromoteSpec.SCHEMES for output in W8A8PromoteSpec.OUTPUTS
              if arch >= 80 or config != W8A8_PROMOTE_MIDDLE]
    # test_chained_reference_path_agrees: M = 77, N = 268, block 64, FP32 output.
    specs += catalog(target_sm, ActQuantSpec.family) + [w8a8_spec(77, 268, 64, "f32", target_sm, 132)]
    return list(dict.fromkeys(s for s in specs if s.supports_target(target_sm)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sm", type=int, default=90)
    ap.add_argument("-j", "--jobs", type=int, default=None)
    args = ap.parse_args()
    build_many(specs_for(args.sm), args.sm, jobs=args.jobs, progress=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
