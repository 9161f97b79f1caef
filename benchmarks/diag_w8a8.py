"""Diagnostics for the W8A8 GEMM: host cost of each step and kernel durations (torch.profiler)."""
import time
import torch
import qgemm
from qgemm import _runtime

def host_us(fn, n=300):
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter(); torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6

n, k, bs = 4096, 4096, 128
w = qgemm.W8A8Weight.from_float(torch.randn(n, k, device="cuda"), bs)
for m in (1, 128, 4096):
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    xq = qgemm.quantize_activations(x, bs)
    plan = qgemm.W8A8GemmPlan(w, out_dtype=torch.float16)
    spec = plan.kernel_spec(m)
    kern = _runtime.get_kernel(spec, plan.target_sm)
    p = plan._problem
    plan.gemm(xq)
    torch.cuda.synchronize()
    print(f"M={m} spec {spec.name}")
    print(f"  host: ctypes plan {host_us(lambda: kern.plan(p), 2000):.1f} us, zeros {host_us(lambda: torch.zeros(64, dtype=torch.uint8, device='cuda')):.1f} us, "
          f"current_stream {host_us(lambda: torch.cuda.current_stream(plan.device).cuda_stream, 2000):.1f} us, get_kernel {host_us(lambda: _runtime.get_kernel(spec, 90), 2000):.1f} us")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        plan.gemm(xq)
        with torch.cuda.graph(g, stream=s):
            plan.gemm(xq)
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record(); [g.replay() for _ in range(20)]; en.record(); en.synchronize()
    print(f"  graph replay {st.elapsed_time(en) / 20 * 1e3:.1f} us per gemm")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            plan.gemm(xq)
        torch.cuda.synchronize()
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA or "qgemm" in e.key:
            print(f"  {e.key[:70]:70s} n={e.count:3d} cuda_avg={e.device_time_total / max(e.count, 1):9.1f} us")
