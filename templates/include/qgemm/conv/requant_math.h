// The per-element arithmetic both int8 conv epilogues share (requant_visitor.h for the CUTLASS
// 2.x kernels, sm90_requant.h for the Sm90 ones): the border term of an output (conv_quant.border_buffer)
// and the float32 requantization of qgemm/conv_quant.py `requantize`, in its order.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/fast_math.h"

namespace qgemm {
namespace conv {

/// cutlass::FastDivmod's quotient and remainder without its branch: FastDivmod evaluates the
/// multiply only when the divisor is not 1, which the compiler keeps as a branch per call and then
/// cannot share the work between equal dividends. Here the divisor-1 case is a select.
CUTLASS_DEVICE void divmod(cutlass::FastDivmod const& d, int& quotient, int& remainder, int dividend) {
  int product = int(__umulhi(unsigned(dividend), d.multiplier) >> d.shift_right);
  quotient = d.divisor == 1 ? dividend : product;
  remainder = dividend - quotient * d.divisor;
}

/// Where the border row of the output at GEMM row `row` starts in the buffer (ptr[4]:
/// conv_quant.border_buffer: per output pixel an offset into the table behind, -1 where the pixel
/// reads no padding), 0 for those (any in-bounds row: the caller discards it), and whether it reads.
/// Branch-free: a function of the row only, which the compiler computes once per distinct row.
CUTLASS_DEVICE int border_row(int32_t const* buffer, cutlass::FastDivmod const& pixels, int row, bool& reads) {
  int image, pixel;
  divmod(pixels, image, pixel, row);
  int offset = __ldg(buffer + pixel);
  reads = offset >= 0;
  return offset < 0 ? 0 : offset;
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
