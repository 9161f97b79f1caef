// Kernel for the W8A8 per-K-block GEMM: int8 x int8 -> int32 tensor-core
// mainloop over exactly one quantization block per threadblock, then the
// BlockDequantVisitor folds that block's product into the FP32 output.
//
// The grid is (tiles_m, tiles_n, slices): slice z computes block
// block_begin + z. Blocks of one output tile must fold in order and without
// atomics, so they are chained by CUTLASS's serial split-K semaphore: slice z
// waits until the tile's lock reads z, folds, and hands the lock to z + 1 (the
// last slice resets it to 0, leaving the workspace ready for the next launch).
// The mainloops of all slices still run concurrently; only the epilogues queue.
//
// With block_begin = i and one slice, the same kernel is the naive
// one-launch-per-block form (no semaphore needed: launches are stream-ordered).
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/matrix_coord.h"
#include "cutlass/semaphore.h"

namespace qgemm {
namespace w8a8 {

template <typename Mma_, typename Epilogue_, typename ThreadblockSwizzle_>
struct GemmBlockDequant {
  using Mma = Mma_;
  using Epilogue = Epilogue_;
  using Visitor = typename Epilogue::Visitor;
  using ThreadblockSwizzle = ThreadblockSwizzle_;
  using ElementA = typename Mma::IteratorA::Element;
  using ElementB = typename Mma::IteratorB::Element;
  using WarpCount = typename Mma::WarpCount;
  static int const kThreadCount = 32 * WarpCount::kCount;
  static int const kAlignmentA = Mma::IteratorA::AccessType::kElements;
  static int const kAlignmentB = Mma::IteratorB::AccessType::kElements;
  static int const kAlignmentC = Visitor::kElementsPerAccess;

  struct Arguments {
    cutlass::gemm::GemmCoord problem_size;  // full M, N, K
    int slices;                             // blocks this launch computes (grid z)
    ElementA const* ptr_A;                  // [M, K] row-major
    int64_t lda;
    ElementB const* ptr_B;                  // [N, K] row-major, i.e. K x N column-major
    int64_t ldb;
    typename Visitor::Arguments visitor;
  };

  struct Params {
    cutlass::gemm::GemmCoord problem_size;
    cutlass::gemm::GemmCoord grid_tiled_shape;
    int swizzle_log_tile;
    typename Mma::IteratorA::Params params_A;
    typename Mma::IteratorB::Params params_B;
    ElementA const* ptr_A;
    ElementB const* ptr_B;
    int block_size;
    int block_begin;
    int* semaphore;
    typename Visitor::Params visitor;

    CUTLASS_HOST_DEVICE Params() {}

    Params(Arguments const& args, int* workspace)
        : problem_size(args.problem_size),
          params_A(typename Mma::IteratorA::Layout(args.lda)),
          params_B(typename Mma::IteratorB::Layout(args.ldb)),
          ptr_A(args.ptr_A),
          ptr_B(args.ptr_B),
          block_size(args.visitor.block_size),
          block_begin(args.visitor.block_begin),
          semaphore(workspace),
          visitor(args.visitor) {
      ThreadblockSwizzle swizzle;
      grid_tiled_shape = swizzle.get_tiled_shape(
          args.problem_size, {Mma::Shape::kM, Mma::Shape::kN, Mma::Shape::kK}, args.slices);
      swizzle_log_tile = swizzle.get_log_tile(grid_tiled_shape);
    }
  };

  union SharedStorage {
    typename Mma::SharedStorage main_loop;
    struct {
      typename Epilogue::SharedStorage epilogue;
      typename Visitor::SharedStorage visitor;
    } epilogue;
  };

  static dim3 grid_shape(Params const& params) {
    return ThreadblockSwizzle().get_grid_shape(params.grid_tiled_shape);
  }

  /// Bytes of zero-filled semaphore workspace: one lock per output tile when blocks chain.
  static size_t workspace_bytes(cutlass::gemm::GemmCoord problem_size, int slices) {
    if (slices <= 1) return 0;
    ThreadblockSwizzle swizzle;
    auto tiled = swizzle.get_tiled_shape(problem_size, {Mma::Shape::kM, Mma::Shape::kN, Mma::Shape::kK}, slices);
    return sizeof(int) * size_t(tiled.m()) * size_t(tiled.n());
  }

