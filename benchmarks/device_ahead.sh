#!/usr/bin/env bash
# Device calls for qgemm's Sm90 FpA x IntB consumer loop (FpAIntBSm90Spec mainloop="ahead", issue 16).
#   STAGE=bench (default): builds the FP16 FpA x IntB catalog and the sweep kernels MATCH selects in one
#     parallel build, then bench_fpaintb.py --sweep sm90 over them (CUDA graphs, weights rotated through
#     >= 4x L2); NCU=1 adds ncu of the plan's M = 1024 kernel and of CUTLASS's loop on the same tile.
#   STAGE=tests: builds the whole Sm90 FpA x IntB catalog (FP16 and BF16) and the sweep's ahead kernels,
#     then runs tests/test_fpaintb_sm90_gpu.py (TEST_K: its -k, by default all but the tests of sweep-only
#     stock kernels, which build serially).
#   env: MS (default "128 256 1024"), MATCH (--sweep-match), BENCH_TIMEOUT (300), TEST_TIMEOUT (300)
set -uo pipefail
source benchmarks/device_env.sh
export STAGE=${STAGE:-bench}
export MATCH=${MATCH:-'^s90128x(16k128soah|256k128soah|(32|64|128)(k128soah|so))sk0$'}
if [ "$STAGE" = tests ]; then  # the whole catalog, and the sweep's ahead kernels the tests take
  timeout 330 python3 benchmarks/prebuild_sm90.py --family fpaintb --sweep f16:4 --match ah 2>&1 | tail -3
else
  timeout 330 python3 benchmarks/prebuild_sm90.py --family fpaintb --acts f16 --sweep f16:4 --match "$MATCH" 2>&1 | tail -3
fi
echo "build done at $(( $(date +%s) - T0 )) s"
if [ "$STAGE" = tests ]; then
  timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
    -k "${TEST_K:-not cluster and not k128_and_wide}" > "$OUT/pytest_sm90.log" 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_sm90.log" | tail -20
  exit 0
fi
M_ARGS=$(for m in ${MS:-128 256 1024}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-bits 4 --no-bf16 \
  --sweep-match "$MATCH" $M_ARGS --json "$OUT/fpa_ahead.json" > "$OUT/fpa_ahead.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "M=" "$OUT/fpa_ahead.log" | tail -n 12
if [ -n "${NCU:-}" ]; then  # the plan's M = 1024 kernel (qgemm's loop) and CUTLASS's loop, beside cuBLAS
  for v in "" --cutlass-loop; do
    timeout -s KILL 100 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
      -k regex:"qgemm_fpaintb_gemm_sm90|nvjet" --launch-skip 2 -c 2 \
      python3 benchmarks/diag_fpaintb_sm90.py --m 1024 --nk 14336x21504 $v > "$OUT/ncu_ahead$v.txt" 2>&1
    echo "ncu $v rc=$?"
    grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|pipe_tensor|stalled_(long_scoreboard|wait|barrier|math|short_scoreboard|mio|dispatch|selected)_per" "$OUT/ncu_ahead$v.txt" | head -30
  done
fi
