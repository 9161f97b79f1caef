"""compute-sanitizer over qgemm's kernels (issue 18): memcheck, then racecheck.

    python tests/sanitize.py [--tools memcheck racecheck] [--families fp8 fpaintb ...]
    python tests/sanitize.py --pytest tests/test_nan_gpu.py -k fpaintb     (chosen GPU tests instead)

Default: for each family, one process runs one small odd-shaped call of every catalog kernel (the
kernel forced through the plans' `choice`), under each tool. cuda-python's start-up probes fail some
driver API calls on purpose; those are API errors, not kernel errors, and `--report-api-errors no`
leaves them out. A run passes when the tool's summary (memcheck's ERROR SUMMARY, racecheck's
RACECHECK SUMMARY) says 0 errors. Exit status: the number
of failing (tool, family) runs.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

FAMILIES = ("fp8", "w8a8", "fpaintb", "conv_fpaintb", "conv_int8")


# --- the driver: one call per catalog kernel ---------------------------------------------------------

def _drive(family: str) -> int:
    import torch

    import qgemm
    from cutlass_gen.catalog import catalog
    from qgemm.fp8.heuristics import Fp8Choice
    from qgemm.fpaintb.heuristics import FpAIntBChoice
    from qgemm.w8a8.heuristics import W8A8GemvChoice, W8A8PromoteChoice, W8A8Sm90Choice

    sm90 = torch.cuda.get_device_capability() == (9, 0)
    target = 90 if sm90 else 80
    calls = 0

    def rand(*shape, dtype=torch.float16, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(dtype)

    def attempt(what, fn):
        nonlocal calls
        try:
            fn()
            torch.cuda.synchronize()
            calls += 1
        except ValueError as e:  # this kernel cannot run the problem: not a sanitizer matter
            print(f"  skip {what}: {e}", flush=True)

    if family == "fp8" and sm90:
        from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
        w = qgemm.Fp8Weight.from_float(rand(136, 384, dtype=torch.float32, scale=0.05))
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            attempt(f"fp8_act_quant {dtype}", lambda: qgemm.quantize_activations_fp8(rand(17, 384, dtype=dtype)))
        out_dtypes = {"bf16": torch.bfloat16, "f16": torch.float16}
        for spec in catalog(90, Fp8BlockwiseGemmSpec.family):
            plan = qgemm.Fp8GemmPlan(w, bias=rand(136, dtype=torch.float32), out_dtype=out_dtypes[spec.output])
            xa = qgemm.quantize_activations_fp8(rand(17, 384, dtype=torch.bfloat16))
            attempt(spec.name, lambda: plan.gemm(xa, choice=Fp8Choice(spec)))
    elif family == "w8a8":
        for symmetric in (False, True):
            for bs in qgemm.w8a8.BLOCK_SIZES:
                attempt(f"act_quant {bs} sym={symmetric}",
                        lambda: qgemm.quantize_activations(rand(17, 512), bs, symmetric=symmetric))
        out_dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
        if sm90:
            for spec in catalog(90, "w8a8_gemm_sm90"):
                w = qgemm.W8A8Weight.from_float(rand(136, 2 * spec.block_size, dtype=torch.float32, scale=0.05),
                                                spec.block_size, scheme=spec.scheme)
                activation = "silu" if spec.epilogue == "silu" else "relu"
                plan = qgemm.W8A8GemmPlan(w, activation=activation, out_dtype=out_dtypes[spec.output],
                                          bias=rand(136, dtype=torch.float32), launch_mode="sm90")
                xq = qgemm.quantize_activations(rand(17, 2 * spec.block_size), spec.block_size,
                                                symmetric=spec.scheme == "symmetric")
                attempt(spec.name, lambda: plan.gemm(xq, choice=W8A8Sm90Choice(spec)))
        for spec in catalog(target, "w8a8_gemm_promote"):  # on sm90: the sm80 kernels, built for sm_90a
            w = qgemm.W8A8Weight.from_float(rand(132, 320, dtype=torch.float32, scale=0.05), 64, scheme=spec.scheme)
            plan = qgemm.W8A8GemmPlan(w, activation="relu", out_dtype=out_dtypes[spec.output],
                                      bias=rand(132, dtype=torch.float32), launch_mode="promote")
            xq = qgemm.quantize_activations(rand(17, 320), 64, symmetric=spec.scheme == "symmetric")
            for ctas_per_sm in (0, 2):  # one CTA per tile; stream-K (partials, counters)
                attempt(f"{spec.name} ctas_per_sm={ctas_per_sm}",
                        lambda: plan.gemm(xq, choice=W8A8PromoteChoice(spec, ctas_per_sm)))
        in_dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
        for spec in catalog(target, "w8a8_gemv"):  # the fused quantize + decode kernels (cluster ones: sm90)
            if spec.arch > target:
                continue
            w = qgemm.W8A8Weight.from_float(rand(260, 512, dtype=torch.float32, scale=0.05), 128, scheme=spec.scheme)
            plan = qgemm.W8A8GemmPlan(w, out_dtype=out_dtypes[spec.output], bias=rand(260, dtype=torch.float32))
            x = rand(3, 512, dtype=in_dtypes[spec.input])
            for slice_blocks in (1, 2):  # split-K over the 4 K-blocks (partials, counters); no split
                attempt(f"{spec.name} slice_blocks={slice_blocks}", lambda: plan._call_gemv(
                    x, None, 3, choice=W8A8GemvChoice(spec, slice_blocks)))
        w = qgemm.W8A8Weight.from_float(rand(132, 256, dtype=torch.float32, scale=0.05), 64)
        plan = qgemm.W8A8GemmPlan(w, launch_mode="chained")
        for m in (1, 17, 300):
            attempt(f"w8a8 chained M={m}", lambda: plan(rand(m, 256)))
    elif family == "fpaintb":
        from cutlass_gen.families.fpaintb import FpAIntBDequantSpec, FpAIntBGemmSpec, FpAIntBGemvSpec
        for dtype, act in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
            for bits in (4, 8):
                weight = qgemm.IntBWeight.from_float(rand(136, 704, dtype=torch.float32, scale=0.05), bits=bits,
                                                     group_size=64, symmetric=False)
                plan = qgemm.FpAIntBPlan(weight, act_dtype=dtype, bias=rand(136, dtype=dtype), activation="gelu")
                for fam in (FpAIntBGemvSpec.family, FpAIntBGemmSpec.family, FpAIntBDequantSpec.family):
                    for spec in catalog(target, fam):
                        if (spec.act, spec.bits) != (act, bits):
                            continue
                        m = 3 if fam == FpAIntBGemvSpec.family else 17
                        attempt(spec.name, lambda: plan(rand(m, 704, dtype=dtype), choice=FpAIntBChoice(spec)))
                        if fam == FpAIntBGemmSpec.family:
                            attempt(spec.name + " stream-K", lambda: plan(
                                rand(m, 704, dtype=dtype), choice=FpAIntBChoice(spec, 2)))
                if not sm90:
                    continue
                # The Sm90 kernels (one and two CTAs per SM, programmatic launch): K = 640 in groups of 128
                # suits the 64- and the 128-deep K tiles; the scale-only kernels take the symmetric weight.
                from cutlass_gen.families.fpaintb import FpAIntBSm90Spec
                from qgemm.fpaintb.heuristics import FpAIntBSm90Choice
                plans = {zeros: qgemm.FpAIntBPlan(qgemm.IntBWeight.from_float(
                    rand(136, 640, dtype=torch.float32, scale=0.05), bits=bits, group_size=128, symmetric=not zeros),
                    act_dtype=dtype, bias=rand(136, dtype=dtype), activation="gelu") for zeros in (True, False)}
                for spec in catalog(90, FpAIntBSm90Spec.family):
                    if (spec.act, spec.bits) != (act, bits):
                        continue
                    for splits in (0, 3):  # CUTLASS's stream-K decomposition, then 3 split-K slices
                        attempt(f"{spec.name} splits={splits}", lambda: plans[spec.zeros](
                            rand(17, 640, dtype=dtype), choice=FpAIntBSm90Choice(spec, splits=splits)))
    elif family == "conv_fpaintb":
        from cutlass_gen.families.conv import FpAIntBConvSpec
        for dtype, act in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
            for bits in (4, 8):
                q = qgemm.IntConvWeight.from_float(torch.randn(24, 32, 3, 3) * 0.1, bits, 32)
                weight = qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), bits, 32)
                plan = qgemm.FpAIntBConvPlan(weight, act_dtype=dtype, activation="relu", padding=1, stride=2)
                for spec in catalog(target, FpAIntBConvSpec.family):
                    if (spec.act, spec.bits) != (act, bits):
                        continue
                    x = rand(2, 9, 11, 32, dtype=dtype)
                    attempt(spec.name, lambda: plan(x, choice=FpAIntBChoice(spec)))
                    attempt(spec.name + " stream-K", lambda: plan(x, choice=FpAIntBChoice(spec, 2)))
    elif family == "conv_int8":
        specs = catalog(target, "conv2d_int8") + (catalog(90, "conv2d_int8_sm90") if sm90 else [])
        quant = qgemm.ConvInt8Quant(0.02, 3, torch.rand(32) * 0.01 + 0.001, 0.5, -7, "relu")
        w3 = torch.randint(-127, 128, (32, 3, 3, 32), dtype=torch.int8, device="cuda")
        w1 = torch.randint(-127, 128, (32, 1, 1, 32), dtype=torch.int8, device="cuda")
        plans = [qgemm.ConvInt8Plan(w3, quant, padding=1), qgemm.ConvInt8Plan(w1, quant)]
        x = torch.randint(-128, 128, (2, 9, 11, 32), dtype=torch.int8, device="cuda")
        for spec in specs:
            for plan in plans:
                attempt(f"{spec.name} on {plan.kernel_size}", lambda: plan(x, choice=spec))
    print(f"{family}: {calls} calls", flush=True)
    return 0


# --- the runner --------------------------------------------------------------------------------------

def _sanitizer() -> str:
    for candidate in ("compute-sanitizer", "/usr/local/cuda/bin/compute-sanitizer"):
        if subprocess.run(["bash", "-c", f"command -v {candidate}"], capture_output=True).returncode == 0:
            return candidate
    raise SystemExit("compute-sanitizer not found (CUDA toolkit bin/ on PATH)")


def _run(tool: str, argv: list[str], label: str, log_dir: str | None, timeout: int) -> bool:
    cmd = [_sanitizer(), "--tool", tool, "--report-api-errors", "no", "--print-limit", "20", *argv]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), -9
        text += f"\n(timed out after {timeout} s)"
    if log_dir:
        with open(os.path.join(log_dir, f"sanitize_{tool}_{label}.log"), "w") as f:
            f.write(text)
    # memcheck ends with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: H hazards
    # displayed (E errors, W warnings)", where E counts the hazards that are races.
    summary = re.findall(r"ERROR SUMMARY: (\d+) error", text) or re.findall(
        r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
    errors = int(summary[-1]) if summary else None
    ok = errors == 0 and rc == 0
    print(f"{tool:9s} {label:14s} errors={errors} rc={rc} {time.monotonic() - start:.0f} s {'ok' if ok else 'FAILED'}",
          flush=True)
    if not ok:
        print("\n".join(text.splitlines()[-30:]), flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", nargs="+", default=["memcheck", "racecheck"])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--drive", choices=FAMILIES, help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--pytest", nargs=argparse.REMAINDER, help="run these pytest arguments instead")
    parser.add_argument("--log-dir", default=os.environ.get("OUT"))
    parser.add_argument("--timeout", type=int, default=240, help="seconds per sanitizer run")
    args = parser.parse_args()
    if args.drive:
        return _drive(args.drive)
    failed = 0
    for tool in args.tools:
        if args.pytest is not None:
            failed += not _run(tool, [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                      *args.pytest], "pytest", args.log_dir, args.timeout)
            continue
        for family in args.families:
            failed += not _run(tool, [sys.executable, os.path.abspath(__file__), "--drive", family], family,
                               args.log_dir, args.timeout)
    return failed


if __name__ == "__main__":
    sys.exit(main())
