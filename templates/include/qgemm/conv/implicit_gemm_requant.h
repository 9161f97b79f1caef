// Kernel of the int8 convolution: CUTLASS's implicit-GEMM conv2d forward mainloop (from
// DefaultConv2dFprop) with an EpilogueWithVisitor whose visitor requantizes to int8
// (requant_visitor.h).
//
// It follows cutlass/conv/kernel/implicit_gemm_convolution.h for Fprop step by step (tile
// offsets, iterator construction, k-iteration counts, can_implement's checks) and differs in
// two places: the epilogue takes a visitor instead of an output functor and source/destination
// iterators, and there is no split-K (the requantization needs the whole sum: one threadblock
// owns each output tile's K range).
#pragma once

#include <cstdint>
#include <limits>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/matrix_coord.h"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/conv2d_problem_size.h"

namespace qgemm {
namespace conv {

template <typename Mma_, typename Epilogue_, typename ThreadblockSwizzle_>
struct ImplicitGemmRequant {
  using Mma = Mma_;
  using Epilogue = Epilogue_;
  using Visitor = typename Epilogue::Visitor;
  using ThreadblockSwizzle = ThreadblockSwizzle_;
  using ThreadblockShape = typename Mma::Shape;

  using ElementA = typename Mma::IteratorA::Element;
  using LayoutA = typename Mma::IteratorA::Layout;
  using ElementB = typename Mma::IteratorB::Element;
  using LayoutB = typename Mma::IteratorB::Layout;

  static cutlass::conv::Operator const kConvolutionalOperator = cutlass::conv::Operator::kFprop;
  static cutlass::conv::IteratorAlgorithm const kIteratorAlgorithm = Mma::IteratorA::kIteratorAlgorithm;
  static cutlass::conv::GroupMode const kGroupMode = cutlass::conv::GroupMode::kNone;

  using WarpCount = typename Mma::WarpCount;
  static int const kThreadCount = 32 * WarpCount::kCount;
  static int const kAlignmentOutput = Visitor::kElementsPerAccess;

  struct Arguments {
    cutlass::conv::Conv2dProblemSize problem_size;  // split_k_slices 1, groups 1, cross-correlation
    ElementA const* ptr_A;                          // activations NHWC [N, H, W, C]
    ElementB const* ptr_B;                          // filters [K, R, S, C]
    typename Visitor::Arguments visitor;
  };

  struct Params {
    cutlass::conv::Conv2dProblemSize problem_size;
    cutlass::gemm::GemmCoord grid_tiled_shape;
    cutlass::gemm::GemmCoord implicit_gemm_problem_size;
    int swizzle_log_tile;
    int gemm_k_iterations;
    int gemm_k_iterations_per_channel;
    typename Mma::IteratorA::Params iterator_A;
    ElementA const* ptr_A;
    typename Mma::IteratorB::Params iterator_B;
    ElementB const* ptr_B;
    typename Visitor::Params visitor;

    CUTLASS_HOST_DEVICE Params() : swizzle_log_tile(0), gemm_k_iterations(0) {}

