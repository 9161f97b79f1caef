#!/usr/bin/env bash
# Device session for the W8A8 192 x 128 tile on three consumer warp groups (issue 15, prefill): one parallel
# build of its kernels, the ones its tests compare with, the other symmetric prefill tiles' test kernels and
# the plans' choices for the timed shapes; then benchmarks/device_prefill.sh (the candidates' build and
# SASS counts, the GPU tests, diag_prefill.py at each CASE with outputs compared bit for bit, NCU_CASE).
# Carry: .whl (nvidia-cutlass wheel); .kcache (an earlier call's kernel cache) to skip builds.
#   env: CASES     ';'-separated diag_prefill.py argument lists
#        PYTEST_K  which tests of tests/test_w8a8_sm90_gpu.py run (default: the three-consumer ones)
#        NCU_CASE, NCU_COUNT  as in device_prefill.sh
set -uo pipefail
source benchmarks/device_env.sh
CASES=${CASES:-"--m 2048 --no-fp8 --candidates coop,coop256,coop192,coop192_alt"}
t0=$(date +%s)
timeout 420 python3 - "$CASES" <<'PY'
import shlex, sys
import diag_prefill
from prebuild_w8a8 import test_specs, three_consumer_specs
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from qgemm.w8a8 import heuristics
# The tests' kernels of the prefill tiles (symmetric, not swapped): the three-consumer ones, the 256- and
# 128-row ones they are compared with, the symmetric stream-K ones.
specs = set(catalog(90, "act_quant")) | set(three_consumer_specs()) | {s for s in test_specs() if s.scheme == "symmetric" and not s.swap_ab} | \
    {s for s in catalog(90, "w8a8_gemm_sm90") if s.scheme == "symmetric" and not s.swap_ab and s.output == "f16"}
shapes = {(2048, 4096, 4096), (2048, 1024, 4096), (2048, 14336, 4096), (2048, 4096, 14336)}
for case in sys.argv[1].split(";"):
    args = diag_prefill.parse(shlex.split(case))
    specs |= set(diag_prefill.candidate_specs(args))
    for nk in args.nk or []:
        n, k = map(int, nk.split("x"))
        shapes.add((args.m, n, k))
for m, n, k in shapes:
    specs.add(heuristics.w8a8_sm90_choice(m, n, k, 128, "symmetric", "f16", "clamp", 132).spec)
missing = sorted((s for s in specs if find_artifact(s, 90) is None), key=lambda s: s.name)
print(f"building {len(missing)} kernels", flush=True)
build_many(missing, 90, jobs=16, progress=lambda line: None)
PY
echo "build rc=$? ($(( $(date +%s) - t0 )) s)"
export CASES TESTS=${TESTS:-tests/test_w8a8_sm90_gpu.py} PYTEST_K=${PYTEST_K:-three_consumer}
bash benchmarks/device_prefill.sh
