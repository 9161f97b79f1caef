#!/usr/bin/env bash
# One device call (issue 16): 9 and 16 rows of FpA x IntB INT4 (benchmarks/diag_decode16.py: the plan's
# choice against the 16-row tiled GEMM and the decode variant's 16-token CTAs), on the shapes of
# DIAG_ARGS (default: issue 16's six and Llama-3-8B's), each call after another qgemm call and, with
# BETWEEN=1, also after a small torch kernel (as in a model). Builds the kernels it times first.
#   env: DIAG_ARGS (diag_decode16.py arguments), BETWEEN=1
set -uo pipefail
source benchmarks/device_env.sh
timeout 200 python3 - <<'PY' 2>&1 | tail -1
from cutlass_gen.build import build_many
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec
from diag_decode16 import WIDE16
from qgemm.fpaintb import heuristics
# the 16-token CTAs, and the 16-row tiled GEMM the plan runs at M = 9-16 (the same for every shape)
specs = [FpAIntBGemvSpec("f16", 4, arch=80, stream=True, **WIDE16),
         heuristics.fpaintb_gemm_choice(16, 4096, 4096, 4, "f16", 80, 132).spec]
build_many(specs, 90, jobs=4, progress=lambda line: None)
print(f"built {len(specs)} kernels")
PY
echo "build done at $(( $(date +%s) - T0 )) s"
for between in "" ${BETWEEN:+--between}; do
  timeout -s KILL 150 python3 benchmarks/diag_decode16.py ${DIAG_ARGS:-} $between --json "$OUT/diag_decode16$between.json" \
    > "$OUT/diag_decode16$between.log" 2>&1
  echo "diag $between rc=$?"; cat "$OUT/diag_decode16$between.log"
done
