"""FP8 blockwise GEMM (DeepSeek-V3 scaling) against cuBLASLt, in one run.

    python benchmarks/bench_fp8.py [--sweep] [--json out.json] [--quick]

Columns (microseconds per call, GPU time: each contender is captured 20 calls to a CUDA graph and
the graph replayed, so the host's per-call work is not counted; it is reported once, below):
  qgemm     the plan's GEMM alone (activations pre-quantized), kernel chosen by heuristics.fp8_choice
  +quant    activation quantization + GEMM (what an Fp8Linear costs per call)
  best      with --sweep: the fastest catalog kernel / stream-K split for the case, and which
  cublas_bw torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128 (cuBLASLt)
  cublas_pt torch._scaled_mm with per-tensor scales (cuBLASLt; no block scaling, for scale)
  floor     FP8 weight + FP8 activation + BF16 output bytes over the measured copy bandwidth
  eager     qgemm / cublas_bw called eagerly, one call after another (CUDA-event medians): at small
            M this is the host's per-call time, not the GPU's
Then the issue's targets: geometric-mean speedup over cublas_bw, the worst case, and how far the
M <= 128 cases are from the floor; and the activation quantization's bandwidth at M=4096, K=7168.
"""
from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F

import qgemm
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
from qgemm.fp8 import heuristics
from timing import bench, bench_graph, copy_bandwidth, host_us

SHAPES_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = [64, 128, 4096]
SPLITS = (0, 2, 4, 8)
RASTER_SWIZZLE = [(r, w) for r in (0, 1, 2) for w in (1, 4, 8)]


def sweep_choices(m: int) -> list[heuristics.Fp8Choice]:
    """Every bf16 catalog kernel; stream-K ones with each split count, and at prefill-sized M the
    persistent ones with each raster order and swizzle (run-time knobs, no extra compiles)."""
    choices = []
    for spec in catalog(90, Fp8BlockwiseGemmSpec.family):
        if spec.output != "bf16":
            continue
        if spec.scheduler == "streamk":
            choices += [heuristics.Fp8Choice(spec, splits=splits) for splits in SPLITS]
        elif m > 128:
            choices += [heuristics.Fp8Choice(spec, raster=r, swizzle=w) for r, w in RASTER_SWIZZLE]
        else:
            choices.append(heuristics.Fp8Choice(spec))
    return choices


def choice_label(c: heuristics.Fp8Choice) -> str:
    s = c.spec
    label = f"{s.tile[0]}x{s.tile[1]}{'s' if s.swap_ab else ''}/{s.schedule[:4]}/c{s.cluster[0]}x{s.cluster[1]}"
    if s.scheduler == "streamk":
        label += f"/sk{c.splits}"
    if (c.raster, c.swizzle) != (0, 1):
        label += f"/r{'hMN'[c.raster]}w{c.swizzle}"
    return label


def cublas_blockwise(x_q, sx, m, w_q, sw):
    """scaled_mm's cuBLASLt blockwise path: activation scales token-major with M padded to 4
    (our M-major layout already is), weight scales with their K blocks padded to 4."""
    pitch = sx.shape[1]
    a = x_q if pitch == m else torch.cat([x_q, x_q.new_zeros(pitch - m, x_q.shape[1])])
    kb = sw.shape[1]
    s = F.pad(sw, (0, -kb % 4)) if kb % 4 else sw
    scale_a = sx.t()  # [pitch, K/128], strides (1, pitch)
    return lambda: F.scaled_mm(a, w_q.t(), scale_a, F.ScalingType.BlockWise1x128, s.t(),
                               F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)


def host_overhead_us() -> float:
    """Host time of one warm plan.gemm call."""
    plan = qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(torch.randn(256, 256, device="cuda")))
    xa = qgemm.quantize_activations_fp8(torch.randn(1, 256, device="cuda"))
    return host_us(lambda: plan.gemm(xa))


def quant_bandwidth(bw: float) -> dict:
    m, k = 4096, 7168
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    us = bench_graph(lambda: qgemm.quantize_activations_fp8(x))
    nbytes = m * k * 2 + m * k + (k // 128) * m * 4
    return {"m": m, "k": k, "us": us, "GBps": nbytes / (us * 1e-6) / 1e9, "fraction_of_copy": nbytes / (us * 1e-6) / bw}


def run(shapes, ms, sweep: bool) -> dict:
    torch.manual_seed(0)
    bw = copy_bandwidth()
    rows = []
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.05
        weight = qgemm.Fp8Weight.from_float(w)
        del w
        plan = qgemm.Fp8GemmPlan(weight)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xa = qgemm.quantize_activations_fp8(x)
            row = {"m": m, "n": n, "k": k, "choice": choice_label(plan.choice(m))}
            expected = plan.gemm(xa)
            row["qgemm_us"] = bench_graph(lambda: plan.gemm(xa))
            row["qgemm_with_quant_us"] = bench_graph(lambda: plan(x))
            row["best_us"], row["best"] = row["qgemm_us"], row["choice"]
            row["sweep"] = {}
            for c in (sweep_choices(m) if sweep else []):
                try:
                    got = plan.gemm(xa, choice=c)
                    err = ((got.float() - expected.float()).norm() / expected.float().norm()).item()
                    us = bench_graph(lambda: plan.gemm(xa, choice=c), calls=10, replays=5) if err < 1e-2 else math.nan
                except (ValueError, RuntimeError) as e:
                    us, err = math.nan, str(e)[:80]
                row["sweep"][choice_label(c)] = {"us": us, "err": err}
                if us < row["best_us"]:
                    row["best_us"], row["best"] = us, choice_label(c)
            try:
                row["cublas_bw_us"] = bench_graph(cublas_blockwise(xa.q, xa.scale, m, weight.qweight, weight.scale_inv))
            except (RuntimeError, ValueError, NotImplementedError, AttributeError) as e:
                row["cublas_bw_us"], row["cublas_bw_error"] = math.nan, str(e)[:120]
            one = torch.ones((), device="cuda")
            try:
                row["cublas_pt_us"] = bench_graph(lambda: torch._scaled_mm(xa.q, weight.qweight.t(), scale_a=one, scale_b=one,
                                                                     out_dtype=torch.bfloat16))
            except RuntimeError as e:
                row["cublas_pt_us"], row["cublas_pt_error"] = math.nan, str(e)[:120]
            row["floor_us"] = (m * k + n * k + 2 * m * n) / bw * 1e6
            row["qgemm_eager_us"] = bench(lambda: plan.gemm(xa))
            row["cublas_bw_eager_us"] = bench(cublas_blockwise(xa.q, xa.scale, m, weight.qweight, weight.scale_inv)) \
                if not math.isnan(row["cublas_bw_us"]) else math.nan
            rows.append(row)
            print(_fmt(row), flush=True)
        del weight, plan
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9,
            "host_overhead_us_per_gemm_call": host_overhead_us(), "act_quant": quant_bandwidth(bw),
            "rows": rows, "summary": summary(rows)}


