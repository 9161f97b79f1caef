// The warp-level primitives of the W8A8 promote kernel (promote_gemm.h): the s8 x s8 -> s32 MMA,
// ldmatrix and cp.async, each one PTX instruction (or four m8n8k16 MMAs on Sm75).
//
// Fragments of one m16n8k32 step (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8; lane = 4 g + j):
//   A a0 = row g, k 4j..4j+3; a1 = row g+8, same k; a2 = row g, k 16+4j..; a3 = row g+8, k 16+4j..
//   B b0 = k 4j..4j+3, column g; b1 = k 16+4j.., column g
//   C c0, c1 = row g, columns 2j, 2j+1; c2, c3 = row g+8, columns 2j, 2j+1
// i.e. the byte layout of the m16n8k16 f16 fragments, so ldmatrix (b16 8x8 matrices) loads them.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/arch/memory_sm75.h"  // ldsm
#include "cutlass/arch/memory_sm80.h"  // cp_async_zfill
#include "cutlass/array.h"

namespace qgemm {
namespace w8a8 {
namespace promote_detail {

// One m16n8k32 s8 x s8 -> s32 step (fragments as in the header comment).
template <int Arch>
struct IntMma;

template <>
struct IntMma<80> {
  __device__ static void step(int (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Sm75 has no m16n8k32: four m8n8k16 (rows g and g + 8, k 0-15 and 16-31) give the same sums.
template <>
struct IntMma<75> {
  __device__ static void step(int (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(c[0]), "+r"(c[1]) : "r"(a[0]), "r"(b0));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(c[0]), "+r"(c[1]) : "r"(a[2]), "r"(b1));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(c[2]), "+r"(c[3]) : "r"(a[1]), "r"(b0));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+r"(c[2]), "+r"(c[3]) : "r"(a[3]), "r"(b1));
  }
};

// ldmatrix.x4: lane l addresses row l % 8 of matrix l / 8 (16 bytes); r[i] gets matrix i's row
// lane / 4, bytes 4 (lane % 4) .. + 3.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], void const* smem) {
  cutlass::Array<unsigned, 4> v;
  cutlass::arch::ldsm<cutlass::layout::RowMajor, 4>(v, smem);
  r[0] = v[0];
  r[1] = v[1];
  r[2] = v[2];
  r[3] = v[3];
}

// cp.async of 4, 8 or 16 bytes, zero-filling when !valid (16 bytes bypass L1: operand tiles are
// read once per CTA; the small vectors go through it).
template <int Bytes>
__device__ __forceinline__ void copy_async(void* smem, void const* src, bool valid) {
  if constexpr (Bytes == 16) {
    cutlass::arch::cp_async_zfill<16, cutlass::arch::CacheOperation::Global>(smem, src, valid);
  } else {
    cutlass::arch::cp_async_zfill<Bytes, cutlass::arch::CacheOperation::Always>(smem, src, valid);
  }
}

__device__ __forceinline__ void copy_async_fence() { cutlass::arch::cp_async_fence(); }

template <int Pending>
__device__ __forceinline__ void copy_async_wait() { cutlass::arch::cp_async_wait<Pending>(); }

}  // namespace promote_detail
}  // namespace w8a8
}  // namespace qgemm
