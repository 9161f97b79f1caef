#!/usr/bin/env bash
# The whole GPU test suite (every test marked `gpu`, in tests/*_gpu.py and elsewhere) on a two-GPU kind,
# in stages that each fit one device call (600 s). Kernels the catalog lacks are compiled on first use,
# so a stage's first run on a fresh machine is slower than its rerun. Run the stages in calls right
# after each other: /tmp/qcache (the kernel cache) lives while the machine stays warm, ~30 s idle.
#   STAGE=build  the sm90 catalog, JOBS jobs (30: ~150 s on 32 cores; device_verify.sh's build stage)
#   STAGE=a      lane 0: the W8A8 files; lane 1: nn modules, NaN, concurrency, limits (-m large), `qgemm bench`
#   STAGE=b      lane 0: FpA x IntB Sm80/Sm90 and FP8; lane 1: both convs and MiniLM (carry .minilm)
#   STAGE=c      tensor parallel (two ranks, torchrun) and the fuzz suite (device_verify.sh's, FUZZ_CASES)
# Carry .whl (the nvidia-cutlass wheel). Summary lines are printed per lane; logs in $OUT/laneN/.
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests:$PWD/benchmarks PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-/tmp/qcache}
export PATH=$PATH:/usr/local/cuda/bin QGEMM_MINILM_DIR=${QGEMM_MINILM_DIR:-$PWD/.minilm}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$QGEMM_CACHE_DIR"
LIMIT=${LIMIT:-540}  # seconds a lane may run
P="timeout -s KILL $LIMIT python3 -m pytest -q -p no:cacheprovider -rfE"
t=tests
case "${STAGE:?STAGE=build|a|b|c}" in
build)
  JOBS=${JOBS:-30} STAGE=build bash benchmarks/device_verify.sh ;;
a)
  LANE0="$P $t/test_w8a8_gpu.py $t/test_w8a8_gemv_gpu.py $t/test_w8a8_sm90_gpu.py $t/test_w8a8_promote_gpu.py" \
  LANE1="$P $t/test_nn_gpu.py $t/test_nan_gpu.py $t/test_concurrency_gpu.py; $P -m gpu $t/test_bench_cpu.py; \
$P -m large $t/test_limits_gpu.py" TAIL=${TAIL:-20} bash benchmarks/device_lanes.sh ;;
b)
  LANE0="$P $t/test_fpaintb_gpu.py $t/test_fpaintb_sm90_gpu.py $t/test_fp8_gpu.py" \
  LANE1="$P $t/test_conv_int8_gpu.py $t/test_conv_fpaintb_gpu.py $t/test_minilm_gpu.py" \
  TAIL=${TAIL:-20} bash benchmarks/device_lanes.sh ;;
c)
  timeout -s KILL 240 torchrun --standalone --nproc-per-node 2 --log-dir "$OUT/tp" --redirects 3 \
    benchmarks/run_tp_pytest.py -m gpu $t/test_tp_gpu.py -q > /dev/null 2>&1
  echo "tensor parallel rc=$?"
  for r in 0 1; do echo "rank $r: $(grep -hE "passed|failed" "$OUT"/tp/*/attempt_*/$r/stdout.log | tail -1)"; done
  FUZZ_TIMEOUT=240 STAGE=fuzz bash benchmarks/device_verify.sh ;;
esac
