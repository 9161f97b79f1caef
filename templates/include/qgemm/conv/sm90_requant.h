// The int8 convolution's requantization as a CUTLASS 3.x epilogue visitor tree (Sm90), the
// counterpart of requant_visitor.h for the CUTLASS 2.x kernels. Per output element (row m =
// n*P*Q + p*Q + q, column k), exactly the float32 operations of qgemm/conv_quant.py `requantize`:
//
//   t   = float(acc + border[class(p, q), k])                    (border only where (p, q) reads padding)
//   v   = M[k] * (t + FusedBias[k])                              (round to nearest each step)
//   out = clamp(round_half_even(v), lo, hi)
//
// as the tree
//
//   Requantize(t, FusedBias, M)        Sm90Compute with the clamp bounds as its arguments
//     Sm90BorderAccumulator            t: the accumulator plus the border term, as float
//     Sm90RowBroadcast                 FusedBias[k]
//     Sm90RowBroadcast                 M[k]
//
// The border term (conv_quant.border_buffer: per class of pixels reading the same padded taps, and
// each pixel's class) makes padded taps count as the real value 0 when the input zero point Z_I
// is not 0: TMA's im2col loads fill them with the integer 0.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/fast_math.h"
#include "cute/tensor.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"

#include "qgemm/conv/requant_math.h"

namespace qgemm {
namespace conv {

/// Leaf node: float(acc + border term), the term kept only for pixels that read the padding (and
/// nothing read when the buffer is null: Z_I = 0 or no padding).
struct Sm90BorderAccumulator {
  struct SharedStorage {};

  struct Arguments {
    int32_t const* border = nullptr;  // conv_quant.border_buffer, or null
    int out_h = 1, out_w = 1;         // P, Q
  };

  struct Params {
    int32_t const* border;
    cutlass::FastDivmod pixels;  // GEMM row -> (image, p*Q + q)
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return {args.border, cutlass::FastDivmod(args.out_h * args.out_w)};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.out_h > 0 && args.out_w > 0;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90BorderAccumulator() {}

  CUTLASS_HOST_DEVICE Sm90BorderAccumulator(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class CTensor, class RTensor>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE
    ConsumerStoreCallbacks(CTensor tC_cD, RTensor tC_rBorder, int rows, int columns, Params const* params_ptr)
        : tC_cD(tC_cD), tC_rBorder(tC_rBorder), rows(rows), columns(columns), params_ptr(params_ptr) {}

    CTensor tC_cD;       // (CPY,CPY_M,CPY_N,EPI_M,EPI_N): each element's absolute (m, k, l)
    RTensor tC_rBorder;  // (CPY,CPY_M,CPY_N): the border terms of the current subtile
    int rows, columns;   // M = N*P*Q and K
    Params const* params_ptr;

    // Before each subtile: its border terms into registers. Branch-free apart from the table's
    // presence: an element's row offset (border_row) depends on its row only, so the compiler
    // computes it once per distinct row (a thread's 16 elements of a 64x32 subtile span 2 rows),
    // and every element loads its entry (an L1 hit), keeping it only where its pixel reads
    // padding. With the class arithmetic per element and branches, a consumer warp, alone on its
    // scheduler, spent ~45 instructions per element here: 3x the kernel's time without a border (ncu).
    CUTLASS_DEVICE void begin_loop(int epi_m, int epi_n) {
      using namespace cute;
      int32_t const* border = params_ptr->border;
      if (border == nullptr) return;
      cutlass::FastDivmod const pixels = params_ptr->pixels;
      Tensor tC_cD_mn = tC_cD(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tC_rBorder); ++i) {
        int row = get<0>(tC_cD_mn(i));
        int column = get<1>(tC_cD_mn(i));
        bool reads;
        int offset = border_row(border, pixels, row, reads);
        int32_t value = __ldg(border + offset + (column < columns ? column : columns - 1));
        tC_rBorder(i) = (reads & (row < rows) & (column < columns)) ? value : 0;
      }
    }

    template <typename ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const& frg_acc,
                                                             int epi_v, int, int) {
      cutlass::Array<float, FragmentSize> out;
      bool const corrected = params_ptr->border != nullptr;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        // The border term is an integer: it joins the exact sum before the one conversion.
        int32_t total = frg_acc[i] + (corrected ? tC_rBorder(epi_v * FragmentSize + i) : 0);
        out[i] = __int2float_rn(total);
      }
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto [M, N, K, L] = args.problem_shape_mnkl;  // the conv kernel's linearized M = N*P*Q
    Tensor coordinates = make_identity_tensor(make_shape(M, N, L));
    Tensor tC_cD = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        coordinates, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy, args.thread_idx);
    Tensor tC_rBorder = make_tensor<int32_t>(take<0, 3>(shape(tC_cD)));
    return ConsumerStoreCallbacks<decltype(tC_cD), decltype(tC_rBorder)>(tC_cD, tC_rBorder, int(M), int(N),
                                                                         params_ptr);
  }
};

/// Clamp bounds of the requantization (the activation folded in): integers in [-128, 127].
struct RequantizeArguments {
  int clamp_lo = -128;
  int clamp_hi = 127;
};

/// Sm90Compute functor: (t, FusedBias, M) -> clamp(round_half_even(M * (t + FusedBias))) as int8.
template <class T>
struct Requantize {
  using Arguments = RequantizeArguments;  // Sm90Compute reads the arguments' type from Requantize<float>
};

template <int N>
struct Requantize<cutlass::Array<float, N>> {
  using Arguments = RequantizeArguments;

  CUTLASS_DEVICE cutlass::Array<int8_t, N> operator()(cutlass::Array<float, N> const& shifted,
                                                      cutlass::Array<float, N> const& fused_bias,
                                                      cutlass::Array<float, N> const& multiplier,
                                                      Arguments const& args) const {
    cutlass::Array<int8_t, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      out[i] = qgemm::conv::requantize(shifted[i], multiplier[i], fused_bias[i], args.clamp_lo, args.clamp_hi);
    }
    return out;
  }
};

/// Per-output-channel float vector (M or FusedBias) broadcast down the rows.
template <class CtaTileShapeMNK>
using Sm90ChannelVector = cutlass::epilogue::fusion::Sm90RowBroadcast<
    0, CtaTileShapeMNK, float, float, cute::Stride<cute::_0, cute::_1, int64_t>>;

/// The whole epilogue: arguments {border, fused_bias, multiplier, clamp bounds}.
template <class CtaTileShapeMNK>
using Sm90Requantize = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<Requantize, int8_t, float, cutlass::FloatRoundStyle::round_to_nearest>,
    Sm90BorderAccumulator,
    Sm90ChannelVector<CtaTileShapeMNK>,   // FusedBias
    Sm90ChannelVector<CtaTileShapeMNK>>;  // M

}  // namespace conv
}  // namespace qgemm
