// Activation quantization of one (row, K-block) by one warp, for the fused W8A8 decode kernel
// (templates/w8a8_gemv.cu.j2). This is, operation for operation, the arithmetic of
// templates/act_quant.cu.j2's quantize_block (same explicit-rounding intrinsics, same clamps,
// same NaN rule), so the fused kernel's codes, scales, offsets and sums are bit-identical to the
// two-kernel path's (tests/test_w8a8_gemv_gpu.py checks it through the kernel's debug dump).
// Only where the results go differs: shared memory instead of global.
//
// A block holding NaN or Inf gets a NaN scale (and offset) and q = 0, so the promotion carries
// the non-finite value into every output of that row, as an unquantized GEMM would; a max that
// ignored NaN (fmaxf) would make the row silently finite.
#pragma once

#include <cstdint>

namespace qgemm {
namespace w8a8 {
namespace gemv {

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

// What the promotion needs of one (row, block): the scale, and (asymmetric) the offset and the
// sum of the block's codes.
struct RowBlock {
  float scale, offset, sum;
};

// Lane `lane`'s elements [lane * kPerLane, + kPerLane) of the block starting at `src`
// (kPerLane = block_size / 32), as floats (exact for every input type). Separate from
// quantize_block so that a warp can have the loads of several blocks in flight at once.
template <int kPerLane, class Element>
__device__ __forceinline__ void load_block(Element const* src, int lane, float (&v)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) v[i] = float(src[lane * kPerLane + i]);
}

// The warp quantizes one block (each lane its load_block elements) into `dst` (same offsets).
// Returns the block's vectors (every lane gets them).
template <bool kSymmetric, int kPerLane>
__device__ __forceinline__ RowBlock quantize_block(float const (&v)[kPerLane], int8_t* dst, int lane) {
  // Any NaN or Inf in the block (x - x is NaN exactly for those).
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) finite &= (v[i] - v[i]) == 0.f;
  finite = __all_sync(0xffffffffu, finite);
  int8_t out[kPerLane];
  RowBlock r;
  if constexpr (kSymmetric) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(warp_max(amax), 1e-10f);
    // Explicit IEEE divisions: the reference computes scale and inv the same way.
    float scale = finite ? __fdiv_rn(amax, 127.f) : NAN;
    float inv = __fdiv_rn(127.f, amax);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      float q = rintf(__fmul_rn(v[i], inv));
      out[i] = finite ? int8_t(int(fminf(fmaxf(q, -127.f), 127.f))) : int8_t(0);
    }
    r = RowBlock{scale, 0.f, 0.f};
  } else {
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      lo = fminf(lo, v[i]);
      hi = fmaxf(hi, v[i]);
    }
    lo = warp_min(lo);
    hi = warp_max(hi);
    // Explicit rounding intrinsics keep nvcc from contracting into FMAs, so the result matches
    // the torch reference (qgemm/reference.py) bit for bit.
    float scale = __fdiv_rn(__fsub_rn(hi, lo), 255.f);
    float offset;
    if (scale > 0.f) {
      offset = __fadd_rn(lo, __fmul_rn(128.f, scale));
    } else {
      scale = 1.f;
      offset = lo;
    }
    int total = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      float q = rintf(__fdiv_rn(__fsub_rn(v[i], offset), scale));
      int qi = finite ? int(fminf(fmaxf(q, -128.f), 127.f)) : 0;
      out[i] = int8_t(qi);
      total += qi;
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) total += __shfl_xor_sync(0xffffffffu, total, s);
    r = RowBlock{finite ? scale : NAN, finite ? offset : NAN, float(total)};
  }
  // kPerLane codes are one 1-, 2-, 4- or 8-byte store.
  if constexpr (kPerLane == 1) {
    dst[lane] = out[0];
  } else if constexpr (kPerLane == 2) {
    reinterpret_cast<int16_t*>(dst)[lane] = int16_t((uint8_t(out[0])) | (uint32_t(uint8_t(out[1])) << 8));
  } else {
    uint32_t w[kPerLane / 4];
#pragma unroll
    for (int i = 0; i < kPerLane / 4; ++i) {
      w[i] = uint32_t(uint8_t(out[4 * i])) | (uint32_t(uint8_t(out[4 * i + 1])) << 8) |
             (uint32_t(uint8_t(out[4 * i + 2])) << 16) | (uint32_t(uint8_t(out[4 * i + 3])) << 24);
    }
    if constexpr (kPerLane == 4) {
      reinterpret_cast<uint32_t*>(dst)[lane] = w[0];
    } else {
      reinterpret_cast<uint2*>(dst)[lane] = make_uint2(w[0], w[1]);
    }
  }
  return r;
}

}  // namespace gemv
}  // namespace w8a8
}  // namespace qgemm
