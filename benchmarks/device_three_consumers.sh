#!/usr/bin/env bash
# Device session for the W8A8 192 x 128 tile on three consumer warp groups (issue 15, prefill): one parallel
# build of its kernels, the ones its tests compare with and the other symmetric prefill tiles' test kernels, the plans' choices for the timed shapes and the
# candidates; the SASS counts of the three-consumer kernels; their GPU tests; then diag_prefill.py at each
# CASE (candidates beside the plan's choice, outputs compared bit for bit), and optionally bench_w8a8.py.
# Carry: .whl (nvidia-cutlass wheel); .kcache (an earlier call's kernel cache) to skip builds.
#   env: CASES   ';'-separated diag_prefill.py argument lists
#        BENCH   bench_w8a8.py arguments (empty: no bench run)
#        NCU_CASE, NCU_COUNT  one diag_prefill.py argument list run once under ncu
set -uo pipefail
source benchmarks/device_env.sh
CASES=${CASES:-"--m 2048 --no-fp8 --candidates coop,coop256,coop192,coop192_alt"}
t0=$(date +%s)
timeout 420 python3 - "$CASES" <<'PY'
import shlex, sys
import diag_prefill
from prebuild_w8a8 import test_specs, three_consumer_specs
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from qgemm.w8a8 import heuristics
# The tests' kernels of the prefill tiles (symmetric, not swapped): the three-consumer ones, the 256- and
# 128-row ones they are compared with, the symmetric stream-K ones.
specs = set(catalog(90, "act_quant")) | set(three_consumer_specs()) | {s for s in test_specs() if s.scheme == "symmetric" and not s.swap_ab} | \
    {s for s in catalog(90, "w8a8_gemm_sm90") if s.scheme == "symmetric" and not s.swap_ab and s.output == "f16"}
shapes = {(2048, 4096, 4096), (2048, 1024, 4096), (2048, 14336, 4096), (2048, 4096, 14336)}
for case in sys.argv[1].split(";"):
    args = diag_prefill.parse(shlex.split(case))
    specs |= set(diag_prefill.candidate_specs(args))
    for nk in args.nk or []:
        n, k = map(int, nk.split("x"))
        shapes.add((args.m, n, k))
for m, n, k in shapes:
    specs.add(heuristics.w8a8_sm90_choice(m, n, k, 128, "symmetric", "f16", "clamp", 132).spec)
missing = sorted((s for s in specs if find_artifact(s, 90) is None), key=lambda s: s.name)
print(f"building {len(missing)} kernels", flush=True)
build_many(missing, 90, jobs=16, progress=lambda line: None)
PY
echo "build rc=$? ($(( $(date +%s) - t0 )) s)"
for fb in .qgemm-cache/sm90/qgemm_w8a8_gemm_sm90_*cooperative3*/*/kernel.fatbin; do
  n=$(basename $(dirname $(dirname $fb)))
  cuobjdump -sass "$fb" > "$OUT/sass.txt" 2>&1
  cuobjdump -res-usage "$fb" 2>&1 | grep -o 'REG:[0-9]*\|STACK:[0-9]*' | tr '\n' ' '
  echo "$n: $(grep -cE 'IGMMA' "$OUT/sass.txt") IGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$OUT/sass.txt") DEPBAR, $(grep -cE 'BAR\.(SYNC|ARV)' "$OUT/sass.txt") BAR, $(grep -cE 'LDL|STL' "$OUT/sass.txt") LDL/STL"
done
timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu tests/test_w8a8_sm90_gpu.py -q -k "${PYTEST_K:-three_consumer}" \
  -o faulthandler_timeout=90 -p no:cacheprovider > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|ERROR|passed|failed" "$OUT/pytest.log" | tail -15
IFS=';' read -ra cases <<< "$CASES"; i=0
for c in "${cases[@]}"; do
  i=$((i+1))
  echo "=== diag_prefill.py $c  ($(( $(date +%s) - t0 )) s)"
  timeout -s KILL ${CASE_TIMEOUT:-200} python3 benchmarks/diag_prefill.py $c 2>&1 | tee "$OUT/case_$i.txt" | grep -v "^\s*$"
done
if [ -n "${BENCH:-}" ]; then
  echo "=== bench_w8a8.py $BENCH  ($(( $(date +%s) - t0 )) s)"
  timeout -s KILL ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_w8a8.py $BENCH --json "$OUT/bench_w8a8.json" 2>&1 | tee "$OUT/bench.txt" | tail -30
fi
if [ -n "${NCU_CASE:-}" ]; then
  timeout -s KILL ${NCU_TIMEOUT:-240} ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --metrics "regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" \
    -k regex:"qgemm_w8a8_.*gemm" -c ${NCU_COUNT:-3} python3 benchmarks/diag_prefill.py $NCU_CASE --once > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"; grep -E "^  qgemm|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|pipe_tensor.*cycles_active|Executed Ipc A" "$OUT/ncu.txt" | head -40
fi
echo "done ($(( $(date +%s) - t0 )) s)"
