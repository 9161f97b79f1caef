"""One decode call of the fused W8A8 kernel, for ncu: a warm-up call, then `calls` more.

    python benchmarks/diag_w8dec.py N K M [symmetric|asymmetric] [calls] [variant]
"""
from __future__ import annotations

import sys

import torch

import qgemm


def main():
    n, k, m = (int(v) for v in sys.argv[1:4])
    scheme = sys.argv[4] if len(sys.argv) > 4 else "symmetric"
    calls = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    variant = sys.argv[6] if len(sys.argv) > 6 else None
    weight = qgemm.W8A8Weight.from_float(torch.randn(n, k, device="cuda"), 128, scheme=scheme)
    plan = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    choice = plan._gemv.choice(m, x.dtype, **({"variant": variant} if variant else {}))
    print(f"{choice.spec.name} slice_blocks={choice.slice_blocks}", flush=True)
    plan._call_gemv(x, None, m, choice=choice)
    torch.cuda.synchronize()
    for _ in range(calls):
        plan._call_gemv(x, None, m, choice=choice)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
