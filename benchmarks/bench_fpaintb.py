"""FpA x IntB (W4A16 / W8A16) against cuBLAS FP16/BF16 and torch's int4 tinygemm, in one run.

    python benchmarks/bench_fpaintb.py [--sweep [sm90|sm80|all]] [--sweep-match REGEX] [--json out.json]
                                       [--quick] [--nk KxN ...] [--m M ...] [--no-bf16] [--decode]

The table is `qgemm bench fpaintb` (qgemm/bench/fpaintb.py) with the BF16 columns, printed in this
script's long-standing layout; the kernel sweeps (--sweep) are tuning tools and live here only.

Every time is GPU time per call (microseconds) under CUDA-graph replay with the layer's weights
rotated through at least 4x the L2 size (qgemm/bench/timing.py bench_graph_rotating: a model's
consecutive layers never find their weights in L2). Columns:
  int4      qgemm plan, INT4 weights, group 128, symmetric, FP16 activations (its own choice: on sm90
            the Sm90 kernel from heuristics.FPAINTB_SM90_MIN_M rows)
  i4sm80    the same plan with sm90=False (the Sm80 kernels and dequantize + cuBLAS)
  int8      qgemm, INT8 weights, one scale per output channel, FP16 activations
  cublas    torch.matmul with the FP16 weight (cuBLAS)
  bf16      qgemm INT4 group 128 with BF16 activations; cub16: cuBLAS BF16 (ratio column bf/c)
  tinygemm  torch._weight_int4pack_mm, BF16 activations, INT4 group 128
  floor4    INT4 weight + scale + activation + output bytes over the measured copy bandwidth
Ratios: cublas / int4, tinygemm / int4 (> 1: qgemm faster), int4 / floor4, cublas / int8, cuBLAS BF16 /
qgemm BF16.
--sweep sm90 times every Sm90 catalog kernel plus the sweep-only configurations
(cutlass_gen/families/fpaintb.py FPAINTB_SM90_SWEEP_CONFIGS, clusters included) with stream-K split
counts, for INT4 and INT8 (FP16 activations): the data heuristics.FPAINTB_SM90_* are set from;
--sweep-match keeps the Sm90 kernels whose label matches; --sweep-knobs adds raster orders and swizzles,
--sweep-dequant dequantize + cuBLAS, --sweep-decomposition forced data-parallel (label ...dp) and
forced stream-K (...skall) beside CUTLASS's heuristic decomposition (sk0). Each row's swept times print
on the line after it.
--sweep sm80 times the tiled GEMM's shapes and split-K counts, the small-M kernel and the dequantize path
(the table heuristics.fpaintb_choice was set from). Kernel labels:
s90<tile>[k128][pp][c<cluster>][so][ah][sk<splits>][r<raster>w<swizzle>] Sm90 kernel (k128 128-deep K tiles,
pp ping-pong, c2x1 a cluster of 2 along the weight rows, so scale-only (symmetric weights), ah qgemm's
consumer loop, sk stream-K (dp / skall: forced data-parallel / stream-K), r1/r2 raster along M/N and w
the max swizzle: --sweep-knobs),
g<tile>s<stages>c<CTAs per SM> tiled GEMM, m<rows>n<cols>wk<warps>... small-M kernel (...s: its decode
variant, FpAIntBGemvSpec stream=True), dequant+cuBLAS.
--decode (M = 1, 4, 16 unless --m): the decode table of issue 16 instead: per shape and M, INT4 group 128
and INT8 per channel (FP16) with the path before the decode variant ("old": the B-operand small-M kernel
or the 16-row tiled GEMM, as heuristics chose it), every decode-variant configuration of the catalog and
of the sweep list (16-token CTAs wider than the catalog's), the plan's own choice, BF16 INT4 (plan)
against cuBLAS BF16, tinygemm, cuBLAS FP16 and the INT4 / INT8 floors; the summary gives geomeans against
cuBLAS and tinygemm and the fraction of copy bandwidth, per M and configuration.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re

import torch

from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.families.fpaintb import (FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec,
                                         fpaintb_sm90_specs)
from qgemm import bench
from qgemm.fpaintb import heuristics
from qgemm.bench import report
from qgemm.bench.fpaintb import MS, SHAPES as SHAPES_KN, label
import qgemm
from qgemm.bench.peers import tinygemm_int4 as tinygemm
from qgemm.bench.timing import copy_bandwidth, geomean, l2_bytes, rotation_count, timed_rotating

SM90_SPLITS = (0, 2, 4)  # stream-K kernels: CUTLASS's heuristic decomposition, then split-K slices
# --sweep-decomposition: stream-K kernels without slices also forced data-parallel and forced stream-K (ext[5])
SM90_DECOMPOSITIONS = (heuristics.DECOMPOSITION_DATA_PARALLEL, heuristics.DECOMPOSITION_STREAM_K)
# --sweep-knobs: (raster order, max swizzle) beside CUTLASS's heuristic raster and swizzle 1 (ext[2], ext[3])
SM90_KNOBS = [(r, w) for r in (1, 2) for w in (1, 2, 4, 8)]


# Tiled GEMM shapes the sweep times, by the largest M they serve: (tile, warp, stages).
GEMM_SWEEP = [
    (16, [((16, 64, 128), (16, 16), 4), ((16, 128, 128), (16, 32), 4), ((16, 128, 128), (16, 32), 6),
          ((16, 128, 256), (16, 32), 3), ((16, 256, 128), (16, 32), 3)]),
    (64, [((32, 128, 128), (32, 32), 3), ((64, 128, 64), (32, 64), 4), ((64, 128, 64), (32, 64), 3),
          ((64, 64, 64), (32, 32), 4)]),
    (256, [((64, 128, 64), (32, 64), 4), ((128, 128, 64), (64, 32), 3), ((128, 128, 64), (64, 32), 4),
           ((128, 64, 64), (64, 32), 4)]),
    (None, [((128, 128, 64), (64, 32), 3)]),
]
STREAMK_CTAS_PER_SM = (0, 1, 2, 3, 4, 8)  # 0: one CTA per output tile; 8: as many as fit


def sweep_choices(bits: int, m: int, n: int, k: int, sm_count: int) -> list:
    """Kernels worth timing for M rows: the small-M kernel the heuristic would take up to 64 rows,
    tiled GEMMs one CTA per tile and stream-K over 1 to 8 CTAs per SM, and from 256 rows
    dequantize + cuBLAS."""
    choices = []
    if m <= 64:
        # (the configurations the small-M kernel's own sweep found best for these rows)
        gemv = heuristics.FPAINTB_DECODE if m <= 8 else dict(m_tiles=1, n_tiles=4, warps_k=4) if m <= 16 else dict(
            m_tiles=2, n_tiles=4, warps_k=2)
        choices.append(heuristics.FpAIntBChoice(FpAIntBGemvSpec("f16", bits, **gemv)))
    configs = next(c for limit, c in GEMM_SWEEP if limit is None or m <= limit)
    for tile, warp, stages in configs:
        try:
            spec = FpAIntBGemmSpec("f16", bits, tile, warp, stages)
        except ValueError:  # more shared memory than an sm_8x GPU allows (int8 codes are twice as large)
            continue
        raster = min(heuristics.FPAINTB_RASTER_GROUP, -(-m // tile[0]))
        tiles = -(-m // tile[0]) * -(-n // tile[1])
        # (Stream-K only where the tiles alone leave the GPU short of a few waves.)
        choices += [heuristics.FpAIntBChoice(spec, c, raster) for c in STREAMK_CTAS_PER_SM
                    if c == 0 or tiles < 4 * c * sm_count]
    if m >= 256:
        choices.append(heuristics.FpAIntBChoice(FpAIntBDequantSpec("f16", bits)))
    return choices


def sm90_sweep_choices(bits: int, match: str | None = None, knobs: bool = False,
                       decompositions: bool = False) -> list:
    """Every Sm90 kernel of the catalog and of the sweep list (FP16), stream-K ones with split counts;
    with match, only those whose label the regular expression matches. knobs: each matched kernel
    without a split also with every raster order along M or N and swizzle (SM90_KNOBS: run-time
    arguments, no other build). decompositions: stream-K kernels also forced data-parallel and forced
    stream-K (SM90_DECOMPOSITIONS; labels ending dp and skall instead of sk0)."""
    choices = []
    for spec in fpaintb_sm90_specs("f16", bits, sweep=True):
        splits = SM90_SPLITS if spec.scheduler == "streamk" else (0,)
        choices += [heuristics.FpAIntBSm90Choice(spec, splits=sk) for sk in splits]
        if decompositions and spec.scheduler == "streamk":
            choices += [heuristics.FpAIntBSm90Choice(spec, decomposition=d) for d in SM90_DECOMPOSITIONS]
    choices = [c for c in choices if match is None or re.search(match, label(c))]
    if knobs:
        choices += [dataclasses.replace(c, raster=r, swizzle=w) for c in list(choices) if c.splits == 0
                    for r, w in SM90_KNOBS]
    return choices


def run(shapes, ms, sweep: str | None, bf16: bool = True, sweep_bits=(4, 8), sweep_match: str | None = None,
        sweep_knobs: bool = False, sweep_dequant: bool = False, sweep_decomposition: bool = False) -> dict:
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    unbuilt = set()
    if sweep:  # build the sweep's kernels in parallel up front (many are outside the catalog)
        specs = set()
        if sweep in ("sm80", "all"):
            specs |= {c.spec for bits in sweep_bits for m in ms for k, n in shapes
                      for c in sweep_choices(bits, m, n, k, sm_count)}
        if sweep in ("sm90", "all") and on_sm90:
            specs |= {c.spec for bits in sweep_bits for c in sm90_sweep_choices(bits, sweep_match)}
            if sweep_dequant:
                specs |= {FpAIntBDequantSpec("f16", bits) for bits in sweep_bits}
        target = 90 if on_sm90 else 80
        try:
            build_many(sorted(specs, key=lambda s: s.name), target, jobs=16, progress=lambda line: None)
        except Exception as e:  # time what did build; the table says which failed
            unbuilt = {s.name for s in specs if find_artifact(s, target) is None}
            print(f"  ({len(unbuilt)} sweep kernels failed to build, skipped: {str(e).splitlines()[0][:200]})")

    def sweep_row(row, plans, x):
        """Every kernel configuration of the sweep, forced by choice= on the row's plans and input."""
        m, n, k = row["m"], row["n"], row["k"]
        for bits, ps in plans.items():
            if bits not in sweep_bits:
                continue
            choices = []
            if sweep in ("sm80", "all"):
                choices += sweep_choices(bits, m, n, k, sm_count)
            if sweep in ("sm90", "all") and on_sm90:
                choices += sm90_sweep_choices(bits, sweep_match, sweep_knobs, sweep_decomposition)
                if sweep_dequant:
                    choices.append(heuristics.FpAIntBChoice(FpAIntBDequantSpec("f16", bits)))
            sweep_times = {}
            for choice in [c for c in choices if c.spec.name not in unbuilt]:
                sweep_times[label(choice)] = timed_rotating([lambda p=p, c=choice: p(x, choice=c) for p in ps])
            timed_ok = {key: v for key, v in sweep_times.items() if v == v}
            best = min(timed_ok, key=lambda key: timed_ok[key]) if timed_ok else "none"
            row[f"int{bits}_sweep"] = sweep_times
            row[f"int{bits}_best"] = (best, timed_ok.get(best, float("nan")))

    result = bench.run("fpaintb", shapes, ms, dtype="f16", bf16_columns=bf16, hook=sweep_row if sweep else None,
                       progress=lambda row: print(_fmt(row) + _fmt_sweep(row), flush=True))
    legacy = summary(result["rows"])
    for m, values in legacy.items():
        result["summary"].setdefault(str(m), {}).update(values)
    result.update(l2_MiB=result["l2_bytes"] >> 20,
                  host_overhead_us_per_call=result["extras"].get("host_overhead_us_per_call", float("nan")))
    return result