    Params(Arguments const& args)
        : problem_size(args.problem_size),
          implicit_gemm_problem_size(cutlass::conv::implicit_gemm_problem_size(kConvolutionalOperator,
                                                                               args.problem_size)),
          iterator_A(Mma::IteratorA::getParams(args.problem_size, tensor_a_layout(args.problem_size))),
          ptr_A(args.ptr_A),
          iterator_B(args.problem_size, tensor_b_layout(args.problem_size)),
          ptr_B(args.ptr_B),
          visitor(args.visitor, args.problem_size) {
      gemm_k_iterations = cutlass::conv::implicit_gemm_k_iterations(
          kConvolutionalOperator, ThreadblockShape::kK, args.problem_size, kIteratorAlgorithm, kGroupMode,
          ThreadblockShape::kN);
      gemm_k_iterations_per_channel = cutlass::conv::implicit_gemm_k_iterations_per_channel(
          kConvolutionalOperator, args.problem_size, kIteratorAlgorithm);
      ThreadblockSwizzle swizzle;
      grid_tiled_shape = swizzle.get_tiled_shape(
          implicit_gemm_problem_size, {ThreadblockShape::kM, ThreadblockShape::kN, ThreadblockShape::kK},
          args.problem_size.split_k_slices);
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

  // Packed NHWC activations and KRSC filters.
  static LayoutA tensor_a_layout(cutlass::conv::Conv2dProblemSize const& p) {
    return LayoutA::packed(p.activation_extent());
  }
  static LayoutB tensor_b_layout(cutlass::conv::Conv2dProblemSize const& p) {
    return LayoutB::packed(p.filter_extent());
  }

  static dim3 grid_shape(Params const& params) {
    return ThreadblockSwizzle().get_grid_shape(params.grid_tiled_shape);
  }

  /// cutlass::conv::device::ImplicitGemmConvolution::can_implement for Fprop, without split-K
  /// or groups, plus the visitor's output alignment.
  static cutlass::Status can_implement(Arguments const& args) {
    auto const& p = args.problem_size;
    if (p.split_k_slices != 1 || p.groups != 1) return cutlass::Status::kErrorInvalidProblem;
    cutlass::Status status = Mma::IteratorA::can_implement(p);
    if (status != cutlass::Status::kSuccess) return status;
    status = Mma::IteratorB::can_implement(p);
    if (status != cutlass::Status::kSuccess) return status;
    // The iterators address with 32-bit offsets.
    if (p.activation_size() >= (int64_t(1) << 31) || p.filter_size() >= (int64_t(1) << 31) ||
        p.output_size() >= (int64_t(1) << 31))
      return cutlass::Status::kErrorInvalidProblem;
    if (p.K % kAlignmentOutput) return cutlass::Status::kErrorMisalignedOperand;
    ThreadblockSwizzle swizzle;
    dim3 grid = swizzle.get_grid_shape(swizzle.get_tiled_shape(
        kConvolutionalOperator, p, {ThreadblockShape::kM, ThreadblockShape::kN, ThreadblockShape::kK}, 1));
    if (grid.y > std::numeric_limits<uint16_t>::max() || grid.z > std::numeric_limits<uint16_t>::max())
      return cutlass::Status::kErrorInvalidProblem;
    return cutlass::Status::kSuccess;
  }

  CUTLASS_DEVICE
  void operator()(Params const& params, SharedStorage& shared_storage) {
    ThreadblockSwizzle swizzle;
    cutlass::gemm::GemmCoord tile = swizzle.get_tile_offset(params.swizzle_log_tile);
    if (params.grid_tiled_shape.m() <= tile.m() || params.grid_tiled_shape.n() <= tile.n()) {
      return;
    }

    int thread_idx = threadIdx.x;
    typename Mma::IteratorA iterator_A(params.iterator_A, params.problem_size, params.ptr_A, thread_idx,
                                       cutlass::MatrixCoord(tile.m() * Mma::Shape::kM, tile.k() * Mma::Shape::kK));
    typename Mma::IteratorB iterator_B(params.iterator_B, params.problem_size, params.ptr_B, thread_idx,
                                       cutlass::MatrixCoord(tile.k() * Mma::Shape::kK, tile.n() * Mma::Shape::kN));

    // Warp-uniform warp index (computed by lane 0 and broadcast), as CUTLASS does.
    int warp_idx = cutlass::canonical_warp_idx_sync();
    int lane_idx = threadIdx.x % 32;

    Mma mma(shared_storage.main_loop, thread_idx, warp_idx, lane_idx);
    typename Mma::FragmentC accumulators;
    accumulators.clear();
    mma(params.gemm_k_iterations, accumulators, iterator_A, iterator_B, accumulators,
        params.gemm_k_iterations_per_channel);

    cutlass::MatrixCoord threadblock_offset(tile.m() * Mma::Shape::kM, tile.n() * Mma::Shape::kN);
    Visitor visitor(params.visitor, shared_storage.epilogue.visitor, params.implicit_gemm_problem_size.mn(),
                    thread_idx, threadblock_offset);
    Epilogue epilogue(shared_storage.epilogue.epilogue, thread_idx, warp_idx, lane_idx);
    epilogue(visitor, accumulators);
  }
};

}  // namespace conv
}  // namespace qgemm
