"""`qgemm bench w8a8`: the W8A8 per-K-block GEMM (block 128) against cuBLAS, torch._int_mm and a
Triton block-INT8 GEMM.

Columns (microseconds per call, CUDA-graph replay, weights rotated through >= 4x L2):
  sym_us         qgemm, symmetric block-INT8, GEMM alone on pre-quantized activations (the primary)
  sym_quant_us   the same plus the activation quantization (what a layer costs per call)
  asym_us        qgemm, asymmetric scheme (MNN's), GEMM alone; asym_quant_us with its quantization
  promote_us     the Sm80 promote kernels (launch_mode="promote"), symmetric, GEMM alone
  chained_us     the reference path (launch_mode="chained"), asymmetric, L2-warm, M <= 128 only
  fp16_us        torch.matmul in --dtype (cuBLAS), the baseline; fp16_warm_us L2-warm
  int_mm_us      torch._int_mm, per-tensor int8 (cuBLASLt, no block scales; rejects M <= 16)
  triton_us      benchmarks/triton_block_int8.py (SGLang/vLLM's design), where triton and that
                 file are importable
  floor_us       int8 activations + int8 weight + 16-bit output bytes over the copy bandwidth
  asym_b32_us    asymmetric block 32 at the largest M (block 32 against block 128)
"""
from __future__ import annotations

import importlib.util
import logging
import math
import sys
from pathlib import Path

import torch

import qgemm

from . import peers
from ._family import parse_ints, prebuild, ratio, try_make
from .timing import rotated_and_warm, rotation_count, timed, timed_rotating

logger = logging.getLogger("qgemm")

# (N, K): Llama-3-8B's and -70B's projections, DeepSeek-V3's MLA down/up projections.
SHAPES = [(4096, 4096), (12288, 4096), (8192, 28672), (28672, 8192), (2112, 7168), (7168, 2048)]
MS = [1, 16, 128, 4096]
CHAINED_MAX_M = 128
BLOCK = 128

PRIMARY, BASELINE, M_LABEL = "sym_us", "fp16_us", "M"
COLUMNS = [("sym_us", "sym"), ("sym_quant_us", "sym+q"), ("asym_us", "asym"), ("promote_us", "p80"),
           ("chained_us", "chained"), ("fp16_us", "cublas"), ("int_mm_us", "int_mm"), ("triton_us", "triton"),
           ("floor_us", "floor")]
WARM_COLUMNS = [("sym_warm_us", "sym warm"), ("fp16_warm_us", "cub warm")]


def parse_shape(text: str) -> tuple[int, int]:
    return parse_ints(text, "--shapes (N,K)", 2)


def shape_label(shape) -> str:
    n, k = shape
    return f"N={n} K={k}"


