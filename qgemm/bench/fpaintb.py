"""`qgemm bench fpaintb`: FpA x IntB (W4A16 / W8A16) against cuBLAS FP16/BF16 and torch's int4
tinygemm.

Columns (microseconds per call, CUDA-graph replay, weights rotated through >= 4x L2):
  int4_us          qgemm plan, INT4 weights, group 128, symmetric, --dtype activations (the primary;
                   its own kernel choice: on sm90 the Sm90 kernel from heuristics.FPAINTB_SM90_MIN_M rows)
  int4_sm80_us     the same plan with sm90=False (the Sm80 kernels and dequantize + cuBLAS), sm90 only
  int8_us          qgemm, INT8 weights, one scale per output channel
  cublas_us        torch.matmul with the 16-bit weight (cuBLAS), the baseline
  tinygemm_us      torch._weight_int4pack_mm, BF16 activations, INT4 group 128
  floor4_us        INT4 weight + scales + activation + output bytes over the copy bandwidth
  bf16_us, cublas_bf16_us   (bf16_columns=True, benchmarks/bench_fpaintb.py's default) qgemm INT4
                   and cuBLAS with BF16 activations beside FP16 ones
"""
from __future__ import annotations

import math

import torch

import qgemm

from . import peers
from ._family import parse_ints, prebuild, ratio, try_make
from .timing import rotated_and_warm, rotation_count, timed_rotating

# (K, N): Llama-2/3 and Mixtral projections.
SHAPES = [(14336, 21504), (4096, 12288), (4096, 22016), (11008, 4096), (8192, 28672), (28672, 8192)]
MS = [1, 16, 32, 64, 128, 256, 1024, 4096]
GROUP = 128

PRIMARY, BASELINE, M_LABEL = "int4_us", "cublas_us", "M"
COLUMNS = [("int4_us", "int4"), ("int4_sm80_us", "i4sm80"), ("int8_us", "int8"), ("cublas_us", "cublas"),
           ("tinygemm_us", "tinygemm"), ("floor4_us", "floor4"), ("bf16_us", "bf16"), ("cublas_bf16_us", "cub16")]
WARM_COLUMNS = [("int4_warm_us", "int4 warm"), ("cublas_warm_us", "cub warm")]


def parse_shape(text: str) -> tuple[int, int]:
    """'N,K' as every family's --shapes; held as (K, N), the order the weight-only tables use."""
    n, k = parse_ints(text, "--shapes (N,K)", 2)
    return (k, n)


def shape_label(shape) -> str:
    k, n = shape
    return f"N={n} K={k}"


def label(choice) -> str:
    """A short name for the kernel a plan chose (benchmarks/bench_fpaintb.py's sweep labels). By the
    spec's family name, so that this keeps working wherever the spec classes live."""
    spec = choice.spec
    if spec.family == "fpaintb_gemm_sm90":
        tm, tn = spec.tile
        pp = "pp" if spec.schedule == "pingpong" else ""
        # stream-K kernels: sk<slices> (0: CUTLASS's decomposition), dp forced data-parallel, skall forced stream-K
        sk = ""
        if spec.scheduler == "streamk":
            sk = {1: "dp", 2: "skall"}.get(choice.decomposition, f"sk{choice.splits}")
        cluster = f"c{spec.cluster[0]}x{spec.cluster[1]}" if spec.cluster != (1, 1) else ""
        so = "" if spec.zeros else "so"
        kt = "" if spec.tile_k == 64 else f"k{spec.tile_k}"
        ahead = "ah" if spec.mainloop == "ahead" else ""
        ahead += f"{spec.ctas_per_sm}cta" if spec.ctas_per_sm != 1 else ""  # CTAs resident per SM
        # run-time raster order and swizzle, where not CUTLASS's heuristic and 1
        knobs = f"r{choice.raster}w{choice.swizzle}" if (choice.raster, choice.swizzle) != (0, 1) else ""
        return f"s90{tm}x{tn}{kt}{pp}{cluster}{so}{ahead}{sk}{knobs}"
    if spec.family == "fpaintb_dequant":
        return "dequant+cuBLAS"
    if spec.family == "fpaintb_gemm":
        tm, tn, tk = spec.tile
        streamk = f"c{choice.ctas_per_sm:g}" if choice.ctas_per_sm else ""
        return f"g{tm}x{tn}x{tk}s{spec.stages}{streamk}"
    occupancy = f"o{spec.min_warps_per_sm}" if spec.min_warps_per_sm else ""
    extra = (f"p{spec.prefetch}" if spec.prefetch != 1 else "") + ("r8" if spec.rows8 else "")
    extra += f"b{spec.bulk_stages}" if getattr(spec, "bulk_stages", 0) else ""  # codes through bulk copies
    extra += "s" if getattr(spec, "stream", False) else ""  # the decode variant
    extra += f"c{choice.ctas_per_sm:g}" if getattr(choice, "ctas_per_sm", 0) else ""  # its split-K over CTAs
    extra += f"l2p{choice.l2_prefetch >> 10}k" if getattr(choice, "l2_prefetch", 0) else ""  # its L2 prefetch
    return f"m{16 * spec.m_tiles}n{8 * spec.n_tiles}wk{spec.warps_k}{occupancy}{extra}"


