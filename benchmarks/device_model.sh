#!/usr/bin/env bash
# Device session for issue 19 parts 5 and 6: build the kernels the models need (one parallel
# qgemm.prebuild of exactly the plans' kernels: bench_model.py --prebuild-only, Llama shapes at the
# benchmark's M values and the MiniLM test's), then tests/test_minilm_gpu.py (all-MiniLM-L6-v2 from
# the carried .minilm/), then bench_model.py; each stage under a hard timeout (240 + 120 + 210 s at most, so the call stays under 10 minutes; ~6 typical).
# Carry: .whl (nvidia-cutlass wheel), .minilm (benchmarks/prepare_minilm.py, ~21 MiB), and
# .qgemm-cache if one was saved (SAVE_CACHE=1 writes the built kernels to $OUT/qgemm-cache.tar; at
# ~22 MB it may not come back). bench_model.py compiles by default: at 32 layers a variant takes
# 60-100 s (two decode batches and the prefill, each compiled), so six do not fit one call with the
# build; split them, e.g. SKIP_TEST=1 BENCH_TIMEOUT=420 BENCH_ARGS='--variants w4a16,w8a16 --batch 0'.
#   bash benchmarks/device_model.sh
#   env: CONFIG (llama3-8b), LAYERS (32), BENCH_ARGS (more bench_model.py arguments), BENCH_TIMEOUT (210),
#        TEST_TIMEOUT (120), BUILD_TIMEOUT (240), FAMILIES (also `qgemm build` these whole families),
#        SKIP_BUILD=1, SKIP_TEST=1, SKIP_BENCH=1, SAVE_CACHE=1
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
export QGEMM_MINILM_DIR=$PWD/.minilm QGEMM_MINILM_JSON=$OUT/minilm.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
CONFIG=${CONFIG:-llama3-8b}; LAYERS=${LAYERS:-32}
t0=$(date +%s)
# MiniLM's M: sentences x padded length of the carried tokens (0 if .minilm is missing).
MINILM_M=$(python3 -c "
from qgemm import safetensors_io as s
try: h, _ = s.read_header('.minilm/tokens.safetensors'); a, b = h['input_ids']['shape']; print(a * b)
except Exception: print(0)")
echo "MiniLM tokens per forward: $MINILM_M"
if [ -z "${SKIP_BUILD:-}" ]; then
  for f in ${FAMILIES:-}; do timeout ${BUILD_TIMEOUT:-240} python3 -m qgemm build --sm 90 -j 16 --family $f 2>&1 | tail -1; done
  timeout ${BUILD_TIMEOUT:-240} python3 benchmarks/bench_model.py --prebuild-only --config $CONFIG --minilm-m $MINILM_M \
    --jobs 16 > "$OUT/prebuild.log" 2>&1
  echo "prebuild rc=$? ($(( $(date +%s) - t0 )) s)"; head -1 "$OUT/prebuild.log"; grep -iE "error|fail" "$OUT/prebuild.log" | head -5
fi
if [ -z "${SKIP_TEST:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-120} python3 -m pytest -m gpu tests/test_minilm_gpu.py -v -s -p no:cacheprovider \
    -o faulthandler_timeout=60 > "$OUT/pytest_minilm.log" 2>&1
  echo "pytest rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "PASSED|FAILED|SKIPPED|ERROR|cosine vs FP16|fake-quant loss|passed|failed" "$OUT/pytest_minilm.log" | tail -30
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-210} python3 benchmarks/bench_model.py --config $CONFIG --layers $LAYERS \
    --json "$OUT/bench_model.json" --png "$OUT/bench_model.png" ${BENCH_ARGS:-} > "$OUT/bench_model.log" 2>&1
  echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 40 "$OUT/bench_model.log"
fi
if [ -n "${SAVE_CACHE:-}" ]; then
  tar cf "$OUT/qgemm-cache.tar" .qgemm-cache && ls -la "$OUT/qgemm-cache.tar"
fi