def old_decode_choice(m: int, n: int, k: int, bits: int, sm_count: int):
    """The Sm80-path choice for M rows before the decode variant (heuristics.fpaintb_choice as it was):
    the B-operand small-M kernel up to 8 rows (INT4 only up to N = FPAINTB_GEMV_MAX_N), else the tiled GEMM."""
    if m <= heuristics.FPAINTB_GEMV_MAX_M[bits] and (bits == 8 or n <= heuristics.FPAINTB_GEMV_MAX_N):
        return heuristics.FpAIntBChoice(FpAIntBGemvSpec("f16", bits, **heuristics.FPAINTB_DECODE))
    return heuristics.fpaintb_gemm_choice(m, n, k, bits, "f16", 80, sm_count)


def run_decode(shapes, ms, bf16: bool = True, l2_prefetch=(), plan_only: bool = False, match: str | None = None) -> dict:
    """Issue 16's decode table (module docstring, --decode). l2_prefetch: byte counts to time the
    plan's decode-variant choice with (FpAIntBChoice.l2_prefetch); plan_only: no old path and no
    per-configuration columns; match: only the configuration columns whose label matches this regex."""
    from cutlass_gen.families.fpaintb import fpaintb_stream_configs
    torch.manual_seed(0)
    bw = copy_bandwidth()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    # every configuration one CTA per output tile and split-K (ctas_per_sm as the heuristic gives it)
    split = heuristics.FPAINTB_STREAM_CTAS_PER_SM or 8
    target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
    stream = {bits: [heuristics.FpAIntBChoice(FpAIntBGemvSpec("f16", bits, **{"arch": 80, **c}), ctas)
                     for c in fpaintb_stream_configs(bits, sweep=True, target_sm=target) for ctas in (0, split)]
              for bits in (4, 8)}
    if match:
        stream = {bits: [c for c in cs if re.search(match, label(c))] for bits, cs in stream.items()}
    specs = set() if plan_only else {c.spec for cs in stream.values() for c in cs}
    if not plan_only:
        specs |= {old_decode_choice(m, n, k, bits, sm_count).spec for m in ms for k, n in shapes for bits in (4, 8)}
    build_many(sorted(specs, key=lambda s: s.name), target, jobs=16, progress=lambda line: None)
    rows = []
    for k, n in shapes:
        copies4, copies8, copies16 = rotation_count(n * k // 2), rotation_count(n * k), rotation_count(2 * n * k)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies16)]
        plans = {4: [qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(ws[i % copies16], 4, 128), sm90=False)
                     for i in range(copies4)],
                 8: [qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(ws[i % copies16], 8, -1), sm90=False)
                     for i in range(copies8)]}
        plans_bf16 = ([qgemm.FpAIntBPlan(p.weight, act_dtype=torch.bfloat16, sm90=False) for p in plans[4]]
                      if bf16 else [])
        wb = [w.to(torch.bfloat16) for w in ws] if bf16 else []
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            row = {"m": m, "n": n, "k": k}
            for bits, ps in plans.items():
                old = old_decode_choice(m, n, k, bits, sm_count)
                times = {}
                if not plan_only:
                    times["old:" + label(old)] = timed_rotating([lambda p=p: p(x, choice=old) for p in ps])
                for c in () if plan_only else stream[bits]:
                    times[label(c)] = timed_rotating([lambda p=p, c=c: p(x, choice=c) for p in ps])
                times["plan:" + label(ps[0].choice(m))] = timed_rotating([lambda p=p: p(x) for p in ps])
                chosen = ps[0].choice(m)
                for nbytes in l2_prefetch if getattr(chosen.spec, "stream", False) else ():
                    c = dataclasses.replace(chosen, l2_prefetch=nbytes)
                    times[f"plan+l2p{nbytes >> 10}k"] = timed_rotating([lambda p=p, c=c: p(x, choice=c) for p in ps])
                row[f"int{bits}"] = times
            row["cublas_us"] = timed_rotating([lambda v=v: torch.matmul(x, v.t()) for v in ws])
            xb = x.to(torch.bfloat16)
            if bf16:
                row["bf16_us"] = timed_rotating([lambda p=p: p(xb) for p in plans_bf16])
                row["cublas_bf16_us"] = timed_rotating([lambda v=v: torch.matmul(xb, v.t()) for v in wb])
            row["tinygemm_us"] = timed_rotating([tinygemm(xb, n, k) for _ in range(copies4)])
            act_bytes = m * k * 2 + m * n * 2
            row["floor4_us"] = (n * k // 2 + (k // 128) * n * 2 + act_bytes) / bw * 1e6
            row["floor8_us"] = (n * k + n * 2 + act_bytes) / bw * 1e6
            rows.append(row)
            print(_fmt_decode(row), flush=True)
        del ws, plans, plans_bf16, wb
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9, "l2_MiB": l2_bytes() >> 20,
            "rows": rows, "summary": decode_summary(rows)}


