# Sourced by the device scripts (`source benchmarks/device_env.sh`, from the repository root): the
# carried nvidia-cutlass wheel (.whl/) installed once into /tmp/site, the import paths, the kernel
# cache in the working tree, $OUT, the GPU and its clocks, and T0 for the stages' elapsed times.
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks:$PWD/tests PYTHONUNBUFFERED=1 QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-$PWD/.qgemm-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
T0=$(date +%s)
# A kernel cache carried from an earlier call (kcache_save's chunks, copied into the ignored .kcache/ and
# named in carry) unpacks into the cache first, so that the call builds only what changed.
if ls .kcache/kcache.tar.xz.* > /dev/null 2>&1; then
  cat .kcache/kcache.tar.xz.* | xz -d -T16 | tar -xf - -C "$(dirname "$QGEMM_CACHE_DIR")" && echo "kernel cache unpacked: $(ls "$QGEMM_CACHE_DIR"/sm90 | wc -l) kernels"
fi
# kcache_save: the kernel cache into $OUT as 15 MiB chunks (files back from $OUT are at most 16 MiB each).
kcache_save() {
  tar -cf - -C "$(dirname "$QGEMM_CACHE_DIR")" "$(basename "$QGEMM_CACHE_DIR")" | xz -T16 -2 | split -b 15M -d - "$OUT/kcache.tar.xz."
  ls -la "$OUT"/kcache.tar.xz.*
}
