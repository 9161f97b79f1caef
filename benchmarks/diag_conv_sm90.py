"""Why is the Sm90 int8 conv (TMA im2col) slow on 3x3 filters? Time one kernel on variants of a
3x3 layer that each remove one suspect: the border term (input zero point 0: no table), the
padding (pad 0: TMA never fills), the filter taps (a 1x1 over R*S*C channels: the same implicit
GEMM without im2col offsets). Sm80's kernel of the same tile alongside.

    python benchmarks/diag_conv_sm90.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json

import torch

import qgemm
from cutlass_gen.catalog import catalog
from qgemm.conv.quant import ConvInt8Quant
from bench_conv import label
from timing import timed

# (name, N, H, Ci, Co, k, padding, input zero point)
VARIANTS = [
    ("3x3 pad1 Z-128", 64, 56, 64, 64, 3, 1, -128),
    ("3x3 pad1 Z0", 64, 56, 64, 64, 3, 1, 0),
    ("3x3 pad0 Z-128", 64, 58, 64, 64, 3, 0, -128),
    ("1x1 C576", 64, 56, 576, 64, 1, 0, -128),
    ("l3 3x3 pad1 Z-128", 64, 14, 256, 256, 3, 1, -128),
    ("l3 3x3 pad0 Z-128", 64, 16, 256, 256, 3, 0, -128),
    ("l3 1x1 C2304", 64, 14, 2304, 256, 1, 0, -128),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    specs = [s for s in catalog(90, "conv2d_int8_sm90")] + [
        s for s in catalog(90, "conv2d_int8") if s.alignment == 16 and s.tile[:2] in ((128, 64), (128, 128))]
    rows = []
    print(f"{'variant':20s} " + " ".join(f"{label(s):>22s}" for s in specs))
    for name, n, h, ci, co, k, pad, zero in VARIANTS:
        w_q = torch.randint(-127, 128, (co, k, k, ci), dtype=torch.int8, device="cuda")
        quant = ConvInt8Quant(0.02, zero, torch.rand(co) * 0.01 + 0.001, 0.05, -128, "relu")
        plan = qgemm.ConvInt8Plan(w_q, quant, bias=torch.randn(co, device="cuda"), padding=pad)
        x = torch.randint(-128, 128, (n, h, h, ci), dtype=torch.int8, device="cuda")
        ho, wo = plan.output_hw(h, h)
        out = torch.empty((n, ho, wo, co), dtype=torch.int8, device="cuda")
        times = {label(s): timed(lambda: plan(x, out, choice=s)) for s in specs}
        rows.append({"variant": name, "times_us": times})
        print(f"{name:20s} " + " ".join(f"{times[label(s)]:22.1f}" for s in specs), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
