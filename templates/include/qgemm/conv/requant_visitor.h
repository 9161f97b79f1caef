// Epilogue visitor of the int8 convolution: int32 accumulators -> requantized int8 NHWC.
//
// Per output element (row = GEMM row n*P*Q + p*Q + q, column = output channel k), exactly the
// float32 operations of qgemm/conv_quant.py `requantize`, in the same order:
//
//   v   = M[k] * (float(acc + border[class(p, q), k]) + FusedBias[k])   (round to nearest each step)
//   out = clamp(round_half_even(v), lo, hi)                         (activation folded into lo, hi)
//
// so the output is bit-exact with `requantize` applied to the exact integer accumulator. The
// border term corrects the outputs whose taps reach into the zero padding when the input zero
// point Z_I is not 0 (conv_quant.border_buffer: one row per class of pixels that read the same
// padded taps, small enough to stay in L1, and each pixel's class); it is an integer and joins acc
// before the one conversion to float. Pixels that read no padding add nothing.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/fast_math.h"
#include "cutlass/matrix_coord.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/epilogue/threadblock/predicated_tile_iterator.h"

#include "qgemm/conv/requant_math.h"

namespace qgemm {
namespace conv {

template <typename ThreadMap_>
class RequantVisitor {
 public:
  // The thread map of the existing epilogue's output iterator: a fragment index names the same
  // (row, column) in the accumulators the epilogue hands over and in the int8 output.
  using ThreadMap = ThreadMap_;
  using OutputTileIterator = cutlass::epilogue::threadblock::PredicatedTileIterator<ThreadMap, int8_t>;

  static int const kIterations = OutputTileIterator::kIterations;
  static int const kElementsPerAccess = OutputTileIterator::kElementsPerAccess;
  static int const kColumnAccesses = ThreadMap::Iterations::kColumn;

  using ElementAccumulator = int32_t;
  using AccumulatorFragment = cutlass::Array<ElementAccumulator, kElementsPerAccess>;
  using BorderAccess = cutlass::AlignedArray<int32_t, kElementsPerAccess>;
  using OutputAccess = cutlass::Array<int8_t, kElementsPerAccess>;

  struct Arguments {
    float const* multiplier;   // M [K]
    float const* fused_bias;   // FusedBias [K]
    int32_t const* border;     // conv_quant.border_buffer, or null when no output reaches the padding with Z_I != 0
    int8_t* output;            // [N*P*Q, K] row-major, i.e. NHWC [N, P, Q, K]
    int clamp_lo;
    int clamp_hi;
  };

  struct Params {
    Arguments args;
    typename OutputTileIterator::Params output_params;
    cutlass::FastDivmod pixels;  // GEMM row -> (image, p*Q + q)

    CUTLASS_HOST_DEVICE Params() {}

    Params(Arguments const& args_, cutlass::conv::Conv2dProblemSize const& problem_)
        : args(args_),
          output_params(cutlass::layout::RowMajor(problem_.K)),
          pixels(problem_.P * problem_.Q) {}
  };

  struct SharedStorage {};

 private:
  Params const& params_;
  cutlass::MatrixCoord extent_;
  OutputTileIterator iterator_output_;  // advanced step by step; its thread_start() locates each fragment
  typename OutputTileIterator::Fragment output_fragment_;
  // This thread's columns are the same in every step: their M and FusedBias stay in registers.
  float multiplier_[kColumnAccesses][kElementsPerAccess];
  float fused_bias_[kColumnAccesses][kElementsPerAccess];

 public:
  CUTLASS_DEVICE
  RequantVisitor(Params const& params, SharedStorage&, cutlass::MatrixCoord const& problem_size, int thread_idx,
                 cutlass::MatrixCoord const& threadblock_offset)
      : params_(params),
        extent_(problem_size),
        iterator_output_(params.output_params, params.args.output, problem_size, thread_idx, threadblock_offset) {
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kColumnAccesses; ++c) {
      int column = iterator_output_.thread_start_column() + c * ThreadMap::Delta::kColumn;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kElementsPerAccess; ++i) {
        bool valid = column + i < extent_.column();
        multiplier_[c][i] = valid ? __ldg(params.args.multiplier + column + i) : 0.f;
        fused_bias_[c][i] = valid ? __ldg(params.args.fused_bias + column + i) : 0.f;
      }
    }
  }

  CUTLASS_DEVICE void set_k_partition(int, int) {}
  CUTLASS_DEVICE void set_batch_index(int) {}
  CUTLASS_DEVICE void begin_epilogue() {}
  CUTLASS_DEVICE void begin_step(int) {}
  CUTLASS_DEVICE void begin_row(int) {}

  CUTLASS_DEVICE
  void visit(int, int, int, int frag_idx, AccumulatorFragment const& accum) {
    cutlass::MatrixCoord coord = iterator_output_.thread_start() + ThreadMap::iteration_offset(frag_idx);
    int c = frag_idx % kColumnAccesses;  // the thread map's column index runs fastest

    AccumulatorFragment total = accum;
    if (params_.args.border) {
      // Branch-free but for the buffer's presence (as in sm90_requant.h): the access loads its
      // table entries (L1-resident) unconditionally, from offset 0 where the pixel reads no
      // padding, and adds them only where it does.
      bool reads;
      int offset = border_row(params_.args.border, params_.pixels, coord.row(), reads);
      int columns = extent_.column();
      int column = coord.column() < columns ? coord.column() : columns - kElementsPerAccess;
      BorderAccess border = *reinterpret_cast<BorderAccess const*>(params_.args.border + offset + column);
      reads = reads & (coord.row() < extent_.row()) & (coord.column() < columns);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kElementsPerAccess; ++i) total[i] += reads ? border[i] : 0;
    }

    OutputAccess out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElementsPerAccess; ++i) {
      out[i] = requantize(__int2float_rn(total[i]), multiplier_[c][i], fused_bias_[c][i], params_.args.clamp_lo,
                          params_.args.clamp_hi);
    }
    reinterpret_cast<OutputAccess*>(&output_fragment_)[frag_idx] = out;
  }

  CUTLASS_DEVICE void end_row(int) {}

  CUTLASS_DEVICE
  void end_step(int) {
    iterator_output_.store(output_fragment_);
    ++iterator_output_;
  }

  CUTLASS_DEVICE void end_epilogue() {}
};

}  // namespace conv
}  // namespace qgemm
