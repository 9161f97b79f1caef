#!/usr/bin/env bash
# Device session for the L2 prefetch before griddepcontrol.wait (FpAIntBChoice.l2_prefetch,
# W8A8GemvChoice.l2_prefetch) and programmatic launch of the fused W8A8 decode kernel. One call,
# every stage under a hard timeout (~9 minutes at most):
#   1. build the decode kernels of both families, the paths the benchmarks compare with and the
#      tests' kernels, in parallel (-j 16);
#   2. the GPU tests of the decode kernels: prefetch bit-equal to no prefetch, the dependent chains,
#      graphs and streams (PYTEST_K narrows them);
#   3. bench_fpaintb.py --decode at M = 1 on the six shapes and Llama-3-8B's four, the plan's
#      choice with each L2 prefetch size (plan only: no per-configuration columns), against cuBLAS
#      FP16, tinygemm and the floor; then bench_w8a8.py --decode at M = 1 with the same sizes.
# Carry: .whl (the nvidia-cutlass wheel).
#   env: SKIP_BUILD, SKIP_TESTS, SKIP_BENCH, PYTEST_K, TEST_TIMEOUT (200), SIZES ("4096 16384 65536"),
#        FP_ARGS / W8_ARGS (extra benchmark arguments)
set -uo pipefail
source benchmarks/device_env.sh  # wheel, PYTHONPATH, QGEMM_CACHE_DIR, OUT, T0
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout 200 python3 benchmarks/prebuild_w8dec.py -j 16 2>&1 | tail -2 &
  timeout 200 python3 benchmarks/prebuild_decode.py -j 8 2>&1 | tail -2 &
  wait
  echo "build done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu tests/test_fpaintb_gpu.py tests/test_w8a8_gemv_gpu.py \
    -q --durations=6 -o faulthandler_timeout=60 --maxfail=12 \
    -k "${PYTEST_K:-l2_prefetch or programmatic or graph or cluster_variants}" -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -20
  echo "tests done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  sizes=""; for s in ${SIZES:-4096 16384 65536}; do sizes="$sizes --l2-prefetch $s"; done
  timeout -s KILL 150 python3 benchmarks/bench_fpaintb.py --decode --m 1 --plan-only --no-bf16 $sizes \
    --nk 14336x21504 --nk 4096x12288 --nk 4096x22016 --nk 11008x4096 --nk 8192x28672 --nk 28672x8192 \
    --nk 4096x4096 --nk 4096x1024 --nk 4096x14336 --nk 14336x4096 ${FP_ARGS:-} \
    --json "$OUT/bench_fpaintb_decode.json" > "$OUT/bench_fpaintb.log" 2>&1
  echo "fpaintb bench rc=$?"; grep -E "^M=|^device" "$OUT/bench_fpaintb.log" | cut -c1-400
  echo "fpaintb bench done at +$(( $(date +%s) - T0 )) s"
  timeout -s KILL 150 python3 benchmarks/bench_w8a8.py --decode --m 1 $sizes ${W8_ARGS:-} \
    --json "$OUT/bench_w8dec.json" > "$OUT/bench_w8dec.log" 2>&1
  echo "w8a8 bench rc=$?"; grep -A 60 "^device" "$OUT/bench_w8dec.log" | head -50
  echo "bench done at +$(( $(date +%s) - T0 )) s"
fi
