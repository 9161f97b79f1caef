"""W8A8 decode (M <= 16): the fused quantize + GEMV kernel (W8A8GemvSpec) against today's two-kernel
path (act_quant, then the swapped Sm90 GEMM), cuBLAS FP16 and the bandwidth floor.

    python benchmarks/bench_w8a8.py --decode [--decode-sweep] [--nk NxK ...] [--m M ...] [--json out.json]

Every time is GPU time per call under CUDA-graph replay with the layer's weights rotated through at
least 4x the L2 size (qgemm/bench/timing.py); `fused_warm_us` repeats one copy (L2-warm).
"""
from __future__ import annotations

import dataclasses
import json
import math

import torch

import qgemm
from qgemm.w8a8 import heuristics
from qgemm.w8a8.gemv import gemv_applies
from qgemm.bench.timing import copy_bandwidth, geomean, l2_bytes, rotation_count, timed, timed_rotating

DECODE_MS = [1, 4, 16]


def _ratio(a, b):
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _weights(w: torch.Tensor, copies: int, make):
    return [make(w) for _ in range(copies)]


DECODE_CTAS_PER_SM = (1, 2, 4)
DECODE_SWEEP_MS = (1, 16)  # the ends of the decode range (the variant boundary sits between them)


def _vector_bytes(n: int, k: int, scheme: str) -> int:
    """The weight's per-block vectors the kernel reads besides the int8 weight (block 128)."""
    blocks = k // 128
    return 3 * 4 * n * blocks if scheme == "asymmetric" else 4 * -(-n // 128) * blocks


def decode_shape(n: int, k: int, ms, bw: float, sweep: bool, l2_prefetch=()) -> list[dict]:
    """Per scheme: `fused` = plan(x) with launch_mode "auto" (M <= heuristics.W8A8_GEMV_MAX_M runs
    the fused W8A8GemvSpec kernel), `today` = plan(x) with launch_mode "sm90" (act_quant, then the
    swapped Sm90 GEMM), cuBLAS FP16, and two floors: the issue's (int8 x + int8 weight + FP16 out)
    and the same plus the weight's per-block vectors (asymmetric: sw, ow, v = 12 bytes per column
    and block, ~9% of the weight at block 128). With `sweep`, every variant x CTAs per SM; per byte
    count in `l2_prefetch`, the fused kernel's choice with that L2 prefetch (W8A8GemvChoice.l2_prefetch)."""
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
    copies = rotation_count(n * k)
    copies16 = rotation_count(2 * n * k)
    w16 = [w.half() for _ in range(copies16)]
    rows = []
    for scheme in ("symmetric", "asymmetric"):
        weights = _weights(w, copies, lambda w: qgemm.W8A8Weight.from_float(w, 128, scheme=scheme))
        fused = [qgemm.W8A8GemmPlan(x, out_dtype=torch.float16) for x in weights]
        today = [qgemm.W8A8GemmPlan(x, out_dtype=torch.float16, launch_mode="sm90") for x in weights]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16) + 0.2
            row = {"scheme": scheme, "m": m, "n": n, "k": k, "copies": copies}
            row["fused_us"] = timed_rotating([lambda p=p: p(x) for p in fused])
            row["fused_warm_us"] = timed(lambda: fused[0](x))
            row["today_us"] = timed_rotating([lambda p=p: p(x) for p in today])
            row["fp16_us"] = timed_rotating([lambda v=v: x @ v.t() for v in w16])
            row["floor_us"] = (m * k + n * k + 2 * m * n) / bw * 1e6
            row["floor_vec_us"] = row["floor_us"] + _vector_bytes(n, k, scheme) / bw * 1e6
            if gemv_applies(fused[0], m):
                c = fused[0]._gemv.choice(m, x.dtype)
                row["kernel"] = c.spec.name
                row["slice_blocks"] = c.slice_blocks
                row["fused_GBps"] = (n * k + _vector_bytes(n, k, scheme)) / (row["fused_us"] * 1e-6) / 1e9
                for nbytes in l2_prefetch:
                    cp = dataclasses.replace(c, l2_prefetch=nbytes)
                    row[f"l2p{nbytes >> 10}k_us"] = timed_rotating([lambda p=p, cp=cp: p._call_gemv(x, None, m, choice=cp)
                                                                   for p in fused])
            if sweep and m in DECODE_SWEEP_MS:
                row["sweep"] = {}
                for variant, config in heuristics.W8A8_GEMV_VARIANTS.items():
                    # Cluster variants: their split is fixed (K in 8 slices); others over CTAs per SM.
                    for cps in ((DECODE_CTAS_PER_SM[0],) if config.get("cluster") else DECODE_CTAS_PER_SM):
                        try:
                            c = fused[0]._gemv.choice(m, x.dtype, variant=variant, ctas_per_sm=cps)
                        except ValueError:
                            continue  # a cluster variant where K does not fit 8 slices, or not sm90
                        t = timed_rotating([lambda p=p, c=c: p._call_gemv(x, None, m, choice=c) for p in fused])
                        row["sweep"][variant if config.get("cluster") else f"{variant}/cps{cps}"] = t
            rows.append(row)
            print(_fmt_decode(row), flush=True)
        del weights, fused, today
        torch.cuda.empty_cache()
    del w16
    torch.cuda.empty_cache()
    return rows