def summary(rows) -> dict:
    ratios = [r["cublas_bw_us"] / r["qgemm_us"] for r in rows if not math.isnan(r["cublas_bw_us"])]
    best = [r["cublas_bw_us"] / r["best_us"] for r in rows if not math.isnan(r["cublas_bw_us"])]
    eager = [r["cublas_bw_eager_us"] / r["qgemm_eager_us"] for r in rows if not math.isnan(r["cublas_bw_eager_us"])]
    small = [r["qgemm_us"] / r["floor_us"] for r in rows if r["m"] <= 128]
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan  # noqa: E731
    return {"geomean_vs_cublas_bw": geo(ratios), "min_vs_cublas_bw": min(ratios, default=math.nan),
            "geomean_vs_cublas_bw_best": geo(best), "geomean_vs_cublas_bw_eager": geo(eager), "cases": len(ratios),
            "small_m_max_floor_ratio": max(small, default=math.nan),
            "small_m_within_2x_floor": sum(v <= 2 for v in small), "small_m_cases": len(small)}


HEADER = (f"{'M':>5} {'N':>6} {'K':>6} | {'qgemm':>8} {'+quant':>8} {'best':>8} {'best kernel':<26} | "
          f"{'cublas_bw':>9} {'cublas_pt':>9} {'floor':>7} | {'vs bw':>6} {'/floor':>6} | {'eager q/bw':>13} | "
          f"{'qgemm kernel'}")


def _fmt(r: dict) -> str:
    return (f"{r['m']:>5} {r['n']:>6} {r['k']:>6} | {r['qgemm_us']:>8.1f} {r['qgemm_with_quant_us']:>8.1f} "
            f"{r['best_us']:>8.1f} {r['best']:<26} | {r['cublas_bw_us']:>9.1f} {r['cublas_pt_us']:>9.1f} "
            f"{r['floor_us']:>7.1f} | {r['cublas_bw_us'] / r['qgemm_us']:>5.2f}x {r['qgemm_us'] / r['floor_us']:>5.2f}x"
            f" | {r['qgemm_eager_us']:>6.1f}/{r['cublas_bw_eager_us']:<6.1f} | {r['choice']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_fp8.json")
    ap.add_argument("--sweep", action="store_true", help="also time every catalog kernel and stream-K split")
    ap.add_argument("--quick", action="store_true", help="first shape only")
    ap.add_argument("--nk", action="append", metavar="NxK", help="only these (N, K) shapes, e.g. 4096x7168")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in nk.split("x")) for nk in args.nk] if args.nk else SHAPES_NK
    print(HEADER)
    result = run(shapes[:1] if args.quick else shapes, MS, args.sweep)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    s, q = result["summary"], result["act_quant"]
    print(f"device {result['device']}, copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s, "
          f"host overhead {result['host_overhead_us_per_gemm_call']:.1f} us per plan.gemm call")
    print("times in us; 'vs bw' is cublas_bw / qgemm (>1: qgemm faster); '/floor' is qgemm / floor")
    print(HEADER)
    for r in result["rows"]:
        print(_fmt(r))
    print(f"geomean vs cublas_bw {s['geomean_vs_cublas_bw']:.2f}x over {s['cases']} cases (best-of-sweep "
          f"{s['geomean_vs_cublas_bw_best']:.2f}x, eager calls {s['geomean_vs_cublas_bw_eager']:.2f}x), worst "
          f"{s['min_vs_cublas_bw']:.2f}x; M<=128 within 2x of floor: "
          f"{s['small_m_within_2x_floor']}/{s['small_m_cases']} (worst {s['small_m_max_floor_ratio']:.2f}x)")
    print(f"act quant M={q['m']} K={q['k']}: {q['us']:.1f} us, {q['GBps']:.0f} GB/s = "
          f"{100 * q['fraction_of_copy']:.0f}% of copy bandwidth")


if __name__ == "__main__":
    main()
