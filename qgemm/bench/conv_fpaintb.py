"""`qgemm bench conv_fpaintb`: FpA x IntB conv2d (16-bit activations x INT4/INT8 filters) against
cuDNN on ResNet-50's convolutions.

Shapes: conv.RESNET50 without conv1 (3 input channels: the kernels gather 8 channels at a time).
`--m` is the batch; the whole operand set of a call is rotated through >= 4x L2, as in conv.py.
Columns (microseconds per call, CUDA-graph replay):
  int4_us    qgemm FpAIntBConvPlan, INT4 filter with block-32 scale and offset, NHWC in and out,
             bias, ReLU (heuristics.fpaintb_conv_choice; the primary)
  int8_us    the same with an INT8 filter, one scale and offset per output channel
  cudnn_us   F.conv2d in --dtype, channels_last, bias, then ReLU (the baseline)
  floor4_us  INT4 filter + scales and offsets + 16-bit input and output bytes over the copy bandwidth
"""
from __future__ import annotations

import torch

import qgemm

from . import peers
from .conv import RESNET50
from .conv import parse_shape as _parse_conv_shape
from ._family import ratio
from .timing import rotated_and_warm, rotation_count, timed_rotating

SHAPES = [s for s in RESNET50 if s[2] % 8 == 0]
MS = [1, 64]  # batch sizes
WIDTHS = ((4, 32), (8, -1))  # (bits, block size): INT4 block 32, INT8 per output channel

PRIMARY, BASELINE, M_LABEL = "int4_us", "cudnn_us", "batch"
COLUMNS = [("int4_us", "int4"), ("int8_us", "int8"), ("cudnn_us", "cudnn"), ("floor4_us", "floor4")]
WARM_COLUMNS = [("int4_warm_us", "int4 warm"), ("cudnn_warm_us", "cud warm")]


def parse_shape(text: str) -> tuple:
    shape = _parse_conv_shape(text, RESNET50)
    if shape[2] % 8:
        raise ValueError(f"--shapes: the FpA x IntB conv needs in channels a multiple of 8, got {shape[2]} "
                         f"in {text!r}")
    return shape


def shape_label(shape) -> str:
    return shape[0]


def kernel_label(choice) -> str:
    tm, tn, _ = choice.spec.tile
    return f"{tm}x{tn}" + (f"c{choice.ctas_per_sm:g}" if choice.ctas_per_sm else "")


def run(shapes, ms, *, dtype: str, warm: bool, bandwidth: float, hook=None):
    """Yields one row per (layer, batch) as it is timed. hook(row, plans={4: plan, 8: plan}, x=) runs
    before each row is yielded (benchmarks/bench_conv_fpaintb.py's kernel sweep)."""
    dt = peers.DTYPES[dtype]
    torch.backends.cudnn.benchmark = True
    for name, size, ci, co, k, stride, padding, count in shapes:
        torch.manual_seed(0)
        ho = (size + 2 * padding - k) // stride + 1
        for n in ms:
            x_bytes, out_bytes = 2 * n * size * size * ci, 2 * n * ho * ho * co
            w4_bytes = co * ci * k * k // 2 + 2 * 2 * co * (ci // 32)
            copies = {4: rotation_count(x_bytes + out_bytes + w4_bytes),
                      8: rotation_count(x_bytes + out_bytes + co * ci * k * k)}
            copies16 = rotation_count(x_bytes + out_bytes + 2 * co * ci * k * k)
            ws = [torch.randn(co, ci, k, k, device="cuda") * 0.05 for _ in range(max(copies.values()))]
            bias = torch.randn(co, device="cuda", dtype=dt)
            plans = {bits: [qgemm.FpAIntBConvPlan(qgemm.IntConvWeight.from_float(ws[i], bits, block), act_dtype=dt,
                                                  bias=bias, activation="relu", stride=stride, padding=padding)
                            for i in range(copies[bits])] for bits, block in WIDTHS}
            xs = [torch.randn(n, size, size, ci, device="cuda", dtype=dt)
                  for _ in range(max(copies16, *copies.values()))]
            w16 = [ws[i % len(ws)].to(dt).to(memory_format=torch.channels_last) for i in range(copies16)]
            row = {"shape": name, "m": n, "name": name, "n": n, "h": size, "ci": ci, "co": co, "k": k,
                   "stride": stride, "count": count, "copies": copies[4]}
            for bits, ps in plans.items():
                fns = [lambda p=p, x=x: p(x) for p, x in zip(ps, xs)]
                if bits == 4:
                    row["int4_us"], row["int4_warm_us"] = rotated_and_warm(fns, warm)
                else:
                    row["int8_us"] = timed_rotating(fns)
                row[f"int{bits}_kernel"] = kernel_label(ps[0].choice(n, size, size))
            # channels_last NCHW views of the same NHWC memory
            row["cudnn_us"], row["cudnn_warm_us"] = rotated_and_warm(
                [peers.cudnn_conv2d(x.permute(0, 3, 1, 2), w, bias, stride, padding, relu=True)
                 for x, w in zip(xs, w16)], warm)
            row["floor4_us"] = peers.floor_us(w4_bytes + x_bytes + out_bytes, bandwidth)
            if not warm:
                del row["int4_warm_us"], row["cudnn_warm_us"]
            row["speedup_vs_fp16"] = ratio(row["cudnn_us"], row["int4_us"])
            if hook:
                hook(row, plans={bits: ps[0] for bits, ps in plans.items()}, x=xs[0])
            yield row
            ws = plans = xs = w16 = None  # free them before the next shape
            torch.cuda.empty_cache()
