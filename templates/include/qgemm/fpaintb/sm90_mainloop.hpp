// qgemm's consumer loop for CUTLASS's Sm90 mixed-input collective (FpAIntBSm90Spec mainloop="ahead").
//
// CUTLASS 4.2's loop (sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp, mma()) converts k-block
// b + 1 between the WGMMA of k-block b and that of b + 1, behind a wgmma fence each time: each consumer
// warp runs a short dependent chain (shared-memory load, lop3/prmt, scale) per 16-deep k-block and
// can issue the next WGMMA only when it is done. ncu of that loop (128 x 128 tiles, M = 1024) had
// the tensor pipe busy 80% of the time with the issue slots only 44% busy: the warps wait on their
// own chains, not on the tensor pipe.
//
// This loop converts a whole K tile ahead instead. The converted weight lives in two register
// buffers; while the WGMMAs of K tile t (all its k-blocks, one fence, one commit) run from one
// buffer, the warps load and convert tile t + 1 into the other, as independent chains the compiler
// can interleave. Before a buffer is overwritten, warpgroup_wait<1> retires the WGMMAs that read it
// (those of tile t - 1); the shared-memory stage of that tile is released then. The cost is one more
// K tile of converted weight in registers (16 registers a thread for 128-row tiles and 64-deep K
// tiles).
//
// Everything else (TMA producer, pipeline, layouts, the conversion itself through
// MixedInputUtils) is the stock collective's: this type derives from it and replaces mma() and
// mma_tail() only. mma() keeps the stock contract: it releases every stage but the last, which
// mma_tail() releases after the final wait.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/detail/collective/mixed_input_utils.hpp"
#include "cute/tensor.hpp"

namespace qgemm {
namespace fpaintb {

template <class Stock>
struct TileAheadMainloop : Stock {
  using Utils = cutlass::gemm::collective::detail::MixedInputUtils<Stock>;
  using typename Stock::MainloopPipeline;
  using typename Stock::PipelineState;
  using typename Stock::TensorStorage;
  using typename Stock::Params;
  using typename Stock::TiledMma;
  using typename Stock::SmemLayoutA;
  using typename Stock::SmemLayoutB;
  using typename Stock::SwappedSmemCopyAtomA;
  using typename Stock::SwappedStrideA;
  using typename Stock::RealSwappedElementA;

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors,
                          Params const& mainloop_params) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    static_assert(cute::rank(SmemLayoutA{}) == 3 && cute::rank(SmemLayoutB{}) == 3, "Smem layouts must be rank 3.");

    int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;

    // Partitioning: as the stock mma().
    Tensor sA = as_position_independent_swizzle_tensor(
        make_tensor(make_smem_ptr(shared_tensors.smem_A.begin()), SmemLayoutA{}));     // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.begin()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)

    constexpr int MmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto mma_thread_slice = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCsA = mma_thread_slice.partition_A(sA);
    auto mma_warpgroup_slice = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));

    // The two buffers of converted weight, one K tile each (MMA,MMA_M,MMA_K).
    Tensor tCrA_even = mma_thread_slice.partition_fragment_A(sA(_, _, Int<0>{}));
    Tensor tCrA_odd = make_fragment_like(tCrA_even);
    Tensor tCrA_load = [&] {
      if constexpr (not is_layout<SwappedStrideA>::value) {
        return make_fragment_like<RealSwappedElementA>(tCrA_even);
      } else {
        return make_tensor_like<RealSwappedElementA>(tCsA(_, _, _, Int<0>{}));
      }
    }();

    Tensor tCsB = mma_warpgroup_slice.partition_B(sB);        // (MMA,MMA_N,MMA_K,PIPE)
    Tensor tCrB = mma_warpgroup_slice.make_fragment_B(tCsB);  // (MMA,MMA_N,MMA_K,PIPE)

    auto smem_tiled_copy_A = make_tiled_copy_A(SwappedSmemCopyAtomA{}, tiled_mma);
    auto smem_thr_copy_A = smem_tiled_copy_A.get_thread_slice(warp_group_thread_idx);
    Tensor tCrA_copy_view = smem_thr_copy_A.retile_D(tCrA_load);

    auto partitioned_extra_info = Utils::partition_extra_mma_info(mma_thread_slice, shared_tensors);
    auto copy_partitions_extra_info = Utils::retile_extra_mma_info(tiled_mma, partitioned_extra_info, warp_group_thread_idx);

    constexpr int K_BLOCK_MAX = size<2>(tCrA_load);

    // Codes (and, with k-block 0, the tile's scale and zero' rows) of one stage into registers, then
    // all its k-blocks converted into `dst`.
    auto load_and_convert = [&](auto& dst, int stage) {
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < K_BLOCK_MAX; ++k_block) {
        Utils::copy_tensors_MK(smem_tiled_copy_A, tCsA, tCrA_copy_view, partitioned_extra_info,
                               copy_partitions_extra_info, k_block, stage);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < K_BLOCK_MAX; ++k_block) {
        Utils::dequantize_A_kblock(tCrA_load, dst, partitioned_extra_info, k_block);
      }
    };
    // All k-blocks of one stage's WGMMAs behind one fence, as one commit group.
    auto issue = [&](auto& src, int stage) {
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < K_BLOCK_MAX; ++k_block) {
        cute::gemm(tiled_mma, src(_, _, k_block), tCrB(_, _, k_block, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(accum);
    };
    auto wait_full = [&]() {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
    };

    PipelineState smem_pipe_release = smem_pipe_read;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;

    // Tile 0 from the even buffer.
    wait_full();
    load_and_convert(tCrA_even, smem_pipe_read.index());
    issue(tCrA_even, smem_pipe_read.index());
    ++smem_pipe_read;
    --k_tile_count;

    // Two tiles per trip, so that each buffer is a fixed set of registers. Each step converts the
    // next tile while the previous one's WGMMAs run, issues it, then retires the tile before that.
    CUTLASS_PRAGMA_NO_UNROLL
    while (k_tile_count > 0) {
      wait_full();
      load_and_convert(tCrA_odd, smem_pipe_read.index());
      issue(tCrA_odd, smem_pipe_read.index());
      ++smem_pipe_read;
      --k_tile_count;
      warpgroup_wait<1>();  // the even buffer's WGMMAs are done: it and their stage are free
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
      if (k_tile_count == 0) {
        break;
      }
      wait_full();
      load_and_convert(tCrA_even, smem_pipe_read.index());
      issue(tCrA_even, smem_pipe_read.index());
      ++smem_pipe_read;
      --k_tile_count;
      warpgroup_wait<1>();  // the odd buffer's WGMMAs are done
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    }
    warpgroup_fence_operand(accum);
  }

  // The last stage, after all WGMMAs are done (as the stock mma_tail).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    smem_pipe_release.advance(k_tile_count - 1);
    cute::warpgroup_wait<0>();
    pipeline.consumer_release(smem_pipe_release);
  }
};

}  // namespace fpaintb
}  // namespace qgemm
