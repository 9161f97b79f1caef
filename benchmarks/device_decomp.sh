#!/usr/bin/env bash
# Device calls for the stream-K decomposition of the Sm90 FpA x IntB kernels (ext[5]; issue 16).
#   STAGE=sweep (default): the GPU tests of the knob, then bench_fpaintb.py --sweep sm90 --sweep-decomposition
#     over the plan's 128-deep scale-only tiles, CUTLASS's decomposition (sk0) against forced data-parallel
#     (dp) and forced stream-K (skall), on the six shapes and Llama-3-8B's (packed q/k/v, o, gate/up, down);
#     M = 16 to 256 (MS), then 1024 on the 128 x 128 tile alone; the kernel cache into $OUT.
#   STAGE=bench: the Sm90 GPU tests TEST_K selects (default the dispatch, graph, stream-K and NaN tests),
#     then STAGE=bench benchmarks/device_narrow.sh (the plan's table, MS, and the model unless MODEL=0).
#   Carry [".whl", ".kcache"] (a cache built here with benchmarks/prebuild_sm90.py, or kcache_save's chunks).
set -uo pipefail
source benchmarks/device_env.sh
if [ "${STAGE:-sweep}" = bench ]; then
  timeout 240 python3 benchmarks/prebuild_sm90.py --family fpaintb 2>&1 | tail -1
  timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
    -k "${TEST_K:-decomposition or dispatch or cuda_graph or stream_k or nan_and_inf or tile_ahead}" > "$OUT/pytest_bench.log" 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_bench.log" | tail -20
  STAGE=bench bash benchmarks/device_narrow.sh
  exit 0
fi
# the kernels the tests, the sweep and the plans' INT4 / INT8 rows run (the plan's 128-deep tiles)
timeout 240 python3 benchmarks/prebuild_sm90.py --sweep f16:4 --sweep bf16:4 --sweep f16:8 \
  --match '^s90128x(16|32|64|128)k128(so)?ahsk0$' 2>&1 | tail -1
timeout -s KILL ${TEST_TIMEOUT:-180} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
  -k "decomposition or stream_k_workspace" > "$OUT/pytest_decomp.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_decomp.log" | tail -20
NK="--nk 14336x21504 --nk 4096x12288 --nk 4096x22016 --nk 11008x4096 --nk 8192x28672 --nk 28672x8192"
NK="$NK --nk 4096x6144 --nk 4096x4096 --nk 4096x28672 --nk 14336x4096"
M_ARGS=$(for m in ${MS:-16 32 64 128 256}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${SWEEP_TIMEOUT:-330} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-decomposition --sweep-bits 4 \
  --no-bf16 --sweep-match '^s90128x(16|32|64|128)k128soah(sk0|dp|skall)$' $NK $M_ARGS --json "$OUT/decomp.json" > "$OUT/decomp.log" 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
if [ -n "${MS_WIDE:-1024}" ]; then
  M_ARGS=$(for m in ${MS_WIDE:-1024}; do printf -- "--m %s " "$m"; done)
  timeout -s KILL ${WIDE_TIMEOUT:-120} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-decomposition --sweep-bits 4 \
    --no-bf16 --sweep-match '^s90128x128k128soah(sk0|dp|skall)$' $NK $M_ARGS --json "$OUT/decomp_wide.json" > "$OUT/decomp_wide.log" 2>&1
  echo "wide sweep rc=$? at $(( $(date +%s) - T0 )) s"
fi
python3 - "$OUT" <<'EOF'
# per (shape, M): the plan's kernel and time, then each swept kernel's time
import json, sys, os
for name in ("decomp.json", "decomp_wide.json"):
    path = os.path.join(sys.argv[1], name)
    if not os.path.exists(path):
        continue
    for r in json.load(open(path))["rows"]:
        sweep = r.get("int4_sweep", {})
        cells = " ".join(f"{k.replace('s90128x', '').replace('k128soah', '')}={v:.1f}" for k, v in sweep.items())
        print(f"M={r['m']:>5} K={r['k']:>5} N={r['n']:>5} cublas={r.get('cublas_us', float('nan')):.1f} plan={r.get('int4_us', float('nan')):.1f} ({r.get('int4_kernel')}) | {cells}")
EOF
kcache_save > /dev/null
