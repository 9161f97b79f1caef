"""W8A8 per-K-block GEMM against its peers, in one run on the GPU.

    python benchmarks/bench_w8a8.py [--json out.json] [--quick] [--nk NxK ...] [--m M ...] [--sweep]
    python benchmarks/bench_w8a8.py --decode [--decode-sweep]   (M <= 16: the fused decode kernel)

The table is `qgemm bench w8a8` (qgemm/bench/w8a8.py) with the L2-warm columns, printed in this
script's long-standing layout; the sweeps (--sweep, --sweep-promote: every catalog kernel forced by
choice=, the data the heuristics are set from) are tuning tools and live here only.

Every time is GPU time per call under CUDA-graph replay with the layer's weights rotated through
at least 4x the L2 size (qgemm/bench/timing.py bench_graph_rotating: a model's consecutive layers
never find their weights in L2); `warm` columns repeat one copy (L2-warm). Microseconds.
Columns:
  sym        qgemm, symmetric block-INT8 (block 128), GEMM alone on pre-quantized activations
  sym+q      the same plus the activation quantization (what a layer costs per call)
  asym       qgemm, MNN's asymmetric scheme (block 128), GEMM alone
  asym+q     the same plus its activation quantization
  p80        qgemm's Sm80 promote kernels (launch_mode="promote": mma.sync per K-block promoted into
             FP32 registers), symmetric, GEMM alone; on an H100 the sm80 kernels built for sm_90a
  chained    the reference path (launch_mode="chained": one threadblock per (tile, K-block), blocks
             folded through a global FP32 partial sum), asymmetric, L2-warm, M <= 128 only
  fp16       torch.matmul, FP16 x FP16 (cuBLAS)
  int_mm     torch._int_mm, per-tensor int8 x int8 -> int32, no block scales (cuBLASLt)
  triton     benchmarks/triton_block_int8.py: the block-INT8 Triton kernel of SGLang/vLLM's design
  floor      int8 activations + int8 weight + FP16 output bytes over the measured copy bandwidth
Ratios: peer / qgemm symmetric GEMM (> 1: qgemm faster); TOPS of the symmetric GEMM. Also: block 32
against block 128 at the largest M (asymmetric), and the host time of one warm plan.gemm call.
"""
from __future__ import annotations

import argparse
import math
import re

import torch

import qgemm
from qgemm import bench
from qgemm.w8a8 import heuristics
from qgemm.bench import report
from qgemm.bench.timing import geomean, rotation_count, timed_rotating
from qgemm.bench.w8a8 import MS, SHAPES as SHAPES_NK



def sweep_shape(n: int, k: int, ms, match: str = "", schemes=("symmetric", "asymmetric")) -> list[dict]:
    """Every Sm90 catalog kernel of the symmetric and asymmetric schemes (block 128, FP16), forced by
    choice=, rotated weights: the table heuristics.w8a8_sm90_choice is set from. `match`: only the
    kernels whose label (e.g. 128x16s-st4: tile, s for swapped, scheduler, split-K slices) it finds."""
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.w8a8 import W8A8Sm90Spec
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
    copies = rotation_count(n * k)
    out = []
    for scheme in schemes:
        plans = [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16)
                 for _ in range(copies)]
        specs = [s for s in catalog(90, W8A8Sm90Spec.family)
                 if (s.scheme, s.block_size, s.output) == (scheme, 128, "f16")]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            xq = qgemm.quantize_activations(x, 128, symmetric=scheme == "symmetric")
            times = {}
            for spec in specs:
                for splits in ((0, 2, 4, 8) if spec.scheduler == "streamk" else (0,)):
                    choice = heuristics.W8A8Sm90Choice(spec, splits=splits)
                    label = f"{spec.tile[0]}x{spec.tile[1]}{'s' if spec.swap_ab else ''}-{spec.scheduler[:2]}{splits}"
                    if match and not re.search(match, label):
                        continue
                    times[label] = timed_rotating([lambda p=p, c=choice: p.gemm(xq, choice=c) for p in plans])
            best = min(times, key=lambda t: times[t] if not math.isnan(times[t]) else math.inf)
            chosen = plans[0].kernel_spec(m)
            print(f"sweep {scheme[:4]} M={m:>5} N={n:>6} K={k:>6}: best {best} {times[best]:.1f} us; "
                  + " ".join(f"{t}={v:.1f}" for t, v in times.items()) + f" | heuristic: {chosen.name}", flush=True)
            out.append({"scheme": scheme, "m": m, "n": n, "k": k, "times": times, "heuristic": chosen.name})
        del plans
        torch.cuda.empty_cache()
    return out