def _fmt_decode(r: dict) -> str:
    parts = [f"M={r['m']:>3} K={r['k']:>6} N={r['n']:>6} | cuBLAS {r['cublas_us']:.1f} tinygemm {r['tinygemm_us']:.1f} "
             f"floor4 {r['floor4_us']:.1f} floor8 {r['floor8_us']:.1f}"]
    if "bf16_us" in r:
        parts.append(f"bf16 {r['bf16_us']:.1f} (cuBLAS BF16 {r['cublas_bf16_us']:.1f})")
    for bits in (4, 8):
        parts.append(f"int{bits}: " + ", ".join(f"{key} {v:.1f}" for key, v in r[f"int{bits}"].items()))
    return " | ".join(parts)


def decode_summary(rows) -> dict:
    """Per M and INT4/INT8 configuration: geomeans of cuBLAS / time, tinygemm / time and floor / time
    (the fraction of copy bandwidth); BF16 plan against cuBLAS BF16."""
    out = {}
    for m in sorted({r["m"] for r in rows}):
        sel = [r for r in rows if r["m"] == m]
        entry = {}
        for bits in (4, 8):
            floor = f"floor{bits}_us"
            keys = {key.split(":")[0] if ":" in key else key for key in sel[0][f"int{bits}"]}
            for key in sorted(keys):
                def t(r, key=key):
                    return next(v for kk, v in r[f"int{bits}"].items() if kk == key or kk.startswith(key + ":"))
                entry[f"int{bits} {key}"] = {
                    "vs_cublas": geomean([r["cublas_us"] / t(r) for r in sel]),
                    "vs_tinygemm": geomean([r["tinygemm_us"] / t(r) for r in sel]) if bits == 4 else None,
                    "of_bandwidth": geomean([r[floor] / t(r) for r in sel])}
        if "bf16_us" in sel[0]:
            entry["bf16 plan"] = {"vs_cublas_bf16": geomean([r["cublas_bf16_us"] / r["bf16_us"] for r in sel])}
        out[m] = entry
    return out


