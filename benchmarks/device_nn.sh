#!/usr/bin/env bash
# Device session for qgemm.nn / quantize_ / load_quantized: build what the carried cache lacks (every
# family the modules run), then the GPU tests of the modules (tests/test_nn_gpu.py) and, unless
# ONLY_NN=1, the families' own module tests, each under a hard timeout.
# Carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here). Run from the repo root:
#   bash benchmarks/device_nn.sh          env: PYTEST_K (-k expression), MAXFAIL, TEST_TIMEOUT, ONLY_NN=1
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for f in ${FAMILIES:-fpaintb_gemv fpaintb_gemm fpaintb_dequant fpaintb_conv conv2d_int8 conv2d_int8_sm90 fp8_act_quant fp8_blockwise_gemm act_quant w8a8_gemm w8a8_gemm_sm90}; do
  timeout 300 python3 -m qgemm build --sm 90 -j 16 --family $f 2>&1 | tail -1
done
TESTS="tests/test_nn_gpu.py"
if [ "${ONLY_NN:-0}" != 1 ]; then
  TESTS="$TESTS tests/test_fpaintb_gpu.py::test_quant_linear_from_float tests/test_fpaintb_gpu.py::test_gptq_act_order_and_awq_on_gpu"
  TESTS="$TESTS tests/test_fp8_gpu.py::test_fp8_linear_module_from_float_and_deepseek"
  TESTS="$TESTS tests/test_conv_int8_gpu.py::test_quant_conv2d_end_to_end tests/test_conv_fpaintb_gpu.py::test_module_in_place_of_nn_conv2d"
fi
timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu $TESTS -q --maxfail=${MAXFAIL:-20} ${PYTEST_K:+-k "$PYTEST_K"} \
  -p no:cacheprovider 2>&1 | tee "$OUT/pytest_nn.log" | tail -30
echo "pytest rc=${PIPESTATUS[0]}"
