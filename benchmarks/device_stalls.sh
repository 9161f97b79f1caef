#!/usr/bin/env bash
# Nsight Compute of the Sm90 FpA x IntB kernel and cuBLAS FP16 at one shape (benchmarks/diag_fpaintb_sm90.py):
# speed of light, pipe utilization, and the warp stall reasons per issued instruction, each kernel's
# second (warm) call.   env: DIAG_ARGS (default "--m 1024 --nk 14336x21504"), NCU_TIMEOUT (240)
set -uo pipefail
source benchmarks/device_env.sh
timeout -s KILL ${NCU_TIMEOUT:-240} ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
  -k regex:"qgemm_fpaintb_gemm_sm90|nvjet|gemm|xmma" --launch-skip 2 -c 2 \
  python3 benchmarks/diag_fpaintb_sm90.py ${DIAG_ARGS:---m 1024 --nk 14336x21504} > "$OUT/ncu_stalls.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|tensor.*pct|pipe_tensor|stalled_(long_scoreboard|wait|barrier|math|short_scoreboard|mio|lg|dispatch|no_inst|branch|membar|sleeping|selected|not_selected|drain|tex)" "$OUT/ncu_stalls.txt" | head -90
