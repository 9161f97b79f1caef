#!/usr/bin/env bash
# Device calls for the stream-K decomposition of the Sm90 FpA x IntB kernels (ext[5]; issue 16).
#   STAGE=sweep (default): the GPU tests of the knob, then bench_fpaintb.py --sweep sm90 --sweep-decomposition
#     over the plan's 128-deep scale-only tiles, CUTLASS's decomposition (sk0) against forced data-parallel
#     (dp) and forced stream-K (skall), on the six shapes and Llama-3-8B's (packed q/k/v, o, gate/up, down);
#     M = 16 to 256 (MS), then 1024 on the 128 x 128 tile alone; the kernel cache into $OUT.
#   STAGE=bench: the Sm90 GPU tests TEST_K selects (default the dispatch, graph, stream-K and NaN tests),
#     then STAGE=bench benchmarks/device_narrow.sh (the plan's table, MS, and the model unless MODEL=0).
#   STAGE=ab: the plan's table (bench_fpaintb.py --no-bf16, MS) from an older tree and this one in one call:
#     .oldtree/ (ignored: `git archive <commit> qgemm cutlass_gen templates benchmarks tests | tar -x -C .oldtree`)
#     with its kernel cache's chunks in .kcache_old/, then this tree; carry both as well. AB_ARGS: the bench's
#     other arguments (default --no-bf16; "" adds the BF16 column).
#   STAGE=ncu: ncu of the plan's FP16 and BF16 kernels at NCU_M (256) rows of NCU_NK (28672x8192), the
#     instruction statistics included (the BF16 kernel's gap to the FP16 one).
#   STAGE=sweep env: TEST_K (the tests' -k), SHAPES (KxN ...), MS, MATCH (the sweep's label regex), MS_WIDE ("" skips the 1024 run),
#     SWEEP_TYPES (ACT:BITS the prebuild takes, default "f16:4 bf16:4 f16:8") and PREBUILD_MATCH (its label regex).
#   NCU_ARGS: extra arguments of diag_fpaintb_sm90.py under STAGE=ncu (e.g. "--ctas-per-sm 2"), NCU_ACTS (default "f16 bf16").
#   Carry [".whl", ".kcache"] (a cache built here with benchmarks/prebuild_sm90.py, or kcache_save's chunks).
set -uo pipefail
source benchmarks/device_env.sh
if [ "${STAGE:-sweep}" = ab ]; then
  M_ARGS=$(for m in ${MS:-16 32 64 128 256 1024}; do printf -- "--m %s " "$m"; done)
  mkdir -p /tmp/oldcache && cat .kcache_old/kcache.tar.xz.* | xz -d -T16 | tar -xf - -C /tmp/oldcache
  timeout 200 python3 benchmarks/prebuild_sm90.py --family fpaintb 2>&1 | tail -1
  for run in $(for i in $(seq ${AB_ROUNDS:-1}); do echo old$i new$i; done); do
    if [ ${run:0:3} = old ]; then
      (cd .oldtree && QGEMM_CACHE_DIR=/tmp/oldcache/.qgemm-cache PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks \
        timeout -s KILL ${AB_TIMEOUT:-150} python3 benchmarks/bench_fpaintb.py ${AB_ARGS---no-bf16} $M_ARGS --json "$OUT/ab_$run.json")
    else
      timeout -s KILL ${AB_TIMEOUT:-150} python3 benchmarks/bench_fpaintb.py ${AB_ARGS---no-bf16} $M_ARGS --json "$OUT/ab_$run.json"
    fi > "$OUT/ab_$run.log" 2>&1
    echo "$run rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^M=" "$OUT/ab_$run.log"
  done
  exit 0
fi
if [ "${STAGE:-sweep}" = ncu ]; then  # the plan's FP16 and BF16 kernels beside each other (NCU_M, NCU_NK)
  for act in ${NCU_ACTS:-f16 bf16}; do
    flag=$([ $act = bf16 ] && echo --bf16)
    timeout -s KILL 100 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
      --section WarpStateStats --section InstructionStats -k regex:"qgemm_fpaintb" --launch-skip 1 -c 1 \
      python3 benchmarks/diag_fpaintb_sm90.py --m ${NCU_M:-256} --nk ${NCU_NK:-28672x8192} $flag ${NCU_ARGS:-} > "$OUT/ncu_$act${NCU_TAG:-}.txt" 2>&1
    echo "ncu $act rc=$?"
    grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Executed Ipc A|Warp Cycles Per Issued|Registers Per|Compute \(SM\) Throughput|Active Warps Per|DRAM Throughput|Memory Throughput" "$OUT/ncu_$act${NCU_TAG:-}.txt" | head -18
  done
  exit 0
