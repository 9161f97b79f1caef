#!/usr/bin/env bash
# One-GPU variant of benchmarks/device_tp.sh (for when no two-GPU kind is lent): the two-rank GPU tests
# with both ranks on cuda:0 over gloo (NCCL refuses two ranks on one GPU; the CUDA-graph test, which
# needs NCCL, skips), and the TP=1 decode benchmark. Same env and carry as device_tp.sh.
ONE_GPU=1 exec bash "$(dirname "$0")/device_tp.sh" "$@"
