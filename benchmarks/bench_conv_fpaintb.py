"""FpA x IntB conv2d (FP16 activations x INT4/INT8 filters) against cuDNN FP16 on ResNet-50's
convolutions, in one run.

    python benchmarks/bench_conv_fpaintb.py [--batch 1 --batch 64] [--quick] [--json out.json]

Shapes: bench_conv.RESNET50 without conv1 (3 input channels: the kernels gather 8 channels at a
time). Columns (microseconds per call, GPU time under CUDA-graph replay):
  int4     qgemm FpAIntBConvPlan, INT4 filter with block-32 scale and offset, FP16 NHWC in and out,
           bias, ReLU (heuristics.fpaintb_conv_choice)
  int8     the same with an INT8 filter, one scale and offset per output channel
  cudnn    torch.nn.functional.conv2d, FP16, channels_last input and weight, bias, then ReLU
  floor4   INT4 filter + scales and offsets + FP16 input and output bytes over the copy bandwidth
Ratios cudnn / int4 and cudnn / int8 (> 1: qgemm faster); per batch the geometric means. With
--sweep every catalog kernel of the width is timed too, one CTA per tile and stream-K at 3 CTAs per
SM, and the fastest is printed: the data heuristics.fpaintb_conv_choice is to be set from.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import qgemm
from bench_conv import RESNET50
from cutlass_gen.catalog import catalog
from qgemm.conv import heuristics
from timing import copy_bandwidth, geomean, timed

BATCHES = [1, 64]



def label(choice) -> str:
    tm, tn, _ = choice.spec.tile
    return f"{tm}x{tn}" + (f"c{choice.ctas_per_sm:g}" if choice.ctas_per_sm else "")


def run(shapes, batches, sweep: bool = False) -> dict:
    torch.backends.cudnn.benchmark = True
    bw = copy_bandwidth()
    rows = []
    for name, size, ci, co, k, stride, padding, count in shapes:
        w = torch.randn(co, ci, k, k, device="cuda") * 0.05
        bias = torch.randn(co, device="cuda", dtype=torch.float16)
        plans = {bits: qgemm.FpAIntBConvPlan(qgemm.IntConvWeight.from_float(w, bits, block), bias=bias,
                                             activation="relu", stride=stride, padding=padding)
                 for bits, block in ((4, 32), (8, -1))}
        w16 = w.half().to(memory_format=torch.channels_last)
        for n in batches:
            x = torch.randn(n, size, size, ci, device="cuda", dtype=torch.float16)
            x_cl = x.permute(0, 3, 1, 2)  # channels_last NCHW view of the same memory
            row = {"name": name, "n": n, "h": size, "ci": ci, "co": co, "k": k, "stride": stride, "count": count}
            for bits, plan in plans.items():
                row[f"int{bits}_us"] = timed(lambda: plan(x))
                row[f"int{bits}_kernel"] = label(plan.choice(n, size, size))
                if sweep:
                    times = {}
                    for spec in catalog(90, "fpaintb_conv"):
                        if (spec.act, spec.bits) != ("f16", bits):
                            continue
                        for ctas in (0, heuristics.FPAINTB_STREAMK_CTAS_PER_SM):
                            choice = heuristics.FpAIntBChoice(spec, ctas)
                            times[label(choice)] = timed(lambda: plan(x, choice=choice))
                    best = min(times, key=times.get)
                    row[f"int{bits}_sweep"], row[f"int{bits}_best"] = times, (best, times[best])
            row["cudnn_us"] = timed(lambda: F.relu(F.conv2d(x_cl, w16, bias, stride, padding)))
            ho = (size + 2 * padding - k) // stride + 1
            weight_bytes = co * ci * k * k // 2 + 2 * 2 * co * (ci // 32)
            row["floor4_us"] = (weight_bytes + x.numel() * 2 + n * ho * ho * co * 2) / bw * 1e6
            rows.append(row)
            print(_fmt(row), flush=True)
    return {"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9, "rows": rows,
            "summary": summary(rows)}



def summary(rows) -> dict:
    return {n: {f"int{b}_vs_cudnn": geomean([r["cudnn_us"] / r[f"int{b}_us"] for r in rows if r["n"] == n])
                for b in (4, 8)} for n in sorted({r["n"] for r in rows})}


HEADER = (f"{'layer':<13} {'N':>3} {'HxW':>4} {'Ci':>5} {'Co':>5} {'k':>2} {'s':>2} | {'int4':>8} {'int8':>8} "
          f"{'cudnn':>8} {'floor4':>7} | {'cud/i4':>6} {'cud/i8':>6} | kernels")


def _fmt(r: dict) -> str:
    return (f"{r['name']:<13} {r['n']:>3} {r['h']:>4} {r['ci']:>5} {r['co']:>5} {r['k']:>2} {r['stride']:>2} | "
            f"{r['int4_us']:>8.1f} {r['int8_us']:>8.1f} {r['cudnn_us']:>8.1f} {r['floor4_us']:>7.1f} | "
            f"{r['cudnn_us'] / r['int4_us']:>5.2f}x {r['cudnn_us'] / r['int8_us']:>5.2f}x | "
            f"{r['int4_kernel']}, {r['int8_kernel']}" + (
                f" | best {r['int4_best'][0]} {r['int4_best'][1]:.1f}, {r['int8_best'][0]} {r['int8_best'][1]:.1f}"
                if "int4_best" in r else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_conv_fpaintb.json")
    ap.add_argument("--batch", action="append", type=int, help="only these batch sizes (default 1 and 64)")
    ap.add_argument("--quick", action="store_true", help="first three shapes only")
    ap.add_argument("--sweep", action="store_true", help="time every catalog kernel too")
    args = ap.parse_args()
    shapes = [s for s in RESNET50 if s[2] % 8 == 0]
    shapes = shapes[:3] if args.quick else shapes
    print(HEADER)
    result = run(shapes, args.batch or BATCHES, args.sweep)
    for n, s in result["summary"].items():
        print(f"batch {n:>3}: int4 vs cuDNN FP16 {s['int4_vs_cudnn']:.2f}x, int8 {s['int8_vs_cudnn']:.2f}x (geomeans)")
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
