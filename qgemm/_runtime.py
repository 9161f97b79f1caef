"""Kernels at run time: find or build the artifact, load it, plan and launch calls.

Loading is per process and per device, cached in memory; building happens at most
once per kernel (first use), into the on-disk cache shared with `qgemm build`.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

import torch

from cutlass_gen.build import build, find_artifact
from cutlass_gen.paths import TemplatesNotFoundError
from cutlass_gen.spec import KernelSpec
from cutlass_gen.toolchain import ToolchainError

from . import _driver
from ._abi import PARAMS_CAPACITY, HostLibrary, QgemmLaunch, QgemmProblem
from .errors import KernelUnavailableError

logger = logging.getLogger("qgemm")
_lock = threading.Lock()
# Programmatic dependent launch of the kernels built for it (Kernel.programmatic_launch); QGEMM_PDL=0
# turns it off (read at import), for comparisons.
PROGRAMMATIC_LAUNCH = os.environ.get("QGEMM_PDL", "1") != "0"
_kernels: dict[tuple[KernelSpec, int], "Kernel"] = {}


def target_sm_for(capability: tuple[int, int]) -> int | None:
    """Which build target serves a GPU of this compute capability (None: unsupported).

    sm_90a machine code runs only on sm_90 itself; other sm_8x/sm_9x/sm_1xx GPUs run
    the sm_80 build (binary-compatible on sm_8x, through its embedded PTX beyond)."""
    major, minor = capability
    if (major, minor) == (9, 0):
        return 90
    if major >= 8:
        return 80
    if (major, minor) >= (7, 5):
        return 75
    return None


class Kernel:
    """One built kernel: its host library, and its device code loaded per device."""

    def __init__(self, spec: KernelSpec, target_sm: int, so_path: str, fatbin: bytes):
        self.spec = spec
        self.target_sm = target_sm
        self.host = HostLibrary(so_path, spec.name)
        self._fatbin = fatbin
        self._per_device: dict[int, tuple[object, _driver.Launcher, list]] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def programmatic_launch(self) -> bool:
        """Launch with programmatic stream serialization: the spec's kernel waits for the previous
        kernel itself (KernelSpec.programmatic_launch), it was built for sm90 or later, where that
        wait exists, and QGEMM_PDL is not 0."""
        return PROGRAMMATIC_LAUNCH and self.target_sm >= 90 and self.spec.programmatic_launch

    def plan(self, problem: QgemmProblem) -> QgemmLaunch:
        status, launch = self.host.plan(problem)
        if status != 0:
            raise ValueError(f"kernel {self.name} cannot run this problem: {self.host.status_string(status)}")
        return launch

    def _device_state(self, device: int):
        state = self._per_device.get(device)
        if state is None:
            with _lock:
                state = self._per_device.get(device)
                if state is None:
                    library = _driver.load_library(self._fatbin)
                    handle = _driver.get_kernel(library, self.host.entry_name)
                    state = (handle, library, [0])  # [0]: dynamic smem limit set so far
                    self._per_device[device] = state
        return state

    def _handle_with_smem(self, launch: QgemmLaunch, device: int):
        """The device's kernel handle, its dynamic shared-memory limit raised to what `launch` needs."""
        handle, _, smem_set = self._device_state(device)
        if launch.smem_bytes > smem_set[0]:
            if launch.smem_bytes > 48 * 1024:
                limit = _driver.device_max_smem_optin(device)
                if launch.smem_bytes > limit:
                    raise ValueError(f"kernel {self.name} needs {launch.smem_bytes} bytes of shared memory, "
                                     f"device {device} allows {limit}")
                _driver.set_max_dynamic_smem(handle, launch.smem_bytes, device)
            smem_set[0] = launch.smem_bytes
        return handle

    def ctas_per_sm(self, launch: QgemmLaunch, device: int) -> int:
        """How many CTAs of this launch shape fit on one multiprocessor of `device`."""
        handle = self._handle_with_smem(launch, device)
        with torch.cuda.device(device):
            return _driver.max_active_blocks(handle, launch.block[0] * launch.block[1] * launch.block[2],
                                             launch.smem_bytes, device)

    def launch(self, problem: QgemmProblem, launch: QgemmLaunch, device: int, stream: int,
               workspace: int, call: "CallBuffers"):
        """Build Params in `call`'s buffer and launch on `stream`."""
        handle = self._handle_with_smem(launch, device)
        _driver.ensure_context_on_thread(device)
        status = self.host.make_params_fn(ctypes.byref(problem), workspace, call.params_address, PARAMS_CAPACITY)
        if status != 0:
            raise ValueError(f"kernel {self.name}: building Params failed: {self.host.status_string(status)}")
        call.launcher_for(self, handle, launch).launch(
            (launch.grid[0], launch.grid[1], launch.grid[2]), launch.smem_bytes, stream, call.params_ptr_array)


