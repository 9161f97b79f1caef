"""Int8 conv2d (qgemm) against cuDNN FP16 on the convolutions of ResNet-50, in one run.

    python benchmarks/bench_conv.py [--batch 1 --batch 64] [--sweep] [--quick] [--json out.json]

Shapes: the 23 distinct convolutions of ResNet-50 v1.5 (torchvision: stride 2 on the 3x3 of each
stage's first block) at 224 x 224, with how often each occurs (53 convolutions in all).
Columns (microseconds per call, GPU time under CUDA-graph replay, timing.bench_graph):
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
import json

import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.conv import ConvInt8Sm90Spec
from qgemm.conv.quant import ConvInt8Quant
from timing import copy_bandwidth, geomean, host_us, timed

# (name, input size, in channels, out channels, kernel, stride, padding, occurrences)
RESNET50 = [
    ("conv1", 224, 3, 64, 7, 2, 3, 1),
    ("l1.reduce_in", 56, 64, 64, 1, 1, 0, 1),
    ("l1.3x3", 56, 64, 64, 3, 1, 1, 3),
    ("l1.expand", 56, 64, 256, 1, 1, 0, 4),
    ("l1.reduce", 56, 256, 64, 1, 1, 0, 2),
    ("l2.reduce_in", 56, 256, 128, 1, 1, 0, 1),
    ("l2.3x3_s2", 56, 128, 128, 3, 2, 1, 1),
    ("l2.expand", 28, 128, 512, 1, 1, 0, 4),
    ("l2.down", 56, 256, 512, 1, 2, 0, 1),
    ("l2.reduce", 28, 512, 128, 1, 1, 0, 3),
    ("l2.3x3", 28, 128, 128, 3, 1, 1, 3),
    ("l3.reduce_in", 28, 512, 256, 1, 1, 0, 1),
    ("l3.3x3_s2", 28, 256, 256, 3, 2, 1, 1),
    ("l3.expand", 14, 256, 1024, 1, 1, 0, 6),
    ("l3.down", 28, 512, 1024, 1, 2, 0, 1),
    ("l3.reduce", 14, 1024, 256, 1, 1, 0, 5),
    ("l3.3x3", 14, 256, 256, 3, 1, 1, 5),
    ("l4.reduce_in", 14, 1024, 512, 1, 1, 0, 1),
    ("l4.3x3_s2", 14, 512, 512, 3, 2, 1, 1),
    ("l4.expand", 7, 512, 2048, 1, 1, 0, 3),
    ("l4.down", 14, 1024, 2048, 1, 2, 0, 1),
    ("l4.reduce", 7, 2048, 512, 1, 1, 0, 2),
    ("l4.3x3", 7, 512, 512, 3, 1, 1, 2),
]
BATCHES = [1, 64]
INPUT_ZERO = -128


def label(spec) -> str:
    if isinstance(spec, ConvInt8Sm90Spec):
        # Every field that tells two catalog kernels apart: the sweep's times are keyed by this.
        two = f" s{spec.stages} {spec.ctas_per_sm}cta" if spec.ctas_per_sm > 1 else ""
        pingpong = " pingpong" if spec.mainloop == "pingpong" else ""
        return f"sm90 {'x'.join(map(str, spec.tile))}{two}{pingpong}"
    tile = f"{spec.tile[0]}x{spec.tile[1]}"
    return f"sm{spec.arch} {tile} a{spec.alignment}{' few' if spec.iterator == 'few_channels' else ''}"


def make_plan(ci: int, co: int, k: int, stride: int, padding: int) -> qgemm.ConvInt8Plan:
    w_q = torch.randint(-127, 128, (co, k, k, ci), dtype=torch.int8, device="cuda")
    quant = ConvInt8Quant(0.02, INPUT_ZERO, torch.rand(co) * 0.01 + 0.001, 0.05, -128, "relu")
    return qgemm.ConvInt8Plan(w_q, quant, bias=torch.randn(co, device="cuda"), stride=stride, padding=padding)


def run(shapes, batches, sweep: bool) -> dict:
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    bw = copy_bandwidth()
    rows = []
    for name, size, ci, co, k, stride, padding, count in shapes:
        plan = make_plan(ci, co, k, stride, padding)
        w16 = torch.randn(co, ci, k, k, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        ho, wo = plan.output_hw(size, size)
        for n in batches:
            x = torch.randint(-128, 128, (n, size, size, ci), dtype=torch.int8, device="cuda")
            out = torch.empty((n, ho, wo, co), dtype=torch.int8, device="cuda")
            x_nchw = x.permute(0, 3, 1, 2).contiguous()
            x16 = torch.randn(n, ci, size, size, device="cuda", dtype=torch.float16).to(
                memory_format=torch.channels_last)
            row = {"name": name, "n": n, "h": size, "ci": ci, "co": co, "k": k, "stride": stride,
                   "padding": padding, "count": count, "kernel": label(plan.choice(n, size, size))}
            row["int8_us"] = timed(lambda: plan(x, out))
            row["nchw_us"] = timed(lambda: plan(x_nchw, layout="nchw"))
            sm80 = plan.choice(n, size, size, sm90=False)
            row["sm80_us"] = (timed(lambda: plan(x, out, choice=sm80)) if sm80 != plan.choice(n, size, size)
                              else row["int8_us"])
            row["cudnn_us"] = timed(lambda: F.conv2d(x16, w16, None, stride, padding))
            row["floor_us"] = (x.numel() + w16.numel() + out.numel()) / bw * 1e6
            if sweep:
                specs = sweep_kernels(plan, co)
                assert len({label(s) for s in specs}) == len(specs), "two kernels share a sweep label"
                times = {label(spec): timed(lambda: plan(x, out, choice=spec)) for spec in specs}
                best = min(times, key=lambda key: times[key])
                row["sweep"], row["best"] = times, (best, times[best])
            rows.append(row)
            print(_fmt(row), flush=True)
        del plan, w16
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9, "rows": rows,
            "host_overhead_us_per_call": host_overhead_us(), "summary": summary(rows)}


def sweep_kernels(plan, co: int) -> list:
    """Every catalog kernel that can run this plan's convolution (the one its kernels run: an RGB
    input's folded, conv.py)."""
    specs = [s for s in catalog(plan.target_sm, "conv2d_int8") if s.supports_channels(plan.padded_channels, co)]
    if plan.sm90_fits:
        specs += [s for s in catalog(plan.target_sm, "conv2d_int8_sm90")
                  if s.supports_channels(plan.padded_channels, co) and s.runs_geometry(*plan.kernel_geometry)]
    return specs


def host_overhead_us() -> float:
    """Host time of one warm plan call with out= given (checks, Params, launch)."""
    plan = make_plan(64, 64, 3, 1, 1)
    x = torch.randint(-128, 128, (1, 56, 56, 64), dtype=torch.int8, device="cuda")
    out = torch.empty_like(x)
    return host_us(lambda: plan(x, out))


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
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s; times in us; "
          f"host overhead {result['host_overhead_us_per_call']:.1f} us per plan call")
    print(HEADER)
    for r in result["rows"]:
        print(_fmt(r))
    for n, s in result["summary"].items():
        sweep = f", best-of-sweep {s['best_of_sweep_vs_cudnn']:.2f}x" if "best_of_sweep_vs_cudnn" in s else ""
        print(f"batch {n:>3}: int8 vs cuDNN FP16 {s['int8_vs_cudnn']:.2f}x (geomean{sweep}), int8/floor "
              f"{s['int8_over_floor']:.2f}x; ResNet-50 convolutions {s['network_int8_us']:.0f} us int8 against "
              f"{s['network_cudnn_us']:.0f} us cuDNN FP16")
        print(f"           on the CUTLASS 2.x kernels alone: network {s['network_sm80_us']:.0f} us")


if __name__ == "__main__":
    main()
