"""The CUDA driver calls qgemm makes, through cuda.bindings.driver, each checked."""
from __future__ import annotations

import threading

from .errors import CudaError, NoGpuError

_lock = threading.Lock()
_initialized = False
_cu = None


def driver():
    """cuda.bindings.driver, initialized; NoGpuError on a machine without a GPU driver."""
    global _initialized, _cu
    if _initialized:
        return _cu
    with _lock:
        if _initialized:
            return _cu
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise NoGpuError(f"cuda-python is not installed ({e}); pip install cuda-python") from e
        try:
            (err,) = cu.cuInit(0)
        except Exception as e:  # cuda.pathfinder's DynamicLibNotFoundError and kin
            raise NoGpuError(
                "no CUDA driver on this machine (libcuda could not be loaded): qgemm can render and "
                f"build kernels here but not run them [{type(e).__name__}: {e}]"
            ) from e
        if err == cu.CUresult.CUDA_ERROR_NO_DEVICE:
            raise NoGpuError("the CUDA driver found no GPU on this machine")
        _check(cu, err, "cuInit")
        _cu = cu
        _initialized = True
        return cu


def _check(cu, err, what: str):
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        text = text.decode() if isinstance(text, bytes) else text
        raise CudaError(f"{what} failed: {name} ({text})")


def check(result, what: str):
    """Unpack a cuda.bindings (err, *values) result, raising CudaError on failure."""
    cu = driver()
    err, *values = result
    _check(cu, err, what)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def load_library(image: bytes):
    """Load a fatbin into every context (cuLibraryLoadData)."""
    cu = driver()
    return check(cu.cuLibraryLoadData(image, None, None, 0, None, None, 0), "cuLibraryLoadData")


def get_kernel(library, name: str):
    cu = driver()
    return check(cu.cuLibraryGetKernel(library, name.encode()), f"cuLibraryGetKernel({name})")


def set_max_dynamic_smem(kernel, nbytes: int, device: int):
    cu = driver()
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(cu.cuKernelSetAttribute(attr, int(nbytes), kernel, cu.CUdevice(device)),
          f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")


_primary_contexts: dict[int, object] = {}


def ensure_context(device: int):
    """Make the device's primary context current on this thread if none is. A thread that has
    made no CUDA runtime call yet has no current context, and the driver calls that need one (e.g.
    cuKernelGetFunction) fail with CUDA_ERROR_INVALID_CONTEXT; torch works in the primary context."""
    cu = driver()
    if int(check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")) != 0:
        return
    with _lock:
        context = _primary_contexts.get(device)
        if context is None:
            context = check(cu.cuDevicePrimaryCtxRetain(cu.CUdevice(device)), "cuDevicePrimaryCtxRetain")
            _primary_contexts[device] = context  # retained once per process, as torch keeps it alive too
    check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")


_thread_state = threading.local()


def ensure_context_on_thread(device: int):
    """ensure_context, checked once per thread and device (launches call it: a thread's first qgemm
    launch may come before any CUDA runtime call on it, and building a Sm90 kernel's Params encodes
    TMA descriptors, which fails with CUDA_ERROR_INVALID_CONTEXT without a current context)."""
    done = getattr(_thread_state, "devices", None)
    if done is None:
        done = _thread_state.devices = set()
    if device not in done:
        ensure_context(device)
        done.add(device)


def max_active_blocks(kernel, block_threads: int, smem_bytes: int, device: int) -> int:
    """CTAs of `kernel` that fit on one multiprocessor of `device` (registers, shared memory,
    threads), with its dynamic shared-memory limit already raised where needed."""
    cu = driver()
    ensure_context(device)
    function = check(cu.cuKernelGetFunction(kernel), "cuKernelGetFunction")
    return int(check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, int(block_threads), int(smem_bytes)),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor"))


def device_max_smem_optin(device: int) -> int:
    cu = driver()
    attr = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    return int(check(cu.cuDeviceGetAttribute(attr, cu.CUdevice(device)), "cuDeviceGetAttribute"))


class Launcher:
    """A reusable CUlaunchConfig for one kernel; `launch` is the per-call hot path."""

    def __init__(self, kernel, block: tuple[int, int, int], cluster: tuple[int, int, int] = (1, 1, 1),
                 programmatic: bool = False):
        cu = driver()
        self._cu = cu
        self._kernel = kernel
        self._config = cu.CUlaunchConfig()
        self._config.blockDimX, self._config.blockDimY, self._config.blockDimZ = block
        attrs = []
        if tuple(cluster) != (1, 1, 1):
            # Sm90 thread block clusters (TMA multicast across the cluster's CTAs).
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            attrs.append(attr)
        if programmatic:
            # Programmatic dependent launch: the grid may start before the stream's previous kernel
            # has finished; the kernel itself waits for it (griddepcontrol.wait) before touching
            # memory. Only for kernels built to (KernelSpec.programmatic_launch).
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        self._config.attrs = attrs
        self._config.numAttrs = len(attrs)

    def launch(self, grid, smem_bytes: int, stream: int, params_ptr_array: int):
        config = self._config
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.sharedMemBytes = smem_bytes
        config.hStream = stream
        (err,) = self._cu.cuLaunchKernelEx(config, self._kernel, params_ptr_array, 0)
        if err != self._cu.CUresult.CUDA_SUCCESS:
            _check(self._cu, err, "cuLaunchKernelEx")