def run(shapes, ms, *, dtype: str, warm: bool, bandwidth: float, bf16_columns: bool = False, hook=None):
    """Yields one row per (shape, M) as it is timed. hook(row, plans={4: [...], 8: [...]}, x=x), if
    given, runs before each row is yielded (benchmarks/bench_fpaintb.py's kernel sweeps)."""
    dt = peers.DTYPES[dtype]
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    for k, n in shapes:
        torch.manual_seed(0)
        copies = rotation_count(n * k // 2)       # int4 weights (int8 ones are twice as large: fewer
        copies8 = rotation_count(n * k)           # copies reach 4x L2 as well)
        copies16 = rotation_count(2 * n * k)      # 16-bit weights
        ws = [torch.randn(n, k, device="cuda", dtype=dt) * 0.02 for _ in range(copies16)]
        w4 = [qgemm.IntBWeight.from_float(ws[i % copies16], 4, GROUP) for i in range(copies)]
        plans = {4: [qgemm.FpAIntBPlan(w, act_dtype=dt) for w in w4],
                 8: [qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(ws[i % copies16], 8, -1), act_dtype=dt)
                     for i in range(copies8)]}
        plans_sm80 = (try_make("Sm80 plans", lambda: [qgemm.FpAIntBPlan(w, act_dtype=dt, sm90=False) for w in w4])
                      if on_sm90 else None)
        plans_bf16 = [qgemm.FpAIntBPlan(w, act_dtype=torch.bfloat16) for w in w4] if bf16_columns else []
        wb = [w.to(torch.bfloat16) for w in ws] if bf16_columns else []
        prebuild([plans[4][0], plans[8][0], plans_sm80[0] if plans_sm80 else None,
                  plans_bf16[0] if plans_bf16 else None], ms)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dt)
            row = {"shape": shape_label((k, n)), "m": m, "n": n, "k": k, "copies": copies}
            for bits, ps in plans.items():
                fns = [lambda p=p: p(x) for p in ps]
                if bits == 4:
                    row["int4_us"], row["int4_warm_us"] = rotated_and_warm(fns, warm)
                else:
                    row["int8_us"] = timed_rotating(fns)
                row[f"int{bits}_kernel"] = label(ps[0].choice(m))
            if plans_sm80:
                row["int4_sm80_us"] = timed_rotating([lambda p=p: p(x) for p in plans_sm80])
                row["int4_sm80_kernel"] = label(plans_sm80[0].choice(m))
            row["cublas_us"], row["cublas_warm_us"] = rotated_and_warm([peers.cublas_matmul(x, v) for v in ws], warm)
            xb = x.to(torch.bfloat16)
            if bf16_columns:
                row["bf16_us"] = timed_rotating([lambda p=p: p(xb) for p in plans_bf16])
                row["bf16_kernel"] = label(plans_bf16[0].choice(m))
                row["cublas_bf16_us"] = timed_rotating([peers.cublas_matmul(xb, v) for v in wb])
            tiny = try_make("tinygemm", lambda: [peers.tinygemm_int4(xb, n, k, GROUP) for _ in range(copies)])
            row["tinygemm_us"] = timed_rotating(tiny) if tiny else math.nan
            weight_bytes = n * k // 2 + (k // GROUP) * n * 2
            row["floor4_us"] = peers.floor_us(weight_bytes + m * k * 2 + m * n * 2, bandwidth)
            if not warm:
                del row["int4_warm_us"], row["cublas_warm_us"]
            row["speedup_vs_fp16"] = ratio(row["cublas_us"], row["int4_us"])
            if hook:
                hook(row, plans=plans, x=x)
            yield row
        ws = w4 = plans = plans_sm80 = plans_bf16 = wb = None  # free them before the next shape
        torch.cuda.empty_cache()


def host_overhead_us() -> float:
    """Host time of one warm plan call at M = 1 with out= given (checks, Params, launch)."""
    from .timing import host_us

    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    plan = qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(w, 4, GROUP))
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    out = torch.empty(1, 4096, device="cuda", dtype=torch.float16)
    return host_us(lambda: plan(x, out))


def extras(bandwidth: float) -> dict:
    return {"host_overhead_us_per_call": host_overhead_us()}
