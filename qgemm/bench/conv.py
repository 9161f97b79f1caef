"""`qgemm bench conv`: the int8 conv2d against cuDNN FP16/BF16 on ResNet-50's convolutions.

Shapes: the 23 distinct convolutions of ResNet-50 v1.5 (torchvision: stride 2 on the 3x3 of each
stage's first block) at 224 x 224, with how often each occurs (53 convolutions in all). `--m` is
the batch. A convolution's filter is small beside its activations (l1.reduce_in: 4 KiB against
200 KiB of input at batch 1), so here the whole operand set of a call (filter, input, output) is
rotated through >= 4x L2, not the filter alone: thousands of filter copies would be needed.
Columns (microseconds per call, CUDA-graph replay):
  int8_us    qgemm ConvInt8Plan: int8 NHWC in and out, bias, ReLU, input zero point -128 (the primary;
             conv1's RGB input is folded on each call, that copy included)
  nchw_us    the same from a contiguous NCHW int8 input (layout="nchw": one transposing copy first)
  sm80_us    the plan restricted to the CUTLASS 2.x kernels, where its own kernel is an Sm90 one
  cudnn_us   F.conv2d in --dtype, channels_last, cudnn.benchmark (the baseline)
  floor_us   int8 input + filter + output bytes over the copy bandwidth
"""
from __future__ import annotations

import torch

import qgemm

from . import peers
from ._family import parse_ints, ratio
from .timing import host_us, rotated_and_warm, rotation_count, timed_rotating

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
SHAPES = RESNET50
MS = [1, 64]  # batch sizes
INPUT_ZERO = -128

PRIMARY, BASELINE, M_LABEL = "int8_us", "cudnn_us", "batch"
COLUMNS = [("int8_us", "int8"), ("nchw_us", "+nchw"), ("sm80_us", "sm80"), ("cudnn_us", "cudnn"),
           ("floor_us", "floor")]
WARM_COLUMNS = [("int8_warm_us", "int8 warm"), ("cudnn_warm_us", "cud warm")]


def parse_shape(text: str, table=RESNET50) -> tuple:
    """A ResNet-50 layer name ('l3.3x3') or 'size,ci,co,k,stride,padding' (square input and filter)."""
    for layer in table:
        if layer[0] == text:
            return layer
    if "," not in text:
        raise ValueError(f"--shapes: {text!r} is no layer of {', '.join(s[0] for s in table)}, nor "
                         "'size,ci,co,k,stride,padding'")
    size, ci, co, k, stride, padding = parse_ints(text, "--shapes (size,ci,co,k,stride,padding)", 6, minimum=0)
    if min(size, ci, co, k, stride) < 1:
        raise ValueError(f"--shapes: size, ci, co, k and stride must be positive, got {text!r}")
    return (f"h{size}c{ci}o{co}k{k}s{stride}p{padding}", size, ci, co, k, stride, padding, 1)


def shape_label(shape) -> str:
    return shape[0]


def kernel_label(spec) -> str:
    """A short name for a convolution kernel (by the spec's family name, wherever its class lives)."""
    if spec.family == "conv2d_int8_sm90":
        # Every field that tells two catalog kernels apart: the sweep's times are keyed by this.
        two = f" s{spec.stages} {spec.ctas_per_sm}cta" if spec.ctas_per_sm > 1 else ""
        pingpong = " pingpong" if spec.mainloop == "pingpong" else ""
        return f"sm90 {'x'.join(map(str, spec.tile))}{two}{pingpong}"
    tile = f"{spec.tile[0]}x{spec.tile[1]}"
    return f"sm{spec.arch} {tile} a{spec.alignment}{' few' if spec.iterator == 'few_channels' else ''}"


