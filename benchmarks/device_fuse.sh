#!/usr/bin/env bash
# Device session for packed projections (qgemm.fuse_projections_): one call, every stage under a
# hard timeout (~9.5 minutes at most):
#   1. build in parallel the kernels of tests/test_fuse_gpu.py and of bench_model.py --fuse (the
#      packed Llama-3-8B shapes of VARIANTS);
#   2. tests/test_fuse_gpu.py (plus PYTEST_EXTRA);
#   3. bench_model.py --fuse (BENCH_ARGS: variants, batches, --prefill), optionally a second run
#      without --fuse (UNFUSED=1) for the same variants.
# Carry: .whl (the nvidia-cutlass wheel).
#   env: VARIANTS (w4a16), BENCH_ARGS, BENCH_TIMEOUT (300), TEST_TIMEOUT (150), PYTEST_EXTRA,
#        SKIP_BUILD, SKIP_TESTS, SKIP_BENCH, UNFUSED
set -uo pipefail
source benchmarks/device_env.sh  # wheel, PYTHONPATH, QGEMM_CACHE_DIR, OUT, T0
VARIANTS=${VARIANTS:-w4a16}
if [ -z "${SKIP_BUILD:-}" ]; then
  if [ -z "${SKIP_TESTS:-}" ]; then
    timeout 200 python3 -c "
import qgemm, test_fuse_gpu
qgemm.prebuild(test_fuse_gpu.plans_to_prebuild(), m_values=test_fuse_gpu.M_VALUES, jobs=8, progress=lambda l: None)
print('test kernels built')" 2>&1 | tail -2 &
  fi
  timeout 200 python3 benchmarks/bench_model.py --prebuild-only --fuse --variants $VARIANTS --jobs 12 \
    > "$OUT/prebuild_fused.log" 2>&1 &
  if [ -n "${UNFUSED:-}" ]; then
    timeout 200 python3 benchmarks/bench_model.py --prebuild-only --variants $VARIANTS --jobs 4 \
      > "$OUT/prebuild_unfused.log" 2>&1 &
  fi
  wait
  echo "build done ($(( $(date +%s) - T0 )) s)"; head -1 "$OUT/prebuild_fused.log"
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-150} python3 -m pytest -m gpu tests/test_fuse_gpu.py ${PYTEST_EXTRA:-} -q \
    -p no:cacheprovider -o faulthandler_timeout=100 > "$OUT/pytest_fuse.log" 2>&1
  echo "pytest rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "passed|failed|Error|assert" "$OUT/pytest_fuse.log" | tail -15
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_model.py --fuse --variants $VARIANTS \
    --json "$OUT/bench_model_fused.json" ${BENCH_ARGS:-} > "$OUT/bench_model_fused.log" 2>&1
  echo "bench fused rc=$? ($(( $(date +%s) - T0 )) s)"; tail -n 14 "$OUT/bench_model_fused.log"
  if [ -n "${UNFUSED:-}" ]; then
    timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_model.py --variants $VARIANTS \
      --json "$OUT/bench_model_unfused.json" ${BENCH_ARGS:-} > "$OUT/bench_model_unfused.log" 2>&1
    echo "bench unfused rc=$? ($(( $(date +%s) - T0 )) s)"; tail -n 14 "$OUT/bench_model_unfused.log"
  fi
fi
