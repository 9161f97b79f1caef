"""W8A8 (--scheme, --block; default symmetric 128) against FP8 blockwise and cuBLAS FP16 at a prefill's M, one GEMM at a
time, for the model benchmark's prefill gap (benchmarks/README.md, model level): GPU time per call
under CUDA-graph replay (L2-warm: at M = 2048 these GEMMs are compute-bound) of the GEMM alone and
of activation quantization + GEMM, and the kernels the plans chose. For Nsight Compute:

    ncu --section SpeedOfLight --section WarpStateStats -k regex:"qgemm_(w8a8|fp8)_.*gemm" -c 2 \\
        python benchmarks/diag_prefill.py --m 2048 --nk 4096x14336 --once
"""
import argparse

import torch

import qgemm
from cutlass_gen.build import build_many
from cutlass_gen.families.w8a8 import W8A8Sm90Spec
from qgemm.w8a8.heuristics import W8A8Sm90Choice
from timing import bench_graph

# --candidates: W8A8 Sm90 configurations beside the plan's choice (FP16 out, clamp epilogue).
CANDIDATES = [("cooperative", (128, 128), (1, 1)), ("cooperative", (128, 128), (1, 2)),
              ("cooperative", (128, 128), (2, 1)), ("pingpong", (64, 128), (1, 1)), ("pingpong", (64, 128), (1, 2))]

ap = argparse.ArgumentParser()
ap.add_argument("--m", type=int, default=2048)
ap.add_argument("--nk", action="append", help="NxK (default: Llama-3-8B's four linear shapes)")
ap.add_argument("--once", action="store_true", help="one call of each GEMM, no timing (for ncu)")
ap.add_argument("--no-fp8", action="store_true", help="W8A8 and cuBLAS only")
ap.add_argument("--candidates", action="store_true", help="also time the W8A8 CANDIDATES (built first, in parallel)")
ap.add_argument("--block", type=int, default=128, help="W8A8 block size")
ap.add_argument("--scheme", default="symmetric", choices=("symmetric", "asymmetric"), help="W8A8 scheme")
args = ap.parse_args()
candidates = [W8A8Sm90Spec(tile, args.block, args.scheme, "f16", schedule, "persistent", False, "clamp", cluster)
              for schedule, tile, cluster in CANDIDATES] if args.candidates else []
if candidates:
    build_many(candidates, 90, jobs=16)
shapes = [tuple(int(v) for v in s.split("x")) for s in args.nk] if args.nk else \
    [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
print(f"{'M':>5} {'N':>6} {'K':>6} | {'fp16':>8} {'w8a8':>8} {'+quant':>8} {'fp8':>8} {'+quant':>8} | "
      f"{'w8a8 TF':>7} {'fp8 TF':>7} | kernels")
for n, k in shapes:
    w = torch.randn(n, k, device="cuda") * 0.05
    x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
    w16 = w.half()
    w8 = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, args.block, scheme=args.scheme), out_dtype=torch.float16)
    f8 = None if args.no_fp8 else qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(w), out_dtype=torch.float16)
    xq = qgemm.quantize_activations(x, args.block, symmetric=args.scheme == "symmetric")
    xf = None if args.no_fp8 else qgemm.quantize_activations_fp8(x)
    if args.once:
        for fn in (lambda: w8.gemm(xq),) + (() if f8 is None else (lambda: f8.gemm(xf),)):
            fn()
            torch.cuda.synchronize()
        continue
    fns = [lambda: x @ w16.t(), lambda: w8.gemm(xq), lambda: w8(x)]
    fns += [lambda: f8.gemm(xf), lambda: f8(x)] if f8 is not None else []
    t = [bench_graph(fn) for fn in fns] + [float("nan")] * (5 - len(fns))
    flop = 2 * args.m * n * k
    print(f"{args.m:5d} {n:6d} {k:6d} | " + " ".join(f"{v:8.1f}" for v in t) +
          f" | {flop / t[1] / 1e6:7.0f} {flop / t[3] / 1e6:7.0f} | {w8.kernel_spec(args.m).name}, "
          f"{f8.choice(args.m).spec.name if f8 is not None else '-'}", flush=True)
    for spec in candidates:
        us = bench_graph(lambda: w8.gemm(xq, choice=W8A8Sm90Choice(spec)))
        print(f"      {spec.name}: {us:8.1f} us {flop / us / 1e6:6.0f} TOPS", flush=True)
