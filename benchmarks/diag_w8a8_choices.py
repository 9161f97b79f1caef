"""W8A8 Sm90 kernels outside the plan's rules, forced by choice= beside the plan's own choice, at
decode-sized M: microseconds per call under CUDA-graph replay with the weights rotated through at
least 4x L2, and whether each output equals the plan's bit for bit. For trying a configuration
before it goes into the catalog (build it into the cache first).

    python benchmarks/diag_w8a8_choices.py --m 1 --m 16 --nk 4096x14336 \\
        --candidate pingpong:64x16s --candidate cooperative:128x16s:streamk:4 \\
        --candidate pingpong:64x32s:persistent:0:1x2 --candidate pingpong:64x16s:persistent:0:1x1:2"""
import argparse
import time

import torch

import qgemm
from cutlass_gen.build import build_many
from cutlass_gen.families.w8a8 import W8A8Sm90Spec
from qgemm.bench.timing import rotation_count, timed_rotating
from qgemm.w8a8.heuristics import W8A8Sm90Choice


def parse_candidate(text: str, scheme: str) -> W8A8Sm90Choice:
    """schedule:TMxTN[s][:scheduler[:splits[:CMxCN[:in_flight[:max_stages]]]]] (s: swapped operands; CMxCN the
    cluster, default 1x1; in_flight the blocks each warp group keeps in flight, default 1; max_stages the
    pipeline's stage cap, default 8) -> a choice with FP16 out."""
    parts = text.split(":")
    schedule, tile = parts[0], parts[1]
    swap = tile.endswith("s")
    tm, tn = (int(v) for v in tile.rstrip("s").split("x"))
    scheduler = parts[2] if len(parts) > 2 else "persistent"
    splits = int(parts[3]) if len(parts) > 3 else 0
    cluster = tuple(int(v) for v in parts[4].split("x")) if len(parts) > 4 else (1, 1)
    in_flight = int(parts[5]) if len(parts) > 5 else 1
    max_stages = int(parts[6]) if len(parts) > 6 else 8
    spec = W8A8Sm90Spec((tm, tn), 128, scheme, "f16", schedule, scheduler, swap, "clamp", cluster, False, in_flight,
                        max_stages)
    return W8A8Sm90Choice(spec, splits=splits)


def prebuild(args) -> None:
    """The plans' kernels for every shape, scheme and M, and the candidates, built in parallel (else each
    is built on first use, one at a time)."""
    specs = {}
    for nk in args.nk:
        n, k = (int(v) for v in nk.split("x"))
        w = torch.randn(n, k, device="cuda")
        for scheme in args.scheme or ("symmetric", "asymmetric"):
            plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16)
            for m in args.m or (1, 16):
                spec = plan.kernel_spec(m)
                specs[spec.name] = spec
            for text in args.candidate:
                spec = parse_candidate(text, scheme).spec
                specs[spec.name] = spec
    t0 = time.time()
    build_many(list(specs.values()), 90, jobs=args.prebuild)
    print(f"prebuilt {len(specs)} kernels in {time.time() - t0:.0f} s", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, action="append")
    ap.add_argument("--nk", action="append", required=True, help="NxK")
    ap.add_argument("--candidate", action="append", required=True)
    ap.add_argument("--scheme", action="append", choices=("symmetric", "asymmetric"))
    ap.add_argument("--with-quant", action="store_true",
                    help="also plan(x) (quantization + GEMM, or the fused decode kernel) and "
                         "quantization + the first candidate")
    ap.add_argument("--prebuild", type=int, default=0, metavar="JOBS",
                    help="first build every kernel the run needs (the plans' and the candidates') with JOBS jobs")
    args = ap.parse_args()
    if args.prebuild:
        prebuild(args)
    for nk in args.nk:
        n, k = (int(v) for v in nk.split("x"))
        torch.manual_seed(0)
        w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
        for scheme in args.scheme or ("symmetric", "asymmetric"):
            plans = [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme),
                                        out_dtype=torch.float16) for _ in range(rotation_count(n * k))]
            for m in args.m or (1, 16):
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                xq = qgemm.quantize_activations(x, 128, symmetric=scheme == "symmetric")
                reference = plans[0].gemm(xq)
                row = [f"{scheme[:4]} M={m:>4} N={n:>6} K={k:>6}: plan "
                       f"{timed_rotating([lambda p=p: p.gemm(xq) for p in plans]):6.1f} "
                       f"({plans[0].kernel_spec(m).name.split('_b128_')[1]})"]
                for text in args.candidate:
                    choice = parse_candidate(text, scheme)
                    out = plans[0].gemm(xq, choice=choice)
                    same = "=" if torch.equal(out, reference) else f"diff {(out - reference).abs().max().item():.3g}"
                    us = timed_rotating([lambda p=p: p.gemm(xq, choice=choice) for p in plans])
                    row.append(f"{text} {us:6.1f} [{same}]")
                if args.with_quant:
                    sym = scheme == "symmetric"
                    first = parse_candidate(args.candidate[0], scheme)
                    row.append(f"plan(x) {timed_rotating([lambda p=p: p(x) for p in plans]):6.1f}")
                    row.append(f"quant+{args.candidate[0]} " + format(timed_rotating(
                        [lambda p=p: p.gemm(qgemm.quantize_activations(x, 128, symmetric=sym), choice=first)
                         for p in plans]), "6.1f"))
                print(" | ".join(row), flush=True)
            del plans
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
