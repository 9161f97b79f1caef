#!/usr/bin/env bash
# Device session for the W8A8 Sm80/Sm75 promote kernels (w8a8_gemm_promote): build what the carried
# cache lacks, look at the SASS, run the GPU tests (each stage under a hard timeout: a hung kernel
# must not eat the session), then the benchmark's "p80" column beside cuBLAS FP16 and the Sm90 kernels.
# On an H100 the build target is sm90: the sm80 kernels are compiled for sm_90a from the same source
# (the plan's launch_mode="promote" runs them), and the sm75 ones too, for the tests.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here).
#   env: TESTS (pytest paths), PYTEST_K (-k expression), SKIP_TESTS=1, BENCH_ARGS (default "--m 4096",
#        the issue's Sm80 target; "" skips the benchmark; e.g. "--m 1 --m 128 --m 4096 --no-table
#        --sweep-promote" to time every promote catalog kernel), SM (build target, default 90),
#        SM90_BUILD=0 (skip building the Sm90 kernels of the benchmark's other columns)
# Budget: prebuild ~1 min at -j16 (nothing with a carried cache), tests ~3 min, benchmark ~3 min:
# run the tests and the benchmark as two calls (SKIP_TESTS=1 on the second) if one would pass 6 min.
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SM=${SM:-90}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
timeout 240 python3 benchmarks/prebuild_w8a8_promote.py --sm $SM -j 16 2>&1 | tail -2
if [ "${SM90_BUILD:-1}" = 1 ] && [ -n "${BENCH_ARGS-x}" ]; then  # the benchmark's sym/asym columns
  timeout 240 python3 -m qgemm build --sm $SM -j 16 --family w8a8_gemm_sm90 2>&1 | tail -1
fi
fb=$(ls .qgemm-cache/sm$SM/qgemm_w8a8_promote_sm80_s8s8_f16_sym_128x128x64_w64x32_s4/*/kernel.fatbin | head -1)
cuobjdump -sass "$fb" > "$OUT/sass_promote_sym128.txt" 2>&1
cuobjdump --dump-resource-usage "$fb" 2>&1 | grep -o "REG:[0-9]*.*" | head -1
echo "SASS promote sym 128x128: IMMA $(grep -c 'IMMA' "$OUT/sass_promote_sym128.txt"), LDSM $(grep -c 'LDSM' "$OUT/sass_promote_sym128.txt"), I2F $(grep -c 'I2F' "$OUT/sass_promote_sym128.txt"), LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass_promote_sym128.txt")"
[ "${SKIP_TESTS:-0}" = 1 ] || timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu ${TESTS:-tests/test_w8a8_promote_gpu.py} -q --maxfail=${MAXFAIL:-12} ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -25
echo "pytest rc=${PIPESTATUS[0]}"
BENCH_ARGS=${BENCH_ARGS-"--m 4096"}
if [ -n "$BENCH_ARGS" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_w8a8.py --json "$OUT/bench_w8a8.json" $BENCH_ARGS > "$OUT/bench_w8a8.log" 2>&1
  tail -n 40 "$OUT/bench_w8a8.log"
fi
