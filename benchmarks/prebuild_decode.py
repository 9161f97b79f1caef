"""Build, in parallel, the FpA x IntB decode kernels the device scripts run (benchmarks/device_bulk.sh,
device_prefetch.sh): the catalog's small-M kernels (fpaintb_gemv) and every decode-variant
configuration tests/test_fpaintb_gpu.py runs on sm90 (stream_test_specs: the catalog's, its extras and
the bulk-copy sweep configurations), FP16 and BF16, INT4 and INT8. Only what the cache lacks is built.

    python benchmarks/prebuild_decode.py [-j 16]
"""
from __future__ import annotations

import argparse
import time

from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from test_fpaintb_gpu import stream_test_specs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=16)
    args = ap.parse_args()
    specs = set(catalog(90, "fpaintb_gemv"))
    specs |= {s for act in ("f16", "bf16") for bits in (4, 8) for s in stream_test_specs(act, bits, 90)}
    missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, 90) is None]
    t0 = time.time()
    build_many(missing, 90, jobs=args.j, progress=lambda line: None)
    print(f"built {len(missing)} of {len(specs)} fpaintb_gemv kernels for sm90 in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
