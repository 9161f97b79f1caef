#!/usr/bin/env bash
# Two device jobs at once on a two-GPU kind, one per GPU, for correctness runs that need no quiet
# machine (tests, fuzz, sanitizer): LANE0 and LANE1 are command lines, run by bash with
# CUDA_VISIBLE_DEVICES=0 and 1 (LANE_GPUS="0 0": both on the one GPU of nvidia-h100-x1) and OUT=$OUT/lane0 and $OUT/lane1; each lane's output goes to
# $OUT/laneN/laneN.log and is printed when both are done. Not for timings: the lanes share the host.
#   LANE0='STAGE=tests bash benchmarks/device_verify.sh' LANE1='STAGE=fuzz bash benchmarks/device_verify.sh' \
#     bash benchmarks/device_lanes.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/site/cutlass_library ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl || exit 1
export QGEMM_CACHE_DIR=${QGEMM_CACHE_DIR:-/tmp/qcache}
start=$(date +%s)
for i in 0 1; do
  var=LANE$i; cmd=${!var:-}
  [ -z "$cmd" ] && continue
  mkdir -p "$OUT/lane$i"
  gpus=(${LANE_GPUS:-0 1})
  ( export CUDA_VISIBLE_DEVICES=${gpus[$i]} OUT="$OUT/lane$i"; bash -c "$cmd" > "$OUT/lane$i.log" 2>&1
    echo "[lane $i done after $(( $(date +%s) - start )) s]" >> "$OUT/lane$i.log" ) &
done
wait
for i in 0 1; do [ -f "$OUT/lane$i/lane$i.log" ] && { echo "===== lane $i"; tail -n ${TAIL:-60} "$OUT/lane$i/lane$i.log"; }; done
