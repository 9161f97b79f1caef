#!/usr/bin/env bash
# Device session for the W8A8 prefill kernels (issue 15): one parallel build of the Sm90 candidates
# of benchmarks/diag_prefill.py for every CASE (and act_quant), the SASS counts of the candidates,
# then each CASE timed (candidates beside the plan's choice, outputs compared bit for bit).
# Carry: .whl (nvidia-cutlass wheel), and .kcache (kernels built on the CPU machine) to skip the build.
#   env: CASES    ';'-separated diag_prefill.py argument lists
#        TESTS    pytest paths to run after the build (GPU tests), PYTEST_K
set -uo pipefail
source benchmarks/device_env.sh  # the wheel, paths, $OUT, and a carried kernel cache (.kcache/)
CASES=${CASES:-"--m 2048 --no-fp8 --candidates coop,coop_alt"}
t0=$(date +%s)
timeout 300 python3 - "$CASES" ${EXTRA_SPECS:-} <<'PY'
import shlex, sys
import diag_prefill
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
specs = set(catalog(90, "act_quant"))
for case in sys.argv[1].split(";"):
    specs |= set(diag_prefill.candidate_specs(diag_prefill.parse(shlex.split(case))))
missing = sorted((s for s in specs if find_artifact(s, 90) is None), key=lambda s: s.name)
build_many(missing, 90, jobs=16, progress=lambda line: None)
print(f"built {len(missing)} kernels")
PY
echo "build rc=$? ($(( $(date +%s) - t0 )) s)"
for fb in .qgemm-cache/sm90/qgemm_w8a8_gemm_sm90_*/*/kernel.fatbin; do
  n=$(basename $(dirname $(dirname $fb)))
  cuobjdump -sass "$fb" > "$OUT/sass.txt" 2>&1
  echo "$n: $(grep -cE 'IGMMA' "$OUT/sass.txt") IGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$OUT/sass.txt") DEPBAR, $(grep -cE 'BAR\.(SYNC|ARV)' "$OUT/sass.txt") BAR, $(grep -cE 'LDL|STL' "$OUT/sass.txt") LDL/STL"
done
if [ -n "${TESTS:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu $TESTS -q -o faulthandler_timeout=60 \
    ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|ERROR|passed|failed" "$OUT/pytest.log" | tail -15
fi
IFS=';' read -ra cases <<< "$CASES"; i=0
for c in "${cases[@]}"; do
  i=$((i+1))
  echo "=== diag_prefill.py $c  ($(( $(date +%s) - t0 )) s)"
  timeout -s KILL ${CASE_TIMEOUT:-150} python3 benchmarks/diag_prefill.py $c 2>&1 | tee "$OUT/case_$i.txt" | grep -v "^\s*$"
done
# NCU_CASE: one diag_prefill.py argument list run with --once under ncu (every W8A8 and FP8 GEMM call
# it makes): speed of light, pipe utilization, and the stall reasons per issued instruction.
if [ -n "${NCU_CASE:-}" ]; then
  timeout -s KILL ${NCU_TIMEOUT:-240} ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
    -k regex:"qgemm_(w8a8|fp8)_.*gemm" -c ${NCU_COUNT:-3} python3 benchmarks/diag_prefill.py $NCU_CASE --once > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"; grep -E "^  qgemm|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A" "$OUT/ncu.txt" | head -40
fi
