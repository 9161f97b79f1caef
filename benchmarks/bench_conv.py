"""Int8 conv2d (qgemm) against cuDNN FP16 on the convolutions of ResNet-50, in one run.

    python benchmarks/bench_conv.py [--batch 1 --batch 64] [--sweep] [--quick] [--json out.json]

The table is `qgemm bench conv` (qgemm/bench/conv.py), printed in this script's long-standing
layout; the kernel sweep (--sweep) is a tuning tool and lives here only.

Shapes: the 23 distinct convolutions of ResNet-50 v1.5 (torchvision: stride 2 on the 3x3 of each
stage's first block) at 224 x 224, with how often each occurs (53 convolutions in all).
Columns (microseconds per call, GPU time under CUDA-graph replay with each call's filter, input and
output rotated through >= 4x L2, qgemm/bench/conv.py):
  int8     qgemm ConvInt8Plan: int8 NHWC in and out, bias, ReLU; input zero point -128 (post-ReLU
           activations), so the padded layers pay for the border correction; conv1's input is
           folded on each call (conv_fold.StrideFold: 3 channels, stride 2 -> 16 channels, stride
           1), that copy included
  +nchw    the same from a contiguous NCHW int8 input (layout="nchw": one transposing copy first)
  sm80     the same plan restricted to the CUTLASS 2.x kernels (plan.choice(..., sm90=False)),
           timed where the plan's own kernel is an Sm90 one
  cudnn    torch.nn.functional.conv2d, FP16, channels_last input and weight, no bias,
           torch.backends.cudnn.benchmark = True
  floor    int8 input + weight + output bytes over the measured copy bandwidth
Ratios: cudnn / int8 (> 1: qgemm faster), sm80 / int8 (what the Sm90 kernels gain) and int8 /
floor. Per batch: the geometric mean of cudnn / int8 over the shapes and the whole network's time
(each shape times its count), and the network's time on the CUTLASS 2.x kernels alone. The
target is cudnn / int8 >= 1 at batch 64. With --sweep every catalog kernel that fits a shape is
timed as well and the fastest reported: the data heuristics.conv_int8_choice is to be set from.
"""
from __future__ import annotations

import argparse

from cutlass_gen.catalog import catalog
from qgemm import bench
from qgemm.bench import report
from qgemm.bench.conv import MS as BATCHES, RESNET50, kernel_label as label
from qgemm.bench.timing import geomean, timed


def run(shapes, batches, sweep: bool) -> dict:
    def sweep_row(row, plan, x, out):
        """Every catalog kernel that fits, forced by choice= (L2-warm: the sweep ranks kernels)."""
        specs = sweep_kernels(plan, row["co"])
        assert len({label(s) for s in specs}) == len(specs), "two kernels share a sweep label"
        times = {label(spec): timed(lambda: plan(x, out, choice=spec)) for spec in specs}
        best = min(times, key=lambda key: times[key])
        row["sweep"], row["best"] = times, (best, times[best])

    result = bench.run("conv", shapes, batches, dtype="f16", hook=sweep_row if sweep else None,
                       progress=lambda row: print(_fmt(row), flush=True))
    for n, values in summary(result["rows"]).items():
        result["summary"].setdefault(str(n), {}).update(values)
    result["host_overhead_us_per_call"] = result["extras"].get("host_overhead_us_per_call", float("nan"))
    return result


def sweep_kernels(plan, co: int) -> list:
    """Every catalog kernel that can run this plan's convolution (the one its kernels run: an RGB
    input's folded, conv.py)."""
    specs = [s for s in catalog(plan.target_sm, "conv2d_int8") if s.supports_channels(plan.padded_channels, co)]
    if plan.sm90_fits:
        specs += [s for s in catalog(plan.target_sm, "conv2d_int8_sm90")
                  if s.supports_channels(plan.padded_channels, co) and s.runs_geometry(*plan.kernel_geometry)]
    return specs


def summary(rows) -> dict:
    out = {}
    for n in sorted({r["n"] for r in rows}):
        sel = [r for r in rows if r["n"] == n]
        out[n] = {"int8_vs_cudnn": geomean([r["cudnn_us"] / r["int8_us"] for r in sel]),
                  "int8_over_floor": geomean([r["int8_us"] / r["floor_us"] for r in sel]),
                  "network_int8_us": sum(r["count"] * r["int8_us"] for r in sel),
                  "network_cudnn_us": sum(r["count"] * r["cudnn_us"] for r in sel)}
        out[n]["network_sm80_us"] = sum(r["count"] * r["sm80_us"] for r in sel)
        if all("best" in r for r in sel):
            out[n]["best_of_sweep_vs_cudnn"] = geomean([r["cudnn_us"] / r["best"][1] for r in sel])
    return out


HEADER = (f"{'layer':<13} {'N':>3} {'HxW':>7} {'Ci':>5} {'Co':>5} {'k':>2} {'s':>2} | {'int8':>8} {'+nchw':>8} "
          f"{'sm80':>8} {'cudnn':>8} {'floor':>7} | {'cud/i8':>6} {'80/i8':>6} {'i8/fl':>6} | kernel")


def _fmt(r: dict) -> str:
    best = f" | best {r['best'][0]} {r['best'][1]:.1f}" if "best" in r else ""
    return (f"{r['name']:<13} {r['n']:>3} {r['h']:>3}x{r['h']:<3} {r['ci']:>5} {r['co']:>5} {r['k']:>2} "
            f"{r['stride']:>2} | {r['int8_us']:>8.1f} {r['nchw_us']:>8.1f} {r['sm80_us']:>8.1f} {r['cudnn_us']:>8.1f} "
            f"{r['floor_us']:>7.1f} | {r['cudnn_us'] / r['int8_us']:>5.2f}x {r['sm80_us'] / r['int8_us']:>5.2f}x "
            f"{r['int8_us'] / r['floor_us']:>5.2f}x | {r['kernel']}{best}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_conv.json")
    ap.add_argument("--batch", action="append", type=int, help="only these batch sizes (default 1 and 64)")
    ap.add_argument("--sweep", action="store_true", help="also time every catalog kernel that fits each shape")
    ap.add_argument("--quick", action="store_true", help="first three shapes only")
    args = ap.parse_args()
    print(HEADER)
    result = run(RESNET50[:3] if args.quick else RESNET50, args.batch or BATCHES, args.sweep)
    report.write_json(result, args.json)
    print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s; times in us; "
          f"host overhead {result['host_overhead_us_per_call']:.1f} us per plan call")
    print(HEADER)
    for r in result["rows"]:
        print(_fmt(r))
    for n, s in summary(result["rows"]).items():
        sweep = f", best-of-sweep {s['best_of_sweep_vs_cudnn']:.2f}x" if "best_of_sweep_vs_cudnn" in s else ""
        print(f"batch {n:>3}: int8 vs cuDNN FP16 {s['int8_vs_cudnn']:.2f}x (geomean{sweep}), int8/floor "
              f"{s['int8_over_floor']:.2f}x; ResNet-50 convolutions {s['network_int8_us']:.0f} us int8 against "
              f"{s['network_cudnn_us']:.0f} us cuDNN FP16")
        print(f"           on the CUTLASS 2.x kernels alone: network {s['network_sm80_us']:.0f} us")


if __name__ == "__main__":
    main()
