"""Python side of the launch ABI (templates/include/qgemm/abi.h).

These mirror qgemm's own two ABI structs, not CUTLASS's: a kernel's Params are
built by CUTLASS host code inside the kernel's host library and reach Python
only as bytes.
"""
from __future__ import annotations

import ctypes

ABI_VERSION = 2
PARAMS_CAPACITY = 4096  # CUDA's classic kernel-parameter limit


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
    """The kernel's host library: plan and Params construction, no GPU needed."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        lib.qgemm_abi_version.restype = ctypes.c_int
        lib.qgemm_entry_name.restype = ctypes.c_char_p
        lib.qgemm_spec_json.restype = ctypes.c_char_p
        lib.qgemm_plan.restype = ctypes.c_int
        lib.qgemm_plan.argtypes = [ctypes.POINTER(QgemmProblem), ctypes.POINTER(QgemmLaunch)]
        lib.qgemm_make_params.restype = ctypes.c_int
        lib.qgemm_make_params.argtypes = [
            ctypes.POINTER(QgemmProblem), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
        ]
        lib.qgemm_status_string.restype = ctypes.c_char_p
        lib.qgemm_status_string.argtypes = [ctypes.c_int]
        version = lib.qgemm_abi_version()
        if version != ABI_VERSION:
            raise RuntimeError(f"{path} was built for launch ABI {version}, this qgemm speaks {ABI_VERSION}; rebuild it")
        self._lib = lib
        self.path = path
        self.entry_name = lib.qgemm_entry_name().decode()
        self.spec_json = lib.qgemm_spec_json().decode()
        self.plan_fn = lib.qgemm_plan
        self.make_params_fn = lib.qgemm_make_params

    def status_string(self, status: int) -> str:
        return self._lib.qgemm_status_string(status).decode()

    def plan(self, problem: QgemmProblem) -> tuple[int, QgemmLaunch]:
        launch = QgemmLaunch()
        status = self.plan_fn(ctypes.byref(problem), ctypes.byref(launch))
        return status, launch
