"""FP8 blockwise GEMM (DeepSeek-V3 scaling) against cuBLASLt, in one run.

    python benchmarks/bench_fp8.py [--sweep] [--json out.json] [--quick] [--nk NxK ...]

The table is `qgemm bench fp8` (qgemm/bench/fp8.py; BF16 output), printed in this script's
long-standing layout; the kernel sweep (--sweep) is a tuning tool and lives here only.
Columns (microseconds per call, GPU time under CUDA-graph replay with the weights rotated through
>= 4x L2, so neither the host's per-call work nor an L2-resident weight is counted):
  qgemm     the plan's GEMM alone (activations pre-quantized), kernel chosen by heuristics.fp8_choice
  +quant    activation quantization + GEMM (what an Fp8Linear costs per call)
  best      with --sweep: the fastest catalog kernel / stream-K split for the case, and which
  cublas_bw torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128 (cuBLASLt)
  cublas_pt torch._scaled_mm with per-tensor scales (cuBLASLt; no block scaling, for scale)
  fp16_us   (JSON only) cuBLAS BF16 torch.matmul, the `qgemm bench` baseline
  floor     FP8 weight + FP8 activation + BF16 output bytes over the measured copy bandwidth
  eager     qgemm / cublas_bw called eagerly, one call after another (CUDA-event medians): at small
            M this is the host's per-call time, not the GPU's
Then the issue's targets: geometric-mean speedup over cublas_bw, the worst case, and how far the
M <= 128 cases are from the floor; and the activation quantization's bandwidth at M=4096, K=7168.
"""
from __future__ import annotations

import argparse
import math

from cutlass_gen.catalog import catalog
from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
from qgemm import bench
from qgemm.fp8 import heuristics
from qgemm.bench import report
from qgemm.bench.fp8 import MS, SHAPES as SHAPES_NK, choice_label
from qgemm.bench.timing import bench_graph

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


def run(shapes, ms, sweep: bool) -> dict:
    def sweep_row(row, plan, xa):
        """Every catalog kernel and split forced by choice=, checked against the plan's own output
        (L2-warm: the sweep ranks kernels, the table's figure is the rotated one)."""
        expected = plan.gemm(xa)
        for c in sweep_choices(row["m"]):
            try:
                got = plan.gemm(xa, choice=c)
                err = ((got.float() - expected.float()).norm() / expected.float().norm()).item()
                us = bench_graph(lambda: plan.gemm(xa, choice=c), calls=10, replays=5) if err < 1e-2 else math.nan
            except (ValueError, RuntimeError) as e:
                us, err = math.nan, str(e)[:80]
            row["sweep"][choice_label(c)] = {"us": us, "err": err}
            if us < row["best_us"]:
                row["best_us"], row["best"] = us, choice_label(c)

    def add_sweep_key(row, plan, xa):
        row["sweep"] = {}
        if sweep:
            sweep_row(row, plan, xa)

    result = bench.run("fp8", shapes, ms, dtype="bf16", hook=add_sweep_key,
                       progress=lambda row: print(_fmt(row), flush=True))
    result["summary"].update(summary(result["rows"]))
    result.update(result["extras"])  # host_overhead_us_per_gemm_call, act_quant
    return result


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
    report.write_json(result, args.json)
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
