#!/usr/bin/env bash
# Device session for tensor-parallel qgemm layers (issue 20) on the two-GPU kind (nvidia-h200-x2):
# build what the carried cache lacks, the two-rank GPU tests (torchrun, NCCL) and
# the TP=1 vs TP=2 decode benchmark, each under a hard timeout. ONE_GPU=1 (benchmarks/device_tp_1gpu.sh)
# runs the two ranks on one GPU over gloo (NCCL refuses two ranks on one GPU) and the TP=1 benchmark.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here). Run from the repo root:
#   bash benchmarks/device_tp.sh   env: ONE_GPU=1, PYTEST_K, TEST_TIMEOUT, BENCH_ARGS (default
#   "--layers 8 --config int4"), BENCH_TIMEOUT, SKIP_BUILD=1, FAMILIES, SAVE_CACHE=1, RUN_CPU=1
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, torch.distributed as d; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "${ONE_GPU:-0}" = 1 ]; then
  export QGEMM_TP_ONE_GPU=1
elif [ "$NGPU" -lt 2 ]; then
  echo "only $NGPU GPU(s): use ONE_GPU=1 (benchmarks/device_tp_1gpu.sh)"; exit 2
fi
if [ -z "${SKIP_BUILD:-}" ]; then
  for f in ${FAMILIES:-fpaintb_gemv fpaintb_gemm fpaintb_gemm_sm90 fpaintb_dequant act_quant w8a8_gemm w8a8_gemm_sm90 w8a8_gemm_promote fp8_act_quant fp8_blockwise_gemm}; do
    timeout 300 python3 -m qgemm build --sm 90 -j 16 --family $f 2>&1 | tail -1
  done
fi
if [ "${RUN_CPU:-0}" = 1 ]; then  # the CPU shard tests (about a minute here; they run on any CPU box)
  timeout -s KILL 180 python3 -m pytest -q tests/test_tp_cpu.py -p no:cacheprovider -x 2>&1 | tail -3
fi
# Two pytests, one per rank; each rank's output in $OUT/tp_tests/<run>/attempt_0/<rank>/.
rm -rf "$OUT/tp_tests"
timeout -s KILL ${TEST_TIMEOUT:-300} torchrun --standalone --nproc-per-node 2 --log-dir "$OUT/tp_tests" --redirects 3 \
  benchmarks/run_tp_pytest.py -m gpu tests/test_tp_gpu.py -v --durations=8 --maxfail=${MAXFAIL:-10} \
  ${PYTEST_K:+-k "$PYTEST_K"}
echo "torchrun pytest rc=$?"
for r in 0 1; do
  log=$(find "$OUT/tp_tests" -path "*/$r/stdout.log" | head -1)
  echo "=== rank $r ($log)"; grep -E "PASS|FAIL|ERROR|SKIP|Timeout|passed|failed" "$log" | tail -40
  err=$(find "$OUT/tp_tests" -path "*/$r/stderr.log" | head -1); tail -n 15 "$err"
done
BENCH_ARGS=${BENCH_ARGS:---layers 8 --config int4}
rm -f "$OUT/bench_tp.json"
timeout -s KILL ${BENCH_TIMEOUT:-150} torchrun --standalone --nproc-per-node 1 benchmarks/bench_tp.py --json "$OUT/bench_tp.json" $BENCH_ARGS 2>&1 | tail -8
if [ "${ONE_GPU:-0}" != 1 ]; then
  timeout -s KILL ${BENCH_TIMEOUT:-150} torchrun --standalone --nproc-per-node 2 benchmarks/bench_tp.py --json "$OUT/bench_tp.json" $BENCH_ARGS 2>&1 | tail -8
fi
if [ -n "${SAVE_CACHE:-}" ]; then  # bring the built kernels back, to carry next time
  tar -C .qgemm-cache -czf "$OUT/qgemm-cache.tgz" . && ls -la "$OUT/qgemm-cache.tgz"
fi