class CallBuffers:
    """Per-plan scratch for launches: the Params bytes and the pointer array to them."""

    def __init__(self):
        self.params = ctypes.create_string_buffer(PARAMS_CAPACITY)
        self.params_address = ctypes.addressof(self.params)
        self._ptrs = (ctypes.c_void_p * 1)(self.params_address)
        self.params_ptr_array = ctypes.addressof(self._ptrs)
        self._launchers: dict[tuple[str, int], _driver.Launcher] = {}

    def launcher_for(self, kernel: Kernel, handle, launch: QgemmLaunch) -> _driver.Launcher:
        key = (id(kernel), id(handle))  # not kernel.name: a property built per call
        launcher = self._launchers.get(key)
        if launcher is None:
            launcher = _driver.Launcher(handle, (launch.block[0], launch.block[1], launch.block[2]),
                                        (launch.cluster[0], launch.cluster[1], launch.cluster[2]),
                                        programmatic=kernel.programmatic_launch)
            self._launchers[key] = launcher
        return launcher


def get_kernel(spec: KernelSpec, target_sm: int) -> Kernel:
    """The loaded kernel for a spec and target: prebuilt if the cache has it, else built now."""
    key = (spec, target_sm)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is not None:
            return kernel
        artifact = find_artifact(spec, target_sm)
        if artifact is None:
            try:
                # A warning, so that it shows without logging set up: the call stalls for the compile.
                logger.warning("qgemm: building %s for sm%d (first use; cached afterwards; "
                               "qgemm.prebuild or `qgemm build` does this ahead of time)", spec.name, target_sm)
                artifact = build(spec, target_sm)
            except (ToolchainError, TemplatesNotFoundError, ImportError) as e:
                raise KernelUnavailableError(
                    f"kernel {spec.name} is not built for sm{target_sm} and cannot be built here ({e}); "
                    f"run `qgemm build --sm {target_sm}` where nvcc is available"
                ) from e
        kernel = Kernel(spec, target_sm, str(artifact.so_path), artifact.fatbin_path.read_bytes())
        _kernels[key] = kernel
        return kernel


_sm_counts: dict[int, int] = {}
# Per-shape caches of a plan hold at most this many entries (a server sees many M).
CACHE_LIMIT = 4096


def cached(cache: dict, key, make):
    """cache[key], made on first use; the cache is emptied when it reaches CACHE_LIMIT."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        value = cache[key] = make()
    return value


def outside_graph_pools(make, device: torch.device | None):
    """make(), with its CUDA allocations made from the ordinary caching allocator.

    What plans make on first use (converted weights, per-shape tables) lives as long as the plan.
    While torch.compile's cudagraph trees warm a graph up, every allocation of the calling thread
    goes to the graph's private pool (torch._C._cuda_beginAllocateCurrentThreadToPool): a plan made
    there would keep tensors the pool does not track, which cudagraph trees refuse ("tensors in the
    cudagraph pool not tracked as outputs") and later replays may overwrite. So make() runs on a
    helper thread, whose allocations are ordinary, and its GPU work is complete before it returns.
    While the calling thread captures a graph itself (torch.cuda.graph), nothing may synchronize,
    so make() runs in place: warm a shape up before capturing it, as for any CUDA graph."""
    if (device is None or device.type != "cuda" or not torch.cuda.is_available()
            or torch.cuda.is_current_stream_capturing()):
        return make()
    if device.index is None:  # the helper thread's current device is its own (0), not the caller's
        device = torch.device("cuda", torch.cuda.current_device())
    result: list = []
    error: list[BaseException] = []

    def run():
        try:
            with torch.cuda.device(device):
                result.append(make())
                torch.cuda.current_stream().synchronize()
        except BaseException as e:  # raised again in the calling thread
            error.append(e)

    helper = threading.Thread(target=run, name="qgemm-make", daemon=True)
    helper.start()
    helper.join()
    if error:
        raise error[0]
    return result[0]


def sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device (cached: persistent kernels ask on every plan)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    count = _sm_counts.get(index)
    if count is None:
        count = _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return count


def current_stream(device_index: int) -> int:
    """torch's current stream on a device, as a raw handle (the cheap call torch.compile uses)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def zeroed_workspace(nbytes: int, device: torch.device) -> torch.Tensor | None:
    """Workspace from torch's caching allocator, zeroed on the current stream."""
    if nbytes == 0:
        return None
    return torch.zeros(int(nbytes), dtype=torch.uint8, device=device)


def plan_launch(kernel, p: QgemmProblem, choice, sm_count: int, device_index: int, slots=None):
    """kernel.plan(p) with the stream-K CTA count of choice.ctas_per_sm written to the slot named
    ctas (`slots`, the kernel spec's SLOTS; None: ext[2], where every stream-K family has it): the
    CTAs that fit on the GPU at once, at most ctas_per_sm per SM. Returns (launch, ctas)."""
    def write(ctas: int):
        if slots is None:
            p.ext[2] = ctas
        else:
            slots.write(p, ctas=ctas)

    write(0)
    launch = kernel.plan(p)
    ctas = 0
    if choice.ctas_per_sm:
        fit = kernel.ctas_per_sm(launch, device_index)
        ctas = max(1, round(sm_count * min(fit, choice.ctas_per_sm)))
        write(ctas)
        launch = kernel.plan(p)
    return launch, ctas
