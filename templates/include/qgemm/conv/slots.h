// The int8 convolution's QgemmProblem slots, read once for every kernel of the family (the
// CUTLASS 2.x kernels of conv2d_int8.cu.j2 and the Sm90 ones of conv2d_int8_sm90.cu.j2 share
// one slot layout, so qgemm/conv.py fills the same problem for both):
//
//   m, n, k        implicit GEMM extent: N*P*Q, K, R*S*C (checked against the shape below)
//   ext[0..3]      N, H, W, C: the input, NHWC
//   ext[4]         (R, S) filter size                 pairs are packed as (h << 32) | w
//   ext[5]         (pad_h, pad_w)
//   ext[6]         (stride_h, stride_w)
//   ext[7]         (dilation_h, dilation_w); P and Q follow (PyTorch's formula)
//   ptr[0]         x int8 NHWC [N, H, W, C]
//   ptr[1]         w int8 [K, R, S, C]
//   ptr[2], ptr[3] M, FusedBias: float [K]
//   ptr[4]         border int32 (conv_quant.border_buffer: per-pixel offsets, then a table of
//                  [classes, K]), or null (Z_I = 0 or no padding)
//   ptr[5]         out int8 NHWC [N, P, Q, K]
//   scalar[0..1]   clamp_lo, clamp_hi (integers in [-128, 127])
#pragma once

#include <cstdint>

#include "qgemm/abi.h"

namespace qgemm {
namespace conv {

struct ConvSlots {
  int n, h, w, c, k;  // input N, H, W, C; output channels K
  int r, s;           // filter size
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
  int out_h, out_w;   // P, Q
  int clamp_lo, clamp_hi;

  static int high(int64_t pair) { return int(pair >> 32); }
  static int low(int64_t pair) { return int(uint32_t(pair)); }

  /// PyTorch's output extent; < 1 when the dilated filter does not fit the padded input.
  static int64_t output_extent(int64_t in, int64_t pad, int64_t dilation, int64_t filter, int64_t stride) {
    int64_t span = in + 2 * pad - dilation * (filter - 1) - 1;
    return span < 0 ? 0 : span / stride + 1;
  }

  /// Reads the slots; false when they do not describe a valid convolution (every extent and
  /// every implicit-GEMM dimension in int32, m and k matching the shape, integral clamp bounds).
  bool read(QgemmProblem const& p) {
    int64_t const n64 = p.ext[0], h64 = p.ext[1], w64 = p.ext[2], c64 = p.ext[3], k64 = p.n;
    for (int64_t v : {n64, h64, w64, c64, k64}) {
      if (v < 1 || v > INT32_MAX) return false;
    }
    r = high(p.ext[4]), s = low(p.ext[4]);
    pad_h = high(p.ext[5]), pad_w = low(p.ext[5]);
    stride_h = high(p.ext[6]), stride_w = low(p.ext[6]);
    dilation_h = high(p.ext[7]), dilation_w = low(p.ext[7]);
    if (r < 1 || s < 1 || pad_h < 0 || pad_w < 0 || stride_h < 1 || stride_w < 1 || dilation_h < 1 ||
        dilation_w < 1)
      return false;
    int64_t const p64 = output_extent(h64, pad_h, dilation_h, r, stride_h);
    int64_t const q64 = output_extent(w64, pad_w, dilation_w, s, stride_w);
    if (p64 < 1 || q64 < 1 || p.m != n64 * p64 * q64 || p.k != int64_t(r) * s * c64 || p.m > INT32_MAX ||
        p.k > INT32_MAX)
      return false;
    float const lo = p.scalar[0], hi = p.scalar[1];
    if (!(lo >= -128.f && lo <= hi && hi <= 127.f) || lo != float(int(lo)) || hi != float(int(hi))) return false;
    n = int(n64), h = int(h64), w = int(w64), c = int(c64), k = int(k64);
    out_h = int(p64), out_w = int(q64);
    clamp_lo = int(lo), clamp_hi = int(hi);
    return true;
  }
};

}  // namespace conv
}  // namespace qgemm
