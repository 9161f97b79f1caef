#!/usr/bin/env bash
# Device session for the W8A8 Sm90 kernels: build what the carried cache lacks, look at the SASS,
# run the GPU tests (each stage under a hard timeout: a hung kernel must not eat the session), then
# the benchmark. Carry: .whl (nvidia-cutlass wheel), .kcache (kernels built on the CPU machine).
#   env: TESTS (pytest paths), PYTEST_K (-k expression), BENCH_ARGS, SANITIZE (tests/sanitize.py arguments),
#        NCU_CASES, SKIP_BUILD=1
set -uo pipefail
source benchmarks/device_env.sh  # the wheel, paths, $OUT, and a carried kernel cache (.kcache/)
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout 420 python3 benchmarks/prebuild_w8a8.py -j 16 2>&1 | tail -3
fi
fb=$(ls .qgemm-cache/sm90/qgemm_w8a8_gemm_sm90_s8s8_f16_sym_b128_128x128x128_c1x1_cooperative_persistent/*/kernel.fatbin | head -1)
cuobjdump -sass "$fb" > "$OUT/sass_sym128.txt" 2>&1
cuobjdump --dump-resource-usage "$fb" 2>&1 | grep -o "REG:[0-9]*.*STACK:[0-9]*" | head -2
echo "SASS sym 128x128: $(grep -c HGMMA "$OUT/sass_sym128.txt") HGMMA/IGMMA lines: $(grep -cE 'IGMMA|HGMMA' "$OUT/sass_sym128.txt"), I2F: $(grep -c 'I2F\.' "$OUT/sass_sym128.txt"), I2FP: $(grep -c 'I2FP' "$OUT/sass_sym128.txt"), LDL/STL: $(grep -cE 'LDL|STL' "$OUT/sass_sym128.txt")"
# -v and faulthandler_timeout: when the hard timeout kills pytest, the log names the running test
# (and a test stuck for 60 s dumps its Python stack).
timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu ${TESTS:-tests/test_w8a8_sm90_gpu.py tests/test_w8a8_gpu.py} -v --durations=12 \
  -o faulthandler_timeout=60 --maxfail=${MAXFAIL:-12} ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -30; tail -n 3 "$OUT/pytest.log"
if [ -n "${HOST:-}" ]; then
  timeout -s KILL 120 python3 benchmarks/diag_host_w8a8.py $HOST > "$OUT/host.txt" 2>&1; head -c 9000 "$OUT/host.txt"
fi
# NCU_CASES: ';'-separated argument lists for diag_w8a8.py, one ncu run each (-c 2: its two calls).
if [ -n "${NCU_CASES:-}" ]; then
  IFS=';' read -ra cases <<< "$NCU_CASES"; i=0
  for c in "${cases[@]}"; do
    i=$((i+1))
    timeout -s KILL 150 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy -k regex:qgemm_w8a8_gemm_sm90 \
      -c 2 python3 benchmarks/diag_w8a8.py $c > "$OUT/ncu_$i.txt" 2>&1
    echo "=== ncu $c"; grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Stall|Grid Size|Warp Cycles Per Issued" "$OUT/ncu_$i.txt" | head -40
  done
fi
if [ -n "${SANITIZE:-}" ]; then
  timeout -s KILL ${SANITIZE_TIMEOUT:-240} python3 tests/sanitize.py $SANITIZE > "$OUT/sanitize.log" 2>&1
  echo "sanitize rc=$?"; grep -E "SUMMARY|calls|PASS|FAIL" "$OUT/sanitize.log" | tail -12
fi
if [ -n "${BENCH_ARGS+x}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-360} python3 benchmarks/bench_w8a8.py --json "$OUT/bench_w8a8.json" $BENCH_ARGS > "$OUT/bench_w8a8.log" 2>&1
  tail -n 40 "$OUT/bench_w8a8.log"
fi
if [ -n "${SAVE_CACHE:-}" ]; then  # bring the built kernels back, to carry next time
  tar -C .qgemm-cache -czf "$OUT/qgemm-cache.tgz" . && ls -la "$OUT/qgemm-cache.tgz"
fi
