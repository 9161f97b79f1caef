#!/usr/bin/env bash
# Device session for the Sm90 FpA x IntB kernels (issue 16): build what the carried cache lacks, count
# HGMMA and local-memory (spill) instructions in the Sm90 kernels' SASS, run the GPU tests under a hard
# timeout (a hung kernel must not eat the session), then benchmarks/bench_fpaintb.py (CUDA graphs, weights
# rotated through >= 4x L2). Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built elsewhere:
# /work/cache-fpa/sm90 holds the fpaintb_gemm_sm90 catalog).
#   env: FAMILIES (kernel families to build if missing), SKIP_TESTS=1, TESTS (pytest paths), PYTEST_K
#        (-k expression), TEST_TIMEOUT, SKIP_BENCH=1, BENCH_ARGS (bench_fpaintb.py arguments, e.g.
#        "--sweep sm90 --nk 4096x12288 --m 64 --m 256"), BENCH_TIMEOUT
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=$PWD/.qgemm-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for f in ${FAMILIES:-fpaintb_gemm_sm90 fpaintb_gemm fpaintb_gemv fpaintb_dequant}; do
  timeout 400 python3 -m qgemm build --sm 90 -j 16 --family $f 2>&1 | tail -1
done
for fb in .qgemm-cache/sm90/qgemm_fpaintb_gemm_sm90_f16_int4_*/*/kernel.fatbin; do
  name=$(basename "$(dirname "$(dirname "$fb")")")
  cuobjdump -sass "$fb" > "$OUT/sass_$name.txt" 2>&1
  echo "SASS $name: HGMMA $(grep -c HGMMA "$OUT/sass_$name.txt"), LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass_$name.txt"), PRMT $(grep -c PRMT "$OUT/sass_$name.txt"), LOP3 $(grep -c LOP3 "$OUT/sass_$name.txt")"
done
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu ${TESTS:-tests/test_fpaintb_sm90_gpu.py} -q \
    --maxfail=${MAXFAIL:-12} ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -30
  echo "pytest rc=${PIPESTATUS[0]}"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-360} python3 benchmarks/bench_fpaintb.py --json "$OUT/bench_fpaintb.json" ${BENCH_ARGS:-} \
    > "$OUT/bench_fpaintb.log" 2>&1
  echo "bench rc=$?"
  tail -n 70 "$OUT/bench_fpaintb.log"
fi
