// Epilogue visitor for the W8A8 per-K-block GEMM.
//
// One threadblock computes the int32 product of one K-block i for one output
// tile and folds it into the FP32 partial sum (see gemm_block_dequant.h for the
// ordering). With a = s_A * q_a + o_A and b = s_B * q_b + o_B inside block i:
//
//   sum_k a*b = s_A*s_B*acc + s_A*o_B*sumA + o_A*(s_B*sumB + bs*o_B)
//
// where acc = sum_k q_a*q_b (the tensor-core result), sumA/sumB are the block
// sums of the quantized values and bs the block size. The per-row vectors
// (s_A, o_A, sumA) are stored [blocks, M] and the per-column ones [blocks, N]
// so a block's vectors are contiguous.
//
// The first block adds the bias, every later block reads the partial sum back,
// and the last block applies the clamp and writes the output in its own type
// (FP32 in place, or FP16 into a separate tensor).
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/epilogue/threadblock/predicated_tile_iterator.h"

namespace qgemm {
namespace w8a8 {

template <typename ThreadblockShape_, int ThreadCount, typename PartialTileIterator_, typename ElementOutput_>
class BlockDequantVisitor {
 public:
  using ThreadblockShape = ThreadblockShape_;
  static int const kThreadCount = ThreadCount;

  // Iterators over the FP32 partial sum and the final output share one thread map,
  // so a fragment index names the same (row, column) in both.
  using PartialTileIterator = PartialTileIterator_;
  using ThreadMap = typename PartialTileIterator::ThreadMap;
  using ElementOutput = ElementOutput_;
  using OutputTileIterator = cutlass::epilogue::threadblock::PredicatedTileIterator<ThreadMap, ElementOutput>;

  static int const kIterations = PartialTileIterator::kIterations;
  static int const kElementsPerAccess = PartialTileIterator::kElementsPerAccess;

  using ElementAccumulator = int32_t;
  using AccumulatorFragment = cutlass::Array<ElementAccumulator, kElementsPerAccess>;
  using ComputeFragment = cutlass::Array<float, kElementsPerAccess>;
  using OutputVector = cutlass::Array<ElementOutput, kElementsPerAccess>;

  struct Arguments {
    float const* a_scale;    // [blocks, M]
    float const* a_offset;   // [blocks, M]
    float const* a_sum;      // [blocks, M], sum of the quantized values of the block
    float const* b_scale;    // [blocks, N]
    float const* b_offset;   // [blocks, N]
    float const* b_sum;      // [blocks, N]
    float const* bias;       // [N] or null
    float* partial;          // [M, N] FP32 running sum (may alias output when it is FP32)
    ElementOutput* output;   // [M, N]
    int64_t ld_partial;
    int64_t ld_output;
    int block_size;
    int block_begin;         // global index of the block that slice 0 of this launch computes
    int block_count;         // blocks in the whole K extent
    float clamp_min;
    float clamp_max;
  };

  struct Params {
    Arguments args;
    typename PartialTileIterator::Params partial_params;
    typename OutputTileIterator::Params output_params;

    CUTLASS_HOST_DEVICE Params() {}

    Params(Arguments const& args_)
        : args(args_),
          partial_params(cutlass::layout::RowMajor(int(args_.ld_partial))),
          output_params(cutlass::layout::RowMajor(int(args_.ld_output))) {}
  };

  struct SharedStorage {};

 private:
  Params const& params_;
  cutlass::MatrixCoord extent_;
  PartialTileIterator iterator_source_;
  PartialTileIterator iterator_partial_;
  OutputTileIterator iterator_output_;
  typename PartialTileIterator::Fragment fragment_source_;
  typename PartialTileIterator::Fragment fragment_partial_;
  typename OutputTileIterator::Fragment fragment_output_;

  // Set by set_k_partition: which K-block this threadblock owns.
  float const* a_scale_;
  float const* a_offset_;
  float const* a_sum_;
  float const* b_scale_;
  float const* b_offset_;
  float const* b_sum_;
  bool first_block_;
  bool last_block_;

