// Emulator replacement of templates/include/qgemm/fpaintb/mma.h (see ../../cuda_emu.h): the
// FP16/BF16 m16n8k16 MMA computed from the PTX ISA's fragment layout ("Matrix Fragments for
// mma.m16n8k16 with floating point type"), written independently of the kernels, lane = 4 g + j:
//   A: a0 row g, k 2j..2j+1; a1 row g+8, k 2j..; a2 row g, k 2j+8..2j+9; a3 row g+8, k 2j+8..
//   B: b0 k 2j..2j+1, column g; b1 k 2j+8..2j+9, column g
//   C: c0, c1 row g, columns 2j, 2j+1; c2, c3 row g+8
// Element 0 of a register is its low 16 bits. Products and sums in double, rounded to float once
// per step (the tensor core's FP32 accumulation is at least that exact for these tests' bounds).
// Also: the epilogue activations (as in the real header) and the load intrinsics the FpA x IntB
// kernels use.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../cuda_emu.h"

template <typename T>
inline T __ldg(T const* p) { return *p; }

namespace qgemm {
namespace fpaintb {
namespace emu_detail {

inline double half_of(uint32_t r, int i, bool bf16) {
  uint16_t const bits = uint16_t(r >> (16 * i));
  if (bf16) {
    uint32_t const f = uint32_t(bits) << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return v;
  }
  __half h;
  std::memcpy(&h, &bits, 2);
  return double(__half2float(h));
}

inline void mma_16816(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  std::memcpy(w.a[lane], a, sizeof(uint32_t) * 4);
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  emu::sync_warp();
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    int const g = l / 4, j = l % 4;
    for (int i = 0; i < 2; ++i) {
      A[g][2 * j + i] = half_of(w.a[l][0], i, bf16);
      A[g + 8][2 * j + i] = half_of(w.a[l][1], i, bf16);
      A[g][2 * j + 8 + i] = half_of(w.a[l][2], i, bf16);
      A[g + 8][2 * j + 8 + i] = half_of(w.a[l][3], i, bf16);
      B[2 * j + i][g] = half_of(w.b[l][0], i, bf16);
      B[2 * j + 8 + i][g] = half_of(w.b[l][1], i, bf16);
    }
  }
  int const g = lane / 4, j = lane % 4;
  for (int e = 0; e < 4; ++e) {
    int const row = g + 8 * (e / 2), col = 2 * j + e % 2;
    double sum = c[e];
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
    c[e] = float(sum);
  }
  emu::sync_warp();
}

}  // namespace emu_detail

template <typename Act, int Arch>
struct Mma {
  static void step(float (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    static_assert(Arch == 80, "the emulator has the m16n8k16 step only");
    emu_detail::mma_16816(c, a, b0, b1, sizeof(Act) == 2 && !std::is_same<Act, __half>::value);
  }
};

enum Activation : int { kIdentity = 0, kRelu = 1, kSilu = 2, kGelu = 3, kRelu6 = 4 };

inline float relu_keep_nan(float v) { return v > 0.f ? v : (v != v ? v : 0.f); }

inline float activate(float v, int activation) {
  switch (activation) {
    case kRelu: return relu_keep_nan(v);
    case kRelu6: return v != v ? v : fminf(fmaxf(v, 0.f), 6.f);
    case kSilu: return v / (1.f + std::exp(-v));
    case kGelu: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    default: return v;
  }
}

}  // namespace fpaintb
}  // namespace qgemm
