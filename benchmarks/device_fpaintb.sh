#!/usr/bin/env bash
# Device session for the Sm90 FpA x IntB kernels (issue 16): build what the carried cache lacks (one
# parallel build), show the Sm90 kernels' registers and SASS (HGMMA, spills), run the GPU tests under a
# hard timeout (a hung kernel must not eat the session), then benchmarks/bench_fpaintb.py (CUDA graphs,
# weights rotated through >= 4x L2). Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built
# elsewhere: /work/cache-fpa/sm90 holds the fpaintb_gemm_sm90 catalog).
#   env: FAMILIES (comma-separated kernel families to build if missing), SKIP_BUILD=1, SKIP_TESTS=1,
#        TESTS (pytest paths), PYTEST_K (-k expression), TEST_TIMEOUT, SKIP_BENCH=1, BENCH_ARGS
#        (bench_fpaintb.py arguments, e.g. "--sweep sm90 --sweep-bits 4 --no-bf16 --nk 4096x12288 --m 64"),
#        BENCH_TIMEOUT, SAVE_CACHE=1 (bring the built kernels back as $OUT/qgemm-cache.tgz)
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
if [ -z "${SKIP_BUILD:-}" ]; then
  timeout 420 python3 - "${FAMILIES:-fpaintb_gemm_sm90,fpaintb_gemm,fpaintb_gemv,fpaintb_dequant}" <<'PY' 2>&1 | tail -3
import sys, time
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
specs = {s for f in sys.argv[1].split(",") for s in catalog(90, f)}
missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, 90) is None]
t0 = time.time()
build_many(missing, 90, jobs=16, progress=lambda line: None)
print(f"built {len(missing)} of {len(specs)} kernels for sm90 in {time.time() - t0:.0f} s")
PY
fi
for fb in .qgemm-cache/sm90/qgemm_fpaintb_gemm_sm90_f16_int*/*/kernel.fatbin; do
  [ -e "$fb" ] || continue
  name=$(basename "$(dirname "$(dirname "$fb")")"); name=${name#qgemm_fpaintb_gemm_sm90_}
  cuobjdump -sass "$fb" > "$OUT/sass_$name.txt" 2>&1
  echo "$name: $(cuobjdump --dump-resource-usage "$fb" 2>&1 | grep -o 'REG:[0-9]*.*STACK:[0-9]*' | head -1)," \
       "HGMMA $(grep -c HGMMA "$OUT/sass_$name.txt"), LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass_$name.txt")," \
       "PRMT $(grep -c PRMT "$OUT/sass_$name.txt"), LOP3 $(grep -c LOP3 "$OUT/sass_$name.txt")"
done
if [ -z "${SKIP_TESTS:-}" ]; then
  # -v and faulthandler_timeout: when the hard timeout kills pytest, the log names the running test.
  timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu ${TESTS:-tests/test_fpaintb_sm90_gpu.py} -v \
    --durations=10 -o faulthandler_timeout=60 --maxfail=${MAXFAIL:-12} ${PYTEST_K:+-k "$PYTEST_K"} \
    -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; grep -E "FAIL|ERROR|Timeout|passed|failed" "$OUT/pytest.log" | tail -30; tail -n 3 "$OUT/pytest.log"
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-360} python3 benchmarks/bench_fpaintb.py --json "$OUT/bench_fpaintb.json" ${BENCH_ARGS:-} \
    > "$OUT/bench_fpaintb.log" 2>&1
  echo "bench rc=$?"; tail -n 70 "$OUT/bench_fpaintb.log"
fi
if [ -n "${SAVE_CACHE:-}" ]; then
  tar -C .qgemm-cache -czf "$OUT/qgemm-cache.tgz" . && ls -la "$OUT/qgemm-cache.tgz"
fi
