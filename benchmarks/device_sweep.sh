#!/usr/bin/env bash
# One device call for the two tuning sweeps the heuristics wait on, ~8 minutes:
#   * issue 15: the W8A8 decode kernel's variants x CTAs/SM, the sm90 cluster ("_cl8") ones included
#     (bench_w8a8.py --decode --decode-sweep; W8A8_GEMV_PREFER_CLUSTER is set from it);
#   * issue 16: every Sm90 FpA x IntB tile, schedule and stream-K split count against the plan's own
#     choice, the Sm80 path and cuBLAS FP16 (bench_fpaintb.py --sweep sm90; heuristics.FPAINTB_SM90_*).
# Both under CUDA-graph replay with weights rotated through >= 4x L2, every stage under a hard timeout.
# Carry: .whl (the nvidia-cutlass wheel) and, optionally, .qgemm-cache.tar.xz (a tarball of a kernel
# cache's sm90/ folder built elsewhere with the same nvcc; what it lacks is built here at -j16).
#   env: W8DEC_ARGS, FPA_ARGS (extra arguments), W8DEC_TIMEOUT (200), FPA_TIMEOUT (330), SKIP_W8DEC, SKIP_FPA
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-/tmp/qcache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$QGEMM_CACHE_DIR"
if [ -f .qgemm-cache.tar.xz ]; then
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .qgemm-cache.tar.xz "$QGEMM_CACHE_DIR"
  echo "carried kernels: $(ls "$QGEMM_CACHE_DIR"/sm90 | wc -l)"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -z "${SKIP_W8DEC:-}" ]; then
  timeout -s KILL ${W8DEC_TIMEOUT:-200} sh -c "python3 benchmarks/prebuild_w8dec.py -j 16 | tail -2 &&
    python3 benchmarks/bench_w8a8.py --decode --decode-sweep --json $OUT/w8dec.json ${W8DEC_ARGS:-}" > "$OUT/w8dec.log" 2>&1
  echo "w8dec rc=$?"; tail -n 45 "$OUT/w8dec.log"
fi
if [ -z "${SKIP_FPA:-}" ]; then
  timeout -s KILL ${FPA_TIMEOUT:-330} python3 benchmarks/bench_fpaintb.py --sweep sm90 --no-bf16 \
    ${FPA_ARGS:---m 16 --m 32 --m 64 --m 128 --m 256 --m 512 --m 1024} --json "$OUT/fpa_sweep.json" > "$OUT/fpa_sweep.log" 2>&1
  echo "fpa rc=$?"; tail -n 40 "$OUT/fpa_sweep.log"
fi
