"""The host cost of each step of a qgemm launch, and of cheaper ways to make the same calls:
microseconds per call, the GPU kept far from busy (M = 1, a synchronize every 200 calls).

    python benchmarks/diag_launch.py

Rows: torch's current stream, the plan's fast checks, Params through the host library (ctypes),
the launch through cuda.bindings (cuLaunchKernelEx / cuLaunchKernel), the same launch through
ctypes on libcuda, and the workspace (torch.zeros against torch.empty + cuMemsetD8Async)."""
import ctypes

import torch

import qgemm
from qgemm.bench.timing import host_us
from qgemm import _driver, _runtime


cu = _driver.driver()
dev = 0
# 4096 x 4096 at M = 1: a persistent kernel with no workspace, so that repeated raw launches of the
# same Params are safe.
w = torch.randn(4096, 4096, device="cuda")
plan = qgemm.W8A8GemmPlan(qgemm.W8A8Weight.from_float(w, 128, scheme="symmetric"), out_dtype=torch.float16)
x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
xq = qgemm.quantize_activations(x, 128, symmetric=True)
out = torch.empty(1, 4096, device="cuda", dtype=torch.float16)
w16 = w.half()
plan.gemm(xq, out)
kernel, launch, choice = plan._prepare_sm90(1, None)
print(f"kernel {kernel.name}; workspace {launch.workspace_bytes} B; grid {tuple(launch.grid)} block "
      f"{tuple(launch.block)} cluster {tuple(launch.cluster)} smem {launch.smem_bytes}; "
      f"programmatic {kernel.programmatic_launch}")
assert launch.workspace_bytes == 0
handle = kernel._handle_with_smem(launch, dev)
call = plan._call
p = plan._problem
stream = _runtime.current_stream(dev)
status = kernel.host.make_params_fn(ctypes.byref(p), 0, call.params_address, 1 << 12)
launcher = call.launcher_for(kernel, handle, launch)
grid = (launch.grid[0], launch.grid[1], launch.grid[2])

# cuLaunchKernel (no attributes: no PDL, no cluster) through cuda.bindings.
bx, by, bz = launch.block[0], launch.block[1], launch.block[2]


def bindings_plain():
    cu.cuLaunchKernel(handle, *grid, bx, by, bz, launch.smem_bytes, stream, call.params_ptr_array, 0)


# The same launch through ctypes on libcuda, with a CUlaunchConfig built once.
libcuda = ctypes.CDLL("libcuda.so.1")


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


attrs = (LaunchAttribute * 2)()
n_attrs = 0
if tuple(launch.cluster) != (1, 1, 1):
    attrs[n_attrs].id = int(cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    ctypes.memmove(ctypes.addressof(attrs[n_attrs]) + 8, (ctypes.c_uint * 3)(*launch.cluster), 12)
    n_attrs += 1
if kernel.programmatic_launch:
    attrs[n_attrs].id = int(cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    ctypes.memmove(ctypes.addressof(attrs[n_attrs]) + 8, (ctypes.c_int * 1)(1), 4)
    n_attrs += 1
config = LaunchConfig()
config.block[:] = [bx, by, bz]
config.attrs = attrs
config.num_attrs = n_attrs
launch_ex = libcuda.cuLaunchKernelEx
launch_ex.restype = ctypes.c_int
launch_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
handle_int = int(handle)
config_address = ctypes.addressof(config)


def ctypes_ex():
    config.grid[0], config.grid[1], config.grid[2] = grid
    config.smem = launch.smem_bytes
    config.stream = stream
    err = launch_ex(config_address, handle_int, call.params_ptr_array, None)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx {err}")


memset = libcuda.cuMemsetD8Async
memset.restype = ctypes.c_int
memset.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p]


def empty_and_memset():
    t = torch.empty(4096, dtype=torch.uint8, device="cuda")
    memset(t.data_ptr(), 0, 4096, stream)
    return t


rows = {
    "torch.matmul fp16 (1x4096x4096)": lambda: torch.matmul(x, w16.t()),
    "_runtime.current_stream": lambda: _runtime.current_stream(dev),
    "plan._valid_fast(xq, out)": lambda: plan._valid_fast(xq, out),
    "plan._cached(m)": lambda: plan._cached(1, None),
    "torch.empty(1, 4096)": lambda: torch.empty(1, 4096, device="cuda", dtype=torch.float16),
    "torch.zeros(4 KiB)": lambda: torch.zeros(4096, dtype=torch.uint8, device="cuda"),
    "torch.empty + cuMemsetD8Async": empty_and_memset,
    "make_params (ctypes, host lib)": lambda: kernel.host.make_params_fn(ctypes.byref(p), 0, call.params_address,
                                                                           1 << 12),
    "_handle_with_smem": lambda: kernel._handle_with_smem(launch, dev),
    "ensure_context_on_thread": lambda: _driver.ensure_context_on_thread(dev),
    "Launcher.launch (bindings Ex)": lambda: launcher.launch(grid, launch.smem_bytes, stream, call.params_ptr_array),
    "cuLaunchKernel (bindings, no attrs)": bindings_plain,
    "cuLaunchKernelEx (ctypes libcuda)": ctypes_ex,
    "Kernel.launch (params + launch)": lambda: kernel.launch(p, launch, dev, stream, 0, call),
    "plan.gemm(xq, out)": lambda: plan.gemm(xq, out),
    "plan.gemm(xq)": lambda: plan.gemm(xq),
    "plan(x)": lambda: plan(x),
}
for name, fn in rows.items():
    print(f"  {name:36s} {host_us(fn, rounds=20, warmup=50):7.2f} us")
