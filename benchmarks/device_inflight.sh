#!/usr/bin/env bash
# Device session: the W8A8 Sm90 collective's blocks in flight and stage cap (W8A8Sm90Spec.blocks_in_flight,
# max_stages) against the plan's kernels, on the six shapes at decode M (64 x 16 tile) and at 96-128
# rows (64 x 32 and 64 x 64 tiles). Candidates: schedule:tile:scheduler:splits:cluster:in_flight:max_stages.
# Carry: .whl, .kcache (the kernels, built on the CPU machine).
set -uo pipefail
source benchmarks/device_env.sh
SHAPES="--nk 4096x4096 --nk 12288x4096 --nk 8192x28672 --nk 28672x8192 --nk 2112x7168 --nk 7168x2048"
P="-u benchmarks/diag_w8a8_choices.py --prebuild 8"
timeout -s KILL ${T1:-240} python3 $P --m 1 --m 16 $SHAPES ${DECODE:---candidate pingpong:64x16s:persistent:0:1x1:1:16 \
  --candidate pingpong:64x16s:persistent:0:1x1:2:16 --candidate pingpong:64x16s:persistent:0:1x1:2:32}
timeout -s KILL ${T2:-240} python3 $P --m 96 --m 128 $SHAPES ${MIDDLE:---candidate pingpong:64x32s:persistent:0:1x1:2:16 \
  --candidate pingpong:64x32s:persistent:0:1x1:2:32}
timeout -s KILL ${T3:-200} python3 $P --m 96 --m 128 $SHAPES --scheme symmetric ${WIDE:---candidate \
  pingpong:64x64s:persistent:0:1x1:2:16}
echo "elapsed $(( $(date +%s) - T0 )) s"
