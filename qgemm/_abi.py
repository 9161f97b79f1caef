"""Python side of the launch ABI (templates/include/qgemm/abi.h).

These mirror qgemm's own two ABI structs, not CUTLASS's: a kernel's Params are
built by CUTLASS host code inside the kernel's host library and reach Python
only as bytes.
"""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

ABI_VERSION = 3
PARAMS_CAPACITY = 4096  # CUDA's classic kernel-parameter limit


def _recorded_name(so_path: str) -> str:
    """The kernel name a cache artifact's meta.json records for the library at so_path."""
    meta = Path(so_path).with_name("meta.json")
    try:
        return json.loads(meta.read_text())["name"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"entry: no kernel name given and none readable from {meta} ({e.__class__.__name__}); "
                         f"pass the kernel's name") from None


class QgemmProblem(ctypes.Structure):
    _fields_ = [
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("ext", ctypes.c_int64 * 8),
        ("ptr", ctypes.c_void_p * 16),
        ("ld", ctypes.c_int64 * 8),
        ("scalar", ctypes.c_float * 8),
        ("sm_count", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class QgemmLaunch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("cluster", ctypes.c_uint32 * 3),
        ("smem_bytes", ctypes.c_uint32),
        ("params_bytes", ctypes.c_uint32),
        ("workspace_bytes", ctypes.c_uint64),
    ]


class HostLibrary:
    """One kernel's host side: plan and Params construction, no GPU needed.

    `path` is the host library (kernel.so), which may hold several kernels (a bundle); `entry` names
    the kernel, whose host functions are <entry>_plan and <entry>_make_params. Without `entry`, the
    name recorded in the artifact's meta.json beside the library is taken."""

    def __init__(self, path: str, entry: str | None = None):
        if entry is None:
            entry = _recorded_name(path)
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        lib.qgemm_abi_version.restype = ctypes.c_int
        lib.qgemm_status_string.restype = ctypes.c_char_p
        lib.qgemm_status_string.argtypes = [ctypes.c_int]
        version = lib.qgemm_abi_version()
        if version != ABI_VERSION:
            raise RuntimeError(f"{path} was built for launch ABI {version}, this qgemm speaks {ABI_VERSION}; rebuild it")
        try:
            spec_json = getattr(lib, f"{entry}_spec_json")
            plan_fn = getattr(lib, f"{entry}_plan")
            make_params_fn = getattr(lib, f"{entry}_make_params")
        except AttributeError:
            raise RuntimeError(f"{path} has no kernel {entry!r} (no {entry}_plan); rebuild it") from None
        spec_json.restype = ctypes.c_char_p
        plan_fn.restype = ctypes.c_int
        plan_fn.argtypes = [ctypes.POINTER(QgemmProblem), ctypes.POINTER(QgemmLaunch)]
        make_params_fn.restype = ctypes.c_int
        make_params_fn.argtypes = [ctypes.POINTER(QgemmProblem), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
        self._lib = lib
        self.path = path
        self.entry_name = entry
        self.spec_json = spec_json().decode()
        self.plan_fn = plan_fn
        self.make_params_fn = make_params_fn

    def status_string(self, status: int) -> str:
        return self._lib.qgemm_status_string(status).decode()

    def plan(self, problem: QgemmProblem) -> tuple[int, QgemmLaunch]:
        launch = QgemmLaunch()
        status = self.plan_fn(ctypes.byref(problem), ctypes.byref(launch))
        return status, launch
