"""Try FP8 kernels outside the catalog on the decode shapes (builds them first, in parallel).

    python benchmarks/diag_fp8.py
Prints GPU time per call (CUDA graphs) of the plan's choice and of each candidate.
"""
from __future__ import annotations

import torch

import qgemm
from cutlass_gen.build import build_many
from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
from qgemm.fp8 import heuristics
from timing import bench_graph

SHAPES_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
CANDIDATES = [
    Fp8BlockwiseGemmSpec((128, tn), (1, 1), "cooperative", True, "bf16", scheduler="persistent")
    for tn in (16, 32, 64)
] + [
    Fp8BlockwiseGemmSpec((128, 16), (2, 1), "cooperative", True, "bf16", scheduler="persistent"),
    Fp8BlockwiseGemmSpec((64, 128), (2, 1), "pingpong", False, "bf16"),
    Fp8BlockwiseGemmSpec((64, 128), (1, 2), "pingpong", False, "bf16"),
]


def label(s):
    return f"{s.tile[0]}x{s.tile[1]}{'s' if s.swap_ab else ''}/{s.schedule[:4]}/c{s.cluster[0]}x{s.cluster[1]}/{s.scheduler[:4]}"


def main():
    build_many(CANDIDATES, 90, jobs=16)
    print(f"{'M':>4} {'N':>6} {'K':>6} | {'choice':>7} " + " ".join(f"{label(s):>28}" for s in CANDIDATES))
    for n, k in SHAPES_NK:
        weight = qgemm.Fp8Weight.from_float(torch.randn(n, k, device="cuda") * 0.05)
        plan = qgemm.Fp8GemmPlan(weight)
        for m in (1, 16, 64, 128):
            xa = qgemm.quantize_activations_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
            base = bench_graph(lambda: plan.gemm(xa))
            times = [bench_graph(lambda: plan.gemm(xa, choice=heuristics.Fp8Choice(s))) for s in CANDIDATES]
            print(f"{m:>4} {n:>6} {k:>6} | {base:>7.1f} " + " ".join(f"{t:>28.1f}" for t in times), flush=True)


if __name__ == "__main__":
    main()
