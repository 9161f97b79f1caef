// One m16n8k16 tensor-core step with FP32 accumulation, for the FpA x IntB kernels.
//
// Fragments (lane = 4 g + j): A a0 = (row g, k 2j..2j+1), a1 = (row g+8, same k),
// a2 = (row g, k 2j+8..2j+9), a3 = (row g+8, same k); B b0 = (k 2j..2j+1, column g),
// b1 = (k 2j+8..2j+9, column g); C c0, c1 = (row g, columns 2j, 2j+1), c2, c3 = row g+8.
// Sm75 has no m16n8k16: two m16n8k8 steps (k 2j.. and k 2j+8..) give the same sum.
#pragma once

#include <cstdint>
#include <cuda_fp16.h>
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#include <cuda_bf16.h>
#endif

namespace qgemm {
namespace fpaintb {

template <typename Act, int Arch>
struct Mma;

template <>
struct Mma<__half, 80> {
  __device__ static void step(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<__half, 75> {
  __device__ static void step(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[2]), "r"(a[3]), "r"(b1));
  }
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
template <>
struct Mma<__nv_bfloat16, 80> {
  __device__ static void step(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
#endif

// Epilogue activations (runtime choice: they only touch the output once).
enum Activation : int { kIdentity = 0, kRelu = 1, kSilu = 2, kGelu = 3, kRelu6 = 4 };

// ReLU that keeps NaN, as torch.relu does: fmaxf(NaN, 0) is 0 and would hide a NaN activation.
__device__ __forceinline__ float relu_keep_nan(float v) { return v > 0.f ? v : (v != v ? v : 0.f); }

__device__ __forceinline__ float activate(float v, int activation) {
  switch (activation) {
    case kRelu: return relu_keep_nan(v);
    case kRelu6: return v != v ? v : fminf(fmaxf(v, 0.f), 6.f);  // fminf/fmaxf drop NaN: keep it first
    case kSilu: return v / (1.f + __expf(-v));
    case kGelu: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));  // exact (erf) GELU, as torch's default
    default: return v;
  }
}

}  // namespace fpaintb
}  // namespace qgemm
