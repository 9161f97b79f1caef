"""W8A8 (--scheme, --block; default symmetric 128) against FP8 blockwise and cuBLAS FP16 at a prefill's M, one GEMM at a
time, for the model benchmark's prefill gap (benchmarks/README.md, model level): GPU time per call
under CUDA-graph replay (L2-warm: at M = 2048 these GEMMs are compute-bound) of the GEMM alone and
of activation quantization + GEMM, and the kernels the plans chose. For Nsight Compute:

    ncu --section SpeedOfLight --section WarpStateStats -k regex:"qgemm_(w8a8|fp8)_.*gemm" -c 2 \\
        python benchmarks/diag_prefill.py --m 2048 --nk 4096x14336 --once
"""
import argparse
import dataclasses

import torch

import qgemm
from cutlass_gen.build import build_many
from cutlass_gen.families.w8a8 import W8A8Sm90Spec
from qgemm.w8a8.heuristics import W8A8Sm90Choice
from timing import bench_graph


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A W8A8 Sm90 configuration --candidates times beside the plan's choice (FP16 out, clamp epilogue).
    alternate: the consumer warp groups take turns on the tensor cores."""
    schedule: str = "cooperative"
    tile: tuple = (128, 128)
    cluster: tuple = (1, 1)
    alternate: bool = False
    scheduler: str = "persistent"

    def spec(self, block_size: int, scheme: str) -> W8A8Sm90Spec:
        return W8A8Sm90Spec(self.tile, block_size, scheme, "f16", self.schedule, self.scheduler, False, "clamp",
                            self.cluster, self.alternate)


PINGPONG = dict(schedule="pingpong", tile=(64, 128))
CANDIDATES = {
    "coop": Candidate(), "coop_c1x2": Candidate(cluster=(1, 2)), "coop_c2x1": Candidate(cluster=(2, 1)),
    "pp": Candidate(**PINGPONG), "pp_c1x2": Candidate(**PINGPONG, cluster=(1, 2)),
    "coop_alt": Candidate(alternate=True), "coop_c2x1_alt": Candidate(cluster=(2, 1), alternate=True),
    "coop_sk": Candidate(scheduler="streamk"), "coop_sk_alt": Candidate(alternate=True, scheduler="streamk"),
    # 256 x 128: each warp group runs and promotes two 64-row slices per block.
    "coop256": Candidate(tile=(256, 128)), "coop256_c2x1": Candidate(tile=(256, 128), cluster=(2, 1)),
    "coop256_c1x2": Candidate(tile=(256, 128), cluster=(1, 2)),
    "coop256_sk": Candidate(tile=(256, 128), scheduler="streamk"),
    # 192 x 128 on three consumer warp groups (qgemm's kernel layer), free or in turns (two issue while one
    # promotes).
    "coop192": Candidate(schedule="cooperative3", tile=(192, 128)),
    "coop192_alt": Candidate(schedule="cooperative3", tile=(192, 128), alternate=True),
    "coop192_c2x1_alt": Candidate(schedule="cooperative3", tile=(192, 128), cluster=(2, 1), alternate=True),
    "coop192_c1x2_alt": Candidate(schedule="cooperative3", tile=(192, 128), cluster=(1, 2), alternate=True),
}


def parse(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--nk", action="append", help="NxK (default: Llama-3-8B's four linear shapes)")
    ap.add_argument("--once", action="store_true", help="one call of each GEMM, no timing (for ncu)")
    ap.add_argument("--no-fp8", action="store_true", help="W8A8 and cuBLAS only")
    ap.add_argument("--candidates", nargs="?", const=",".join(CANDIDATES), default="",
                    help=f"also time these W8A8 CANDIDATES (comma-separated, of {list(CANDIDATES)}; default all), "
                         f"built first, in parallel, and check that each one's output equals the plan's choice's bit "
                         f"for bit")
    ap.add_argument("--block", type=int, default=128, help="W8A8 block size")
    ap.add_argument("--scheme", default="symmetric", choices=("symmetric", "asymmetric"), help="W8A8 scheme")
    args = ap.parse_args(argv)
    unknown = [c for c in args.candidates.split(",") if c and c not in CANDIDATES]
    if unknown:
        ap.error(f"--candidates: unknown {unknown}; choose from {list(CANDIDATES)}")
    return args


def candidate_specs(args) -> list:
    """The W8A8 Sm90 kernels --candidates names, for this run's block size and scheme."""
    return [CANDIDATES[c].spec(args.block, args.scheme) for c in args.candidates.split(",") if c]


def main(argv=None):
    args = parse(argv)
    candidates = candidate_specs(args)
    if candidates:
        build_many(candidates, 90, jobs=16)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.nk] if args.nk else \
        [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
    print(f"{'M':>5} {'N':>6} {'K':>6} | {'fp16':>8} {'w8a8':>8} {'+quant':>8} {'fp8':>8} {'+quant':>8} | "
          f"{'w8a8 TF':>7} {'fp8 TF':>7} | kernels")
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.05
        x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
        w16 = w.half()
        w8 = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, args.block, scheme=args.scheme), out_dtype=torch.float16)
        f8 = None if args.no_fp8 else qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(w), out_dtype=torch.float16)
        xq = qgemm.quantize_activations(x, args.block, symmetric=args.scheme == "symmetric")
        xf = None if args.no_fp8 else qgemm.quantize_activations_fp8(x)
        if args.once:
            fns = [lambda: w8.gemm(xq)] + [lambda spec=spec: w8.gemm(xq, choice=W8A8Sm90Choice(spec))
                                           for spec in candidates]
            for fn in fns + ([] if f8 is None else [lambda: f8.gemm(xf)]):
                fn()
                torch.cuda.synchronize()
            continue
        fns = [lambda: x @ w16.t(), lambda: w8.gemm(xq), lambda: w8(x)]
        fns += [lambda: f8.gemm(xf), lambda: f8(x)] if f8 is not None else []
        t = [bench_graph(fn) for fn in fns] + [float("nan")] * (5 - len(fns))
        flop = 2 * args.m * n * k
        print(f"{args.m:5d} {n:6d} {k:6d} | " + " ".join(f"{v:8.1f}" for v in t) +
              f" | {flop / t[1] / 1e6:7.0f} {flop / t[3] / 1e6:7.0f} | {w8.kernel_spec(args.m).name}, "
              f"{f8.choice(args.m).spec.name if f8 is not None else '-'}", flush=True)
        reference = w8.gemm(xq)
        same = {}
        for spec in candidates:
            out = w8.gemm(xq, choice=W8A8Sm90Choice(spec))
            # Same promotion order per element: any difference is a bug, not rounding.
            same[spec] = "same output" if torch.equal(out, reference) else \
                f"OUTPUT DIFFERS (max |diff| {(out.float() - reference.float()).abs().max().item():.3g})"
        # Two rounds, the second in reverse order (one call's time here moves with what ran before it).
        times = {spec: [] for spec in candidates}
        for order in (candidates, candidates[::-1]):
            for spec in order:
                times[spec].append(bench_graph(lambda: w8.gemm(xq, choice=W8A8Sm90Choice(spec))))
        for spec in candidates:
            us = min(times[spec])
            print(f"      {spec.name}: {us:8.1f} us {flop / us / 1e6:6.0f} TOPS "
                  f"(rounds {' / '.join(f'{t:.1f}' for t in times[spec])}), {same[spec]}", flush=True)


if __name__ == "__main__":
    main()