def summary(rows) -> dict:
    out = {}
    for m in sorted({r["m"] for r in rows}):
        sel = [r for r in rows if r["m"] == m]
        out[m] = {"int4_vs_cublas": geomean([r["cublas_us"] / r["int4_us"] for r in sel]),
                  "int4_vs_tinygemm": geomean([r["tinygemm_us"] / r["int4_us"] for r in sel]),
                  "int8_vs_cublas": geomean([r["cublas_us"] / r["int8_us"] for r in sel]),
                  "int4_over_floor": geomean([r["int4_us"] / r["floor4_us"] for r in sel]),
                  "int4_sm80_vs_cublas": geomean([r["cublas_us"] / r["int4_sm80_us"] for r in sel if "int4_sm80_us" in r]),
                  "bf16_vs_cublas_bf16": geomean([r["cublas_bf16_us"] / r["bf16_us"] for r in sel if "bf16_us" in r])}
    return out


HEADER = (f"{'M':>5} {'K':>6} {'N':>6} | {'int4':>8} {'i4sm80':>8} {'int8':>8} {'cublas':>8} {'bf16':>8} {'cub16':>8} "
          f"{'tinygemm':>8} {'floor4':>7} | {'cub/i4':>6} {'tg/i4':>6} {'i4/fl':>6} {'cub/i8':>6} {'bf/c':>6} | "
          f"kernels int4, int8, bf16")


