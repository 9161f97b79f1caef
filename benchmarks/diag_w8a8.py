"""One W8A8 Sm90 GEMM call per configuration, for Nsight Compute (the kernels are named
qgemm_w8a8_gemm_sm90_*): e.g.

    ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
        -k regex:qgemm_w8a8_gemm_sm90 -c 2 python benchmarks/diag_w8a8.py --m 4096 --n 28672 --k 8192

Runs each scheme once after a warm-up call (the warm-up builds nothing: the kernels come from the
cache) and prints the kernel each call ran."""
import argparse
import dataclasses

import torch

import qgemm
from qgemm.w8a8.heuristics import W8A8Sm90Choice

ap = argparse.ArgumentParser()
ap.add_argument("--m", type=int, default=4096)
ap.add_argument("--n", type=int, default=28672)
ap.add_argument("--k", type=int, default=8192)
ap.add_argument("--scheme", action="append", help="symmetric/asymmetric (default: both)")
ap.add_argument("--splits", type=int, default=None,
                help="force the heuristic's tile on the stream-K kernel with this many split-K slices (0: CUTLASS's)")
ap.add_argument("--candidate", help="a kernel outside the rules, as diag_w8a8_choices.py's --candidate "
                                    "(schedule:TMxTN[s][:scheduler[:splits[:CMxCN]]])")
args = ap.parse_args()
w = torch.randn(args.n, args.k, device="cuda")
x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
for scheme in args.scheme or ("symmetric", "asymmetric"):
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16)
    xq = qgemm.quantize_activations(x, 128, symmetric=scheme == "symmetric")
    choice = None
    if args.candidate:
        from diag_w8a8_choices import parse_candidate  # benchmarks/ is the script's folder

        choice = parse_candidate(args.candidate, scheme)
    elif args.splits is not None:
        spec = dataclasses.replace(plan.kernel_spec(args.m), scheduler="streamk")
        choice = W8A8Sm90Choice(spec, splits=args.splits)
    plan.gemm(xq, choice=choice)
    torch.cuda.synchronize()
    plan.gemm(xq, choice=choice)
    torch.cuda.synchronize()
    print(scheme, choice.spec.name if choice else plan.kernel_spec(args.m).name, f"splits {args.splits}")
