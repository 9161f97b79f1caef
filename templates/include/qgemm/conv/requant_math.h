// The per-element arithmetic both int8 conv epilogues share (requant_visitor.h for the CUTLASS
// 2.x kernels, sm90_requant.h for the Sm90 ones): which outputs take the border term, and the
// float32 requantization of qgemm/conv_quant.py `requantize`, in its order.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"

namespace qgemm {
namespace conv {

/// The convolution's geometry as the border test needs it.
struct BorderGeometry {
  int h, w;                    // input extent
  int r, s;                    // filter extent
  int pad_h, pad_w;
  int stride_h, stride_w;
  int dilation_h, dilation_w;

  // Output (p, q) reads a padded tap iff its first tap lies before the image or its last tap
  // beyond it, in either dimension (taps of one output are equally spaced by the dilation).
  CUTLASS_HOST_DEVICE
  bool reaches_padding(int p, int q) const {
    int top = p * stride_h - pad_h;
    int left = q * stride_w - pad_w;
    return top < 0 || top + (r - 1) * dilation_h >= h || left < 0 || left + (s - 1) * dilation_w >= w;
  }
};

/// clamp(round_half_even(M * (t + FusedBias)), lo, hi) for t = float(acc + border).
CUTLASS_DEVICE int8_t requantize(float shifted, float multiplier, float fused_bias, int clamp_lo, int clamp_hi) {
  // Explicit round-to-nearest intrinsics: no contraction into an FMA, the order of requantize.
  float v = __fmul_rn(multiplier, __fadd_rn(shifted, fused_bias));
  int rounded = __float2int_rn(v);  // half to even, as torch.round; saturates beyond int range
  return int8_t(min(max(rounded, clamp_lo), clamp_hi));
}

}  // namespace conv
}  // namespace qgemm
