#!/usr/bin/env bash
# Device session for the FpA x IntB decode variant (issue 16 part 2; FpAIntBGemvSpec stream=True in
# templates/fpaintb_gemv.cu.j2). One call, each stage under a hard timeout (~5-6 minutes in all):
#   1. build the fpaintb_gemv catalog (B-operand kernel + decode-variant configurations), the test-only
#      configurations (tests/test_fpaintb_gpu.py STREAM_EXTRA) and the tiled GEMMs the old decode path
#      used, in one parallel build (-j 16);
#   2. registers / spills of every decode-variant kernel and its K-loop SASS mix (one kernel's SASS kept);
#   3. the decode GPU tests (test_fpaintb_gpu.py -k "decode_variant or graph_capture"), float64 references;
#   4. bench_fpaintb.py --decode: M = 1, 4, 16 on the six shapes, old path vs each decode-variant
#      configuration vs the plan's choice vs tinygemm vs cuBLAS FP16 (and BF16) vs the copy-bandwidth floor,
#      CUDA-graph timing, weights rotated through >= 4x L2;
#   5. ncu (SpeedOfLight, LaunchStats, Occupancy, WarpStateStats, SchedulerStats) of one M = 1 INT4 call of the
#      new kernel, and of the old path's kernel on the same shape, for comparison.
# Carry: .whl (the nvidia-cutlass wheel); .qgemm-cache optional (kernels built before; the build skips them).
#   env: SKIP_BUILD=1, SKIP_TESTS=1, SKIP_BENCH=1, SKIP_NCU=1, PYTEST_K (default below), TEST_TIMEOUT (240),
#        BENCH_ARGS (extra bench_fpaintb.py arguments, e.g. "--m 1 --nk 4096x12288"), BENCH_TIMEOUT (300),
#        NCU_SHAPE ("--k 14336 --n 21504"), SAVE_CACHE=1 (bring the built kernels back as $OUT/qgemm-cache.tgz)
set -uo pipefail
source benchmarks/device_env.sh  # wheel, PYTHONPATH, QGEMM_CACHE_DIR, OUT, T0
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout 300 python3 - <<'PY' 2>&1 | tail -4
import time
import torch
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from bench_fpaintb import old_decode_choice, SHAPES_KN
from test_fpaintb_gpu import stream_test_specs
target = 90 if torch.cuda.get_device_capability() == (9, 0) else 80
sms = torch.cuda.get_device_properties(0).multi_processor_count
specs = set(catalog(target, "fpaintb_gemv"))
specs |= {s for a in ("f16", "bf16") for b in (4, 8) for s in stream_test_specs(a, b, target)}
specs |= {old_decode_choice(m, n, k, b, sms).spec for m in (1, 4, 16) for k, n in SHAPES_KN for b in (4, 8)}
missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, target) is None]
t0 = time.time()
build_many(missing, target, jobs=16, progress=lambda line: None)
print(f"built {len(missing)} of {len(specs)} kernels for sm{target} in {time.time() - t0:.0f} s")
PY
fi
echo "--- decode-variant kernels: registers, stack (spills), K-loop SASS"
for fb in .qgemm-cache/sm9*/qgemm_fpaintb_gemv_*_s/*/kernel.fatbin .qgemm-cache/sm8*/qgemm_fpaintb_gemv_*_s/*/kernel.fatbin; do
  [ -e "$fb" ] || continue
  name=$(basename "$(dirname "$(dirname "$fb")")")
  echo "$name $(cuobjdump --dump-resource-usage "$fb" 2>&1 | grep -o 'REG:[0-9]* STACK:[0-9]*' | head -1)"
done
fb=$(ls .qgemm-cache/sm9*/qgemm_fpaintb_gemv_sm80_f16_int4_m16_n16_wk8_o16_p2_r8_s/*/kernel.fatbin 2>/dev/null | head -1)
if [ -n "$fb" ]; then
  cuobjdump -sass "$fb" > "$OUT/sass_f16_int4_decode.txt" 2>&1
  echo "f16 int4 decode kernel: HMMA $(grep -c HMMA "$OUT/sass_f16_int4_decode.txt"), LDG.E.EF.128 $(grep -c 'LDG.E.EF.128' "$OUT/sass_f16_int4_decode.txt"), LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass_f16_int4_decode.txt")"
fi
echo "build+sass done at +$(( $(date +%s) - T0 )) s"
if [ -z "${SKIP_TESTS:-}" ]; then
  # -v and faulthandler_timeout: when the hard timeout kills pytest, the log names the running test.
  timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu tests/test_fpaintb_gpu.py -v --durations=8 \
    -o faulthandler_timeout=60 --maxfail=${MAXFAIL:-12} -k "${PYTEST_K:-decode_variant or graph_capture}" \
    -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -30; tail -n 3 "$OUT/pytest.log"
  echo "tests done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_fpaintb.py --decode --json "$OUT/bench_decode.json" \
    ${BENCH_ARGS:-} > "$OUT/bench_decode.log" 2>&1
  echo "bench rc=$?"; tail -n 60 "$OUT/bench_decode.log"
  echo "bench done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_NCU:-}" ]; then
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  for which in new old; do
    flag=$([ "$which" = old ] && echo --old || echo)
    regex=$([ "$which" = old ] && echo 'regex:qgemm_fpaintb_(gemv|gemm)_sm80' || echo 'regex:qgemm_fpaintb_gemv_.*_s$')
    timeout -s KILL 90 "$NCU_BIN" --section SpeedOfLight --section LaunchStats --section Occupancy \
      --section WarpStateStats --section SchedulerStats -k "$regex" --launch-skip 2 -c 1 \
      -o "$OUT/ncu_$which" -f python3 benchmarks/diag_gemv.py ${NCU_SHAPE:---k 14336 --n 21504} --m 1 $flag \
      > "$OUT/ncu_$which.log" 2>&1
    "$NCU_BIN" --import "$OUT/ncu_$which.ncu-rep" --print-units base > "$OUT/ncu_$which.txt" 2>&1
    echo "=== ncu $which: $(grep -m1 '^kernel' "$OUT/ncu_$which.log")"
    grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Theoretical Occupancy|Grid Size|Block Size|Warp Cycles Per Issued|Active Warps Per Scheduler|Eligible Warps" "$OUT/ncu_$which.txt" | head -24
  done
  echo "ncu done at +$(( $(date +%s) - T0 )) s"
fi
if [ -n "${SAVE_CACHE:-}" ]; then
  tar -C .qgemm-cache -czf "$OUT/qgemm-cache.tgz" . && ls -la "$OUT/qgemm-cache.tgz"
fi
