#!/usr/bin/env bash
# Device session for the decode variant's bulk-copy ring (FpAIntBGemvSpec.bulk_stages, sm90): one call,
# every stage under a hard timeout (~9 minutes at most):
#   1. build the decode kernels (catalog, the tests' extras and every bulk configuration) and the
#      benchmark's, in parallel (-j 16);
#   2. the decode-variant GPU tests (every configuration, bulk ones included; PYTEST_K narrows them);
#   3. bench_fpaintb.py --decode at M = 1 and 16 (FP16), the bulk configurations' columns against the
#      plan's choice, cuBLAS FP16, tinygemm and the floor (BENCH_ARGS adds or overrides arguments);
#   4. compute-sanitizer (memcheck, racecheck, synccheck) over two bulk kernels on small shapes that
#      refill every stage and split K.
# Carry: .whl (the nvidia-cutlass wheel), .kcache (optional).
set -uo pipefail
source benchmarks/device_env.sh  # wheel, PYTHONPATH, QGEMM_CACHE_DIR, OUT, T0
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout 300 python3 benchmarks/prebuild_decode.py -j 16 2>&1 | tail -3
  echo "build done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu tests/test_fpaintb_gpu.py \
    -q --durations=6 -o faulthandler_timeout=60 --maxfail=12 \
    -k "${PYTEST_K:-decode_variant}" -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -20
  echo "tests done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_fpaintb.py --decode --m 1 --m 16 --no-bf16 \
    --decode-match 'b[0-9]s$' ${BENCH_ARGS:-} --json "$OUT/bench_fpaintb_bulk.json" > "$OUT/bench_fpaintb.log" 2>&1
  echo "fpaintb bench rc=$?"; grep -E "^M=|^device" "$OUT/bench_fpaintb.log" | cut -c1-700
  echo "bench done at +$(( $(date +%s) - T0 )) s"
fi
if [ -z "${SKIP_SANITIZER:-}" ]; then
  cat > /tmp/bulk_sanitize.py <<'PY'
import torch
import qgemm
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec
from qgemm.fpaintb import heuristics
from gpu_util import randn
from test_fpaintb_gpu import random_weight
for bits, config in ((4, dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=4)), (8, dict(n_tiles=2, warps_k=4, bulk_stages=4))):
    spec = FpAIntBGemvSpec("f16", bits, arch=90, stream=True, **config)
    for n, k, split in ((40, 2112, 0), (264, 8320, 8)):
        w = random_weight(k, n, bits, 64, True, torch.float16, seed=n)
        plan = qgemm.FpAIntBPlan(w)
        for m in (1, 9):
            plan(randn(m, k, dtype=torch.float16, seed=m), choice=heuristics.FpAIntBChoice(spec, split))
torch.cuda.synchronize()
print("ran")
PY
  for tool in memcheck racecheck synccheck; do
    timeout -s KILL ${SANITIZER_TIMEOUT:-60} compute-sanitizer --tool $tool --report-api-errors no python3 /tmp/bulk_sanitize.py > "$OUT/sanitizer_$tool.log" 2>&1
    echo "sanitizer $tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ran' "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
  done
  echo "sanitizer done at +$(( $(date +%s) - T0 )) s"
fi
