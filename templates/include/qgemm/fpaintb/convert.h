// Fast integer -> FP16/BF16 converters for the FpA x IntB kernels.
//
// They read one 32-bit word of codes in the converter order of cutlass_gen/fpaintb_layout.py
// (int4 nibbles e0 e2 e4 e6 e1 e3 e5 e7 from the low end; int8 bytes e0 e2 e1 e3) and return
// the pairs (e0, e1), (e2, e3), ... as (u - zero), exact, in two-lane registers.
//
// The trick (all exact, no int->float conversion instruction):
//   FP16: 0x6400 is 1024.0 with an ulp of 1, so OR-ing a code u < 1024 into the mantissa gives
//         1024 + u. One lop3 puts two nibbles into the two halves of a half2; an int4 code
//         sitting 4 bits higher gives 1024 + 16u, which one fma by 1/16 brings back. int8 codes
//         go in with one prmt each pair.
//   BF16: 0x4300 is 128.0 with an ulp of 1 (7 mantissa bits), enough for int4 codes; int8
//         codes (up to 255) go through FP32's 0x4B000000 = 2^23 instead.
// The subtraction of (magic + zero) is exact because both are small integers.
#pragma once

#include <cstdint>
#include <cuda_fp16.h>
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#include <cuda_bf16.h>
#endif

namespace qgemm {
namespace fpaintb {

// (a & b) | c in one instruction: the lop3 look-up table of that function is 0xea.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <typename T>
__device__ __forceinline__ T as(uint32_t bits) {
  return *reinterpret_cast<T*>(&bits);
}

template <typename Act, int Bits>
struct Converter;

// ---- FP16 ------------------------------------------------------------------------------------
template <>
struct Converter<__half, 4> {
  using Pair = __half2;
  static constexpr int kPairs = 4;  // 8 codes per word
  struct Zero {
    __half2 low;   // 1024 + zero, subtracted from 1024 + u
    __half2 high;  // -(64 + zero), added to (1024 + 16u) / 16
  };
  __device__ static Zero zero(int z) {
    return {__float2half2_rn(1024.f + z), __float2half2_rn(-64.f - z)};
  }
  __device__ static void convert(uint32_t word, Zero const& z, Pair (&out)[kPairs]) {
    constexpr uint32_t kLow = 0x000f000f, kHigh = 0x00f000f0, kMagic = 0x64006400;
    uint32_t const top = word >> 8;
    __half2 const sixteenth = __float2half2_rn(1.f / 16.f);
    out[0] = __hsub2(as<__half2>(and_or(word, kLow, kMagic)), z.low);
    out[1] = __hfma2(as<__half2>(and_or(word, kHigh, kMagic)), sixteenth, z.high);
    out[2] = __hsub2(as<__half2>(and_or(top, kLow, kMagic)), z.low);
    out[3] = __hfma2(as<__half2>(and_or(top, kHigh, kMagic)), sixteenth, z.high);
  }
};

template <>
struct Converter<__half, 8> {
  using Pair = __half2;
  static constexpr int kPairs = 2;  // 4 codes per word
  struct Zero {
    __half2 low;  // 1024 + zero
  };
  __device__ static Zero zero(int z) { return {__float2half2_rn(1024.f + z)}; }
  __device__ static void convert(uint32_t word, Zero const& z, Pair (&out)[kPairs]) {
    constexpr uint32_t kMagic = 0x64646464;
    // prmt selectors: result bytes (low to high) = code, 0x64, code, 0x64. Codes e0, e1 sit
    // in bytes 0 and 2, e2, e3 in bytes 1 and 3 (converter order).
    out[0] = __hsub2(as<__half2>(__byte_perm(word, kMagic, 0x4240)), z.low);
    out[1] = __hsub2(as<__half2>(__byte_perm(word, kMagic, 0x4341)), z.low);
  }
};

// ---- BF16 (sm80 and later) -------------------------------------------------------------------
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
template <>
struct Converter<__nv_bfloat16, 4> {
  using Pair = __nv_bfloat162;
  static constexpr int kPairs = 4;
  struct Zero {
    __nv_bfloat162 low;  // 128 + zero
  };
  __device__ static Zero zero(int z) { return {__float2bfloat162_rn(128.f + z)}; }
  __device__ static void convert(uint32_t word, Zero const& z, Pair (&out)[kPairs]) {
    // BF16 has no room for 16u above 128, so each nibble pair is shifted down instead.
    constexpr uint32_t kLow = 0x000f000f, kMagic = 0x43004300;
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      out[i] = __hsub2(as<__nv_bfloat162>(and_or(word >> (4 * i), kLow, kMagic)), z.low);
    }
  }
};

template <>
struct Converter<__nv_bfloat16, 8> {
  using Pair = __nv_bfloat162;
  static constexpr int kPairs = 2;
  struct Zero {
    float magic;  // 2^23 + zero
  };
  __device__ static Zero zero(int z) { return {8388608.f + z}; }
  __device__ static void convert(uint32_t word, Zero const& z, Pair (&out)[kPairs]) {
    // prmt puts a code into the low byte of 2^23 (0x4B000000), whose ulp is 1.
    constexpr uint32_t kMagic = 0x4B000000;
    float const e0 = as<float>(__byte_perm(word, kMagic, 0x7650)) - z.magic;
    float const e1 = as<float>(__byte_perm(word, kMagic, 0x7652)) - z.magic;
    float const e2 = as<float>(__byte_perm(word, kMagic, 0x7651)) - z.magic;
    float const e3 = as<float>(__byte_perm(word, kMagic, 0x7653)) - z.magic;
    out[0] = __floats2bfloat162_rn(e0, e1);  // |u - zero| <= 255: exact in BF16
    out[1] = __floats2bfloat162_rn(e2, e3);
  }
};
#endif

}  // namespace fpaintb
}  // namespace qgemm
