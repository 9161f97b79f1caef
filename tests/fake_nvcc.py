#!/usr/bin/env python3
"""A stand-in for nvcc, so cache and packaging tests run in a second without compiling.

It answers `--version`, and for a compile (`... --keep --keep-dir=D -o OUT SRC`) writes OUT
(the "host library": a copy of the source, so that different kernels give different files)
and D/kernel.fatbin. Environment:
  FAKE_NVCC_LOG    append "<pid> start|done <source>" lines here (tests count compiles);
  FAKE_NVCC_SLEEP  seconds to sleep mid-compile (to race or interrupt builds);
  FAKE_NVCC_FAIL   exit 1 with an error message when the source contains this text.
"""
import os
import sys
import time


def log(event: str, src: str) -> None:
    path = os.environ.get("FAKE_NVCC_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {event} {src}\n")


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print("nvcc: fake NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 0.0, V0.0.0\n"
              "Build fake_nvcc_0.0")
        return 0
    out = argv[argv.index("-o") + 1]
    keep_dir = next(a.split("=", 1)[1] for a in argv if a.startswith("--keep-dir="))
    src = argv[-1]
    log("start", src)
    with open(src) as f:
        source = f.read()
    fail = os.environ.get("FAKE_NVCC_FAIL")
    if fail and fail in source:
        print(f"{src}(1): error: fake compile error ({fail})", file=sys.stderr)
        return 1
    time.sleep(float(os.environ.get("FAKE_NVCC_SLEEP", "0")))
    with open(out, "w") as f:
        f.write("fake host library\n" + source)
    with open(os.path.join(keep_dir, "kernel.fatbin"), "wb") as f:
        f.write(b"fake fatbin\0" + source.encode()[:4096])
    log("done", src)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
