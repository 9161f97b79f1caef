"""Where a warm W8A8 call spends its host time: microseconds per call of each step (the GPU is
kept far from busy: tiny problems, and a synchronize only every 200 calls), then a cProfile of
plan.gemm and of plan(x) sorted by own time.

    python benchmarks/diag_host_w8a8.py [--m 1 --n 4096 --k 4096]"""
import argparse
import cProfile
import pstats

import torch

import qgemm
from qgemm.bench.timing import host_us
from qgemm.w8a8 import plan as w8a8

ap = argparse.ArgumentParser()
ap.add_argument("--m", type=int, default=1)
ap.add_argument("--n", type=int, default=256)
ap.add_argument("--k", type=int, default=256)
args = ap.parse_args()

x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
w = torch.randn(args.n, args.k, device="cuda")
w16 = w.half()
for scheme in ("symmetric", "asymmetric"):
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16)
    sym = scheme == "symmetric"
    xq = qgemm.quantize_activations(x, 128, symmetric=sym)
    out = torch.empty(args.m, args.n, device="cuda", dtype=torch.float16)
    print(f"{scheme}: kernel {plan.kernel_spec(args.m).name}")
    rows = {
        "torch.empty(M,N)": lambda: torch.empty(args.m, args.n, device="cuda", dtype=torch.float16),
        "torch.zeros(4 KiB)": lambda: torch.zeros(4096, dtype=torch.uint8, device="cuda"),
        "torch.matmul fp16": lambda: x @ w16.t(),
        "quantize_activations": lambda: qgemm.quantize_activations(x, 128, symmetric=sym),
        "_act_quant (no checks)": lambda: w8a8._act_quant(x, 128, sym),
        "plan.gemm(xq, out)": lambda: plan.gemm(xq, out),
        "plan.gemm(xq)": lambda: plan.gemm(xq),
        "plan(x)": lambda: plan(x),
    }
    for name, fn in rows.items():
        print(f"  {name:24s} {host_us(fn, rounds=10, warmup=50):7.2f} us")
    for name, fn in (("plan.gemm(xq)", lambda: plan.gemm(xq)), ("plan(x)", lambda: plan(x))):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        print(f"--- cProfile {scheme} {name}, 2000 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
