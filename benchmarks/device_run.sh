#!/usr/bin/env bash
# One device session: install the carried CUTLASS wheel, build what the carried
# cache lacks, run the GPU tests and the benchmarks, print short tables.
#   carry: .whl (nvidia-cutlass wheel), .qgemm-cache (kernels built here)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export QGEMM_CACHE_DIR=$PWD/.qgemm-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
nvcc --version | tail -1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m qgemm build --sm 90 -j 16 2>&1 | tail -2
python3 -m pytest -m gpu tests ${PYTEST_ARGS:--q} 2>&1 | tee "$OUT/pytest.log" | tail -${PYTEST_TAIL:-15}
python3 benchmarks/bench_w8a8.py ${BENCH_ARGS:-} --json "$OUT/bench_w8a8.json" > "$OUT/bench_w8a8.log" 2>&1
tail -n 16 "$OUT/bench_w8a8.log"
