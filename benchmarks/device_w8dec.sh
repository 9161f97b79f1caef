#!/usr/bin/env bash
# Device session for the fused W8A8 decode kernel (W8A8GemvSpec, templates/w8a8_gemv.cu.j2), one
# call, ~5 minutes: build what the carried cache lacks, SASS/resource usage of the catalog
# variants, the GPU tests, the decode benchmark (fused vs today's act_quant + Sm90 path vs cuBLAS
# FP16 vs the floor; CUDA graphs, weights rotated >= 4x L2; every variant x CTAs/SM), one ncu
# profile of an M = 1 call. Every stage under a hard timeout.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built earlier; the Sm90 decode GEMMs
# of today's path are built here when missing, ~1 min at -j16).
# Worst case (every stage at its timeout) 590 s; typically ~5 minutes.
#   env: TESTS (pytest paths), PYTEST_K (-k expression), BENCH_ARGS (default: --decode --decode-sweep),
#        NCU_CASE (diag_w8dec.py arguments, default "2112 7168 1 symmetric"), SKIP_BUILD, SAVE_CACHE,
#        BUILD_TIMEOUT (180), TEST_TIMEOUT (170), BENCH_TIMEOUT (180)
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout ${BUILD_TIMEOUT:-180} python3 benchmarks/prebuild_w8dec.py -j 16 2>&1 | tail -3
fi
# SASS of the catalog variants (asymmetric FP16: the most registers).
for fb in .qgemm-cache/sm90/qgemm_w8a8_gemv_sm*_f16_s8_f16_asym_*/*/kernel.fatbin; do
  name=$(basename "$(dirname "$(dirname "$fb")")")
  cuobjdump -sass "$fb" > "$OUT/sass_$name.txt" 2>&1
  echo "$name: $(cuobjdump --dump-resource-usage "$fb" 2>&1 | grep -o 'REG:[0-9]*.*STACK:[0-9]*' | head -1)," \
       "LDG.E.EF.128 $(grep -c 'LDG.E.EF.128' "$OUT/sass_$name.txt"), IMMA $(grep -c IMMA "$OUT/sass_$name.txt")," \
       "LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass_$name.txt")"
done
timeout -s KILL ${TEST_TIMEOUT:-170} python3 -m pytest -m gpu ${TESTS:-tests/test_w8a8_gemv_gpu.py} -q --durations=8 \
  -o faulthandler_timeout=60 --maxfail=${MAXFAIL:-12} ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -25; tail -n 3 "$OUT/pytest.log"
timeout -s KILL ${BENCH_TIMEOUT:-180} python3 benchmarks/bench_w8a8.py --json "$OUT/bench_w8dec.json" \
  ${BENCH_ARGS:---decode --decode-sweep} > "$OUT/bench_w8dec.log" 2>&1
echo "bench rc=$?"; grep -A 200 "^device" "$OUT/bench_w8dec.log" | head -80 || tail -n 60 "$OUT/bench_w8dec.log"
# One M = 1 call under ncu (the kernel only; -c 1: the warm-up call).
timeout -s KILL 60 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats -k regex:qgemm_w8a8_gemv -c 1 \
  python3 benchmarks/diag_w8dec.py ${NCU_CASE:-2112 7168 1 symmetric} > "$OUT/ncu_m1.txt" 2>&1
echo "=== ncu ${NCU_CASE:-2112 7168 1 symmetric}"
grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Grid Size|Block Size|Warp Cycles Per Issued|Stall" "$OUT/ncu_m1.txt" | head -30
if [ -n "${SAVE_CACHE:-}" ]; then  # bring the built kernels back, to carry next time
  tar -C .qgemm-cache -czf "$OUT/qgemm-cache.tgz" . && ls -la "$OUT/qgemm-cache.tgz"
fi
