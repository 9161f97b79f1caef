#!/usr/bin/env bash
# Device session for `qgemm bench` (issue 17 part 4): build what the carried cache lacks, run the
# end-to-end GPU test (tests/test_bench_cpu.py -m gpu), then `qgemm bench FAMILY` for every family on
# a small set of shapes and M values (each under a hard timeout), and copy each bench_FAMILY.json /
# .png / .log to $OUT. About 4 minutes with a warm cache.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (sm90 kernels of the families below).
#   Optional: .whl-plot/ holding matplotlib and its dependency wheels for the device's Python, so the
#   PNGs are drawn here; without matplotlib the benches run with --no-plot, and the PNGs are drawn
#   afterwards on any machine: `python -m qgemm.bench.report OUT/bench_*.json`.
#   env: BENCH_FAMILIES (default "w8a8 fpaintb fp8 conv conv_fpaintb"), W8A8_ARGS, FPAINTB_ARGS, FP8_ARGS,
#        CONV_ARGS, CONV_FPAINTB_ARGS (replace a family's --shapes/--m), WARM=1 (add --warm),
#        SKIP_BUILD=1, SKIP_TESTS=1, BUILD_FAMILIES (catalog families to build if missing),
#        BENCH_TIMEOUT (seconds per family, default 75), DEADLINE (seconds for the whole script, default
#        540: each stage's timeout is cut to what is left, so one device call of 600 s always returns)
set -uo pipefail
START=$(date +%s)
left() {  # min($1, seconds left before DEADLINE), at least 5
  local l=$(( ${DEADLINE:-540} - ($(date +%s) - START) ))
  [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"
}
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
PLOT=""
if ! python3 -c "import matplotlib" 2>/dev/null; then
  if [ -d .whl-plot ]; then
    python3 -m pip install -q --no-index --find-links .whl-plot --target /tmp/site matplotlib 2>&1 | tail -2
  fi
  if ! python3 -c "import matplotlib" 2>/dev/null; then
    PLOT="--no-plot"; echo "no matplotlib here: JSON only (draw the PNGs with python -m qgemm.bench.report)"
  fi
fi
if [ -z "${SKIP_BUILD:-}" ]; then
  ALL="act_quant,w8a8_gemm_sm90,w8a8_gemm_promote,w8a8_gemm,fpaintb_gemm_sm90,fpaintb_gemm,fpaintb_gemv,"
  ALL+="fpaintb_dequant,fp8_act_quant,fp8_blockwise_gemm,conv2d_int8,conv2d_int8_sm90,fpaintb_conv"
  timeout -s KILL $(left 200) python3 - "${BUILD_FAMILIES:-$ALL}" <<'PY' 2>&1 | tail -3
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
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout -s KILL $(left 120) python3 -m pytest -m gpu tests/test_bench_cpu.py -v -o faulthandler_timeout=60 \
    -p no:cacheprovider > "$OUT/pytest_bench.log" 2>&1
  echo "pytest rc=$?"; grep -E "PASS|FAIL|ERROR|passed|failed" "$OUT/pytest_bench.log" | tail -8
fi
declare -A ARGS=(
  [w8a8]="${W8A8_ARGS:---shapes 4096,4096;12288,4096 --m 1,16,128,4096}"
  [fpaintb]="${FPAINTB_ARGS:---shapes 12288,4096;4096,11008 --m 1,16,128,1024}"
  [fp8]="${FP8_ARGS:---shapes 2112,7168;7168,2048 --m 64,128,4096}"
  [conv]="${CONV_ARGS:---shapes l1.3x3;l2.expand;l3.3x3;l4.3x3 --m 1,64}"
  [conv_fpaintb]="${CONV_FPAINTB_ARGS:---shapes l1.3x3;l2.expand;l3.3x3;l4.3x3 --m 1,64}"
)
for f in ${BENCH_FAMILIES:-w8a8 fpaintb fp8 conv conv_fpaintb}; do
  # word-split ARGS on spaces only: the ';' inside --shapes stays one argument
  read -ra fargs <<< "${ARGS[$f]}"
  t0=$(date +%s)
  timeout -s KILL $(left ${BENCH_TIMEOUT:-75}) python3 -m qgemm bench "$f" "${fargs[@]}" --out "$OUT" $PLOT \
    ${WARM:+--warm} > "$OUT/bench_$f.log" 2>&1
  echo "=== qgemm bench $f ${ARGS[$f]}: rc=$? in $(( $(date +%s) - t0 )) s"
  sed -n '/^speedup = /,$p' "$OUT/bench_$f.log" | head -12
  grep -E "Traceback|Error|failed|unavailable" "$OUT/bench_$f.log" | head -5
done
ls -la "$OUT"; echo "device_bench.sh: $(( $(date +%s) - START )) s"
