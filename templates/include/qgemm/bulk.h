// Bulk copies from global into shared memory, completed through mbarriers (sm90: cp.async.bulk with
// mbarrier::complete_tx): what the FpA x IntB decode variant's shared-memory ring uses
// (FpAIntBGemvSpec.bulk_stages). One instruction moves a whole contiguous run of bytes, so the bytes in
// flight cost neither registers nor per-thread load instructions. tests/emulator/qgemm/bulk.h stands in
// for this header on the CPU emulator, where copies land only when a thread waits for their barrier.
// Kernels built for earlier GPUs include the header but never call it (the bulk variant is arch 90 only).
//
// A barrier's phase completes when its expected arrivals have arrived and the bytes announced with
// arrive_expect_tx have landed; wait(bar, parity) returns once the phase of that parity has completed
// (a fresh barrier is in phase 0, so wait(bar, 1) returns at once: a ring's empty slots start free).
#pragma once

#include <cstdint>

namespace qgemm {
namespace bulk {

// sm90 and later; elsewhere the functions below trap (QGEMM_BULK_SM90 false).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define QGEMM_BULK_SM90 1
#else
#define QGEMM_BULK_SM90 0
#endif

__device__ __forceinline__ uint32_t smem_address(void const* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread initializes each barrier; then fence_init() and a __syncthreads before any use.
__device__ __forceinline__ void init(uint64_t* bar, uint32_t arrivals) {
#if QGEMM_BULK_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}

// Makes initialized barriers visible to the bulk-copy (async) proxy.
__device__ __forceinline__ void fence_init() {
#if QGEMM_BULK_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}

// One arrival that also announces `bytes` of copies completing on this barrier's current phase.
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if QGEMM_BULK_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// One arrival (release: this thread's earlier shared-memory reads are done before a copy that waited
// for the phase may overwrite them).
__device__ __forceinline__ void arrive(uint64_t* bar) {
#if QGEMM_BULK_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
#if QGEMM_BULK_SM90
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "  selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// Orders this thread's earlier generic-proxy shared-memory accesses before later async-proxy ones (a
// bulk copy that another thread issues after a barrier this thread arrives on).
__device__ __forceinline__ void fence_proxy_async() {
#if QGEMM_BULK_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// [src, src + bytes) into [dst, dst + bytes): both 16-byte aligned, bytes a multiple of 16; completes
// `bytes` of `bar`'s announced transfer.
__device__ __forceinline__ void copy(void* dst, void const* src, uint32_t bytes, uint64_t* bar) {
#if QGEMM_BULK_SM90
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(smem_address(bar))
               : "memory");
#else
  __trap();
#endif
}

}  // namespace bulk
}  // namespace qgemm
