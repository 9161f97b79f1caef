#!/usr/bin/env bash
# One device call for the Sm90 FpA x IntB sweep of 128-deep K tiles and the 128 x 256 scale-only tile
# (issue 16, M = 128-1024): builds the FP16 catalog and the sweep kernels MATCH selects in one parallel
# build, then bench_fpaintb.py --sweep sm90 (CUDA graphs, weights rotated through >= 4x L2).
#   env: MS (default "128 256 1024"), MATCH (--sweep-match), BENCH_TIMEOUT (300), PLAN_COMPILE=1 (then
#        tests/test_plan_compile_gpu.py, its kernels in the same build), TEST_TIMEOUT (150)
set -uo pipefail
source benchmarks/device_env.sh
export MATCH=${MATCH:-'^s90128x(64|128|256)(k128)?(so)?sk0$'}
timeout 300 python3 benchmarks/prebuild_sm90.py --family fpaintb --acts f16 --sweep f16:4 --match "$MATCH" \
  ${PLAN_COMPILE:+--plan-compile} 2>&1 | tail -3
echo "build done at $(( $(date +%s) - T0 )) s"
M_ARGS=$(for m in ${MS:-128 256 1024}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-bits 4 --no-bf16 \
  --sweep-match "$MATCH" $M_ARGS --json "$OUT/fpa_tilek.json" > "$OUT/fpa_tilek.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "sweep|M=" "$OUT/fpa_tilek.log" | tail -n 30
if [ -n "${PLAN_COMPILE:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-150} python3 -m pytest -m gpu tests/test_plan_compile_gpu.py -q -p no:cacheprovider \
    > "$OUT/pytest_plan_compile.log" 2>&1
  echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest_plan_compile.log" | tail -8
fi
