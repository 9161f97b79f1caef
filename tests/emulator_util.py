"""Compiling a rendered kernel for the CPU thread-block emulator (tests/emulator/): what the
*_emulated test files share. The kernel's source is the template's, unchanged; tests/emulator/
stands in for the CUDA runtime and the MMA instructions."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cutlass_gen.render import render
from cutlass_gen.toolchain import cutlass_include_dirs
from qgemm._abi import QgemmLaunch, QgemmProblem

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "tests" / "emulator"


def cuda_include() -> Path | None:
    """The CUDA headers (cuda_fp16.h, cuda_bf16.h) the kernels include, if this machine has them."""
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", *sorted(Path("/usr/local").glob("cuda-*"))):
        if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
            return Path(root) / "include"
    return None


requires_emulator = pytest.mark.skipif(shutil.which("g++") is None or cuda_include() is None,
                                       reason="needs g++ and the CUDA headers (cuda_fp16.h)")


def compile_emulated(spec, folder: Path) -> ctypes.CDLL:
    """The spec's rendered kernel built with g++ against the emulator, loaded, its entry points typed."""
    source = folder / f"{spec.name}.cpp"
    source.write_text(render(spec).source)
    library = folder / f"{spec.name}.so"
    includes = [EMULATOR, ROOT / "templates" / "include", *cutlass_include_dirs(), cuda_include()]
    command = ["g++", "-std=c++17", "-O1", "-shared", "-fPIC", *[f"-I{d}" for d in includes], str(source),
               "-o", str(library)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    lib = ctypes.CDLL(str(library))
    lib.emu_launch.argtypes = [ctypes.POINTER(QgemmProblem), ctypes.c_void_p]
    lib.emu_error.restype = ctypes.c_char_p
    lib.emu_readable.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.emu_prefetchable.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.emu_prefetched.restype = lib.emu_prefetched_block_max.restype = ctypes.c_uint64
    # The launch ABI names a kernel's host functions after its entry (<name>_plan).
    lib.qgemm_plan = getattr(lib, f"{spec.name}_plan")
    lib.qgemm_plan.argtypes = [ctypes.POINTER(QgemmProblem), ctypes.POINTER(QgemmLaunch)]
    return lib


def emulated_kernels(folder: Path, make):
    """A getter that builds make(spec, folder) once per spec (for a module-scoped fixture)."""
    cache: dict = {}

    def get(spec):
        if spec not in cache:
            cache[spec] = make(spec, folder)
        return cache[spec]
    return get


def check_l2_prefetch_bytes(lib, run, whole: int, none_below: int, sizes=(0, 16, 2048, 1 << 20), label=()):
    """The L2 prefetch before the wait, counted by the emulator (cuda_emu.h): for each knob in
    `sizes` (bytes per CTA), run(nbytes) launches the kernel, and then no CTA asked for more than
    the knob; with 1 MiB (past any slice) the total is exactly `whole`; below `none_below` (one
    16-byte unit per column the CTA owns) nothing was asked for."""
    for nbytes in sizes:
        run(nbytes)
        total, most = lib.emu_prefetched(), lib.emu_prefetched_block_max()
        assert most <= nbytes, (*label, nbytes, most)
        if nbytes == 1 << 20:
            assert total == whole, (*label, total, whole)
        elif nbytes < none_below:
            assert total == 0, (*label, nbytes, total)
