"""FP8 blockwise GEMMs on qgemm's W8A8 promotion collective (W8A8Sm90Spec operand="e4m3") against the FP8
family's own kernels (CUTLASS's FP8 blockwise collective), on the same quantized data: issue 15 asks that the
promotion be independent of the element type so that the FP8 family can move onto it. The FP8 weight and
activations (DeepSeek's 128 x 128 and 1 x 128 scales) are handed to a W8A8 plan as raw bytes, whose scale
layouts are the same. GPU time per call under CUDA-graph replay, L2-warm (at these M the GEMMs are compute-
bound); each output is compared with the float64 product of the dequantized operands.

    python benchmarks/diag_fp8_promote.py [--m 2048 --m 4096] [--nk NxK ...] [--tiles 128x128,256x128]
"""
import argparse

import torch

import qgemm
from cutlass_gen.build import build_many
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8Sm90Spec, w8a8_sm90_schedule
from qgemm.w8a8.heuristics import W8A8Sm90Choice
from qgemm.w8a8.plan import QuantizedActivations, W8A8GemmPlan
from timing import bench_graph


class Fp8OnPromotePlan(W8A8GemmPlan):
    """A W8A8 plan whose Sm90 kernels read their operands as FP8 e4m3 (the bytes it is given are FP8)."""
    _operand = "e4m3"


def dequantized(q: torch.Tensor, scale: torch.Tensor, rows_per_scale: int) -> torch.Tensor:
    """q [R, K] FP8 times its 128-K block scales: scale [ceil(R / rows_per_scale), K / 128] (weights) or,
    transposed, [K / 128, R] (activations, rows_per_scale = 1), in float64."""
    r, k = q.shape
    s = scale.double() if rows_per_scale > 1 else scale.double().t()
    s = s.repeat_interleave(rows_per_scale, 0)[:r].repeat_interleave(128, 1)
    return q.double() * s


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, action="append")
    ap.add_argument("--nk", action="append", help="NxK (default: Llama-3-8B's and the W8A8 bench's large shapes)")
    ap.add_argument("--tiles", default="128x128,256x128,192x128",
                    help="tiles of the FP8-on-promotion kernels, MxN[cAxB] (192 rows: three consumer warp groups)")
    args = ap.parse_args(argv)
    ms = args.m or [2048, 4096]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.nk] if args.nk else \
        [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672)]
    specs = []
    for text in args.tiles.split(","):  # MxN, or MxNcAxB with a cluster
        tile, _, cluster = text.partition("c")
        tile = tuple(int(v) for v in tile.split("x"))
        cluster = tuple(int(v) for v in cluster.split("x")) if cluster else (1, 1)
        specs.append(W8A8Sm90Spec(tile, 128, "symmetric", "f16", w8a8_sm90_schedule(tile), cluster=cluster,
                                  operand="e4m3"))
    # Every kernel of the run in one parallel build: the candidates, the FP8 plans' choices, FP8 act quant.
    kernels = set(specs) | set(catalog(90, "fp8_act_quant"))
    for n, k in shapes:
        plan = qgemm.Fp8GemmPlan(qgemm.Fp8Weight(torch.empty(n, k, dtype=torch.float8_e4m3fn, device="cuda"),
                                                 torch.ones(-(-n // 128), k // 128, device="cuda")),
                                 out_dtype=torch.float16)
        kernels |= {plan.choice(m).spec for m in ms}
    build_many(sorted(kernels, key=lambda s: s.name), 90, jobs=16, progress=lambda line: None)
    print(f"{'M':>5} {'N':>6} {'K':>6} | {'fp16':>8} {'fp8 plan':>9} " +
          " ".join(f"{s.tile[0]}x{s.tile[1]}c{s.cluster[0]}x{s.cluster[1]}".rjust(10) for s in specs)
          + " | rel err (plan, candidates) | fp8 plan kernel", flush=True)
    for m in ms:
        for n, k in shapes:
            torch.manual_seed(0)
            w = torch.randn(n, k, device="cuda") * 0.05
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w16 = w.half()
            weight = qgemm.Fp8Weight.from_float(w)
            f8 = qgemm.Fp8GemmPlan(weight, out_dtype=torch.float16)
            xf = qgemm.quantize_activations_fp8(x)
            scale = xf.scale[:, :m].contiguous()  # [K / 128, pitch >= M] -> [K / 128, M], W8A8's block-major layout
            promote = Fp8OnPromotePlan(qgemm.W8A8Weight(weight.qweight.view(torch.int8), weight.scale_inv, None, None,
                                                        128, "symmetric"), out_dtype=torch.float16)
            xq = QuantizedActivations(xf.q.view(torch.int8), scale, None, None, 128)
            ref = dequantized(xf.q, scale, 1) @ dequantized(weight.qweight, weight.scale_inv, 128).t()

            def err(out):
                return ((out.double() - ref).norm() / ref.norm()).item()

            outs = [f8.gemm(xf)] + [promote.gemm(xq, choice=W8A8Sm90Choice(s)) for s in specs]
            torch.cuda.synchronize()
            errors = [err(o) for o in outs]
            fns = [lambda: x @ w16.t(), lambda: f8.gemm(xf)]
            fns += [lambda s=s: promote.gemm(xq, choice=W8A8Sm90Choice(s)) for s in specs]
            # Two rounds, the second in reverse order; the faster of each kept.
            times = [[] for _ in fns]
            for order in (range(len(fns)), reversed(range(len(fns)))):
                for i in order:
                    times[i].append(bench_graph(fns[i]))
            t = [min(v) for v in times]
            print(f"{m:5d} {n:6d} {k:6d} | {t[0]:8.1f} {t[1]:9.1f} " + " ".join(f"{v:10.1f}" for v in t[2:]) +
                  " | " + " ".join(f"{e:.1e}" for e in errors) + f" | {f8.choice(m).spec.name}", flush=True)


if __name__ == "__main__":
    main()
