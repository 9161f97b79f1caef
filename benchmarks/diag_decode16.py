"""9 to 16 rows of FpA x IntB INT4 (g128, FP16): the plan's choice against the 16-row tiled GEMM and the
decode variant's 16-token CTAs of 32 columns x 8 warps (WIDE16), in one run, under CUDA-graph replay
with the weights rotated through >= 4x L2 (benchmarks/device_decode16.sh).

    python benchmarks/diag_decode16.py [--m 9 --m 16] [--nk 11008x4096 ...] [--between] [--json out.json]

--between puts a small torch kernel before every call, as a model's norms and activations come before
its GEMMs, and subtracts that kernel's own time (timed alone the same way). Without it each call follows
another qgemm call, and the decode variant, launched programmatically on sm90, may start its CTAs (and
its L2 prefetch) while that call finishes: an overlap a compiled model, whose qgemm calls mostly follow
Inductor kernels, does not give. That is the suspected reason why the 16-token CTAs won here by up to
47% and lost 2.4% in the model (qgemm/fpaintb/heuristics.py); --between has not run on a GPU yet.
"""
from __future__ import annotations

import argparse
import json

import torch

import qgemm
from qgemm.bench.fpaintb import SHAPES, label
from qgemm.bench.timing import rotation_count, timed_rotating
from qgemm.fpaintb import heuristics
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec

WIDE16 = dict(n_tiles=4, warps_k=8)  # 16-token CTAs of 32 columns and 8 warps (a sweep-only config of the family)

LLAMA_8B = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 1024)]  # (K, N): packed qkv, o, gate_up, down, k/v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, action="append")
    ap.add_argument("--nk", action="append", metavar="KxN")
    ap.add_argument("--between", action="store_true", help="a small torch kernel before every call (subtracted)")
    ap.add_argument("--json", default="diag_decode16.json")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.nk] if args.nk else SHAPES + LLAMA_8B
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    other = torch.zeros(1 << 16, device="cuda")  # 256 KB: a norm-sized elementwise kernel

    def timed(fns):
        if not args.between:
            return timed_rotating(fns)
        both = timed_rotating([lambda f=f: (other.add_(1.0), f()) for f in fns])
        return both - timed_rotating([lambda: other.add_(1.0) for _ in fns])

    rows = []
    print(f"{'K':>6} {'N':>6} {'M':>3} | {'cuBLAS':>7} {'plan':>7} {'16-row GEMM':>11} {'32x8 CTAs':>9} | plan's kernel")
    for k, n in shapes:
        copies = rotation_count(n * k // 2)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02 for _ in range(rotation_count(2 * n * k))]
        plans = [qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(ws[i % len(ws)], 4, 128), sm90=False) for i in range(copies)]
        for m in args.m or [9, 16]:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            gemm = heuristics.fpaintb_gemm_choice(m, n, k, 4, "f16", 80, sm_count)
            wide = heuristics.FpAIntBChoice(FpAIntBGemvSpec("f16", 4, arch=80, stream=True, **WIDE16),
                                            l2_prefetch=heuristics.FPAINTB_STREAM_L2_PREFETCH)
            row = dict(k=k, n=n, m=m, kernel=label(plans[0].choice(m)), between=args.between,
                       cublas_us=timed([lambda w=w: torch.matmul(x, w.t()) for w in ws]),
                       plan_us=timed([lambda p=p: p(x) for p in plans]),
                       gemm_us=timed([lambda p=p: p(x, choice=gemm) for p in plans]),
                       wide16_us=timed([lambda p=p: p(x, choice=wide) for p in plans]))
            rows.append(row)
            print(f"{k:>6} {n:>6} {m:>3} | {row['cublas_us']:>7.1f} {row['plan_us']:>7.1f} {row['gemm_us']:>11.1f} "
                  f"{row['wide16_us']:>9.1f} | {row['kernel']}", flush=True)
        del ws, plans
        torch.cuda.empty_cache()
    with open(args.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
