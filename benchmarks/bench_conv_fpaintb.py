"""FpA x IntB conv2d (FP16 activations x INT4/INT8 filters) against cuDNN FP16 on ResNet-50's
convolutions, in one run.

    python benchmarks/bench_conv_fpaintb.py [--batch 1 --batch 64] [--quick] [--sweep] [--json out.json]

The table is `qgemm bench conv_fpaintb` (qgemm/bench/conv_fpaintb.py), printed in this script's
long-standing layout; the kernel sweep (--sweep) is a tuning tool and lives here only.

Shapes: bench_conv.RESNET50 without conv1 (3 input channels: the kernels gather 8 channels at a
time). Columns (microseconds per call, GPU time under CUDA-graph replay with each call's filter,
input and output rotated through >= 4x L2):
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

from cutlass_gen.catalog import catalog
from qgemm import bench
from qgemm.conv import heuristics
from qgemm.bench import report
from qgemm.bench.conv_fpaintb import MS as BATCHES, SHAPES, kernel_label as label
from qgemm.bench.timing import geomean, timed


def run(shapes, batches, sweep: bool = False) -> dict:
    def sweep_row(row, plans, x):
        """Every catalog kernel of each width, one CTA per tile and stream-K (L2-warm: the sweep ranks
        kernels)."""
        for bits, plan in plans.items():
            times = {}
            for spec in catalog(90, "fpaintb_conv"):
                if (spec.act, spec.bits) != ("f16", bits):
                    continue
                for ctas in (0, heuristics.FPAINTB_STREAMK_CTAS_PER_SM):
                    choice = heuristics.FpAIntBChoice(spec, ctas)
                    times[label(choice)] = timed(lambda: plan(x, choice=choice))
            best = min(times, key=times.get)
            row[f"int{bits}_sweep"], row[f"int{bits}_best"] = times, (best, times[best])

    result = bench.run("conv_fpaintb", shapes, batches, dtype="f16", hook=sweep_row if sweep else None,
                       progress=lambda row: print(_fmt(row), flush=True))
    for n, values in summary(result["rows"]).items():
        result["summary"].setdefault(str(n), {}).update(values)
    return result


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
    shapes = SHAPES[:3] if args.quick else SHAPES
    print(HEADER)
    result = run(shapes, args.batch or BATCHES, args.sweep)
    for n, s in summary(result["rows"]).items():
        print(f"batch {n:>3}: int4 vs cuDNN FP16 {s['int4_vs_cudnn']:.2f}x, int8 {s['int8_vs_cudnn']:.2f}x (geomeans)")
    report.write_json(result, args.json)


if __name__ == "__main__":
    main()
