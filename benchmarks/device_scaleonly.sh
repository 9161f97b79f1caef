#!/usr/bin/env bash
# One device call for the Sm90 FpA x IntB scale-only kernels (issue 16): for symmetric weights (zero' = 0)
# CUTLASS's scale-only conversion, w = q * scale, skips the zero' tile (TMA, shared memory, a register
# fragment as large as the weight's) and one FP op per converted pair. Builds the FP16/BF16 Sm90 catalog
# (with and without zeros) and the kernels the tests and the benchmark use, in one parallel build; runs
# tests/test_fpaintb_sm90_gpu.py; then bench_fpaintb.py --sweep sm90 over the catalog tiles with and
# without zeros (CUDA graphs, weights rotated through >= 4x L2).
#   env: MS (the M values, default "32 64 128 256 1024"), MATCH (--sweep-match), TESTS (pytest -k),
#        BENCH_TIMEOUT (240)
set -uo pipefail
source benchmarks/device_env.sh
timeout 300 python3 benchmarks/prebuild_sm90.py --family fpaintb 2>&1 | tail -3
echo "build done at $(( $(date +%s) - T0 )) s"
timeout -s KILL ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py ${TESTS:+-k "$TESTS"} -q \
  -o faulthandler_timeout=100 -p no:cacheprovider > "$OUT/pytest_sm90.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest_sm90.log" | tail -12
M_ARGS=$(for m in ${MS:-32 64 128 256 1024}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-bits 4 --no-bf16 \
  --sweep-match "${MATCH:-^s90128x(32|64|128)(so)?sk}" $M_ARGS --json "$OUT/fpa_scaleonly.json" \
  > "$OUT/fpa_scaleonly.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"; grep -v "^ *int4 sweep" "$OUT/fpa_scaleonly.log" | tail -n 60