  static cutlass::Status can_implement(Arguments const& args) {
    auto const& p = args.problem_size;
    int bs = args.visitor.block_size;
    if (p.m() <= 0 || p.n() <= 0 || p.k() <= 0 || bs <= 0) return cutlass::Status::kErrorInvalidProblem;
    if (bs % Mma::Shape::kK != 0 || p.k() % bs != 0) return cutlass::Status::kErrorInvalidProblem;
    if (args.visitor.block_begin < 0 || args.slices <= 0 ||
        args.visitor.block_begin + args.slices > args.visitor.block_count ||
        int64_t(args.visitor.block_count) * bs != p.k())
      return cutlass::Status::kErrorInvalidProblem;
    if (p.k() % kAlignmentA || p.k() % kAlignmentB || p.n() % kAlignmentC)
      return cutlass::Status::kErrorMisalignedOperand;
    if (args.lda % kAlignmentA || args.ldb % kAlignmentB || args.visitor.ld_partial % kAlignmentC ||
        args.visitor.ld_output % kAlignmentC)
      return cutlass::Status::kErrorMisalignedOperand;
    if (args.slices > 65535) return cutlass::Status::kErrorInvalidProblem;
    return cutlass::Status::kSuccess;
  }

  CUTLASS_DEVICE
  void operator()(Params const& params, SharedStorage& shared_storage) {
    ThreadblockSwizzle swizzle;
    cutlass::gemm::GemmCoord tile = swizzle.get_tile_offset(params.swizzle_log_tile);
    if (params.grid_tiled_shape.m() <= tile.m() || params.grid_tiled_shape.n() <= tile.n()) {
      return;
    }

    // This threadblock's K range is exactly one quantization block.
    int offset_k = (params.block_begin + tile.k()) * params.block_size;
    int end_k = offset_k + params.block_size;

    int thread_idx = threadIdx.x;
    int warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
    int lane_idx = threadIdx.x % 32;

    typename Mma::IteratorA iterator_A(params.params_A, const_cast<ElementA*>(params.ptr_A),
                                       {params.problem_size.m(), end_k}, thread_idx,
                                       cutlass::MatrixCoord{tile.m() * Mma::Shape::kM, offset_k});
    typename Mma::IteratorB iterator_B(params.params_B, const_cast<ElementB*>(params.ptr_B),
                                       {end_k, params.problem_size.n()}, thread_idx,
                                       cutlass::MatrixCoord{offset_k, tile.n() * Mma::Shape::kN});

    Mma mma(shared_storage.main_loop, thread_idx, warp_idx, lane_idx);
    typename Mma::FragmentC accumulators;
    accumulators.clear();
    int k_iterations = params.block_size / Mma::Shape::kK;
    mma(k_iterations, accumulators, iterator_A, iterator_B, accumulators);

    // Order the folds of this tile's blocks: the visitor computes this block's
    // contribution first and waits for the tile's lock to read tile.k() only
    // before reading the partial sum of the previous blocks.
    int slices = params.grid_tiled_shape.k();
    int tile_index = tile.m() + tile.n() * params.grid_tiled_shape.m();
    int* lock = params.semaphore + tile_index;

    cutlass::MatrixCoord threadblock_offset(tile.m() * Mma::Shape::kM, tile.n() * Mma::Shape::kN);
    Visitor visitor(params.visitor, shared_storage.epilogue.visitor, params.problem_size.mn(), thread_idx,
                    threadblock_offset);
    visitor.set_k_partition(tile.k(), slices);
    visitor.set_turn(slices > 1 ? lock : nullptr, tile.k());

    Epilogue epilogue(shared_storage.epilogue.epilogue, thread_idx, warp_idx, lane_idx);
    epilogue(visitor, accumulators);

    if (slices > 1) {
      // Make this block's partial sum visible before passing the lock on.
      __threadfence();
      cutlass::Semaphore semaphore(lock, thread_idx);
      semaphore.release(tile.k() + 1 == slices ? 0 : tile.k() + 1);
    }
  }
};

}  // namespace w8a8
}  // namespace qgemm
