# Sourced by the device scripts (`source benchmarks/device_env.sh`, from the repository root): the
# carried nvidia-cutlass wheel (.whl/) installed once into /tmp/site, the import paths, the kernel
# cache in the working tree, $OUT, the GPU and its clocks, and T0 for the stages' elapsed times.
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
T0=$(date +%s)