def _fmt_sweep(r: dict) -> str:
    """Every swept kernel's time, on the row's next line (empty without --sweep)."""
    return "".join(f"\n      int{bits} sweep: " + " ".join(f"{key} {v:.1f}" for key, v in r[f"int{bits}_sweep"].items())
                   for bits in (4, 8) if f"int{bits}_sweep" in r)


def _fmt(r: dict) -> str:
    nan = float("nan")
    best = ""
    for bits in (4, 8):
        if f"int{bits}_best" in r:
            best += f" | best int{bits} {r[f'int{bits}_best'][0]} {r[f'int{bits}_best'][1]:.1f}"
    sm80, bf, cb = r.get("int4_sm80_us", nan), r.get("bf16_us", nan), r.get("cublas_bf16_us", nan)
    return (f"{r['m']:>5} {r['k']:>6} {r['n']:>6} | {r['int4_us']:>8.1f} {sm80:>8.1f} {r['int8_us']:>8.1f} "
            f"{r['cublas_us']:>8.1f} {bf:>8.1f} {cb:>8.1f} {r['tinygemm_us']:>8.1f} {r['floor4_us']:>7.1f} | "
            f"{r['cublas_us'] / r['int4_us']:>5.2f}x {r['tinygemm_us'] / r['int4_us']:>5.2f}x "
            f"{r['int4_us'] / r['floor4_us']:>5.2f}x {r['cublas_us'] / r['int8_us']:>5.2f}x {cb / bf:>5.2f}x | "
            f"{r['int4_kernel']}, {r['int8_kernel']}, {r.get('bf16_kernel', '-')}{best}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_fpaintb.json")
    ap.add_argument("--sweep", nargs="?", const="sm90", choices=("sm90", "sm80", "all"),
                    help="also time every kernel configuration of that path (default sm90)")
    ap.add_argument("--no-bf16", action="store_true", help="skip the BF16 columns")
    ap.add_argument("--sweep-bits", type=int, action="append", choices=(4, 8),
                    help="sweep only these weight widths (default both)")
    ap.add_argument("--sweep-match", metavar="REGEX",
                    help="--sweep sm90: only the kernels whose label matches, e.g. 'c2x1|s90128x128sk0'")
    ap.add_argument("--sweep-knobs", action="store_true",
                    help="--sweep sm90: also each matched kernel without a split under every raster order and swizzle")
    ap.add_argument("--sweep-dequant", action="store_true", help="--sweep sm90: also dequantize + cuBLAS")
    ap.add_argument("--sweep-decomposition", action="store_true",
                    help="--sweep sm90: also each stream-K kernel forced data-parallel (dp) and forced stream-K (skall)")
    ap.add_argument("--quick", action="store_true", help="first shape only")
    ap.add_argument("--nk", action="append", metavar="KxN", help="only these (K, N) shapes, e.g. 4096x12288")
    ap.add_argument("--m", action="append", type=int, help="only these M")
    ap.add_argument("--decode", action="store_true", help="issue 16's decode table (M = 1, 4, 16 unless --m)")
    ap.add_argument("--l2-prefetch", type=int, action="append", metavar="BYTES",
                    help="--decode: also time the plan's decode-variant choice with this L2 prefetch per CTA")
    ap.add_argument("--plan-only", action="store_true", help="--decode: only the plan and the peers")
    ap.add_argument("--decode-match", metavar="REGEX",
                    help="--decode: only the configuration columns whose label matches, e.g. 'b[0-9]s$'")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.nk] if args.nk else SHAPES_KN
    if args.decode:
        result = run_decode(shapes[:1] if args.quick else shapes, args.m or [1, 4, 16], not args.no_bf16,
                            tuple(args.l2_prefetch or ()), args.plan_only, args.decode_match)
        with open(args.json, "w") as f:  # not a qgemm.bench table: plain JSON
            json.dump(result, f, indent=1, default=str)
        print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s, L2 "
              f"{result['l2_MiB']} MiB (weights rotated through >= 4x); times in us (CUDA graphs)")
        for m, entry in result["summary"].items():
            for key, v in entry.items():
                print(f"M={m:>3} {key:<40} " + ", ".join(f"{kk} {vv:.2f}" for kk, vv in v.items() if vv is not None))
        return
    print(HEADER)
    result = run(shapes[:1] if args.quick else shapes, args.m or MS, args.sweep, not args.no_bf16,
                 tuple(args.sweep_bits or (4, 8)), args.sweep_match, args.sweep_knobs, args.sweep_dequant,
                 args.sweep_decomposition)
    report.write_json(result, args.json)
    print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s, L2 "
          f"{result['l2_MiB']} MiB (weights rotated through >= 4x); times in us; "
          f"host overhead {result['host_overhead_us_per_call']:.1f} us per plan call")
    print(HEADER)
    for r in result["rows"]:
        print(_fmt(r))
    for m, s in summary(result["rows"]).items():
        print(f"M={m:>5}: int4 vs cuBLAS {s['int4_vs_cublas']:.2f}x (Sm80 path {s['int4_sm80_vs_cublas']:.2f}x), "
              f"vs tinygemm {s['int4_vs_tinygemm']:.2f}x, int4/floor {s['int4_over_floor']:.2f}x, "
              f"int8 vs cuBLAS {s['int8_vs_cublas']:.2f}x, BF16 int4 vs cuBLAS BF16 {s['bf16_vs_cublas_bf16']:.2f}x "
              f"(geomeans)")


if __name__ == "__main__":
    main()
