#!/usr/bin/env bash
# Device calls for the 16-token Sm90 FpA x IntB tile at 9-16 rows (issue 16).
#   STAGE=tests (default): STAGE=tests benchmarks/device_ahead.sh (the FpA x IntB catalog, FP16 and BF16, and
#     the sweep's ahead kernels; tests/test_fpaintb_sm90_gpu.py but the sweep-only stock kernels' tests),
#     then saves the kernel cache into $OUT.
#   STAGE=bench: bench_fpaintb.py at MS (default the rows) with the BF16 columns, then
#     bench_model.py (issue 19) unless MODEL=0.
#   STAGE=bench with TEST_K: first the Sm90 GPU tests that -k selects.
#   STAGE=check: the plan-level GPU tests that reach 9-16 rows, and ncu of the M = 16 kernel beside cuBLAS.
#   env: TEST_TIMEOUT (300), BENCH_TIMEOUT (300), MODEL_TIMEOUT (240), MODEL_ARGS (bench_model.py's)
set -uo pipefail
source benchmarks/device_env.sh
if [ "${STAGE:-tests}" = tests ]; then  # device_ahead.sh's test stage (the same build and tests), then the cache
  STAGE=tests bash benchmarks/device_ahead.sh
  kcache_save
  exit 0
fi
timeout 200 python3 benchmarks/prebuild_sm90.py --family fpaintb 2>&1 | tail -1
if [ "$STAGE" = check ]; then  # the plan-level GPU tests that reach 9-16 rows, then ncu of M = 16 beside cuBLAS
  timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py tests/test_fpaintb_gpu.py \
    -q -p no:cacheprovider -k "nan_and_inf or cuda_graph or decode_variant_graph or bias_and_activation or graph_capture \
    or quant_linear or act_order or dequantize_path" > "$OUT/pytest_check.log" 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_check.log" | tail -20
  timeout -s KILL 120 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*_cycles_active\.avg\.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed" \
    -k regex:"qgemm_fpaintb|nvjet|gemm|gemv" --launch-skip 2 -c 2 \
    python3 benchmarks/diag_fpaintb_sm90.py --m 16 --nk 14336x21504 > "$OUT/ncu_m16.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|DRAM Throughput|dram__throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers|pipe_tensor|stalled_(long_scoreboard|wait|barrier|math|short_scoreboard|mio|dispatch|selected|lg)_per" "$OUT/ncu_m16.txt" | head -40
  exit 0
fi
if [ -n "${TEST_K:-}" ]; then  # a rerun of some Sm90 GPU tests first
  timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
    -k "$TEST_K" > "$OUT/pytest_rerun.log" 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_rerun.log" | tail -20
fi
M_ARGS=$(for m in ${MS:-1 9 16 32 64 128 256 1024 2048}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_fpaintb.py $M_ARGS --json "$OUT/fpaintb.json" > "$OUT/fpaintb.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^M=" "$OUT/fpaintb.log"
if [ "${MODEL:-1}" != 0 ]; then
  timeout -s KILL ${MODEL_TIMEOUT:-240} python3 benchmarks/bench_model.py ${MODEL_ARGS:-} --json "$OUT/model.json" > "$OUT/model.log" 2>&1
  echo "model rc=$? at $(( $(date +%s) - T0 )) s"; tail -n 25 "$OUT/model.log"
fi
