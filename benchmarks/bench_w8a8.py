"""W8A8 per-K-block GEMM against cuBLAS FP16 and torch._int_mm, in one run.

    python benchmarks/bench_w8a8.py [--block-size 128] [--json out.json]

Columns (microseconds, median of CUDA-event timings after warm-up):
  qgemm      GEMM alone, blocks chained in one launch (activations pre-quantized)
  +quant     activation quantization + GEMM (what a W8A8 layer costs per call)
  per_block  GEMM as one launch per K-block (the naive form), same kernel
  fp16       torch.matmul, FP16 x FP16 (cuBLAS)
  int_mm     torch._int_mm, int8 x int8 -> int32 without any dequantization (cuBLASLt)
  floor      bytes of int8 A + B + FP16 output over the measured copy bandwidth
Also prints the host overhead of one warm plan call.
"""
from __future__ import annotations

import argparse
import json
import math

import torch

import qgemm
from timing import bench, copy_bandwidth, host_us

SHAPES_NK = [(4096, 4096), (12288, 4096), (8192, 28672)]
MS = [1, 16, 128, 4096]


def host_overhead_us(block_size: int) -> float:
    """Host time of one warm plan.gemm call."""
    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(torch.randn(256, 2 * block_size, device="cuda"),
                                                         block_size), out_dtype=torch.float16)
    xq = qgemm.quantize_activations(torch.randn(1, 2 * block_size, device="cuda"), block_size)
    return host_us(lambda: plan.gemm(xq))


def run(block_size: int, shapes, ms, per_block_max_blocks: int) -> dict:
    torch.manual_seed(0)
    bw = copy_bandwidth()
    rows = []
    overhead = host_overhead_us(block_size)
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
        weight = qgemm.W8A8Weight.from_float(w, block_size)
        w16 = w.half()
        wq_t = weight.qweight.t()  # [K, N] column-major view, as _int_mm wants
        plan = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16)
        naive = qgemm.W8A8GemmPlan(weight, out_dtype=torch.float16, launch_mode="per_block")
        del w
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16) + 0.2
            xq = qgemm.quantize_activations(x, block_size)
            row = {"m": m, "n": n, "k": k, "block_size": block_size}
            row["qgemm_us"] = bench(lambda: plan.gemm(xq))
            row["qgemm_with_quant_us"] = bench(lambda: plan(x))
            blocks = k // block_size
            row["per_block_us"] = bench(lambda: naive.gemm(xq), min_reps=3, budget_s=0.2) \
                if blocks <= per_block_max_blocks else math.nan
            row["fp16_us"] = bench(lambda: x @ w16.t())
            try:
                row["int_mm_us"] = bench(lambda: torch._int_mm(xq.q, wq_t))
            except RuntimeError:
                row["int_mm_us"] = math.nan  # _int_mm rejects some small M
            row["floor_us"] = (m * k + n * k + 2 * m * n) / bw * 1e6
            rows.append(row)
            print(_fmt(row), flush=True)
        del weight, w16, wq_t, plan, naive
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9,
            "host_overhead_us_per_gemm_call": overhead, "rows": rows}


HEADER = f"{'M':>5} {'N':>6} {'K':>6} {'bs':>4} | {'qgemm':>9} {'+quant':>9} {'per_block':>10} | " \
         f"{'fp16':>8} {'int_mm':>8} {'floor':>7} | {'vs fp16':>7} {'vs int_mm':>9}"


def _fmt(r: dict) -> str:
    return (f"{r['m']:>5} {r['n']:>6} {r['k']:>6} {r['block_size']:>4} | {r['qgemm_us']:>9.1f} "
            f"{r['qgemm_with_quant_us']:>9.1f} {r['per_block_us']:>10.1f} | {r['fp16_us']:>8.1f} "
            f"{r['int_mm_us']:>8.1f} {r['floor_us']:>7.1f} | {r['fp16_us'] / r['qgemm_us']:>6.2f}x "
            f"{r['int_mm_us'] / r['qgemm_us']:>8.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--json", default="bench_w8a8.json")
    ap.add_argument("--per-block-max-blocks", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="first shape only")
    ap.add_argument("--nk", action="append", metavar="NxK", help="only these (N, K) shapes, e.g. 8192x28672")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in nk.split("x")) for nk in args.nk] if args.nk else SHAPES_NK
    print(HEADER)
    result = run(args.block_size, shapes[:1] if args.quick else shapes, MS, args.per_block_max_blocks)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s, "
          f"host overhead {result['host_overhead_us_per_gemm_call']:.1f} us per plan.gemm call")
    print("times in us; 'vs' columns are speedups of qgemm (GEMM alone) over the peer (>1: qgemm faster)")
    print(HEADER)
    for r in result["rows"]:
        print(_fmt(r))


if __name__ == "__main__":
    main()
