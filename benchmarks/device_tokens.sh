#!/usr/bin/env bash
# Token tiles for the Sm90 FpA x IntB kernel with qgemm's consumer loop (issue 16), one call:
#   1. M = 16 (and 9): the 128-deep 128 x 16 tile, scale-only and with zeros, INT4 and INT8, split-K 0/2/4,
#      against the plan (the Sm80 16-row GEMM);
#   2. M = 256-4096: 128 x 256 on 64-deep K tiles and the persistent 128 x 128 128-deep kernel against the
#      plan's 128 x 128 and dequantize + cuBLAS (INT4);
#   3. M = 128-1024: the plan's kernel under every raster order and swizzle (--sweep-knobs).
# FP16 activations, CUDA graphs, weights rotated through >= 4x L2. Then the kernel cache into $OUT.
#   env: PARTS (default "1 2 3"), BENCH_TIMEOUT (per part, 200)
set -uo pipefail
source benchmarks/device_env.sh
M16='^s90128x16k128(so)?ahsk[024]$'
WIDE='^s90128x256soahsk0$|^s90128x128k128soah(sk0)?$'
timeout 330 python3 benchmarks/prebuild_sm90.py --family fpaintb --acts f16 --sweep f16:4 --sweep f16:8 \
  --match "$M16|$WIDE" 2>&1 | tail -3
echo "build done at $(( $(date +%s) - T0 )) s"
for part in ${PARTS:-1 2 3}; do
  case $part in
    1) args=(--m 9 --m 16 --sweep-match "$M16") ;;
    2) args=(--m 256 --m 1024 --m 2048 --m 3072 --m 4096 --sweep-bits 4 --sweep-match "$WIDE" --sweep-dequant) ;;
    3) args=(--m 128 --m 256 --m 1024 --sweep-bits 4 --sweep-match '^s90128x128k128soahsk0$' --sweep-knobs) ;;
  esac
  timeout -s KILL ${BENCH_TIMEOUT:-200} python3 benchmarks/bench_fpaintb.py --sweep sm90 --no-bf16 "${args[@]}" \
    --json "$OUT/tokens$part.json" > "$OUT/tokens$part.log" 2>&1
  echo "part $part rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^M=" "$OUT/tokens$part.log"
done
kcache_save
