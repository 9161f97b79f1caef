"""One call of the FpA x IntB plan (INT4 g128 symmetric, FP16, or BF16 with --bf16) and one of cuBLAS
(torch.matmul, same activation type) at the same shape, for Nsight Compute: why the Sm90 kernel trails cuBLAS at M = 256-1024 (issue 16).

    ncu --section WarpStateStats ... -k regex:"qgemm_fpaintb_gemm_sm90|nvjet|gemm" -c 2 \\
        python benchmarks/diag_fpaintb_sm90.py --m 1024 --nk 14336x21504

Both calls run once to load and warm up, then once more between two synchronizations: under ncu
use --launch-skip for the warm-up calls (benchmarks/device_stalls.sh does)."""
import argparse
import dataclasses

import torch

import qgemm
from qgemm import wq_format
from qgemm.fpaintb.plan import IntBWeight


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--nk", default="14336x21504", help="KxN, as bench_fpaintb.py's --nk")
    ap.add_argument("--zeros", action="store_true", help="asymmetric weights (the kernel with zero')")
    ap.add_argument("--bf16", action="store_true", help="BF16 activations (and cuBLAS BF16) instead of FP16")
    ap.add_argument("--cutlass-loop", action="store_true",
                    help="the plan's tile with CUTLASS's consumer loop on 64-deep K tiles (the kernel before qgemm's loop)")
    ap.add_argument("--ctas-per-sm", type=int, default=None,
                    help="the plan's kernel with this many CTAs per SM (FpAIntBSm90Spec.ctas_per_sm), whatever the plan picks")
    args = ap.parse_args(argv)
    k, n = (int(v) for v in args.nk.split("x"))
    g = torch.Generator().manual_seed(0)
    u = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    dtype = torch.bfloat16 if args.bf16 else torch.float16
    scale = (torch.rand(k // 128, n, generator=g) * 0.02 + 0.005).to(dtype)
    zero = torch.randint(0, 16, (k // 128, n), generator=g, dtype=torch.uint8) if args.zeros else None
    weight = IntBWeight.from_int_weight(wq_format.IntWeight(u, scale, zero, 4, 128, None)).to("cuda")
    plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype)
    x = torch.randn(args.m, k, device="cuda", dtype=dtype)
    w16 = torch.randn(k, n, device="cuda", dtype=dtype)
    choice = plan.choice(args.m)
    if args.cutlass_loop:
        choice = dataclasses.replace(choice, spec=dataclasses.replace(choice.spec, mainloop="cutlass", tile_k=64))
    if args.ctas_per_sm:
        choice = dataclasses.replace(choice, spec=dataclasses.replace(choice.spec, ctas_per_sm=args.ctas_per_sm))
    print(f"M={args.m} K={k} N={n}: {choice}", flush=True)
    for _ in range(2):
        plan(x, choice=choice)
        x @ w16
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
