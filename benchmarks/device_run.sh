#!/usr/bin/env bash
# One device session: install the carried CUTLASS wheel, build what the carried
# cache lacks, run the GPU tests and the benchmarks, print short tables.
#   carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here)
#   env:   PYTEST_PATHS (default tests), PYTEST_ARGS (default -q), PYTEST_TAIL, BENCHES (default "fp8 w8a8"),
#          FP8_ARGS / W8A8_ARGS / FPAINTB_ARGS (extra arguments of each benchmark), SKIP_TESTS=1,
#          BUILD_ARGS (e.g. "--family fpaintb_gemv": build only part of the catalog),
#          PREBUILD (a command run once the wheel is installed, e.g. "python3 benchmarks/prebuild_fpaintb.py")
set -uo pipefail
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks PYTHONUNBUFFERED=1
export QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
nvcc --version | tail -1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m qgemm build --sm 90 -j 16 ${BUILD_ARGS:-} 2>&1 | tail -2
[ -n "${PREBUILD:-}" ] && eval "$PREBUILD"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -m gpu ${PYTEST_PATHS:-tests} ${PYTEST_ARGS:--q} 2>&1 | tee "$OUT/pytest.log" | tail -${PYTEST_TAIL:-15}
fi
for b in ${BENCHES:-fp8 w8a8}; do
  args_var="$(echo "$b" | tr a-z A-Z)_ARGS"
  python3 benchmarks/bench_$b.py ${!args_var:-} --json "$OUT/bench_$b.json" > "$OUT/bench_$b.log" 2>&1
  tail -n 30 "$OUT/bench_$b.log"
done
