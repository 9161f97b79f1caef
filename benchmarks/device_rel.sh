#!/usr/bin/env bash
# Device session for issue 18 (reliability), one call of at most ~6 minutes: build what the carried
# cache lacks for the families the tests use, then the NaN/Inf, concurrency and reliability tests under
# hard timeouts (a hang must not eat the session), a short fuzz run and a sanitizer run.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here).
#   env: FAMILIES (to build), FUZZ_CASES (per family, default 40), FUZZ_SEED, SANITIZE_FAMILIES
#        (default "fpaintb conv_fpaintb"), SKIP_BUILD=1, TESTS (override the pytest paths)
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  for f in ${FAMILIES:-fp8_act_quant fp8_blockwise_gemm act_quant w8a8_gemm_sm90 w8a8_gemm fpaintb_gemv fpaintb_gemm fpaintb_dequant fpaintb_conv conv2d_int8 conv2d_int8_sm90}; do
    timeout 150 python3 -m qgemm build --sm 90 -j 16 --family $f 2>&1 | tail -1
  done
  t "built"
fi
timeout -s KILL ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider --maxfail=20 -rfEX \
  ${TESTS:-tests/test_reliability_cpu.py tests/test_nan_gpu.py tests/test_concurrency_gpu.py} 2>&1 \
  | tee "$OUT/pytest_rel.log" | tail -30
echo "pytest rc=${PIPESTATUS[0]}"; t "tests"
QGEMM_FUZZ_CASES=${FUZZ_CASES:-40} QGEMM_FUZZ_SEED=${FUZZ_SEED:-18} timeout -s KILL ${FUZZ_TIMEOUT:-90} \
  python3 -m pytest -q -p no:cacheprovider -m fuzz -s tests/test_fuzz_gpu.py 2>&1 | tee "$OUT/fuzz.log" \
  | grep -E "^fuzz |passed|failed|Error|case " | tail -30
echo "fuzz rc=${PIPESTATUS[0]}"; t "fuzz"
timeout -s KILL ${SANITIZE_TIMEOUT:-120} python3 tests/sanitize.py --timeout 100 --log-dir "$OUT" \
  --families ${SANITIZE_FAMILIES:-fpaintb conv_fpaintb} 2>&1 | tee "$OUT/sanitize.log" | tail -20
echo "sanitize rc=${PIPESTATUS[0]}"; t "done"
