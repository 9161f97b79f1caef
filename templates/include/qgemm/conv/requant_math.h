// The per-element arithmetic both int8 conv epilogues share (requant_visitor.h for the CUTLASS
// 2.x kernels, sm90_requant.h for the Sm90 ones): which border term an output takes, and the
// float32 requantization of qgemm/conv_quant.py `requantize`, in its order.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/fast_math.h"

namespace qgemm {
namespace conv {

/// The convolution's geometry as the border classes need it.
struct BorderGeometry {
  int h, w;                    // input extent
  int r, s;                    // filter extent
  int pad_h, pad_w;
  int stride_h, stride_w;
  int dilation_h, dilation_w;
};

/// Outputs grouped by the padded taps they read, so the border term is a small table
/// [row classes, column classes, K] (conv_quant.border_table) instead of one row per output
/// pixel: it stays in L1, and the epilogue's reads of it do not wait on L2 once per subtile.
///
/// Along each dimension, the outputs whose first tap lies before the image form a prefix (`top`
/// rows) and those whose last tap lies beyond it a suffix (`bottom` rows). Class 0 is every other
/// row (it reads no padding along that dimension); the prefix rows get classes 1..top, the suffix
/// rows top+1..top+bottom counted from the last row. A row in both keeps its prefix class, whose
/// table entry the host computes from that very row. index(p, q) is -1 where neither dimension
/// reads padding: those outputs read nothing.
struct BorderClasses {
  int out_h = 1, out_w = 1;  // P, Q
  int top = 0, bottom = 0, left = 0, right = 0;

  /// Outputs whose first tap is before the image: p * stride - pad < 0.
  static int edge_before(int pad, int stride, int out) {
    int count = (pad + stride - 1) / stride;
    return count < out ? count : out;
  }

  /// Outputs whose last tap is beyond the image: p * stride - pad + (filter - 1) * dilation >= in.
  static int edge_after(int in, int filter, int pad, int stride, int dilation, int out) {
    int span = in + pad - (filter - 1) * dilation;  // p * stride >= span
    int first = span <= 0 ? 0 : (span + stride - 1) / stride;
    first = first < out ? first : out;
    return out - first;
  }

  static BorderClasses of(BorderGeometry const& g, int out_h, int out_w) {
    BorderClasses c;
    c.out_h = out_h;
    c.out_w = out_w;
    c.top = edge_before(g.pad_h, g.stride_h, out_h);
    c.bottom = edge_after(g.h, g.r, g.pad_h, g.stride_h, g.dilation_h, out_h);
    c.left = edge_before(g.pad_w, g.stride_w, out_w);
    c.right = edge_after(g.w, g.s, g.pad_w, g.stride_w, g.dilation_w, out_w);
    return c;
  }

  CUTLASS_HOST_DEVICE int row_class(int p) const {
    return p < top ? 1 + p : (p >= out_h - bottom ? 1 + top + (out_h - 1 - p) : 0);
  }
  CUTLASS_HOST_DEVICE int column_class(int q) const {
    return q < left ? 1 + q : (q >= out_w - right ? 1 + left + (out_w - 1 - q) : 0);
  }
  /// The row of (p, q) in the table viewed as [classes, K], or -1 where (p, q) reads no padding.
  CUTLASS_HOST_DEVICE int index(int p, int q) const {
    int row = row_class(p), column = column_class(q);
    return (row | column) ? row * (1 + left + right) + column : -1;
  }
};

/// cutlass::FastDivmod's quotient and remainder without its branch: FastDivmod evaluates the
/// multiply only when the divisor is not 1, which the compiler keeps as a branch per call and then
/// cannot share the work between equal dividends. Here the divisor-1 case is a select.
CUTLASS_DEVICE void divmod(cutlass::FastDivmod const& d, int& quotient, int& remainder, int dividend) {
  int product = int(__umulhi(unsigned(dividend), d.multiplier) >> d.shift_right);
  quotient = d.divisor == 1 ? dividend : product;
  remainder = dividend - quotient * d.divisor;
}

/// clamp(round_half_even(M * (t + FusedBias)), lo, hi) for t = float(acc + border).
CUTLASS_DEVICE int8_t requantize(float shifted, float multiplier, float fused_bias, int clamp_lo, int clamp_hi) {
  // Explicit round-to-nearest intrinsics: no contraction into an FMA, the order of requantize.
  float v = __fmul_rn(multiplier, __fadd_rn(shifted, fused_bias));
  int rounded = __float2int_rn(v);  // half to even, as torch.round; saturates beyond int range
  return int8_t(min(max(rounded, clamp_lo), clamp_hi));
}

}  // namespace conv
}  // namespace qgemm
