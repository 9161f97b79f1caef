#!/usr/bin/env bash
# One device call for the FpA x IntB family after the Sm90 kernel and the reliability changes: build what
# the carried cache lacks (FpA x IntB and FP8 catalogs, the FpA x IntB tests' extra kernels), the Sm90 and
# Sm80 FpA x IntB GPU tests, the NaN/concurrency tests of FpA x IntB and FP8, the FP8 quantizer tests,
# then bench_fpaintb.py (rotated weights, FP16 columns). Carry .whl and .qgemm-cache.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
set -uo pipefail
chmod -R go-w .qgemm-cache
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
timeout 240 python3 - <<'PY' 2>&1 | tail -2
import time, sys
sys.path.insert(0, "benchmarks")
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
import prebuild_fpaintb
fams = ("fpaintb_gemm_sm90", "fpaintb_gemm", "fpaintb_gemv", "fpaintb_dequant", "fp8_blockwise_gemm", "fp8_act_quant")
specs = {s for f in fams for s in catalog(90, f)} | set(prebuild_fpaintb.test_specs())
missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, 90) is None]
t0 = time.time(); build_many(missing, 90, jobs=16, progress=lambda l: None)
print(f"built {len(missing)} of {len(specs)} in {time.time()-t0:.0f} s")
PY
t() { n=$1; to=$2; shift 2; timeout -s KILL $to python3 -m pytest -m gpu "$@" -q -p no:cacheprovider -o faulthandler_timeout=45 --maxfail=20 > $OUT/pytest_$n.log 2>&1; echo "[$n] rc=$? $(tail -1 $OUT/pytest_$n.log)"; grep -E "^FAILED|^ERROR" $OUT/pytest_$n.log | head -12; }
t fpa_sm90 150 tests/test_fpaintb_sm90_gpu.py
t rel 90 tests/test_nan_gpu.py tests/test_concurrency_gpu.py -k "(fpaintb or fp8) and not conv"
t fpa_sm80 100 tests/test_fpaintb_gpu.py
t fp8 60 tests/test_fp8_gpu.py -k "quant or nan or graph"
timeout -s KILL 200 python3 benchmarks/bench_fpaintb.py --json $OUT/bench_fpaintb.json --no-bf16 --m 1 --m 16 --m 64 --m 256 --m 4096 > $OUT/bench_fpaintb.log 2>&1; echo "bench rc=$?"; tail -n 45 $OUT/bench_fpaintb.log
