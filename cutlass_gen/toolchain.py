"""Finding nvcc and the CUTLASS headers, and the flags each target SM gets."""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .paths import extensions_include_dir
from .spec import SUPPORTED_TARGETS


class ToolchainError(RuntimeError):
    """nvcc or the CUTLASS headers cannot be found."""


def find_nvcc() -> Path:
    """QGEMM_NVCC, then $CUDA_HOME/bin/nvcc, then nvcc on PATH."""
    candidates = []
    if os.environ.get("QGEMM_NVCC"):
        candidates.append(("QGEMM_NVCC", Path(os.environ["QGEMM_NVCC"])))
    if os.environ.get("CUDA_HOME"):
        candidates.append(("CUDA_HOME", Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(("PATH", Path(on_path)))
    for _, path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    tried = ", ".join(f"{src}: {p}" for src, p in candidates) or "none set"
    raise ToolchainError(
        f"nvcc not found (tried {tried}); set QGEMM_NVCC or CUDA_HOME, or put nvcc on PATH"
    )


def cutlass_include_dirs() -> list[Path]:
    """CUTLASS headers shipped by the nvidia-cutlass wheel (package cutlass_library)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError("package cutlass_library not found: pip install nvidia-cutlass")
    root = Path(list(spec.submodule_search_locations)[0]) / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    if not (dirs[0] / "cutlass" / "cutlass.h").is_file():
        raise ToolchainError(f"CUTLASS headers missing under {dirs[0]}; reinstall nvidia-cutlass")
    return dirs


def cutlass_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def gencode_flags(target_sm: int) -> list[str]:
    """sm_75 and sm_80 embed PTX as well, so they also run (JIT-compiled) on newer GPUs;
    sm_90 means sm_90a, which the Hopper-only instructions (wgmma, setmaxnreg) need."""
    if target_sm not in SUPPORTED_TARGETS:
        raise ValueError(f"sm must be one of {SUPPORTED_TARGETS}, got {target_sm!r}")
    if target_sm == 90:
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    return [f"-gencode=arch=compute_{target_sm},code=[sm_{target_sm},compute_{target_sm}]"]


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    nvcc_version: str
    include_dirs: tuple
    cutlass_version: str

    def flags(self, target_sm: int) -> list[str]:
        # -DNDEBUG: without it nvcc 13 serializes the wgmma pipeline of Sm90 kernels (C7510).
        return [
            "-std=c++17",
            "-O3",
            "-DNDEBUG",
            "--expt-relaxed-constexpr",
            "-shared",
            "-Xcompiler=-fPIC",
            *gencode_flags(target_sm),
            *[f"-I{d}" for d in self.include_dirs],
        ]


@functools.lru_cache(maxsize=None)
def toolchain() -> Toolchain:
    nvcc = find_nvcc()
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ToolchainError(f"`{nvcc} --version` failed: {e}") from e
    version = out.strip().splitlines()[-1] if out.strip() else "unknown"
    includes = (extensions_include_dir(), *cutlass_include_dirs())
    return Toolchain(nvcc=nvcc, nvcc_version=version, include_dirs=tuple(str(p) for p in includes),
                     cutlass_version=cutlass_version())


class TargetDetectionError(RuntimeError):
    """`--sm auto` found no GPU to take the target SM from."""


def detect_target_sm() -> int:
    """The build target serving this machine's current CUDA GPU (what `--sm auto` means)."""
    try:
        import torch
    except ImportError as e:
        raise TargetDetectionError(f"--sm auto needs torch to find the GPU ({e}); pass --sm "
                                   f"{'|'.join(map(str, SUPPORTED_TARGETS))}") from e
    if not torch.cuda.is_available():
        raise TargetDetectionError(
            "--sm auto: no CUDA GPU is visible here (torch.cuda.is_available() is False); pass --sm "
            f"{'|'.join(map(str, SUPPORTED_TARGETS))} to build for another machine's GPU")
    from qgemm._runtime import target_sm_for

    device = torch.cuda.current_device()
    capability = torch.cuda.get_device_capability(device)
    target = target_sm_for(capability)
    if target is None:
        raise TargetDetectionError(
            f"--sm auto: GPU {device} ({torch.cuda.get_device_name(device)}) is sm_{capability[0]}{capability[1]}; "
            f"qgemm's kernels need sm_75 or newer")
    return target