def triton_peer():
    """benchmarks/triton_block_int8.block_int8_gemm where triton is installed and the file is found
    (on sys.path, or beside the package in a source tree); else None."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from triton_block_int8 import block_int8_gemm  # benchmarks/ on PYTHONPATH
        return block_int8_gemm
    except ImportError:
        pass
    path = Path(qgemm.__file__).resolve().parents[1] / "benchmarks" / "triton_block_int8.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("triton_block_int8", path)
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules["triton_block_int8"] = module
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        sys.modules.pop("triton_block_int8", None)
        logger.warning("  (triton peer unavailable: %s)", e)
        return None
    return module.block_int8_gemm


def run(shapes, ms, *, dtype: str, warm: bool, bandwidth: float):
    """Yields one row per (shape, M) as it is timed."""
    dt = peers.DTYPES[dtype]
    triton_gemm = triton_peer()
    for n, k in shapes:
        torch.manual_seed(0)
        w = torch.randn(n, k, device="cuda") * 0.5 + 0.1
        copies = rotation_count(n * k)          # int8 weights
        copies16 = rotation_count(2 * n * k)    # 16-bit weights
        sym = [qgemm.W8A8Weight.from_float(w, BLOCK, scheme="symmetric") for _ in range(copies)]
        asym = [qgemm.W8A8Weight.from_float(w, BLOCK) for _ in range(copies)]
        sym_plans = [qgemm.W8A8GemmPlan(s, out_dtype=dt) for s in sym]
        asym_plans = [qgemm.W8A8GemmPlan(a, out_dtype=dt) for a in asym]
        promote = try_make("promote plans", lambda: [qgemm.W8A8GemmPlan(s, out_dtype=dt, launch_mode="promote")
                                                     for s in sym])
        chained = try_make("chained plan", lambda: qgemm.W8A8GemmPlan(asym[0], out_dtype=dt, launch_mode="chained"))
        prebuild([sym_plans[0], asym_plans[0], promote[0] if promote else None, chained], ms)
        w16 = [w.to(dt) for _ in range(copies16)]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dt) + 0.2
            xs = qgemm.quantize_activations(x, BLOCK, symmetric=True)
            xa = qgemm.quantize_activations(x, BLOCK)
            row = {"shape": shape_label((n, k)), "m": m, "n": n, "k": k, "copies": copies}
            row["sym_us"], row["sym_warm_us"] = rotated_and_warm([lambda p=p: p.gemm(xs) for p in sym_plans], warm)
            row["sym_quant_us"] = timed_rotating([lambda p=p: p(x) for p in sym_plans])
            row["asym_us"] = timed_rotating([lambda p=p: p.gemm(xa) for p in asym_plans])
            row["asym_quant_us"] = timed_rotating([lambda p=p: p(x) for p in asym_plans])
            row["kernel_sym"] = sym_plans[0].kernel_spec(m).name
            if promote:
                row["promote_us"] = timed_rotating([lambda p=p: p.gemm(xs) for p in promote])
                row["kernel_promote"] = promote[0].kernel_spec(m).name
            else:
                row["promote_us"] = math.nan
            row["chained_us"] = timed(lambda: chained.gemm(xa)) if chained and m <= CHAINED_MAX_M else math.nan
            row["fp16_us"], row["fp16_warm_us"] = rotated_and_warm([peers.cublas_matmul(x, v) for v in w16], warm)
            try:
                row["int_mm_us"] = timed_rotating([peers.int_mm(xs.q, s.qweight) for s in sym])
            except RuntimeError:
                row["int_mm_us"] = math.nan  # _int_mm rejects M <= 16
            row["triton_us"] = (timed_rotating([lambda s=s: triton_gemm(xs.q, xs.scale, s.qweight, s.scale, dt)
                                                for s in sym]) if triton_gemm else math.nan)
            row["floor_us"] = peers.floor_us(m * k + n * k + 2 * m * n, bandwidth)
            row["sym_tops"] = 2 * m * n * k / (row["sym_us"] * 1e-6) / 1e12
            if m == max(ms):
                a32 = try_make("block-32 plans", lambda: [qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 32),
                                                                              out_dtype=dt) for _ in range(copies)])
                if a32:
                    x32 = qgemm.quantize_activations(x, 32)
                    row["asym_b32_us"] = timed_rotating([lambda p=p: p.gemm(x32) for p in a32])
                a32 = None  # free them before the next shape
            if not warm:
                del row["sym_warm_us"], row["fp16_warm_us"]
            row["speedup_vs_fp16"] = ratio(row["fp16_us"], row["sym_us"])
            yield row
        sym = asym = sym_plans = asym_plans = promote = chained = w16 = None  # free them before the next shape
        torch.cuda.empty_cache()


def host_overhead_us() -> float:
    """Host time of one warm plan.gemm call (symmetric, decode-sized)."""
    from .timing import host_us

    plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(torch.randn(256, 256, device="cuda"), BLOCK,
                                                          scheme="symmetric"))
    xq = qgemm.quantize_activations(torch.randn(1, 256, device="cuda"), BLOCK, symmetric=True)
    return host_us(lambda: plan.gemm(xq))


def extras(bandwidth: float) -> dict:
    return {"host_overhead_us_per_gemm_call": host_overhead_us()}
