#!/usr/bin/env bash
# One device call: the FpA x IntB Sm90 GPU tests (all but the cluster test, whose 12 sweep kernels build
# one at a time), the plans-under-torch.compile GPU test, and BETWEEN=1 benchmarks/device_decode16.sh;
# every kernel they use built first, in one parallel build.   env: TEST_TIMEOUT (280), SKIP_DECODE16=1
set -uo pipefail
source benchmarks/device_env.sh
timeout 280 python3 - <<'PY' 2>&1 | tail -3
import time
from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from cutlass_gen.families.fpaintb import FpAIntBGemvSpec, fpaintb_sm90_specs
from diag_decode16 import WIDE16
from qgemm.fpaintb import heuristics
from qgemm.prebuild import _collect
from test_plan_compile_gpu import gemm_plan
families = ("fpaintb_gemm_sm90", "fpaintb_gemm", "fpaintb_gemv", "fpaintb_dequant", "fpaintb_conv")
specs = {s for f in families for s in catalog(90, f)}
specs |= {s for s in fpaintb_sm90_specs("f16", 4, sweep=True) if s.cluster == (1, 1) and (s.tile_k == 128 or not s.zeros)}
for name in ("fpaintb_int4_g128", "w8a8", "fp8"):
    specs |= set(_collect(gemm_plan(name)[0], (1, 17, 300), 90))
specs |= {FpAIntBGemvSpec("f16", 4, arch=80, stream=True, **WIDE16),
          heuristics.fpaintb_gemm_choice(16, 4096, 4096, 4, "f16", 80, 132).spec}
missing = [s for s in sorted(specs, key=lambda s: (s.arch != 90, s.name)) if find_artifact(s, 90) is None]
t0 = time.time()
build_many(missing, 90, jobs=16, progress=lambda line: None)
print(f"built {len(missing)} of {len(specs)} kernels for sm90 in {time.time() - t0:.0f} s")
PY
echo "build done at $(( $(date +%s) - T0 )) s"
timeout -s KILL ${TEST_TIMEOUT:-280} python3 -m pytest -m gpu tests/test_fpaintb_sm90_gpu.py tests/test_plan_compile_gpu.py \
  -k "not cluster" -q -o faulthandler_timeout=200 -p no:cacheprovider > "$OUT/pytest_sm90.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest_sm90.log" | tail -12
[ -n "${SKIP_DECODE16:-}" ] || BETWEEN=1 bash benchmarks/device_decode16.sh 2>&1 | tail -30
