#!/usr/bin/env bash
# One device call for the Sm90 FpA x IntB cluster experiment (issue 16): does multicasting the token tile
# to 2 or 4 CTAs along the weight rows (FpAIntBSm90Spec.cluster) speed up M = 32 ... 2048? The x tile is
# FP16 and the codes INT4, so at a 128 x 128 tile a CTA pulls 4x more activation bytes from L2 than
# weight bytes; a cluster of c shares them. Builds the FP16 catalog, the cluster kernels and the test's,
# in one parallel build; runs the cluster correctness test; then bench_fpaintb.py --sweep sm90 over the
# cluster kernels and today's catalog tiles (CUDA graphs, weights rotated through >= 4x L2).
#   env: MS (the M values, default "32 64 128 256 1024 2048"), MATCH (--sweep-match), BENCH_TIMEOUT (270)
set -uo pipefail
source benchmarks/device_env.sh
timeout 260 python3 benchmarks/prebuild_sm90.py --family fpaintb --acts f16 --sweep f16:4 --sweep bf16:8 \
  --match 'c[24]x1|^s90128x256sk' 2>&1 | tail -3
echo "build done at $(( $(date +%s) - T0 )) s"
timeout -s KILL 120 python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -k "cluster" -v -o faulthandler_timeout=60 \
  -p no:cacheprovider > "$OUT/pytest_cluster.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest_cluster.log" | tail -8
M_ARGS=$(for m in ${MS:-32 64 128 256 1024 2048}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${BENCH_TIMEOUT:-270} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-bits 4 --no-bf16 \
  --sweep-match "${MATCH:-^s90128x(32|64|128)(sk|c)|c[24]x1|^s90128x256sk0}" $M_ARGS --json "$OUT/fpa_cluster.json" \
  > "$OUT/fpa_cluster.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"; grep -v "^ *int4 sweep" "$OUT/fpa_cluster.log" | tail -n 50
