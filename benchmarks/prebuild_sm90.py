"""Build, in one parallel build, the sm90 kernels a device script needs that the kernel cache lacks:
catalog families (optionally only some activation types) and FpA x IntB sweep kernels picked by their
benchmark label (qgemm.bench.fpaintb.label, as bench_fpaintb.py --sweep-match matches them). The FpA x
IntB Sm90 kernels go first, so that a build cut short by its timeout has the slowest ones done.

    python3 benchmarks/prebuild_sm90.py --family fpaintb_gemm_sm90 --family fpaintb_gemm --acts f16 \\
        --sweep f16:4 --match '^s90128x128' [--plan-compile] [-j 16] [--list]

Prints one line: how many kernels were built, of how many selected (--list: their names, no build).
"""
from __future__ import annotations

import argparse
import re
import time

from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb import fpaintb_sm90_specs

FPAINTB_FAMILIES = ("fpaintb_gemm_sm90", "fpaintb_gemm", "fpaintb_gemv", "fpaintb_dequant")


def sweep_specs(types: list[str], match: str) -> set:
    """The FpA x IntB Sm90 sweep list's kernels (catalog ones included) for each ACT:BITS whose bench label
    matches `match`."""
    from qgemm.bench.fpaintb import label
    from qgemm.fpaintb.heuristics import FpAIntBSm90Choice

    specs = set()
    for t in types:
        act, bits = t.split(":")
        specs |= {s for s in fpaintb_sm90_specs(act, int(bits), sweep=True)
                  if re.search(match, label(FpAIntBSm90Choice(s)))}
    return specs


def plan_compile_specs() -> set:
    """The kernels of tests/test_plan_compile_gpu.py (tests/ on the import path)."""
    from qgemm.prebuild import _collect
    from test_plan_compile_gpu import gemm_plan

    specs = set(catalog(90, "fpaintb_conv"))
    for name in ("fpaintb_int4_g128", "w8a8", "fp8"):
        specs |= set(_collect(gemm_plan(name)[0], (1, 17, 300), 90))
    return specs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", default=[],
                    help=f"a catalog family to build (repeatable; 'fpaintb' means {', '.join(FPAINTB_FAMILIES)})")
    ap.add_argument("--acts", default=None, help="only these activation types of the families, e.g. f16 or f16,bf16")
    ap.add_argument("--sweep", action="append", default=[], help="ACT:BITS of FpA x IntB Sm90 sweep kernels (repeatable)")
    ap.add_argument("--match", default="", help="regex over the sweep kernels' bench labels (default: all)")
    ap.add_argument("--plan-compile", action="store_true", help="also the kernels of tests/test_plan_compile_gpu.py")
    ap.add_argument("-j", type=int, default=16)
    ap.add_argument("--list", action="store_true", help="print the selected kernels' names and build nothing")
    args = ap.parse_args(argv)
    families = [f for name in args.family for f in (FPAINTB_FAMILIES if name == "fpaintb" else (name,))]
    acts = set(args.acts.split(",")) if args.acts else None
    specs = {s for f in families for s in catalog(90, f) if acts is None or getattr(s, "act", None) in acts}
    specs |= sweep_specs(args.sweep, args.match)
    if args.plan_compile:
        specs |= plan_compile_specs()
    order = sorted(specs, key=lambda s: (s.family != "fpaintb_gemm_sm90", s.name))
    if args.list:
        print("\n".join(s.name for s in order))
        return
    missing = [s for s in order if find_artifact(s, 90) is None]
    t0 = time.time()
    build_many(missing, 90, jobs=args.j, progress=lambda line: None)
    print(f"built {len(missing)} of {len(specs)} kernels for sm90 in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
