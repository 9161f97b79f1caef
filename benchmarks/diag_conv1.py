"""Where ResNet-50's first convolution (3 -> 64 channels, 7x7 stride 2, folded to 16 channels, 4x4
stride 1: qgemm/conv/fold.py) spends its time: the per-call fold of the input alone, the kernel
alone on an input folded beforehand (a plan of the folded convolution), the whole plan, and cuDNN
FP16 on the original convolution.

    python benchmarks/diag_conv1.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import qgemm
from qgemm.conv.quant import ConvInt8Quant
from timing import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="diag_conv1.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    quant = ConvInt8Quant(0.02, -128, torch.rand(64) * 0.01 + 0.001, 0.05, -128, "relu")
    w_q = torch.randint(-127, 128, (64, 7, 7, 3), dtype=torch.int8, device="cuda")
    plan = qgemm.ConvInt8Plan(w_q, quant, stride=2, padding=3)
    fold = plan.fold
    folded = qgemm.ConvInt8Plan(plan.weight, quant)  # the folded convolution itself: stride 1, no padding
    w16 = torch.randn(64, 3, 7, 7, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    rows = []
    for n in (1, 64):
        x = torch.randint(-128, 128, (n, 224, 224, 3), dtype=torch.int8, device="cuda")
        x16 = torch.randn(n, 3, 224, 224, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        out_hw = plan.output_hw(224, 224)
        xf = fold.input(x, out_hw, -128)
        row = {"n": n, "fold_us": timed(lambda: fold.input(x, out_hw, -128)),
               "kernel_us": timed(lambda: folded(xf)), "plan_us": timed(lambda: plan(x)),
               "cudnn_us": timed(lambda: F.conv2d(x16, w16, None, 2, 3)),
               "kernel": str(folded.choice(n, *xf.shape[1:3]).name)}
        rows.append(row)
        print(row, flush=True)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
