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
// The blocks of one output tile fold in order (gemm_block_dequant.h chains them),
// so the time of a chain link is what it costs the whole tile. Everything that does
// not depend on the previous block - the dequantized contribution of this block,
// with its scale and offset loads - is computed during the epilogue pass, before
// this block's turn; end_epilogue then waits for the turn, reads the partial sum of
// the previous blocks with all loads in flight at once, adds, and stores. The first
// block adds the bias instead of reading, and the last applies the clamp and writes
// the output in its own type (FP32 in place, or FP16 into a separate tensor).
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/semaphore.h"
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
  using Fragment = typename PartialTileIterator::Fragment;

  Params const& params_;
  cutlass::MatrixCoord extent_;
  PartialTileIterator iterator_partial_;  // at the first step, for the final loads and stores
  PartialTileIterator iterator_coords_;   // advanced step by step: names each fragment's position
  OutputTileIterator iterator_output_;
  // This block's dequantized contribution for the whole tile, one fragment per step.
  Fragment contribution_[kIterations];
  int step_;

  // Set by set_k_partition: which K-block this threadblock owns.
  float const* a_scale_;
  float const* a_offset_;
  float const* a_sum_;
  float const* b_scale_;
  float const* b_offset_;
  float const* b_sum_;
  bool first_block_;
  bool last_block_;

  // Set by set_turn: the tile's lock and this block's position in its chain.
  int* lock_;
  int turn_;

 public:
  CUTLASS_DEVICE
  BlockDequantVisitor(Params const& params, SharedStorage&, cutlass::MatrixCoord const& problem_size,
                      int thread_idx, cutlass::MatrixCoord const& threadblock_offset)
      : params_(params),
        extent_(problem_size),
        iterator_partial_(params.partial_params, params.args.partial, problem_size, thread_idx, threadblock_offset),
        iterator_coords_(iterator_partial_),
        iterator_output_(params.output_params, params.args.output, problem_size, thread_idx, threadblock_offset),
        step_(0),
        lock_(nullptr),
        turn_(0) {
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

  /// Fold only once `lock` reads `turn` (null: this launch has one block per tile).
  CUTLASS_DEVICE
  void set_turn(int* lock, int turn) {
    lock_ = lock;
    turn_ = turn;
  }

  CUTLASS_DEVICE void set_batch_index(int) {}
  CUTLASS_DEVICE void begin_epilogue() {}
  CUTLASS_DEVICE void begin_step(int step_idx) { step_ = step_idx; }
  CUTLASS_DEVICE void begin_row(int) {}

  CUTLASS_DEVICE
  void visit(int, int, int, int frag_idx, AccumulatorFragment const& accum) {
    cutlass::MatrixCoord coord = iterator_coords_.thread_start() + ThreadMap::iteration_offset(frag_idx);
    int row = coord.row();
    bool row_ok = row < extent_.row();

    // Row terms: s_A, s_A*sumA, o_A for this block (zero outside the problem).
    float sa = row_ok ? __ldg(a_scale_ + row) : 0.f;
    float sa_suma = row_ok ? sa * __ldg(a_sum_ + row) : 0.f;
    float oa = row_ok ? __ldg(a_offset_ + row) : 0.f;
    float bs = float(params_.args.block_size);

    ComputeFragment value;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElementsPerAccess; ++i) {
      int col = coord.column() + i;
      float v = 0.f;
      if (col < extent_.column()) {
        float sb = __ldg(b_scale_ + col);
        float ob = __ldg(b_offset_ + col);
        float sb_sumb = sb * __ldg(b_sum_ + col);
        v = sa * sb * float(accum[i]) + sa_suma * ob + oa * (sb_sumb + bs * ob);
        if (first_block_ && params_.args.bias) v += __ldg(params_.args.bias + col);
      }
      value[i] = v;
    }
    reinterpret_cast<ComputeFragment*>(&contribution_[step_])[frag_idx] = value;
  }

  CUTLASS_DEVICE void end_row(int) {}
  CUTLASS_DEVICE void end_step(int) { ++iterator_coords_; }

  CUTLASS_DEVICE
  void end_epilogue() {
    if (lock_) {
      cutlass::Semaphore semaphore(lock_, threadIdx.x);
      semaphore.fetch();
      semaphore.wait(turn_);
    }
    if (!first_block_) {
      PartialTileIterator source = iterator_partial_;
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kIterations; ++s) {
        Fragment previous;
        source.load(previous);
        ++source;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < Fragment::kElements; ++i) contribution_[s][i] += previous[i];
      }
    }
    if (last_block_) {
      OutputTileIterator output = iterator_output_;
      cutlass::NumericArrayConverter<ElementOutput, float, Fragment::kElements> convert;
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kIterations; ++s) {
        Fragment clamped;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < Fragment::kElements; ++i) {
          // fminf/fmaxf would turn a NaN (a row whose activations held NaN/Inf) into a bound.
          float v = contribution_[s][i];
          clamped[i] = v != v ? v : fminf(fmaxf(v, params_.args.clamp_min), params_.args.clamp_max);
        }
        output.store(convert(clamped));
        ++output;
      }
    } else {
      PartialTileIterator destination = iterator_partial_;
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kIterations; ++s) {
        destination.store(contribution_[s]);
        ++destination;
      }
    }
  }

};

}  // namespace w8a8
}  // namespace qgemm