 public:
  CUTLASS_DEVICE
  BlockDequantVisitor(Params const& params, SharedStorage&, cutlass::MatrixCoord const& problem_size,
                      int thread_idx, cutlass::MatrixCoord const& threadblock_offset)
      : params_(params),
        extent_(problem_size),
        iterator_source_(params.partial_params, params.args.partial, problem_size, thread_idx, threadblock_offset),
        iterator_partial_(params.partial_params, params.args.partial, problem_size, thread_idx, threadblock_offset),
        iterator_output_(params.output_params, params.args.output, problem_size, thread_idx, threadblock_offset) {
    set_k_partition(0, 1);
  }

  /// Slice `k_index` of this launch computes global block block_begin + k_index.
  CUTLASS_DEVICE
  void set_k_partition(int k_index, int /*k_slices*/) {
    int block = params_.args.block_begin + k_index;
    int64_t row_base = int64_t(block) * extent_.row();
    int64_t col_base = int64_t(block) * extent_.column();
    a_scale_ = params_.args.a_scale + row_base;
    a_offset_ = params_.args.a_offset + row_base;
    a_sum_ = params_.args.a_sum + row_base;
    b_scale_ = params_.args.b_scale + col_base;
    b_offset_ = params_.args.b_offset + col_base;
    b_sum_ = params_.args.b_sum + col_base;
    first_block_ = (block == 0);
    last_block_ = (block + 1 == params_.args.block_count);
  }

  CUTLASS_DEVICE void set_batch_index(int) {}
  CUTLASS_DEVICE void begin_epilogue() {}

  CUTLASS_DEVICE
  void begin_step(int) {
    if (!first_block_) {
      iterator_source_.load(fragment_source_);
    }
    ++iterator_source_;
  }

  CUTLASS_DEVICE void begin_row(int) {}

  CUTLASS_DEVICE
  void visit(int, int, int, int frag_idx, AccumulatorFragment const& accum) {
    cutlass::MatrixCoord coord = iterator_partial_.thread_start() + ThreadMap::iteration_offset(frag_idx);
    int row = coord.row();
    bool row_ok = row < extent_.row();

    // Row terms: s_A, s_A*sumA, o_A for this block (zero outside the problem).
    float sa = row_ok ? __ldg(a_scale_ + row) : 0.f;
    float sa_suma = row_ok ? sa * __ldg(a_sum_ + row) : 0.f;
    float oa = row_ok ? __ldg(a_offset_ + row) : 0.f;
    float bs = float(params_.args.block_size);

    ComputeFragment value;
    ComputeFragment const& source = reinterpret_cast<ComputeFragment const*>(&fragment_source_)[frag_idx];

    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElementsPerAccess; ++i) {
      int col = coord.column() + i;
      float v = 0.f;
      if (col < extent_.column()) {
        float sb = __ldg(b_scale_ + col);
        float ob = __ldg(b_offset_ + col);
        float sb_sumb = sb * __ldg(b_sum_ + col);
        v = sa * sb * float(accum[i]) + sa_suma * ob + oa * (sb_sumb + bs * ob);
        if (first_block_) {
          if (params_.args.bias) v += __ldg(params_.args.bias + col);
        } else {
          v += source[i];
        }
      }
      if (last_block_) {
        v = fminf(fmaxf(v, params_.args.clamp_min), params_.args.clamp_max);
      }
      value[i] = v;
    }

    if (last_block_) {
      cutlass::NumericArrayConverter<ElementOutput, float, kElementsPerAccess> convert;
      reinterpret_cast<OutputVector*>(&fragment_output_)[frag_idx] = convert(value);
    } else {
      reinterpret_cast<ComputeFragment*>(&fragment_partial_)[frag_idx] = value;
    }
  }

  CUTLASS_DEVICE void end_row(int) {}

  CUTLASS_DEVICE
  void end_step(int) {
    if (last_block_) {
      iterator_output_.store(fragment_output_);
    } else {
      iterator_partial_.store(fragment_partial_);
    }
    ++iterator_output_;
    ++iterator_partial_;
  }

  CUTLASS_DEVICE void end_epilogue() {}
};

}  // namespace w8a8
}  // namespace qgemm
