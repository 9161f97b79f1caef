"""One FpA x IntB decode call for ncu (benchmarks/device_gemv.sh): a few warm-up calls, then `--calls` more.

    python benchmarks/diag_gemv.py [--k 14336] [--n 21504] [--m 1] [--bits 4] [--old] [--calls 3]

--old forces the path before the decode variant (bench_fpaintb.old_decode_choice); otherwise the
plan's own choice (the decode variant for M <= heuristics.FPAINTB_STREAM_MAX_M). Prints the kernel name.
"""
from __future__ import annotations

import argparse

import torch

import qgemm
from bench_fpaintb import label, old_decode_choice

ap = argparse.ArgumentParser()
ap.add_argument("--k", type=int, default=14336)
ap.add_argument("--n", type=int, default=21504)
ap.add_argument("--m", type=int, default=1)
ap.add_argument("--bits", type=int, default=4)
ap.add_argument("--old", action="store_true")
ap.add_argument("--calls", type=int, default=3)
args = ap.parse_args()
w = torch.randn(args.n, args.k, device="cuda", dtype=torch.float16) * 0.02
plan = qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(w, args.bits, 128 if args.bits == 4 else -1), sm90=False)
del w
x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
sm_count = torch.cuda.get_device_properties(0).multi_processor_count
choice = old_decode_choice(args.m, args.n, args.k, args.bits, sm_count) if args.old else plan.choice(args.m)
for _ in range(2):
    plan(x, choice=choice)
torch.cuda.synchronize()
for _ in range(args.calls):
    plan(x, choice=choice)
torch.cuda.synchronize()
print(f"kernel {choice.spec.name} ({label(choice)}), M {args.m}, K {args.k}, N {args.n}, int{args.bits}")