def sweep_promote_shape(n: int, k: int, ms) -> list[dict]:
    """Every promote catalog kernel of this GPU's build target (FP16 output, block 128, both schemes),
    forced by choice= with one CTA per tile and stream-K over 1 and 2 CTAs per SM, rotated weights:
    the table heuristics.w8a8_promote_choice is set from."""
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.w8a8 import W8A8PromoteSpec
    from qgemm._runtime import target_sm_for
    target = target_sm_for(torch.cuda.get_device_capability())
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
    copies = rotation_count(n * k)
    out = []
    for scheme in schemes:
        plans = [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme=scheme), out_dtype=torch.float16,
                                    launch_mode="promote") for _ in range(copies)]
        specs = [s for s in catalog(target, W8A8PromoteSpec.family) if (s.scheme, s.output) == (scheme, "f16")]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            xq = qgemm.quantize_activations(x, 128, symmetric=scheme == "symmetric")
            times = {}
            for spec in specs:
                for ctas_per_sm in (0, 1, 2):
                    choice = heuristics.W8A8PromoteChoice(spec, ctas_per_sm, min(8, -(-m // spec.tile[0])))
                    label = f"{spec.tile[0]}x{spec.tile[1]}-sk{ctas_per_sm}"
                    times[label] = timed_rotating([lambda p=p, c=choice: p.gemm(xq, choice=c) for p in plans])
            best = min(times, key=lambda t: times[t] if not math.isnan(times[t]) else math.inf)
            chosen = plans[0].promote_choice(m)
            print(f"sweep-promote {scheme[:4]} M={m:>5} N={n:>6} K={k:>6}: best {best} {times[best]:.1f} us; "
                  + " ".join(f"{t}={v:.1f}" for t, v in times.items())
                  + f" | heuristic: {chosen.spec.tile[0]}x{chosen.spec.tile[1]}-sk{chosen.ctas_per_sm}", flush=True)
            out.append({"scheme": scheme, "m": m, "n": n, "k": k, "times": times, "heuristic": chosen.spec.name,
                        "heuristic_ctas_per_sm": chosen.ctas_per_sm})
        del plans
        torch.cuda.empty_cache()
    return out


HEADER = (f"{'M':>5} {'N':>6} {'K':>6} | {'sym':>8} {'sym+q':>8} {'asym':>8} {'asym+q':>8} {'chained':>8} | "
          f"{'fp16':>8} {'int_mm':>8} {'triton':>8} {'floor':>7} | {'vs fp16':>7} {'vs i_mm':>7} {'vs trit':>7} "
          f"{'asym vs fp16':>12} {'TOPS':>6} {'warm':>7} | {'p80':>8} {'p80/fp16':>8}")


def _ratio(a, b):
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _fmt(r: dict) -> str:
    return (f"{r['m']:>5} {r['n']:>6} {r['k']:>6} | {r['sym_us']:>8.1f} {r['sym_quant_us']:>8.1f} {r['asym_us']:>8.1f} "
            f"{r['asym_quant_us']:>8.1f} {r['chained_us']:>8.1f} | {r['fp16_us']:>8.1f} {r['int_mm_us']:>8.1f} "
            f"{r['triton_us']:>8.1f} {r['floor_us']:>7.1f} | {_ratio(r['fp16_us'], r['sym_us']):>6.2f}x "
            f"{_ratio(r['int_mm_us'], r['sym_us']):>6.2f}x {_ratio(r['triton_us'], r['sym_us']):>6.2f}x "
            f"{_ratio(r['fp16_us'], r['asym_us']):>11.2f}x {r['sym_tops']:>6.0f} {r['sym_warm_us']:>7.1f} | "
            f"{r['promote_us']:>8.1f} {_ratio(r['fp16_us'], r['promote_us']):>7.2f}x")


def summary(rows: list[dict], ms) -> list[str]:
    lines = ["geomeans over the shapes (x: peer time / qgemm time):"]
    for m in ms:
        rs = [r for r in rows if r["m"] == m]
        lines.append(
            f"  M={m:>5}: sym vs fp16 {geomean(_ratio(r['fp16_us'], r['sym_us']) for r in rs):.2f}x, "
            f"vs int_mm {geomean(_ratio(r['int_mm_us'], r['sym_us']) for r in rs):.2f}x, "
            f"vs triton {geomean(_ratio(r['triton_us'], r['sym_us']) for r in rs):.2f}x, "
            f"sym/floor {geomean(_ratio(r['sym_us'], r['floor_us']) for r in rs):.2f}; "
            f"asym vs fp16 {geomean(_ratio(r['fp16_us'], r['asym_us']) for r in rs):.2f}x; "
            f"sym+quant vs fp16 {geomean(_ratio(r['fp16_us'], r['sym_quant_us']) for r in rs):.2f}x; "
            f"sm80 promote (sym) vs fp16 {geomean(_ratio(r['fp16_us'], r['promote_us']) for r in rs):.2f}x")
    b32 = [r for r in rows if "asym_b32_us" in r]
    if b32:
        lines.append(f"  block 32 / block 128 throughput (asymmetric, M={b32[0]['m']}): "
                     f"{geomean(_ratio(r['asym_us'], r['asym_b32_us']) for r in b32):.2f}")
    largest = max(rows, key=lambda r: r["m"] * r["n"] * r["k"])
    lines.append(f"  largest shape M={largest['m']} N={largest['n']} K={largest['k']}: {largest['sym_tops']:.0f} TOPS")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_w8a8.json")
    ap.add_argument("--quick", action="store_true", help="first two shapes only")
    ap.add_argument("--nk", action="append", metavar="NxK", help="only these (N, K) shapes, e.g. 8192x28672")
    ap.add_argument("--m", action="append", type=int, help="only these M")
    ap.add_argument("--sweep", action="store_true", help="also time every Sm90 catalog kernel per M")
    ap.add_argument("--sweep-m", action="append", type=int, help="sweep only these M (default: the benchmark's)")
    ap.add_argument("--sweep-match", default="", help="sweep only the kernels whose label matches (regex)")
    ap.add_argument("--sweep-scheme", action="append", choices=("symmetric", "asymmetric"), help="sweep only these schemes")
    ap.add_argument("--sweep-promote", action="store_true", help="also time every promote (Sm80) catalog kernel per M")
    ap.add_argument("--no-table", action="store_true", help="skip the main table (with --sweep/--sweep-promote)")
    ap.add_argument("--decode", action="store_true",
                    help="decode table instead: the fused W8A8 GEMV kernel vs today's path vs fp16, M = 1, 4, 16")
    ap.add_argument("--decode-sweep", action="store_true",
                    help="with --decode: time every GEMV variant x CTAs/SM at M = 1 and 16")
    ap.add_argument("--l2-prefetch", type=int, action="append", metavar="BYTES",
                    help="with --decode: also time the fused kernel's choice with this L2 prefetch per CTA")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in nk.split("x")) for nk in args.nk] if args.nk else SHAPES_NK
    shapes = shapes[:2] if args.quick else shapes
    ms = args.m or MS
    if args.decode:  # the fused W8A8 decode kernel's table (benchmarks/bench_w8a8_decode.py)
        from bench_w8a8_decode import run_decode
        return run_decode(args, shapes)
    print(HEADER)
    result = bench.run("w8a8", [] if args.no_table else shapes, ms, dtype="f16", warm=True,
                       progress=lambda row: print(_fmt(row), flush=True))
    rows, sweep = result["rows"], []
    if args.sweep:
        for n, k in shapes:
            sweep += sweep_shape(n, k, args.sweep_m or ms, args.sweep_match, args.sweep_scheme or ("symmetric", "asymmetric"))
    if args.sweep_promote:
        for n, k in shapes:
            sweep += sweep_promote_shape(n, k, args.sweep_m or ms)
    overhead = result["extras"].get("host_overhead_us_per_gemm_call", math.nan)
    result.update(host_overhead_us_per_gemm_call=overhead, sweep=sweep)
    report.write_json(result, args.json)
    bw = result["copy_bandwidth_GBps"]
    print(f"device {result['device']}, copy bandwidth {bw:.0f} GB/s, L2 {result['l2_bytes'] >> 20} MiB, "
          f"host overhead {overhead:.1f} us per warm plan.gemm call")
    print("times in us per call, weights rotated through >= 4x L2 (warm: L2-warm sym); ratios > 1: qgemm faster")
    if rows:
        print(HEADER)
        for r in rows:
            print(_fmt(r))
        print("\n".join(summary(rows, ms)))


if __name__ == "__main__":
    main()