fi
if [ "${STAGE:-sweep}" = bench ]; then
  timeout 240 python3 benchmarks/prebuild_sm90.py --family fpaintb 2>&1 | tail -1
  timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
    -k "${TEST_K:-decomposition or dispatch or cuda_graph or stream_k or nan_and_inf or tile_ahead}" > "$OUT/pytest_bench.log" 2>&1
  echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_bench.log" | tail -20
  STAGE=bench bash benchmarks/device_narrow.sh
  exit 0
fi
# the kernels the tests, the sweep and the plans' INT4 / INT8 rows run (the plan's 128-deep tiles)
timeout 240 python3 benchmarks/prebuild_sm90.py $(for t in ${SWEEP_TYPES:-f16:4 bf16:4 f16:8}; do printf -- "--sweep %s " $t; done) \
  --match "${PREBUILD_MATCH:-^s90128x(16|32|64|128)k128(so)?ahsk0\$}" 2>&1 | tail -1
timeout -s KILL ${TEST_TIMEOUT:-180} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py -q -p no:cacheprovider \
  -k "${TEST_K:-decomposition or stream_k_workspace}" > "$OUT/pytest_decomp.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|E )|passed|failed" "$OUT/pytest_decomp.log" | tail -20
SHAPES=${SHAPES:-14336x21504 4096x12288 4096x22016 11008x4096 8192x28672 28672x8192 4096x6144 4096x4096 4096x28672 14336x4096}
NK=$(for s in $SHAPES; do printf -- "--nk %s " "$s"; done)
M_ARGS=$(for m in ${MS:-16 32 64 128 256}; do printf -- "--m %s " "$m"; done)
timeout -s KILL ${SWEEP_TIMEOUT:-330} python3 benchmarks/bench_fpaintb.py --sweep sm90 --sweep-decomposition --sweep-bits 4 \
  --no-bf16 --sweep-match "${MATCH:-^s90128x(16|32|64|128)k128soah(sk0|dp|skall)\$}" $NK $M_ARGS --json "$OUT/decomp.json" > "$OUT/decomp.log" 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
if [ -n "${MS_WIDE-1024}" ]; then
  M_ARGS=$(for m in ${MS_WIDE-1024}; do printf -- "--m %s " "$m"; done)
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
# SASS instruction mix of the 16-token kernel's consumer loop, this tree's build and the older tree's
# (.kcache_old), where cuobjdump exists: paired HMUL2 / HFMA2 against scalar HMUL / HFMA.
if command -v cuobjdump > /dev/null; then
  mkdir -p /tmp/oldcache && [ -d /tmp/oldcache/.qgemm-cache ] || cat .kcache_old/kcache.tar.xz.* 2>/dev/null | xz -d -T16 | tar -xf - -C /tmp/oldcache
  for cache in "$QGEMM_CACHE_DIR" /tmp/oldcache/.qgemm-cache; do
    for name in qgemm_fpaintb_gemm_sm90_f16_int4_128x16x128_c1x1_cooperative_streamk_scaleonly_ahead \
                qgemm_fpaintb_gemm_sm90_bf16_int4_128x128x128_c1x1_cooperative_streamk_ahead; do
      so=$(ls -t "$cache"/sm90/$name/*/kernel.so 2>/dev/null | head -1)
      [ -n "$so" ] || continue
      cuobjdump -sass "$so" > /tmp/sass.txt 2>&1
      echo "$cache $name: $(for op in HMUL2 HFMA2 HADD2 'HMUL ' 'HFMA ' 'HADD ' LOP3 PRMT HGMMA LDS; do printf '%s=%s ' "$op" $(grep -c "$op" /tmp/sass.txt); done)"
    done
  done
fi
kcache_save > /dev/null
