"""`qgemm bench fp8`: the FP8 blockwise GEMM (DeepSeek-V3 scaling) against cuBLASLt.

Columns (microseconds per call, CUDA-graph replay, weights rotated through >= 4x L2):
  qgemm_us             the plan's GEMM alone (activations pre-quantized; the primary)
  qgemm_with_quant_us  activation quantization + GEMM (what an Fp8Linear costs per call)
  cublas_bw_us         torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128 (cuBLASLt)
  cublas_pt_us         torch._scaled_mm with per-tensor scales (cuBLASLt, no block scaling)
  fp16_us              torch.matmul in --dtype with the 16-bit weight (cuBLAS), the baseline
  floor_us             FP8 weight + FP8 activation + 16-bit output bytes over the copy bandwidth
  qgemm_eager_us, cublas_bw_eager_us   one call after another, CUDA-event medians, L2-warm: at
                       small M the host's per-call time, not the GPU's
"""
from __future__ import annotations

import math

import torch

import qgemm

from . import peers
from ._family import parse_ints, prebuild, ratio
from .timing import bench, bench_graph, host_us, rotated_and_warm, rotation_count, timed_rotating

# (N, K): DeepSeek-V3's projections.
SHAPES = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = [64, 128, 4096]
DEFAULT_DTYPE = "bf16"  # DeepSeek-V3's activations; cuBLASLt's blockwise FP8 writes BF16

PRIMARY, BASELINE, M_LABEL = "qgemm_us", "fp16_us", "M"
COLUMNS = [("qgemm_us", "qgemm"), ("qgemm_with_quant_us", "+quant"), ("cublas_bw_us", "cublas_bw"),
           ("cublas_pt_us", "cublas_pt"), ("fp16_us", "cublas16"), ("floor_us", "floor"),
           ("qgemm_eager_us", "q eager"), ("cublas_bw_eager_us", "bw eager")]
WARM_COLUMNS = [("qgemm_warm_us", "q warm"), ("cublas_bw_warm_us", "bw warm"), ("fp16_warm_us", "c16 warm")]


def parse_shape(text: str) -> tuple[int, int]:
    return parse_ints(text, "--shapes (N,K)", 2)


def shape_label(shape) -> str:
    n, k = shape
    return f"N={n} K={k}"


def choice_label(c) -> str:
    s = c.spec
    label = f"{s.tile[0]}x{s.tile[1]}{'s' if s.swap_ab else ''}/{s.schedule[:4]}/c{s.cluster[0]}x{s.cluster[1]}"
    if s.scheduler == "streamk":
        label += f"/sk{c.splits}"
    if (c.raster, c.swizzle) != (0, 1):
        label += f"/r{'hMN'[c.raster]}w{c.swizzle}"
    return label


def _peer(make):
    """(callables, error): a cuBLASLt peer that may reject this shape, dtype or torch version (one
    eager call tells, before a CUDA graph capture would)."""
    try:
        fns = make()
        fns[0]()
        return fns, None
    except (RuntimeError, ValueError, NotImplementedError, AttributeError, TypeError) as e:
        return None, str(e)[:120]


def run(shapes, ms, *, dtype: str, warm: bool, bandwidth: float, hook=None):
    """Yields one row per (shape, M) as it is timed. hook(row, plan=, xa=) runs before each row is
    yielded (benchmarks/bench_fp8.py's kernel sweep)."""
    dt = peers.DTYPES[dtype]
    for n, k in shapes:
        torch.manual_seed(0)
        w = torch.randn(n, k, device="cuda") * 0.05
        copies = rotation_count(n * k)          # FP8 weights
        copies16 = rotation_count(2 * n * k)    # 16-bit weights
        weights = [qgemm.Fp8Weight.from_float(w) for _ in range(copies)]
        plans = [qgemm.Fp8GemmPlan(wt, out_dtype=dt) for wt in weights]
        w16 = [w.to(dt) for _ in range(copies16)]
        w = None  # free them before the next shape
        prebuild([plans[0]], ms)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dt)
            xa = qgemm.quantize_activations_fp8(x)
            row = {"shape": shape_label((n, k)), "m": m, "n": n, "k": k, "copies": copies,
                   "choice": choice_label(plans[0].choice(m))}
            row["qgemm_us"], row["qgemm_warm_us"] = rotated_and_warm([lambda p=p: p.gemm(xa) for p in plans], warm)
            row["qgemm_with_quant_us"] = timed_rotating([lambda p=p: p(x) for p in plans])
            row["best_us"], row["best"] = row["qgemm_us"], row["choice"]
            bw_fns, err = _peer(lambda: [peers.cublaslt_blockwise_fp8(xa.q, xa.scale, wt.qweight, wt.scale_inv, dt)
                                         for wt in weights])
            if bw_fns:
                row["cublas_bw_us"], row["cublas_bw_warm_us"] = rotated_and_warm(bw_fns, warm)
            else:
                row["cublas_bw_us"], row["cublas_bw_warm_us"], row["cublas_bw_error"] = math.nan, math.nan, err
            pt_fns, err = _peer(lambda: [peers.cublaslt_per_tensor_fp8(xa.q, wt.qweight, dt) for wt in weights])
            row["cublas_pt_us"] = timed_rotating(pt_fns) if pt_fns else math.nan
            if err and not pt_fns:
                row["cublas_pt_error"] = err
            row["fp16_us"], row["fp16_warm_us"] = rotated_and_warm([peers.cublas_matmul(x, v) for v in w16], warm)
            row["floor_us"] = peers.floor_us(m * k + n * k + 2 * m * n, bandwidth)
            row["qgemm_eager_us"] = bench(lambda: plans[0].gemm(xa))
            row["cublas_bw_eager_us"] = bench(bw_fns[0]) if bw_fns else math.nan
            if not warm:
                del row["qgemm_warm_us"], row["cublas_bw_warm_us"], row["fp16_warm_us"]
            row["speedup_vs_fp16"] = ratio(row["fp16_us"], row["qgemm_us"])
            if hook:
                hook(row, plan=plans[0], xa=xa)
            yield row
        weights = plans = w16 = None  # free them before the next shape
        torch.cuda.empty_cache()


def host_overhead_us() -> float:
    """Host time of one warm plan.gemm call."""
    plan = qgemm.Fp8GemmPlan(qgemm.Fp8Weight.from_float(torch.randn(256, 256, device="cuda")))
    xa = qgemm.quantize_activations_fp8(torch.randn(1, 256, device="cuda"))
    return host_us(lambda: plan.gemm(xa))


def quant_bandwidth(bandwidth: float) -> dict:
    """The activation quantization's bandwidth at M=4096, K=7168 (BF16 in, FP8 + scales out)."""
    m, k = 4096, 7168
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    us = bench_graph(lambda: qgemm.quantize_activations_fp8(x))
    nbytes = m * k * 2 + m * k + (k // 128) * m * 4
    return {"m": m, "k": k, "us": us, "GBps": nbytes / (us * 1e-6) / 1e9,
            "fraction_of_copy": nbytes / (us * 1e-6) / bandwidth}


def extras(bandwidth: float) -> dict:
    return {"host_overhead_us_per_gemm_call": host_overhead_us(), "act_quant": quant_bandwidth(bandwidth)}
