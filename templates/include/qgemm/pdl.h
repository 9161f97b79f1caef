// Programmatic dependent launch (sm90) and the L2 prefetch a CTA may issue before it waits: what the
// decode kernels launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION share
// (KernelSpec.programmatic_launch). Below sm90 every function is a no-op, so one kernel source serves
// every build. tests/emulator/qgemm/pdl.h stands in for this header on the CPU emulator, where the
// prefetch ranges are checked.
#pragma once

#include <cstdint>

namespace qgemm {
namespace pdl {

// Blocks until the stream's previous kernel has finished and its writes are visible. A grid
// launched with programmatic stream serialization may start before that kernel ends, so it calls
// this before any load of what a previous kernel may have written. A no-op in a plain launch.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the stream's next kernel, if launched programmatically, start (it still waits for this grid
// to finish before its own loads).
__device__ __forceinline__ void let_next_grid_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks for [p, p + bytes) in L2 (cp.async.bulk.prefetch: p 16-byte aligned, bytes a multiple of 16).
// Safe before wait_for_previous_grid whatever the previous kernel writes: a prefetch only fills L2,
// where every SM's stores meet, and nothing reaches this CTA's registers or L1.
__device__ __forceinline__ void prefetch_l2(void const* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace pdl
}  // namespace qgemm