DECODE_HEADER = (f"{'scheme':>10} {'M':>3} {'N':>6} {'K':>6} | {'fused':>7} {'today':>7} {'fp16':>7} {'floor':>7} "
                 f"{'floor+v':>7} | {'fu/fp16':>7} {'td/fp16':>7} {'fu/flr':>6} {'fu/flr+v':>8} {'GB/s':>6} | kernel")


def _fmt_decode(r: dict) -> str:
    line = (f"{r['scheme']:>10} {r['m']:>3} {r['n']:>6} {r['k']:>6} | {r['fused_us']:>7.1f} {r['today_us']:>7.1f} "
            f"{r['fp16_us']:>7.1f} {r['floor_us']:>7.1f} {r['floor_vec_us']:>7.1f} | "
            f"{_ratio(r['fp16_us'], r['fused_us']):>6.2f}x {_ratio(r['fp16_us'], r['today_us']):>6.2f}x "
            f"{_ratio(r['fused_us'], r['floor_us']):>6.2f} {_ratio(r['fused_us'], r['floor_vec_us']):>8.2f} "
            f"{r.get('fused_GBps', math.nan):>6.0f} | {r.get('kernel', '-')} sb={r.get('slice_blocks', '-')}")
    prefetch = [key for key in r if key.startswith("l2p")]
    if prefetch:
        line += "\n      L2 prefetch: " + " ".join(f"{key[:-3]}={r[key]:.1f}" for key in prefetch)
    if "sweep" in r:
        best = min(r["sweep"], key=lambda key: r["sweep"][key] if not math.isnan(r["sweep"][key]) else math.inf)
        line += "\n      sweep: " + " ".join(f"{key}={t:.1f}" for key, t in r["sweep"].items()) + f"  best {best}"
    return line


def decode_summary(rows: list[dict], ms) -> list[str]:
    lines = ["decode geomeans over the shapes (fused = the fused kernel through plan(x); targets: >= 1.7x fp16, "
             "<= 1.2x floor):"]
    for scheme in ("symmetric", "asymmetric"):
        for m in ms:
            rs = [r for r in rows if r["m"] == m and r["scheme"] == scheme]
            if rs:
                lines.append(
                    f"  {scheme:>10} M={m:>2}: fused vs fp16 {geomean(_ratio(r['fp16_us'], r['fused_us']) for r in rs):.2f}x, "
                    f"today vs fp16 {geomean(_ratio(r['fp16_us'], r['today_us']) for r in rs):.2f}x, "
                    f"fused/floor {geomean(_ratio(r['fused_us'], r['floor_us']) for r in rs):.2f}, "
                    f"fused/(floor+vectors) {geomean(_ratio(r['fused_us'], r['floor_vec_us']) for r in rs):.2f}")
    return lines



def run_decode(args, shapes) -> None:
    bw = copy_bandwidth()
    ms = args.m or DECODE_MS
    print(DECODE_HEADER)
    rows = []
    for n, k in shapes:
        rows += decode_shape(n, k, ms, bw, args.decode_sweep, tuple(args.l2_prefetch or ()))
        with open(args.json, "w") as f:  # after every shape: a run cut short keeps what it measured
            json.dump({"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9,
                       "l2_bytes": l2_bytes(), "decode": rows}, f, indent=1)
    print(f"device {torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s; us per call, CUDA graphs, "
          f"weights rotated through >= 4x L2")
    print(DECODE_HEADER)
    for r in rows:
        print(_fmt_decode(r))
    print("\n".join(decode_summary(rows, ms)))
