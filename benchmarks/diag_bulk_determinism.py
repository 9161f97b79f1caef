"""Bit-equality of the decode variant's split-K outputs over repeated launches, for the bulk-copy kernels
against a register-ring control (the partial buffer holds another kernel's partials between launches,
so a partial read before its CTA wrote it shows as a changed bit).

    python benchmarks/diag_bulk_determinism.py [--reps 20] [--bf16-only]"""
import argparse

import torch

import qgemm
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec
from qgemm.fpaintb import heuristics
from gpu_util import randn
from test_fpaintb_gpu import random_weight

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--bf16-only", action="store_true")
args = ap.parse_args()
configs = [dict(n_tiles=4, warps_k=8, rows8=True, bulk_stages=3, arch=90), dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=4, arch=90),
           dict(n_tiles=4, warps_k=8, rows8=True, arch=80), dict(n_tiles=4, warps_k=4, rows8=True, arch=80)]
for dtype in ((torch.bfloat16,) if args.bf16_only else (torch.float16, torch.bfloat16)):
    act = qgemm.fpaintb.ACT_DTYPES[dtype]
    for n, k, g in ((40, 8192, 128), (264, 8320, 64)):
        w = random_weight(k, n, 4, g, True, dtype, seed=n + k)
        plan = qgemm.FpAIntBPlan(w, act_dtype=dtype)
        for m in (1, 3, 9, 16):
            x = randn(m, k, dtype=dtype, seed=m + k)
            for ctas in (0.05, 8):
                ref = None
                for config in configs:
                    spec = FpAIntBGemvSpec(act, 4, stream=True, **config)
                    choice = heuristics.FpAIntBChoice(spec, ctas)
                    outs = [plan(x, choice=choice) for _ in range(args.reps)]
                    bad = sum(not torch.equal(o, outs[0]) for o in outs)
                    # the other kernels' partials between the repetitions: interleave a control launch
                    mixed = []
                    for _ in range(args.reps):
                        plan(x, choice=heuristics.FpAIntBChoice(FpAIntBGemvSpec(act, 4, stream=True, n_tiles=2, warps_k=8, rows8=True), ctas))
                        mixed.append(plan(x, choice=choice))
                    bad_mixed = sum(not torch.equal(o, outs[0]) for o in mixed)
                    if bad or bad_mixed:
                        print(f"NONDETERMINISTIC {spec.name} {act} n{n} k{k} g{g} m{m} ctas{ctas}: {bad} / {bad_mixed} of {args.reps}")
print("done")
