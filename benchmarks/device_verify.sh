#!/usr/bin/env bash
# Device session that checks landed main where earlier runs did not reach: the nn modules' GPU tests,
# the FpA x IntB concurrency tests (threads without a current context), the large-shape limits, the
# fuzz suite at its default 500 cases per family, and the sanitizer over every catalog kernel.
# The kernel cache lives in /tmp/qcache on the device (seeded from a carried .qgemm-cache): the working
# tree's ignored folders do not survive from one call to the next, /tmp does while the machine stays
# warm, so STAGE=build in one call and the other stages in calls right after it share one build.
#   env: STAGE=build|tests|fuzz|sanitize (default tests), FUZZ_CASES, TEST_TIMEOUT, SANITIZE_FAMILIES
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-/tmp/qcache}
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p "$QGEMM_CACHE_DIR"; [ -d .qgemm-cache ] && cp -rn .qgemm-cache/. "$QGEMM_CACHE_DIR"/
chmod -R go-w "$QGEMM_CACHE_DIR" 2>/dev/null
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
case "${STAGE:-tests}" in
build)
  timeout ${BUILD_TIMEOUT:-540} python3 -m qgemm build --sm 90 -j ${JOBS:-16} 2>&1 | tail -4
  ls "$QGEMM_CACHE_DIR"/sm90 | wc -l; t built ;;
tests)
  timeout -s KILL ${TEST_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider --maxfail=30 -rfE \
    tests/test_nn_gpu.py tests/test_concurrency_gpu.py tests/test_nan_gpu.py ${EXTRA_TESTS:-} 2>&1 \
    | tee "$OUT/pytest_verify.log" | tail -25
  echo "pytest rc=${PIPESTATUS[0]}"; t tests
  timeout -s KILL ${LIMITS_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider -m large -rfE \
    tests/test_limits_gpu.py 2>&1 | tee "$OUT/pytest_limits.log" | tail -8
  echo "limits rc=${PIPESTATUS[0]}"; t limits ;;
fuzz)
  QGEMM_FUZZ_CASES=${FUZZ_CASES:-500} timeout -s KILL ${FUZZ_TIMEOUT:-540} python3 -m pytest -q \
    -p no:cacheprovider -m fuzz -s -rfE tests/test_fuzz_gpu.py 2>&1 | tee "$OUT/fuzz.log" \
    | grep -E "^fuzz |passed|failed|Error|case " | tail -30
  echo "fuzz rc=${PIPESTATUS[0]}"; t fuzz ;;
sanitize)
  timeout -s KILL ${SANITIZE_TIMEOUT:-540} python3 tests/sanitize.py --timeout 500 --log-dir "$OUT" \
    --families ${SANITIZE_FAMILIES:-fp8 w8a8 fpaintb conv_fpaintb conv_int8} 2>&1 | tee "$OUT/sanitize.log" | tail -25
  echo "sanitize rc=${PIPESTATUS[0]}"; t sanitize ;;
esac