def make_plan(ci: int, co: int, k: int, stride: int, padding: int):
    w_q = torch.randint(-127, 128, (co, k, k, ci), dtype=torch.int8, device="cuda")
    quant = qgemm.ConvInt8Quant(0.02, INPUT_ZERO, torch.rand(co) * 0.01 + 0.001, 0.05, -128, "relu")
    return qgemm.ConvInt8Plan(w_q, quant, bias=torch.randn(co, device="cuda"), stride=stride, padding=padding)


def run(shapes, ms, *, dtype: str, warm: bool, bandwidth: float, hook=None):
    """Yields one row per (layer, batch) as it is timed. hook(row, plan=, x=, out=) runs before each
    row is yielded (benchmarks/bench_conv.py's kernel sweep)."""
    dt = peers.DTYPES[dtype]
    torch.backends.cudnn.benchmark = True
    for name, size, ci, co, k, stride, padding, count in shapes:
        torch.manual_seed(0)
        probe = make_plan(ci, co, k, stride, padding)
        ho, wo = probe.output_hw(size, size)
        for n in ms:
            x_bytes, out_bytes, w_bytes = n * size * size * ci, n * ho * wo * co, co * k * k * ci
            copies = rotation_count(x_bytes + out_bytes + w_bytes)
            copies16 = rotation_count(2 * (x_bytes + out_bytes + w_bytes))
            plans = [probe] + [make_plan(ci, co, k, stride, padding) for _ in range(copies - 1)]
            xs = [torch.randint(-128, 128, (n, size, size, ci), dtype=torch.int8, device="cuda") for _ in plans]
            outs = [torch.empty((n, ho, wo, co), dtype=torch.int8, device="cuda") for _ in plans]
            x_nchw = [x.permute(0, 3, 1, 2).contiguous() for x in xs]
            x16 = [torch.randn(n, ci, size, size, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
                   for _ in range(copies16)]
            w16 = [torch.randn(co, ci, k, k, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
                   for _ in range(copies16)]
            chosen = probe.choice(n, size, size)
            row = {"shape": name, "m": n, "name": name, "n": n, "h": size, "ci": ci, "co": co, "k": k,
                   "stride": stride, "padding": padding, "count": count, "copies": copies,
                   "kernel": kernel_label(chosen)}
            calls = list(zip(plans, xs, outs))
            row["int8_us"], row["int8_warm_us"] = rotated_and_warm([lambda c=c: c[0](c[1], c[2]) for c in calls], warm)
            row["nchw_us"] = timed_rotating([lambda p=p, x=x: p(x, layout="nchw") for p, x in zip(plans, x_nchw)])
            sm80 = probe.choice(n, size, size, sm90=False)
            row["sm80_us"] = (timed_rotating([lambda c=c: c[0](c[1], c[2], choice=sm80) for c in calls])
                              if sm80 != chosen else row["int8_us"])
            row["cudnn_us"], row["cudnn_warm_us"] = rotated_and_warm(
                [peers.cudnn_conv2d(x, w, None, stride, padding) for x, w in zip(x16, w16)], warm)
            row["floor_us"] = peers.floor_us(x_bytes + w_bytes + out_bytes, bandwidth)
            if not warm:
                del row["int8_warm_us"], row["cudnn_warm_us"]
            row["speedup_vs_fp16"] = ratio(row["cudnn_us"], row["int8_us"])
            if hook:
                hook(row, plan=probe, x=xs[0], out=outs[0])
            yield row
            plans = xs = outs = x_nchw = x16 = w16 = calls = None  # free them before the next shape
            torch.cuda.empty_cache()


def host_overhead_us() -> float:
    """Host time of one warm plan call with out= given (checks, Params, launch)."""
    plan = make_plan(64, 64, 3, 1, 1)
    x = torch.randint(-128, 128, (1, 56, 56, 64), dtype=torch.int8, device="cuda")
    out = torch.empty_like(x)
    return host_us(lambda: plan(x, out))


def extras(bandwidth: float) -> dict:
    return {"host_overhead_us_per_call": host_overhead_us()}
