"""Build, in parallel, the FpA x IntB decode kernels the device scripts run (benchmarks/device_bulk.sh,
device_prefetch.sh): the catalog's small-M kernels (fpaintb_gemv) and every decode-variant
configuration tests/test_fpaintb_gpu.py runs on sm90 (stream_test_specs: the catalog's, its extras and
the bulk-copy sweep configurations), FP16 and BF16, INT4 and INT8. Only what the cache lacks is built.

    python benchmarks/prebuild_decode.py [-j 16]
"""
from __future__ import annotations

import argparse
import time

import qgemm
from test_fpaintb_gpu import stream_test_specs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=16)
    args = ap.parse_args()
    specs = [s for act in ("f16", "bf16") for bits in (4, 8) for s in stream_test_specs(act, bits, 90)]
    t0 = time.time()
    built = qgemm.prebuild(["fpaintb_gemv", *specs], target_sm=90, jobs=args.j, progress=lambda line: None)
    print(f"{len(built)} fpaintb_gemv kernels for sm90 ready in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
